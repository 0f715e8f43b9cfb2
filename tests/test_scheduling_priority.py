"""The profiler's threads at a raised scheduling priority: every thread, for the block only, and a
clear fallback where the machine does not permit it."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tfplace.estimator.scheduling_priority import PROFILING_NICENESS, may_raise_priority, raised_priority
from tfplace.estimator.statistics import RepeatPolicy


class FakeThreads:
    """A ``/proc/<pid>/task`` directory and the kernel's nice values of its threads."""

    def __init__(self, tmp_path, niceness, *, lowest_permitted=-20, spawn_on_first_raise=None):
        self.tasks = tmp_path / "task"
        self.tasks.mkdir()
        self.niceness = {}
        self.lowest_permitted = lowest_permitted
        self.spawn_on_first_raise = spawn_on_first_raise
        for tid, value in niceness.items():
            self.start(tid, value)

    def start(self, tid, value):
        (self.tasks / str(tid)).mkdir()
        self.niceness[tid] = value

    def getpriority(self, which, who):
        assert which == os.PRIO_PROCESS
        return self.niceness[who]

    def setpriority(self, which, who, value):
        assert which == os.PRIO_PROCESS
        if value < self.niceness[who] and value < self.lowest_permitted:
            raise PermissionError(1, "Operation not permitted")
        if self.spawn_on_first_raise is not None:  # the thread starts one before it is raised
            tid, self.spawn_on_first_raise = self.spawn_on_first_raise, None
            self.start(tid, self.niceness[who])
        self.niceness[who] = value


@pytest.fixture
def fake(monkeypatch, tmp_path):
    def make(niceness, **options):
        threads = FakeThreads(tmp_path, niceness, **options)
        monkeypatch.setattr(os, "getpriority", threads.getpriority)
        monkeypatch.setattr(os, "setpriority", threads.setpriority)
        return threads

    return make


def test_every_thread_runs_at_the_raised_priority_in_the_block_and_at_its_own_after(fake):
    threads = fake({100: 0, 101: 0, 102: 5})
    with raised_priority(threads.tasks, -15) as raised:
        assert raised
        assert threads.niceness == {100: -15, 101: -15, 102: -15}
    assert threads.niceness == {100: 0, 101: 0, 102: 5}


def test_a_thread_started_while_the_others_are_raised_is_raised_too(fake):
    threads = fake({100: 0, 101: 0}, spawn_on_first_raise=103)
    with raised_priority(threads.tasks, -15):
        assert threads.niceness[103] == -15
    assert threads.niceness[103] == 0


def test_a_thread_started_inside_the_block_goes_back_to_its_siblings_priority_after(fake):
    threads = fake({100: 2, 101: 2, 102: 0})
    with raised_priority(threads.tasks, -15):
        threads.start(110, -15)  # a new thread inherits its creator's nice value
    assert threads.niceness[110] == 2


def test_a_thread_already_at_a_higher_priority_keeps_it(fake):
    threads = fake({100: 0, 101: -19})
    with raised_priority(threads.tasks, -15):
        assert threads.niceness[101] == -19
    assert threads.niceness == {100: 0, 101: -19}


def test_where_raising_is_not_permitted_nothing_changes_and_a_warning_says_so(fake):
    threads = fake({100: 0, 101: 0, 102: 0}, lowest_permitted=0)
    refusal = "could not raise its threads' priority to nice -15"
    with pytest.warns(RuntimeWarning, match=refusal), raised_priority(threads.tasks, -15) as raised:
        assert not raised
        assert threads.niceness == {100: 0, 101: 0, 102: 0}
    assert threads.niceness == {100: 0, 101: 0, 102: 0}


def test_a_refusal_after_some_threads_were_raised_puts_those_back(fake, monkeypatch):
    threads = fake({100: 0, 101: 0})
    refuse = {101}
    allowed = threads.setpriority

    def refusing(which, who, value):
        if who in refuse and value < threads.niceness[who]:
            raise PermissionError(1, "Operation not permitted")
        allowed(which, who, value)

    monkeypatch.setattr(os, "setpriority", refusing)
    with pytest.warns(RuntimeWarning), raised_priority(threads.tasks, -15) as raised:
        assert not raised
        assert threads.niceness == {100: 0, 101: 0}


def test_no_niceness_leaves_every_priority_alone(fake):
    threads = fake({100: 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with raised_priority(threads.tasks, None) as raised:
            assert not raised
            assert threads.niceness == {100: 3}


@pytest.mark.parametrize("niceness", [-21, 20])
def test_a_niceness_outside_linuxs_range_is_refused(tmp_path, niceness):
    with pytest.raises(ValueError, match="niceness must be in"), raised_priority(tmp_path, niceness):
        pass
    with pytest.raises(ValueError, match="niceness"):
        RepeatPolicy(niceness=niceness)


def test_the_profiler_raises_its_threads_to_nice_minus_15_by_default():
    assert RepeatPolicy().niceness == PROFILING_NICENESS == -15
    assert RepeatPolicy(niceness=None).settings()["niceness"] is None


def test_the_probe_of_the_permission_leaves_the_calling_threads_priority_as_it_was():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    may_raise_priority(-20)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert may_raise_priority(19)  # a lower priority is always permitted


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not may_raise_priority(-5),
    reason="raising a priority needs Linux and CAP_SYS_NICE or RLIMIT_NICE",
)
def test_a_real_processs_threads_are_raised_in_the_block_and_restored_after():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, threading\n"
            "for _ in range(3): threading.Thread(target=sys.stdin.read, daemon=True).start()\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline() == b"ready\n"
        tasks = Path(f"/proc/{child.pid}/task")
        tids = [int(entry.name) for entry in tasks.iterdir()]
        assert len(tids) == 4
        before = {tid: os.getpriority(os.PRIO_PROCESS, tid) for tid in tids}
        with raised_priority(tasks, -5) as raised:
            assert raised
            assert {os.getpriority(os.PRIO_PROCESS, tid) for tid in tids} == {-5}
        assert {tid: os.getpriority(os.PRIO_PROCESS, tid) for tid in tids} == before
    finally:
        child.kill()
        child.wait()
