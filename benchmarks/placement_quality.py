"""Placement quality: every placer's placement scored by the simulator, on devices too small for the graph.

For each graph and placer, :func:`tfplace.placer.place_cost_graph` places the graph on
``--num_devices`` GPUs that together hold ``--memory_headroom`` times its static memory (each holds
less than the whole graph, so a placement must split it) and simulates one training step. Prints one
JSON line per (placer, graph)::

    {"graph", "ops", "placer", "step_ms", "vs_best", "oom_devices", "peak_fraction",
     "overcommits", "placement_seconds", "clusters"}

then a Markdown table of the same. ``step_ms`` is the simulated step time; ``vs_best`` its ratio to
the best placer's on that graph; ``oom_devices`` how many devices the simulator saw exceed their
memory; ``peak_fraction`` the largest simulated peak memory over its device's capacity;
``overcommits`` the devices whose static memory estimate (the placers' model) exceeds capacity.

Graphs: layered training graphs of ``--sizes`` ops (:func:`tfplace.core.synthetic.layered_training_graph`)
and the cost graphs matching ``--real_graphs``.

    python benchmarks/placement_quality.py
    python benchmarks/placement_quality.py --placers=celeritas,order_place,m_etf --sizes=36000
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass

from absl import app, flags

from tfplace.core.costgraph import CostGraph, graph_memory, load_json
from tfplace.core.devices import DeviceSet
from tfplace.core.synthetic import layered_training_graph
from tfplace.placer import PLACERS, place_cost_graph

FLAGS = flags.FLAGS
flags.DEFINE_list("placers", list(PLACERS), "Placers to compare.")
flags.DEFINE_list("sizes", ["6000", "36000"], "Op counts of the synthetic graphs.")
flags.DEFINE_string("real_graphs", "results/graphs/*.json*", "Glob of real cost graphs to place too.")
flags.DEFINE_integer("num_devices", 4, "Devices to place on.")
flags.DEFINE_float(
    "memory_headroom",
    1.2,
    "Total device memory over the graph's static memory. The default gives each of 4 devices 30%: "
    "placers must split the graph, and one device runs out of memory even in the simulator's "
    "dynamic memory model (a layered graph's simulated peak on one device is about a third of its "
    "static memory).",
)
flags.DEFINE_enum("format", "both", ["json", "markdown", "both"], "What to print.")


@dataclass
class Row:
    """One placer's placement of one graph, scored by the simulator (module docstring)."""

    graph: str
    ops: int
    placer: str
    step_ms: float | None = None
    vs_best: float | None = None
    oom_devices: int | None = None
    peak_fraction: float | None = None
    overcommits: int | None = None
    placement_seconds: float | None = None
    clusters: int | None = None
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps({key: value for key, value in asdict(self).items() if value is not None})

    def to_markdown(self) -> str:
        if self.error is not None:
            return f"| {self.graph} | {self.ops} | {self.placer} | error: {self.error} | | | | | |"
        return (
            f"| {self.graph} | {self.ops} | {self.placer} | {self.step_ms:.2f} | {self.vs_best:.2f} | "
            f"{self.oom_devices} | {self.peak_fraction:.2f} | {self.overcommits} | {self.placement_seconds:.2f} |"
        )


MARKDOWN_HEADER = (
    "| graph | ops | placer | step (ms) | vs best | OOM devices | peak / capacity | overcommitted | placement (s) |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def graphs() -> list[tuple[str, CostGraph]]:
    """``(label, graph)``: the synthetic graphs by name, then the real ones by file name."""
    synthetic = [layered_training_graph(int(size)) for size in FLAGS.sizes]
    real = sorted(glob.glob(FLAGS.real_graphs))
    return [(g.graph["name"], g) for g in synthetic] + [(graph_label(p), load_json(p)) for p in real]


def graph_label(path: str) -> str:
    """``results/graphs/nmt.json.gz`` -> ``nmt``."""
    return os.path.basename(path).split(".")[0]


def score(label: str, graph: CostGraph, placer: str) -> Row:
    """Place ``graph`` with ``placer`` on devices too small for it and simulate one step."""
    total = graph_memory(graph)
    capacity = max(1, int(total * FLAGS.memory_headroom / FLAGS.num_devices))
    devices = DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", capacity)
    row = Row(graph=label, ops=graph.number_of_nodes(), placer=placer)
    try:
        placement = place_cost_graph(graph, devices, placer, simulate=True)
    except Exception as error:  # reported in the table; the other placers still run
        row.error = f"{type(error).__name__}: {error}"
        return row
    limits = {d.name: d.memory for d in devices.all_devices}
    peaks = placement.peak_memory.items()
    row.step_ms = round((placement.step_time or 0.0) * 1e3, 3)
    row.oom_devices = sum(peak > limits[name] for name, peak in peaks)
    row.peak_fraction = round(max((peak / limits[name] for name, peak in peaks), default=0.0), 3)
    row.overcommits = sum("overcommitted" in warning for warning in placement.warnings)
    row.placement_seconds = round(placement.placement_seconds, 3)
    row.clusters = placement.details.get("clusters")
    return row


def main(argv: list[str]) -> None:
    del argv
    rows: list[Row] = []
    for label, graph in graphs():
        scored = [score(label, graph, placer) for placer in FLAGS.placers]
        best = min((row.step_ms for row in scored if row.step_ms is not None), default=0.0)
        for row in scored:
            if row.step_ms is not None:
                row.vs_best = round(row.step_ms / best, 3) if best > 0 else 1.0
            if FLAGS.format in ("json", "both"):
                print(row.to_json(), flush=True)
        rows += scored
    if FLAGS.format in ("markdown", "both"):
        share = FLAGS.memory_headroom / FLAGS.num_devices
        print(
            f"\n{FLAGS.num_devices} devices, each holding {share:.1%} of the graph's static memory; "
            f"load average {os.getloadavg()[0]:.2f}\n"
        )
        print(MARKDOWN_HEADER)
        print("\n".join(row.to_markdown() for row in rows))


if __name__ == "__main__":
    app.run(main)
