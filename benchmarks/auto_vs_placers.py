"""auto against every other placer: simulated step time per placer and graph, with the winner.

Places each graph with every placer of ``--placers`` (:func:`experiments.comparison.compare_placers`:
the same simulator scores every placement) and prints a Markdown table: one row per graph, the
simulated step of each placer in seconds (``OOM (t)`` when a device's simulated peak exceeds its
memory), the fastest placer that fits, ``auto`` against the fastest other placer that fits
(positive: auto is faster by that share of the other's step), auto's placement seconds and the
candidate auto kept.

Graphs and devices:

* the cost graphs matching ``--real_graphs`` (``results/graphs``: the experiment of
  ``run_experiments.py``) on ``--num_devices`` devices of ``--device``'s memory on the PCIe link
  of ``run_experiments.py``;
* layered training graphs of ``--sizes`` ops (:func:`tfplace.core.synthetic.layered_training_graph`)
  on ``--num_devices`` devices holding ``--memory_headroom`` times the graph's static memory in
  all, as ``benchmarks/placement_quality.py`` places them.

    PYTHONPATH=. .venv/bin/python benchmarks/auto_vs_placers.py
    PYTHONPATH=. .venv/bin/python benchmarks/auto_vs_placers.py --sizes= --placers=metis,celeritas,auto
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from absl import app, flags

from experiments.comparison import PlacerRun, compare_placers, fastest_fitting
from experiments.report import PLACER_NAMES
from tfplace.core.costgraph import CostGraph, graph_memory, load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.core.synthetic import layered_training_graph
from tfplace.core.transfer import TransferModel
from tfplace.placer import PLACERS

FLAGS = flags.FLAGS
flags.DEFINE_list("placers", list(PLACERS), "Placers compared; must include auto.")
flags.DEFINE_string("real_graphs", "results/graphs/*.json*", "Glob of the experiment's cost graphs.")
flags.DEFINE_list("sizes", ["6000", "36000"], "Op counts of the synthetic graphs (empty: none).")
flags.DEFINE_integer("num_devices", 4, "Target devices.", lower_bound=1)
flags.DEFINE_enum("device", "V100-32GB", list(DEVICE_MODELS), "Device whose memory the real graphs get.")
flags.DEFINE_float(
    "memory_headroom", 1.2, "Synthetic graphs: the devices' memory in all over the graph's static memory."
)


def experiment_devices() -> DeviceSet:
    """The devices of ``run_experiments.py``: ``--num_devices`` of ``--device`` on the PCIe link."""
    memory = DEVICE_MODELS[FLAGS.device].memory
    return DeviceSet.parse(
        f"/device:GPU:0-{FLAGS.num_devices - 1}", memory, intra_host=TransferModel.default()
    )


def headroom_devices(graph: CostGraph) -> DeviceSet:
    """``--num_devices`` devices holding ``--memory_headroom`` times the graph's static memory."""
    total = graph_memory(graph)
    memory = max(1, int(total * FLAGS.memory_headroom / FLAGS.num_devices))
    return DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", memory)


def cases() -> list[tuple[str, CostGraph, DeviceSet]]:
    """``(label, graph, devices)``: the real graphs by file name, then the synthetic ones."""
    real = [(os.path.basename(p).split(".")[0], load_json(p)) for p in sorted(glob.glob(FLAGS.real_graphs))]
    synthetic = [layered_training_graph(int(size)) for size in FLAGS.sizes if size]
    return [(label, graph, experiment_devices()) for label, graph in real] + [
        (graph.graph["name"], graph, headroom_devices(graph)) for graph in synthetic
    ]


def step_cell(run: PlacerRun) -> str:
    return f"OOM ({run.step_time:.3f})" if run.oom else f"{run.step_time:.3f}"


def auto_margin(runs: Sequence[PlacerRun]) -> str:
    """auto against the fastest other placer that fits: ``+x%`` when auto is faster."""
    auto = next(run for run in runs if run.placer == "auto")
    rival = fastest_fitting([run for run in runs if run.placer != "auto"])
    if rival is None or auto.oom:
        return "-"
    gain = (rival.step_time - auto.step_time) / rival.step_time
    return f"{gain:+.2%} vs {PLACER_NAMES.get(rival.placer, rival.placer)}"


def table_row(label: str, graph: CostGraph, runs: Sequence[PlacerRun], auto: Placement) -> str:
    best = fastest_fitting(runs)
    cells = [
        label,
        f"{graph.number_of_nodes():,}",
        *(step_cell(run) for run in runs),
        PLACER_NAMES.get(best.placer, best.placer) if best is not None else "none fits",
        auto_margin(runs),
        f"{auto.placement_seconds:.2f}",
        str(auto.details["winner"]),
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if "auto" not in FLAGS.placers:
        raise app.UsageError("--placers must include auto")
    columns = ["graph", "ops", *(PLACER_NAMES.get(p, p) for p in FLAGS.placers)]
    columns += ["fastest that fits", "auto vs fastest other", "auto placement [s]", "auto's pick"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for label, graph, devices in cases():
        runs, placements, _ = compare_placers(graph, devices, FLAGS.placers, label)
        print(table_row(label, graph, runs, placements["auto"]), flush=True)
    print(
        "\nSimulated step time in seconds; OOM: a device's simulated peak exceeds its memory (the time in "
        "brackets is the step regardless). auto keeps 5% of each device's memory free in the simulator."
    )


if __name__ == "__main__":
    app.run(main)
