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

    DFS-TOPO fills a device up to its memory: it gets devices of 55% of the step's memory each,
    so that it splits the step into two contiguous parts (a whole-op split placement).
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
        placement = place_costs(
            cost_graph, placed_on, structure=structure, placer=name, simulate=False, progress=False
        )
        placement.devices = devices
        result[name] = placement
    return result


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
    """Per device (by placement name), the step's allocation peak plus its resident variables."""
    from tfplace.core.devices import DeviceName
    from tfplace.tf_graph.step_stats import allocation_peaks

    by_spec = {DeviceName.parse(d): peak for d, peak in allocation_peaks(run_metadata).items()}
    resident = variable_bytes(spec.graph, placement)
    return {
        name: by_spec.get(DeviceName.parse(name), 0) + resident.get(name, 0)
        for name in placement.devices.names
    }


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


def measure_model(name: str, kind: str, cluster, calibration) -> list[dict[str, Any]]:
    """Profile, place, simulate and run ``name`` on ``kind`` devices; the repeats go round the
    placements in turn, so that a busy spell of the machine slows every placement a little rather
    than one a lot."""
    from models import build_model
    from tfplace.api import estimate_costs
    from tfplace.simulator import simulate

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
    names = device_names(kind, FLAGS.devices)
    devices = calibration.device_set(names, 1 << 40)
    cost_graph = calibration.step_costs(estimate.cost_graph, kind)
    cost_graph.set_transfer_model(devices.typical_link)
    placed = placements(cost_graph, estimate.imported.cost_graph, devices, FLAGS.placements)
    rows = {}
    for placer, placement in placed.items():
        result = simulate(cost_graph, {op: placement.assignment[op] for op in cost_graph}, devices)
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
            "loads": [],
        }
    for _ in range(FLAGS.repeats):
        for placer, placement in placed.items():
            row = rows[placer]
            report = run_once(spec, batch, placement, kind, cluster, calibration, row["loads"])
            row["runs"].append(report.median_step_time)
            row["allocator_peaks"] = allocator_peaks(spec, placement, report.run_metadata[-1])
    for row in rows.values():
        finish_row(row)
    return list(rows.values())


def finish_row(row: dict[str, Any]) -> None:
    """The measured time, the errors, and the memory of the device with the largest simulated peak."""
    row["measured_s"] = STATISTICS[FLAGS.statistic](row["runs"])
    row["error"] = (row["simulated_s"] - row["measured_s"]) / row["measured_s"]
    fullest = max(row["used"], key=lambda d: row["simulated_peaks"][d])
    row["simulated_peak_mb"] = row["simulated_peaks"][fullest] / MB
    row["allocator_peak_mb"] = row["allocator_peaks"][fullest] / MB
    row["memory_error"] = (row["simulated_peak_mb"] - row["allocator_peak_mb"]) / row["allocator_peak_mb"]
    row["load"] = row["loads"][-1]
    logging.info(
        "%s/%s/%s: simulated %.4f s, measured %.4f s",
        row["model"], row["kind"], row["placement"], row["simulated_s"], row["measured_s"],
    )  # fmt: skip


def write_rows(rows: list[dict[str, Any]]) -> Path:
    """Write the rows' :data:`COLUMNS` to ``--output``; its path."""
    output = Path(FLAGS.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            formatted = {k: f"{row[k]:.6f}" for k in ("simulated_s", "measured_s", "error", "memory_error")}
            formatted.update({k: f"{row[k]:.2f}" for k in ("simulated_peak_mb", "allocator_peak_mb")})
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
