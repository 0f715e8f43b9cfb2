"""Estimation accuracy of the Standard Evaluation (Celeritas section 6.5.1, Table 5, Figure 5).

The Standard Evaluation profiles a training step at small batch sizes and predicts every op's costs
at a larger one (:class:`~tfplace.estimator.regression.OpCostRegression`). Its accuracy is measured
by profiling the larger batch size too and taking, per op, the relative deviation
``|estimated - measured| / measured`` of

- memory: the bytes of the outputs the op allocates (not those that are an input's buffer) plus
  temporary bytes (the paper: 1.54% on Inception V3),
- compute time (the paper: 7.99% on Inception V3).

Part of a time deviation is not the method's: two measurements of the same batch differ too. With a
second, independent measurement of the target batch (the same procedure again: its own session,
repeats and statistic), the report also gives that **noise floor** and measures the prediction
against both measurements, symmetrically:

- prediction: the deviations of the prediction from measurement 1 and from measurement 2, pooled
  (a mean over both);
- floor: the deviations of measurement 1 from measurement 2 and of 2 from 1, pooled.

The same goes for the time-weighted deviation (summed absolute errors over summed measured times,
both measurements). A prediction averaging several noisy batch sizes can come below the floor: it
compares one noisy value with another, the floor two.

:func:`compare_profiles` compares two profiles without TensorFlow; :func:`estimation_accuracy`
profiles a graph (through the cache) and compares. Ops whose measured value is 0 (or, for time, the
clamping floor :data:`~tfplace.estimator.profiler.TIME_FLOOR`) have no relative deviation: they are
excluded and counted. So are ops whose costs are shape-based estimates in either profile (no trace
reported them), and, for memory only, ops whose output sizes were partly estimated.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tfplace.core.costgraph import allocated_bytes
from tfplace.estimator.profiler import TIME_FLOOR, OpCost, ProfileSet, RepeatPolicy, profile_graph
from tfplace.estimator.regression import OpCostRegression
from tfplace.estimator.row_blocks import RowBlocking, matmul_row_blockings
from tfplace.estimator.statistics import across_sessions
from tfplace.estimator.twins import kernel_twins

__all__ = [
    "AccuracyProfiles",
    "AccuracyReport",
    "DeviationSummary",
    "compare_profiles",
    "compare_step_profiles",
    "estimation_accuracy",
    "load_accuracy_profiles",
    "mean_over_rounds",
    "measure_accuracy_profiles",
    "memory_of",
    "relative_deviations",
    "save_accuracy_profiles",
    "summarize_deviations",
]


@dataclass(frozen=True)
class DeviationSummary:
    """Relative deviations of one quantity over the ops compared.

    Attributes
    ----------
    mean, median : float
        Of the per-op relative deviations (Table 5 reports the mean).
    exact : float
        Fraction of ops estimated exactly (Figure 5's CDF at 0%).
    within_20, within_30 : float
        Fractions of ops within 20% and within 30% (the paper's readings of Figure 5).
    ops : int
        Ops compared.
    excluded_zero : int
        Ops left out because their measured value is zero (or at the time floor).
    """

    mean: float
    median: float
    exact: float
    within_20: float
    within_30: float
    ops: int
    excluded_zero: int


@dataclass(frozen=True)
class AccuracyReport:
    """How well the costs predicted at ``target_batch`` match the costs measured there.

    Attributes
    ----------
    profile_batch_sizes : tuple of int
        The small batch sizes the regression was fitted on.
    target_batch : int
        The batch size predicted and measured.
    step_ops : int
        Ops of the measured step.
    estimated_ops, estimated_outputs : int
        Ops left out because all their costs (or some output sizes) were shape-based estimates.
    memory, time : DeviationSummary
        Per-op relative deviations of memory (outputs + temporary) and of compute time.
    time_weighted_deviation : float
        Summed absolute time error over summed measured time: the error a step-time estimate sees.
    floor_time : DeviationSummary or None
        Per-op relative time deviations between two measurements of the target batch (the noise
        floor), when a second measurement was made; the prediction's ``time`` is then pooled over
        both measurements.
    floor_time_weighted : float
        The floor of ``time_weighted_deviation`` (NaN without a second measurement).
    steps : dict of int to tuple of (int, int)
        Traced steps kept and taken per batch size, small batches then the target's first measurement.
    sum_predicted_time, sum_measured_time : float
        Seconds summed over the ops compared.
    measured_step_seconds : float
        Median wall-clock seconds of a traced step at ``target_batch``.
    time_fits : dict of str to int
        How many ops each time model of the regression fits (``"line"``, ``"convex"``).
    worst : list of (str, str, float, float)
        Ops with the largest absolute time error: (op, time model, predicted s, measured s).
    profiling_seconds, measurement_seconds : float
        Seconds the small-batch profile and the target-batch measurement took (as measured, also
        when read back from the cache).
    from_cache : bool
        Both profiles were read from the cache.
    """

    profile_batch_sizes: tuple[int, ...]
    target_batch: int
    step_ops: int
    estimated_ops: int
    estimated_outputs: int
    memory: DeviationSummary
    time: DeviationSummary
    time_weighted_deviation: float
    sum_predicted_time: float
    sum_measured_time: float
    measured_step_seconds: float
    time_fits: dict[str, int]
    worst: list[tuple[str, str, float, float]]
    profiling_seconds: float
    measurement_seconds: float
    from_cache: bool
    floor_time: DeviationSummary | None = None
    floor_time_weighted: float = float("nan")
    steps: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def floor_ratio(self) -> float:
        """The prediction's mean per-op time deviation over the floor's (NaN without a floor)."""
        if self.floor_time is None or not self.floor_time.mean:
            return float("nan")
        return self.time.mean / self.floor_time.mean

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form."""
        return asdict(self)


def memory_of(cost: OpCost) -> int:
    """The memory the deviation is taken on: bytes of the outputs the op allocates (every slot but
    its aliased ones) plus temporary bytes."""
    return allocated_bytes(cost.output_sizes, cost.aliased_outputs, cost.temporary_bytes)


def relative_deviations(
    predicted: Mapping[str, OpCost],
    measured: Mapping[str, OpCost],
    ops: Sequence[str],
    value: Callable[[OpCost], float],
    zero: float,
) -> tuple[np.ndarray, int]:
    """Relative deviations of ``value(cost)`` over ``ops`` and how many ops had a measured value
    ``<= zero`` (and were left out)."""
    estimated = np.array([value(predicted[op]) for op in ops], dtype=float)
    actual = np.array([value(measured[op]) for op in ops], dtype=float)
    kept = actual > zero
    return np.abs(estimated[kept] - actual[kept]) / actual[kept], int((~kept).sum())


def summarize_deviations(relative: np.ndarray, excluded_zero: int) -> DeviationSummary:
    """Mean, median and the CDF readings of per-op relative deviations (NaN when there are none)."""
    if relative.size == 0:
        nan = float("nan")
        return DeviationSummary(nan, nan, nan, nan, nan, 0, excluded_zero)
    return DeviationSummary(
        mean=float(relative.mean()),
        median=float(np.median(relative)),
        exact=float((relative < 1e-9).mean()),
        within_20=float((relative <= 0.2).mean()),
        within_30=float((relative <= 0.3).mean()),
        ops=int(relative.size),
        excluded_zero=excluded_zero,
    )


def _time_deviations(
    estimates: Sequence[Mapping[str, OpCost]], references: Sequence[Mapping[str, OpCost]], ops: Sequence[str]
) -> tuple[DeviationSummary, float]:
    """Per-op relative time deviations of each of ``estimates`` against the reference beside it,
    pooled, and the pooled time-weighted deviation. ``ops`` counts the ops once."""
    pooled, excluded, error, total = [], 0, 0.0, 0.0
    for estimate, reference in zip(estimates, references):
        relative, zero = relative_deviations(estimate, reference, ops, lambda c: c.compute_time, TIME_FLOOR)
        pooled.append(relative)
        excluded += zero
        error += sum(abs(estimate[op].compute_time - reference[op].compute_time) for op in ops)
        total += sum(reference[op].compute_time for op in ops)
    weighted = error / total if total else float("nan")
    summary = summarize_deviations(np.concatenate(pooled), excluded // len(references))
    return replace(summary, ops=summary.ops // len(references)), weighted


def compare_profiles(
    small: ProfileSet,
    large: ProfileSet,
    target_batch: int,
    *,
    second: ProfileSet | None = None,
    worst: int = 10,
    regression: OpCostRegression | None = None,
    row_blockings: Mapping[str, RowBlocking] | None = None,
    twins: Sequence[Sequence[str]] = (),
) -> AccuracyReport:
    """Fit the regression on ``small``, predict ``target_batch`` and compare with ``large``'s costs there.

    Parameters
    ----------
    small : ProfileSet
        At least two small batch sizes.
    large : ProfileSet
        Measured at ``target_batch`` (other batch sizes are ignored).
    target_batch : int
    second : ProfileSet, optional
        A second, independent measurement at ``target_batch``: the time deviations are then pooled
        over both measurements and the report gives the noise floor (module docstring).
    worst : int
        How many ops with the largest absolute time error to list.
    regression : OpCostRegression, optional
        The estimator to fit (default ``OpCostRegression()``).
    row_blockings : mapping of str to RowBlocking, optional
    twins : sequence of sequence of str, optional
        Passed to :meth:`OpCostRegression.fit`.

    Returns
    -------
    AccuracyReport
    """
    regression = (regression or OpCostRegression()).fit(small, row_blockings, twins)
    predicted = regression.predict(target_batch)
    measured = large.costs[target_batch]
    estimated = set(small.estimated_ops) | set(large.estimated_ops)
    partial = set(small.estimated_outputs) | set(large.estimated_outputs)
    if second is not None:
        estimated |= set(second.estimated_ops)
    ops = sorted(
        op for op in measured if op not in estimated and (second is None or op in second.costs[target_batch])
    )
    memory_ops = [op for op in ops if op not in partial]
    memory, memory_zero = relative_deviations(predicted, measured, memory_ops, memory_of, 0)
    references = [measured] if second is None else [measured, second.costs[target_batch]]
    time, weighted = _time_deviations([predicted] * len(references), references, ops)
    floor, floor_weighted = None, float("nan")
    if second is not None:
        floor, floor_weighted = _time_deviations(references, references[::-1], ops)
    errors = {op: abs(predicted[op].compute_time - measured[op].compute_time) for op in ops}
    fit_of = dict(zip(regression.ops_, regression.time_fit_))
    largest = sorted(ops, key=lambda op: -errors[op])[:worst]
    return AccuracyReport(
        profile_batch_sizes=tuple(small.batch_sizes),
        target_batch=target_batch,
        step_ops=len(measured),
        estimated_ops=len(estimated),
        estimated_outputs=len(partial),
        memory=summarize_deviations(memory, memory_zero),
        time=time,
        time_weighted_deviation=weighted,
        sum_predicted_time=sum(predicted[op].compute_time for op in ops),
        sum_measured_time=sum(measured[op].compute_time for op in ops),
        measured_step_seconds=large.step_times.get(target_batch, float("nan")),
        time_fits=dict(Counter(regression.time_fit_)),
        worst=[(op, fit_of[op], predicted[op].compute_time, measured[op].compute_time) for op in largest],
        profiling_seconds=small.profiling_seconds,
        measurement_seconds=large.profiling_seconds,
        from_cache=small.from_cache and large.from_cache,
        floor_time=floor,
        floor_time_weighted=floor_weighted,
        steps={**small.steps, **large.steps},
    )


def mean_over_rounds(profiles: Sequence[ProfileSet]) -> ProfileSet:
    """One measurement from ``profiles`` of the same batch sizes, each of one session, taken in
    turns with other measurements (:func:`estimation_accuracy`): per op the mean of their times
    and kernel times, the standard error of the time measured between them
    (:func:`~tfplace.estimator.statistics.across_sessions`, as the profiler combines its own
    sessions), the memory of the first profile that has the op; the steps added up, each step
    time the median over the profiles, the profiling seconds summed.

    Raises
    ------
    ValueError
        No profiles, or profiles of different batch sizes.
    """
    if not profiles:
        raise ValueError("a mean over rounds needs at least one profile")
    first = profiles[0]
    if any(p.batch_sizes != first.batch_sizes for p in profiles):
        raise ValueError(f"rounds of different batch sizes: {[list(p.batch_sizes) for p in profiles]}")
    costs: dict[int, dict[str, OpCost]] = {}
    errors: dict[int, dict[str, float]] = {}
    for b in first.batch_sizes:
        measured = across_sessions(
            [
                {
                    op: (cost.compute_time, p.time_errors.get(b, {}).get(op, 0.0))
                    for op, cost in p.costs[b].items()
                }
                for p in profiles
            ]
        )
        costs[b] = {}
        for op, (seconds, _) in measured.items():
            each = [p.costs[b][op] for p in profiles if op in p.costs[b]]
            kernels = [cost.kernel_time for cost in each if cost.kernel_time is not None]
            kernel = float(np.mean(kernels)) if len(kernels) == len(each) else None
            costs[b][op] = replace(each[0], compute_time=seconds, kernel_time=kernel)
        errors[b] = {op: measured[op][1] for op in {op for p in profiles for op in p.time_errors.get(b, {})}}
    return replace(
        first,
        costs=costs,
        estimated_ops=tuple(sorted({op for p in profiles for op in p.estimated_ops})),
        estimated_outputs=tuple(sorted({op for p in profiles for op in p.estimated_outputs})),
        step_times=_medians([p.step_times for p in profiles]),
        untraced_step_times={
            kind: _medians([p.untraced_step_times.get(kind, {}) for p in profiles])
            for kind in {kind for p in profiles for kind in p.untraced_step_times}
        },
        time_errors=errors,
        steps={
            b: (
                sum(p.steps.get(b, (0, 0))[0] for p in profiles),
                sum(p.steps.get(b, (0, 0))[1] for p in profiles),
            )
            for b in first.batch_sizes
        },
        key="",
        profiling_seconds=sum(p.profiling_seconds for p in profiles),
        from_cache=False,
    )


def _medians(values: Sequence[Mapping[int, float]]) -> dict[int, float]:
    """Per key of any of ``values``, the median of the values that have it."""
    keys = sorted({key for each in values for key in each})
    return {key: float(np.median([each[key] for each in values if key in each])) for key in keys}


def estimation_accuracy(
    graph: Any,
    fetches: Any,
    feed_fn: Callable[[int], Mapping[Any, Any]],
    *,
    profile_batch_sizes: Sequence[int] = (1, 2, 4),
    target_batch: int = 8,
    init_op: Any = None,
    warmup_steps: int = 2,
    traced_steps: int = 5,
    cache_dir: str | os.PathLike[str] | None = None,
    worst: int = 10,
    floor: bool = True,
    repeats: RepeatPolicy | None = None,
    regression: OpCostRegression | None = None,
    matmul_row_blocks: Mapping[str, int] | None = None,
    pool_twins: bool = True,
    interleaved: bool = True,
) -> AccuracyReport:
    """Profile ``graph`` at ``profile_batch_sizes`` and at ``target_batch`` and compare (TensorFlow).

    The profiles go through :func:`~tfplace.estimator.profiler.profile_graph` with the same
    settings as :func:`tfplace.api.estimate_costs`. With ``floor``, ``target_batch`` is measured a
    second time, by the same procedure in sessions of its own and never from the cache, for the
    noise floor, in the order target, small batches, target again.

    With ``interleaved`` (and ``floor``) the three measurements take their sessions in turns: each
    of ``repeats``' sessions (:meth:`~tfplace.estimator.statistics.RepeatPolicy.per_session`) is a
    round of one session of each, and each measurement is the mean of its rounds
    (:func:`mean_over_rounds`), as the profiler averages its own sessions. This VM's speed moves
    by up to a quarter over minutes: measured one after the other, the NMT's two measurements of
    batch 8, eight sessions each, differed by 11.2% weighted by time (session 35), where its
    sessions within one measurement differed by 4%. Without ``interleaved`` the measurements are
    taken one after the other, and with the same ``cache_dir`` the small-batch profile of a
    placement is reused (the rounds are never cached: each is one session of the same settings).

    Parameters
    ----------
    graph, fetches, feed_fn, init_op, warmup_steps, traced_steps, cache_dir, repeats
        See :func:`~tfplace.estimator.profiler.profile_graph`.
    profile_batch_sizes : sequence of int
        At least two batch sizes, all smaller than ``target_batch``.
    target_batch : int
    worst : int
        How many ops with the largest absolute time error to list.
    floor : bool
        Measure ``target_batch`` twice and report the noise floor.
    regression : OpCostRegression, optional
        The estimator to fit (default ``OpCostRegression()``).
    matmul_row_blocks : mapping of str to int, optional
        The machine's ``MatMul`` row blocks by variant
        (:attr:`~tfplace.core.device_model.CpuCalibration.matmul_row_blocks`); ``None``: 1 for all.
    pool_twins : bool
        Fit each group of kernel twins on its pooled times
        (:func:`~tfplace.estimator.twins.kernel_twins`), as :func:`tfplace.api.estimate_costs`
        does; False fits each op alone.
    interleaved : bool
        Take the measurements' sessions in turns (above).

    Returns
    -------
    AccuracyReport
    """
    profiles = measure_accuracy_profiles(
        graph,
        fetches,
        feed_fn,
        profile_batch_sizes=profile_batch_sizes,
        target_batch=target_batch,
        init_op=init_op,
        warmup_steps=warmup_steps,
        traced_steps=traced_steps,
        cache_dir=cache_dir,
        floor=floor,
        repeats=repeats,
        interleaved=interleaved,
    )
    return compare_step_profiles(
        graph,
        fetches,
        profiles,
        target_batch,
        worst=worst,
        regression=regression,
        matmul_row_blocks=matmul_row_blocks,
        pool_twins=pool_twins,
    )


class AccuracyProfiles(NamedTuple):
    """What :func:`measure_accuracy_profiles` measured: the small batch sizes, the target batch,
    and the target batch again (``None`` without a floor)."""

    small: ProfileSet
    large: ProfileSet
    second: ProfileSet | None


def measure_accuracy_profiles(
    graph: Any,
    fetches: Any,
    feed_fn: Callable[[int], Mapping[Any, Any]],
    *,
    profile_batch_sizes: Sequence[int],
    target_batch: int,
    init_op: Any = None,
    warmup_steps: int = 2,
    traced_steps: int = 5,
    cache_dir: str | os.PathLike[str] | None = None,
    floor: bool = True,
    repeats: RepeatPolicy | None = None,
    interleaved: bool = True,
) -> AccuracyProfiles:
    """The profiles :func:`estimation_accuracy` compares, measured as it describes.

    Raises
    ------
    ValueError
        Fewer than two profile batch sizes, or one not below ``target_batch``.
    """
    if len(set(profile_batch_sizes)) < 2 or max(profile_batch_sizes) >= target_batch:
        raise ValueError(
            f"need two or more profile batch sizes below the target {target_batch}, "
            f"got {list(profile_batch_sizes)}"
        )

    def profile(
        batch_sizes: Sequence[int],
        cache: str | os.PathLike[str] | None = cache_dir,
        policy: RepeatPolicy | None = repeats,
        fewest: int = traced_steps,
    ) -> ProfileSet:
        return profile_graph(
            graph,
            fetches,
            feed_fn,
            batch_sizes,
            warmup_steps=warmup_steps,
            traced_steps=fewest,
            init_op=init_op,
            cache_dir=cache,
            repeats=policy,
        )

    second: ProfileSet | None
    if interleaved and floor:
        rounds = [
            tuple(
                profile(sizes, None, each, fewest)
                for sizes in ([target_batch], profile_batch_sizes, [target_batch])
            )
            for each, fewest in (repeats or RepeatPolicy()).per_session(traced_steps)
        ]
        large, small, second = (mean_over_rounds(taken) for taken in zip(*rounds))
    else:
        large = profile([target_batch])
        small = profile(profile_batch_sizes)
        second = profile([target_batch], cache=None) if floor else None
    return AccuracyProfiles(small, large, second)


def save_accuracy_profiles(
    profiles: AccuracyProfiles, loads: tuple[float, float], seconds: float, path: str | os.PathLike[str]
) -> None:
    """Write ``profiles`` (each :meth:`~tfplace.estimator.profiler.ProfileSet.to_dict`), the load
    averages around their measurement and the seconds it took, as gzip-compressed JSON, so that
    they can be fitted again (:func:`load_accuracy_profiles`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "small": profiles.small.to_dict(),
        "large": profiles.large.to_dict(),
        "second": None if profiles.second is None else profiles.second.to_dict(),
    }
    document.update(loads=list(loads), seconds=seconds)
    path.write_bytes(gzip.compress(json.dumps(document).encode(), mtime=0))


def load_accuracy_profiles(
    path: str | os.PathLike[str],
) -> tuple[AccuracyProfiles, tuple[float, float], float]:
    """What :func:`save_accuracy_profiles` wrote: the profiles, the load averages, the seconds."""
    document = json.loads(gzip.decompress(Path(path).read_bytes()))
    second = document["second"]
    profiles = AccuracyProfiles(
        ProfileSet.from_dict(document["small"]),
        ProfileSet.from_dict(document["large"]),
        None if second is None else ProfileSet.from_dict(second),
    )
    before, after = document["loads"]
    return profiles, (float(before), float(after)), float(document["seconds"])


def compare_step_profiles(
    graph: Any,
    fetches: Any,
    profiles: AccuracyProfiles,
    target_batch: int,
    *,
    worst: int = 10,
    regression: OpCostRegression | None = None,
    matmul_row_blocks: Mapping[str, int] | None = None,
    pool_twins: bool = True,
) -> AccuracyReport:
    """:func:`compare_profiles` of a TensorFlow ``graph``'s step, imported once for its
    ``MatMul`` row blockings (:func:`~tfplace.estimator.row_blocks.matmul_row_blockings`) and,
    with ``pool_twins``, its kernel twins (:func:`~tfplace.estimator.twins.kernel_twins`)."""
    from tfplace.tf_graph.importer import import_graph

    step = import_graph(graph, fetches).cost_graph
    return compare_profiles(
        profiles.small,
        profiles.large,
        target_batch,
        second=profiles.second,
        worst=worst,
        regression=regression,
        row_blockings=matmul_row_blockings(step, profiles.small, matmul_row_blocks or {}),
        twins=kernel_twins(step, profiles.small) if pool_twins else (),
    )
