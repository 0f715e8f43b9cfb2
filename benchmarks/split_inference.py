"""Inference latency of split plans (issue 15, step 5): Inception V3's forward pass at batch 1, 8
and 64 on 2 and 4 simulated V100s and on two devices of unequal speed.

The forward graph is cut from the saved training graph (``results/graphs/inception_v3.json.gz``):
every op that is a gradient op (``gradient_of``, or named under ``gradients/``) or depends on one
(the optimizer's updates) is dropped. Its costs are rescaled from the profiled batch ``B`` to ``b``
by the piece model of :mod:`tfplace.split.costs` (the saved graphs have no ``batch_costs``): an op
that processes examples (one data parallelism splits on the batch) takes
``t0 + (b / B) * (t - t0)`` (``t0`` a kernel's launch) and its outputs and scratch ``b / B`` of the
bytes; weight-side ops keep theirs. This is a model of the forward pass, not a profile of one; a
batch-norm op keeps its training-mode kernel. A ResNet-50 is not among the saved graphs and is not
measured here. Run from the repository root:

    .venv/bin/python benchmarks/split_inference.py --out=results/split_inference.md
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import networkx as nx
from absl import app, flags

from tfplace.core.costgraph import CostGraph, atomic_write_text, load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.core.tables import format_table
from tfplace.split.costs import PIECE_OVERHEAD
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan
from tfplace.split.layerwise import layerwise_plan
from tfplace.split.plan import OpSplit, SplitPlan

FLAGS = flags.FLAGS
flags.DEFINE_string("graph", "results/graphs/inception_v3.json.gz", "The saved training graph to cut.")
flags.DEFINE_list("batches", ["1", "8", "64"], "Inference batch sizes.")
flags.DEFINE_list("unequal_speeds", ["1", "0.5"], "Speeds of the two unequal devices.")
flags.DEFINE_string("out", None, "Also write the table (markdown) here.")


def forward_graph(graph: CostGraph, batch: int) -> CostGraph:
    """The forward pass of training ``graph`` at ``batch`` (module docstring)."""
    backward = {op for op in graph if graph.nodes[op].get("gradient_of") or op.startswith("gradients/")}
    for op in list(nx.topological_sort(graph)):
        if any(u in backward for u in graph.predecessors(op)):
            backward.add(op)
    forward = CostGraph(graph.subgraph(op for op in graph if op not in backward).copy())
    forward.graph.update(graph.graph)
    profiled = int(graph.graph["batch_size"])
    devices = DeviceSet.parse("/device:GPU:0-1", DEVICE_MODELS["V100-32GB"].memory)
    examples = {  # found at the profiled batch, which two devices can always split
        op
        for op, split in data_parallel_plan(forward, devices).splits.items()
        if split.dimension in ("batch", "reduction")
    }
    forward.graph["batch_size"] = batch
    scale = batch / profiled
    for op in examples:
        node = forward.nodes[op]
        fixed = min(node["compute_time"], PIECE_OVERHEAD)
        node["compute_time"] = fixed + scale * (node["compute_time"] - fixed)
        node["output_sizes"] = tuple(int(size * scale) for size in node["output_sizes"])
        node["temporary_bytes"] = int(node["temporary_bytes"] * scale)
    return forward


def main(argv: Sequence[str]) -> None:
    del argv
    training = load_json(FLAGS.graph)
    memory = DEVICE_MODELS["V100-32GB"].memory
    speeds = [float(s) for s in FLAGS.unequal_speeds]
    settings = [
        ("2 GPUs", 2, None),
        ("4 GPUs", 4, None),
        (f"speeds {'/'.join(FLAGS.unequal_speeds)}", 2, speeds),
    ]
    rows = [
        (
            "batch",
            "devices",
            "one device (ms)",
            "data parallel (ms)",
            "layer-wise (ms)",
            "chosen",
            "search (s)",
        )
    ]
    for batch in (int(b) for b in FLAGS.batches):
        graph = forward_graph(training, batch)
        for label, count, unequal in settings:
            devices = DeviceSet.parse(
                f"/device:GPU:0-{count - 1}", memory, intra_host=training.transfer_model
            )
            by_name = dict(zip(devices.names, unequal)) if unequal else None
            one = SplitPlan({op: OpSplit.whole(devices.names[0]) for op in graph}, devices)
            parallel = data_parallel_plan(graph, devices, speeds=unequal)
            for plan in (one, parallel):
                simulate_plan(graph, plan, speeds=by_name)
            start = time.perf_counter()
            layerwise = layerwise_plan(graph, devices, speeds=unequal)
            seconds = time.perf_counter() - start
            rows.append(
                (
                    str(batch),
                    label,
                    f"{1e3 * (one.step_time or 0):.2f}",
                    f"{1e3 * (parallel.step_time or 0):.2f}",
                    f"{1e3 * (layerwise.step_time or 0):.2f}",
                    layerwise.placer,
                    f"{seconds:.2f}",
                )
            )
        print(f"batch {batch}: planned and simulated", flush=True)
    table = format_table(rows)
    print(table)
    if FLAGS.out:
        atomic_write_text(FLAGS.out, table + "\n")


if __name__ == "__main__":
    app.run(main)
