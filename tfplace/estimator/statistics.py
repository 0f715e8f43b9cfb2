"""Robust per-op statistics over repeated traced steps, and when to stop repeating them.

The profiler (:mod:`tfplace.estimator.profiler`) measures each op's time in several traced steps
per batch size. On a machine shared with other processes a step can be slowed as a whole (the
profiling thread lost its core for a while) or one op can be (preempted while it ran). This module
turns the repeats into one time per op that resists both, and says how many repeats are enough:

- :func:`interleaved_rounds`: the order of the traced steps, ``b1, b2, b4, b1, b2, b4, ...``, so a
  slow phase of the machine is shared by every batch size instead of bending the regression on the
  batch size;
- :func:`kept_steps`: a step whose wall-clock time is more than ``outlier_factor`` times the median
  of the other steps at its batch size is dropped (Tukey's idea of fences, on the median: a
  disturbed step, not a different measurement);
- :func:`location`: per op one of

  - ``"step_quantile"`` (the default, since session 11): each op's own ``lower_fraction``
    quantile (``"lower_quantile"`` below), all scaled by one factor per profile so that the op
    times add up to that quantile of the steps' summed op times. A step is one sample of every op
    at once, and the simulated step is compared with real steps reduced by that quantile
    (``benchmarks/fidelity.py``), so the op times must add up to the quantile of the steps. Each
    op's own quantile does not: an op's fast runs fall in different steps than its neighbours',
    so their sum is below every real step (Jensen's inequality for order statistics), by 3.5% of
    the summed op times on Tensor Holography, 7.7% on the Transformer and 10.6% on the NMT (48
    steps of one session, session 10's data). With each op's own quantile, the simulated steps
    of the Transformer, Tensor Holography and Inception V3 on virtual CPUs were 4.7-8.8% under
    the measured ones; with the ops adding up to the steps' quantile, in the run beside it,
    -4.1% to +1.7%;
  - ``"lower_quantile"`` (the default in session 10): the ``lower_fraction`` quantile of the
    op's time, by Harrell and Davis's estimator (*A new distribution-free quantile estimator*,
    Biometrika 69, 1982): every sorted value weighted by the Beta(q(n+1), (1-q)(n+1)) probability of its slot,
    whose expectation is close to the quantile at any number of values ``n``. Another process
    taking the core, a cache or memory-bandwidth contender, an interrupt: each only adds time to
    an op, so the noise is one-sided and the lower tail is what the op itself costs. A mean of
    the lowest few values is such a statistic too, but where it lies depends on ``n``: the
    Transformer's summed lowest-tenth means over 6, 8, 12, 16, 24 and 48 steps of one session were
    17.58, 17.43, 17.22, 17.12, 17.07, 16.95 ms (the NMT's 5.52 down to 5.09 ms, 8% apart),
    these quantiles 17.46, 17.37, 17.28, 17.26, 17.23, 17.24 ms (the NMT's 5.44 down to 5.25 ms);
    the profiler stops at a number of steps that varies with the model and the batch size, and
    the step it simulates is compared with steps reduced by the same statistic
    (``benchmarks/statistic_vs_steps.py`` measures this);
  - ``"lower_mean"``: the mean of the lowest ``lower_fraction`` of the values (at least two),
    the default before session 10. Chen and Revels (*Robust benchmarking in noisy environments*,
    HPEC 2016)
    show the minimum to be the most robust estimator under such noise; a mean of the lowest few
    averages out the clock's jitter. On this 2-core machine at a load of 13, two measurements of
    Tensor Holography's step (batch 8, 30 steps each) differed by 3.5% weighted by time with it
    against 61% with the median and 83% with the interquartile mean: when most runs of a
    millisecond op are preempted, the median is a preempted run too;
  - ``"trimmed_mean"``: the mean of the central ``1 - 2 * trim`` of the values (Tukey and
    McLaughlin 1963; the interquartile mean for ``trim = 0.25``), robust to symmetric outliers;
  - ``"median"``.

  The precision of a location is measured, not assumed (:func:`split_half_error`): the statistic
  over the even-numbered repeats against the one over the odd-numbered ones. Both halves span the
  whole measurement (the repeats are interleaved in time), and whatever makes an op's repeats
  differ, a slow phase of the machine, an op whose fast runs are rare (two modes), shows up as a
  difference between the halves. The textbook standard errors of trimmed means (Tukey and
  McLaughlin; Wilcox, *Introduction to Robust Estimation and Hypothesis Testing*, 3.2) assume one
  law around the location and winsorize the slow runs away: on the four models at batch 8 (load
  2.5, two sessions of 30 steps) they put the time-weighted error of the mean of the lowest tenth
  after 10 steps at 0.4-1.9%, the split halves at 1.2-3.8% (Tensor Holography with both cores
  spun: 1.4% and 76%, the sessions 11.6%), while the two sessions differed by 5.3-18% weighted
  by time. What remains between sessions (a few percent on ops that do not depend on the batch)
  no number of steps in one session removes;
- :func:`across_sessions`: with :attr:`RepeatPolicy.sessions` above 1 the steps are spread over
  that many sessions, one after another, and an op's time is the mean of its statistic in each,
  its error the standard error of that mean measured between the sessions;
- :func:`without_preemption`: before the statistic, the observations a preemption inflated are
  taken out, by the scheduler's accounting of the thread that ran the ops, read around each step
  (:mod:`tfplace.estimator.thread_accounting`: preemptions and nanoseconds waited on the
  runqueue). With another process on every core the thread gets a core in slices of a few
  milliseconds: an op shorter than a slice is usually clean and the lower tenth finds its clean
  runs, but one near or above a slice is preempted in most or all runs, more often at a larger
  batch (it runs longer), so its lowest tenth grows faster than the op and bends the regression.
  Steps without preemptions count fully; in a step with ``n`` of them the ``n`` ops with the
  largest excess over their own fastest run carry them (:func:`preempted_observations`) and are
  dropped;
- :func:`weighted_relative_error`: the op times' errors summed over the times summed, the
  relative error of a step-time estimate made of them (ops weighted by their time);
  :meth:`RepeatPolicy.done` stops the repeats once it is below ``target_error`` at every batch size
  (or at the most steps).

No TensorFlow is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from tfplace.estimator.scheduling_priority import PROFILING_NICENESS, check_niceness

__all__ = [
    "HALF_DIFFERENCE_TO_ERROR",
    "STATISTICS",
    "STEPS_PER_MINIMUM",
    "RepeatPolicy",
    "Statistic",
    "across_sessions",
    "interleaved_rounds",
    "kept_steps",
    "location",
    "preempted_observations",
    "split_half_error",
    "weighted_relative_error",
    "without_preemption",
]

Statistic = Literal["step_quantile", "lower_quantile", "lower_mean", "trimmed_mean", "median"]

STATISTICS: tuple[Statistic, ...] = (
    "step_quantile",
    "lower_quantile",
    "lower_mean",
    "trimmed_mean",
    "median",
)
"""The statistics :func:`location` takes."""

HALF_DIFFERENCE_TO_ERROR = math.sqrt(math.pi / 2)
"""Half the absolute difference of two half-sample means, times this, estimates the standard error
of the whole sample's mean for normal data (1.2533): see :func:`split_half_error`."""

STEPS_PER_MINIMUM = 2
"""Without a ``max_steps``, a batch size gets at most this many times the fewest traced steps."""


@dataclass(frozen=True)
class RepeatPolicy:
    """How many traced steps the profiler takes per batch size and how it reduces them.

    Attributes
    ----------
    max_steps : int or None
        Most traced steps per batch size (the profiler's ``traced_steps`` is the fewest); ``None``:
        :data:`STEPS_PER_MINIMUM` times the fewest. Exactly ``traced_steps`` steps are taken when
        this is not larger: a fixed count.
    target_error : float
        Stop when :func:`weighted_relative_error` of the op times is at most this at every batch
        size (0: always take ``max_steps``).
    statistic : {"step_quantile", "lower_quantile", "lower_mean", "trimmed_mean", "median"}
        Per-op time over the kept steps (:func:`location`).
    trim : float
        Fraction cut from each end for ``"trimmed_mean"``, in ``[0, 0.5)``.
    lower_fraction : float
        The quantile ``"step_quantile"`` and ``"lower_quantile"`` estimate, and the fraction of
        the lowest values ``"lower_mean"`` averages (at least two), in ``(0, 1]``.
    outlier_factor : float
        A step slower than this times the median of the other steps at its batch size is dropped
        (:func:`kept_steps`); ``math.inf`` keeps every step.
    preemption : bool
        Take out the observations a preemption of the op-running thread inflated, by the
        scheduler's accounting read around each step (:func:`without_preemption`); False keeps
        every observation.
    sessions : int
        Sessions the traced steps are spread over, one after another, each initialized and warmed
        up afresh; an op's time is the mean of its statistic in each (:func:`across_sessions`).
        What differs from one session to the next (the NMT's batch 8: 3.8-6.3% weighted by time
        between two sessions of 30 steps, where 90 steps in one did no better) stays in every
        step of one session and averages out only over sessions (:meth:`per_session`).
    """

    max_steps: int | None = None
    target_error: float = 0.01
    statistic: Statistic = "step_quantile"
    trim: float = 0.25
    lower_fraction: float = 0.1
    outlier_factor: float = 1.5
    preemption: bool = True
    sessions: int = 3
    niceness: int | None = PROFILING_NICENESS

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(
                f"statistic must be one of {', '.join(map(repr, STATISTICS))}, got {self.statistic!r}"
            )
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim must be in [0, 0.5), got {self.trim}")
        if not 0 < self.lower_fraction <= 1:
            raise ValueError(f"lower_fraction must be in (0, 1], got {self.lower_fraction}")
        if self.outlier_factor <= 1:
            raise ValueError(f"outlier_factor must be above 1, got {self.outlier_factor}")
        if self.sessions < 1:
            raise ValueError(f"sessions must be at least 1, got {self.sessions}")
        check_niceness(self.niceness)
        if self.target_error < 0 or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError(
                f"need target_error >= 0 and max_steps >= 1, got {self.target_error}, {self.max_steps}"
            )

    def settings(self) -> dict[str, Any]:
        """The fields as a JSON-serializable mapping (part of the profile cache key)."""
        return {key: (repr(value) if value == math.inf else value) for key, value in asdict(self).items()}

    def most_steps(self, min_steps: int) -> int:
        """The most traced steps per batch size when the fewest is ``min_steps``."""
        most = self.max_steps if self.max_steps is not None else STEPS_PER_MINIMUM * min_steps
        return max(most, min_steps)

    def per_session(self, min_steps: int) -> list[tuple[RepeatPolicy, int]]:
        """The policy of each session that takes steps, and its fewest steps: the most and the
        fewest traced steps per batch size shared out over the :attr:`sessions` as evenly as they
        go (the first sessions take one more where they do not divide), at most one session per
        step. With several sessions each takes at least two steps where its most allows: a
        session stops at the target error measured between its own steps
        (:func:`split_half_error`), which one step does not measure."""
        if self.sessions == 1:
            return [(self, min_steps)]
        most = self.most_steps(min_steps)
        sessions = min(self.sessions, most)
        shares = []
        for index in range(sessions):
            session_most = most // sessions + (index < most % sessions)
            session_fewest = min_steps // sessions + (index < min_steps % sessions)
            fewest = min(max(session_fewest, 2), session_most)
            shares.append((replace(self, max_steps=session_most, sessions=1), fewest))
        return shares

    def done(self, kept: int, taken: int, min_steps: int, relative_error: float) -> bool:
        """Whether a batch size needs no more traced steps: ``taken`` reached the most allowed, or at
        least ``min_steps`` were kept and the time-weighted relative error is at the target."""
        if taken >= self.most_steps(min_steps):
            return True
        return kept >= min_steps and relative_error <= self.target_error


def across_sessions(
    per_session: Sequence[Mapping[str, tuple[float, float]]],
) -> dict[str, tuple[float, float]]:
    """Per op, the mean of its ``(time, error)`` statistic's times over the sessions that ran it,
    with the standard error of that mean measured between them (the sessions' sample standard
    deviation over the square root of their number); an op of one session keeps that session's."""
    ops = sorted({op for session in per_session for op in session})
    result = {}
    for op in ops:
        measured = [session[op] for session in per_session if op in session]
        if len(measured) == 1:
            result[op] = measured[0]
            continue
        times = np.array([time for time, _ in measured])
        result[op] = (float(times.mean()), float(times.std(ddof=1) / math.sqrt(times.size)))
    return result


def interleaved_rounds(batch_sizes: Sequence[int], done: Mapping[int, bool]) -> Iterator[int]:
    """One round of traced steps: every batch size not ``done``, in the order given.

    The profiler calls it again after each round, so a batch size is never measured twice before
    every other unfinished one was measured once.
    """
    return (b for b in batch_sizes if not done.get(b, False))


def kept_steps(wall_times: Sequence[float], outlier_factor: float) -> list[bool]:
    """Which steps to keep: those at most ``outlier_factor`` times the median of the other steps.

    With fewer than three steps there is no median of others to trust and every step is kept.
    """
    times = np.asarray(wall_times, dtype=float)
    if times.size < 3:
        return [True] * int(times.size)
    keep = []
    for i, time in enumerate(times):
        others = np.delete(times, i)
        keep.append(bool(time <= outlier_factor * np.median(others)))
    return keep


def _cuts(
    counts: np.ndarray, statistic: Statistic, trim: float, lower_fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """How many of each row's ``counts`` sorted values the statistic cuts at the low and the high end."""
    if statistic == "lower_mean":
        kept = np.minimum(counts, np.maximum(2, np.ceil(lower_fraction * counts).astype(int)))
        return np.zeros_like(counts), counts - kept
    cut = np.floor(trim * counts).astype(int)
    return cut, cut


def location(
    values: np.ndarray, statistic: Statistic, trim: float = 0.25, lower_fraction: float = 0.1
) -> np.ndarray:
    """The statistic along the last axis of ``values`` (ops x steps); see the module docstring.

    NaN marks an observation that is not there (the op did not run in that step, or the step's
    preemption inflated it: :func:`without_preemption`); each row's statistic is over its other
    values, NaN for a row without any. ``"step_quantile"`` scales the rows of a matrix together
    (:func:`_step_quantile`); of a single row it is ``"lower_quantile"``.
    """
    values = np.asarray(values, dtype=float)
    counts = np.sum(~np.isnan(values), axis=-1)
    if statistic == "step_quantile" and values.ndim == 2:
        return _step_quantile(values, counts, lower_fraction)
    if statistic in ("step_quantile", "lower_quantile"):  # one op: its steps ranked by its times
        return _harrell_davis(values, counts, lower_fraction)
    if statistic == "median":
        middle = np.sort(values, axis=-1)
        upper = np.take_along_axis(middle, np.expand_dims(np.maximum(counts // 2, 0), -1), -1)[..., 0]
        lower = np.take_along_axis(middle, np.expand_dims(np.maximum((counts - 1) // 2, 0), -1), -1)[..., 0]
        return np.where(counts > 0, (upper + lower) / 2, np.nan)
    low, high = _cuts(counts, statistic, trim, lower_fraction)
    ordered = np.nan_to_num(np.sort(values, axis=-1))
    prefix = np.concatenate([np.zeros((*ordered.shape[:-1], 1)), np.cumsum(ordered, axis=-1)], axis=-1)
    end = np.take_along_axis(prefix, np.expand_dims(counts - high, -1), -1)[..., 0]
    start = np.take_along_axis(prefix, np.expand_dims(low, -1), -1)[..., 0]
    taken = counts - high - low
    return np.where(taken > 0, (end - start) / np.maximum(taken, 1), np.nan)


def _harrell_davis(values: np.ndarray, counts: np.ndarray, quantile: float) -> np.ndarray:
    """Harrell and Davis's estimate of ``quantile`` along the last axis of ``values``, each row over
    its ``counts`` values that are not NaN (NaN for a row without any): the ``i``-th smallest of
    ``n`` values weighs ``I_{i/n}(a, b) - I_{(i-1)/n}(a, b)``, ``I`` the regularized incomplete
    beta function, ``a = quantile * (n + 1)``, ``b = (1 - quantile) * (n + 1)``."""
    ordered = np.nan_to_num(np.sort(values, axis=-1))  # NaNs sort last and get no weight
    result = np.full(counts.shape, np.nan)
    for n in np.unique(counts[counts > 0]):
        rows = counts == n
        result[rows] = ordered[rows][..., :n] @ _beta_weights(int(n), quantile)
    return result


def _beta_weights(n: int, quantile: float) -> np.ndarray:
    """Harrell and Davis's weight of the ``i``-th smallest of ``n`` values, ``i = 1..n``."""
    from scipy.special import betainc

    edges = betainc(quantile * (n + 1), (1 - quantile) * (n + 1), np.arange(n + 1) / n)
    return np.diff(edges)  # type: ignore[no-any-return]


def _step_quantile(values: np.ndarray, counts: np.ndarray, quantile: float) -> np.ndarray:
    """Each row's (op's) Harrell-Davis ``quantile``, all scaled by one factor so that the rows add up
    to that quantile of the columns' (steps') totals; an op missing (NaN) from a step counts, in
    that step's total, at its own quantile. The factor is an aggregate over every op and step, so
    an op's time is as precise as its own quantile (Table 5's per-op deviations): each op's
    weighted mean over the steps ranked by their totals also adds up to the steps' quantile, but
    it averages the op's jitter over two or three steps and put the Transformer's predicted op
    times 8.0% off by time at batch 8 against a floor of 3.7% (session 11)."""
    own = _harrell_davis(values, counts, quantile)
    summed = float(np.nansum(own))
    if not values.shape[1] or summed <= 0:
        return own
    totals = np.where(np.isnan(values), np.nan_to_num(own)[:, None], values).sum(axis=0)
    steps = _harrell_davis(totals[None, :], np.array([totals.size]), quantile)[0]
    return own * (steps / summed)  # type: ignore[no-any-return]


def split_half_error(
    values: np.ndarray, statistic: Statistic, trim: float = 0.25, lower_fraction: float = 0.1
) -> np.ndarray:
    """The error of :func:`location` along the last axis of ``values`` (ops x repeats), measured.

    The statistic over the even-numbered repeats and over the odd-numbered ones are two
    measurements of the location from half the repeats each; half their absolute difference,
    times ``sqrt(pi / 2)`` (:data:`HALF_DIFFERENCE_TO_ERROR`), is the standard error of the
    location over all the repeats when the statistic behaves like a mean (the halves' difference
    has twice its standard deviation, and a normal law's mean absolute value is ``sqrt(2 / pi)``
    of it). Nothing is assumed about the law of the repeats, so noise the statistic does not
    remove (an op whose fast runs are rare) shows, where textbook standard errors would not see
    it. 0 with fewer than two repeats, or when a half has no value (NaN: dropped).
    """
    if values.shape[-1] < 2:
        return np.zeros(values.shape[:-1])
    even = location(values[..., 0::2], statistic, trim, lower_fraction)
    odd = location(values[..., 1::2], statistic, trim, lower_fraction)
    return np.nan_to_num(HALF_DIFFERENCE_TO_ERROR * np.abs(even - odd) / 2)


def preempted_observations(times: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Which of ``times`` (ops x steps; NaN where an op did not run) a preemption inflated.

    In step ``s`` the thread running the ops was preempted ``counts[s]`` times
    (:mod:`tfplace.estimator.thread_accounting`); each preemption added its wait on the runqueue,
    milliseconds, to the op that was running. The ``counts[s]`` ops of the step that took longest
    over their own fastest run (a preemption only adds time: the fastest run is the least
    disturbed) are taken as the preempted ones. A preemption that fell between two ops, in the
    executor's own work, then marks an op that was merely slower than its fastest run: that
    drops one of its slower runs, which the lower statistics do not use anyway.
    """
    excess = times - np.fmin.reduce(times, axis=-1)[:, None]
    marked = np.zeros(times.shape, dtype=bool)
    for step, count in enumerate(counts):
        column = np.nan_to_num(excess[:, step], nan=-np.inf)
        slower = np.flatnonzero(column > 0)
        marked[slower[np.argsort(-column[slower], kind="stable")[: max(count, 0)]], step] = True
    return marked


def without_preemption(times: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """``times`` (ops x steps) with the observations a preemption inflated
    (:func:`preempted_observations`) made NaN, so that a statistic is over the clean steps only.

    Steps without preemptions count fully. An op's fastest run is never marked, so every op keeps
    an observation; one preempted in every step (longer than the scheduler gives the thread at a
    time) keeps its least preempted runs.
    """
    times = np.asarray(times, dtype=float)
    return np.where(preempted_observations(times, counts), np.nan, times)


def weighted_relative_error(locations: np.ndarray, errors: np.ndarray) -> float:
    """Summed errors over summed times: each op's relative error weighted by its time
    (0 when there is no time)."""
    total = float(np.sum(locations))
    return float(np.sum(errors)) / total if total > 0 else 0.0
