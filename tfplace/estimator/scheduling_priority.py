"""The scheduling priority of the threads that run the profiled steps.

On a machine whose cores other processes also want, Linux's fair scheduler gives the runnable
threads of a core CPU time in proportion to weights set by their nice values (the kernel's
``sched_prio_to_weight``: 1024 at nice 0, 29154 at nice -15), and a waking thread of a much larger
weight preempts the running one at once. At the profiler's nice value, :data:`PROFILING_NICENESS`,
TensorFlow's threads get about 97% of a core that a process at nice 0 also wants, so an op's
traced time is the op's own rather than a share of the load's. The statistics
(:mod:`tfplace.estimator.statistics`) cannot recover that from the traces: an op longer than the
scheduler's slice is preempted in nearly every run, and two measurements of the same batch on a
machine with both cores spun differed by 24% weighted by time on the Transformer and 23% on
Tensor Holography (``benchmarks/estimation_accuracy.py --machine=busy``, session 21); with the
profiler at nice -15 beside the same spinners, by 2.1% and 2.5% (session 22,
``results/estimation_accuracy.md``).

Raising a priority needs ``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` that allows the value. Without
either, :func:`raised_priority` leaves every thread as it was and warns (the documented
fallback): the profile is then as noisy as the machine is busy.

Linux keeps a nice value per thread (``setpriority(PRIO_PROCESS, tid, ...)``), and a new thread
starts with its creator's: every thread of the process is set, and threads it starts later inherit
the raised value. No TensorFlow is needed.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, MutableMapping
from pathlib import Path

__all__ = ["NICENESS_RANGE", "PROFILING_NICENESS", "check_niceness", "may_raise_priority", "raised_priority"]

PROFILING_NICENESS = -15
"""The nice value the profiler's threads run at (:attr:`RepeatPolicy.niceness`'s default)."""

NICENESS_RANGE = range(-20, 20)
"""Linux's nice values, from the highest priority to the lowest."""


def check_niceness(niceness: int | None) -> None:
    """Raise ``ValueError`` unless ``niceness`` is one of :data:`NICENESS_RANGE` or None."""
    if niceness is not None and niceness not in NICENESS_RANGE:
        raise ValueError(f"niceness must be in [-20, 19] or None, got {niceness}")


def may_raise_priority(niceness: int) -> bool:
    """Whether this process may set a thread to ``niceness``: tried on the calling thread, which
    is put back at once."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current <= niceness:
        return True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except PermissionError:
        return False
    os.setpriority(os.PRIO_PROCESS, 0, current)
    return True


def _thread_ids(tasks: Path) -> list[int]:
    """The thread ids under a ``/proc/<pid>/task`` directory (none when it is gone)."""
    try:
        return sorted(int(entry.name) for entry in tasks.iterdir() if entry.name.isdigit())
    except OSError:
        return []


def _raise_every_thread(tasks: Path, niceness: int, original: MutableMapping[int, int]) -> None:
    """Set every thread under ``tasks`` whose nice value is above ``niceness`` to it, recording each
    thread's own value in ``original``, until a listing shows no thread not yet seen (one started
    meanwhile by a thread not yet raised). A thread that ended is skipped; a refusal raises
    ``PermissionError``."""
    seen: set[int] = set()
    while fresh := [tid for tid in _thread_ids(tasks) if tid not in seen]:
        for tid in fresh:
            seen.add(tid)
            try:
                current = os.getpriority(os.PRIO_PROCESS, tid)
                if current > niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
            except ProcessLookupError:
                continue
            original[tid] = current


def _restore(tasks: Path, niceness: int, original: MutableMapping[int, int]) -> None:
    """Every thread under ``tasks`` still at ``niceness`` back to its own value (a thread started
    inside the block to the most common of the others'); lowering a priority needs no privilege."""
    if not original:
        return
    values = list(original.values())
    default = max(set(values), key=values.count)
    for tid in _thread_ids(tasks):
        with contextlib.suppress(ProcessLookupError):
            if os.getpriority(os.PRIO_PROCESS, tid) == niceness:
                os.setpriority(os.PRIO_PROCESS, tid, original.get(tid, default))


@contextlib.contextmanager
def raised_priority(tasks: Path, niceness: int | None) -> Iterator[bool]:
    """Every thread of the process whose threads are under ``tasks`` (``/proc/<pid>/task``) at
    ``niceness`` or higher in priority for the block, and back to its own after; yields whether
    they got it.

    ``None`` leaves the priorities alone (yields False). Where raising is not permitted, nothing
    changes, a warning says so, and the block runs (yields False).
    """
    check_niceness(niceness)
    if niceness is None:
        yield False
        return
    original: dict[int, int] = {}
    try:
        _raise_every_thread(tasks, niceness, original)
        raised = True
    except PermissionError:
        _restore(tasks, niceness, original)
        original.clear()
        raised = False
        warnings.warn(
            f"the profiler could not raise its threads' priority to nice {niceness} (that needs "
            "CAP_SYS_NICE or RLIMIT_NICE); on a busy machine its op times carry the load's noise",
            RuntimeWarning,
            stacklevel=3,
        )
    try:
        yield raised
    finally:
        _restore(tasks, niceness, original)
