"""Split plans against whole-op placements on the saved cost graphs (issue 15, steps 3-5).

For each model's saved cost graph (``results/graphs/<model>.json.gz``, V100 costs at the paper's
batch size) on ``--num_devices`` simulated GPUs of the graph's own link: the step time, bytes
moved, peak memory per device and planning seconds of one device and of data parallelism
(:func:`tfplace.split.data_parallel.data_parallel_plan`, simulated by
:func:`tfplace.split.expand.simulate_plan`) with one all-reduce per weight gradient and with DDP's
25 MB gradient buckets (the baseline the targets compare with), the searched plan alone
(:func:`tfplace.split.layerwise.search_plan`, OptCNN's Algorithm 1, before any selection), beside the best whole-op placement of
``results/table3_step_time.csv`` (``tfplace auto``, simulated on the same graphs by
``run_experiments.py``), and the layer-wise plan (:func:`tfplace.split.layerwise.layerwise_plan`:
the search, selected against data parallelism and one device by simulation; its row is named
after the candidate chosen, its planning seconds are the whole placer's, simulations included; the
targets table's search seconds are the search's alone). Then, on ``--unequal_speeds`` devices (a device of speed ``s`` runs every
op in ``1/s`` of the graph's time), data parallelism with equal pieces and with pieces proportional
to the speeds (BBGraP's balance). Run from the repository root:

    .venv/bin/python benchmarks/split_plans.py
    .venv/bin/python benchmarks/split_plans.py --models=inception_v3 --num_devices=2 --out=results/split_plans.md
"""

from __future__ import annotations

import csv
import time
from collections.abc import Sequence
from pathlib import Path

from absl import app, flags

from tfplace.core.costgraph import CostGraph, atomic_write_text, load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.core.tables import format_table
from tfplace.core.units import format_bytes
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan
from tfplace.split.layerwise import layerwise_plan, search_plan
from tfplace.split.plan import OpSplit, SplitPlan

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "models", ["inception_v3", "nmt", "transformer", "tensor_holography"], "Saved graphs to plan."
)
flags.DEFINE_integer("num_devices", 4, "Simulated GPUs.", lower_bound=1)
flags.DEFINE_string("graphs_dir", "results/graphs", "Where the saved cost graphs are.")
flags.DEFINE_string("out", None, "Also write the table (markdown) here.")
flags.DEFINE_list(
    "unequal_speeds", ["1", "0.5"], "Speeds of the devices of the unequal-speed rows (empty: no such rows)."
)


def _best_placement(model: str) -> str:
    """``tfplace auto``'s simulated step time from ``results/table3_step_time.csv``."""
    path = Path("results/table3_step_time.csv")
    if not path.exists():
        return "-"
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row["model"] == model and row["source"].startswith("tfplace"):
                return row["tfplace auto"]
    return "-"


def _peak(plan: SplitPlan, memory: int) -> str:
    """The largest simulated peak of a device, ``OOM`` when it exceeds ``memory``."""
    peak = max(plan.peak_memory.values(), default=0)
    return format_bytes(peak) + (" OOM" if peak > memory else "")


def _unequal_rows(model: str, graph: CostGraph, memory: int, one_step: float) -> list[tuple[str, ...]]:
    """On devices of ``--unequal_speeds``: data parallelism with equal pieces, with proportional ones, and
    the layer-wise plan (its pieces proportional)."""
    speeds = [float(s) for s in FLAGS.unequal_speeds]
    devices = DeviceSet.parse(f"/device:GPU:0-{len(speeds) - 1}", memory, intra_host=graph.transfer_model)
    by_name = dict(zip(devices.names, speeds))
    rows = []
    for label, plan in (
        ("equal pieces", data_parallel_plan(graph, devices)),
        ("proportional pieces", data_parallel_plan(graph, devices, speeds=speeds)),
        ("layer-wise", layerwise_plan(graph, devices, speeds=speeds)),
    ):
        if label != "layer-wise":
            simulate_plan(graph, plan, speeds=by_name)
        assert plan.step_time
        speed_list = "/".join(FLAGS.unequal_speeds)
        name = plan.placer if label == "layer-wise" else f"data parallel, {label}"
        rows.append(
            (
                model,
                f"{name}, speeds {speed_list}",
                f"{plan.step_time:.3f}",
                f"{one_step / plan.step_time:.2f}x",
                format_bytes(plan.bytes_moved),
                _peak(plan, memory),
                "",
            )
        )
    return rows


def _targets(
    model: str, one: float, parallel: float, best: str, layerwise: SplitPlan, searched: SplitPlan
) -> tuple[str, ...]:
    """Issue 15's targets for one model: never slower than DP, one device or the best placement;
    Inception V3 at least 3.5x one device; Transformer and NMT faster than DP; search under 10 s
    (and the whole placer, simulations included, under 10 s)."""
    step = layerwise.step_time or 0.0
    misses = [
        what
        for what, held in (
            ("slower than DP", step <= parallel),
            ("slower than one device", step <= one),
            ("slower than best placement", best == "-" or step <= float(best)),
            ("< 3.5x one device", model != "inception_v3" or one / step >= 3.5),
            ("not faster than DP", model not in ("nmt", "transformer") or step < parallel),
            ("search >= 10 s", searched.search_seconds < 10),
            ("placer >= 10 s", layerwise.search_seconds < 10),
        )
        if not held
    ]
    return (
        model,
        f"{parallel / step:.2f}x",
        f"{parallel / (searched.step_time or step):.2f}x",
        f"{one / step:.2f}x",
        "-" if best == "-" else f"{float(best) / step:.2f}x",
        f"{searched.search_seconds:.2f}",
        f"{layerwise.search_seconds:.2f}",
        "met" if not misses else "missed: " + ", ".join(misses),
    )


def main(argv: Sequence[str]) -> None:
    del argv
    targets = [
        (
            "model",
            "layer-wise vs DP",
            "search alone vs DP",
            "vs one device",
            "vs best placement",
            "search (s)",
            "placer (s)",
            "targets",
        )
    ]
    rows = [("model", "plan", "step (s)", "vs one device", "bytes moved", "peak per device", "planning (s)")]
    memory = DEVICE_MODELS["V100-32GB"].memory
    for model in FLAGS.models:
        graph = load_json(Path(FLAGS.graphs_dir) / f"{model}.json.gz")
        devices = DeviceSet.parse(
            f"/device:GPU:0-{FLAGS.num_devices - 1}", memory, intra_host=graph.transfer_model
        )
        one = SplitPlan({op: OpSplit.whole(devices.names[0]) for op in graph}, devices)
        simulate_plan(graph, one)
        unbucketed = data_parallel_plan(graph, devices, bucket_bytes=None)
        simulate_plan(graph, unbucketed)
        start = time.perf_counter()
        parallel = data_parallel_plan(graph, devices)
        parallel.search_seconds = time.perf_counter() - start
        simulate_plan(graph, parallel)
        start = time.perf_counter()
        searched = search_plan(graph, devices)
        searched.search_seconds = time.perf_counter() - start
        simulate_plan(graph, searched)
        start = time.perf_counter()
        layerwise = layerwise_plan(graph, devices)
        layerwise.search_seconds = time.perf_counter() - start
        assert one.step_time and parallel.step_time and layerwise.step_time and searched.step_time
        best = _best_placement(model)
        targets.append(_targets(model, one.step_time, parallel.step_time, best, layerwise, searched))
        for name, plan in (
            ("one device", one),
            ("data parallel, an all-reduce per gradient", unbucketed),
            ("data parallel, 25 MB buckets", parallel),
            ("searched plan (Algorithm 1, no selection)", searched),
            (layerwise.placer, layerwise),
        ):
            rows.append(
                (
                    model,
                    name,
                    f"{plan.step_time:.3f}",
                    f"{one.step_time / plan.step_time:.2f}x",
                    format_bytes(plan.bytes_moved),
                    _peak(plan, memory),
                    f"{plan.search_seconds:.2f}",
                )
            )
        rows.append((model, "best placement (auto, table 3)", best, "", "", "", ""))
        if FLAGS.unequal_speeds:
            rows.extend(_unequal_rows(model, graph, memory, one.step_time))
        print(f"{model}: planned and simulated", flush=True)
    table = format_table(rows) + "\n\n" + format_table(targets)
    print(table)
    if FLAGS.out:
        atomic_write_text(FLAGS.out, table + "\n")


if __name__ == "__main__":
    app.run(main)
