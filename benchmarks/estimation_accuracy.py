"""Estimation accuracy of the Standard Evaluation (Celeritas section 6.5.1, Table 5).

Profiles a model's training step at small batch sizes, predicts every op's costs at a larger one,
measures that batch size too, and prints the per-op relative deviations of memory and compute time
(:func:`tfplace.estimator.accuracy.estimation_accuracy`, which ``run_experiments.py`` uses for its
Table 5 as well) and the ops with the largest absolute time errors. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/estimation_accuracy.py
    PYTHONPATH=. .venv/bin/python benchmarks/estimation_accuracy.py --image_size=150 --target_batch=16
"""

from __future__ import annotations

import json
import time

from absl import app, flags

from models import build_model
from tfplace.estimator.accuracy import estimation_accuracy

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "inception_v3", ["inception_v3"], "Model whose training step is profiled.")
flags.DEFINE_integer("image_size", 299, "Input side of Inception V3.")
flags.DEFINE_list("profile_batches", ["1", "2", "4"], "Batch sizes profiled for the regression.")
flags.DEFINE_integer("target_batch", 8, "Batch size predicted and measured.")
flags.DEFINE_integer("warmup_steps", 2, "Untraced steps per batch size.")
flags.DEFINE_integer("traced_steps", 5, "Traced steps per batch size (per-op median).")
flags.DEFINE_string("cache_dir", None, "Profile cache directory (none: always measure).")
flags.DEFINE_integer("worst", 10, "How many ops with the largest absolute time error to list.")


def main(argv: list[str]) -> None:
    del argv
    started = time.perf_counter()
    spec = build_model(FLAGS.model, image_size=FLAGS.image_size)
    build_seconds = time.perf_counter() - started
    report = estimation_accuracy(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        profile_batch_sizes=[int(b) for b in FLAGS.profile_batches],
        target_batch=FLAGS.target_batch,
        init_op=spec.init_op,
        warmup_steps=FLAGS.warmup_steps,
        traced_steps=FLAGS.traced_steps,
        cache_dir=FLAGS.cache_dir,
        worst=FLAGS.worst,
    )
    result = {
        "model": FLAGS.model,
        "image_size": FLAGS.image_size,
        "graph_ops": len(spec.graph.get_operations()),
        "build_seconds": build_seconds,
        **report.to_dict(),
    }
    worst = result.pop("worst")
    print(json.dumps(result, indent=1))
    print(f"largest absolute time errors at batch {FLAGS.target_batch} (op, fit, predicted s, measured s):")
    for op, fit, predicted, measured in worst:
        print(f"  {op:70s} {fit:12s} {predicted:.5f} {measured:.5f}")


if __name__ == "__main__":
    app.run(main)
