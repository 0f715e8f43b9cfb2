"""Simulator speed: seconds and peak memory of one simulated step on synthetic layered DAGs.

Prints one JSON line per graph: ``{"ops", "edges", "devices", "transfers", "index_seconds",
"seconds", "record_seconds", "makespan", "peak_rss_mb"}``. Each graph is built and simulated in a
fresh subprocess so that its peak RSS is its own. ``seconds`` times :func:`tfplace.simulator.simulate`
on the indexed graph with a random placement (``record=False``); ``record_seconds`` the same run
keeping the schedule; ``index_seconds`` indexing the cost graph, which callers usually do once.

    python benchmarks/simulator_speed.py                     # about 6k, 36k and 200k ops
    python benchmarks/simulator_speed.py --sizes=36000 --num_devices=8
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.simulator import simulate

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["6000", "36000", "200000"], "Op counts of the synthetic graphs.")
flags.DEFINE_integer("num_devices", 4, "Devices the ops are spread over at random.")
flags.DEFINE_integer("width", 50, "Ops per layer.")
flags.DEFINE_integer("fan_in", 2, "Inputs of each op, drawn from the previous layer.")
flags.DEFINE_integer("seed", 0, "Seed of the graph and of the placement.")
flags.DEFINE_integer("one", None, "Internal: build and time the graph of this many ops.")


def layered_dag(num_ops: int, width: int, fan_in: int, seed: int) -> CostGraph:
    """Layers of ``width`` ops; each op reads output slot 0 or 1 of ``fan_in`` ops of the layer before.

    Compute times are log-normal around 100 us, outputs around 1 MB, one op in ten holds
    persistent state (a variable) of about 4 MB.
    """
    rng = np.random.default_rng(seed)
    graph = CostGraph(name=f"layered_dag_{num_ops}")
    compute = rng.lognormal(np.log(100e-6), 0.8, num_ops)
    outputs = rng.lognormal(np.log(1e6), 1.0, (num_ops, 2)).astype(int)
    persistent = np.where(rng.random(num_ops) < 0.1, rng.lognormal(np.log(4e6), 0.5, num_ops), 0).astype(int)
    for i in range(num_ops):
        graph.add_op(
            f"op{i}",
            compute_time=float(compute[i]),
            persistent_bytes=int(persistent[i]),
            output_sizes=outputs[i].tolist(),
            temporary_bytes=int(outputs[i, 0] // 4),
        )
    for i in range(width, num_ops):
        layer_start = (i // width - 1) * width
        for j in rng.choice(width, size=min(fan_in, width), replace=False):
            graph.add_dependency(f"op{layer_start + j}", f"op{i}", slots=(int(rng.integers(0, 2)),))
    return graph


def time_one(num_ops: int) -> dict[str, object]:
    """Build one graph, index it, simulate a random placement; report seconds and peak RSS."""
    graph = layered_dag(num_ops, FLAGS.width, FLAGS.fan_in, FLAGS.seed)
    devices = DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", "32GB")
    start = time.perf_counter()
    indexed = index_graph(graph, devices.typical_link)
    index_seconds = time.perf_counter() - start
    placement = np.random.default_rng(FLAGS.seed).integers(0, FLAGS.num_devices, len(indexed))
    start = time.perf_counter()
    result = simulate(indexed, placement, devices)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    simulate(indexed, placement, devices, record=True)
    record_seconds = time.perf_counter() - start
    return {
        "ops": len(indexed),
        "edges": graph.number_of_edges(),
        "devices": FLAGS.num_devices,
        "transfers": result.transfers,
        "index_seconds": round(index_seconds, 3),
        "seconds": round(seconds, 3),
        "record_seconds": round(record_seconds, 3),
        "makespan": round(result.makespan, 4),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.one:
        print(json.dumps(time_one(FLAGS.one)))
        return
    for size in FLAGS.sizes:
        command = [sys.executable, __file__, f"--one={size}"]
        command += [f"--{name}={getattr(FLAGS, name)}" for name in ("num_devices", "width", "fan_in", "seed")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(json.dumps({"ops": int(size), "error": done.stderr.strip().splitlines()[-1:]}), flush=True)
        else:
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    app.run(main)
