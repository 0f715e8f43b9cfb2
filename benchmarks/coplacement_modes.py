"""Two ways to keep gradient ops with their forward ops, measured on saved cost graphs.

* **hard groups** (tfplace's choice, ``coplace_gradients=True``): every op with a ``gradient_of``
  joins its forward op's co-location group; the placer places the whole graph.
* **forward-only** (Baechi's ``train.py`` mode): the placer places the graph without the gradient
  ops (the ops the relation covers), then each gradient op goes to its forward op's device.

Both are simulated on the whole graph; prints one line per model and placer with the two steps.

    PYTHONPATH=. .venv/bin/python benchmarks/coplacement_modes.py
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from absl import app, flags

from tfplace.core.costgraph import CostGraph, gradient_pairs, load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.placer import place_cost_graph
from tfplace.simulator import simulate

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["inception_v3", "nmt", "transformer", "tensor_holography"], "Models.")
flags.DEFINE_list("placers", ["celeritas", "metis"], "Placers.")
flags.DEFINE_string("cost_graphs", "results/graphs", "Directory of <model>.json.gz cost graphs.")


def forward_only(graph: CostGraph, devices: DeviceSet, placer: str) -> dict[str, str]:
    """Place the graph without its gradient ops, then put each on its forward op's device."""
    follow = dict(gradient_pairs(graph))
    forward = CostGraph(graph.subgraph([op for op in graph if op not in follow]))
    for _, attrs in forward.nodes(data=True):  # a buffer forwarded from a gradient op is its own here
        attrs["aliased_outputs"] = tuple(a for a in attrs["aliased_outputs"] if a[1] in forward)
    assignment = dict(place_cost_graph(forward, devices, placer, simulate=False).assignment)
    for gradient in follow:
        target = follow[gradient]
        while target in follow:  # a second derivative follows the first
            target = follow[target]
        assignment[gradient] = assignment[target]
    return assignment


def main(argv: Sequence[str]) -> None:
    del argv
    devices = DeviceSet.parse("/device:GPU:0-3", DEVICE_MODELS["V100-32GB"].memory)
    capacity = devices.devices[0].memory
    print("model placer | hard groups: step s, OOM | forward-only: step s, OOM")
    for model in FLAGS.models:
        graph = load_json(Path(FLAGS.cost_graphs) / f"{model}.json.gz")
        for placer in FLAGS.placers:
            cells = []
            for assignment in (
                place_cost_graph(graph, devices, placer, simulate=False).assignment,
                forward_only(graph, devices, placer),
            ):
                result = simulate(graph, assignment, devices)
                cells.append(
                    f"{result.makespan:.3f} {'OOM' if max(result.peak_memory) > capacity else 'fits'}"
                )
            print(f"{model} {placer} | {cells[0]} | {cells[1]}", flush=True)


if __name__ == "__main__":
    app.run(main)
