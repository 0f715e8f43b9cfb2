"""Fidelity of the plan simulator: simulated against measured step time of split plans.

As ``benchmarks/fidelity.py`` does for placements, and measured by the same procedure, for split
plans over two loopback workers: ``batch`` (every op that processes examples split along the
batch, weight gradients summed: data parallelism), ``channel`` (every convolution and its
gradients on output channels), ``height`` (every convolution and pooling along the height, halos
exchanged), and ``single`` (one worker, for reference). The step is simulated with
:func:`tfplace.split.expand.simulate_plan` on the profiled costs (the cost graph gains the split
fields with :func:`tfplace.tf_graph.split_attrs.annotate_split_fields`) and measured by running
the rewritten graph (:func:`tfplace.runner.placed_copy` of the plan's placement): every plan of a
model in two sessions at once, warmed up into the executor's steady state and stepping in
interleaved rounds of blocks of steps back to back (:func:`benchmarks.fidelity.interleaved_steps`);
``measured_s`` is the median step of both sessions, ``noise`` the two sessions' medians apart over
it. ``ops_ratio`` is the
traced seconds of the plan's ops in a steady step over their simulated seconds: 1 when the ops ran
as fast as profiled, so that an error with ``ops_ratio`` near 1 is the simulator's model of the
step (transfers, overheads), and one with ``ops_ratio`` far from 1 is the ops' speed in the run
(the load, or a profile taken otherwise than the steps run). Writes ``--output``
(``model,placement,simulated_s,measured_s,error,noise,ops_ratio``). Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/split_fidelity.py --max_load=1.5 --max_wait=120
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

from absl import app, flags, logging

from benchmarks.fidelity import (
    FLAGS,
    interleaved_steps,
    load,
    open_series,
    profiled_model,
    traced_step,
    wait_for_quiet,
    write_rows,
)

flags.DEFINE_integer("calibration_repeats", 10, "Timed steps per size when calibrating the loopback link.")
flags.DEFINE_list("plans", ["single", "batch", "channel", "height"], "Split plans to simulate and run.")
COLUMNS = ("model", "placement", "simulated_s", "measured_s", "error", "noise", "ops_ratio")
FLAGS.set_default("models", ["tensor_holography", "inception_v3"])
FLAGS.set_default("output", "results/split_fidelity.csv")


def plans(graph: Any, devices: list[str], batch: int) -> dict[str, Any]:
    """Each plan of ``--plans`` over ``devices`` on the model's graph."""
    from tfplace.split.rules import BATCH, CHANNEL, HEIGHT
    from tfplace.tf_graph.split_rewrite import uniform_plan

    convolutions = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    forced = {
        "single": {},
        "channel": {op.name: CHANNEL for op in graph.get_operations() if op.type in convolutions},
        "height": {op.name: HEIGHT for op in graph.get_operations() if op.type in ("Conv2D", "MaxPool")},
    }
    return {
        name: uniform_plan(graph, devices, BATCH, batch_size=batch, ops=forced.get(name))
        for name in FLAGS.plans
    }


def measure_model(name: str, cluster: Any, devices: Any) -> list[dict[str, Any]]:
    """Simulate each plan of ``name``, then run every plan in two sessions stepping in interleaved
    rounds (the procedure of ``benchmarks/fidelity.py``) and trace one steady step of each."""
    from tfplace.split.expand import simulate_plan
    from tfplace.split.plan import SplitPlan
    from tfplace.tf_graph.split_attrs import annotate_split_fields
    from tfplace.tf_graph.split_rewrite import static_graph

    wait_for_quiet()
    spec, batch, estimate = profiled_model(name)
    cost_graph = estimate.cost_graph
    annotate_split_fields(cost_graph, static_graph(spec.graph, batch))  # the attributes the rewrite sees
    cost_graph.set_transfer_model(devices.typical_link)
    rows = {}
    for plan_name, plan in plans(spec.graph, list(devices.names), batch).items():
        plan.devices = devices
        in_step = SplitPlan({op: plan.splits[op] for op in cost_graph}, devices, batch_size=batch)
        result, expanded = simulate_plan(cost_graph, in_step)
        rows[plan_name] = {
            "result": result,
            "expanded": expanded,
            "model": name,
            "placement": plan_name,
            "simulated_s": result.makespan,
            "placed": plan.to_placement(),
            "pieces": len(in_step.split_ops),
        }
    wait_for_quiet()
    before = load()
    with contextlib.ExitStack() as stack:
        sessions = [
            open_series(stack, spec, batch, row["placed"], "loopback", cluster, None)
            for row in rows.values()
            for _ in "ab"
        ]
        steps, _ = interleaved_steps(sessions, cluster.pids)
        loads = f"{before} -> {load()}"
        for index, row in enumerate(rows.values()):
            pair = sessions[2 * index : 2 * index + 2]
            row.update(steps=steps, load=loads, series=[series.wall for series in pair])
            row["trace"] = traced_step(pair[0])
    for row in rows.values():
        first, second = (statistics.median(series) for series in row["series"])
        row["measured_s"] = statistics.median([seconds for series in row["series"] for seconds in series])
        row["noise"] = abs(first - second) / row["measured_s"]
        row["error"] = (row["simulated_s"] - row["measured_s"]) / row["measured_s"]
        simulated_ops = sum(attrs["compute_time"] for _, attrs in row["expanded"].graph.nodes(data=True))
        row["ops_ratio"] = round(sum(traced_ops(row["trace"]).values()) / simulated_ops, 4)
        logging.info(
            "%s/%s: simulated %.4f s, measured %.4f s",
            name,
            row["placement"],
            row["simulated_s"],
            row["measured_s"],
        )
    return list(rows.values())


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.estimator.calibration import calibrate_local_cluster
    from tfplace.tf_graph.cluster import LocalCluster

    rows = []
    with LocalCluster(FLAGS.devices) as cluster:
        wait_for_quiet()
        calibration_load = load()
        devices = calibrate_local_cluster(cluster, 1 << 40, repeats=FLAGS.calibration_repeats)
        for name in FLAGS.models:
            rows += measure_model(name, cluster, devices)
    output = write_rows(FLAGS.output, rows, COLUMNS)
    print(f"calibrated at load {calibration_load}")
    print(output.read_text(), end="")
    print(
        "model,plan,split ops in the step,median step of each session [s],steps,load 1/5/15 min before -> after"
    )
    for row in rows:
        medians = " ".join(f"{statistics.median(series):.5f}" for series in row["series"])
        print(f"{row['model']},{row['placement']},{row['pieces']},{medians},{row['steps']},{row['load']}")
    print("model,plan: per worker, simulated / traced busy seconds of a steady traced step; tensors received")
    for row in rows:
        print(f"{row['model']},{row['placement']}: {explain(row['result'], row['trace'], devices)}")
    print(f"model,plan: per op type, simulated / traced ms of a steady traced step (top {TOP_TYPES})")
    for row in rows:
        print(f"{row['model']},{row['placement']}: {by_op_type(row['expanded'], row['trace'])}")


TOP_TYPES = 8
"""Op types :func:`by_op_type` prints per plan: those of the most simulated or traced time."""
_KERNEL_PREFIXES = ("_MklNative", "_Mkl")
_TRACED_AS = {"Conv2DWithBias": "Conv2D", "StridedSlice": "Slice"}
"""Traced op type -> the cost graph's: oneDNN's kernels are named by the op they run (a Conv2D fused
with its BiasAdd reports as one), and the slices the rewrite cuts (StridedSlice) are the
expansion's Slice nodes."""


def traced_ops(trace: Any) -> dict[str, float]:
    """Per op type (named as the cost graph names it), the traced seconds of the rewritten graph's
    nodes in ``trace`` (a ``RunMetadata``; every worker; the RPCs that received tensors and the
    send/receive kernels left out)."""
    from collections import Counter

    from tfplace.tf_graph.step_stats import node_compute_time

    traced: Counter[str] = Counter()
    for dev_stats in trace.step_stats.dev_stats:
        for node in dev_stats.node_stats:
            op_type = node.timeline_label.partition(" = ")[2].split("(", 1)[0]
            if node.node_name == "RecvTensor" or op_type in ("", "_Recv", "_Send", "_HostRecv", "_HostSend"):
                continue
            for prefix in _KERNEL_PREFIXES:
                op_type = op_type.removeprefix(prefix)
            traced[_TRACED_AS.get(op_type, op_type)] += node_compute_time(node)
    return traced


def by_op_type(expanded: Any, trace: Any) -> str:
    """Per op type, the simulated seconds of the expanded plan's nodes against the traced seconds
    (:func:`traced_ops`): per-op ratios stay meaningful on a loaded machine, where whole steps do not."""
    from collections import Counter

    simulated: Counter[str] = Counter()
    for _, attrs in expanded.graph.nodes(data=True):
        simulated[attrs["op_type"]] += attrs["compute_time"]
    traced = Counter(traced_ops(trace))
    top = sorted(set(simulated) | set(traced), key=lambda t: -max(simulated[t], traced[t]))[:TOP_TYPES]
    return " ".join(f"{t} {simulated[t] * 1e3:.2f}/{traced[t] * 1e3:.2f}" for t in top)


def explain(result: Any, trace: Any, devices: Any) -> str:
    """Per worker, simulated against traced busy seconds (every node the worker ran but the RPCs
    that received tensors), and simulated against traced tensors received (TensorFlow sends a
    control dependency across workers as an empty tensor: counted apart)."""
    from tfplace.core.devices import DeviceName
    from tfplace.tf_graph.step_stats import node_compute_time

    busy: dict[int, float] = {}
    received = controls = 0
    for dev_stats in trace.step_stats.dev_stats:
        task = DeviceName.parse(dev_stats.device).task
        for node in dev_stats.node_stats:
            if node.node_name == "RecvTensor" or " = _Recv(" in node.timeline_label:
                empty = node.timeline_label.startswith("[0B]")  # a control dependency across workers
                received += not empty
                controls += empty
            else:
                busy[task] = busy.get(task, 0.0) + node_compute_time(node)
    per_worker = " ".join(
        f"task{device.spec.task} {result.busy_time[d]:.4f}/{busy.get(device.spec.task, 0.0):.4f}"
        for d, device in enumerate(devices.devices)
    )
    return (
        f"busy {per_worker}; tensors received {result.transfers}/{received} "
        f"(and {controls} empty ones: control dependencies, simulated as messages)"
    )


if __name__ == "__main__":
    app.run(main)
