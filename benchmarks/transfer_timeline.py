"""When each tensor of a loopback split crosses, in a traced step and in its simulation.

``benchmarks/fidelity.py`` finds the two-worker splits simulated 9-30% under their measured step,
and ``benchmarks/split_cpu.py`` that a real transfer costs the workers about twice the CPU the
simulator charges. This benchmark looks at the transfers one by one. It runs a model's DFS-TOPO
split (``fidelity.placements``) on two fresh loopback workers, takes ``--traces`` traced steps,
each after the profiler's untraced steps, and reads every tensor a worker fetched from the other
(TensorFlow's ``RecvTensor`` records, :func:`~tfplace.tf_graph.step_stats.recv_tensor_records`).
It simulates each traced step on that step's own kernel times (the calibrated model of the
loopback workers around them), so that what differs is how the transfers and the executors
are modelled, not how fast the kernels ran, and prints per transfer, real beside simulated:

- *sender wait*: from the end of the producer to the start of sending (the later of the
  sender's start and the receiver's request: TensorFlow logs ``max`` of the two);
- *in flight*: from the start of sending until the receiver has the tensor;
- *latency*: the two together, from the producer's end to the arrival;

and the traced step against its simulation. It also traces the one-worker placement as many times,
interleaved with the split's traced steps, and prints the kernels' summed time per step in the
split against one worker (each op's median over the traces): for the ops under
:data:`SMALLEST_OP` on one worker, and of the others for those that read a tensor received from
the other worker and for the rest.

It times ``--untraced_steps`` untraced steps of each placement before each traced one (the
profiler's statistic of them), so that the simulation on the split's traced kernel times can be
set against the real, untraced step as ``fidelity.py`` measures it.

Measured in session 17 (01:12, load 0.4-1.6, 5 traces each; untraced split / one worker /
simulated on the split's traced kernel times, the devices following TensorFlow's executor as in
the fidelity rows): Tensor Holography 28.2 / 15.6 / 27.5 ms, the small NMT 19.1 / 5.9 / 18.1 ms,
the small Transformer 37.2 / 20.8 / 43.4 ms (its traced kernels inflated, as in its one-device
rows). Per transfer (medians) the real sender waited 123 / 10 / 1,042 us where the simulated one
waits 1,019 / 489 / 6,809 us, and the real latency was 636 / 477 / 3,113 us against 2,020 / 943 /
7,234 us: the simulator delivers later, not earlier. The split's kernels ran longer than one
worker's: the ops under 20 us by 50% / 48% / 26% (0.3-0.7 us each), those reading a received
tensor by 29% / 84% / 20%, the others by 10% / -4% / 8%. So on the split's own kernel times the
simulator is 2% (Tensor Holography) and 5% (NMT) under the untraced split step (the Transformer
17% over, its traced kernels inflated), where on the one-worker profile (``fidelity.py``) it was
9-20% (NMT) and 18-30% (Tensor Holography) under. Traced kernels
overstate an untraced split's, though: a chain of small dense layers split over two workers
(exploratory) cost 0.270 us per op untraced against 0.254 us on one worker, its traced kernels
0.49 against 0.39 us.
Linux only. Run from the repository root, after
``tfplace calibrate``:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/transfer_timeline.py --models=tensor_holography,nmt
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from benchmarks import fidelity  # and its flags --models, --calibration, --warmup_steps

FLAGS = flags.FLAGS
flags.DEFINE_integer("traces", 5, "Traced steps of each placement, each after the profiler's untraced steps.")
flags.DEFINE_integer("untraced_steps", 10, "Timed untraced steps of each placement before each traced one.")

PHASES = ("sender wait", "in flight", "latency")

SMALLEST_OP = 20e-6
"""Ops under this long on one worker are compared as a class of their own: their kernel's time is
mostly the executor's and the tracer's handling."""


def phases_of(produced: float, sent: float, arrived: float) -> tuple[float, float, float]:
    """The three :data:`PHASES` of a tensor produced, sent and arrived at these seconds."""
    return sent - produced, arrived - sent, arrived - produced


def node_ends(run_metadata: Any) -> tuple[float, float, dict[str, float]]:
    """The first start and the last end of a traced step's records, and when each node ended (seconds)."""
    starts, ends = [], {}
    for device in run_metadata.step_stats.dev_stats:
        for node in device.node_stats:
            start = node.all_start_micros * 1e-6
            starts.append(start)
            ends[node.node_name] = max(ends.get(node.node_name, 0.0), start + node.all_end_rel_micros * 1e-6)
    return min(starts), max(ends.values()), ends


def real_phases(run_metadata: Any) -> tuple[float, dict[tuple[str, str], tuple[float, float, float]]]:
    """The traced step's seconds, and per ``(producer, receiving device)`` its three
    :data:`PHASES` (tensors whose producer has no record, the fed ones, are left out)."""
    from tfplace.tf_graph.step_stats import recv_tensor_records

    first, last, ends = node_ends(run_metadata)
    phases = {}
    for record in recv_tensor_records(run_metadata):
        if record.producer in ends:
            phases[record.producer, record.dst_device] = phases_of(
                ends[record.producer], record.start, record.end
            )
    return last - first, phases


def simulated_phases(
    cost_graph: Any, assignment: dict[str, str], devices: Any
) -> tuple[float, dict[tuple[str, str], tuple[float, float, float]]]:
    """The simulated step's seconds, the devices following TensorFlow's CPU executor as in the
    fidelity rows (:func:`fidelity.simulated`), and the same :data:`PHASES` per transfer: from the
    producer's end to its send task's start, from there to the arrival (the copies, then the link's
    :meth:`~tfplace.core.transfer.TransferModel.delay`)."""
    result = fidelity.simulated(cost_graph, assignment, devices, record=True)
    ends = {task.op: task.end for task in result.schedule.ops}
    phases = {}
    for task in result.schedule.transfers:
        link = devices.link(task.src, task.dst)
        arrival = task.end + link.delay(task.bytes)
        phases[task.producer, devices.names[task.dst]] = phases_of(ends[task.producer], task.start, arrival)
    return result.makespan, phases


def measure(name: str, calibration: Any) -> str:
    """The lines of ``name``'s report (see the module docstring)."""
    from tfplace.estimator.profiler import UNTRACED_BEFORE_TRACE
    from tfplace.estimator.step_timing import step_statistic
    from tfplace.tf_graph.cluster import LocalCluster
    from tfplace.tf_graph.step_stats import collect_op_traces

    spec, batch, estimate, devices, costs, placed = fidelity.loopback_placements(
        name, calibration, ["single", "dfs_topo"]
    )
    split = placed["dfs_topo"]
    traced: dict[str, list[Any]] = {placer: [] for placer in placed}
    untraced: dict[str, list[float]] = {placer: [] for placer in placed}
    with LocalCluster(2) as cluster, contextlib.ExitStack() as stack:
        sessions = fidelity.open_warm_sessions(stack, spec, batch, placed, cluster, calibration)
        for _ in range(FLAGS.traces):
            for placer, series in sessions.items():
                series.step([])  # after the other session's step
                untraced[placer] += [series.step([])[0] for _ in range(FLAGS.untraced_steps)]
                for _ in range(UNTRACED_BEFORE_TRACE):
                    series.step([])
                traced[placer].append(fidelity.traced_step(series))
    ops = frozenset(estimate.cost_graph)
    kernels = {
        placer: [{op: t.compute_time for op, t in collect_op_traces(trace, ops).items()} for trace in traces]
        for placer, traces in traced.items()
    }
    traces = traced["dfs_topo"]
    steps: dict[str, list[float]] = {"real": [], "simulated": []}
    samples: dict[str, list[tuple[float, float, float]]] = {"real": [], "simulated": []}
    for trace, times in zip(traces, kernels["dfs_topo"]):
        own_times, _ = fidelity.with_compute_times(estimate.cost_graph, times)
        step_costs = fidelity.calibrated_costs(calibration, "loopback", own_times, devices)
        assignment = {op: split.assignment[op] for op in step_costs}
        real_step, real = real_phases(trace)
        simulated_step, simulated = simulated_phases(step_costs, assignment, devices)
        matched = real.keys() & simulated.keys()
        steps["real"].append(real_step)
        steps["simulated"].append(simulated_step)
        samples["real"] += [real[key] for key in matched]
        samples["simulated"] += [simulated[key] for key in matched]
    lines = [
        f"{name} dfs_topo on 2 loopback workers, {len(traces)} traced steps (load {fidelity.load()}): "
        f"untraced step {step_statistic(untraced['dfs_topo']) * 1e3:.2f} ms (one worker "
        f"{step_statistic(untraced['single']) * 1e3:.2f}), traced "
        f"{statistics.median(steps['real']) * 1e3:.2f} ms, simulated on the traced kernel times "
        f"{statistics.median(steps['simulated']) * 1e3:.2f} ms; "
        f"{len(samples['real']) // max(len(traces), 1)} transfers per step matched"
    ]
    for side, values in samples.items():
        parts = []
        for index, phase in enumerate(PHASES):
            seconds = [value[index] for value in values] or [0.0]
            parts.append(
                f"{phase} median {statistics.median(seconds) * 1e6:.0f} us, mean {statistics.mean(seconds) * 1e6:.0f} us"
            )
        lines.append(f"  {side:9s}: " + "; ".join(parts))
    lines.append(received_input_slowdown(costs, split.assignment, kernels["single"], kernels["dfs_topo"]))
    return "\n".join(lines)


def received_input_slowdown(
    cost_graph: Any,
    assignment: dict[str, str],
    one_worker: list[dict[str, float]],
    split: list[dict[str, float]],
) -> str:
    """The kernels' summed time per step on the split against one worker (each op's median over the
    traces): the ops under :data:`SMALLEST_OP` on one worker, and of the others those with an input
    from the other worker and the rest."""

    def median_times(traces: list[dict[str, float]]) -> dict[str, float]:
        return {
            op: statistics.median(trace[op] for trace in traces) for op in set.intersection(*map(set, traces))
        }

    alone, apart = median_times(one_worker), median_times(split)
    classes = ("under 20 us", "with a received input", "the others")
    sums = {label: [0.0, 0.0, 0] for label in classes}
    for op in alone.keys() & apart.keys():
        if alone[op] < SMALLEST_OP:
            label = classes[0]
        elif any(assignment[u] != assignment[op] for u in cost_graph.predecessors(op)):
            label = classes[1]
        else:
            label = classes[2]
        totals = sums[label]
        totals[0] += apart[op]
        totals[1] += alone[op]
        totals[2] += 1
    return "  kernels, split against one worker: " + "; ".join(
        f"{label} {count} ops {split_s * 1e3:.2f} against {one_s * 1e3:.2f} ms ({split_s / max(one_s, 1e-12) - 1:+.0%})"
        for label, (split_s, one_s, count) in sums.items()
    )


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.core.device_model import CpuCalibration

    calibration = CpuCalibration.load(FLAGS.calibration)
    for name in FLAGS.models:
        fidelity.wait_for_quiet()
        print(measure(name, calibration), flush=True)


if __name__ == "__main__":
    app.run(main)
