"""Placement speed: seconds and peak memory of each placer on synthetic and real cost graphs.

Prints one JSON line per (placer, graph)::

    {"placer", "graph", "ops", "edges", "seconds", "cpu_seconds", "graph_rss_mb", "peak_rss_mb", "clusters", "load"}

``seconds`` is :func:`tfplace.placer.place_cost_graph`'s ``placement_seconds`` with
``simulate=False``: indexing the graph and placing it (Celeritas Table 4 excludes profiling), not
building or loading the graph; ``cpu_seconds`` is the CPU time of the same call (with the
bookkeeping around it), the placer's own work on a machine loaded by others. Each placement runs
in a fresh subprocess so that its memory is its own: ``graph_rss_mb`` is the process's resident memory once the graph is built, ``peak_rss_mb`` its
peak after placing (the difference is the placer's). ``load`` is the 1-minute load average when the
placement started: the machine is shared, so compare numbers measured side by side. A placer's own
warning is added as ``warning`` (m-SCT placing as m-ETF because its LP was not solved in time).

Synthetic graphs are layered training graphs (:func:`tfplace.core.synthetic.layered_training_graph`,
built in the subprocess from the op count); real graphs are the cost graphs matching
``--real_graphs``. Devices: ``--num_devices`` GPUs that together hold ``--memory_headroom`` times
the graph's static memory.

    python benchmarks/placement_speed.py                      # every placer, 6k / 36k / 200k ops
    python benchmarks/placement_speed.py --placers=celeritas --sizes=36000,200000
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys
import time

from absl import app, flags

from tfplace.core.costgraph import CostGraph, graph_memory, load_json
from tfplace.core.devices import DeviceSet
from tfplace.core.synthetic import layered_training_graph
from tfplace.placer import PLACERS, place_cost_graph

FLAGS = flags.FLAGS
flags.DEFINE_list("placers", list(PLACERS), "Placers to time.")
flags.DEFINE_list("sizes", ["6000", "36000", "200000"], "Op counts of the synthetic graphs.")
flags.DEFINE_string("real_graphs", "results/graphs/*.json*", "Glob of real cost graphs to time too.")
flags.DEFINE_integer("num_devices", 4, "Devices to place on.")
flags.DEFINE_float("memory_headroom", 2.5, "Total device memory over the graph's static memory.")
flags.DEFINE_integer("timeout", 900, "Seconds before one placement is reported as timed out.")
flags.DEFINE_string("one", None, "Internal: time one placement: placer,graph (an op count or a path).")


def load_graph(graph: str) -> CostGraph:
    """A synthetic layered graph of ``graph`` ops when it is a number, else the cost graph file."""
    return layered_training_graph(int(graph), gradients=True) if graph.isdigit() else load_json(graph)


def device_set(graph: CostGraph, num_devices: int, headroom: float) -> DeviceSet:
    """``num_devices`` GPUs holding ``headroom`` times the graph's static memory between them."""
    total = graph_memory(graph)
    return DeviceSet.parse(f"/device:GPU:0-{num_devices - 1}", max(1, int(total * headroom / num_devices)))


def rss_mb() -> int:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def time_one(placer: str, graph_spec: str) -> dict[str, object]:
    """Build or load a graph, then index and place it once; report seconds and memory."""
    graph = load_graph(graph_spec)
    devices = device_set(graph, FLAGS.num_devices, FLAGS.memory_headroom)
    graph_rss = rss_mb()
    load = os.getloadavg()[0]
    cpu_start = time.process_time()
    placement = place_cost_graph(graph, devices, placer, simulate=False)
    cpu_seconds = time.process_time() - cpu_start
    fallback = {"warning": placement.details["warning"]} if "warning" in placement.details else {}
    return {
        "placer": placer,
        "graph": graph.graph["name"] if graph_spec.isdigit() else os.path.basename(graph_spec).split(".")[0],
        "ops": graph.number_of_nodes(),
        "edges": graph.number_of_edges(),
        "seconds": round(placement.placement_seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "graph_rss_mb": graph_rss,
        "peak_rss_mb": rss_mb(),
        "clusters": placement.details.get("clusters"),
        "load": round(load, 2),
        **fallback,
    }


def run_isolated(placer: str, graph_spec: str) -> dict[str, object]:
    """:func:`time_one` in a fresh interpreter; a crash or timeout becomes an ``error`` entry."""
    command = [sys.executable, __file__, f"--one={placer},{graph_spec}"]
    command += [f"--num_devices={FLAGS.num_devices}", f"--memory_headroom={FLAGS.memory_headroom}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FLAGS.timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"placer": placer, "graph": graph_spec, "error": f"timed out after {FLAGS.timeout} s"}
    if done.returncode != 0:
        return {"placer": placer, "graph": graph_spec, "error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.one:
        placer, graph_spec = FLAGS.one.split(",", 1)
        print(json.dumps(time_one(placer, graph_spec)))
        return
    for graph_spec in [*FLAGS.sizes, *sorted(glob.glob(FLAGS.real_graphs))]:
        for placer in FLAGS.placers:
            print(json.dumps(run_isolated(placer, graph_spec)), flush=True)


if __name__ == "__main__":
    app.run(main)
