"""The scheduler's accounting of the threads that run a step's ops: how often they were preempted.

On a machine whose cores other processes also want, the thread that runs the ops gets the core in
slices; an op that is running when its slice ends waits on the runqueue until the thread gets a
core again, and the trace counts that wait as the op's time. Linux keeps, per thread, the
nanoseconds it spent on a CPU (``/proc/<pid>/task/<tid>/schedstat``: on CPU, waiting on a
runqueue, timeslices; see the kernel's ``Documentation/scheduler/sched-stats.rst``) and how often
it was switched out while it still wanted to run (``nonvoluntary_ctxt_switches`` in
``/proc/<pid>/task/<tid>/status``). Read around a traced step, they say how many preemptions the
step's ops could have suffered (:func:`~tfplace.estimator.statistics.preempted_observations`
tells which ops). What a preemption costs varies too much to subtract it: on this machine under
load, one step's mean wait per preemption was 12 ms while a 4 ms op preempted once took 4 ms
more, so preempted runs are dropped, not corrected.

The threads read are TensorFlow's own (their names start with ``tf_``: the executor's inter-op
pool ``tf_Compute``, intra-op pools): with one inter-op and one intra-op thread the ops of a step
run on ``tf_Compute`` (checked on Linux 6.18: its nanoseconds on a CPU and on the runqueue
made up a traced step, 166 + 303 ms of a 469 ms step of the Transformer under load). Where
``/proc`` has no such files (another system), no thread is read and no step looks preempted.

No TensorFlow is needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OWN_TASKS", "ThreadTimes", "named_threads", "preemptions_between", "tensorflow_threads"]

OWN_TASKS = Path("/proc/self/task")
"""This process's threads; another process's are ``/proc/<pid>/task``."""


@dataclass(frozen=True)
class ThreadTimes:
    """One thread's cumulative scheduler accounting, as the kernel reports it."""

    running_ns: int
    """Nanoseconds on a CPU."""
    preemptions: int
    """Times it was switched out while it wanted to run (nonvoluntary context switches)."""


def _read_thread(task: Path) -> ThreadTimes | None:
    """``task``'s accounting, or None when the thread ended or the files do not exist."""
    try:
        running = int((task / "schedstat").read_text().split()[0])
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
    return ThreadTimes(running, preemptions)


def named_threads(tasks: Path = OWN_TASKS) -> dict[int, tuple[str, ThreadTimes]]:
    """The name and accounting of every thread of ``tasks`` (by default this process's), by thread
    id; empty where ``/proc`` does not provide it."""
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
        times = _read_thread(tasks / entry)
        if times is not None:
            result[int(entry)] = (name, times)
    return result


def tensorflow_threads(tasks: Path = OWN_TASKS) -> dict[int, ThreadTimes]:
    """The accounting of the threads of ``tasks`` whose name starts with ``tf_``, by thread id;
    empty where ``/proc`` does not provide it."""
    return {tid: times for tid, (name, times) in named_threads(tasks).items() if name.startswith("tf_")}


def preemptions_between(before: Mapping[int, ThreadTimes], after: Mapping[int, ThreadTimes]) -> int:
    """The preemptions, between two readings, of the threads that ran in between (spent time on a
    CPU); threads in only one reading are left out."""
    return sum(
        end.preemptions - before[tid].preemptions
        for tid, end in after.items()
        if tid in before and end.running_ns > before[tid].running_ns
    )
