"""Boundary refinement of Celeritas' cluster placement (tfplace/placer/refine.py)."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfplace.core.costgraph import graph_memory, load_json
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import kahn_order, leaders_first
from tfplace.core.synthetic import random_dag
from tfplace.core.transfer import TransferModel
from tfplace.placer.adjusting import order_place_clusters
from tfplace.placer.celeritas import celeritas
from tfplace.placer.fusion import fuse
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.refine import _boundary_moves, refine_boundaries
from tfplace.simulator import simulate

COMMITTED_CNN = Path(__file__).parent / "data" / "cnn_costs_b64.json.gz"


def filled(graph, device_set, exploration_range=200):
    """Order-Place on Kahn-order clusters, as Celeritas' breadth-first candidate: (ledger, coarse,
    members, cluster devices)."""
    fusion = fuse(
        graph,
        leaders_first(graph, kahn_order(graph)),
        exploration_range,
        min(d.memory for d in device_set) / 4,
    )
    coarse = index_graph(fusion.coarse)
    ledger = MemoryLedger(graph, device_set, memory_model="liveness")
    schedule = order_place_clusters(coarse, fusion.members, ledger)
    return ledger, coarse, fusion.members, schedule.devices


def fits(ledger):
    return all(ledger.used(d) <= device.memory for d, device in enumerate(ledger.devices.devices))


def test_boundary_moves_shift_single_clusters_at_every_boundary_before_longer_runs():
    moves = [(list(run), target) for run, target in _boundary_moves([0, 0, 0, 1, 1, 0])]
    assert moves[:4] == [([2], 1), ([3], 0), ([4], 0), ([5], 1)]
    assert ([1, 2], 1) in moves and ([3, 4], 0) in moves
    assert all(len(run) <= 3 for run, _ in moves)


def test_no_boundary_means_no_move():
    assert list(_boundary_moves([2, 2, 2])) == []


@settings(max_examples=30, deadline=None)
@given(st.integers(10, 120), st.integers(0, 10_000), st.floats(0.4, 1.2), st.integers(2, 4))
def test_a_refined_placement_fits_and_its_simulated_step_is_shorter(size, seed, headroom, count):
    graph = random_dag(
        size, seed=seed, average_degree=2.5, group_fraction=0.2, transfer_model=TransferModel.default()
    )
    device_set = DeviceSet.parse(
        f"/device:GPU:0-{count - 1}", max(1, int(graph_memory(graph) * headroom / count))
    )
    indexed = index_graph(graph, device_set.typical_link)
    ledger, coarse, members, devices = filled(indexed, device_set, exploration_range=3)
    if not fits(ledger):
        return
    refined = refine_boundaries(ledger, coarse, members, devices)
    if refined is None:
        return
    assert fits(refined)
    before = simulate(indexed, ledger.op_devices(), device_set).makespan
    after = simulate(indexed, refined.op_devices(), device_set).makespan
    assert after < before
    assert refined.replayed().makespan == pytest.approx(after)
    moved = refined.op_devices() != ledger.op_devices()
    assert all(
        moved[indexed.group == g].all() for g in set(indexed.group[moved].tolist())
    )  # groups move whole


def test_celeritas_refines_the_committed_cnn_split_over_two_devices_to_a_shorter_simulated_step():
    graph = load_json(COMMITTED_CNN)
    device_set = DeviceSet.parse("/device:GPU:0-3", int(graph_memory(graph) * 0.3))
    indexed = index_graph(graph, device_set.typical_link, coplace_gradients=True)
    output = celeritas(indexed, device_set)
    kept = min(c[2] for c in output.details["candidates"] if c[3])
    step = simulate(indexed, output.op_devices, device_set).makespan
    assert output.details["refined"]
    assert step == pytest.approx(output.estimated_makespan)
    assert step < kept
    assert fits(output.ledger)
