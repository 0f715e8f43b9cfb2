"""What FULL_TRACE adds to per-op times: a step untraced against its traced ops' times summed.

The profiler (:func:`tfplace.estimator.profiler.profile_graph`) times ops in FULL_TRACE steps, in
one process with one thread. For each model's small variant of ``run_experiments.py --real``
(``REAL_SIZES``), at its real-run batch size, this benchmark runs untraced steps and traced steps in
one such session and prints one JSON line: the step ops, the median untraced step (the Python call
included), the median over traced steps of the ops' summed times, and their difference per op.
A positive difference is time the trace adds to every op, which the simulator then counts. Where
the batch is above 4, the line also gives the summed op times the regression predicts from
batches 1, 2 and 4 and those measured at the batch
(:func:`tfplace.estimator.accuracy.estimation_accuracy`). Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/trace_overhead.py
    PYTHONPATH=. .venv/bin/python benchmarks/trace_overhead.py --models=nmt --steps=50
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence

from absl import app, flags

from models import build_model
from run_experiments import REAL_SIZES
from tfplace.estimator.accuracy import estimation_accuracy
from tfplace.estimator.profiler import profiling_config
from tfplace.tf_graph.step_stats import node_compute_time

FLAGS = flags.FLAGS
PROFILED = (1, 2, 4)
flags.DEFINE_list("models", ["nmt", "transformer", "tensor_holography"], "Models of REAL_SIZES.")
flags.DEFINE_integer("warmup_steps", 5, "Untimed steps first.")
flags.DEFINE_integer("steps", 20, "Untraced timed steps.")
flags.DEFINE_integer("traced_steps", 5, "FULL_TRACE steps.")


def measure(name: str) -> dict[str, float | int | str | None]:
    """Untraced step against summed traced op times of ``name``'s small variant."""
    import tensorflow as tf

    knobs, batch = REAL_SIZES[name]
    spec = build_model(name, **knobs)
    feed = spec.feed_fn(batch)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with tf.compat.v1.Session(graph=spec.graph, config=profiling_config()) as session:
        session.run(spec.init_op)
        for _ in range(FLAGS.warmup_steps):
            session.run(spec.train_op, feed_dict=feed)
        untraced = []
        for _ in range(FLAGS.steps):
            start = time.perf_counter()
            session.run(spec.train_op, feed_dict=feed)
            untraced.append(time.perf_counter() - start)
        summed, records = [], 0
        for _ in range(FLAGS.traced_steps):
            metadata = tf.compat.v1.RunMetadata()
            session.run(spec.train_op, feed_dict=feed, options=options, run_metadata=metadata)
            nodes = [node for device in metadata.step_stats.dev_stats for node in device.node_stats]
            summed.append(sum(node_compute_time(node) for node in nodes))
            records = len(nodes)
    step, ops = statistics.median(untraced), statistics.median(summed)
    result: dict[str, float | int | str | None] = {
        "model": name,
        "batch": batch,
        "records": records,
        "untraced_step_ms": round(step * 1e3, 3),
        "traced_ops_summed_ms": round(ops * 1e3, 3),
        "added_per_op_us": round((ops - step) / records * 1e6, 3) if records else 0.0,
        "predicted_ops_summed_ms": None,
        "measured_ops_summed_ms": None,
    }
    if batch > max(PROFILED):
        report = estimation_accuracy(
            spec.graph, spec.train_op, spec.feed_fn, profile_batch_sizes=PROFILED, target_batch=batch,
            init_op=spec.init_op, floor=False,
        )  # fmt: skip
        result["predicted_ops_summed_ms"] = round(report.sum_predicted_time * 1e3, 3)
        result["measured_ops_summed_ms"] = round(report.sum_measured_time * 1e3, 3)
    return result


def main(argv: Sequence[str]) -> None:
    del argv
    for name in FLAGS.models:
        print(json.dumps(measure(name)), flush=True)


if __name__ == "__main__":
    app.run(main)
