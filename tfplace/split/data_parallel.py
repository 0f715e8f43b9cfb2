"""Data parallelism as a split plan: the baseline every layer-wise plan must beat.

What ``tf.distribute.MirroredStrategy`` does, expressed with the partition rules: every op that
processes examples is split along the batch over all devices (equal pieces, or pieces
proportional to ``speeds``), and every op that only touches weights (variables, their reads, the
optimizer's updates, constants) runs as a replica on every device, so the weight gradients, which a
batch split leaves partial, are all-reduced into each replica's update (:mod:`tfplace.split.expand`).

An op *processes examples* when one of its data inputs does: the fed placeholders (an op type of
:data:`FED_TYPES`) start it, a batch-split op passes it on through its sharded outputs, and a
partial output (a sum over the batch) stops it. An op all of whose data inputs are partial sums and
that is linear in them (``AddN`` of per-time-step weight gradients) stays partial, so the sum is
all-reduced once, where a replica reads it. Such an op is split along its batch dimension: the
rule named ``batch``, or a ``reduction`` rule that slices axis 0 of every input it slices (a
weight gradient ``a^T @ dy``, a loss summed over the batch). One that has neither runs whole on
the first device, its sliced inputs gathered there. A random op that has a batch rule is split too
(each device draws its piece, as each replica of MirroredStrategy draws its own). Shape ops (:data:`~tfplace.split.rules.SHAPE_OPS`)
read only their input's shape and run as replicas.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from tfplace.core.devices import DeviceSet
from tfplace.split.buckets import DEFAULT_BUCKET_BYTES
from tfplace.split.plan import OpSplit, SplitPlan, dimension_size, inputs_known
from tfplace.split.rules import BATCH, PARTIAL, REDUCTION, REPLICA, SHAPE_OPS, can_replicate, op_rules

__all__ = ["FED_TYPES", "batch_dimension", "data_parallel_plan"]

FED_TYPES = frozenset({"Placeholder", "PlaceholderV2", "IteratorGetNext"})
"""Op types that bring a step's examples into the graph."""


def batch_dimension(graph: nx.DiGraph, op: str) -> str | None:
    """The dimension along which ``op`` splits its examples, or ``None`` when it cannot (also when
    the graph does not record which input is which and the rule reads them differently)."""
    rules = op_rules(graph.nodes[op]["op_type"], graph.nodes[op].get("attrs"))
    if BATCH in rules:
        return BATCH if inputs_known(graph, op, rules[BATCH]) else None
    reduction = rules.get(REDUCTION)
    if reduction is not None and inputs_known(graph, op, reduction):
        axes = {layout.axis for layout in reduction.reads if layout.kind in ("sharded", "halo")}
        if axes == {0}:
            return REDUCTION
    return None


def data_parallel_plan(
    graph: nx.DiGraph,
    devices: DeviceSet,
    *,
    speeds: Sequence[float] | None = None,
    bucket_bytes: int | None = DEFAULT_BUCKET_BYTES,
) -> SplitPlan:
    """The data-parallel plan of ``graph`` over the target ``devices`` (module docstring).

    ``speeds`` gives each device's relative speed; batch pieces are then proportional to it (BBGraP's
    balance for devices of different speeds). Equal pieces by default. Weight gradients are
    all-reduced in buckets of ``bucket_bytes`` (DDP's 25 MB; ``None``: one all-reduce per tensor).
    """
    names = tuple(devices.names)
    weights = list(speeds) if speeds is not None else [1.0] * len(names)
    if len(weights) != len(names) or min(weights) <= 0:
        raise ValueError(f"speeds must give each of the {len(names)} devices a positive speed, got {speeds}")
    shares = tuple(w / sum(weights) for w in weights)
    splits: dict[str, OpSplit] = {}
    examples: set[tuple[str, int]] = set()  # tensors (op, slot) that carry examples
    partials: set[tuple[str, int]] = set()  # tensors that are partial sums over the pieces
    for op in nx.topological_sort(graph):
        op_type = graph.nodes[op]["op_type"]
        inputs = {(u, slot) for u, _, slots in graph.in_edges(op, data="slots") for slot in slots}
        carries = op_type in FED_TYPES or bool(inputs & examples)
        random = not can_replicate(op_type)  # a random draw of examples' shape splits like them
        dimension = batch_dimension(graph, op) if carries or random else None
        if inputs and inputs <= partials and REDUCTION in op_rules(op_type, graph.nodes[op].get("attrs")):
            rule = op_rules(op_type, graph.nodes[op].get("attrs"))[REDUCTION]
            if rule.reads == (PARTIAL,):
                splits[op] = OpSplit(names, REDUCTION, shares)
                partials.update((op, slot) for slot in range(len(graph.nodes[op]["output_sizes"])))
                continue
        size = dimension_size(graph, op, dimension) if dimension else None
        if dimension is not None and len(names) > 1 and (size is None or size >= len(names)):
            splits[op] = OpSplit(names, dimension, shares)
            rule = op_rules(op_type, graph.nodes[op].get("attrs"))[dimension]
            outputs = len(graph.nodes[op]["output_sizes"])
            examples.update((op, slot) for slot in range(outputs) if rule.write(slot) != PARTIAL)
            partials.update((op, slot) for slot in range(outputs) if rule.write(slot) == PARTIAL)
        elif (op_type in SHAPE_OPS or not carries) and can_replicate(op_type):
            splits[op] = OpSplit(names, REPLICA) if len(names) > 1 else OpSplit.whole(names[0])
        else:
            splits[op] = OpSplit.whole(names[0])
            if carries:
                examples.update((op, slot) for slot in range(len(graph.nodes[op]["output_sizes"])))
    return SplitPlan(
        splits,
        devices,
        placer="data_parallel",
        batch_size=graph.graph.get("batch_size"),
        bucket_bytes=bucket_bytes,
    )
