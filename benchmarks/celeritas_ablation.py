"""Celeritas' ablation on saved cost graphs: forward/backward co-placement on/off x memory model
static/liveness, plus how far each placer's liveness estimate is from the simulated peak.

For each model's cost graph (``--cost_graphs``/<model>.json.gz, the committed ``results/graphs``)
on the experiment's devices (4 x V100 32 GB, PCIe), prints and writes (``--output_dir``):

* ``celeritas_ablation.md/.csv``: Celeritas in the four settings (the paper's is static without
  co-placement; with the guard off, so that only the two switches change) and as tfplace runs it
  by default: simulated step, out of memory, bytes moved between devices, devices used, simulated
  peak memory of the fullest device;
* ``memory_estimate.md/.csv``: per placer (default options) and device, the placer's liveness
  estimate against the simulated peak.

    PYTHONPATH=. .venv/bin/python benchmarks/celeritas_ablation.py
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import app, flags

from tfplace.core.costgraph import load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.placer import place_cost_graph
from tfplace.simulator import simulate

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["inception_v3", "nmt", "transformer", "tensor_holography"], "Models.")
flags.DEFINE_string("cost_graphs", "results/graphs", "Directory of <model>.json.gz cost graphs.")
flags.DEFINE_string("output_dir", "results", "Where the two tables are written.")
flags.DEFINE_string("devices", "/device:GPU:0-3", "Target devices.")
flags.DEFINE_string(
    "memory", None, "Memory of each device (default: the V100-32GB model's, as run_experiments)."
)
flags.DEFINE_list(
    "estimate_placers",
    ["celeritas", "order_place", "dfs_topo", "m_topo", "m_etf", "m_sct", "metis", "single"],
    "Placers whose liveness estimate is compared with the simulated peak.",
)

#: Setting name -> options of place_cost_graph.
SETTINGS: dict[str, dict[str, Any]] = {
    "static, no co-placement (paper)": {"memory_model": "static", "coplace_gradients": False},
    "static, co-placement": {"memory_model": "static", "coplace_gradients": True},
    "liveness, no co-placement": {"memory_model": "liveness", "coplace_gradients": False},
    "liveness, co-placement": {"memory_model": "liveness", "coplace_gradients": True},
}


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f}"


def _write(rows: Sequence[Sequence[Any]], header: Sequence[str], title: str, stem: Path) -> None:
    with open(stem.with_suffix(".csv"), "w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    stem.with_suffix(".md").write_text(text)
    print(text)


def main(argv: Sequence[str]) -> None:
    del argv
    devices = DeviceSet.parse(FLAGS.devices, FLAGS.memory or DEVICE_MODELS["V100-32GB"].memory)
    ablation, estimates = [], []
    for model in FLAGS.models:
        graph = load_json(Path(FLAGS.cost_graphs) / f"{model}.json.gz")
        runs = [(name, {**options, "order_place_guard": False}) for name, options in SETTINGS.items()]
        runs.append(("tfplace default (liveness, co-placement, Order-Place guard)", {}))
        for name, options in runs:
            placement = place_cost_graph(graph, devices, "celeritas", simulate=False, **options)
            result = simulate(graph, placement.assignment, devices)
            ablation.append(
                (
                    model,
                    name,
                    f"{result.makespan:.3f}",
                    "yes" if result.oom else "no",
                    _gb(result.bytes_moved),
                    len(set(placement.assignment.values())),
                    _gb(max(result.peak_memory)),
                )
            )
        for placer in FLAGS.estimate_placers:
            placement = place_cost_graph(graph, devices, placer)
            for device, peak in sorted(placement.peak_memory.items()):
                estimate = placement.memory.get(device, 0)
                error = (estimate - peak) / peak if peak else 0.0
                estimates.append((model, placer, device, _gb(estimate), _gb(peak), f"{error:+.1%}"))
        sys.stdout.flush()
    output = Path(FLAGS.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    _write(
        ablation,
        ("model", "Celeritas setting", "step (s)", "OOM", "GB moved", "devices used", "peak GB (fullest)"),
        "Celeritas ablation: co-placement x memory model (simulated, 4 x V100 32 GB, PCIe)",
        output / "celeritas_ablation",
    )
    _write(
        estimates,
        ("model", "placer", "device", "estimated peak GB", "simulated peak GB", "error"),
        "Liveness memory estimate of each placer's final placement against the simulated peak",
        output / "memory_estimate",
    )


if __name__ == "__main__":
    app.run(main)
