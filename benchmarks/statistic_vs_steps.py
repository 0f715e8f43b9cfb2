"""How the profiler's per-op statistic moves with the number of traced steps it is taken over.

The profiler stops a batch size once the op times' split-half error is low enough, after 6 to 30
steps depending on the model and the batch (:class:`~tfplace.estimator.statistics.RepeatPolicy`);
a statistic whose value depends on that number biases the short profiles. For each small model of
``benchmarks/fidelity.py`` (``MODEL_SIZES``), in one session under the profiler's config, this takes
``--traced_steps`` consecutive ``FULL_TRACE`` steps, cuts them into consecutive profiles of each of
``--profile_lengths`` steps and prints, per statistic of :data:`~tfplace.estimator.statistics.STATISTICS`,
the ops' summed statistic averaged over the profiles of that length (milliseconds). Run from the
repository root, on a quiet machine:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/statistic_vs_steps.py
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from absl import app, flags

from benchmarks.fidelity import FLAGS, MODEL_SIZES, Series, traced_step
from tfplace.estimator.statistics import STATISTICS, RepeatPolicy, location

# fidelity.py's --models serves here too
FLAGS.set_default("models", ["transformer", "nmt", "tensor_holography"])
flags.DEFINE_integer("traced_steps", 48, "Consecutive FULL_TRACE steps of one session.")
flags.DEFINE_list("profile_lengths", ["6", "8", "12", "16", "24", "48"], "Steps per profile cut from them.")


def op_times(name: str) -> np.ndarray:
    """Ops x steps: each op's traced time in ``--traced_steps`` consecutive steps (NaN where absent)."""
    import tensorflow as tf

    from models import build_model
    from tfplace.estimator.profiler import profiling_config
    from tfplace.tf_graph.step_stats import collect_op_traces

    knobs, batch = MODEL_SIZES[name]
    spec = build_model(name, **knobs)
    ops = frozenset(op.name for op in spec.graph.get_operations())
    with tf.compat.v1.Session(graph=spec.graph, config=profiling_config()) as session:
        session.run(spec.init_op)
        series = Series(session, spec.train_op, spec.feed_fn(batch))
        for _ in range(2):  # the profiler's warm-up
            session.run(series.fetches, series.feeds)
        steps = [collect_op_traces(traced_step(series), ops) for _ in range(FLAGS.traced_steps)]
    names = sorted({op for step in steps for op in step})
    return np.array([[step[op].compute_time if op in step else np.nan for step in steps] for op in names])


def summed_statistic(times: np.ndarray, statistic: str, steps: int) -> float:
    """The ops' summed ``statistic`` over consecutive profiles of ``steps`` of ``times``' steps,
    averaged over those profiles (seconds)."""
    policy = RepeatPolicy()
    sums = [
        float(
            np.nansum(
                location(times[:, start : start + steps], statistic, policy.trim, policy.lower_fraction)
            )
        )
        for start in range(0, times.shape[1] - steps + 1, steps)
    ]
    return float(np.mean(sums))


def main(argv: Sequence[str]) -> None:
    del argv
    lengths = [int(steps) for steps in FLAGS.profile_lengths]
    if max(lengths) > FLAGS.traced_steps:
        raise app.UsageError(
            f"--profile_lengths go up to {max(lengths)}, above --traced_steps={FLAGS.traced_steps}"
        )
    print("model,statistic," + ",".join(f"{steps} steps ms" for steps in lengths))
    for name in FLAGS.models:
        times = op_times(name)
        for statistic in STATISTICS:
            sums = [summed_statistic(times, statistic, steps) * 1e3 for steps in lengths]
            print(f"{name},{statistic}," + ",".join(f"{value:.3f}" for value in sums), flush=True)


if __name__ == "__main__":
    app.run(main)
