"""A read-only, integer-indexed view of a cost graph for algorithms that loop over every op.

Placers and the simulator visit each op and edge a few times; doing that through networkx's
dictionaries costs more than the algorithms themselves on graphs of 100k ops. :func:`index_graph`
walks the :class:`~tfplace.core.costgraph.CostGraph` once and returns flat lists and arrays indexed by
op position. It is derived from the cost graph, never edited, and never kept between calls.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, pairwise
from operator import itemgetter
from typing import Any, TypeVar

import networkx as nx
import numpy as np

from tfplace.core.coplacement import coplaced_group_keys
from tfplace.core.costgraph import CostGraphError
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel

__all__ = ["REPLICATED_CONSTANT_ELEMENTS", "IndexedGraph", "gc_paused", "index_graph", "index_tables"]

T = TypeVar("T")


@dataclass(frozen=True)
class IndexedGraph:
    """Flat per-op and per-edge data of a cost graph; op ``i`` is ``names[i]``.

    ``succ[i]`` lists the successors of op ``i`` and ``succ_time[i]``, ``succ_bytes[i]`` and
    ``succ_transfers[i]`` and ``succ_slots[i]`` the matching edges' attributes (likewise ``pred*``);
    ``pred_position[v][k]`` is the position of ``v`` in ``succ[pred[v][k]]``, so both ends reach the
    same edge. ``link`` is the transfer model the ``*_time`` lists were computed with.
    ``output_sizes[i]`` gives the bytes of each output slot, so that a tensor (an op and a slot)
    needed by several consumers on one device is sent there once. ``aliases[i]`` lists
    ``(slot, producer, producer_slot)`` for each output slot of op ``i`` that is the buffer of its
    input ``(producer, producer_slot)`` (the cost graph's ``aliased_outputs``, with op positions);
    ``outputs[i]`` sums the output slots op ``i`` allocates, every slot but those. ``group[i]`` is the
    co-location group id of op ``i``: ops without a group get a group of their own, so every op
    belongs to exactly one group and ``group_members[g]`` lists the ops of group ``g``.
    ``follower[i]`` is true for a gradient op indexed with ``coplace_gradients``: its device follows
    its forward op's, so a placer that decides a group by its first op lets a forward op decide.
    ``small_constant[i]`` is true for a constant TensorFlow copies to each device that consumes it
    (:data:`REPLICATED_CONSTANT_ELEMENTS`): a ``Const`` or ``HostConst`` of at most 16 elements
    (by its recorded output shape; an op without one is not) that no control edge leaves.
    """

    names: list[str]
    index: dict[str, int]
    compute: np.ndarray
    persistent: np.ndarray
    outputs: np.ndarray
    temporary: np.ndarray
    kinds: list[tuple[str, ...] | None]
    output_sizes: list[tuple[int, ...]]
    aliases: list[tuple[tuple[int, int, int], ...]]
    succ: list[list[int]]
    succ_time: list[list[float]]
    succ_bytes: list[list[int]]
    succ_transfers: list[list[int]]
    succ_slots: list[list[tuple[int, ...]]]
    pred: list[list[int]]
    pred_time: list[list[float]]
    pred_position: list[list[int]]
    group: np.ndarray
    group_members: list[list[int]]
    link: TransferModel
    follower: np.ndarray
    small_constant: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def memory(self) -> np.ndarray:
        """``Memory[v_i]`` of every op (:func:`tfplace.core.costgraph.op_memory`)."""
        return self.persistent + self.outputs + self.temporary

    @property
    def resident(self) -> np.ndarray:
        """Memory an op holds for the whole step: persistent state and outputs."""
        return self.persistent + self.outputs

    @cached_property
    def inbound_bytes(self) -> np.ndarray:
        """Bytes of each op's in-edges, summed (computed on first use, then kept)."""
        consumers = np.fromiter(chain.from_iterable(self.succ), dtype=np.int64, count=self.edge_count)
        nbytes = np.fromiter(chain.from_iterable(self.succ_bytes), dtype=np.int64, count=self.edge_count)
        inbound = np.zeros(len(self), dtype=np.int64)
        np.add.at(inbound, consumers, nbytes)
        return inbound

    @cached_property
    def edge_count(self) -> int:
        """Number of edges."""
        return sum(map(len, self.succ))

    def edge_time(self, u: int, position: int, link: TransferModel) -> float:
        """Seconds edge ``u -> succ[u][position]`` takes on ``link``."""
        nbytes = self.succ_bytes[u][position]
        return link.k * nbytes + link.b * self.succ_transfers[u][position] if nbytes else 0.0

    def transfer_time(self, u: int, position: int, devices: DeviceSet, src: int, dst: int) -> float:
        """Seconds edge ``u -> succ[u][position]`` takes from device ``src`` to device ``dst``."""
        link = devices.link(src, dst)
        return 0.0 if link is None else self.edge_time(u, position, link)


def index_graph(
    graph: nx.DiGraph, link: TransferModel | None = None, *, coplace_gradients: bool = False
) -> IndexedGraph:
    """Index the ops of a cost graph by position, in the graph's node order.

    Edge times are the graph's ``transfer_time``; with ``link`` they are recomputed from each edge's
    bytes on that link (placers pass their device set's typical link, so that every time they use
    agrees with the simulator's).

    Every per-op and per-edge attribute is read once into flat lists, then the successor and
    predecessor lists are cut out of them; the predecessors of an op are listed in op order. The
    garbage collector is paused meanwhile: the millions of small lists this creates would otherwise
    make it traverse the whole cost graph again and again.

    With ``coplace_gradients``, each op with a ``gradient_of`` joins its forward op's co-location
    group (:func:`~tfplace.core.coplacement.coplaced_group_keys`); the groups are the only difference.
    """
    with gc_paused():
        return _index(graph, link, coplace_gradients)


def _index(graph: nx.DiGraph, link: TransferModel | None, coplace_gradients: bool) -> IndexedGraph:
    return index_tables(
        list(graph.nodes),
        [attrs for _, attrs in graph.nodes(data=True)],
        [successors for _, successors in graph.adjacency()],
        link if link is not None else _graph_link(graph),
        link is None,
        coplace_gradients,
    )


def index_tables(
    names: list[str],
    ops: list[dict[str, Any]],
    adjacency: list[dict[str, dict[str, Any]]],
    link: TransferModel,
    recorded_times: bool = False,
    coplace_gradients: bool = False,
) -> IndexedGraph:
    """:func:`index_graph` of a cost graph given as tables, not built with networkx: op ``i`` is
    ``names[i]`` with the attributes ``ops[i]`` and the edges ``adjacency[i]`` (successor name ->
    edge attributes, in the graph's edge order); edge times on ``link``, or the recorded
    ``transfer_time`` with ``recorded_times``. Call it with the garbage collector paused."""
    index = {name: i for i, name in enumerate(names)}
    n = len(names)
    compute, persistent, temporary, output_sizes, keys, kinds, aliased, gradient_of, constant = (
        _rows_to_columns(map(_op_row, ops), 9)
    )
    aliases = _aliases(aliased, index, names)
    follower = np.zeros(n, dtype=bool)
    if coplace_gradients:
        forward = list(map(index.get, gradient_of))
        keys = coplaced_group_keys(keys, forward, kinds)
        follower = np.array([f is not None for f in forward], dtype=bool)
    group, group_members = _colocation_groups(keys)
    outdegree = np.fromiter(map(len, adjacency), dtype=np.int64, count=n)
    edges = [attrs for successors in adjacency for attrs in successors.values()]
    dst = np.fromiter(
        map(index.__getitem__, chain.from_iterable(adjacency)), dtype=np.int64, count=len(edges)
    )
    nbytes, slots, control, recorded = _rows_to_columns(map(_edge_row, edges), 4)
    transfer_counts = _transfer_counts(recorded, nbytes, slots, control)
    if recorded_times:
        times = list(map(itemgetter("transfer_time"), edges))
    else:
        size = np.asarray(nbytes, dtype=float)
        times = np.where(size > 0, link.k * size + link.b * transfer_counts, 0.0).tolist()
    transfers = transfer_counts.tolist()
    control_out = np.zeros(n, dtype=bool)
    control_out[np.repeat(np.arange(n), outdegree)[np.asarray(control, dtype=bool)]] = True
    succ_bounds = np.concatenate(([0], np.cumsum(outdegree)))
    src = np.repeat(np.arange(n), outdegree)
    by_dst = np.argsort(dst, kind="stable")  # edges grouped by consumer, producers in op order
    pred_bounds = np.concatenate(([0], np.cumsum(np.bincount(dst, minlength=n))))
    position = np.arange(len(edges)) - succ_bounds[src]
    return IndexedGraph(
        names=names,
        index=index,
        compute=np.array(compute, dtype=float),
        persistent=np.array(persistent, dtype=np.int64),
        outputs=_allocated_outputs(output_sizes, aliases),
        temporary=np.array(temporary, dtype=np.int64),
        kinds=kinds,
        output_sizes=output_sizes,
        aliases=aliases,
        succ=_split(dst.tolist(), succ_bounds),
        succ_time=_split(times, succ_bounds),
        succ_bytes=_split(nbytes, succ_bounds),
        succ_transfers=_split(transfers, succ_bounds),
        succ_slots=_split(slots, succ_bounds),
        pred=_split(src[by_dst].tolist(), pred_bounds),
        pred_time=_split(np.asarray(times, dtype=float)[by_dst].tolist(), pred_bounds),
        pred_position=_split(position[by_dst].tolist(), pred_bounds),
        group=group,
        group_members=group_members,
        link=link,
        follower=follower,
        small_constant=np.array(constant, dtype=bool) & ~control_out,
    )


def _aliases(
    aliased: list[tuple[tuple[int, str, int], ...]], index: dict[str, int], names: list[str]
) -> list[tuple[tuple[int, int, int], ...]]:
    """Each op's aliased outputs with the producer's position instead of its name."""
    result: list[tuple[tuple[int, int, int], ...]] = [()] * len(aliased)
    for op in (i for i, entries in enumerate(aliased) if entries):
        for _, producer, _ in aliased[op]:
            if producer not in index:
                raise CostGraphError(f"op {names[op]!r}: aliased output names unknown input op {producer!r}")
        result[op] = tuple((slot, index[producer], source) for slot, producer, source in aliased[op])
    return result


def _allocated_outputs(
    output_sizes: list[tuple[int, ...]], aliases: list[tuple[tuple[int, int, int], ...]]
) -> np.ndarray:
    """Bytes of the output slots each op allocates: all but its aliased ones."""
    outputs = np.fromiter(map(sum, output_sizes), dtype=np.int64, count=len(output_sizes))
    for op in (i for i, entries in enumerate(aliases) if entries):
        sizes = output_sizes[op]
        outputs[op] -= sum(sizes[slot] for slot, _, _ in aliases[op] if slot < len(sizes))
    return outputs


def _op_row(attrs: dict[str, Any]) -> tuple[Any, ...]:
    """The attributes of one op that indexing reads (``aliased_outputs``, ``gradient_of``,
    ``op_type`` and ``output_shapes`` are optional), the last whether it is a small constant."""
    return (
        attrs["compute_time"],
        attrs["persistent_bytes"],
        attrs["temporary_bytes"],
        attrs["output_sizes"],
        attrs["colocation_group"],
        attrs["device_kinds"],
        attrs.get("aliased_outputs", ()),
        attrs.get("gradient_of"),
        _is_small_constant(attrs.get("op_type", ""), attrs.get("output_shapes")),
    )


REPLICATED_CONSTANT_ELEMENTS = 16
"""The most elements a constant TensorFlow replicates has: its ``ReplicateConstantsPass`` (run on
every placed graph before it is partitioned) replaces a CPU constant of at most 16 elements whose
consumers are on several devices, and from which no control edge leaves, by one copy on each of
those devices (on CPUs, the consumer's own device: its default ``enable_aggressive_constant_replication``),
each copy keeping every control input of the original."""


def _is_small_constant(op_type: str, shapes: Sequence[Sequence[int]] | None) -> bool:
    """Whether an op is a constant of at most :data:`REPLICATED_CONSTANT_ELEMENTS` known elements."""
    if (
        op_type not in ("Const", "HostConst")
        or not shapes
        or len(shapes) != 1
        or min(shapes[0], default=0) < 0
    ):
        return False
    return math.prod(shapes[0]) <= REPLICATED_CONSTANT_ELEMENTS


def _edge_row(attrs: dict[str, Any]) -> tuple[Any, ...]:
    """The attributes of one edge that indexing reads (``transfers`` is optional, ``-1`` when absent)."""
    return attrs["bytes"], attrs["slots"], attrs["control"], attrs.get("transfers", -1)


def _rows_to_columns(rows: Iterable[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """The columns of ``rows`` (each ``width`` long); the records behind them are scattered in
    memory, so reading each once, all of its attributes at a time, costs less than one pass per key."""
    columns = list(map(list, zip(*rows)))
    return columns or [[] for _ in range(width)]


def _transfer_counts(
    recorded: list[int], nbytes: list[int], slots: list[tuple[int, ...]], control: list[bool]
) -> np.ndarray:
    """:func:`~tfplace.core.costgraph.edge_transfers` of every edge at once: ``0`` for a control edge
    or one without bytes, else the ``recorded`` transfers (``-1``: none) or one per slot (at least one)."""
    count = len(nbytes)
    recorded_counts = np.fromiter(recorded, dtype=np.int64, count=count)
    per_slot = np.maximum(1, np.fromiter(map(len, slots), dtype=np.int64, count=count))
    carries = (np.fromiter(nbytes, dtype=np.int64, count=count) > 0) & ~np.array(control, dtype=bool)
    return np.where(carries, np.where(recorded_counts >= 0, recorded_counts, per_slot), 0)


def _colocation_groups(keys: list[str | None]) -> tuple[np.ndarray, list[list[int]]]:
    """Group id of each op (numbered by first appearance; an op without a group gets its own)
    and the ops of each group, in op order."""
    first: dict[str, int] = {}
    leader = np.array(
        [i if key is None else first.setdefault(key, i) for i, key in enumerate(keys)], dtype=np.int64
    )
    leads = leader == np.arange(len(keys))
    group = (np.cumsum(leads) - 1)[leader]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(group, minlength=int(leads.sum())))))
    return group, _split(np.argsort(group, kind="stable").tolist(), bounds)


def _split(values: list[T], bounds: np.ndarray) -> list[list[T]]:
    """``values[bounds[i]:bounds[i + 1]]`` for every ``i``."""
    return [values[a:b] for a, b in pairwise(bounds.tolist())]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector inside the ``with`` block.

    Indexing and placing allocate millions of small lists and tuples and no reference cycles. Each
    allocation burst would otherwise trigger full collections, each traversing every object of the
    (much larger) cost graph: on 200k ops those took more time than the algorithms themselves.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _graph_link(graph: nx.DiGraph) -> TransferModel:
    spec = graph.graph.get("transfer_model")
    return TransferModel.from_dict(spec) if spec else TransferModel.default()
