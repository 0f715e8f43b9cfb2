"""The liveness memory model's trial check (tfplace.placer.liveness)."""

from __future__ import annotations

import numpy as np
import pytest

from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import kahn_order
from tfplace.core.synthetic import layered_training_graph, random_dag
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.liveness import LiveMemory
from tfplace.simulator import simulate


@pytest.mark.parametrize(
    "graph",
    [layered_training_graph(400, gradients=True), random_dag(400, group_fraction=0.2, seed=3)],
    ids=["layered", "random"],
)
def test_peak_within_decides_as_the_exact_peak_after_every_trial(graph):
    indexed = index_graph(graph, coplace_gradients=True)
    rng = np.random.default_rng(0)
    device = rng.integers(0, 3, len(indexed)).tolist()
    live = LiveMemory(indexed, 3, device.__getitem__)
    order = kahn_order(indexed)
    decided = 0
    for start in range(0, len(order), 25):
        ops = order[start : start + 25]
        for d in range(3):
            exact = live.peak_after(ops, d, d, persistent=1000)
            for limit in (exact - 1, exact, exact * 2):
                assert live.peak_within(ops, d, limit, persistent=1000) == (exact <= limit)
                decided += 1
        live.run(ops, -1)
    assert decided > 100


def test_a_buffer_an_alias_sent_away_still_holds_stays_live_until_its_last_consumer():
    """Inception V3's batch norm on a device of its own (issue 14): the moving mean's handle ``h``
    (200 bytes) is read by ``r``, a view of it sent to another device, and updated by ``update``
    only at the step's end. The estimate frees ``h`` when the view is no longer held, as the
    simulator does, not when the view's transfer ends."""
    graph = CostGraph()
    graph.add_op("h", compute_time=1e-5, output_sizes=(200,))
    graph.add_op("r", compute_time=1e-5, output_sizes=(200,), aliased_outputs=[(0, "h", 0)])
    graph.add_op("use", compute_time=1e-2, output_sizes=(128,))
    graph.add_op("update", compute_time=1e-5)
    for src, dst in (("h", "r"), ("r", "use"), ("use", "update"), ("h", "update")):
        graph.add_dependency(src, dst, slots=(0,))
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    indexed = index_graph(graph, devices.typical_link)
    ledger = MemoryLedger(indexed, devices, memory_model="liveness")
    group_device = np.ones(len(indexed.group_members), dtype=np.int64)
    group_device[indexed.group[indexed.index["use"]]] = 0
    simulated = simulate(indexed, group_device[indexed.group], devices).peak_memory
    assert ledger.replay_groups(group_device).peak[:2].tolist() == simulated[:2].tolist()
