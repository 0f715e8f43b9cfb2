"""Split placers decide on saved graphs exactly what they decided before they were made faster
(issue 15, point 6: the decision's speed). The pins are ``benchmarks/split_decision_speed.py``'s
fingerprints and steps on 4 V100 32 GB GPUs, made by main 42928cd and updated when fed inputs moved
to the host (branch 15f: Inception V3's and Tensor Holography's plans changed, the CNN's did not); a
change meant to change decisions updates them, with the benchmark's ``--compare`` showing what moved.
Branch 14t: ``auto`` on the CNN keeps Celeritas' one-device placement with its side work offloaded
to a second GPU (2.090 ms) over one device (2.152 ms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfplace.core.costgraph import load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.placer import place_cost_graph
from tfplace.placer.split_plans import decision_fingerprint

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = {
    "tensor_holography": ROOT / "results" / "graphs" / "tensor_holography.json.gz",
    "inception_v3": ROOT / "results" / "graphs" / "inception_v3.json.gz",
    "cnn": ROOT / "tests" / "data" / "cnn_split_costs_b64.json.gz",
}


def v100s(count: int = 4) -> DeviceSet:
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", DEVICE_MODELS["V100-32GB"].memory)


@pytest.mark.parametrize(
    ("graph", "fingerprint"),
    [
        ("tensor_holography", "a6169b228991ea34"),
        ("inception_v3", "cadd5f75df8b637a"),
        ("cnn", "e1ce0e6375d6a0b4"),
    ],
)
def test_layerwise_chooses_the_same_plan_as_before(graph: str, fingerprint: str) -> None:
    placement = place_cost_graph(load_json(GRAPHS[graph]), v100s(), "layerwise")
    assert decision_fingerprint(placement) == fingerprint


@pytest.mark.parametrize(
    ("graph", "step_time"), [("tensor_holography", 0.24925789718661567), ("cnn", 0.002089525108989384)]
)
def test_auto_finds_the_same_step_as_before(graph: str, step_time: float) -> None:
    placement = place_cost_graph(load_json(GRAPHS[graph]), v100s(), "auto")
    assert placement.step_time == pytest.approx(step_time, rel=1e-9)
