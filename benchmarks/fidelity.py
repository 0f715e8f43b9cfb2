"""Fidelity of the simulator: the simulated step time of placed graphs against the measured one.

For each model (small variants of :mod:`models`) and each placement (one device, and splits over
loopback worker processes), the step is

- simulated (:func:`tfplace.simulator.simulate`) on the costs Standard Evaluation measured at the
  batch size, with the transfer model and the per-worker step overhead calibrated on the same
  loopback cluster (:func:`tfplace.estimator.calibration.calibrate_transfer`,
  :func:`~tfplace.estimator.calibration.calibrate_step_overhead`) and the CPU the workers spend
  on each transfer (``TransferModel.copy_k``, ``copy_b``:
  :func:`~tfplace.estimator.calibration.calibrate_copy_cpu`),
- and measured (:func:`tfplace.runner.run_placement`: warm-up steps dropped, the mean of the next
  ones), ``--repeats`` times in turns across the placements; ``--statistic`` combines the means
  (the median; the smallest on a busy machine, since other processes only add time).

``error = (simulated - measured) / measured``; the target is within 10% (the accuracy OptCNN's cost
model reaches, section 6.2). Other processes on the machine distort the measurement: each run
waits until the one-minute load average is below ``--max_load`` (at most ``--max_wait`` seconds),
and the printout records the load of every measurement. Writes ``--output`` (columns
``model,placement,simulated_s,measured_s,error``) and prints it. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py
    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py --models=tensor_holography --repeats=5
"""

from __future__ import annotations

import csv
import dataclasses
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["tensor_holography", "inception_v3"], "Models to place, run and simulate.")
flags.DEFINE_list("placements", ["single", "dfs_topo", "m_topo"], "Placers (tfplace.placer.PLACERS).")
flags.DEFINE_integer("workers", 2, "Loopback worker processes (devices /job:worker/task:i/device:CPU:0).")
flags.DEFINE_integer("steps", 10, "Timed steps per run, after the warm-up.")
flags.DEFINE_integer("warmup_steps", 3, "Steps dropped at the start of each run.")
flags.DEFINE_integer("repeats", 5, "Runs per placement, taken in turns across the placements.")
flags.DEFINE_enum(
    "statistic",
    "median",
    ["median", "min"],
    "How the repeats' mean step times combine into measured_s. On a busy machine, min: other "
    "processes only ever add time, so the smallest is the closest to a quiet machine's.",
)
flags.DEFINE_float("max_load", 0.8, "Wait before each run until the 1-minute load average is below this.")
flags.DEFINE_float("max_wait", 600.0, "Seconds to wait for a low load before measuring anyway.")
flags.DEFINE_enum(
    "costs",
    "profile",
    ["profile", "worker"],
    "Per-op costs: Standard Evaluation's in-process profile at the batch size, or its step 2 run on "
    "worker 0 (traced where the steps run).",
)
flags.DEFINE_integer("calibration_repeats", 10, "Timed steps per size when calibrating the transfer model.")
flags.DEFINE_string("output", "results/fidelity.csv", "CSV file written.")
flags.DEFINE_string(
    "trace_dir", None, "Write the real and simulated Chrome traces, placements and cost graphs here."
)
flags.DEFINE_string("cache_dir", None, "Profile cache directory (none: always measure).")

#: Size knobs and batch size of each model: steps of tens of milliseconds on one 2-core worker.
MODEL_SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "tensor_holography": ({"image_size": 64, "conv_layers": 10, "filters": 16}, 4),
    "inception_v3": ({"image_size": 75, "classes": 10}, 2),
    "transformer": (
        {"layers": 2, "heads": 4, "d_model": 128, "d_ff": 256, "source_length": 16, "target_length": 16},
        8,
    ),
}

COLUMNS = ("model", "placement", "simulated_s", "measured_s", "error")

STATISTICS = {"min": min, "median": statistics.median}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def wait_for_quiet() -> None:
    """Sleep until the 1-minute load average is below ``--max_load`` or ``--max_wait`` has passed."""
    deadline = time.monotonic() + FLAGS.max_wait
    while os.getloadavg()[0] >= FLAGS.max_load and time.monotonic() < deadline:
        time.sleep(5)
    if os.getloadavg()[0] >= FLAGS.max_load:
        logging.warning("measuring at load %s (above --max_load=%s)", load(), FLAGS.max_load)


def placements(cost_graph, structure, devices, names: Sequence[str]) -> dict[str, Any]:
    """Each placer's placement of the step, extended to every op of ``structure``.

    DFS-TOPO fills a device up to its memory: it gets devices of 55% of the step's memory each,
    so that it splits the model in two contiguous parts, as Standard Evaluation step 2 would.
    """
    from tfplace.api import place_costs
    from tfplace.core.devices import Device
    from tfplace.core.indexed import index_graph

    total = int(index_graph(cost_graph, devices.typical_link).memory.sum())
    result = {}
    for name in names:
        placed_on = devices
        if name == "dfs_topo":
            capped = tuple(Device(d.name, max(int(0.55 * total), 1)) for d in devices.devices)
            placed_on = dataclasses.replace(devices, devices=capped)
        placement = place_costs(cost_graph, placed_on, structure=structure, placer=name, simulate=False)
        placement.devices = devices
        result[name] = placement
    return result


def explain(result, report, cost_graph, devices) -> str:
    """Per device, simulated against traced busy seconds (the traced step's op times), and the
    simulated against traced number of tensors received: where a miss comes from."""
    from tfplace.core.devices import DeviceName
    from tfplace.tf_graph.step_stats import collect_op_traces

    traced: dict[Any, float] = {}
    for trace in collect_op_traces(report.run_metadata[-1], set(cost_graph)).values():
        spec = DeviceName.parse(trace.device)
        traced[spec] = traced.get(spec, 0.0) + trace.compute_time
    received = sum(  # a worker records the RPC that fetched a tensor as "RecvTensor"
        node.node_name == "RecvTensor" or " = _Recv(" in node.timeline_label
        for dev_stats in report.run_metadata[-1].step_stats.dev_stats
        for node in dev_stats.node_stats
    )
    busy = " ".join(
        f"task{device.spec.task} {result.busy_time[d]:.4f}/{traced.get(device.spec, 0.0):.4f}"
        for d, device in enumerate(devices.devices)
    )
    return f"busy s sim/traced: {busy}; tensors received sim/traced {result.transfers}/{received}"


def measure_model(name: str, cluster, devices) -> list[dict[str, Any]]:
    """Profile, place, simulate and run ``name``; the repeats go round the placements in turn,
    so that a busy spell of the machine slows every placement a little rather than one a lot."""
    from models import build_model
    from tfplace.api import estimate_costs, measurement_placement
    from tfplace.core.costgraph import save_json
    from tfplace.estimator.refine import refine_costs
    from tfplace.runner import run_placement
    from tfplace.simulator import simulate

    knobs, batch = MODEL_SIZES[name]
    spec = build_model(name, **knobs)
    wait_for_quiet()
    estimate = estimate_costs(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch,
        profile_batch_sizes=[batch],
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir,
    )
    cost_graph = estimate.cost_graph
    if FLAGS.costs == "worker":
        cost_graph = refine_costs(
            spec.graph,
            spec.train_op,
            spec.feed_fn,
            cost_graph,
            measurement_placement(
                cost_graph,
                estimate.imported.cost_graph,
                dataclasses.replace(devices, devices=devices.devices[:1]),
            ),
            run_placement,
            traced_steps=5,
            init_op=spec.init_op,
            cluster=cluster,
        ).cost_graph
    cost_graph.set_transfer_model(devices.typical_link)
    if FLAGS.trace_dir:
        save_json(cost_graph, Path(FLAGS.trace_dir) / f"{name}.costgraph.json.gz")
    placed = placements(cost_graph, estimate.imported.cost_graph, devices, FLAGS.placements)
    rows = {}
    for placer, placement in placed.items():
        result = simulate(cost_graph, {op: placement.assignment[op] for op in cost_graph}, devices)
        rows[placer] = {"model": name, "placement": placer, "simulated_s": result.makespan, "result": result}
        rows[placer].update(runs=[], loads=[], devices=len({placement.assignment[op] for op in cost_graph}))
    for repeat in range(FLAGS.repeats):
        for placer, placement in placed.items():
            trace = None
            if FLAGS.trace_dir and repeat == FLAGS.repeats - 1:
                trace = Path(FLAGS.trace_dir) / f"{name}_{placer}.json"
                placement.save(trace.with_suffix(".placement.json"))
            row = rows[placer]
            row["report"] = run_once(spec, batch, placement, cluster, trace, row["loads"])
            row["runs"].append(row["report"].mean_step_time)
    for placer, row in rows.items():
        row["measured_s"] = STATISTICS[FLAGS.statistic](row["runs"])
        row["error"] = (row["simulated_s"] - row["measured_s"]) / row["measured_s"]
        row["explained"] = explain(row["result"], row["report"], cost_graph, devices)
        logging.info(
            "%s/%s: simulated %.4f s, measured %.4f s", name, placer, row["simulated_s"], row["measured_s"]
        )
    return list(rows.values())


def run_once(spec, batch: int, placement, cluster, trace: Path | None, loads: list[str]):
    """One run of ``placement`` once the machine is quiet; its load before and after goes to ``loads``."""
    from tfplace.runner import run_placement

    wait_for_quiet()
    before = load()
    report = run_placement(
        spec.graph,
        placement,
        spec.train_op,
        spec.feed_fn,
        batch_size=batch,
        steps=FLAGS.steps,
        warmup_steps=FLAGS.warmup_steps,
        cluster=cluster,
        init_op=spec.init_op,
        trace_path=trace,
    )
    if report.mismatches:
        logging.warning("%s: %d ops ran elsewhere than placed", placement.placer, len(report.mismatches))
    loads.append(f"{before} -> {load()}")
    return report


def write_rows(rows: list[dict[str, Any]]) -> Path:
    """Write the rows' :data:`COLUMNS` to ``--output`` (times and errors to 6 decimals); its path."""
    output = Path(FLAGS.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, **{k: f"{row[k]:.6f}" for k in ("simulated_s", "measured_s", "error")}})
    return output


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.estimator.calibration import calibrate_local_cluster
    from tfplace.tf_graph.cluster import LocalCluster

    unknown = sorted(set(FLAGS.models) - set(MODEL_SIZES))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(MODEL_SIZES)}")
    rows = []
    if FLAGS.trace_dir:
        Path(FLAGS.trace_dir).mkdir(parents=True, exist_ok=True)
    with LocalCluster(FLAGS.workers) as cluster:
        wait_for_quiet()
        calibration_load = load()
        devices = calibrate_local_cluster(cluster, 1 << 40, repeats=FLAGS.calibration_repeats)
        link, overhead = devices.inter_host, devices.step_overhead
        for name in FLAGS.models:
            rows += measure_model(name, cluster, devices)
    output = write_rows(rows)
    print(
        f"loopback gRPC (calibrated at load {calibration_load}): k={link.k:.3e} s/B, b={link.b * 1e6:.0f} us, "
        f"CPU on each side {link.copy_b * 1e6:.0f} us + {link.copy_k:.3e} s/B, "
        f"step overhead {overhead * 1e6:.0f} us per worker, {devices.cores} cores shared"
    )
    print(output.read_text(), end="")
    print(
        "model,placement,devices used,mean step time of each run [s],load 1/5/15 min before -> after each run"
    )
    for row in rows:
        runs = " ".join(f"{m:.4f}" for m in row["runs"])
        print(f"{row['model']},{row['placement']},{row['devices']},{runs},{'; '.join(row['loads'])}")
    for row in rows:
        print(f"{row['model']}/{row['placement']}: {row['explained']}")


if __name__ == "__main__":
    app.run(main)
