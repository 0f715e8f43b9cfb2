"""Scale: a 200,000-op cost graph through every stage of tfplace, with seconds and memory per stage.

Stages, in one process: build a synthetic training graph of about ``--ops`` ops
(:func:`tfplace.core.synthetic.layered_training_graph`), save it as JSON and load it back (the import
of a profiled graph), place it with a placer (Celeritas by default; indexing included), and
simulate one step of the placement. The built graph is dropped before loading, so the later
stages work on the loaded one only.

Prints one JSON line per stage: ``{"stage", "seconds", "rss_mb", "peak_rss_mb", ...}`` where
``rss_mb`` is the resident memory after the stage and ``peak_rss_mb`` the process's peak so far
(``resource.getrusage``); then a summary line. Exits with status 1 when the peak exceeds
``--max_rss_mb``, so the run doubles as a check that memory stays bounded.

    python benchmarks/scale.py                          # 200k ops, celeritas, 4 devices
    python benchmarks/scale.py --ops=50000 --placer=m_topo --max_rss_mb=2000
"""

from __future__ import annotations

import functools
import gc
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from absl import app, flags

from tfplace.core.costgraph import graph_memory, load_json, save_json
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.synthetic import layered_training_graph
from tfplace.placer import placer_function
from tfplace.simulator import simulate

FLAGS = flags.FLAGS
flags.DEFINE_integer("ops", 200_000, "Ops of the synthetic graph.")
flags.DEFINE_string("placer", "celeritas", "Placer to run.")
flags.DEFINE_integer("num_devices", 4, "Devices to place on.")
flags.DEFINE_float("memory_headroom", 2.5, "Total device memory over the graph's memory.")
flags.DEFINE_bool("gzip", False, "Save the graph as .json.gz instead of .json.")
flags.DEFINE_integer("max_rss_mb", 6000, "Peak resident memory the whole run may reach.")


def _rss_mb() -> float:
    """Resident memory of this process now, in MB (from /proc; 0 where it is not available)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (``ru_maxrss`` is in KB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage(name: str, run: Callable[[], Any], **facts: Any) -> Any:
    """Run one stage, print its seconds and memory as a JSON line, and return its result."""
    gc.collect()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    report = {
        "stage": name,
        "seconds": round(seconds, 2),
        "rss_mb": round(_rss_mb()),
        "peak_rss_mb": round(_peak_rss_mb()),
    }
    print(json.dumps({**report, **facts}), flush=True)
    return result


def main(argv: list[str]) -> None:
    del argv
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "graph.json.gz" if FLAGS.gzip else "graph.json")
        built = stage("build", lambda: layered_training_graph(FLAGS.ops))
        stage(
            "save_json",
            functools.partial(save_json, built, path),
            ops=built.number_of_nodes(),
            edges=built.number_of_edges(),
        )
        del built
        graph = stage("load_json", lambda: load_json(path), file_mb=round(os.path.getsize(path) / 2**20, 1))
    total = graph_memory(graph)
    memory = max(1, int(total * FLAGS.memory_headroom / FLAGS.num_devices))
    devices = DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", memory)
    indexed = stage("index", lambda: index_graph(graph, devices.typical_link))
    output = stage(f"place_{FLAGS.placer}", lambda: placer_function(FLAGS.placer)(indexed, devices))
    overcommits = [str(o) for o in output.ledger.overcommits()]
    result = stage("simulate", lambda: simulate(indexed, output.op_devices, devices))
    peak = _peak_rss_mb()
    summary = {
        "stage": "total",
        "ops": len(indexed),
        "placer": FLAGS.placer,
        "devices": FLAGS.num_devices,
        "clusters": output.details.get("clusters"),
        "overcommits": overcommits,
        "simulated_step_seconds": round(result.makespan, 4),
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mb": round(peak),
        "max_rss_mb": FLAGS.max_rss_mb,
    }
    print(json.dumps(summary), flush=True)
    if peak > FLAGS.max_rss_mb:
        print(f"peak RSS {peak:.0f} MB exceeds --max_rss_mb={FLAGS.max_rss_mb}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
