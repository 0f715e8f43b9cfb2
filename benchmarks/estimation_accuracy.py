"""Estimation accuracy of the Standard Evaluation (Celeritas section 6.5.1, Table 5).

Profiles a model's training step at small batch sizes, predicts every op's costs at a larger one
with :class:`~tfplace.estimator.regression.OpCostRegression`, measures that batch size too, and
prints per op the relative deviation ``|estimated - measured| / measured`` of

- memory: output bytes plus temporary bytes (the paper: 1.54% on Inception V3),
- compute time (the paper: 7.99% on Inception V3),

as the mean over ops, the fraction of ops within 0% (memory), 20% and 30% (the paper's Figure 5
reading), and the profiling time. Ops whose measured value is 0 (or, for time, the clamping floor)
have no relative deviation and are excluded and counted; so are ops whose costs are shape-based
estimates in either profile. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/estimation_accuracy.py
    PYTHONPATH=. .venv/bin/python benchmarks/estimation_accuracy.py --image_size=150 --target_batch=16
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping

import numpy as np
from absl import app, flags

from tfplace.estimator.profiler import TIME_FLOOR, OpCost, ProfileSet, profile_graph
from tfplace.estimator.regression import OpCostRegression

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "inception_v3", ["inception_v3"], "Model whose training step is profiled.")
flags.DEFINE_integer("image_size", 299, "Input side of Inception V3.")
flags.DEFINE_list("profile_batches", ["1", "2", "4"], "Batch sizes profiled for the regression.")
flags.DEFINE_integer("target_batch", 8, "Batch size predicted and measured.")
flags.DEFINE_integer("warmup_steps", 2, "Untraced steps per batch size.")
flags.DEFINE_integer("traced_steps", 5, "Traced steps per batch size (per-op median).")
flags.DEFINE_string("cache_dir", None, "Profile cache directory (none: always measure).")
flags.DEFINE_integer("worst", 10, "How many ops with the largest absolute time error to list.")


def build_model():
    from models.inception import build_inception_v3

    return build_inception_v3(image_size=FLAGS.image_size)


def memory_of(cost: OpCost) -> int:
    return sum(cost.output_sizes) + cost.temporary_bytes


def deviations(
    predicted: Mapping[str, OpCost], measured: Mapping[str, OpCost], ops: list[str], value, zero: float
) -> tuple[np.ndarray, int]:
    """Relative deviations of ``value(cost)`` over ``ops``, and how many had a measured value <= ``zero``."""
    estimated = np.array([value(predicted[op]) for op in ops], dtype=float)
    actual = np.array([value(measured[op]) for op in ops], dtype=float)
    kept = actual > zero
    return np.abs(estimated[kept] - actual[kept]) / actual[kept], int((~kept).sum())


def summary(name: str, relative: np.ndarray, excluded: int) -> dict[str, float | int]:
    return {
        f"{name}_mean_deviation": float(relative.mean()),
        f"{name}_median_deviation": float(np.median(relative)),
        f"{name}_exact": float((relative < 1e-9).mean()),
        f"{name}_within_20": float((relative <= 0.2).mean()),
        f"{name}_within_30": float((relative <= 0.3).mean()),
        f"{name}_ops": int(relative.size),
        f"{name}_excluded_zero": excluded,
    }


def profile(spec, batch_sizes) -> ProfileSet:
    return profile_graph(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch_sizes,
        warmup_steps=FLAGS.warmup_steps,
        traced_steps=FLAGS.traced_steps,
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir,
    )


def main(argv: list[str]) -> None:
    del argv
    started = time.perf_counter()
    spec = build_model()
    build_seconds = time.perf_counter() - started
    small = profile(spec, [int(b) for b in FLAGS.profile_batches])
    regression = OpCostRegression().fit(small)
    predicted = regression.predict(FLAGS.target_batch)
    large = profile(spec, [FLAGS.target_batch])
    measured = large.costs[FLAGS.target_batch]

    estimated = set(small.estimated_ops) | set(large.estimated_ops)
    partial = set(small.estimated_outputs) | set(large.estimated_outputs)
    ops = sorted(op for op in measured if op not in estimated)
    memory_ops = [op for op in ops if op not in partial]
    memory, memory_zero = deviations(predicted, measured, memory_ops, memory_of, 0)
    times, time_zero = deviations(predicted, measured, ops, lambda c: c.compute_time, TIME_FLOOR)
    predicted_total = sum(predicted[op].compute_time for op in ops)
    measured_total = sum(measured[op].compute_time for op in ops)
    result = {
        "model": FLAGS.model,
        "image_size": FLAGS.image_size,
        "profile_batches": list(small.batch_sizes),
        "target_batch": FLAGS.target_batch,
        "graph_ops": len(spec.graph.get_operations()),
        "step_ops": len(measured),
        "estimated_ops": len(estimated),
        "estimated_outputs": len(partial),
        **summary("memory", memory, memory_zero),
        **summary("time", times, time_zero),
        "time_weighted_deviation": float(
            sum(abs(predicted[op].compute_time - measured[op].compute_time) for op in ops) / measured_total
        ),
        "sum_predicted_time_s": predicted_total,
        "sum_measured_time_s": measured_total,
        "traced_step_wall_s": large.step_times[FLAGS.target_batch],
        "time_fits": dict(Counter(regression.time_fit_)),
        "profiling_seconds": small.profiling_seconds,
        "profile_from_cache": small.from_cache,
        "measurement_seconds": large.profiling_seconds,
        "build_seconds": build_seconds,
    }
    print(json.dumps(result, indent=1))
    worst = sorted(ops, key=lambda op: -abs(predicted[op].compute_time - measured[op].compute_time))
    print(f"largest absolute time errors at batch {FLAGS.target_batch} (op, fit, predicted s, measured s):")
    fit_of = dict(zip(regression.ops_, regression.time_fit_))
    for op in worst[: FLAGS.worst]:
        print(f"  {op:70s} {fit_of[op]:12s} {predicted[op].compute_time:.5f} {measured[op].compute_time:.5f}")


if __name__ == "__main__":
    app.run(main)
