"""Placements are deterministic: the same cost graph and devices give the same placement in every
process, whatever Python's hash seed or the machine's load.

The cost graphs are committed (``tests/data/*_costs_b64.json.gz``: ``tfplace profile`` of the saved
test graphs at batch 64), so every machine places the same numbers. The one wall-clock limit in a
placer is m-SCT's LP time limit (60 s, far above what these graphs need).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tfplace.api import place_costs
from tfplace.core.costgraph import graph_memory, load_json
from tfplace.core.devices import DeviceSet
from tfplace.placer import PLACERS

TESTS = Path(__file__).resolve().parent

#: (committed cost graph, devices, each device's share of the step's memory in the static model):
#: a third each (no placement fits, best effort decides) and 60% each on a mixed set.
CASES = [
    ("cnn_costs_b64.json.gz", "/device:CPU:0-2", 1 / 3),
    ("cnn_costs_b64.json.gz", "/device:GPU:0-1,/device:CPU:0", 0.6),
    ("lstm_v1_costs_b64.json.gz", "/device:CPU:0-2", 1 / 3),
    ("lstm_v1_costs_b64.json.gz", "/device:GPU:0-1,/device:CPU:0", 0.6),
]


def every_placement():
    """``{"file devices placer": assignment}`` of every registered placer on every case, each
    placed twice through ``place_costs`` (which prices the graph's edges on the devices' link)."""
    placements = {}
    for name, spec, share in CASES:
        graph = load_json(TESTS / "data" / name)
        devices = DeviceSet.parse(spec, int(graph_memory(graph) * share))
        for placer in PLACERS:
            first, second = (place_costs(graph, devices, placer=placer).assignment for _ in range(2))
            assert first == second, f"{placer} placed {name} on {spec} differently the second time"
            placements[f"{name} {spec} {placer}"] = first
    return placements


def test_every_placer_places_a_committed_graph_alike_in_processes_with_other_hash_seeds():
    script = (
        f"import json, sys; sys.path.insert(0, {str(TESTS)!r}); "
        "from test_determinism import every_placement; print(json.dumps(every_placement()))"
    )
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]  # both at once: each places while the other loads the machine
    expected = every_placement()
    for child in children:
        out, err = child.communicate()
        assert child.returncode == 0, err[-2000:]
        placed = json.loads(out)
        assert set(placed) == set(expected)
        differing = {
            case: sum(placed[case][op] != device for op, device in expected[case].items())
            for case in expected
            if placed[case] != expected[case]
        }
        assert differing == {}  # case -> ops placed on another device
