"""The scheduler's accounting of the threads that run a step's ops: how often they were preempted.

On a machine whose cores other processes also want, the thread that runs the ops gets the core in
slices; an op that is running when its slice ends waits on the runqueue until the thread gets a
core again, and the trace counts that wait as the op's time. Linux keeps, per thread, the
nanoseconds it spent on a CPU and waiting on a runqueue (``/proc/<pid>/task/<tid>/schedstat``: on
CPU, waiting, timeslices; see the kernel's ``Documentation/scheduler/sched-stats.rst``) and how
often it was switched out while it still wanted to run (``nonvoluntary_ctxt_switches`` in
``/proc/<pid>/task/<tid>/status``). Read around a traced step, they say how many preemptions the
step's ops could have suffered and how long they waited in all
(:func:`~tfplace.estimator.statistics.preempted_observations` tells which ops).

The threads read are TensorFlow's own (their names start with ``tf_``: the executor's inter-op
pool ``tf_Compute``, intra-op pools): with one inter-op and one intra-op thread the ops of a step
run on ``tf_Compute`` (checked on Linux 6.18: its CPU time covers the traced ops' time). Where
``/proc`` has no such files (another system), no thread is read and no step looks preempted.

No TensorFlow is needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Preemption", "ThreadTimes", "preemption_between", "tensorflow_threads"]

_TASKS = Path("/proc/self/task")


@dataclass(frozen=True)
class ThreadTimes:
    """One thread's cumulative scheduler accounting, as the kernel reports it."""

    running_ns: int
    """Nanoseconds on a CPU."""
    waiting_ns: int
    """Nanoseconds runnable but waiting on a runqueue."""
    preemptions: int
    """Times it was switched out while it wanted to run (nonvoluntary context switches)."""


@dataclass(frozen=True)
class Preemption:
    """What the scheduler did to the op-running threads between two readings."""

    count: int
    """Preemptions (nonvoluntary context switches), summed over the threads."""
    waiting: float
    """Seconds they waited on a runqueue, summed over the threads."""


def _read_thread(task: Path) -> ThreadTimes | None:
    """``task``'s accounting, or None when the thread ended or the files do not exist."""
    try:
        running, waiting, _slices = (int(v) for v in (task / "schedstat").read_text().split()[:3])
        status = (task / "status").read_text()
    except (OSError, ValueError):
        return None
    preemptions = next(
        (
            int(line.split()[1])
            for line in status.splitlines()
            if line.startswith("nonvoluntary_ctxt_switches")
        ),
        0,
    )
    return ThreadTimes(running, waiting, preemptions)


def tensorflow_threads(tasks: Path = _TASKS) -> dict[int, ThreadTimes]:
    """The accounting of this process's threads whose name starts with ``tf_``, by thread id;
    empty where ``/proc`` does not provide it."""
    try:
        entries = os.listdir(tasks)
    except OSError:
        return {}
    result = {}
    for entry in entries:
        try:
            name = (tasks / entry / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("tf_"):
            times = _read_thread(tasks / entry)
            if times is not None:
                result[int(entry)] = times
    return result


def preemption_between(before: Mapping[int, ThreadTimes], after: Mapping[int, ThreadTimes]) -> Preemption:
    """The preemptions and runqueue wait, between two readings, of the threads that ran in between
    (spent time on a CPU); threads in only one reading are left out."""
    count, waiting = 0, 0
    for tid, end in after.items():
        start = before.get(tid)
        if start is not None and end.running_ns > start.running_ns:
            count += end.preemptions - start.preemptions
            waiting += end.waiting_ns - start.waiting_ns
    return Preemption(count, waiting * 1e-9)
