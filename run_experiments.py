"""Celeritas' experiments (section 6) with tfplace: Tables 2-5 and plots, beside the paper's numbers.

For each model (:mod:`models`, the paper's configuration and batch size by default):

1. Standard Evaluation on this machine's CPU: profile the training step at small batch sizes
   (cached under ``--cache_dir``) and predict every op's costs at the target batch
   (:func:`tfplace.api.estimate_costs`);
2. turn the CPU times into the target GPU's (:mod:`tfplace.core.device_model`, ``--device``), price
   every edge with the link's transfer model (``--comm_coeffs``) and save the cost graph as
   ``<output_dir>/graphs/<model>.json.gz``;
3. place it with every placer of ``--placers`` on ``--num_devices`` devices of ``--device_memory``
   and simulate the step (:func:`experiments.comparison.compare_placers`);
4. measure the accuracy of the estimate: predict batch ``--accuracy_batch`` from the small batches
   and measure it twice, the second time for the noise floor
   (:func:`tfplace.estimator.accuracy.estimation_accuracy`);
5. with ``--real``, run a small variant of the model on loopback TensorFlow workers, placed by
   each placer, and compare the measured step with the simulated one (:mod:`tfplace.runner`).

Writes into ``--output_dir``: ``tables.md`` (all tables, the command line and running time at the
top), one ``.md`` and ``.csv`` per table, ``runs.csv`` (every placement's numbers),
``step_times.png``, ``timeline_<model>.png`` (the fastest placement that fits) and the cost graphs.
Run from the repository root:

    PYTHONPATH=. .venv/bin/python run_experiments.py                       # Inception V3
    PYTHONPATH=. .venv/bin/python run_experiments.py --model=all --real    # the four models
"""

from __future__ import annotations

import csv
import dataclasses
import multiprocessing
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from absl import app, flags, logging

import models
from experiments.comparison import (
    PLACER_VARIANTS,
    FusionStats,
    PlacerRun,
    compare_placers,
    fastest_fitting,
    record_step,
)
from experiments.inference import forward_graph, profile_resnet50_inference
from experiments.report import (
    RealRun,
    Table,
    accuracy_table,
    graph_table,
    placement_time_table,
    plot_step_times,
    real_run_table,
    step_time_table,
    write_tables,
)
from experiments.split_results import (
    inference_results,
    inference_table,
    plans_table,
    targets_table,
    training_results,
)
from tfplace.api import DEFAULT_CACHE_DIR, CostEstimate, estimate_costs, place_costs
from tfplace.core.costgraph import CostGraph, graph_memory, load_json, save_json
from tfplace.core.device_model import DEVICE_MODELS, convert_graph
from tfplace.core.devices import Device, DeviceSet, parse_memory
from tfplace.core.transfer import TransferModel
from tfplace.core.units import format_bytes
from tfplace.estimator.accuracy import AccuracyReport, estimation_accuracy
from tfplace.placer import PLACERS
from tfplace.plots import plot_timeline

PAPER_MODELS = ("inception_v3", "nmt", "transformer", "tensor_holography")
"""What ``--model=all`` runs: the four models of Celeritas Table 2."""

PROFILE_BATCH_SIZES: dict[str, tuple[int, ...]] = {"nmt": (2, 4)}
"""Profiled batch sizes where the default (1, 2, 4) does not fit this machine.

The profiler keeps one session per batch size; the unrolled NMT at 2048 units needs about 9 GB per
session here (the weight gradient of every time step is a separate tensor), so three sessions
exceed the 24 GB of this machine and two are profiled.
"""

TABLE_GROUPS = ("paper", "split", "inference")
"""What ``--tables`` chooses from (see its help)."""

INFERENCE_MODELS = ("inception_v3", "resnet50_inference")
"""Forward-only graphs of the inference table (:mod:`experiments.inference`)."""

_SMALL_NMT = {"units": 64, "layers": 2, "source_length": 6, "target_length": 6, "vocab_size": 500}

REAL_SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "inception_v3": ({"image_size": 75, "classes": 10}, 4),
    "nmt": (_SMALL_NMT, 8),
    "nmt_while": (_SMALL_NMT, 8),
    "transformer": ({"layers": 2, "heads": 4, "d_model": 64, "d_ff": 128, "vocab_size": 500}, 8),
    "tensor_holography": ({"image_size": 48, "conv_layers": 10, "filters": 12}, 4),
}
"""Size knobs and batch size of the small variant each model runs for real with ``--real``."""

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "model", ["inception_v3"], f"Models of models.MODELS; 'all' stands for {', '.join(PAPER_MODELS)}."
)
flags.DEFINE_list("knobs", [], "Size knobs key=value given to every model's builder (default: the paper's).")
flags.DEFINE_integer("batch_size", None, "Batch size to place (default: each model's batch in the paper).")
flags.DEFINE_integer("num_devices", 4, "Target devices.", lower_bound=1)
flags.DEFINE_string("device_memory", None, "Memory of each device, e.g. 32GB (default: the --device's).")
flags.DEFINE_enum(
    "device", "V100-32GB", list(DEVICE_MODELS), "Device model turning CPU costs into GPU costs."
)
flags.DEFINE_list(
    "placers",
    [
        "metis",
        "m_topo",
        "m_etf",
        "m_sct",
        "order_place",
        "celeritas",
        "celeritas_paper",
        "dfs_topo",
        "single",
        "auto_whole_ops",
    ],
    "Placers compared (tfplace.placer.PLACERS, or a variant of experiments.comparison.PLACER_VARIANTS).",
)
flags.DEFINE_string(
    "cost_graphs",
    None,
    "Directory of saved cost graphs <model>.json.gz (results/graphs): place those instead of profiling "
    "(no Table 5, no real runs, no graphs saved).",
)
flags.DEFINE_list(
    "comm_coeffs",
    [repr(TransferModel.default().k), repr(TransferModel.default().b)],
    "k (s/byte), b (s) of the link's transfer model t = k * bytes + b (default: the PCIe 3 preset).",
)
flags.DEFINE_string("output_dir", "results", "Where tables, plots and cost graphs are written.")
flags.DEFINE_string("cache_dir", DEFAULT_CACHE_DIR, "Profile cache directory.")
flags.DEFINE_bool(
    "save_graphs", True, "Save each model's placed cost graph as <output_dir>/graphs/<model>.json.gz."
)
flags.DEFINE_list("profile_batch_sizes", None, "Small batch sizes profiled (default: 1,2,4; NMT 2,4).")
flags.DEFINE_integer("accuracy_batch", 8, "Batch size predicted and measured for Table 5 (0: skip Table 5).")
flags.DEFINE_bool("real", False, "Also run small variants of the models on loopback workers (Table R).")
flags.DEFINE_integer("real_workers", 2, "Loopback worker processes of the real runs.", lower_bound=2)
flags.DEFINE_integer("real_steps", 10, "Timed steps per real run, after the warm-up.")
flags.DEFINE_integer(
    "real_calibration_repeats",
    30,
    "Timed steps per size calibrating the loopback link (medians resist load).",
)
flags.DEFINE_float(
    "real_memory_fraction", 0.6, "Memory of each real-run device, as a share of the step's estimated memory."
)
flags.DEFINE_list(
    "tables",
    list(TABLE_GROUPS),
    "Which tables to make: paper (Tables 2-5, tables.md), split (split plans of the training steps, "
    "split_plans.md), inference (forward-only latency of split plans, split_inference.md).",
)
flags.DEFINE_list(
    "unequal_speeds", ["1", "0.5"], "Speeds of the two devices of unequal speed (empty: no such rows)."
)
flags.DEFINE_list(
    "inference_models",
    list(INFERENCE_MODELS),
    "Forward-only graphs of the inference table: inception_v3 (cut from its training graph), "
    "resnet50_inference (tf_keras ResNet50 profiled forward-only).",
)
flags.DEFINE_list("inference_batches", ["1", "8", "64"], "Batch sizes of the inference table.")
flags.DEFINE_list("inference_devices", ["2", "4"], "Numbers of equal devices of the inference table.")


def _parse_knobs(items: Sequence[str]) -> dict[str, Any]:
    """``["image_size=75", "dropout=0.0"]`` -> ``{"image_size": 75, "dropout": 0.0}``."""
    knobs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise app.UsageError(f"--knobs takes key=value items, got {item!r}")
        for kind in (int, float):
            try:
                knobs[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            knobs[key] = {"true": True, "false": False}.get(value.lower(), value)
    return knobs


def _model_names() -> list[str]:
    names = list(
        dict.fromkeys(n for item in FLAGS.model for n in (PAPER_MODELS if item == "all" else [item]))
    )
    unknown = sorted(set(names) - set(models.MODELS))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(models.MODELS)} or all")
    return names


def _estimate(spec: models.ModelSpec, batch_size: int, profile_batch_sizes: Sequence[int]) -> CostEstimate:
    return estimate_costs(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch_size,
        profile_batch_sizes=profile_batch_sizes,
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir,
    )


def _link() -> TransferModel:
    """The transfer model of ``--comm_coeffs``."""
    if len(FLAGS.comm_coeffs) != 2:
        raise app.UsageError(f"--comm_coeffs takes k,b; got {FLAGS.comm_coeffs}")
    return TransferModel(float(FLAGS.comm_coeffs[0]), float(FLAGS.comm_coeffs[1]), name="comm_coeffs")


def target_devices(link: TransferModel) -> DeviceSet:
    """``--num_devices`` GPUs of ``--device_memory`` (default: the device model's) on ``link``."""
    memory = parse_memory(FLAGS.device_memory) if FLAGS.device_memory else DEVICE_MODELS[FLAGS.device].memory
    return DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", memory, intra_host=link)


def place_model(
    name: str, devices: DeviceSet, output_dir: Path
) -> tuple[list[PlacerRun], FusionStats, int, AccuracyReport | None]:
    """Steps 1-4 of the module docstring for one model: its runs, fusion, graph size and accuracy."""
    spec = models.build_model(name, **_parse_knobs(FLAGS.knobs))
    batch_size = FLAGS.batch_size or spec.paper_batch_size
    small = [int(b) for b in FLAGS.profile_batch_sizes or PROFILE_BATCH_SIZES.get(name, (1, 2, 4))]
    if FLAGS.cost_graphs:
        graph = _saved_cost_graph(name, batch_size)
    else:
        estimate = _estimate(spec, batch_size, small)
        graph = convert_graph(estimate.cost_graph, DEVICE_MODELS[FLAGS.device])
        if FLAGS.save_graphs:
            graph.set_transfer_model(devices.typical_link)
            save_json(graph, output_dir / "graphs" / f"{name}.json.gz")
    graph.set_transfer_model(devices.typical_link)
    # a model built with other knobs than the paper's is not compared with the paper's rows
    label = f"{name} ({','.join(FLAGS.knobs)})" if FLAGS.knobs else name
    runs, placements, fusion = compare_placers(graph, devices, FLAGS.placers, label)
    for run in runs:
        logging.info("%s / %s: step %.4f s%s", label, run.placer, run.step_time, " (OOM)" if run.oom else "")
    best = fastest_fitting(runs)
    if best is not None:
        plot_timeline(
            record_step(graph, placements[best.placer], devices),
            devices,
            output_dir / f"timeline_{name}.png",
            op_types={op: attrs["op_type"] for op, attrs in graph.nodes(data=True)},
            title=f"{name}, batch {batch_size}, {best.placer}",
        )
    accuracy = None
    if FLAGS.accuracy_batch and not FLAGS.cost_graphs:
        accuracy = estimation_accuracy(
            spec.graph,
            spec.train_op,
            spec.feed_fn,
            profile_batch_sizes=small,
            target_batch=FLAGS.accuracy_batch,
            init_op=spec.init_op,
            cache_dir=FLAGS.cache_dir,
            interleaved=False,  # reuses the placement's cached small-batch profile
        )
    return runs, fusion, len(spec.graph.get_operations()), accuracy


def _saved_cost_graph(name: str, batch_size: int) -> CostGraph:
    """``--cost_graphs``/<name>.json.gz, checked to hold the costs at ``batch_size`` on ``--device``."""
    graph = load_json(Path(FLAGS.cost_graphs) / f"{name}.json.gz")
    saved = (graph.graph.get("batch_size"), graph.graph.get("device_model"))
    if saved[0] not in (None, batch_size) or saved[1] not in (None, FLAGS.device):
        raise app.UsageError(
            f"{FLAGS.cost_graphs}/{name}.json.gz holds batch {saved[0]} on {saved[1]}; "
            f"this run places batch {batch_size} on {FLAGS.device}"
        )
    return graph


def _place_model_in_child(
    argv: list[str], name: str
) -> tuple[list[PlacerRun], FusionStats, int, AccuracyReport | None]:
    """:func:`place_model` in a fresh process, which parses the command line ``argv`` again."""
    FLAGS(argv)
    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)
    return place_model(name, target_devices(_link()), Path(FLAGS.output_dir))


def real_runs(name: str, cluster: Any, calibrated: DeviceSet) -> list[RealRun]:
    """Step 5: the small variant of ``name`` placed by each placer, run on ``cluster`` and simulated.

    Each worker gets ``--real_memory_fraction`` of the step's estimated memory, so that the
    memory-aware placers have to use more than one worker.
    """
    from tfplace.runner import run_placement

    knobs, batch_size = REAL_SIZES[name]
    spec = models.build_model(name, **knobs)
    estimate = _estimate(spec, batch_size, (1, 2, 4))
    graph = estimate.cost_graph
    graph.set_transfer_model(calibrated.inter_host)
    memory = int(FLAGS.real_memory_fraction * graph_memory(graph))
    devices = dataclasses.replace(
        calibrated, devices=tuple(Device(d.name, max(memory, 1)) for d in calibrated)
    )
    results = []
    for placer in FLAGS.placers:
        placement = place_costs(graph, devices, structure=estimate.imported.cost_graph, placer=placer)
        report = run_placement(
            spec.graph,
            placement,
            spec.train_op,
            spec.feed_fn,
            batch_size=batch_size,
            steps=FLAGS.real_steps,
            cluster=cluster,
            init_op=spec.init_op,
        )
        step_devices = {placement.assignment[op] for op in graph}
        results.append(
            RealRun(
                model=name,
                placer=placer,
                batch_size=batch_size,
                devices=len(step_devices),
                simulated=float(placement.step_time or 0.0),
                measured=report.median_step_time,
                steps=len(report.step_seconds),
                mismatches=len(report.mismatches),
            )
        )
    return results


def run_real(names: Sequence[str]) -> tuple[list[RealRun], TransferModel]:
    """Real runs of every model on one loopback cluster, with its costs calibrated on it
    (:func:`~tfplace.estimator.calibration.calibrate_local_cluster`: the link, the CPU each side
    spends on a transfer, the per-worker step overhead, the shared cores)."""
    from tfplace.estimator.calibration import calibrate_local_cluster
    from tfplace.tf_graph.cluster import LocalCluster

    results = []
    with LocalCluster(FLAGS.real_workers) as cluster:
        calibrated = calibrate_local_cluster(cluster, 1, repeats=FLAGS.real_calibration_repeats)
        link = calibrated.inter_host
        logging.info("loopback link: k=%.3e s/B, b=%.0f us", link.k, link.b * 1e6)
        for name in names:
            results += real_runs(name, cluster, calibrated)
    return results, link


def write_runs_csv(runs: Sequence[PlacerRun], path: Path) -> None:
    """Every placement's numbers, one row each (the raw data of Tables 3 and 4)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(
            [
                "model",
                "placer",
                "step_time_s",
                "oom",
                "placement_seconds",
                "max_peak_bytes",
                "overcommitted_devices",
                "bytes_moved",
            ]
        )
        for run in runs:
            writer.writerow(
                [
                    run.model,
                    run.placer,
                    f"{run.step_time:.6f}",
                    int(run.oom),
                    f"{run.placement_seconds:.6f}",
                    max(run.peak_memory.values(), default=0),
                    run.overcommitted_devices,
                    run.bytes_moved,
                ]
            )


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    started = time.perf_counter()
    names = _model_names()
    unknown = sorted(set(FLAGS.placers) - set(PLACERS) - set(PLACER_VARIANTS))
    if unknown:
        raise app.UsageError(f"unknown placers {unknown}; choose from {', '.join(PLACERS)}")
    if FLAGS.cost_graphs and FLAGS.real:
        raise app.UsageError("--real profiles and runs the models: leave out --cost_graphs")
    groups = set(FLAGS.tables)
    if groups - set(TABLE_GROUPS):
        raise app.UsageError(
            f"unknown --tables {sorted(groups - set(TABLE_GROUPS))}; choose from {', '.join(TABLE_GROUPS)}"
        )
    unknown = sorted(set(FLAGS.inference_models) - set(INFERENCE_MODELS))
    if unknown:
        raise app.UsageError(
            f"unknown --inference_models {unknown}; choose from {', '.join(INFERENCE_MODELS)}"
        )
    devices = target_devices(_link())
    output_dir = Path(FLAGS.output_dir)
    saves = FLAGS.save_graphs and not FLAGS.cost_graphs
    (output_dir / "graphs" if saves else output_dir).mkdir(parents=True, exist_ok=True)
    if "paper" in groups:
        paper_tables(names, devices, output_dir, started)
    graphs_dir = Path(FLAGS.cost_graphs) if FLAGS.cost_graphs else output_dir / "graphs"
    if "split" in groups:
        split_tables(names, graphs_dir, output_dir)
    if "inference" in groups:
        inference_tables(graphs_dir, output_dir)


def paper_tables(names: Sequence[str], devices: DeviceSet, output_dir: Path, started: float) -> None:
    """Tables 2-5 (and Table R with ``--real``), ``runs.csv``, the plots and ``tables.md``."""
    runs: list[PlacerRun] = []
    fusion: list[FusionStats] = []
    graph_ops: dict[str, int] = {}
    accuracy: dict[str, AccuracyReport] = {}
    # one process per model: TensorFlow keeps the memory of a large model's sessions until its
    # process ends (about 18 GB after the NMT), which the next model would need
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn, max_tasks_per_child=1) as pool:
        for name in names:
            model_started = time.perf_counter()
            model_runs, stats, ops, report = pool.submit(_place_model_in_child, list(sys.argv), name).result()
            runs += model_runs
            fusion.append(stats)
            graph_ops[stats.model] = ops
            if report is not None:
                accuracy[stats.model] = report
            logging.info("%s done in %.0f s", name, time.perf_counter() - model_started)
    tables: list[Table] = [graph_table(fusion, graph_ops), step_time_table(runs), placement_time_table(runs)]
    if accuracy:
        tables.append(accuracy_table(accuracy))
    real_link = None
    if FLAGS.real:
        real, real_link = run_real(names)
        tables.append(real_run_table(real))
    write_runs_csv(runs, output_dir / "runs.csv")
    plot_step_times(runs, output_dir / "step_times.png")
    seconds = time.perf_counter() - started
    preamble = _preamble(devices, real_link, seconds)
    path = write_tables(tables, output_dir, preamble=preamble)
    print(path.read_text())


def _unequal_devices(link: TransferModel) -> tuple[DeviceSet | None, list[float]]:
    """The devices of ``--unequal_speeds`` (``None`` when it is empty) and their speeds."""
    speeds = [float(s) for s in FLAGS.unequal_speeds]
    if not speeds:
        return None, speeds
    return _gpus(len(speeds), link), speeds


def _gpus(count: int, link: TransferModel) -> DeviceSet:
    memory = parse_memory(FLAGS.device_memory) if FLAGS.device_memory else DEVICE_MODELS[FLAGS.device].memory
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=link)


def _saved_graph(graphs_dir: Path, name: str) -> CostGraph:
    path = graphs_dir / f"{name}.json.gz"
    if not path.exists():
        raise app.UsageError(
            f"{path}: no saved cost graph; make it with --tables=paper or give --cost_graphs"
        )
    return load_json(path)


def split_tables(names: Sequence[str], graphs_dir: Path, output_dir: Path) -> None:
    """``split_plans.md`` and ``.csv``: each model's training step on ``--num_devices`` GPUs of its
    graph's link (:func:`experiments.split_results.training_results`) and on ``--unequal_speeds``."""
    started = time.perf_counter()
    results = []
    for name in names:
        graph = _saved_graph(graphs_dir, name)
        link = graph.transfer_model
        unequal, speeds = _unequal_devices(link)
        results += training_results(name, graph, _gpus(FLAGS.num_devices, link), unequal, speeds)
        logging.info("%s: split plans simulated", name)
    plans = plans_table(
        results,
        "split_plans",
        "Split plans against whole-op placements: training steps (simulated)",
        "Step in milliseconds. `placer's result` names what each placer returned (the layer-wise "
        "placer and auto name the candidate they chose); `decision (s)` is the placer's time.",
    )
    _write_split_tables([plans, targets_table(results, "split_targets")], output_dir, "split_plans", started)


def inference_tables(graphs_dir: Path, output_dir: Path) -> None:
    """``split_inference.md`` and ``.csv``: forward-only latency of ``--inference_models`` at
    ``--inference_batches`` on ``--inference_devices`` equal GPUs and on ``--unequal_speeds``."""
    started = time.perf_counter()
    results = []
    for name in FLAGS.inference_models:
        graph = _inference_graph(name, graphs_dir)
        link = graph.transfer_model
        unequal, speeds = _unequal_devices(link)
        settings: list[tuple[DeviceSet, Sequence[float] | None]] = [
            (_gpus(int(count), link), None) for count in FLAGS.inference_devices
        ]
        settings += [(unequal, speeds)] if unequal is not None else []
        results += inference_results(name, graph, [int(b) for b in FLAGS.inference_batches], settings)
        logging.info("%s: inference plans simulated", name)
    table = inference_table(
        results,
        "split_inference",
        "Inference latency of split plans (simulated, milliseconds)",
        "inception_v3: the forward pass cut from the saved training graph (training-mode batch norm); "
        "resnet50_inference: tf_keras ResNet50 at 224x224 profiled forward-only at batches 1, 2, 4 and "
        "predicted at 64. Both re-costed at each batch by experiments/inference.py `at_batch`.",
    )
    _write_split_tables([table], output_dir, "split_inference", started)


def _inference_graph(name: str, graphs_dir: Path) -> CostGraph:
    """The forward-only cost graph ``name`` of :data:`INFERENCE_MODELS`; ResNet50's is profiled and
    saved when there is none and ``--cost_graphs`` is not given."""
    if name == "inception_v3":
        return forward_graph(_saved_graph(graphs_dir, name))
    path = graphs_dir / f"{name}.json.gz"
    if not path.exists() and not FLAGS.cost_graphs:
        graph = profile_resnet50_inference(_link(), device=FLAGS.device, cache_dir=FLAGS.cache_dir)
        save_json(graph, path)
    return _saved_graph(graphs_dir, name)


def _write_split_tables(tables: Sequence[Table], output_dir: Path, name: str, started: float) -> None:
    """``<name>.md`` (every table, the command above them) and ``<name>.csv`` (the first table)."""
    seconds = time.perf_counter() - started
    preamble = (
        f"Command: `{shlex.join(['python', *sys.argv])}` ({seconds / 60:.1f} minutes); code: {_revision()}.\n"
    )
    (output_dir / f"{name}.md").write_text("\n".join([preamble, *(table.markdown() for table in tables)]))
    (output_dir / f"{name}.csv").write_text(tables[0].csv())
    print((output_dir / f"{name}.md").read_text())


def _preamble(devices: DeviceSet, real_link: TransferModel | None, seconds: float) -> str:
    """The command, the setting and the running time, above the tables."""
    command = shlex.join(["python", *sys.argv])
    link = devices.typical_link
    lines = [
        f"Command: `{command}` ({seconds / 60:.1f} minutes).",
        "",
        f"Code: {_revision()}.",
        "",
        f"Targets: {len(devices)} x {FLAGS.device} ({format_bytes(devices.devices[0].memory)} each); "
        f"link t = {link.k:.4g} s/B * bytes + {link.b * 1e6:.0f} us; costs profiled on this machine's CPU "
        "and converted by the device model.",
    ]
    if real_link is not None:
        lines.append(
            f"Real runs: loopback gRPC link calibrated at t = {real_link.k:.4g} s/B * bytes + "
            f"{real_link.b * 1e6:.0f} us."
        )
    return "\n".join(lines) + "\n"


def _revision() -> str:
    """The commit the code is at, and the files changed since (``git`` in the working directory)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = [line[3:] for line in status.stdout.splitlines()]
    suffix = f", with uncommitted changes to {', '.join(changed)}" if changed else ""
    return f"commit {commit.stdout.strip()}{suffix}"


if __name__ == "__main__":
    app.run(main)
