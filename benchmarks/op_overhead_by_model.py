"""The per-op overhead each model's real step needs, against the one ``tfplace calibrate`` stores.

The CPU device model adds one calibrated number to every op's traced time
(:attr:`tfplace.core.device_model.CpuProcessModel.op_overhead`, fitted on chains of small dense
layers). This benchmark measures what each model's own step needs instead: for each small model of
``benchmarks/fidelity.py`` (``MODEL_SIZES``) and for two of the calibration's chains
(:func:`tfplace.estimator.calibration.op_chains`), in one fresh session under the profiler's
config, ``--traced_steps`` ``FULL_TRACE`` steps as the profiler takes them (each after two
untraced ones), then ``--warmup_steps`` untraced steps into the executor's steady state and
``--steps`` timed ones. It
prints, with the profiler's statistic on both sides (the tenth quantile of the untraced steps,
:func:`tfplace.estimator.step_timing.step_statistic`, against the traced op times reduced as a
profile is, :func:`tfplace.estimator.calibration.profiled_sum`):

- the untraced step, and the traced ops' times summed, by the node's whole time (``all_end_rel``,
  what profiles stored until session 12) and by the kernel's alone (``op_start_rel`` ..
  ``op_end_rel``, what they store now);
- per op, the untraced step minus the calibrated step overhead minus each sum, over the ops: the
  per-op overhead that model's step would need; for the chains also the slope between the two;
- the process's minor page faults per traced and per untraced step (``getrusage``): a traced step
  of the small Transformer faulted 1,700-2,700 times against none to 20 untraced (session 12),
  1,600-1,800 once the step stats were read from their set fields alone (session 13;
  ``tfplace.tf_graph.step_stats``); exploratory chains tied such faults to allocations of 16-128
  KB (``benchmarks/trace_inflation.py`` times chains of that kind).

Under TensorFlow's BFC allocator for the CPU (``TF_CPU_ALLOCATOR_USE_BFC=true`` in the
environment, the third line below) the Transformer needed -0.23 to +0.11 us per op
beyond its kernel times instead of -0.74 to -0.84 (session 13; ``docs/experiments.md``, "The heap
under a traced step").

One number serves the models only where these agree. Run from the repository root, on a quiet
machine, after ``tfplace calibrate`` (the second line takes the traced steps one after the other,
as the profiler did before session 12):

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/op_overhead_by_model.py
    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/op_overhead_by_model.py --untraced_before_trace=0
    TF_CPU_ALLOCATOR_USE_BFC=true PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/op_overhead_by_model.py
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from benchmarks.fidelity import FLAGS, MODEL_SIZES, SideBySideProfile
from tfplace.estimator.calibration import profiled_sum
from tfplace.estimator.profiler import UNTRACED_BEFORE_TRACE
from tfplace.estimator.step_timing import step_statistic

flags.DEFINE_list("chains", ["600", "1200"], "Calibration chains (ops) to time beside the models.")
flags.DEFINE_integer("traced_steps", 30, "FULL_TRACE steps first, as the profiler takes them.")
flags.DEFINE_integer(
    "untraced_before_trace",
    UNTRACED_BEFORE_TRACE,
    "Untraced steps before each traced one (the profiler's by default; 0: consecutive traced "
    "steps, as the profiler took them before session 12).",
)
# fidelity.py's flags --models, --calibration, --warmup_steps (untraced steps into the steady
# state) and --steps (untraced timed steps) serve here too
FLAGS.set_default("warmup_steps", 150)
FLAGS.set_default("steps", 300)


def minor_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(graph: Any, fetch: Any, initializer: Any, feeds: Any) -> dict[str, float]:
    """Untraced step, the traced ops' summed node and kernel times and the page faults per traced
    and untraced step, of one fresh session."""
    import tensorflow as tf

    from tfplace.estimator.profiler import profiling_config
    from tfplace.estimator.profiling_process import PROFILED_KIND

    with tf.compat.v1.Session(graph=graph, config=profiling_config()) as session:
        if initializer is not None:
            session.run(initializer)
        for _ in range(2):  # the profiler's warm-up
            session.run(fetch, feeds)
        profile = SideBySideProfile(
            session,
            fetch,
            feeds,
            frozenset(op.name for op in graph.get_operations()),
            untraced_before=FLAGS.untraced_before_trace,
            kind=PROFILED_KIND["this"],
        )
        faults = minor_faults()
        for _ in range(FLAGS.traced_steps):
            profile.step()
        traced_faults = (minor_faults() - faults) / FLAGS.traced_steps
        for _ in range(FLAGS.warmup_steps):
            session.run(fetch, feeds)
        untraced = []
        faults = minor_faults()
        for _ in range(FLAGS.steps):
            start = time.perf_counter()
            session.run(fetch, feeds)
            untraced.append(time.perf_counter() - start)
        untraced_faults = (minor_faults() - faults) / FLAGS.steps
    steps = profile.steps.traces
    traced = sorted({op for step in steps for op in step})
    node = {op: [step[op].node_time if op in step else math.nan for step in steps] for op in traced}
    kernel = {op: [step[op].kernel_time if op in step else math.nan for step in steps] for op in traced}
    return {
        "ops": len(traced),
        "untraced": step_statistic(untraced),
        "node": profiled_sum(node),
        "kernel": profiled_sum(kernel),
        "traced_faults": traced_faults,
        "untraced_faults": untraced_faults,
    }


def per_op(row: dict[str, float], step_overhead: float, key: str) -> float:
    """Seconds per op the untraced step needs beyond the ops' summed ``key`` times."""
    return (row["untraced"] - step_overhead - row[key]) / row["ops"]


def main(argv: Sequence[str]) -> None:
    del argv
    from models import build_model
    from tfplace.core.device_model import CpuCalibration
    from tfplace.estimator.calibration import ChainShape, op_chains

    virtual = CpuCalibration.load(FLAGS.calibration).process("virtual")
    rows: dict[str, dict[str, float]] = {}
    for name in FLAGS.models:
        knobs, batch = MODEL_SIZES[name]
        spec = build_model(name, **knobs)
        rows[name] = measure(spec.graph, spec.train_op, spec.init_op, spec.feed_fn(batch))
    sizes = [int(ops) for ops in FLAGS.chains]
    for ops, build in zip(sizes, op_chains([ChainShape(ops) for ops in sizes])):
        graph, fetch, initializer, feeds = build("/device:CPU:0")
        rows[f"chain {ops}"] = measure(graph, fetch, initializer, feeds)
    print(
        f"calibrated: {virtual.op_overhead * 1e6:+.3f} us per op, {virtual.step_overhead * 1e3:.3f} ms per step "
        f"({FLAGS.calibration}); load {os.getloadavg()[0]:.2f}"
    )
    print(
        "step,ops,untraced ms,node times ms,kernel times ms,per op by node us,per op by kernel us,"
        "faults per traced step,faults per untraced step"
    )
    for name, row in rows.items():
        print(
            f"{name},{row['ops']},{row['untraced'] * 1e3:.3f},{row['node'] * 1e3:.3f},{row['kernel'] * 1e3:.3f},"
            f"{per_op(row, virtual.step_overhead, 'node') * 1e6:+.2f},"
            f"{per_op(row, virtual.step_overhead, 'kernel') * 1e6:+.2f},"
            f"{row['traced_faults']:.0f},{row['untraced_faults']:.0f}"
        )
    if len(sizes) == 2:
        short, long = (rows[f"chain {ops}"] for ops in sizes)
        slopes = [
            ((long["untraced"] - long[key]) - (short["untraced"] - short[key]))
            / (long["ops"] - short["ops"])
            * 1e6
            for key in ("node", "kernel")
        ]
        print(
            f"chains {sizes[0]} -> {sizes[1]}: per op by node {slopes[0]:+.2f} us, by kernel {slopes[1]:+.2f} us"
        )


if __name__ == "__main__":
    app.run(main)
