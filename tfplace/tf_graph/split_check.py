"""Prove a split plan computes what the unsplit graph computes: run both, compare, check devices.

:func:`compare_split` runs ``steps`` steps of the user's graph and of its rewrite
(:func:`~tfplace.tf_graph.split_rewrite.split_graph`) from the same initial weights on the same
feeds, then compares every fetched value of every step and every variable after the last step, and
reads the last step's FULL_TRACE step stats of the rewrite: every piece must have run on its device.
Works in one process (virtual CPUs) and on a :class:`~tfplace.tf_graph.cluster.LocalCluster`.
A training run that amplifies rounding is judged against the unsplit graph fed its batch in other
orders (:func:`reordering_floor`) and one step at a time from the unsplit weights
(:func:`compare_steps`).
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

__all__ = [
    "ReorderingFloor",
    "SplitCheck",
    "StepCheck",
    "batch_orders",
    "compare_split",
    "compare_steps",
    "deviation",
    "reordering_floor",
]


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
        if initial is not None:
            _assign(session, variables, initial)
        start = session.run(variables)
        values = [session.run(list(fetches), dict(feeds)) for _ in range(steps - 1)]
        values.append(session.run(list(fetches), dict(feeds), options=trace, run_metadata=metadata))
        final = session.run(variables)
    return start, values, final, metadata


def _assign(session: Any, variables: list[Any], values: list[Any]) -> None:
    """Set every variable to its value, in one run of their initializers."""
    session.run(
        [v.initializer for v in variables], {v.initializer.inputs[1]: x for v, x in zip(variables, values)}
    )


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
    order, the largest of all (where), and every order's deviations."""

    max_deviation: float
    worst: str
    per_value: dict[str, float]
    orders: int
    per_order: list[dict[str, float]] = field(default_factory=list)

    def beyond(
        self, deviations: Mapping[str, float], tolerance: float, without: int | None = None
    ) -> list[tuple[str, float, float]]:
        """``(value, deviation, its floor)`` of every value of ``deviations`` beyond ``tolerance``
        and beyond its largest deviation over the orders (all of them, or all but order ``without``)."""
        others = [d for i, d in enumerate(self.per_order) if i != without]
        floors = {name: max((d.get(name, 0.0) for d in others), default=0.0) for name in deviations}
        beyond = [(n, d, floors[n]) for n, d in deviations.items() if d > tolerance and d > floors[n]]
        return sorted(beyond, key=lambda row: -row[1])

    def beyond_the_others(self, tolerance: float) -> list[int]:
        """Per order, how many of its values are beyond ``tolerance`` and beyond the other orders'
        floor: how often another sample of the same rounding noise leaves the floor's range (about
        one value in ``orders`` of those beyond the tolerance, the chance that one of ``orders``
        exchangeable samples is the largest)."""
        return [len(self.beyond(d, tolerance, without=i)) for i, d in enumerate(self.per_order)]


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
    per_order = []
    for order in permutations:
        _, actual, other_final, _ = _run(
            graph, fetches, _reordered(feeds, order, batch_size), steps, config, target, start
        )
        deviations = _deviations(graph, fetches, expected, actual, final, other_final, scalars_only=True)
        per_order.append(deviations)
        for name, value in deviations.items():
            floor[name] = max(floor.get(name, 0.0), value)
            if value >= worst:
                worst, where = value, f"{name} (order {[int(i) for i in order]})"
    return ReorderingFloor(worst, where, floor, len(permutations), per_order)


@dataclass
class StepCheck:
    """One training step of the rewrite started from the unsplit graph's weights before that step
    (teacher forcing), against the unsplit graph's own step: its largest deviation over the step's
    fetched values and every weight after it, and, when measured, the same step's reordering floor
    (the largest deviation of the unsplit graph's step fed its batch in other orders, from the same
    weights)."""

    step: int
    deviation: float
    worst: str
    floor: float | None = None
    floor_worst: str = ""


def compare_steps(
    graph: Any,
    plan: SplitPlan,
    fetches: Sequence[str],
    feeds: Mapping[str, Any],
    *,
    steps: int,
    config: Any,
    target: str = "",
    batch_size: int,
    floor_above: float = math.inf,
    orders: int = 23,
) -> list[StepCheck]:
    """Each of ``steps`` training steps of ``plan``'s rewrite taken from the unsplit graph's state
    along the unsplit trajectory: what the rewrite computes in one step, free of the amplification
    of earlier differences over a chaotic training run. A step deviating more than ``floor_above``
    gets its reordering floor over ``orders`` other orders of the batch (:func:`batch_orders`)."""
    import tensorflow as tf

    rewritten, _ = split_graph(plan, graph, batch_size)
    permuted = [(order, _reordered(feeds, order, batch_size)) for order in batch_orders(batch_size, orders)]
    graphs = (graph, rewritten, graph)
    sessions = [tf.compat.v1.Session(target, graph=g, config=config) for g in graphs]
    unsplit, split, control = sessions
    variables, split_variables = _variables(graph), _variables(rewritten)
    checks = []
    try:
        for session, g in zip(sessions, graphs):
            session.run(default_initializers(g))
        for step in range(1, steps + 1):
            before = unsplit.run(variables)
            expected = [unsplit.run(list(fetches), dict(feeds))], unsplit.run(variables)
            _assign(split, split_variables, before)
            actual = [split.run(list(fetches), dict(feeds))], split.run(split_variables)
            check = StepCheck(step, *_worst(graph, fetches, expected, actual))
            if check.deviation > floor_above:
                for order, reordered in permuted:
                    _assign(control, variables, before)
                    other = [control.run(list(fetches), reordered)], control.run(variables)
                    value, where = _worst(graph, fetches, expected, other)
                    if check.floor is None or value >= check.floor:
                        check.floor, check.floor_worst = value, f"{where} (order {[int(i) for i in order]})"
            checks.append(check)
    finally:
        for session in sessions:
            session.close()
    return checks


def _worst(
    graph: Any,
    fetches: Sequence[str],
    expected: tuple[list[Any], list[Any]],
    actual: tuple[list[Any], list[Any]],
) -> tuple[float, str]:
    """The largest deviation of one step's ``(fetched values, weights after it)`` and where."""
    deviations = _deviations(
        graph, fetches, expected[0], actual[0], expected[1], actual[1], scalars_only=False
    )
    value, where = max(((d, name) for name, d in deviations.items()), default=(0.0, ""))
    return value, where.replace(" at step 1", "").replace(" after step 1", "")


def _reordered(feeds: Mapping[str, Any], order: np.ndarray, batch_size: int) -> dict[str, Any]:
    """Every fed tensor leading with ``batch_size`` rows, its rows in ``order``."""
    return {
        name: np.asarray(value)[order] if np.ndim(value) and len(value) == batch_size else value
        for name, value in feeds.items()
    }
