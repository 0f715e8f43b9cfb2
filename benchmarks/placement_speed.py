"""Placement speed: seconds and peak memory of each placer on synthetic and real cost graphs.

Prints one JSON line per (placer, graph): ``{"placer", "graph", "ops", "edges", "seconds",
"peak_rss_mb", "clusters"}``. Each placement runs in a fresh subprocess so that its peak memory
is its own; ``seconds`` covers indexing and placing (Celeritas Table 4 excludes profiling), not
loading the graph or simulating. Synthetic graphs are layered training graphs
(:func:`tfplace.synthetic.layered_training_graph`) on 4 devices that together hold 2.5 times
the graph's memory; real graphs are the cost graphs under ``results/graphs/``.

    python benchmarks/placement_speed.py                      # every placer, 6k / 36k / 200k ops
    python benchmarks/placement_speed.py --placers=celeritas,m_etf --sizes=36000
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from tfplace.costgraph import load_json, op_memory, save_json
from tfplace.devices import DeviceSet
from tfplace.indexed import index_graph
from tfplace.placer import PLACERS, placer_function
from tfplace.synthetic import layered_training_graph

FLAGS = flags.FLAGS
flags.DEFINE_list("placers", list(PLACERS), "Placers to time.")
flags.DEFINE_list("sizes", ["6000", "36000", "200000"], "Op counts of the synthetic graphs.")
flags.DEFINE_string("real_graphs", "results/graphs/*.json*", "Glob of real cost graphs to time too.")
flags.DEFINE_integer("num_devices", 4, "Devices to place on.")
flags.DEFINE_float("memory_headroom", 2.5, "Total device memory over the graph's memory.")
flags.DEFINE_integer("timeout", 900, "Seconds before one placement is reported as timed out.")
flags.DEFINE_string("one", None, "Internal: time one placement: placer,graph_path.")


def time_one(placer: str, path: str) -> dict[str, object]:
    """Load a graph, then index and place it once; report seconds and this process's peak RSS."""
    graph = load_json(path)
    total = sum(op_memory(attrs) for _, attrs in graph.nodes(data=True))
    memory = max(1, int(total * FLAGS.memory_headroom / FLAGS.num_devices))
    devices = DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", memory)
    start = time.perf_counter()
    indexed = index_graph(graph, devices.typical_link)
    output = placer_function(placer)(indexed, devices)
    seconds = time.perf_counter() - start
    return {
        "placer": placer,
        "graph": graph.graph.get("name", os.path.basename(path)),
        "ops": graph.number_of_nodes(),
        "edges": graph.number_of_edges(),
        "seconds": round(seconds, 3),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "clusters": output.details.get("clusters"),
    }


def run_isolated(placer: str, path: str) -> dict[str, object]:
    command = [sys.executable, __file__, f"--one={placer},{path}"]
    command += [f"--num_devices={FLAGS.num_devices}", f"--memory_headroom={FLAGS.memory_headroom}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FLAGS.timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"placer": placer, "graph": path, "error": f"timed out after {FLAGS.timeout} s"}
    if done.returncode != 0:
        return {"placer": placer, "graph": path, "error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.one:
        placer, path = FLAGS.one.split(",", 1)
        print(json.dumps(time_one(placer, path)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for size in map(int, FLAGS.sizes):
            path = os.path.join(scratch, f"layered_{size}.json")
            save_json(layered_training_graph(size), path)
            paths.append(path)
        paths += sorted(glob.glob(FLAGS.real_graphs))
        for path in paths:
            for placer in FLAGS.placers:
                print(json.dumps(run_isolated(placer, path)), flush=True)


if __name__ == "__main__":
    app.run(main)
