"""What one loopback worker adds to a one-device step: the same step in this process and on a worker.

The fidelity rows of one loopback worker (``benchmarks/fidelity.py``) ran 10-21% slower than the
simulation on Tensor Holography and Inception V3 while the virtual rows (the same ops in this
process) were within 2%. This benchmark runs each model's one-device placement both ways, in
alternating blocks of :data:`BLOCK` steps after the executor's warm-up (:data:`tfplace.estimator.calibration.STEADY_STATE_STEPS`),
and prints side by side, per step:

- wall-clock seconds, the minimum and the median of the rounds (on a busy machine only the
  minimum means something);
- CPU seconds of this process and of the workers (``/proc``), which a busy machine hardly
  changes: where the worker's step spends more than this process's, and how much the client's
  ``RunStep`` call costs;
- CPU seconds per step of each process split by thread name (``/proc/<pid>/task``): the
  executor's ``tf_Compute`` threads against the gRPC threads (``event_engine``, the unnamed
  ``python`` threads of a worker) and the client's own, which tells whether a worker's ops or its
  RPC work take the extra time;
- the profiler's statistic of every op's traced time (``RepeatPolicy().statistic`` of
  ``--traced_steps`` traced steps, as :mod:`tfplace.estimator.statistics` reduces a profile),
  summed per op type: whether the kernels themselves run slower in a worker;
- with ``--payload_kib``, the minimum step fed, or fetching, a tensor of each size in-process and
  on the worker: what a model's feeds cost (session 7, load 3-8: fed 16 against 384 KiB, 0.50-0.56
  against 0.71-0.72 ms on the worker, 0.14-0.19 against 0.14-0.15 ms in-process; Tensor Holography
  feeds 368 KB).

At load 6-8 (session 6): the kernels took the same time in a worker (Tensor Holography +1.0%, its
convolutions within 1%), the worker's CPU per step matched this process's (Inception V3 +0.4%,
the NMT +0.3%, Tensor Holography +2.4%), and the client spent 1.1-1.8 ms of CPU per step in its
``RunStep`` call; the minimum steps differed by 1.2 ms (NMT, Tensor Holography) to 2.8 ms
(Inception V3). By thread (session 7, Tensor Holography, load 7-10, 3 runs of 200 steps each way):
the ``tf_Compute`` thread spent 14.5-16.2 ms per step in-process and 14.3-16.5 ms on the worker,
the worker's RPC threads 0.3-0.5 ms, and the client 1.3-1.45 ms against 0.8-1.1 ms in-process;
the minimum steps differed by 0.55-1.5 ms. Run from the
repository root, on a quiet machine, after ``tfplace calibrate``:

    PYTHONPATH=. .venv/bin/python benchmarks/loopback_step.py
    PYTHONPATH=. .venv/bin/python benchmarks/loopback_step.py --models=tensor_holography --rounds=300
    PYTHONPATH=. .venv/bin/python benchmarks/loopback_step.py --models=nmt --rounds=100 --payload_kib=16,384
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from absl import app, flags

from benchmarks import fidelity

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 100, "Untraced steps of each session, in alternating blocks of BLOCK.")

BLOCK = 20
"""Steps of a session between two readings of its processes' thread CPU."""
flags.DEFINE_integer("traced_steps", 20, "Traced steps of each session for the per-op statistic.")
flags.DEFINE_list(
    "payload_kib",
    [],
    "Also time a step that is fed (and one that fetches) a float32 tensor of each of these KiB, "
    "in-process against on the worker: what a step's feeds and fetches cost (e.g. 16,384).",
)

KINDS = ("virtual", "loopback")


def op_type_times(graph, run_metadatas: Sequence) -> dict[str, float]:
    """Per op type, the summed profiler statistic (:class:`~tfplace.estimator.statistics.RepeatPolicy`'s)
    of the traced times of each op of ``graph`` over ``run_metadatas``; the executor's own records
    (``_SOURCE``, fed arguments, ``RecvTensor``) are no op of the graph and left out."""
    from tfplace.estimator.statistics import RepeatPolicy, location
    from tfplace.tf_graph.step_stats import node_compute_time

    policy = RepeatPolicy()
    ops = list(graph.get_operations())
    row = {op.name: i for i, op in enumerate(ops)}
    times = np.full((len(ops), len(run_metadatas)), np.nan)
    for step, metadata in enumerate(run_metadatas):
        for dev_stats in metadata.step_stats.dev_stats:
            for node in dev_stats.node_stats:
                if node.node_name in row:
                    times[row[node.node_name], step] = node_compute_time(node)
    ran = ~np.isnan(times).all(axis=1)
    shares = location(times[ran], policy.statistic, policy.trim, policy.lower_fraction)
    by_type: dict[str, float] = defaultdict(float)
    for op, share in zip((op for op, kept in zip(ops, ran) if kept), shares):
        by_type[op.type] += float(share)
    return dict(by_type)


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """User plus system CPU seconds of process ``pid``'s live threads, summed by thread name."""
    ticks = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = defaultdict(float)
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            by_name[name] += (int(fields[11]) + int(fields[12])) / ticks
    return dict(by_name)


def thread_split(spent: dict[str, float], steps: int) -> str:
    """``name ms`` per step of each thread name that spent CPU seconds (``spent``) over ``steps``."""
    return ", ".join(
        f"{name} {seconds / steps * 1e3:.3f} ms" for name, seconds in sorted(spent.items()) if seconds > 0
    )


def compare_model(name: str, cluster, calibration) -> None:
    """Print the model's one-device step in this process against the step on worker 0."""
    spec, batch, estimate = fidelity.profiled_model(name)
    FLAGS.devices = 1
    with contextlib.ExitStack() as stack:
        series = {}
        for kind in KINDS:
            devices = calibration.device_set(fidelity.device_names(kind, 1), 1 << 40)
            costs = calibration.step_costs(estimate.cost_graph, kind)
            placement = fidelity.placements(costs, estimate.imported.cost_graph, devices, ["single"])[
                "single"
            ]
            series[kind] = fidelity.open_series(stack, spec, batch, placement, kind, cluster, calibration)
        for steps in series.values():
            fidelity.warm_up(steps, cluster.pids)
        processes = {"client": os.getpid(), "worker": cluster.pids[0]}
        spent = {kind: {process: defaultdict(float) for process in processes} for kind in series}
        for _ in range(math.ceil(FLAGS.rounds / BLOCK)):  # blocks, each read per process, alternating
            for kind, steps in series.items():
                before = {process: thread_cpu_seconds(pid) for process, pid in processes.items()}
                for _ in range(BLOCK):
                    wall, cpu = steps.step(cluster.pids)
                    steps.wall.append(wall)
                    steps.cpu.append(cpu)
                for process, pid in processes.items():
                    for thread, seconds in thread_cpu_seconds(pid).items():
                        spent[kind][process][thread] += seconds - before[process].get(thread, 0.0)
        traced = {
            kind: [fidelity.traced_step(steps) for _ in range(FLAGS.traced_steps)]
            for kind, steps in series.items()
        }
    for kind, steps in series.items():
        print(
            f"{name},{kind},wall min {min(steps.wall) * 1e3:.3f} ms,median {statistics.median(steps.wall) * 1e3:.3f} ms,"
            f"CPU of all processes {statistics.mean(steps.cpu) * 1e3:.3f} ms"
        )
        for process, by_thread in spent[kind].items():
            print(f"  {process} CPU per step by thread: {thread_split(by_thread, len(steps.wall))}")
    here, worker = (op_type_times(spec.graph, traced[kind]) for kind in KINDS)
    print(
        f"{name},traced ops in-process {sum(here.values()) * 1e3:.3f} ms,on a worker {sum(worker.values()) * 1e3:.3f} ms"
    )
    for op_type in sorted(here, key=here.get, reverse=True)[:8]:
        ratio = worker.get(op_type, 0.0) / here[op_type] - 1 if here[op_type] else 0.0
        print(
            f"  {op_type}: {here[op_type] * 1e3:.3f} ms in-process, {worker.get(op_type, 0.0) * 1e3:.3f} ms on a worker ({ratio:+.1%})"
        )


def payload_sessions(stack, kind: str, cluster, kib: int) -> dict[str, tuple]:
    """Per direction (``feed``, ``fetch``), a session on ``kind``'s CPU 0 (closed with ``stack``)
    whose step is fed a float32 tensor of ``kib`` KiB and sums it, or fetches its double, with
    the arguments of ``session.run``."""
    import tensorflow as tf

    from tfplace.estimator.calibration import profiled_run_config

    config, target = profiled_run_config(), cluster.target if kind == "loopback" else ""
    if kind == "loopback":
        config.ClearField("device_count")
    values = np.ones(kib * 1024 // 4, dtype=np.float32)
    sessions = {}
    for direction in ("feed", "fetch"):
        graph = tf.Graph()
        with graph.as_default(), tf.device(fidelity.device_names(kind, 1)[0]):
            fed = tf.compat.v1.placeholder(tf.float32, values.shape)
            fetch = tf.reduce_sum(fed) if direction == "feed" else fed * 2.0
        session = stack.enter_context(tf.compat.v1.Session(target, graph=graph, config=config))
        sessions[direction] = (session, fetch, {fed: values})
    return sessions


def compare_payloads(cluster) -> None:
    """Print the minimum step fed, or fetching, each ``--payload_kib`` in-process and on worker 0,
    the sessions timed in interleaved rounds."""
    with contextlib.ExitStack() as stack:
        runs = {
            (kind, int(kib), direction): run
            for kind in KINDS
            for kib in FLAGS.payload_kib
            for direction, run in payload_sessions(stack, kind, cluster, int(kib)).items()
        }
        times: dict[tuple, list[float]] = defaultdict(list)
        for index in range(FLAGS.rounds + BLOCK):
            for key, (session, fetch, feeds) in runs.items():
                start = time.perf_counter()
                session.run(fetch, feeds)
                if index >= BLOCK:  # the first rounds warm up
                    times[key].append(time.perf_counter() - start)
    for (kind, kib, direction), seconds in times.items():
        print(f"payload,{kind},{direction} {kib} KiB,wall min {min(seconds) * 1e3:.3f} ms")


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    unknown = sorted(set(FLAGS.models) - set(fidelity.MODEL_SIZES))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(fidelity.MODEL_SIZES)}")
    calibration = CpuCalibration.load(FLAGS.calibration)
    with LocalCluster(1) as cluster:
        for name in FLAGS.models:
            compare_model(name, cluster, calibration)
        if FLAGS.payload_kib:
            compare_payloads(cluster)


if __name__ == "__main__":
    app.run(main)
