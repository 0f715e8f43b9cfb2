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
- :func:`location` and :func:`standard_error`: per op one of

  - ``"lower_mean"`` (the default): the mean of the lowest ``lower_fraction`` of the values (at
    least two). Another process taking the core, a cache or memory-bandwidth contender, an
    interrupt: each only adds time to an op, so the noise is one-sided and the lower tail is what
    the op itself costs. Chen and Revels (*Robust benchmarking in noisy environments*, HPEC 2016)
    show the minimum to be the most robust estimator under such noise; a mean of the lowest few
    averages out the clock's jitter. On this 2-core machine at a load of 13, two measurements of
    Tensor Holography's step (batch 8, 30 steps each) differed by 3.5% weighted by time with it
    against 61% with the median and 83% with the interquartile mean: when most runs of a
    millisecond op are preempted, the median is a preempted run too;
  - ``"trimmed_mean"``: the mean of the central ``1 - 2 * trim`` of the values (Tukey and
    McLaughlin 1963; the interquartile mean for ``trim = 0.25``), robust to symmetric outliers;
  - ``"median"``.

  Standard errors: for the trimmed means (symmetric or, for ``"lower_mean"``, cut at one end) the
  standard deviation of the values winsorized at the cuts over ``(kept / n) * sqrt(n)``
  (Tukey-McLaughlin; Wilcox, *Introduction to Robust Estimation and Hypothesis Testing*, section
  3.2), for the median ``1.2533 * 1.4826 * MAD / sqrt(n)`` (the median's asymptotic efficiency
  under a normal law, with the MAD as the scale);
- :func:`weighted_relative_error`: the op times' standard errors summed over the times summed, the
  relative error of a step-time estimate made of them (ops weighted by their time);
  :meth:`RepeatPolicy.done` stops the repeats once it is below ``target_error`` at every batch size
  (or at the most steps).

No TensorFlow is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "MEDIAN_EFFICIENCY",
    "STEPS_PER_MINIMUM",
    "RepeatPolicy",
    "Statistic",
    "interleaved_rounds",
    "kept_steps",
    "location",
    "standard_error",
    "weighted_relative_error",
]

Statistic = Literal["lower_mean", "trimmed_mean", "median"]

MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
"""The median's standard error over the mean's for normal data (1.2533)."""

STEPS_PER_MINIMUM = 2
"""Without a ``max_steps``, a batch size gets at most this many times the fewest traced steps."""

_MAD_TO_SIGMA = 1.4826
"""The median absolute deviation times this estimates a normal law's standard deviation."""


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
    statistic : {"lower_mean", "trimmed_mean", "median"}
        Per-op time over the kept steps (:func:`location`).
    trim : float
        Fraction cut from each end for ``"trimmed_mean"``, in ``[0, 0.5)``.
    lower_fraction : float
        Fraction of the lowest values ``"lower_mean"`` averages (at least two), in ``(0, 1]``.
    outlier_factor : float
        A step slower than this times the median of the other steps at its batch size is dropped
        (:func:`kept_steps`); ``math.inf`` keeps every step.
    """

    max_steps: int | None = None
    target_error: float = 0.01
    statistic: Statistic = "lower_mean"
    trim: float = 0.25
    lower_fraction: float = 0.1
    outlier_factor: float = 1.5

    def __post_init__(self) -> None:
        if self.statistic not in ("lower_mean", "trimmed_mean", "median"):
            raise ValueError(
                f"statistic must be 'lower_mean', 'trimmed_mean' or 'median', got {self.statistic!r}"
            )
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim must be in [0, 0.5), got {self.trim}")
        if not 0 < self.lower_fraction <= 1:
            raise ValueError(f"lower_fraction must be in (0, 1], got {self.lower_fraction}")
        if self.outlier_factor <= 1:
            raise ValueError(f"outlier_factor must be above 1, got {self.outlier_factor}")
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

    def done(self, kept: int, taken: int, min_steps: int, relative_error: float) -> bool:
        """Whether a batch size needs no more traced steps: ``taken`` reached the most allowed, or at
        least ``min_steps`` were kept and the time-weighted relative error is at the target."""
        if taken >= self.most_steps(min_steps):
            return True
        return kept >= min_steps and relative_error <= self.target_error


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


def _cuts(n: int, statistic: Statistic, trim: float, lower_fraction: float) -> tuple[int, int]:
    """How many of ``n`` sorted values the statistic cuts at the low and at the high end."""
    if statistic == "lower_mean":
        kept = min(n, max(2, math.ceil(lower_fraction * n)))
        return 0, n - kept
    cut = math.floor(trim * n)
    return cut, cut


def location(
    values: np.ndarray, statistic: Statistic, trim: float = 0.25, lower_fraction: float = 0.1
) -> np.ndarray:
    """The statistic along the last axis of ``values`` (ops x steps); see the module docstring."""
    if statistic == "median":
        return np.median(values, axis=-1)
    n = values.shape[-1]
    low, high = _cuts(n, statistic, trim, lower_fraction)
    return np.sort(values, axis=-1)[..., low : n - high].mean(axis=-1)


def standard_error(
    values: np.ndarray, statistic: Statistic, trim: float = 0.25, lower_fraction: float = 0.1
) -> np.ndarray:
    """The standard error of :func:`location` along the last axis (0 for a single value)."""
    n = values.shape[-1]
    if n < 2:
        return np.zeros(values.shape[:-1])
    if statistic == "median":
        mad = np.median(np.abs(values - np.median(values, axis=-1, keepdims=True)), axis=-1)
        return MEDIAN_EFFICIENCY * _MAD_TO_SIGMA * mad / math.sqrt(n)
    low, high = _cuts(n, statistic, trim, lower_fraction)
    ordered = np.sort(values, axis=-1)
    winsorized = np.clip(ordered, ordered[..., low : low + 1], ordered[..., n - 1 - high : n - high])
    return np.std(winsorized, axis=-1, ddof=1) / ((n - low - high) / n * math.sqrt(n))


def weighted_relative_error(locations: np.ndarray, errors: np.ndarray) -> float:
    """Summed standard errors over summed times: each op's relative error weighted by its time
    (0 when there is no time)."""
    total = float(np.sum(locations))
    return float(np.sum(errors)) / total if total > 0 else 0.0
