"""Prove a split plan computes what the unsplit graph computes: run both, compare, check devices.

:func:`compare_split` runs ``steps`` steps of the user's graph and of its rewrite
(:func:`~tfplace.tf_graph.split_rewrite.split_graph`) from the same initial weights on the same
feeds, then compares every fetched value of every step and every variable after the last step, and
reads the last step's FULL_TRACE step stats of the rewrite: every piece must have run on its device.
Works in one process (virtual CPUs) and on a :class:`~tfplace.tf_graph.cluster.LocalCluster`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfplace.core.devices import DeviceName
from tfplace.split.plan import SplitPlan
from tfplace.tf_graph.importer import fetch_op_names, step_closure
from tfplace.tf_graph.session import default_initializers, executed_devices
from tfplace.tf_graph.split_rewrite import SplitRewrite, split_graph

__all__ = ["ReorderingFloor", "SplitCheck", "batch_orders", "compare_split", "deviation", "reordering_floor"]


@dataclass
class SplitCheck:
    """How far the rewrite's values are from the original's, and where its pieces ran."""

    max_deviation: float
    worst: str
    pieces_run: int
    pieces_in_step: int
    misplaced: list[tuple[str, str, str]] = field(default_factory=list)
    """``(piece, planned device, device it ran on)`` of every piece that ran elsewhere."""
    kept_whole: dict[str, str] = field(default_factory=dict)
    values: list[Any] = field(default_factory=list)
    """The original graph's fetched values, one entry per step."""
    step_deviations: list[float] = field(default_factory=list)
    """Per step, the largest deviation of a fetched value: how a float difference of the first
    steps grows (or not) over training."""
    deviations: dict[str, float] = field(default_factory=dict)
    """Every compared value (``"loss:0 at step 3"``, ``"w:0 after step 20"``) -> its deviation."""


def deviation(expected: Any, actual: Any) -> float:
    """``max |expected - actual|`` relative to the larger of 1 and ``max |expected|``."""
    expected, actual = np.asarray(expected, np.float64), np.asarray(actual, np.float64)
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(expected - actual)) / max(1.0, float(np.max(np.abs(expected)))))


def _variables(graph: Any) -> list[Any]:
    import tensorflow as tf

    return list(graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES))


def _run(
    graph: Any,
    fetches: Sequence[str],
    feeds: Mapping[str, Any],
    steps: int,
    config: Any,
    target: str,
    initial: list[Any] | None,
) -> tuple[list[Any], list[Any], list[Any], Any]:
    """Initial weights, per-step values, final weights and the last step's RunMetadata."""
    import tensorflow as tf

    variables = _variables(graph)
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(target, graph=graph, config=config) as session:
        session.run(default_initializers(graph))
        if initial is not None:  # the same starting weights, in one run of their initializers
            session.run(
                [v.initializer for v in variables],
                {v.initializer.inputs[1]: value for v, value in zip(variables, initial)},
            )
        start = session.run(variables)
        values = [session.run(list(fetches), dict(feeds)) for _ in range(steps - 1)]
        values.append(session.run(list(fetches), dict(feeds), options=trace, run_metadata=metadata))
        final = session.run(variables)
    return start, values, final, metadata


def _placement_check(
    graph: Any, rewrite: SplitRewrite, fetches: Sequence[str], metadata: Any
) -> tuple[int, int, list]:
    in_step = step_closure(graph, fetch_op_names(graph, list(fetches)))
    pieces = [piece for nodes in rewrite.pieces.values() for piece in nodes if piece in in_step]
    ran = executed_devices(metadata, {op.name for op in graph.get_operations()})
    misplaced = [
        (piece, rewrite.devices[piece], ran[piece])
        for piece in pieces
        if piece in ran and DeviceName.parse(rewrite.devices[piece]) != DeviceName.parse(ran[piece])
    ]
    return sum(piece in ran for piece in pieces), len(pieces), misplaced


def compare_split(
    graph: Any,
    plan: SplitPlan,
    fetches: Sequence[str],
    feeds: Mapping[str, Any],
    *,
    steps: int,
    config: Any,
    target: str = "",
    batch_size: int | None = None,
) -> SplitCheck:
    """Run ``graph`` and its rewrite by ``plan`` ``steps`` times each and compare (module docstring).

    ``fetches`` are names (``"loss:0"``, ``"train"``); ops fetched for their effect compare as ``None``.
    """
    if steps < 1:
        raise ValueError(f"compare at least one step, got {steps}")
    start, expected, final, _ = _run(graph, fetches, feeds, steps, config, target, None)
    rewritten, rewrite = split_graph(plan, graph, batch_size)
    _, actual, split_final, metadata = _run(rewritten, fetches, feeds, steps, config, target, start)
    deviations = _deviations(graph, fetches, expected, actual, final, split_final, scalars_only=False)
    worst, where = max(((d, name) for name, d in deviations.items()), default=(0.0, ""))
    per_step = [
        max((deviation(a, b) for a, b in zip(want, got) if a is not None), default=0.0)
        for want, got in zip(expected, actual)
    ]
    run, in_step, misplaced = _placement_check(rewritten, rewrite, fetches, metadata)
    return SplitCheck(
        worst, where, run, in_step, misplaced, dict(rewrite.kept_whole), expected, per_step, deviations
    )


def _deviations(
    graph: Any,
    fetches: Sequence[str],
    expected: list[Any],
    actual: list[Any],
    final: list[Any],
    other_final: list[Any],
    *,
    scalars_only: bool,
) -> dict[str, float]:
    """The deviation of every fetched value of every step and every variable after the last step."""
    deviations = {}
    for step, (want, got) in enumerate(zip(expected, actual)):
        for name, a, b in zip(fetches, want, got):
            if a is not None and not (scalars_only and np.ndim(a)):
                deviations[f"{name} at step {step + 1}"] = deviation(a, b)
    for variable, a, b in zip(_variables(graph), final, other_final):
        deviations[f"{variable.name} after step {len(expected)}"] = deviation(a, b)
    return deviations


def batch_orders(batch_size: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` orders of ``batch_size`` examples other than the given one: every permutation when
    there are at most ``count`` (23 at batch 4), else ``count`` drawn without repeats (seeded)."""
    if math.factorial(batch_size) - 1 <= count:
        return [np.asarray(p) for p in itertools.permutations(range(batch_size))][1:]
    rng, seen, orders = np.random.default_rng(seed), {tuple(range(batch_size))}, []
    while len(orders) < count:
        order = rng.permutation(batch_size)
        if tuple(order) not in seen:
            seen.add(tuple(order))
            orders.append(order)
    return orders


@dataclass
class ReorderingFloor:
    """How far the unsplit graph moves when fed its batch in other orders: per value (the keys of
    :attr:`SplitCheck.deviations`; scalar fetches and variables) the largest deviation over every
    order, and the largest of all (where)."""

    max_deviation: float
    worst: str
    per_value: dict[str, float]
    orders: int


def reordering_floor(
    graph: Any,
    fetches: Sequence[str],
    feeds: Mapping[str, Any],
    *,
    steps: int,
    batch_size: int,
    config: Any,
    target: str = "",
    orders: int = 23,
) -> ReorderingFloor:
    """The noise floor of summation order: the unsplit graph fed the same examples in other orders
    (:func:`batch_orders`: every fed tensor leading with ``batch_size`` rows permuted alike),
    compared with the unsplit graph over ``steps`` steps' scalar fetches and the final weights.
    Mathematically the same training (a mean over the batch and batch statistics ignore the order);
    only the batch reductions sum in another order, as a batch split's joins do."""
    start, expected, final, _ = _run(graph, fetches, feeds, steps, config, target, None)
    floor: dict[str, float] = {}
    worst, where = 0.0, ""
    permutations = batch_orders(batch_size, orders)
    for order in permutations:
        reordered = {
            name: np.asarray(value)[order] if np.ndim(value) and len(value) == batch_size else value
            for name, value in feeds.items()
        }
        _, actual, other_final, _ = _run(graph, fetches, reordered, steps, config, target, start)
        deviations = _deviations(graph, fetches, expected, actual, final, other_final, scalars_only=True)
        for name, value in deviations.items():
            floor[name] = max(floor.get(name, 0.0), value)
            if value >= worst:
                worst, where = value, f"{name} (order {[int(i) for i in order]})"
    return ReorderingFloor(worst, where, floor, len(permutations))
