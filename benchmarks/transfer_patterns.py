"""What one transfer costs when transfers come one at a time, against a burst of them at once.

``tfplace calibrate`` charges each transfer between loopback workers ``copy_b + copy_k * bytes``
of CPU on the sender and on the receiver (:func:`tfplace.estimator.calibration.calibrate_copy_cpu`),
with ``copy_b`` measured on a burst: ``count`` tensors of 1 KiB sent in one step, all at once. In
a training step split over devices most transfers come one at a time, each waking a receiver that
waited for it. This benchmark times both patterns with tensors of ``--tensor_bytes``, in one
session per device kind, after ``--warmup_steps`` steps of each (the executor's steady state),
in ``--rounds`` rounds that take each step kind in turn (a slow phase of the machine falls on
all of them), ``--transfers`` transfers per step:

- ``chain``: ``x = x + 1`` ``--transfers`` times on the first device (no transfer), and
  ``ping-pong``: the same chain alternating between the two devices, each op waiting for the
  tensor the other device's op made (one transfer in flight at a time);
- ``local``: ``--transfers`` tensors made on the first device and summed there, and ``burst``:
  the same tensors summed on the second device (every transfer at once, as the calibration
  measures ``copy_b``).

Per transfer, from the differences ping-pong minus chain and burst minus local, it prints the
wall-clock seconds (the tenth quantile of the rounds' steps, the profiler's statistic) and, on
loopback, the CPU seconds of the two workers and of this process (``/proc``, which the kernel
counts in ticks of 10 ms: ``--rounds`` times ``--block_steps`` steps of 100 transfers come to
hundreds of ticks), beside the calibration's ``2 * copy_b`` (sender and receiver) and ``b``.

Measured in session 14 (1 KiB, 100 transfers, load 0.5-0.7): on loopback, one at a time 214 us
of CPU per transfer in the two workers and 155 us of wall-clock time, a burst 79 us and 44 us,
the calibration's ``2 * copy_b`` 99 us and ``b`` 293 us; on virtual CPUs 1.9 us one at a time and
1.1 us in a burst, the calibration's ``b`` 3.0 us.
Run from the repository root, after ``tfplace calibrate``:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/transfer_patterns.py
    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/transfer_patterns.py \\
        --kinds=loopback --tensor_bytes=4,65536
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from benchmarks import fidelity  # and its flags --kinds, --devices, --warmup_steps, --calibration

FLAGS = flags.FLAGS
flags.DEFINE_list("tensor_bytes", ["1024"], "Bytes of each transferred tensor (multiples of 4).")
flags.DEFINE_integer("transfers", 100, "Transfers per step.")
flags.DEFINE_integer("rounds", 20, "Rounds; each runs every step kind in turn.")
flags.DEFINE_integer("block_steps", 5, "Timed steps of each kind per round, after one untimed step.")

STEP_KINDS = ("chain", "ping-pong", "local", "burst")
"""The steps of :func:`transfer_steps`, in the order each round runs them."""


def transfer_steps(
    devices: Sequence[str], tensor_bytes: int, transfers: int
) -> tuple[Any, Any, dict[str, Any]]:
    """A graph of the four :data:`STEP_KINDS` between ``devices[0]`` and ``devices[1]``, its
    initializer, and the fetch of each kind."""
    import tensorflow as tf

    first, second = devices[0], devices[1]
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(first):
            source = tf.compat.v1.Variable(tf.zeros([tensor_bytes // 4]), name="source").read_value()

        def chain(on: Sequence[str]) -> Any:
            x = source
            for i in range(transfers):
                with tf.device(on[i % len(on)]):
                    x = x + 1.0
            with tf.device(first):
                return tf.reduce_sum(x)

        with tf.device(first):
            tensors = [source + float(i) for i in range(transfers)]
            local = tf.add_n(tensors)
        with tf.device(second):
            summed = tf.add_n(tensors)
        with tf.device(first):
            burst = tf.reduce_sum(summed)
        fetches = {
            "chain": chain([first]),
            "ping-pong": chain([second, first]),
            "local": tf.reduce_sum(local),
            "burst": burst,
        }
        initializer = tf.compat.v1.global_variables_initializer()
    return graph, initializer, fetches


def measure(
    session: Any, fetches: dict[str, Any], pids: Sequence[int]
) -> dict[str, tuple[float, list[float]]]:
    """Per step kind, the profiler's statistic of its timed steps' seconds
    (:func:`~tfplace.estimator.step_timing.step_statistic`) and the CPU seconds per step of each of
    ``pids`` over all its timed steps."""
    from tfplace.estimator.calibration import process_cpu_seconds
    from tfplace.estimator.step_timing import step_statistic

    for kind in STEP_KINDS:
        for _ in range(FLAGS.warmup_steps):
            session.run(fetches[kind])
    wall: dict[str, list[float]] = {kind: [] for kind in STEP_KINDS}
    cpu = {kind: [0.0] * len(pids) for kind in STEP_KINDS}
    for _ in range(FLAGS.rounds):
        for kind in STEP_KINDS:
            session.run(fetches[kind])
            before = [process_cpu_seconds(pid) for pid in pids]
            for _ in range(FLAGS.block_steps):
                start = time.perf_counter()
                session.run(fetches[kind])
                wall[kind].append(time.perf_counter() - start)
            spent = [process_cpu_seconds(pid) - seconds for pid, seconds in zip(pids, before)]
            cpu[kind] = [total + more for total, more in zip(cpu[kind], spent)]
    steps = FLAGS.rounds * FLAGS.block_steps
    return {
        kind: (step_statistic(wall[kind]), [seconds / steps for seconds in cpu[kind]]) for kind in STEP_KINDS
    }


def report(kind: str, tensor_bytes: int, measured: dict[str, tuple[float, list[float]]], link: Any) -> str:
    """One line per pattern: wall and CPU microseconds per transfer, beside the calibrated link."""
    n = FLAGS.transfers
    lines = []
    for pattern, (with_transfers, without) in (
        ("one at a time", ("ping-pong", "chain")),
        ("burst", ("burst", "local")),
    ):
        wall = (measured[with_transfers][0] - measured[without][0]) / n
        cpu = [(a - b) / n for a, b in zip(measured[with_transfers][1], measured[without][1])]
        parts = [f"{kind} {tensor_bytes} B, {pattern}: wall {wall * 1e6:.1f} us per transfer"]
        if len(cpu) > 1:
            parts.append(f"CPU workers {sum(cpu[:-1]) * 1e6:.1f} us, this process {cpu[-1] * 1e6:.1f} us")
        lines.append(", ".join(parts))
    lines.append(
        f"{kind} calibrated link: b {link.b * 1e6:.1f} us, 2 * copy_b {2 * link.copy_b * 1e6:.1f} us, "
        f"2 * copy_k * bytes {2 * link.copy_k * tensor_bytes * 1e6:.2f} us"
    )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    del argv
    import tensorflow as tf

    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    tf.compat.v1.disable_eager_execution()
    calibration = CpuCalibration.load(FLAGS.calibration)
    sizes = [int(size) for size in FLAGS.tensor_bytes]
    bad = [size for size in sizes if size < 4 or size % 4]
    if bad or FLAGS.transfers < 1 or FLAGS.rounds < 1 or FLAGS.block_steps < 1:
        raise app.UsageError(
            f"need tensor sizes that are positive multiples of 4 (got {bad}) and positive counts"
        )
    for kind in FLAGS.kinds:
        with contextlib.ExitStack() as stack:
            names = fidelity.device_names(kind, 2)
            cluster = stack.enter_context(LocalCluster(2)) if kind == "loopback" else None
            config, target = fidelity.run_config(kind, cluster, calibration)
            pids = [*cluster.pids[:2], os.getpid()] if cluster is not None else [os.getpid()]
            link = calibration.device_set(names, 1 << 40).typical_link
            for size in sizes:
                graph, initializer, fetches = transfer_steps(names, size, FLAGS.transfers)
                with tf.compat.v1.Session(target, graph=graph, config=config) as session:
                    session.run(initializer)
                    measured = measure(session, fetches, pids)
                print(report(kind, size, measured, link), f"(load {fidelity.load()})", flush=True)


if __name__ == "__main__":
    app.run(main)
