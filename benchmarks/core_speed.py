"""How fast each core of this machine runs, moment by moment: the noise floor under every timing.

A fixed loop of Python arithmetic (no memory traffic, no TensorFlow) is timed pinned to each core
in turn, ``--timings_per_round`` times per core and round, its least time kept; the rounds go on
for ``--duration_seconds``. Each core's speed is the rounds' median time over that round's time,
so 1.0 is the core's typical speed. The benchmark prints a line every ``--print_every`` rounds and
then the spread of each core's speed and of the ratio between the cores at the same moment
(:func:`speed_summary`).

A profile and the run it predicts are taken in different processes, which the operating
system runs on either core: where the cores' speeds move apart, one pays for the other's speed.
Run from the repository root, on a quiet machine:

    PYTHONPATH=. .venv/bin/python benchmarks/core_speed.py

Session 29 (the Intel Xeon VM of sessions 25-29, 2 cores, idle; two runs of 60 s, 412 rounds
of about 0.15 s in the second): from the tenth to the ninetieth percentile each core ran at
0.79-1.25 and 0.86-1.28 (core 0), 0.85-1.29 and 0.83-1.27 (core 1) of its median speed, below
0.7 in 6 and 7 of the 412 rounds; at the same moment core 0 ran 0.72-1.31 and 0.76-1.31 times as
fast as core 1. Each core's speed moves within a second, and apart from the other's.

Session 30 (an AMD EPYC VM, 2 cores, idle, ``--duration_seconds=40``): from the tenth to the
ninetieth percentile core 0 ran at 0.68-1.13 of its median speed and core 1 at 0.71-1.18, and at
the same moment core 0 ran 0.65-1.49 times as fast as core 1: a wider spread than the Intel VM's.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

from absl import app, flags

# Flag names no other benchmark defines: the tests import several benchmarks into one process.
flags.DEFINE_float("duration_seconds", 60.0, "How long to go on taking rounds.")
flags.DEFINE_integer("timings_per_round", 3, "Timings of the loop per core and round; the least is kept.")
flags.DEFINE_integer("loop_additions", 200_000, "Additions of the timed loop (about 10 ms here).")
flags.DEFINE_integer("print_every", 1, "Print every this many rounds.")
FLAGS = flags.FLAGS


def timed_loop(iterations: int) -> float:
    """Seconds a loop of ``iterations`` integer multiply-adds takes in this thread."""
    start = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return time.perf_counter() - start


def speeds(rounds: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each round's speed of each core: that core's median time over the round's time."""
    medians = [statistics.median(column) for column in zip(*rounds, strict=True)]
    return [[median / seconds for median, seconds in zip(medians, row, strict=True)] for row in rounds]


def speed_summary(rounds: Sequence[Sequence[float]]) -> dict[str, tuple[float, float]]:
    """Per core (``core 0``, ...) the tenth and ninetieth percentiles of its speed
    (:func:`speeds`), and per later core (``core 0 / core 1``, ...) those of the first core's
    speed over that core's in the same round. At least two rounds."""
    if len(rounds) < 2:
        raise ValueError(f"a speed spread needs at least two rounds, got {len(rounds)}")
    by_round = speeds(rounds)

    def spread(values: Sequence[float]) -> tuple[float, float]:
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        return deciles[0], deciles[-1]

    summary = {f"core {core}": spread([row[core] for row in by_round]) for core in range(len(rounds[0]))}
    for core in range(1, len(rounds[0])):
        summary[f"core 0 / core {core}"] = spread([row[0] / row[core] for row in by_round])
    return summary


def main(argv: Sequence[str]) -> None:
    del argv
    cores = sorted(os.sched_getaffinity(0))
    rounds: list[list[float]] = []
    offsets: list[float] = []
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < FLAGS.duration_seconds:
            row = []
            for core in cores:
                os.sched_setaffinity(0, {core})
                timed_loop(FLAGS.loop_additions)  # the first run after a move pays for the move
                row.append(min(timed_loop(FLAGS.loop_additions) for _ in range(FLAGS.timings_per_round)))
            rounds.append(row)
            offsets.append(time.perf_counter() - start)
    finally:
        os.sched_setaffinity(0, cores)
    by_round = speeds(rounds)
    print("round,seconds," + ",".join(f"core {core}" for core in cores))
    for index in range(0, len(rounds), FLAGS.print_every):
        print(f"{index},{offsets[index]:.2f}," + ",".join(f"{speed:.2f}" for speed in by_round[index]))
    print("\nspeed (or ratio),q10,q90")
    for label, (low, high) in speed_summary(rounds).items():
        print(f"{label},{low:.2f},{high:.2f}")


if __name__ == "__main__":
    app.run(main)
