"""What an untraced step takes beyond its profiled kernels, per op, for models and calibration chains.

``tfplace calibrate`` fits the per-op overhead of real steps on chains of narrow dense layers
(:data:`~tfplace.estimator.calibration.DEFAULT_CHAINS`) and the simulator adds it to every op of
every model. This benchmark applies the calibration's own timing,
:func:`tfplace.estimator.calibration.time_traced_and_untraced` (the kernels traced on a profiling
worker under the BFC allocator, the untraced step timed back to back, both by the profiler's
statistic, all steps in turns; the figures below were taken with one untimed step before the
timed ones, before :data:`~tfplace.estimator.step_timing.UNTIMED_STEPS`), to the small models of ``benchmarks/fidelity.py``, to NMT variants
of other widths and to chains of several widths, and prints per op

    (untraced step - profiled kernels - calibrated step overhead - calibrated feed cost) / records

in one process under the virtual-CPU run config (``process``) and on a loopback worker
(``worker``), ``--rounds`` times. Where the figures of the models and the chains differ, one
calibrated number per op cannot serve both. Run from the repository root, on a quiet machine,
after ``tfplace calibrate``:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/untraced_excess.py

Session 28 (Intel Xeon VM, 2 cores, the format-7 calibration of Dec 1 23:00: 94 + 87 us of
step and feed costs in one process, 685 + 313 us on a worker), two rounds, excess per op in us
(in one process | on a worker):

    chain 2400x16x4   -0.04 +0.02 | +0.34 +0.38     nmt (width 64)     +0.28 +0.82 | +0.26 +0.40
    chain 1200x16x8   -0.07 +0.11 | +0.17 +0.20     nmt width 16       +0.14 +0.42 | +0.21 +0.04
    chain 1200x64x8   -0.04 -0.04 | +0.04 +0.20     nmt width 128      +0.26 +0.40 | +0.26 +0.80
    chain 1200x128x8  +0.42 +0.91 | +0.71 +0.80     transformer        +0.23 +0.81 | +0.60 +0.88
    chain 1200x256x8  +1.95 +2.44 | +2.93 +3.38     tensor_holography  +0.87 +5.17 | +2.62 +2.84
                                                    inception_v3       -0.47 +1.05 | -1.04 -0.30

The machine slowed between the two rounds (the NMT's kernels 3.9 then 5.3 ms in one process) and
its untraced steps slowed more than its kernels. The chains' excess grows with their width:
at width 256, +1.9 to +3.4 us per op is 53-85% of those chains' kernel time. It is the same with the BFC
allocator in this process, and pinned to one core (exploratory). The models' excess is larger
than the narrow chains' and differs between models. So the narrow chains the calibration fits do
not stand for them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import app, flags

from benchmarks.fidelity import FLAGS, MODEL_SIZES
from tfplace.core.device_model import CpuCalibration, CpuProcessModel
from tfplace.estimator.calibration import (
    ChainShape,
    StepBuilder,
    StepTiming,
    op_chains,
    profiled_run_config,
    time_traced_and_untraced,
)

flags.DEFINE_list(
    "chains",
    ["2400x16x4", "1200x16x8", "1200x64x8", "1200x128x8", "1200x256x8"],
    "Chains of dense layers beside the models, as ops x width x rows (ChainShape).",
)
flags.DEFINE_list(
    "nmt_units", ["16", "128"], "Widths of NMT variants beside the models (the fidelity NMT's is 64)."
)
flags.DEFINE_list(
    "where",
    ["process", "worker"],
    "process: in this process, virtual-CPU run config; worker: a loopback worker.",
)
flags.DEFINE_integer("rounds", 2, "Independent timings of every step, one after the other.")
flags.DEFINE_integer("repeats", 10, "Turns of traced and untraced steps per timing.")


def _model_step(
    name: str, knobs: Mapping[str, Any], batch: int, device: str
) -> tuple[Any, Any, Any, Mapping[str, Any]]:
    """A :data:`StepBuilder` of a model's training step on ``device``, fed at ``batch``."""
    from models import build_model

    spec = build_model(name, **knobs)
    for op in spec.graph.get_operations():
        op._set_device(device)
    return spec.graph, spec.train_op, spec.init_op, spec.feed_fn(batch)


def steps_to_time() -> dict[str, StepBuilder]:
    """The flags' models, NMT variants and chains, by label."""
    steps: dict[str, StepBuilder] = {}
    for name in FLAGS.models:
        knobs, batch = MODEL_SIZES[name]
        steps[name] = functools.partial(_model_step, name, knobs, batch)
    nmt_knobs, nmt_batch = MODEL_SIZES["nmt"]
    for units in FLAGS.nmt_units:
        steps[f"nmt units={units}"] = functools.partial(
            _model_step, "nmt", {**nmt_knobs, "units": int(units)}, nmt_batch
        )
    shapes = [ChainShape(*(int(part) for part in chain.split("x"))) for chain in FLAGS.chains]
    for shape, build in zip(shapes, op_chains(shapes)):
        steps[f"chain {shape.ops}x{shape.width}x{shape.rows}"] = build
    return steps


def fixed_costs(process: CpuProcessModel, feeds: Mapping[str, Any]) -> float:
    """The calibrated step overhead and feed cost (:class:`~tfplace.core.device_model.FeedCost`)
    of one step that feeds ``feeds`` on ``process`` (seconds)."""
    shares = (process.feed.share(np.asarray(value).nbytes, len(feeds)) for value in feeds.values())
    return process.step_overhead + sum(shares)


def time_where(where: str, steps: Sequence[StepBuilder]) -> list[StepTiming]:
    """:func:`time_traced_and_untraced` of ``steps`` in this process or on a fresh loopback worker."""
    from tfplace.tf_graph.cluster import LocalCluster

    if where == "process":
        return time_traced_and_untraced(steps, config=profiled_run_config(2, 1), repeats=FLAGS.repeats)
    config = profiled_run_config()
    config.ClearField("device_count")
    with LocalCluster(1) as cluster:
        return time_traced_and_untraced(
            steps, target=cluster.target, config=config, device=cluster.device(0), repeats=FLAGS.repeats
        )


def excess_per_op(timing: StepTiming, fixed: float) -> float:
    """Seconds per record the untraced step took beyond its kernels and its fixed costs."""
    return (timing.untraced - timing.traced - fixed) / timing.records


def worker_groups(labels: Sequence[str]) -> list[list[str]]:
    """``labels`` in groups without two variants of one model: sessions on one worker share
    variables by name, and the NMT variants' variables have the same names and other shapes."""
    groups: list[list[str]] = []
    for label in labels:
        family = label.split(" units=")[0]
        group = next((g for g in groups if all(other.split(" units=")[0] != family for other in g)), None)
        if group is None:
            groups.append(group := [])
        group.append(label)
    return groups


def main(argv: Sequence[str]) -> None:
    del argv
    steps = steps_to_time()
    calibration = CpuCalibration.load(FLAGS.calibration)
    feeds = {label: build("/device:CPU:0")[3] for label, build in steps.items()}
    fixed = {
        where: {
            label: fixed_costs(
                calibration.process("virtual" if where == "process" else "loopback"), feeds[label]
            )
            for label in steps
        }
        for where in FLAGS.where
    }
    excess: dict[tuple[str, str], list[float]] = {}
    print("round,where,step,records,traced ms,untraced ms,fixed us,excess per op us")
    for round_ in range(FLAGS.rounds):
        for where in FLAGS.where:
            groups = [list(steps)] if where == "process" else worker_groups(list(steps))
            for group in groups:
                for label, timing in zip(group, time_where(where, [steps[label] for label in group])):
                    per_op = excess_per_op(timing, fixed[where][label])
                    excess.setdefault((where, label), []).append(per_op)
                    print(
                        f"{round_},{where},{label},{timing.records},{timing.traced * 1e3:.3f},"
                        f"{timing.untraced * 1e3:.3f},{fixed[where][label] * 1e6:.0f},{per_op * 1e6:+.3f}",
                        flush=True,
                    )
    print("\nwhere,step,excess per op us (each round)")
    for (where, label), values in sorted(excess.items()):
        print(f"{where},{label}," + " ".join(f"{value * 1e6:+.3f}" for value in values))


if __name__ == "__main__":
    app.run(main)
