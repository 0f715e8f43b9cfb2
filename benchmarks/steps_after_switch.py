"""How long this process's untraced steps stay slow after a traced step on the profiling worker.

The calibration (:func:`tfplace.estimator.calibration.time_traced_and_untraced`) times its steps
in turns: a traced step on the profiler's worker, then untraced steps of the same graph here,
:data:`~tfplace.estimator.step_timing.UNTIMED_STEPS` of them untimed. A fidelity run keeps the
tenth quantile of blocks of tens of steps: the steady state. This benchmark prints, per step and
per position after the worker's traced step, the lower quartile over ``--rounds`` rounds, so that
the untimed steps can be checked to cover the slow ones. Run from the repository root, on a quiet
machine:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/steps_after_switch.py

Session 28 (Intel Xeon VM, 2 cores, us; positions 0-5 and the last two):

    25 rounds (an exploratory script of the same loop)
    chain 1200x16x8   1426  908  845  820  848  847 ...  809  817
    nmt               8087 7080 6441 6246 6395 6401 ... 6091 6085
    chain 1200x256x8  7077 5242 4635 4373 4244 4320 ... 4365 4270
    10 rounds (this benchmark)
    nmt               8128 7551 7094 6870 6727 6798 ... 6440 6584
    chain 1200x16x8   1460  984  911  898  882  912 ...  791  778
    chain 1200x256x8  7063 5427 5051 4994 5038 4691 ... 4637 4318

The first step after the switch is slower by up to 70%; in the second run the slowdown took
about seven steps to pass.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import numpy as np
from absl import app, flags

from benchmarks.untraced_excess import FLAGS, steps_to_time
from tfplace.estimator.calibration import STEADY_STATE_STEPS, profiled_run_config

flags.DEFINE_integer("positions", 16, "Untraced steps timed after each traced step on the worker.")
FLAGS.set_default("models", ["nmt"])
FLAGS.set_default("nmt_units", [])
FLAGS.set_default("chains", ["1200x16x8", "1200x256x8"])
FLAGS.set_default("rounds", 25)


def main(argv: Sequence[str]) -> None:
    del argv
    import tensorflow as tf

    from tfplace.estimator.profiler import UNTRACED_BEFORE_TRACE, profiling_config
    from tfplace.estimator.profiling_process import profiling_session

    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with contextlib.ExitStack() as stack:
        runs = []
        for label, build in steps_to_time().items():
            graph, fetch, initializer, feeds = build("/device:CPU:0")
            worker, _ = stack.enter_context(profiling_session(graph, profiling_config(), "worker"))
            worker.run(initializer)
            graph, here_fetch, initializer, _ = build("/device:CPU:0")
            here = stack.enter_context(tf.compat.v1.Session(graph=graph, config=profiled_run_config(2, 1)))
            here.run(initializer)
            for _ in range(STEADY_STATE_STEPS):
                here.run(here_fetch, feeds)
            runs.append((label, worker, fetch, here, here_fetch, feeds, []))
        for _ in range(FLAGS.rounds):
            for _label, worker, fetch, here, here_fetch, feeds, rows in runs:
                for _ in range(UNTRACED_BEFORE_TRACE):
                    worker.run(fetch, feeds)
                worker.run(fetch, feeds, options=trace, run_metadata=tf.compat.v1.RunMetadata())
                row = []
                for _ in range(FLAGS.positions):
                    start = time.perf_counter()
                    here.run(here_fetch, feeds)
                    row.append(time.perf_counter() - start)
                rows.append(row)
    print("step," + ",".join(f"position {i} us" for i in range(FLAGS.positions)))
    for label, *_, rows in runs:
        quartile = np.quantile(np.asarray(rows), 0.25, axis=0)
        print(label + "," + ",".join(f"{seconds * 1e6:.0f}" for seconds in quartile))


if __name__ == "__main__":
    app.run(main)
