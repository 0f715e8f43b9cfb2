"""Fidelity of the simulator: simulated step time and peak memory of placed graphs against real runs.

For each model (small variants), each kind of CPU device (``virtual``: CPUs of one process;
``loopback``: one worker process per device, tensors over gRPC) and each placement (one device, a
whole-op placement split over the devices, ``auto``), the step is

- simulated (:func:`tfplace.simulator.simulate`) on the costs Standard Evaluation profiled at the
  batch size, through the machine's CPU device model
  (:class:`tfplace.core.device_model.CpuCalibration`, made once by ``tfplace calibrate`` and
  read from ``--calibration``): every op's traced time plus the per-op overhead of a real step,
  the per-step overhead, the inter-op threads of each process on the machine's shared cores, and
  the calibrated link of the device kind. No factor is fitted to any model;
- and run (:func:`tfplace.runner.run_placement`) as it was profiled: the GraphDef's own ops
  (no Grappler rewrites, which would run other ops than the simulated ones), one intra-op thread
  (:func:`tfplace.estimator.calibration.profiled_run_config`); the median of each run's timed
  steps, ``--repeats`` runs in turns across the placements, combined by ``--statistic``.

Memory: per device the placement uses, the simulated peak against the allocator's: the most bytes
the step's kernels held at once by the allocation records of a ``FULL_TRACE`` step
(:func:`tfplace.tf_graph.step_stats.allocation_peaks`), plus the variables resident on the device
(their buffers, sized from the placed graph's variables), which the allocator holds from before the
step.

``error = (simulated - measured) / measured``; the targets are 5% for time and 10% for memory.
Each run waits until the one-minute load average is below ``--max_load`` (at most ``--max_wait``
seconds) and the printout records the load of every run. Writes ``--output`` and prints it. Run from
the repository root, after ``tfplace calibrate``:

    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py
    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py --models=nmt --kinds=virtual --repeats=3
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import app, flags, logging

from tfplace.api import DEFAULT_CACHE_DIR

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["nmt", "transformer", "tensor_holography", "inception_v3"], "Models to run.")
flags.DEFINE_list("kinds", ["virtual", "loopback"], "CPU device kinds (tfplace.core.device_model.CPU_KINDS).")
flags.DEFINE_list("placements", ["single", "dfs_topo", "auto"], "Placers (tfplace.placer.PLACERS).")
flags.DEFINE_integer("devices", 2, "Devices of each kind: virtual CPUs, or loopback workers.")
flags.DEFINE_integer("steps", 10, "Timed steps per run, after the warm-up.")
flags.DEFINE_integer("warmup_steps", 3, "Steps dropped at the start of each run.")
flags.DEFINE_integer("repeats", 3, "Runs per placement, taken in turns across the placements.")
flags.DEFINE_enum(
    "statistic",
    "min",
    ["median", "min"],
    "How the repeats' median step times combine into measured_s. min: other processes only ever "
    "add time, so the smallest is the closest to a quiet machine's.",
)
flags.DEFINE_float("max_load", 1.0, "Wait before each run until the 1-minute load average is below this.")
flags.DEFINE_float("max_wait", 60.0, "Seconds to wait for a low load before measuring anyway.")
flags.DEFINE_string(
    "calibration",
    os.path.join(".tfplace_cache", "calibration.json"),
    "The machine's CPU device model, written by tfplace calibrate.",
)
flags.DEFINE_string("output", "results/fidelity.csv", "CSV file written.")
flags.DEFINE_string("cache_dir", DEFAULT_CACHE_DIR, "Profile cache directory ('' always profiles).")

_SMALL_NMT = {"units": 64, "layers": 2, "source_length": 6, "target_length": 6, "vocab_size": 500}

#: Size knobs and batch size of each model: steps of 5 to 100 milliseconds on one 2-core CPU.
MODEL_SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "nmt": (_SMALL_NMT, 8),
    "transformer": ({"layers": 2, "heads": 4, "d_model": 64, "d_ff": 128, "vocab_size": 500}, 8),
    "tensor_holography": ({"image_size": 48, "conv_layers": 10, "filters": 12}, 4),
    "inception_v3": ({"image_size": 75, "classes": 10}, 2),
}

COLUMNS = (
    "model",
    "placement",
    "kind",
    "devices_used",
    "simulated_s",
    "measured_s",
    "error",
    "simulated_peak_mb",
    "allocator_peak_mb",
    "memory_error",
    "load",
)

STATISTICS = {"min": min, "median": statistics.median}
MB = 1e6


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def wait_for_quiet() -> None:
    """Sleep until the 1-minute load average is below ``--max_load`` or ``--max_wait`` has passed."""
    deadline = time.monotonic() + FLAGS.max_wait
    while os.getloadavg()[0] >= FLAGS.max_load and time.monotonic() < deadline:
        time.sleep(5)


def device_names(kind: str, count: int) -> list[str]:
    if kind == "virtual":
        return [f"/device:CPU:{i}" for i in range(count)]
    return [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(count)]


def placements(cost_graph, structure, devices, names: Sequence[str]) -> dict[str, Any]:
    """Each placer's placement of the step, extended to every op of ``structure``.

    DFS-TOPO fills a device up to its memory: it gets devices of 55% of the step's simulated peak
    on one device each, so that it splits the step into contiguous parts (a whole-op split
    placement).
    """
    from tfplace.api import place_costs
    from tfplace.core.devices import Device

    total = int(simulated(cost_graph, dict.fromkeys(cost_graph, devices.names[0]), devices).peak_memory[0])
    result = {}
    for name in names:
        placed_on = devices
        if name == "dfs_topo":
            capped = tuple(Device(d.name, max(int(0.55 * total), 1)) for d in devices.devices)
            placed_on = dataclasses.replace(devices, devices=capped)
        placement = place_costs(
            cost_graph, placed_on, structure=structure, placer=name, simulate=False, progress=False
        )
        placement.devices = devices
        result[name] = placement
    return result


def simulated(cost_graph, assignment, devices):
    """The simulated step of ``assignment``, the devices following TensorFlow's CPU executor."""
    from tfplace.core.device_model import inline_ops
    from tfplace.simulator import simulate

    return simulate(cost_graph, assignment, devices, inline_ops=inline_ops(cost_graph))


def variable_bytes(graph, placement) -> dict[str, int]:
    """Bytes of the variables each device holds: every ``VarHandleOp``/``VariableV2``'s shape and
    dtype, on the device its op is placed on."""
    import numpy as np
    import tensorflow as tf

    held: dict[str, int] = {}
    for op in graph.get_operations():
        if op.type not in ("VarHandleOp", "VariableV2"):
            continue
        shape = tf.TensorShape(op.get_attr("shape"))
        size = int(np.prod(shape.as_list())) * tf.as_dtype(op.get_attr("dtype")).size
        device = placement.assignment[op.name]
        held[device] = held.get(device, 0) + size
    return held


def allocator_peaks(spec, placement, run_metadata) -> dict[str, int]:
    """Per device (by placement name), the most bytes its allocator held at once in a traced step
    (:func:`allocation_changes`) plus the variables resident on it (:func:`variable_bytes`)."""
    from tfplace.core.devices import DeviceName

    resident = variable_bytes(spec.graph, placement)
    changes = allocation_changes(spec.graph, run_metadata)
    peaks = {}
    for name in placement.devices.names:
        in_use = peak = 0
        for _, nbytes in sorted(changes.get(DeviceName.parse(name), ())):
            in_use += nbytes
            peak = max(peak, in_use)
        peaks[name] = peak + resident.get(name, 0)
    return peaks


_RECEIVED = re.compile(r"edge_\d+_(?P<tensor>\S+) from \S+ to \S+$")


def allocation_changes(graph, run_metadata) -> dict[Any, list[tuple[int, int]]]:
    """Per device, ``(microseconds, bytes)`` of every allocation (> 0) and free (< 0) in the step.

    The kernels' allocation records (:func:`tfplace.tf_graph.step_stats.allocation_peaks` sums
    the same), and the tensors a worker received over gRPC, which the RPC layer allocates outside
    any kernel, so that no record has them: each from its ``RecvTensor`` record to the end of its
    producer's last consumer on the receiving device in the trace.
    """
    from tfplace.core.devices import DeviceName

    changes: dict[Any, list[tuple[int, int]]] = {}
    ends: dict[tuple[Any, str], int] = {}
    received = []
    for dev_stats in run_metadata.step_stats.dev_stats:
        device = DeviceName.parse(dev_stats.device)
        for node in dev_stats.node_stats:
            for memory in node.memory:
                changes.setdefault(device, []).extend(
                    (int(r.alloc_micros), int(r.alloc_bytes)) for r in memory.allocation_records
                )
            end = int(node.all_start_micros + node.all_end_rel_micros)
            ends[device, node.node_name] = max(ends.get((device, node.node_name), 0), end)
            match = _RECEIVED.search(node.timeline_label) if node.node_name == "RecvTensor" else None
            if match and node.output:
                nbytes = int(node.output[0].tensor_description.allocation_description.requested_bytes)
                producer = match.group("tensor").split(":")[0]
                received.append((device, producer, int(node.all_start_micros), end, nbytes))
    for device, producer, start, end, nbytes in received:
        try:
            outputs = graph.get_operation_by_name(producer).outputs
        except KeyError:  # a fetch or feed of the session: no consumer in the graph
            outputs = []
        consumers = [consumer.name for output in outputs for consumer in output.consumers()]
        freed = max([end] + [ends.get((device, c), 0) for c in consumers])
        changes.setdefault(device, []).extend([(start, nbytes), (freed, -nbytes)])
    return changes


def run_once(spec, batch: int, placement, kind: str, cluster, calibration, loads: list[str]):
    """One run of ``placement`` once the machine is quiet; its load before and after goes to ``loads``."""
    from tfplace.estimator.calibration import profiled_run_config
    from tfplace.runner import run_placement

    wait_for_quiet()
    before = load()
    if kind == "virtual":
        config = profiled_run_config(FLAGS.devices, calibration.process("virtual").threads)
    else:
        config = profiled_run_config()
        config.ClearField("device_count")
    report = run_placement(
        spec.graph,
        placement,
        spec.train_op,
        spec.feed_fn,
        batch_size=batch,
        steps=FLAGS.steps,
        warmup_steps=FLAGS.warmup_steps,
        cluster=cluster if kind == "loopback" else None,
        init_op=spec.init_op,
        config=config,
        progress=False,
    )
    if report.mismatches:
        logging.warning("%s: %d ops ran elsewhere than placed", placement.placer, len(report.mismatches))
    loads.append(f"{before} -> {load()}")
    return report


def profiled_model(name: str) -> tuple[Any, int, Any]:
    """``name``'s small variant: its model spec, batch, and cost estimate at that batch (read from
    ``--cache_dir`` when a profile measured there by the same procedure is stored)."""
    from models import build_model
    from tfplace.api import estimate_costs

    knobs, batch = MODEL_SIZES[name]
    spec = build_model(name, **knobs)
    estimate = estimate_costs(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch,
        profile_batch_sizes=[batch],
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir or None,
        progress=False,
    )
    return spec, batch, estimate


def measure_model(name: str, kind: str, cluster, calibration) -> list[dict[str, Any]]:
    """Profile, place, simulate and run ``name`` on ``kind`` devices; the repeats go round the
    placements in turn, so that a busy spell of the machine slows every placement a little rather
    than one a lot."""
    spec, batch, estimate = profiled_model(name)
    names = device_names(kind, FLAGS.devices)
    devices = calibration.device_set(names, 1 << 40)
    cost_graph = calibration.step_costs(estimate.cost_graph, kind)
    cost_graph.set_transfer_model(devices.typical_link)
    placed = placements(cost_graph, estimate.imported.cost_graph, devices, FLAGS.placements)
    rows = {}
    for placer, placement in placed.items():
        result = simulated(cost_graph, {op: placement.assignment[op] for op in cost_graph}, devices)
        used = sorted({placement.assignment[op] for op in cost_graph})
        rows[placer] = {
            "model": name,
            "placement": placer,
            "kind": kind,
            "devices_used": len(used),
            "used": used,
            "simulated_s": result.makespan,
            "simulated_peaks": {d: int(result.peak_memory[devices.index(d)]) for d in used},
            "runs": [],
            "allocator_runs": [],
            "loads": [],
        }
    for _ in range(FLAGS.repeats):
        for placer, placement in placed.items():
            row = rows[placer]
            report = run_once(spec, batch, placement, kind, cluster, calibration, row["loads"])
            row["runs"].append(report.median_step_time)
            row["allocator_runs"].append(allocator_peaks(spec, placement, report.run_metadata[-1]))
    for row in rows.values():
        finish_row(row)
    return list(rows.values())


def finish_row(row: dict[str, Any]) -> None:
    """The measured time, the errors, and the memory of the device with the largest simulated peak
    (the allocator's peak: the median over the runs)."""
    row["measured_s"] = STATISTICS[FLAGS.statistic](row["runs"])
    row["error"] = (row["simulated_s"] - row["measured_s"]) / row["measured_s"]
    # with several inter-op threads the order of the ops, and so the peak, varies from run to run
    row["allocator_peaks"] = {
        d: statistics.median(run[d] for run in row["allocator_runs"]) for d in row["used"]
    }
    fullest = max(row["used"], key=lambda d: row["simulated_peaks"][d])
    row["simulated_peak_mb"] = row["simulated_peaks"][fullest] / MB
    row["allocator_peak_mb"] = row["allocator_peaks"][fullest] / MB
    row["memory_error"] = (row["simulated_peak_mb"] - row["allocator_peak_mb"]) / row["allocator_peak_mb"]
    row["load"] = row["loads"][-1]
    logging.info(
        "%s/%s/%s: simulated %.4f s, measured %.4f s",
        row["model"], row["kind"], row["placement"], row["simulated_s"], row["measured_s"],
    )  # fmt: skip


#: Decimals each numeric column is written with.
DECIMALS = {
    "simulated_s": 6,
    "measured_s": 6,
    "error": 6,
    "memory_error": 6,
    "simulated_peak_mb": 2,
    "allocator_peak_mb": 2,
}


def write_rows(rows: list[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> Path:
    """Write the rows' ``columns`` to ``--output`` (numbers with :data:`DECIMALS`); its path."""
    output = Path(FLAGS.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            formatted = {k: f"{row[k]:.{DECIMALS[k]}f}" for k in columns if k in DECIMALS}
            writer.writerow({**row, **formatted})
    return output


def main(argv: Sequence[str]) -> None:
    del argv
    import contextlib

    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    unknown = sorted(set(FLAGS.models) - set(MODEL_SIZES))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(MODEL_SIZES)}")
    calibration = CpuCalibration.load(FLAGS.calibration)
    rows = []
    for kind in FLAGS.kinds:
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(LocalCluster(FLAGS.devices)) if kind == "loopback" else None
            for name in FLAGS.models:
                rows += measure_model(name, kind, cluster, calibration)
    output = write_rows(rows)
    print(f"CPU device model ({FLAGS.calibration}): {calibration.to_dict()}")
    print(output.read_text(), end="")
    print("model,kind,placement,median step of each run [s],load 1/5/15 min before -> after each run")
    for row in rows:
        runs = " ".join(f"{m:.4f}" for m in row["runs"])
        print(f"{row['model']},{row['kind']},{row['placement']},{runs},{'; '.join(row['loads'])}")
    for row in rows:
        peaks = ", ".join(
            f"{d}: {row['simulated_peaks'][d] / MB:.1f}/{row['allocator_peaks'][d] / MB:.1f}"
            for d in row["used"]
        )
        print(f"{row['model']}/{row['kind']}/{row['placement']} peak MB simulated/allocator: {peaks}")


if __name__ == "__main__":
    app.run(main)
