"""Split-plan decision speed (issue 15, point 6: under 10 s per model): CPU and wall seconds of
``place_cost_graph(graph, devices, placer)`` for the split placers and ``auto`` on the paper's
models, with the plan's fingerprint so that a faster version can be shown to decide the same.

Devices: ``--num_devices`` V100 32 GB GPUs on the default PCIe 3 link, as ``run_experiments.py``
places the committed graphs. Each placement runs in a fresh subprocess (no cache carried over),
and prints one JSON line::

    {"code", "placer", "graph", "ops", "cpu_seconds", "seconds", "step_time", "peak_memory", "chosen",
     "fingerprint", "load"}

``cpu_seconds`` is the process's CPU time of the call (the machine is shared: wall seconds grow
with the others' load, CPU time much less). ``fingerprint`` is
:func:`tfplace.placer.split_plans.decision_fingerprint`: every op's split (its devices, dimension
and shares) or device, with the simulated step and peak memory rounded to 1e-9 s and 1 byte: equal
fingerprints are equal decisions.

``--compare=DIR`` also runs every placement with the package in ``DIR`` (say an export of
``main``: ``git archive main | tar -x -C /tmp/base``) just before this checkout's, and ends with a
table of both side by side (CPU seconds, their ratio, whether the fingerprints agree)::

    python benchmarks/split_decision_speed.py --placers=layerwise,data_parallel,auto --compare=/tmp/base
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from absl import app, flags

from tfplace.core.costgraph import load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.placer import place_cost_graph
from tfplace.placer.split_plans import decision_fingerprint

FLAGS = flags.FLAGS
flags.DEFINE_list("placers", ["layerwise", "data_parallel", "auto"], "Placers to time.")
flags.DEFINE_list(
    "graphs",
    [f"results/graphs/{m}.json.gz" for m in ("inception_v3", "nmt", "transformer", "tensor_holography")],
    "Cost graphs (paths or globs).",
)
flags.DEFINE_integer("num_devices", 4, "V100 32 GB GPUs to place on.")
flags.DEFINE_string("compare", None, "Directory of another tfplace checkout to time first, side by side.")
flags.DEFINE_integer("timeout", 1800, "Seconds before one placement is reported as timed out.")
flags.DEFINE_string("one", None, "Internal: time one placement: placer,graph.")

CHECKOUT = Path(__file__).resolve().parent.parent


def time_one(placer: str, path: str) -> dict[str, object]:
    """Load the graph, then place it once with ``placer`` (simulated, as users call it)."""
    graph = load_json(path)
    memory = DEVICE_MODELS["V100-32GB"].memory
    devices = DeviceSet.parse(f"/device:GPU:0-{FLAGS.num_devices - 1}", memory)
    load = os.getloadavg()[0]
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    placement = place_cost_graph(graph, devices, placer)
    cpu_seconds, seconds = time.process_time() - cpu_start, time.perf_counter() - wall_start
    return {
        "placer": placer,
        "graph": Path(path).name.split(".")[0],
        "ops": len(graph),
        "cpu_seconds": round(cpu_seconds, 2),
        "seconds": round(seconds, 2),
        "step_time": placement.step_time,
        "peak_memory": max(placement.peak_memory.values(), default=0),
        "chosen": placement.placer,
        "fingerprint": decision_fingerprint(placement),
        "load": round(load, 2),
    }


def run_one(code: Path, placer: str, path: str) -> dict[str, object]:
    """:func:`time_one` in a fresh interpreter importing ``tfplace`` from ``code``, by ``code``'s
    own copy of this benchmark (an older checkout fingerprints with its own package)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    script = code / "benchmarks" / Path(__file__).name
    command = [sys.executable, str(script), f"--one={placer},{path}"]
    command += [f"--num_devices={FLAGS.num_devices}"]
    try:
        done = subprocess.run(
            command, env=env, cwd=CHECKOUT, capture_output=True, text=True, timeout=FLAGS.timeout
        )
    except subprocess.TimeoutExpired:
        return {"code": str(code), "placer": placer, "graph": path, "error": "timed out"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"code": str(code), "placer": placer, "graph": path, "error": done.stderr.strip()[-500:]}
    return {"code": str(code), **json.loads(lines[-1])}


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.one:
        placer, path = FLAGS.one.split(",", 1)
        print(json.dumps(time_one(placer, path)))
        return
    paths = [p for spec in FLAGS.graphs for p in sorted(glob.glob(spec)) or [spec]]
    codes = [Path(FLAGS.compare).resolve()] if FLAGS.compare else []
    codes.append(CHECKOUT)
    rows = []
    for path in paths:
        for placer in FLAGS.placers:
            pair = [run_one(code, placer, path) for code in codes]
            for row in pair:
                print(json.dumps(row), flush=True)
            rows.append(pair)
    if FLAGS.compare:
        print(
            "\n| graph | placer | CPU s before | CPU s now | ratio | step before | step now | same decision |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for before, now in rows:
            if "error" in before or "error" in now:
                print(
                    f"| {now['graph']} | {now['placer']} | {before.get('error', '')} | {now.get('error', '')} |"
                )
                continue
            ratio = float(before["cpu_seconds"]) / max(float(now["cpu_seconds"]), 1e-9)  # type: ignore[arg-type]
            same = "yes" if before["fingerprint"] == now["fingerprint"] else "NO"
            print(
                f"| {now['graph']} | {now['placer']} | {before['cpu_seconds']} | {now['cpu_seconds']} | "
                f"{ratio:.2f}x | {before['step_time']} | {now['step_time']} | {same} |"
            )


if __name__ == "__main__":
    app.run(main)
