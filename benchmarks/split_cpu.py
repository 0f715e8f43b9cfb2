"""Where the CPU of a step split over two loopback workers goes, against the same step on one.

``benchmarks/fidelity.py`` finds the two-worker splits simulated 9-30% under their measured step
(session 16). The simulator charges each gRPC transfer ``copy_b + copy_k * bytes`` of CPU on the
sender and on the receiver, measured on a burst of tensors
(:func:`tfplace.estimator.calibration.calibrate_copy_cpu`). This benchmark runs a model's
one-worker placement and its DFS-TOPO split (``fidelity.placements``) on two fresh loopback
workers, interleaved in ``--rounds`` rounds of ``--block_steps`` steps after the warm-up, and reads
every worker thread's nanoseconds on a CPU (``/proc/<pid>/task/<tid>/schedstat``) around each
block. It prints, per placement, the step (the profiler's statistic of the steps), the CPU per step
of each worker's threads grouped by name (``tf_Compute``: the executor's inter-op pool, where
the ops and the sends run; ``event_engine``: gRPC's; ``python``: the other threads the worker
process started, gRPC's server among them), and the split's CPU beyond the one-worker step per
simulated transfer beside the calibration's ``2 * copy_b``.

Measured in session 16 (Tensor Holography, load below 1.5, exploratory script of the same
procedure): the one-worker step 14.3 ms and 13.8 ms of CPU, the split 27.2 ms and 36.9 ms of CPU
(``tf_Compute`` 22.7 ms, ``event_engine`` 7.8 ms, ``python`` 6.2 ms): 216 us per transfer
against 109 us simulated. Linux only. Run from the repository root, after ``tfplace calibrate``:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/split_cpu.py --models=tensor_holography,nmt
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from absl import app, flags

from benchmarks import fidelity  # and its flags --models, --calibration, --warmup_steps

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 20, "Rounds; each runs a block of steps of each placement in turn.")
flags.DEFINE_integer("block_steps", 10, "Timed steps of each placement per round, after one untimed step.")

PLACEMENTS = ("single", "dfs_topo")


def thread_cpu_ns(pids: Sequence[int]) -> Counter[tuple[int, str]]:
    """Nanoseconds on a CPU so far of every thread of ``pids``, summed by (worker index, thread name)."""
    from tfplace.estimator.thread_accounting import named_threads

    spent: Counter[tuple[int, str]] = Counter()
    for worker, pid in enumerate(pids):
        for name, times in named_threads(Path(f"/proc/{pid}/task")).values():
            spent[worker, name] += times.running_ns
    return spent


def measure(name: str, calibration) -> str:
    """The lines of ``name``'s report (see the module docstring)."""
    from tfplace.estimator.step_timing import step_statistic
    from tfplace.tf_graph.cluster import LocalCluster

    spec, batch, _, devices, costs, placed = fidelity.loopback_placements(name, calibration, PLACEMENTS)
    walls: dict[str, list[float]] = {placer: [] for placer in placed}
    cpu: dict[str, Counter[tuple[int, str]]] = {placer: Counter() for placer in placed}
    with LocalCluster(2) as cluster, contextlib.ExitStack() as stack:
        sessions = fidelity.open_warm_sessions(stack, spec, batch, placed, cluster, calibration)
        for _ in range(FLAGS.rounds):
            for placer, series in sessions.items():
                series.step([])
                before = thread_cpu_ns(cluster.pids)
                walls[placer] += [series.step([])[0] for _ in range(FLAGS.block_steps)]
                cpu[placer] += thread_cpu_ns(cluster.pids) - before
    steps = FLAGS.rounds * FLAGS.block_steps
    per_step = {placer: sum(spent.values()) / steps / 1e9 for placer, spent in cpu.items()}
    lines = []
    for placer, spent in cpu.items():
        threads = ", ".join(
            f"worker {worker} {thread} {ns / steps / 1e6:.2f}"
            for (worker, thread), ns in spent.most_common(8)
        )
        lines.append(
            f"{name} {placer}: step {step_statistic(walls[placer]) * 1e3:.2f} ms, "
            f"CPU {per_step[placer] * 1e3:.2f} ms per step ({threads})"
        )
    split = placed["dfs_topo"]
    transfers = fidelity.simulated(costs, {op: split.assignment[op] for op in costs}, devices).transfers
    link = devices.inter_host
    extra = (per_step["dfs_topo"] - per_step["single"]) / max(transfers, 1)
    lines.append(
        f"{name}: the split's CPU beyond one worker's per simulated transfer ({transfers}): "
        f"{extra * 1e6:.0f} us, simulated 2 * copy_b = {2 * link.copy_b * 1e6:.0f} us (plus 2 * copy_k per byte)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.core.device_model import CpuCalibration

    calibration = CpuCalibration.load(FLAGS.calibration)
    for name in FLAGS.models:
        fidelity.wait_for_quiet()
        print(measure(name, calibration), f"(load {fidelity.load()})", flush=True)


if __name__ == "__main__":
    app.run(main)
