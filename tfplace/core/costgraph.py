"""The cost graph: the one data model shared by the estimator, every placer and the simulator.

A :class:`CostGraph` is a :class:`networkx.DiGraph` whose nodes are operations and whose edges are
the dependencies between them (Celeritas section 4.1: ``G(V, E)``). It needs no TensorFlow, so a
graph profiled once can be saved, reloaded and placed many times, and graphs profiled by other tools
can be placed too.

Units are seconds and bytes throughout.

Node attributes (one node per operation, keyed by the op's name)
    ``compute_time`` (float)
        Seconds one execution of the op takes on the reference device (``w_i`` in Eq. 1-3).
    ``persistent_bytes`` (int)
        Memory held for the whole run: variables, optimizer slots, other state.
    ``output_sizes`` (tuple of int)
        Bytes of each output tensor, indexed by output slot: what a transfer of the tensor moves.
    ``aliased_outputs`` (tuple of (int, str, int), optional, default ``()``)
        ``(slot, producer, producer_slot)`` for each output slot that is no new buffer but the
        buffer of the op's input ``producer:producer_slot`` (TensorFlow forwards buffers: an
        ``Identity`` or ``Reshape`` always, an element-wise op that is its input's last user, a
        ``Split`` returning views). The op allocates nothing for such a slot; the input's buffer
        lives on until the slot's last consumer is done with it. A tensor sent to another device
        is still a new buffer there. The edge ``producer -> op`` must carry ``producer_slot``.
    ``temporary_bytes`` (int)
        Scratch memory held only while the op runs.
    ``op_type`` (str)
        The op's type, ``"Conv2D"`` for example.
    ``colocation_group`` (str or None)
        Ops that share a group must run on one device (TensorFlow's ``_class`` constraints,
        merged transitively). ``None`` means the op is unconstrained.
    ``device_kinds`` (tuple of str or None)
        Device types that have a kernel for the op, for example ``("CPU",)``. ``None`` means any.
    ``flops`` (float)
        Floating-point operations of one execution, ``0`` when unknown (used by device models that
        turn measured times into another device's).
    ``attrs`` (dict or None, optional, schema version 3)
        The op's attributes that decide how it splits (``data_format``, ``transpose_a``,
        ``reduces_axis0``, ...: :mod:`tfplace.split.rules`); ``None`` when not recorded.
    ``output_shapes`` (tuple of tuple of int, or None, optional, version 3)
        Each output slot's shape, ``-1`` for a dimension unknown statically (the batch);
        ``None`` when not recorded.
    ``inputs`` (tuple of (str, int), or None, optional, version 3)
        ``(producer, producer_slot)`` of each data input in the op's input order (what input ``i``
        of a partition rule is); ``None`` when not recorded.
    ``batch_costs`` (dict or None, optional, version 3)
        The op's costs as functions of the batch size (the regression's coefficients,
        :func:`tfplace.estimator.regression.OpCostRegression.batch_costs`); ``None`` when not fitted.
    ``kernel_time`` (float or None, optional, version 4)
        Seconds of ``compute_time`` the op's kernels ran, without the executor's handling of the
        node (preparing inputs, passing outputs on): what TensorFlow's CPU executor times to learn
        which kernels are cheap enough to run inline (:func:`tfplace.core.device_model.inline_ops`),
        over repeated runs the least its running estimate of them gets to
        (:func:`tfplace.core.device_model.least_cost_estimate`); ``None`` when not measured
        (``compute_time`` stands for it).
    ``gradient_of`` (str or None, optional, default ``None``)
        The forward op whose gradient this op computes (TensorFlow's ``gradients/<op>_grad/``
        scopes, :mod:`tfplace.core.gradients`); placers keep the two on one device unless told not to.
        Version-1 files get it from the op names when loaded. A forward op outside the graph (a
        step's subgraph keeps its ops' relation) relates nothing.

Edge attributes (one edge per producer-consumer pair; several tensors between a pair are merged)
    ``bytes`` (int)
        Bytes the consumer needs from the producer; ``0`` for a pure control dependency.
    ``slots`` (tuple of int)
        The producer's output slots the edge carries, ``()`` for a control dependency. Two edges
        that carry the same slot carry the same tensor, which a device receives once.
    ``transfer_time`` (float)
        Seconds the transfer takes between two devices under the graph's transfer model
        (``c_ij`` in Eq. 1-9); ``0`` for a control dependency.
    ``control`` (bool)
        ``True`` when the edge is a control dependency only.

Graph attributes (``graph.graph``)
    ``name``, ``batch_size``, ``transfer_model`` (``{"k": s/byte, "b": s}``), ``channel_block``
    (:data:`CHANNEL_BLOCK`), ``untraced_step`` (:data:`UNTRACED_STEP`) and any metadata the
    producer of the graph wants to keep (``source``, ``fingerprint``, ...).

Memory
    The static model every placer shares: a device holds the resident bytes of its ops for the
    whole step (:func:`resident_memory`: persistent bytes and the outputs an op allocates,
    :func:`allocated_output_bytes`) plus the largest temporary bytes among them, since an op's
    scratch space is freed when it ends. :func:`op_memory` is one op's ``Memory[v_i]`` (resident
    plus temporary, what a cluster's cap counts); :func:`graph_memory` is what one device needs to
    hold the whole step.

The JSON form (:func:`save_json` / :func:`load_json`) is documented in ``docs/costgraph_schema.md``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import networkx as nx

from tfplace.core.gradients import gradient_relation
from tfplace.core.transfer import TransferModel

__all__ = [
    "CHANNEL_BLOCK",
    "JSON_FORMAT",
    "JSON_VERSION",
    "READABLE_VERSIONS",
    "UNTRACED_STEP",
    "AliasedOutput",
    "CostGraph",
    "CostGraphError",
    "allocated_bytes",
    "allocated_output_bytes",
    "atomic_write_bytes",
    "atomic_write_text",
    "ccr",
    "check_acyclic",
    "edge_time",
    "edge_transfers",
    "find_cycle_ops",
    "gradient_pairs",
    "graph_memory",
    "load_json",
    "merge_dependencies",
    "op_attributes",
    "op_memory",
    "output_bytes",
    "resident_memory",
    "save_json",
    "untraced_steps",
]

CHANNEL_BLOCK = "channel_block"
"""Graph attribute: how many channels the profiling device's kernels compute together (a CPU's
float32 SIMD lanes); a split's channel pieces cost whole blocks (:mod:`tfplace.split.costs`). Absent
on graphs whose times are another device's (:func:`tfplace.core.device_model.convert_graph`)."""
UNTRACED_STEP = "untraced_step"
"""Graph attribute: the whole step as the profiler timed it untraced, beside its traced steps, on
one device of each CPU device kind it ran on (:data:`tfplace.core.device_model.CPU_KINDS`):
``{kind: seconds}``, ``"loopback"`` for the profiler's worker process, ``"virtual"`` for the
user's process (:func:`untraced_steps` reads it). What the step costs beyond its ops' traced
times is read from it (:meth:`tfplace.core.device_model.CpuCalibration.op_overhead`). Absent where
no untraced step was timed, and on graphs whose times are another device's."""
JSON_FORMAT = "tfplace.costgraph"
JSON_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
"""Versions :func:`load_json` reads: 2 adds ``gradient_of`` (version 1 gets it from the op names on
load), 3 the split fields, 4 ``kernel_time``."""

_NODE_DEFAULTS: dict[str, Any] = {
    "compute_time": 0.0,
    "persistent_bytes": 0,
    "output_sizes": (),
    "temporary_bytes": 0,
    "op_type": "",
    "colocation_group": None,
    "device_kinds": None,
    "flops": 0.0,
}
_OPTIONAL_NODE_DEFAULTS: dict[str, Any] = {
    "aliased_outputs": (),
    "gradient_of": None,
    "attrs": None,
    "output_shapes": None,
    "inputs": None,
    "batch_costs": None,
    "kernel_time": None,
}
"""Node attributes added after version 1 first shipped: a node (or a JSON op) may lack them."""
_NODE_KEYS = {**_NODE_DEFAULTS, **_OPTIONAL_NODE_DEFAULTS}
_WRITTEN_WHEN_SET = ("attrs", "output_shapes", "inputs", "batch_costs", "kernel_time")
"""Version 3's split fields and version 4's ``kernel_time``, written only for ops that have them."""

AliasedOutput = tuple[int, str, int]
"""``(slot, producer, producer_slot)``: output ``slot`` of an op is its input ``producer:producer_slot``'s
buffer (the ``aliased_outputs`` node attribute)."""


class CostGraphError(ValueError):
    """A cost graph, or its JSON form, breaks the schema: the message names the op or field."""


def op_attributes(
    *,
    compute_time: float = 0.0,
    persistent_bytes: int = 0,
    output_sizes: Iterable[int] = (),
    temporary_bytes: int = 0,
    op_type: str = "",
    colocation_group: str | None = None,
    device_kinds: Iterable[str] | None = None,
    flops: float = 0.0,
    aliased_outputs: Iterable[AliasedOutput] = (),
    attrs: Mapping[str, Any] | None = None,
    output_shapes: Iterable[Iterable[int]] | None = None,
    inputs: Iterable[tuple[str, int]] | None = None,
    batch_costs: Mapping[str, Any] | None = None,
    gradient_of: str | None = None,
    kernel_time: float | None = None,
) -> dict[str, Any]:
    """Every node attribute of the schema (module docstring), normalized: what
    :meth:`CostGraph.add_op` stores, for callers that keep nodes in tables of their own."""
    return {
        "compute_time": float(compute_time),
        "persistent_bytes": int(persistent_bytes),
        "output_sizes": tuple(int(s) for s in output_sizes),
        "temporary_bytes": int(temporary_bytes),
        "op_type": str(op_type),
        "colocation_group": colocation_group,
        "device_kinds": None if device_kinds is None else tuple(sorted(set(device_kinds))),
        "flops": float(flops),
        "aliased_outputs": tuple(sorted((int(s), str(p), int(q)) for s, p, q in aliased_outputs)),
        "attrs": None if attrs is None else dict(attrs),
        "output_shapes": None if output_shapes is None else tuple(tuple(map(int, s)) for s in output_shapes),
        "inputs": None if inputs is None else tuple((str(p), int(q)) for p, q in inputs),
        "batch_costs": None if batch_costs is None else dict(batch_costs),
        "gradient_of": gradient_of,
        "kernel_time": None if kernel_time is None else float(kernel_time),
    }


class CostGraph(nx.DiGraph):
    """A directed acyclic graph of operations with their measured or estimated costs.

    Build it with :meth:`add_op` and :meth:`add_dependency`, which fill every attribute of the
    schema; networkx's own methods work as usual on the result.

    Examples
    --------
    >>> g = CostGraph(name="tiny")
    >>> g.add_op("a", compute_time=1e-3, output_sizes=(400,))
    >>> g.add_op("b", compute_time=2e-3)
    >>> g.add_dependency("a", "b", slots=(0,))
    >>> g.edges["a", "b"]["bytes"]
    400
    """

    def add_op(self, name: str, **costs: Any) -> None:
        """Add (or overwrite the costs of) one operation: the attributes of :func:`op_attributes`."""
        self.add_node(name, **op_attributes(**costs))

    def add_dependency(
        self,
        src: str,
        dst: str,
        *,
        slots: Iterable[int] = (),
        nbytes: int | None = None,
        control: bool = False,
    ) -> None:
        """Add the edge ``src -> dst``, merging it with an existing edge between the pair.

        ``nbytes`` defaults to the summed sizes of the producer's ``slots``; a control dependency
        (``control=True`` and no slots) carries 0 bytes. Transfer times are filled by
        :meth:`set_transfer_model`.
        """
        self._check_ends(src, dst)
        existing = self.edges[src, dst] if self.has_edge(src, dst) else None
        edge = _merged_edge(existing, self.nodes[src]["output_sizes"], slots, nbytes, control)
        if existing is None:
            self.add_edge(src, dst, **edge)
            edge = self.edges[src, dst]
        edge["transfer_time"] = self._edge_time(edge)

    def add_dependencies(
        self, dependencies: Iterable[tuple[str, str, Iterable[int], int | None, bool]]
    ) -> None:
        """:meth:`add_dependency` of each ``(src, dst, slots, nbytes, control)`` in turn, with the same
        merging and edge order, in one pass: the fast path for graphs built by the 100,000 edges (a
        split plan's pieces, :mod:`tfplace.split.expand`); transfer times are computed once per edge."""

        def existing(src: str, dst: str) -> dict[str, Any] | None:
            self._check_ends(src, dst)
            return dict(self.edges[src, dst]) if self.has_edge(src, dst) else None

        pending = merge_dependencies(dependencies, lambda op: self._node[op]["output_sizes"], existing)
        model = self.transfer_model
        for edge in pending.values():
            edge["transfer_time"] = edge_time(edge, model)
        self.add_edges_from((src, dst, edge) for (src, dst), edge in pending.items())

    def _check_ends(self, src: str, dst: str) -> None:
        for op in (src, dst):
            if op not in self._node:
                raise CostGraphError(f"edge {src!r} -> {dst!r}: op {op!r} is not in the graph")

    @property
    def transfer_model(self) -> TransferModel:
        """The link model the edges' ``transfer_time`` was computed with."""
        spec = self.graph.get("transfer_model")
        if not spec:
            return TransferModel.default()
        parsed = self.__dict__.get("_parsed_transfer_model")
        if parsed is None or parsed[0] != spec:  # parsed once per spec: edges are added by the 100,000
            parsed = (dict(spec), TransferModel.from_dict(spec))
            self.__dict__["_parsed_transfer_model"] = parsed
        return parsed[1]

    def set_transfer_model(self, model: TransferModel) -> None:
        """Recompute every edge's ``transfer_time`` as ``t = k * bytes + b`` (section 4.1)."""
        self.graph["transfer_model"] = model.to_dict()
        for _, _, edge in self.edges(data=True):
            edge["transfer_time"] = self._edge_time(edge, model)

    def _edge_time(self, edge: Mapping[str, Any], model: TransferModel | None = None) -> float:
        return edge_time(edge, model or self.transfer_model)

    def validate(self) -> None:
        """Raise :class:`CostGraphError` naming the first op or edge that breaks the schema.

        Checks every attribute's presence, type and sign, that each aliased output names an input
        of its op, and that the graph is acyclic (the message lists the ops on a cycle).
        """
        for name, attrs in self.nodes(data=True):
            _validate_op(name, attrs)
        for src, dst, attrs in self.edges(data=True):
            _validate_edge(src, dst, attrs)
        for name, aliases in self.nodes(data="aliased_outputs", default=()):
            _validate_aliases(self, name, aliases)
        for name, forward in self.nodes(data="gradient_of", default=None):
            if forward is not None and (not isinstance(forward, str) or forward == name):
                raise CostGraphError(f"op {name!r}: gradient_of must name another op, got {forward!r}")
        check_acyclic(self)


def merge_dependencies(
    dependencies: Iterable[tuple[str, str, Iterable[int], int | None, bool]],
    output_sizes: Callable[[str], Sequence[int]],
    existing: Callable[[str, str], dict[str, Any] | None] = lambda src, dst: None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """The edges ``(src, dst) -> attributes`` (without ``transfer_time``) that
    :meth:`CostGraph.add_dependency` of each ``(src, dst, slots, nbytes, control)`` in turn makes, in
    the order each pair first appears; ``output_sizes(op)`` gives a producer's slot sizes,
    ``existing(src, dst)`` a copy of an edge already there (``None`` by default: no edges yet)."""
    pending: dict[tuple[str, str], dict[str, Any]] = {}
    for src, dst, slots, nbytes, control in dependencies:
        key = (src, dst)
        edge = pending.get(key)
        if edge is None:
            edge = existing(src, dst)
        sizes = output_sizes(src) if nbytes is None else ()  # read only to count the slots' bytes
        pending[key] = _merged_edge(edge, sizes, slots, nbytes, control)
    return pending


def _merged_edge(
    edge: dict[str, Any] | None, sizes: Sequence[int], slots: Iterable[int], nbytes: int | None, control: bool
) -> dict[str, Any]:
    """``edge`` (``None``: no edge yet) with the producer's ``slots`` (of ``sizes``) added, as
    :meth:`CostGraph.add_dependency` documents; updated in place, or a new edge's attributes."""
    if edge is None:
        new = tuple(slots)
        if len(new) > 1:
            new = tuple(sorted(set(new)))
        if nbytes is None:
            nbytes = sum(sizes[s] for s in new if s < len(sizes))
        return {"bytes": int(nbytes), "slots": new, "control": control and not new and nbytes == 0}
    carried = set(edge["slots"])
    added = sorted(set(slots) - carried)
    if nbytes is None:
        nbytes = sum(sizes[s] for s in added if s < len(sizes))
    is_control = control and not added and not carried and nbytes == 0
    if added or not slots:
        edge["bytes"] += int(nbytes)
        edge["slots"] = tuple(sorted(carried | set(added)))
        edge["control"] = edge["control"] and is_control
    return edge


def _is_count(value: Any) -> bool:
    """An integer >= 0 (``True`` is not a count, although Python makes it an ``int``)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_amount(value: Any) -> bool:
    """A finite number >= 0, not a boolean."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _validate_op(name: str, attrs: Mapping[str, Any]) -> None:
    missing = [key for key in _NODE_DEFAULTS if key not in attrs]
    if missing:
        raise CostGraphError(f"op {name!r} lacks {', '.join(missing)}")
    for key in ("compute_time", "flops"):
        if not _is_amount(attrs[key]):
            raise CostGraphError(f"op {name!r}: {key} must be a finite number >= 0, got {attrs[key]!r}")
    for key in ("persistent_bytes", "temporary_bytes"):
        if not _is_count(attrs[key]):
            raise CostGraphError(f"op {name!r}: {key} must be an integer >= 0, got {attrs[key]!r}")
    sizes = attrs["output_sizes"]
    if not isinstance(sizes, tuple) or not all(map(_is_count, sizes)):
        raise CostGraphError(f"op {name!r}: output_sizes must be integers >= 0, got {sizes!r}")
    if not isinstance(attrs["op_type"], str):
        raise CostGraphError(f"op {name!r}: op_type must be a string, got {attrs['op_type']!r}")
    group = attrs["colocation_group"]
    if group is not None and not isinstance(group, str):
        raise CostGraphError(f"op {name!r}: colocation_group must be None or a string, got {group!r}")
    kinds = attrs["device_kinds"]
    if kinds is not None and (
        not isinstance(kinds, tuple) or not kinds or any(not isinstance(k, str) for k in kinds)
    ):
        raise CostGraphError(f"op {name!r}: device_kinds must be None or device types, got {kinds!r}")
    aliases = attrs.get("aliased_outputs", ())
    if not isinstance(aliases, tuple) or not all(map(_is_alias, aliases)):
        raise CostGraphError(
            f"op {name!r}: aliased_outputs must be (slot, producer, producer slot) triples, got {aliases!r}"
        )
    kernel = attrs.get("kernel_time")
    if kernel is not None and not _is_amount(kernel):
        raise CostGraphError(f"op {name!r}: kernel_time must be None or a finite number >= 0, got {kernel!r}")
    for key in ("attrs", "batch_costs"):
        if attrs.get(key) is not None and not isinstance(attrs[key], dict):
            raise CostGraphError(f"op {name!r}: {key} must be None or an object, got {attrs[key]!r}")
    shapes = attrs.get("output_shapes")
    if shapes is not None and (
        not isinstance(shapes, tuple)
        or len(shapes) != len(sizes)
        or not all(isinstance(shape, tuple) and all(_is_dimension(d) for d in shape) for shape in shapes)
    ):
        raise CostGraphError(
            f"op {name!r}: output_shapes must give each of its {len(sizes)} outputs a shape of "
            f"integers >= -1, got {shapes!r}"
        )
    inputs = attrs.get("inputs")
    if inputs is not None and not (
        isinstance(inputs, tuple)
        and all(
            isinstance(i, tuple) and len(i) == 2 and isinstance(i[0], str) and _is_count(i[1]) for i in inputs
        )
    ):
        raise CostGraphError(f"op {name!r}: inputs must be (producer, slot) pairs, got {inputs!r}")
    slots = [slot for slot, _, _ in aliases]
    if len(set(slots)) < len(slots) or any(slot >= len(sizes) for slot in slots):
        raise CostGraphError(
            f"op {name!r}: aliased_outputs name slots {slots}; each must be one of its "
            f"{len(sizes)} output slots, once"
        )


def _is_dimension(value: Any) -> bool:
    """A tensor dimension: an integer >= 0, or -1 for one unknown statically."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= -1


def _is_alias(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 3
        and _is_count(value[0])
        and isinstance(value[1], str)
        and _is_count(value[2])
    )


def _validate_aliases(graph: nx.DiGraph, name: str, aliases: tuple[AliasedOutput, ...]) -> None:
    """Each aliased output names an input the graph has: an edge into ``name`` carrying the slot."""
    for slot, producer, producer_slot in aliases:
        edge = graph.get_edge_data(producer, name)
        if edge is None or producer_slot not in edge["slots"]:
            raise CostGraphError(
                f"op {name!r}: output {slot} is aliased to input {producer}:{producer_slot}, "
                "but no edge into the op carries that tensor"
            )


def _validate_edge(src: str, dst: str, attrs: Mapping[str, Any]) -> None:
    for key in ("bytes", "slots", "transfer_time", "control"):
        if key not in attrs:
            raise CostGraphError(f"edge {src!r} -> {dst!r} lacks {key}")
    if not _is_count(attrs["bytes"]):
        raise CostGraphError(
            f"edge {src!r} -> {dst!r}: bytes must be an integer >= 0, got {attrs['bytes']!r}"
        )
    slots = attrs["slots"]
    if not isinstance(slots, tuple) or not all(map(_is_count, slots)):
        raise CostGraphError(
            f"edge {src!r} -> {dst!r}: slots must be output slots (integers >= 0), got {slots!r}"
        )
    if not _is_amount(attrs["transfer_time"]):
        raise CostGraphError(f"edge {src!r} -> {dst!r}: transfer_time must be finite and >= 0")
    if not isinstance(attrs["control"], bool):
        raise CostGraphError(
            f"edge {src!r} -> {dst!r}: control must be true or false, got {attrs['control']!r}"
        )


def edge_transfers(attrs: Mapping[str, Any]) -> int:
    """How many separate transfers an edge stands for: one per tensor (``len(slots)``), or the
    ``transfers`` count a coarse graph records on its merged edges; ``0`` without bytes."""
    if attrs["control"] or attrs["bytes"] == 0:
        return 0
    return int(attrs.get("transfers", max(1, len(attrs["slots"]))))


def edge_time(attrs: Mapping[str, Any], model: TransferModel) -> float:
    """Seconds an edge's transfers take on one link: ``k * bytes + b`` per transfer (section 4.1)."""
    return model.k * attrs["bytes"] + model.b * edge_transfers(attrs) if attrs["bytes"] else 0.0


def find_cycle_ops(graph: nx.DiGraph) -> list[str]:
    """Return the ops of one directed cycle in ``graph`` in order, or ``[]`` when it is acyclic.

    Linear in the graph's size: ``nx.find_cycle`` alone restarts its search from every op and
    takes minutes on an acyclic graph of 20,000 ops, so the cycle is looked for only inside a
    strongly connected component that has one.
    """
    if nx.is_directed_acyclic_graph(graph):
        return []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1 or any(graph.has_edge(op, op) for op in component):
            cycle = nx.find_cycle(graph.subgraph(component))
            return [str(src) for src, _ in cycle] + [str(cycle[0][0])]
    return []


def check_acyclic(graph: nx.DiGraph) -> None:
    """Raise :class:`CostGraphError` listing the ops on a cycle of ``graph``, if it has one."""
    cycle = find_cycle_ops(graph)
    if cycle:
        raise CostGraphError(
            f"the graph has a cycle through {len(cycle)} ops: {' -> '.join(cycle[:12])}"
            + (" -> ..." if len(cycle) > 12 else "")
        )


def output_bytes(graph: nx.DiGraph, op: str) -> int:
    """Total bytes of an op's outputs."""
    return sum(graph.nodes[op]["output_sizes"])


def allocated_output_bytes(output_sizes: Sequence[int], aliased_outputs: Iterable[AliasedOutput] = ()) -> int:
    """Bytes of the outputs an op allocates: every output slot but its ``aliased_outputs``."""
    aliased = {slot for slot, _, _ in aliased_outputs}
    return sum(size for slot, size in enumerate(output_sizes) if slot not in aliased)


def allocated_bytes(
    output_sizes: Sequence[int], aliased_outputs: Iterable[AliasedOutput] = (), temporary_bytes: int = 0
) -> int:
    """Bytes an op allocates in a step: the outputs that are not an input's buffer
    (:func:`allocated_output_bytes`) and its scratch memory."""
    return allocated_output_bytes(output_sizes, aliased_outputs) + int(temporary_bytes)


def resident_memory(attrs: Mapping[str, Any]) -> int:
    """Bytes an op holds on its device for the whole step: persistent state and every output it
    allocates (training keeps forward activations until the backward pass; an output that is an
    input's buffer adds nothing)."""
    outputs = allocated_output_bytes(attrs["output_sizes"], attrs.get("aliased_outputs", ()))
    return int(attrs["persistent_bytes"] + outputs)


def op_memory(attrs: Mapping[str, Any]) -> int:
    """``Memory[v_i]`` of Eq. 6 and Algorithm 2: the op's resident bytes plus its temporary bytes."""
    return resident_memory(attrs) + int(attrs["temporary_bytes"])


def graph_memory(graph: nx.DiGraph) -> int:
    """Bytes one device needs to hold the whole step in the static model: every op's resident
    bytes plus the largest temporary bytes (the rule of :class:`tfplace.placer.ledger.MemoryLedger`)."""
    ops = [attrs for _, attrs in graph.nodes(data=True)]
    return sum(resident_memory(a) for a in ops) + max((int(a["temporary_bytes"]) for a in ops), default=0)


def ccr(graph: nx.DiGraph) -> float:
    """Communication-to-computation ratio, Eq. 1: sum of ``c_ij`` over sum of ``w_i``."""
    comm = sum(t for _, _, t in graph.edges(data="transfer_time"))
    comp = sum(t for _, t in graph.nodes(data="compute_time"))
    return comm / comp if comp > 0 else math.inf


def untraced_steps(graph: nx.DiGraph) -> dict[str, float]:
    """The untraced step of ``graph`` per CPU device kind it was timed on (:data:`UNTRACED_STEP`);
    empty where none was. Graphs saved before session 32 hold one kind's step as
    ``{"seconds": s, "kind": k}`` (the fidelity runs' inputs in ``results/``), read as ``{k: s}``."""
    measured = graph.graph.get(UNTRACED_STEP) or {}
    if "seconds" in measured:
        return {str(measured["kind"]): float(measured["seconds"])}
    return {str(kind): float(seconds) for kind, seconds in measured.items()}


def save_json(graph: CostGraph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` as JSON (gzip-compressed when ``path`` ends in ``.gz``), atomically: a reader
    never sees a partial file."""
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "graph": graph.graph,
        "ops": [
            {
                "name": name,
                **{
                    key: _jsonable(attrs.get(key, _NODE_KEYS[key]))
                    for key in _NODE_KEYS
                    if key not in _WRITTEN_WHEN_SET or attrs.get(key) is not None
                },
            }
            for name, attrs in graph.nodes(data=True)
        ],
        "edges": [
            {
                "src": src,
                "dst": dst,
                "bytes": attrs["bytes"],
                "slots": list(attrs["slots"]),
                "transfer_time": attrs["transfer_time"],
                "control": attrs["control"],
            }
            for src, dst, attrs in graph.edges(data=True)
        ],
    }
    text = json.dumps(document, separators=(",", ":"))
    atomic_write_bytes(
        path, gzip.compress(text.encode(), mtime=0) if str(path).endswith(".gz") else text.encode()
    )


def _jsonable(value: Any) -> Any:
    return [_jsonable(item) for item in value] if isinstance(value, tuple) else value


def load_json(path: str | os.PathLike[str]) -> CostGraph:
    """Read a cost graph written by :func:`save_json` (or by another tool, to the same schema).

    Raises :class:`CostGraphError` naming the problem when the file is truncated, is not a cost
    graph, or breaks the schema.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except (json.JSONDecodeError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as error:
        raise CostGraphError(f"{path}: not valid JSON (truncated or corrupted?): {error}") from None
    if not isinstance(document, dict) or document.get("format") != JSON_FORMAT:
        raise CostGraphError(f"{path}: not a cost graph (expected format {JSON_FORMAT!r})")
    version = document.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise CostGraphError(
            f"{path}: cost graph version {version!r}, this tfplace reads versions "
            + ", ".join(map(str, READABLE_VERSIONS))
        )
    metadata = document.get("graph", {})
    if not isinstance(metadata, dict):
        raise CostGraphError(f"{path}: 'graph' must be an object of metadata, got {metadata!r}")
    for key in ("ops", "edges"):
        if not isinstance(document.get(key), list):
            raise CostGraphError(f"{path}: {key!r} must be a list, got {document.get(key)!r}")
    graph = CostGraph(**metadata)
    for index, op in enumerate(document["ops"]):
        if not isinstance(op, dict) or not isinstance(op.get("name"), str) or not op["name"]:
            raise CostGraphError(f"{path}: ops[{index}] has no name (a non-empty string)")
        name = op["name"]
        if name in graph:
            raise CostGraphError(f"{path}: op {name!r} appears twice (ops[{index}])")
        unknown = set(op) - set(_NODE_KEYS) - {"name"} | (
            {"gradient_of"} & set(op) if version == 1 else set()
        )
        if unknown:
            raise CostGraphError(f"{path}: op {name!r} has unknown fields {sorted(unknown)}")
        fields = {**_NODE_KEYS, **op}
        for key in ("output_sizes", "device_kinds", "aliased_outputs"):
            if op.get(key) is not None:
                fields[key] = _json_tuple(op[key], f"{path}: op {name!r}: {key}")
        fields["output_sizes"] = fields["output_sizes"] or ()
        for key in ("output_shapes", "inputs"):
            if op.get(key) is not None:
                fields[key] = tuple(
                    _json_tuple(item, f"{path}: op {name!r}: {key}[{i}]")
                    for i, item in enumerate(_json_tuple(op[key], f"{path}: op {name!r}: {key}"))
                )
        fields["aliased_outputs"] = tuple(
            _json_tuple(alias, f"{path}: op {name!r}: aliased_outputs[{i}]")
            for i, alias in enumerate(fields["aliased_outputs"] or ())
        )
        graph.add_node(name, **{key: fields[key] for key in _NODE_KEYS})
    for index, edge in enumerate(document["edges"]):
        if not isinstance(edge, dict) or "src" not in edge or "dst" not in edge:
            raise CostGraphError(f"{path}: edges[{index}] needs src and dst")
        src, dst = edge["src"], edge["dst"]
        for end in (src, dst):
            if not isinstance(end, str) or end not in graph:
                raise CostGraphError(f"{path}: edges[{index}] names unknown op {end!r}")
        if graph.has_edge(src, dst):
            raise CostGraphError(
                f"{path}: edges[{index}] repeats {src!r} -> {dst!r}; merge the tensors of a pair into one edge"
            )
        graph.add_edge(
            src,
            dst,
            bytes=edge.get("bytes", 0),
            slots=_json_tuple(edge.get("slots", []), f"{path}: edge {src!r} -> {dst!r}: slots"),
            transfer_time=edge.get("transfer_time", 0.0),
            control=edge.get("control", False),
        )
    if version == 1:
        for gradient, forward in gradient_relation(graph.nodes).items():
            graph.nodes[gradient]["gradient_of"] = forward
    graph.validate()
    return graph


def gradient_pairs(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """``(gradient op, forward op)`` for every op whose ``gradient_of`` is set, in graph order."""
    return [(name, forward) for name, forward in graph.nodes(data="gradient_of", default=None) if forward]


def _json_tuple(value: Any, what: str) -> tuple[Any, ...]:
    """A JSON list as a tuple; anything else is a :class:`CostGraphError` naming ``what``."""
    if not isinstance(value, list):
        raise CostGraphError(f"{what} must be a list, got {value!r}")
    return tuple(value)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: an interrupted write
    leaves neither a partial file nor the temporary one. The file's mode honours the umask
    (``0o644`` under the usual ``022``), as files other tools write do."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
