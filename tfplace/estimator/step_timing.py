"""Timing whole steps as a training job runs them, and reducing the times as profiles are reduced.

Shared by the calibrations (:mod:`tfplace.estimator.calibration`,
:mod:`tfplace.estimator.feed_calibration`) and ``benchmarks/fidelity.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["UNTIMED_STEPS", "WARM_STEPS", "back_to_back_seconds", "step_statistic", "timed_step"]

WARM_STEPS = 2
"""Untraced steps timed in a row after :data:`UNTIMED_STEPS` untimed steps of the same graph
(:func:`~tfplace.estimator.calibration.time_traced_and_untraced`). A training job runs its steps back to back; a step that follows
another graph's step (the traced chain's, in turns) starts with that graph's kernels and tensors in
the caches and, on a worker, its threads asleep. Timed right after the traced step, the loopback
per-op overhead came out +0.18 us (session 8); timed back to back, the chains' slope was -0.22 to
-0.38 us on a worker and -0.28 to -0.41 us in-process, and the small NMT's own step needed -0.59 to
-0.81 and -0.31 to -0.49 us (three rounds, session 9)."""

UNTIMED_STEPS = 8
"""Untraced steps run untimed before :data:`WARM_STEPS` timed ones. After a traced step on the
profiling worker, this process's steps stay slow for several steps (``benchmarks/steps_after_switch.py``,
the lower quartile by position, session 28): the small NMT 8.1, 7.1, 6.4, 6.2 ms and then
6.1-6.5 in one run, 8.1, 7.6, 7.1, 6.9, 6.7 and then 6.4-6.7 in another; a 1,200-op chain of
width 256 7.1, 5.4, 5.1, 5.0, 5.0, 4.7, 4.6 and then 4.3-4.7 ms. The steps a fidelity run keeps
(the tenth quantile of blocks of tens of steps) are of the steady state; with one untimed step
(sessions 9-27) the calibration timed the second and third, 5-25% slower."""


def back_to_back_seconds(
    session: Any,
    fetch: Any,
    feeds: Mapping[str, Any] | None = None,
    steps: int = WARM_STEPS,
    untimed: int = UNTIMED_STEPS,
) -> list[float]:
    """The seconds of ``steps`` steps of ``session`` timed back to back after ``untimed`` untimed
    steps, as a training job runs them in its steady state (:data:`WARM_STEPS`,
    :data:`UNTIMED_STEPS`)."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if untimed < 0:
        raise ValueError(f"untimed steps must be at least 0, got {untimed}")
    for _ in range(untimed):
        session.run(fetch, feeds)
    return [timed_step(session, fetch, feeds) for _ in range(steps)]


def timed_step(session: Any, fetch: Any, feeds: Mapping[str, Any] | None = None) -> float:
    """Seconds one step of ``session`` takes, wall clock."""
    start = time.perf_counter()
    session.run(fetch, feeds)
    return time.perf_counter() - start


def step_statistic(seconds: Sequence[float]) -> float:
    """The profiler's statistic of whole steps' times (the default
    :class:`~tfplace.estimator.statistics.RepeatPolicy`'s, the tenth quantile): what an untraced
    step takes when nothing slows it, reduced as the traced steps' op times are
    (:func:`~tfplace.estimator.calibration.profiled_sum`) and as ``benchmarks/fidelity.py`` reduces the real steps it compares the
    simulated one with."""
    from tfplace.estimator.statistics import RepeatPolicy, location

    policy = RepeatPolicy()
    values = np.asarray(seconds, dtype=float)[None, :]
    return float(location(values, policy.statistic, policy.trim, policy.lower_fraction)[0])
