"""Run a split plan: expand it into a cost graph of pieces, then simulate that with the simulator.

:func:`expand_plan` turns every op of a :class:`~tfplace.split.plan.SplitPlan` into nodes of a new
:class:`~tfplace.core.costgraph.CostGraph`, each with one device:

* an op of degree 1 stays itself, and so does a split fed tensor (:data:`~tfplace.split.rules.FED_WHOLE`),
  but on the host: the user feeds it whole into the memory of the first piece's host
  (:func:`~tfplace.split.feeds.feed_host`, as the TensorFlow rewrite does), where a ``Slice`` per
  piece cuts it and each device receives only its slice, over its own link to the host; an op run
  as replicas becomes one copy per device
  (``op#r0``, ``op#r1``, ...); an op split along a dimension becomes one piece per device
  (``op#p0``, ...) costing what :func:`tfplace.split.costs.piece_time` says, its output slots
  :func:`~tfplace.split.rules.sharded` (the piece's share of the bytes) or partial (all of them);
* each tensor a piece reads arrives in the layout its rule asks for (Tofu section 4, partition-n-reduce):
  - a piece that reads the slice a producer's piece wrote on the same device takes it
    straight on: consecutive ops split alike pass pieces on with no join in between;
  - a slice of a whole (or replicated) tensor, an overlap of two different slicings, or a halo (one
    row of each neighbouring slice, :data:`HALO_ROWS`: 3x3 windows) is cut by a ``Slice`` node on
    the sender's device and sent as its own tensor;
  - a whole tensor made of slices is gathered: every slice is sent to the reader, where a
    ``ConcatV2`` joins them (as it joins a range read from several pieces, or a piece and its
    halos), once per device and range;
  - a piece that reads a partial sum (a linear op on partial sums) takes the producer's piece of
    the same index straight on when both ops are on the same devices;
  - partial results are summed: by an ``AddN`` on the reader's device, or, when the readers are
    replicas on exactly the partial pieces' devices (weight gradients under data parallelism), by an
    all-reduce of ``AllReduce`` nodes: a reduce-scatter (each device sums one ``1/k`` slice of
    everyone's pieces) and an all-gather, so each device sends ``2 (k - 1) / k`` of the tensor, as a
    ring all-reduce does, over the simulator's links;
* the slices, joins and sums cost what copies cost on the graph's device
  (:func:`tfplace.split.copy_costs.copy_cost`: a fixed cost per op and a cost per byte, fitted on
  the profiled graph's own copies);
* control dependencies join every node of the producer to every node of the consumer, except that
  replicas on the same devices are ordered device by device (each replica's variable update before
  that replica's read, as MirroredStrategy's replicas run); a shape op
  (:data:`~tfplace.split.rules.SHAPE_OPS`) waits for its input without receiving its bytes, and a
  piece reads the shape input of its op (:data:`~tfplace.split.rules.SHAPE_INPUT`: an input
  gradient's sizes, a reshape's shape) as a constant of its own device, with no edge at all.

:func:`simulate_plan` runs the expanded graph through :func:`tfplace.simulator.simulate`, so the
step time, per-device peak memory, bytes moved, Chrome trace and timeline all show the pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np

from tfplace.core.costgraph import CostGraph, edge_time, merge_dependencies, op_attributes
from tfplace.core.indexed import IndexedGraph, gc_paused, index_tables
from tfplace.core.transfer import TransferModel
from tfplace.simulator import SimulationResult, simulate
from tfplace.split.buckets import AllReduce, fuse
from tfplace.split.copy_costs import copy_cost
from tfplace.split.costs import piece_time, scaling_of
from tfplace.split.feeds import feed_host
from tfplace.split.plan import OpSplit, SplitPlan, rule_of
from tfplace.split.rules import FED_WHOLE, PARTIAL, REPLICA, REPLICATED, SHAPE_INPUT, SHAPE_OPS, Layout

__all__ = ["HALO_ROWS", "ExpandedPlan", "expand_plan", "simulate_plan"]

HALO_ROWS = 1
"""Rows a spatial piece reads from each neighbouring slice: the overlap of a 3x3 window at stride 1."""


@dataclass(frozen=True)
class ExpandedPlan:
    """The pieces: their nodes (``nodes``, name -> the attributes of
    :func:`~tfplace.core.costgraph.op_attributes`, in order) and edges (``edges``, ``(src, dst)`` ->
    attributes but ``transfer_time``), each node's device, the nodes each op of the plan became and
    the planned graph's attributes (``graph_attrs``). :attr:`graph` is their cost graph, built when
    first read; simulating needs only :meth:`indexed`, which networkx need not build."""

    nodes: dict[str, dict[str, Any]]
    edges: dict[tuple[str, str], dict[str, Any]]
    devices: dict[str, str]
    nodes_of: dict[str, tuple[str, ...]]
    graph_attrs: dict[str, Any]

    @cached_property
    def graph(self) -> CostGraph:
        """The cost graph of the pieces (``nodes`` with ``edges`` added, as
        :meth:`~tfplace.core.costgraph.CostGraph.add_dependencies` adds them)."""
        graph = CostGraph(**self.graph_attrs)
        graph.add_nodes_from(self.nodes.items())
        model = graph.transfer_model
        graph.add_edges_from(
            (src, dst, {**edge, "transfer_time": edge_time(edge, model)})
            for (src, dst), edge in self.edges.items()
        )
        return graph

    def indexed(self, link: TransferModel) -> IndexedGraph:
        """:func:`~tfplace.core.indexed.index_graph` of :attr:`graph` on ``link``, from the tables."""
        successors: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in self.nodes}
        for (src, dst), edge in self.edges.items():
            successors[src][dst] = edge
        return index_tables(list(successors), list(self.nodes.values()), list(successors.values()), link)


@dataclass(frozen=True, eq=False)  # pieces are told apart by identity: list.index is then fast
class _Piece:
    node: str
    device: str
    lo: float
    hi: float


def expand_plan(graph: nx.DiGraph, plan: SplitPlan) -> ExpandedPlan:
    """The cost graph of ``plan``'s pieces on ``graph`` (module docstring); validates the plan first."""
    plan.validate(graph)
    return _Expander(graph, plan).run()


def simulate_plan(
    graph: nx.DiGraph, plan: SplitPlan, *, speeds: Mapping[str, float] | None = None, **options: Any
) -> tuple[SimulationResult, ExpandedPlan]:
    """Simulate one step of ``plan`` (``options`` go to :func:`tfplace.simulator.simulate`) and record
    its step time, peak memory per device and bytes moved on the plan.

    ``speeds`` gives devices of different speeds (BBGraP's setting): the graph's times are those of
    a device of speed 1, and every node on a device of speed ``s`` takes ``1/s`` of its time there
    (devices not named have speed 1).
    """
    with gc_paused():  # the pieces are millions of small objects and no reference cycles
        expanded = expand_plan(graph, plan)
        if speeds:
            for node, device in expanded.devices.items():
                speed = speeds.get(device, 1.0)
                if speed <= 0:
                    raise ValueError(f"device {device!r}: speed must be positive, got {speed}")
                expanded.nodes[node]["compute_time"] /= speed
        indexed = expanded.indexed(plan.devices.typical_link)
        number = {name: plan.devices.index(name) for name in set(expanded.devices.values())}
        placed = np.array([number[expanded.devices[name]] for name in indexed.names], dtype=np.int64)
        result = simulate(indexed, placed, plan.devices, **options)
    names = [d.name for d in plan.devices.all_devices]
    plan.step_time = float(result.makespan)
    plan.peak_memory = {names[d]: int(p) for d, p in enumerate(result.peak_memory) if p}
    plan.bytes_moved = int(result.bytes_moved)
    return result, expanded


_PIECE_KEYS = (
    "compute_time",
    "persistent_bytes",
    "output_sizes",
    "temporary_bytes",
    "op_type",
    "flops",
    "device_kinds",
)


def _costs_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What an op's pieces keep of its attributes (before their own share of the costs)."""
    return {**{key: attrs[key] for key in _PIECE_KEYS}, "attrs": attrs.get("attrs")}


class _Expander:
    def __init__(self, graph: nx.DiGraph, plan: SplitPlan) -> None:
        self.graph = graph
        self.ops: dict[str, dict[str, Any]] = dict(graph.nodes(data=True))  # faster than graph.nodes
        self.plan = plan
        self.devices: dict[str, str] = {}
        self.pieces: dict[str, list[_Piece]] = {}
        self.made: dict[tuple[Any, ...], str] = {}
        self.rules = {op: rule_of(graph, op, split) for op, split in plan.splits.items()}
        self.all_reduces: dict[tuple[str, int], tuple[int, set[str]]] = {}
        self.copy = copy_cost(graph)
        self.scaling = scaling_of(graph.graph)
        self.dependencies: list[tuple[str, str, tuple[int, ...], int | None, bool]] = []
        self.edges: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}  # each node's attributes, by name, in order

    def run(self) -> ExpandedPlan:
        for op in self.ops:
            self._add_op(op, self.plan.splits[op])
        for u, v, edge in self.graph.edges(data=True):
            self._connect(u, v, edge)
        self._wire_all_reduces()
        nodes = self.nodes
        self.edges = merge_dependencies(self.dependencies, lambda op: nodes[op]["output_sizes"])
        for op in self.ops:
            self._keep_aliases(op)
        nodes_of = {op: tuple(piece.node for piece in pieces) for op, pieces in self.pieces.items()}
        return ExpandedPlan(self.nodes, self.edges, self.devices, nodes_of, dict(self.graph.graph))

    # -- nodes -------------------------------------------------------------------------------
    def _add_node(self, name: str, device: str, **attrs: Any) -> None:
        self.nodes[name] = op_attributes(**attrs)
        self.devices[name] = device

    def _add_piece(self, name: str, device: str, like: str | None, **attrs: Any) -> None:
        """:meth:`_add_node`; or, when ``like`` names a piece of the same op already added, a copy of
        its attributes (normalized by :func:`~tfplace.core.costgraph.op_attributes`) with ``attrs``
        (normalized alike) replaced: the fast path for an op's other pieces."""
        if like is None:
            self._add_node(name, device, **attrs)
            return
        copied = {**self.nodes[like], **attrs}
        copied["attrs"] = None if copied["attrs"] is None else dict(copied["attrs"])
        self.nodes[name] = copied
        self.devices[name] = device

    def _add_op(self, op: str, split: OpSplit) -> None:
        attrs = self.ops[op]
        if attrs["op_type"] in FED_WHOLE and split.degree > 1:  # fed once, on the host; readers take slices
            self.rules[op], split = None, OpSplit.whole(feed_host(self.plan.devices, split.devices[0]))
        rule = self.rules[op]
        pieces: list[_Piece] = []
        if split.degree == 1 or rule is None:
            suffix = "#r" if split.degree > 1 else None
            for i, device in enumerate(split.devices):
                name = op if suffix is None else f"{op}{suffix}{i}"
                like = pieces[0].node if pieces else None
                self._add_piece(name, device, like, **({} if like else _costs_of(attrs)))
                pieces.append(_Piece(name, device, 0.0, 1.0))
            self.pieces[op] = pieces
            return
        whole = [rule.write(slot) in (PARTIAL, REPLICATED) for slot in range(len(attrs["output_sizes"]))]
        batch, block = self.scaling
        lo = 0.0
        for i, (device, share) in enumerate(zip(split.devices, split.shares)):
            name = f"{op}#p{i}"
            piece = {
                "compute_time": float(piece_time(attrs, str(split.dimension), share, batch, block)),
                "persistent_bytes": round(attrs["persistent_bytes"] * share),
                "temporary_bytes": round(attrs["temporary_bytes"] * share),
                "flops": float(attrs["flops"] * share),
                "output_sizes": tuple(
                    int(size) if whole[slot] else round(size * share)
                    for slot, size in enumerate(attrs["output_sizes"])
                ),
            }
            if pieces:
                self._add_piece(name, device, pieces[0].node, **piece)
            else:
                self._add_piece(name, device, None, **{**_costs_of(attrs), **piece})
            pieces.append(_Piece(name, device, lo, lo + share))
            lo += share
        self.pieces[op] = pieces

    def _helper(
        self, key: tuple[Any, ...], name: str, device: str, op_type: str, nbytes: int
    ) -> tuple[str, bool]:
        """A Slice/AddN/AllReduce node made once per ``key``; ``True`` when it is new."""
        if key in self.made:
            return self.made[key], False
        self._add_node(
            name,
            device,
            op_type=op_type,
            compute_time=self.copy.seconds(nbytes),
            output_sizes=(nbytes,),
        )
        self.made[key] = name
        return name, True

    # -- edges -------------------------------------------------------------------------------
    def _depend(
        self,
        src: str,
        dst: str,
        *,
        slots: tuple[int, ...] = (),
        nbytes: int | None = None,
        control: bool = False,
    ) -> None:
        """An edge of the pieces, merged with all the others at the end
        (:func:`~tfplace.core.costgraph.merge_dependencies`)."""
        self.dependencies.append((src, dst, slots, nbytes, control))

    def _connect(self, u: str, v: str, edge: Mapping[str, Any]) -> None:
        if self.ops[v]["op_type"] in SHAPE_OPS:
            for dst in self.pieces[v]:
                local = [p for p in self.pieces[u] if p.device == dst.device][:1] or self.pieces[u][:1]
                self._depend(local[0].node, dst.node, control=True)
            return
        if edge["control"] or not edge["slots"]:
            by_device = (
                self.plan.splits[u].dimension == self.plan.splits[v].dimension == REPLICA
                and self.plan.splits[u].devices == self.plan.splits[v].devices
            )
            for src in self.pieces[u]:
                for dst in self.pieces[v]:
                    if by_device and src.device != dst.device:
                        continue  # each replica orders its own copy (an update before a read)
                    if edge["control"] or not edge["bytes"]:
                        self._depend(src.node, dst.node, control=True)
                    else:
                        self._depend(src.node, dst.node, nbytes=edge["bytes"])
            return
        split = self.plan.splits[v]
        rule = self.rules[v]
        inputs = self.ops[v].get("inputs") or ()
        shape_input = SHAPE_INPUT.get(self.ops[v]["op_type"]) if rule is not None else None
        for slot in edge["slots"]:
            positions = [i for i, source in enumerate(inputs) if source == (u, slot)]
            if positions and set(positions) == {shape_input}:
                continue  # each piece reads its own shape, a constant on its device: nothing moves
            if rule is None:
                layouts = {REPLICATED}
            elif positions:
                layouts = {rule.read(i) for i in positions}
            elif len(rule.reads) == 1:
                layouts = {rule.reads[0]}  # every input alike: no need to know which one this is
            else:
                raise ValueError(
                    f"op {v!r} is split but the graph does not record which of its inputs {u!r} is"
                )
            for piece in self.pieces[v]:
                for layout in layouts:
                    self._deliver(u, slot, piece, layout, replicas=split.dimension == REPLICA)

    def _deliver(self, u: str, slot: int, target: _Piece, layout: Layout, replicas: bool) -> None:
        sources = self.pieces[u]
        rule = self.rules[u]
        written = rule.write(slot) if rule is not None else REPLICATED
        summed = written == PARTIAL  # the layouts are compared once each: dataclass equality is slow
        if layout == PARTIAL:
            index = self.pieces[self._op_of(target.node)].index(target)
            if summed and self.plan.splits[u].devices == self.plan.splits[self._op_of(target.node)].devices:
                self._depend(sources[index].node, target.node, slots=(slot,))
                return
            layout = REPLICATED  # a summand: the whole tensor for the first piece, zeros for the others
            if index > 0:
                return
        if summed:
            sources = [self._summed(u, slot, target, replicas)]
            slot, written = 0, REPLICATED
        from_whole = written == REPLICATED
        if from_whole:
            sources = [s for s in sources if s.device == target.device][:1] or sources[:1]
        size = self._size(sources[0].node if from_whole else u, slot)
        if layout == REPLICATED:
            whole = [(s.node, slot, self._size(s.node, slot)) for s in sources]
            self._join(u, slot, target, layout, whole)
            return
        arrivals: list[tuple[str, int, int]] = []
        for source in sources:
            if from_whole:
                overlap = target.hi - target.lo
            elif written.axis == layout.axis:
                overlap = max(0.0, min(source.hi, target.hi) - max(source.lo, target.lo))
            else:
                overlap = (source.hi - source.lo) * (target.hi - target.lo)
            whole_piece = not from_whole and abs(overlap - (source.hi - source.lo)) < 1e-9
            if overlap > 0 and (source.device == target.device or whole_piece):
                arrivals.append((source.node, slot, round(size * overlap)))
            elif overlap > 0:
                halo_rows = (
                    2 * self._halo_bytes(u, slot, layout) if layout.kind == "halo" and from_whole else 0
                )
                nbytes = round(size * overlap) + halo_rows
                what = (layout.axis, target.lo, target.hi)
                arrivals.append((self._send_slice(source, slot, target, nbytes, what), 0, nbytes))
            if layout.kind == "halo" and written.kind == "sharded" and written.axis == layout.axis:
                adjacent = abs(source.hi - target.lo) < 1e-9 or abs(source.lo - target.hi) < 1e-9
                if adjacent and source.device != target.device:
                    nbytes = self._halo_bytes(u, slot, layout)
                    halo = self._send_slice(source, slot, target, nbytes, ("halo", target.lo))
                    arrivals.append((halo, 0, nbytes))
        self._join(u, slot, target, layout, arrivals)

    def _join(
        self, u: str, slot: int, target: _Piece, layout: Layout, arrivals: list[tuple[str, int, int]]
    ) -> None:
        """Feed ``target`` the parts ``(node, slot, bytes)`` of ``u``'s output ``slot`` it reads:
        straight on when there is one, else through a ``ConcatV2`` on its device (the rewrite joins
        them so), made once per device and range read."""
        if len(arrivals) == 1:
            node, part_slot, _ = arrivals[0]
            self._depend(node, target.node, slots=(part_slot,))
            return
        what = (str(layout),) if layout == REPLICATED else (str(layout), target.lo, target.hi)
        name, new = self._helper(
            ("join", u, slot, target.device, *what),
            f"{u}:{slot}/concat{len(self.made)}",
            target.device,
            "ConcatV2",
            sum(nbytes for *_, nbytes in arrivals),
        )
        if new:
            for node, part_slot, _ in arrivals:
                self._depend(node, name, slots=(part_slot,))
        self._depend(name, target.node, slots=(0,))

    def _send_slice(
        self, source: _Piece, slot: int, target: _Piece, nbytes: int, what: tuple[Any, ...]
    ) -> str:
        """A ``Slice`` of ``source``'s output ``slot`` on its device, for ``target``'s device."""
        key = ("slice", source.node, slot, target.device, *what)
        name, _ = self._helper(
            key, f"{source.node}:{slot}/slice{len(self.made)}", source.device, "Slice", nbytes
        )
        self._depend(source.node, name, slots=(slot,))
        return name

    def _summed(self, u: str, slot: int, target: _Piece, replicas: bool) -> _Piece:
        """The sum of ``u``'s partial slot ``slot`` on ``target``'s device: an all-reduce when the
        readers are replicas on the partial pieces' devices, else an ``AddN`` there."""
        pieces = self.pieces[u]
        size = self._size(u, slot)
        devices = [p.device for p in pieces]
        reader_devices = {p.device for p in self.pieces.get(self._op_of(target.node), [])}
        if (
            replicas
            and reader_devices == set(devices)
            and target.device in devices
            and len(set(devices)) == len(devices)
        ):
            return self._all_reduced(u, slot, size, self._op_of(target.node))[devices.index(target.device)]
        name, new = self._helper(
            ("sum", u, slot, target.device), f"{u}:{slot}/sum@{target.device}", target.device, "AddN", size
        )
        if new:
            for piece in pieces:
                self._depend(piece.node, name, slots=(slot,))
        return _Piece(name, target.device, 0.0, 1.0)

    def _all_reduced(self, u: str, slot: int, size: int, reader: str) -> list[_Piece]:
        """Each device's all-reduced sum of ``u``'s partial slot: the nodes are made now, their
        reduce-scatter once every tensor is known (:meth:`_wire_all_reduces`, in buckets)."""
        pieces = self.pieces[u]
        key = (u, slot)
        if key not in self.all_reduces:
            for i, owner in enumerate(pieces):
                self._helper(
                    ("allreduce", u, slot, i), f"{u}:{slot}/allreduce/{i}", owner.device, "AllReduce", size
                )
            self.all_reduces[key] = (size, set())
        self.all_reduces[key][1].add(reader)
        return [
            _Piece(self.made[("allreduce", u, slot, i)], p.device, 0.0, 1.0) for i, p in enumerate(pieces)
        ]

    def _wire_all_reduces(self) -> None:
        """Reduce-scatter and all-gather every bucket of all-reduced tensors
        (:func:`tfplace.split.buckets.fuse`): device ``i`` sums slice ``i`` of the bucket, one message
        from every other device, then gathers the other devices' sums. A bucket of several tensors
        gathers into one buffer per device, of which each tensor's result is a view."""
        requests = [
            AllReduce(u, slot, size, tuple(p.device for p in self.pieces[u]), frozenset(readers))
            for (u, slot), (size, readers) in self.all_reduces.items()
        ]
        for number, bucket in enumerate(fuse(self.graph, requests, self.plan.bucket_bytes)):
            devices = bucket[0].devices
            k = len(devices)
            total = sum(request.nbytes for request in bucket)
            part = -(-total // k)
            prefix = f"{bucket[0].op}:{bucket[0].slot}" if len(bucket) == 1 else f"bucket{number}"
            reduced = []
            for i, owner in enumerate(devices):
                name, _ = self._helper(
                    ("reduce", prefix, i), f"{prefix}/allreduce/reduce{i}", owner, "AllReduce", part
                )
                for j, device in enumerate(devices):
                    sender = name
                    if j != i:
                        sender, _ = self._helper(
                            ("reduce-slice", prefix, i, j),
                            f"{prefix}/allreduce/slice{i}@{j}",
                            device,
                            "Slice",
                            part,
                        )
                        self._depend(sender, name, slots=(0,))
                    for request in bucket:
                        piece = self.pieces[request.op][j]
                        self._depend(piece.node, sender, slots=(request.slot,))
                reduced.append(name)
            for i, owner in enumerate(devices):
                results = [self.made[("allreduce", r.op, r.slot, i)] for r in bucket]
                gathered = results[0]
                if len(bucket) > 1:
                    gathered, _ = self._helper(
                        ("gather", prefix, i), f"{prefix}/allreduce/{i}", owner, "AllReduce", total
                    )
                    for result in results:
                        self._depend(gathered, result, slots=(0,))
                        self.nodes[result].update(compute_time=0.0, aliased_outputs=((0, gathered, 0),))
                for part_node in reduced:
                    self._depend(part_node, gathered, slots=(0,))

    def _size(self, node: str, slot: int) -> int:
        attrs = self.nodes.get(node)
        sizes = (attrs if attrs is not None else self.ops[node])["output_sizes"]
        return int(sizes[slot]) if slot < len(sizes) else 0

    def _halo_bytes(self, u: str, slot: int, layout: Layout) -> int:
        """Bytes of :data:`HALO_ROWS` rows of ``u``'s output along the halo's axis (one per cent of the
        tensor when its shape is not recorded)."""
        shapes = self.ops[u].get("output_shapes")
        size = self._size(u, slot)
        if shapes and slot < len(shapes) and layout.axis is not None:
            rows = shapes[slot][layout.axis] if -len(shapes[slot]) <= layout.axis < len(shapes[slot]) else -1
            if rows > 0:
                return round(size * HALO_ROWS / rows)
        return round(size / 100)

    def _op_of(self, node: str) -> str:
        return node.rsplit("#", 1)[0] if node not in self.ops else node

    def _keep_aliases(self, op: str) -> None:
        """Keep an aliased output of a piece when the aliased input arrives as a local slot of the
        producer's piece (a forwarded buffer); otherwise the piece allocates the output."""
        aliases = self.ops[op].get("aliased_outputs", ())
        if not aliases:
            return
        for piece in self.pieces[op]:
            kept = []
            for slot, producer, producer_slot in aliases:
                local = [p.node for p in self.pieces.get(producer, []) if p.device == piece.device]
                edge = self.edges.get((local[0], piece.node)) if local else None
                if edge is not None and producer_slot in edge["slots"]:
                    kept.append((slot, local[0], producer_slot))
            self.nodes[piece.node]["aliased_outputs"] = tuple(sorted(kept))
