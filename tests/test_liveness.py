"""The liveness memory model's trial check (tfplace.placer.liveness)."""

from __future__ import annotations

import numpy as np
import pytest

from tfplace.core.indexed import index_graph
from tfplace.core.orders import kahn_order
from tfplace.core.synthetic import layered_training_graph, random_dag
from tfplace.placer.liveness import LiveMemory


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
