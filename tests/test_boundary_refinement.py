"""Boundary and part refinement of Celeritas' cluster placement (tfplace/placer/refine.py)."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfplace.core.costgraph import CostGraph, graph_memory, load_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import Device, DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import kahn_order, leaders_first
from tfplace.core.synthetic import random_dag
from tfplace.core.transfer import TransferModel
from tfplace.placer import refine
from tfplace.placer.adjusting import order_place_clusters
from tfplace.placer.celeritas import celeritas
from tfplace.placer.fusion import fuse
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.refine import _boundary_moves, _part_targets, offload_side_work, refine_boundaries
from tfplace.simulator import SimulationResult, simulate

COMMITTED_CNN = Path(__file__).parent / "data" / "cnn_costs_b64.json.gz"
INCEPTION_V3 = Path(__file__).resolve().parent.parent / "results" / "graphs" / "inception_v3.json.gz"
TENSOR_HOLOGRAPHY = INCEPTION_V3.with_name("tensor_holography.json.gz")


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


def fork_join(branch_seconds=1.0):
    """``a`` forks into two branches ``b`` and ``c`` of ``branch_seconds`` each, joined by ``d``;
    small tensors (1 kB)."""
    graph = CostGraph()
    for name, seconds in (("a", 1e-3), ("b", branch_seconds), ("c", branch_seconds), ("d", 1e-3)):
        graph.add_op(name, compute_time=seconds, output_sizes=(1000,))
    for src, dst in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")):
        graph.add_dependency(src, dst, slots=(0,))
    return graph


def one_cluster_on_device_0(indexed, device_set):
    """The finished liveness ledger of every op on device 0, and the one cluster holding them."""
    ledger = MemoryLedger(indexed, device_set, memory_model="liveness")
    ops = kahn_order(indexed)
    ledger.commit(sorted(set(indexed.group.tolist())), 0, ops)
    coarse = CostGraph()
    coarse.add_op("cluster", compute_time=float(indexed.compute.sum()))
    return ledger, index_graph(coarse), [ops], [0]


def test_part_targets_are_the_devices_in_use_and_one_empty_device_of_each_kind_and_memory():
    devices = DeviceSet(
        tuple(Device(f"/device:GPU:{i}", memory) for i, memory in enumerate((8, 8, 8, 8, 16)))
    )
    ledger = MemoryLedger(index_graph(fork_join()), devices)
    assert _part_targets(ledger, np.array([1, 1, 3, 1])) == [0, 1, 3, 4]


def test_a_branch_moves_to_an_empty_device_where_it_runs_beside_its_sibling():
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(fork_join(), device_set.typical_link)
    ledger, coarse, members, devices = one_cluster_on_device_0(indexed, device_set)
    refined = refine_boundaries(ledger, coarse, members, devices)
    assert refined is not None
    placed = dict(zip(indexed.names, refined.op_devices().tolist()))
    assert placed["b"] != placed["c"]
    assert simulate(indexed, refined.op_devices(), device_set).makespan < 1.1


def test_no_part_moves_when_one_device_runs_a_chain_fastest():
    graph = fork_join()
    graph.add_dependency("b", "c", slots=(0,))  # the branches now run one after the other
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(graph, device_set.typical_link)
    assert refine_boundaries(*one_cluster_on_device_0(indexed, device_set)) is None


def chain_with_side_work():
    """A chain ``m0 .. m3`` of 1 s ops and ``side`` (0.3 s) that reads ``m0`` and that only the
    last op ``m3`` waits for; small tensors (1 kB)."""
    graph = CostGraph()
    for name, seconds in (("m0", 1.0), ("m1", 1.0), ("m2", 1.0), ("m3", 1.0), ("side", 0.3)):
        graph.add_op(name, compute_time=seconds, output_sizes=(1000,))
    for src, dst in (("m0", "m1"), ("m1", "m2"), ("m2", "m3"), ("m0", "side"), ("side", "m3")):
        graph.add_dependency(src, dst, slots=(0,))
    return graph


def test_side_work_moves_off_a_one_device_step_to_an_idle_device_and_shortens_it():
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(chain_with_side_work(), device_set.typical_link)
    ledger = one_cluster_on_device_0(indexed, device_set)[0]
    offloaded = offload_side_work(ledger)
    assert offloaded is not None
    placed = dict(zip(indexed.names, offloaded.op_devices().tolist()))
    assert placed["side"] != 0
    assert {placed[op] for op in ("m0", "m1", "m2", "m3")} == {0}
    step = simulate(indexed, offloaded.op_devices(), device_set).makespan
    assert step == pytest.approx(4.0, abs=0.01)  # the chain alone; one device takes 4.3 s
    assert offloaded.replayed().makespan == pytest.approx(step)


def test_celeritas_moves_the_side_work_off_its_one_device_placement():
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(chain_with_side_work(), device_set.typical_link)
    output = celeritas(indexed, device_set)
    assert output.details["refined"]
    assert simulate(indexed, output.op_devices, device_set).makespan < float(indexed.compute.sum())


def test_a_pure_chain_stays_on_one_device():
    graph = chain_with_side_work()
    graph.add_dependency("side", "m1", slots=(0,))  # m1 now waits for side: no slack left
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(graph, device_set.typical_link)
    assert offload_side_work(one_cluster_on_device_0(indexed, device_set)[0]) is None


def test_side_work_stays_when_the_budget_allows_no_trial(monkeypatch):
    device_set = DeviceSet.parse("/device:GPU:0-3", "1GB")
    indexed = index_graph(chain_with_side_work(), device_set.typical_link)
    monkeypatch.setattr(refine, "OFFLOAD_BUDGET", 2 * len(indexed) - 1)  # the one-device order and no trial
    assert offload_side_work(one_cluster_on_device_0(indexed, device_set)[0]) is None


def celeritas_against_one_v100(path: Path) -> tuple[bool, SimulationResult, SimulationResult]:
    """Celeritas on the committed cost graph at ``path`` (co-placed gradients, 4 x V100 32 GB):
    whether it refined, its simulated step, and the simulated step on one device."""
    device_set = DeviceSet.parse("/device:GPU:0-3", DEVICE_MODELS["V100-32GB"].memory)
    indexed = index_graph(load_json(path), device_set.typical_link, coplace_gradients=True)
    output = celeritas(indexed, device_set)
    one_device = simulate(indexed, np.zeros(len(indexed), dtype=np.int64), device_set)
    return bool(output.details["refined"]), simulate(indexed, output.op_devices, device_set), one_device


@pytest.mark.slow
def test_celeritas_places_tensor_holography_faster_than_one_device():
    """Issue 14: the step fits one V100; the optimizer's updates and the batch norms' moving
    averages, which no op waits for until the step ends, run on a second device meanwhile."""
    refined, step, one_device = celeritas_against_one_v100(TENSOR_HOLOGRAPHY)
    assert not step.oom and refined
    assert step.makespan < one_device.makespan


@pytest.mark.slow
def test_celeritas_places_inception_v3_faster_than_one_device_and_within_memory():
    """Issue 14: the one-device step (2.66 s) does not fit a V100's 32 GiB; the refined placement
    fits and, running branches beside each other, is shorter."""
    refined, step, one_device = celeritas_against_one_v100(INCEPTION_V3)
    assert one_device.oom and not step.oom
    assert refined
    assert step.makespan < one_device.makespan
