"""Kernel twins: ops of one step that run the same kernel on tensors of the same shapes.

An unrolled RNN runs its cell's ops once per time step, a Transformer its layer's once per layer,
Inception its blocks' several times: 4,977 of the small NMT's 5,045 profiled ops fall in 145
groups of twins. Twins' times grow alike with the batch. Each op's own profile measures that
growth with noise, and the regression extrapolates it: from batches 2, 4 and 6 a least-squares
line's value at 8 scatters 1.5 times as much as one measurement. :func:`pooled_twin_times` gives
every twin its group's mean curve plus its own mean offset from that curve, so that the growth is
measured on the whole group and each op keeps its level (a twin that reads cold buffers runs
longer at every batch). The regression pools only groups of ops that are not mostly noise
(:class:`~tfplace.estimator.regression.OpCostRegression`).

On seven sets of NMT profiles (batches 2, 4, 6 and two measurements of 8, session 35;
``docs/experiments.md``, "Kernel twins") the prediction's deviation weighted by time fell by
0.6-1.4 points in six (6.68% -> 5.53%, 7.56% -> 6.97%, 7.32% -> 6.48%, ...) and moved 0.02 in
the seventh; scaling each twin's curve instead of offsetting it gained less (6.68% -> 6.13%).

Which ops are twins (:func:`kernel_twins`) is read from the cost graph (op type, the attributes it
records, static shapes of outputs and inputs) and the profile (each output's and input's bytes at
every profiled batch size): ops that agree on all of it run one kernel on one shape.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.estimator.profiler import ProfileSet

__all__ = ["kernel_twins", "pooled_twin_times", "twin_key"]


def twin_key(graph: CostGraph, profile_set: ProfileSet, op: str) -> Hashable | None:
    """What two ops must share to be twins: ``op``'s type, recorded attributes and static output
    shapes; each data input's static shape and bytes at every profiled batch size; its own output
    bytes at each. ``None`` for an op that cannot be matched: not traced (its costs are estimates),
    or without recorded inputs or output shapes (a cost graph of schema version 1 or 2)."""
    attrs = graph.nodes[op]
    inputs, shapes = attrs.get("inputs"), attrs.get("output_shapes")
    sizes = sorted(profile_set.costs)
    if inputs is None or shapes is None or op in profile_set.estimated_ops:
        return None
    if any(op not in profile_set.costs[b] for b in sizes):
        return None

    def tensor(producer: str, slot: int) -> tuple[Any, ...] | None:
        if producer not in graph:
            return None
        producer_shapes = graph.nodes[producer].get("output_shapes") or ()
        shape = tuple(producer_shapes[slot]) if slot < len(producer_shapes) else None
        per_batch = []
        for b in sizes:
            cost = profile_set.costs[b].get(producer)
            per_batch.append(
                cost.output_sizes[slot] if cost is not None and slot < len(cost.output_sizes) else None
            )
        return (shape, tuple(per_batch))

    operands = tuple(tensor(producer, slot) for producer, slot in inputs)
    if any(operand is None for operand in operands):
        return None
    return (
        attrs["op_type"],
        tuple(sorted((attrs.get("attrs") or {}).items())),
        tuple(map(tuple, shapes)),
        operands,
        tuple(profile_set.costs[b][op].output_sizes for b in sizes),
    )


def kernel_twins(graph: CostGraph, profile_set: ProfileSet) -> list[list[str]]:
    """Groups of two or more ops of ``graph`` profiled in ``profile_set`` with the same
    :func:`twin_key`, each sorted, in the order of their first op."""
    groups: dict[Hashable, list[str]] = {}
    for op in sorted(op for op in graph if op in profile_set.costs[min(profile_set.costs)]):
        key = twin_key(graph, profile_set, op)
        if key is not None:
            groups.setdefault(key, []).append(op)
    return sorted((ops for ops in groups.values() if len(ops) > 1), key=lambda ops: ops[0])


def pooled_twin_times(times: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """``times`` (ops x batch sizes) with each group's rows (indices into ``times``) replaced by
    the group's mean row plus the row's own mean offset from it: the group's growth with the
    batch, each op's level. Rows of no group are unchanged; a group of one row is itself."""
    pooled = np.array(times, dtype=float)
    for group in groups:
        rows = np.asarray(group, dtype=int)
        curve = pooled[rows].mean(axis=0)
        offsets = (pooled[rows] - curve).mean(axis=1)
        pooled[rows] = curve + offsets[:, None]
    return pooled
