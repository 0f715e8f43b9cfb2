"""Adjusting Placement (Algorithm 2, Eq. 7-9) and Order-Place on coarse graphs."""

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import UNIT_LINK, graph_from_edges
from tfplace.core.costgraph import CostGraph, graph_memory, load_json
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import average_parallelism, cpd_topo_order
from tfplace.core.synthetic import random_dag
from tfplace.core.transfer import TransferModel
from tfplace.placer.adjusting import adjusting_placement, order_place_clusters
from tfplace.placer.celeritas import celeritas, order_place
from tfplace.placer.fusion import coarsen
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.timeline import Timeline
from tfplace.simulator import simulate


def devices(count=2, memory=10**9):
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=UNIT_LINK)


def one_op_clusters(graph, device_set, placer=adjusting_placement):
    """Run a cluster placer with every op its own cluster; returns {op: device}, schedule, ledger."""
    indexed = index_graph(graph, device_set.typical_link)
    order = list(range(len(indexed)))
    fusion = coarsen(indexed, order, list(range(len(indexed) + 1)))
    ledger = MemoryLedger(indexed, device_set)
    schedule = placer(index_graph(fusion.coarse), fusion.members, ledger)
    return dict(zip(indexed.names, ledger.op_devices().tolist())), schedule, ledger


def fork(back_bytes):
    # r feeds two long ops x and y; both feed j, each sending back_bytes.
    return graph_from_edges(
        [("r", "x", 1), ("r", "y", 1), ("x", "j", back_bytes), ("y", "j", back_bytes)],
        {"r": 1, "x": 10, "y": 10, "j": 1},
    )


def test_a_cluster_moves_when_it_starts_earlier_by_more_than_the_back_cost():
    placed, schedule, _ = one_op_clusters(fork(back_bytes=1), devices())
    assert placed["x"] != placed["y"]
    assert schedule.makespan == pytest.approx(1 + 1 + 10 + 1)  # r, send, x beside y, j


def test_a_cluster_stays_when_the_back_cost_outweighs_the_gain():
    placed, schedule, _ = one_op_clusters(fork(back_bytes=20), devices())
    assert len(set(placed.values())) == 1
    assert schedule.makespan == pytest.approx(22)


def test_adjusting_uses_idle_slots_before_later_work():
    timeline = Timeline()
    timeline.reserve(0.0, 2.0)
    timeline.reserve(5.0, 3.0)
    assert timeline.earliest_start(1.0, 3.0) == 2.0
    assert timeline.earliest_start(1.0, 4.0) == 8.0
    assert timeline.earliest_start(9.0, 1.0) == 9.0
    assert timeline.end == 8.0


def test_a_cluster_that_no_longer_fits_goes_to_a_device_with_room():
    graph = graph_from_edges([("a", "b", 1), ("b", "c", 1)], persistent_bytes={"a": 60, "b": 60, "c": 60})
    placed, _, ledger = one_op_clusters(graph, devices(2, memory=130))
    assert placed["a"] == placed["b"] != placed["c"]
    assert all(ledger.used(d) <= 130 for d in range(2))


def test_when_every_device_is_full_the_least_used_one_takes_the_cluster():
    graph = graph_from_edges([("a", "b", 1), ("b", "c", 1)], persistent_bytes={"a": 90, "b": 50, "c": 70})
    placed, schedule, ledger = one_op_clusters(graph, devices(2, memory=100))
    assert placed["c"] == placed["b"]  # device 1 holds b's 50 + 1 bytes, device 0 holds a's 90 + 1
    assert schedule.best_effort == [2]
    assert [str(o) for o in ledger.overcommits()] == [
        "/device:GPU:1 is overcommitted by 21 bytes (121 placed on 100)"
    ]


def test_a_colocation_group_lands_whole_with_its_whole_memory_counted_at_its_first_op():
    # a (small) and z (big) share a group; b in between does not fit beside the whole group.
    graph = graph_from_edges(
        [("a", "b", 1), ("b", "z", 1)],
        persistent_bytes={"a": 10, "b": 50, "z": 80},
        colocation_group={"a": "g", "z": "g"},
    )
    placed, _, ledger = one_op_clusters(graph, devices(2, memory=100))
    assert placed["a"] == placed["z"] == 0
    assert placed["b"] == 1
    assert ledger.used(0) == 91  # a, z and a's 1-byte output


def test_order_place_fills_one_device_before_the_next():
    graph = graph_from_edges(
        [("a", "b", 1), ("b", "c", 1), ("c", "d", 1)], persistent_bytes={"a": 40, "b": 40, "c": 40, "d": 40}
    )
    placed, _, _ = one_op_clusters(graph, devices(3, memory=100), order_place_clusters)
    assert [placed[op] for op in "abcd"] == [0, 0, 1, 1]


def test_order_place_never_moves_back_to_an_earlier_device():
    graph = graph_from_edges([("a", "b", 1), ("b", "c", 1)], persistent_bytes={"a": 60, "b": 60, "c": 1})
    placed, _, _ = one_op_clusters(graph, devices(2, memory=100), order_place_clusters)
    assert [placed[op] for op in "abc"] == [0, 1, 1]


def test_order_place_runs_a_cluster_whose_ops_are_placed_where_they_are_and_keeps_filling():
    # a and its co-located g (a gradient op, say) fill device 0; b moves the fill to device 1;
    # g's cluster runs on device 0 with a, and c, which follows b, stays on device 1
    graph = graph_from_edges(
        [("a", "b", 1), ("b", "g", 1), ("g", "c", 1)],
        persistent_bytes={"a": 60, "b": 60, "g": 1, "c": 1},
        colocation_group={"a": "w", "g": "w"},
    )
    placed, schedule, _ = one_op_clusters(graph, devices(2, memory=100), order_place_clusters)
    assert [placed[op] for op in "abgc"] == [0, 1, 0, 1]
    assert schedule.devices == [0, 1, 0, 1]
    assert schedule.makespan == pytest.approx(1 + 1 + 1 + 1 + 1 + 1 + 1)  # a, send, b, send, g, send, c


# -- Adjusting Placement against Order-Place (section 5.2's claim) ----------------------------------

FREE_LINK = TransferModel(k=0.0, b=0.0, name="free")


def place_both(graph, device_set, exploration_range=1):
    """The paper's Celeritas (Adjusting Placement, static memory) and Order-Place on the same
    fusion; returns their outputs."""
    indexed = index_graph(graph, device_set.typical_link)
    options = {"exploration_range": exploration_range, "memory_model": "static"}
    adjusting = celeritas(indexed, device_set, order_place_guard=False, **options)
    return indexed, adjusting, order_place(indexed, device_set, **options)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 120), st.integers(0, 10_000), st.integers(2, 4), st.sampled_from([1, 3, 20]))
def test_adjusting_is_never_slower_than_order_place_when_transfers_are_free_and_one_device_holds_the_graph(
    size, seed, count, exploration_range
):
    # Order-Place then runs everything on device 0 (sum of compute times); Adjusting starts each
    # cluster at the least EST, which by induction is at most the sum of the earlier clusters' times.
    graph = random_dag(size, seed=seed, average_degree=2.5, group_fraction=0.2, transfer_model=FREE_LINK)
    device_set = DeviceSet.parse(f"/device:GPU:0-{count - 1}", 10**12, intra_host=FREE_LINK)
    indexed, adjusting, ordered = place_both(graph, device_set, exploration_range)
    assert set(ordered.op_devices.tolist()) == {0}
    assert ordered.estimated_makespan == pytest.approx(indexed.compute.sum())
    assert adjusting.estimated_makespan <= ordered.estimated_makespan * (1 + 1e-12)
    simulated = [simulate(indexed, out.op_devices, device_set).makespan for out in (adjusting, ordered)]
    assert simulated[0] <= simulated[1] * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 150),
    st.integers(0, 10_000),
    st.floats(0.3, 3.0),
    st.sampled_from([UNIT_LINK, TransferModel.default(), TransferModel(k=1e-9, b=1e-4)]),
    st.booleans(),
)
def test_every_move_returns_the_clusters_results_to_the_previous_device_before_staying_would_have(
    size, seed, headroom, link, two_hosts
):
    # The step of the paper's proof: v moves from d_k to d_1 only if EST(d_1) + back_cost <
    # EST(d_k), so each successor can have v's outputs on d_k earlier than if v had stayed.
    graph = random_dag(size, seed=seed, average_degree=2.5, group_fraction=0.2, transfer_model=link)
    memory = graph_memory(graph)
    names = "/job:w/task:0-1/device:GPU:0-1" if two_hosts else "/device:GPU:0-3"
    device_set = DeviceSet.parse(names, max(1, int(memory * headroom / 4)), intra_host=link)
    indexed = index_graph(graph, device_set.typical_link)
    output = celeritas(indexed, device_set, exploration_range=3, order_place_guard=False)
    coarse = index_graph(output.details["coarse_graph"])
    schedule = output.details["schedule"]
    order = cpd_topo_order(coarse)
    for previous, v in itertools.pairwise(order):
        d_k, d_1 = schedule.devices[previous], schedule.devices[v]
        if v in schedule.best_effort:
            continue
        if d_1 == d_k:
            assert schedule.start[v] == schedule.stay_start[v]
        elif schedule.stay_start[v] < math.inf:
            back_cost = max(
                (coarse.transfer_time(v, k, device_set, d_1, d_k) for k in range(len(coarse.succ[v]))),
                default=0.0,
            )
            assert schedule.finish[v] + back_cost < schedule.stay_start[v] + coarse.compute[v]


def sticky_fork_join():
    """a feeds x and y (10 s each); x sends 100 bytes to j, y 1 byte; j sends 200 bytes to z."""
    return graph_from_edges(
        [("a", "x", 1), ("a", "y", 1), ("x", "j", 100), ("y", "j", 1), ("j", "z", 200)],
        {"a": 1, "x": 10, "y": 10, "j": 1, "z": 1},
    )


def test_adjusting_can_be_slower_than_order_place_once_a_move_makes_the_new_device_sticky():
    # Adjusting keeps x beside a, moves y (gains 9 s > back cost 1 s); j then stays on y's device
    # (previous cluster) because moving it back would only gain 98 s < its back cost of 200 s,
    # and waits for x's 100-byte transfer. Order-Place runs all five on one device.
    graph = sticky_fork_join()
    device_set = devices(2)
    indexed, adjusting, ordered = place_both(graph, device_set)
    placed = dict(zip(indexed.names, adjusting.op_devices.tolist()))
    assert placed == {"a": 0, "x": 0, "y": 1, "j": 1, "z": 1}
    assert adjusting.estimated_makespan == pytest.approx(113)
    assert ordered.estimated_makespan == pytest.approx(23)
    assert simulate(indexed, adjusting.op_devices, device_set).makespan == pytest.approx(113)
    assert simulate(indexed, ordered.op_devices, device_set).makespan == pytest.approx(23)


def test_the_order_place_guard_keeps_order_places_placement_when_its_schedule_is_shorter():
    graph = sticky_fork_join()
    device_set = devices(2)
    indexed = index_graph(graph, device_set.typical_link)
    guarded = celeritas(indexed, device_set, exploration_range=1, memory_model="static")
    assert guarded.details["cluster_placer"] == "order_place_clusters"
    assert guarded.estimated_makespan == pytest.approx(23)
    assert simulate(indexed, guarded.op_devices, device_set).makespan == pytest.approx(23)


def test_under_liveness_the_refined_spread_candidate_beats_both_cluster_placers():
    # The same graph: Adjusting Placement's 113 s and Order-Place's 23 s (one device) are the
    # candidates; part moves then run x and y side by side, y beside a, x, j and z on device 1 (14 s).
    graph = sticky_fork_join()
    device_set = devices(2)
    indexed = index_graph(graph, device_set.typical_link)
    output = celeritas(indexed, device_set, exploration_range=1)
    estimates = {placer: makespan for _, placer, makespan, _ in output.details["candidates"]}
    assert estimates == {"adjusting_placement": pytest.approx(113), "order_place_clusters": pytest.approx(23)}
    assert output.details["refined"]
    placed = dict(zip(indexed.names, output.op_devices.tolist()))
    assert placed["x"] != placed["y"] and placed["x"] == placed["j"] == placed["z"]
    assert output.estimated_makespan == pytest.approx(14)
    assert simulate(indexed, output.op_devices, device_set).makespan == pytest.approx(14)


def test_adjusting_can_be_slower_than_order_place_when_its_moves_take_the_memory_a_later_cluster_needs():
    # Free transfers (control edges only), 100 bytes per device. Adjusting moves b to the idle
    # device 1, so c no longer fits beside a and queues behind b; d waits for c. Order-Place packs
    # a and b on device 0 and leaves device 1 to c and d.
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    for name, seconds, nbytes in [("a", 3, 55), ("b", 10, 25), ("c", 1, 55), ("d", 8, 40)]:
        graph.add_op(name, compute_time=seconds, persistent_bytes=nbytes)
    graph.add_dependency("a", "d", control=True)
    graph.add_dependency("c", "d", control=True)
    device_set = devices(2, memory=100)
    indexed, adjusting, ordered = place_both(graph, device_set)
    assert dict(zip(indexed.names, adjusting.op_devices.tolist())) == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert dict(zip(indexed.names, ordered.op_devices.tolist())) == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert simulate(indexed, adjusting.op_devices, device_set).makespan == pytest.approx(19)
    assert simulate(indexed, ordered.op_devices, device_set).makespan == pytest.approx(13)
    assert adjusting.estimated_makespan == pytest.approx(19)
    assert ordered.estimated_makespan == pytest.approx(13)


# -- Celeritas' choice among its candidates (liveness) ----------------------------------------------

COMMITTED_CNN = Path(__file__).parent / "data" / "cnn_costs_b64.json.gz"


@pytest.mark.parametrize("share", [0.15, 0.3, 0.5, 1.0])
def test_celeritas_estimates_the_step_of_its_placement_by_the_executor_replay_the_simulator_runs(share):
    graph = load_json(COMMITTED_CNN)
    device_set = DeviceSet.parse("/device:GPU:0-3", int(graph_memory(graph) * share))
    indexed = index_graph(graph, device_set.typical_link, coplace_gradients=True)
    output = celeritas(indexed, device_set)
    assert output.estimated_makespan == pytest.approx(
        simulate(indexed, output.op_devices, device_set).makespan
    )


@pytest.mark.parametrize("share", [0.15, 0.3, 0.5, 1.0])
def test_celeritas_keeps_a_fastest_candidate_that_fits_fuses_breadth_first_only_when_memory_splits_the_step_and_pipelines_only_parallel_steps(
    share,
):
    graph = load_json(COMMITTED_CNN)
    device_set = DeviceSet.parse("/device:GPU:0-3", int(graph_memory(graph) * share))
    indexed = index_graph(graph, device_set.typical_link, coplace_gradients=True)
    output = celeritas(indexed, device_set)
    candidates = output.details["candidates"]
    kept = (output.details["fusion_order"], output.details["cluster_placer"])
    fitting = [c for c in candidates if c[3]] or candidates
    if not output.details["refined"]:  # refined: one of the fastest, whichever refined faster
        assert kept in [c[:2] for c in fitting if c[2] == min(f[2] for f in fitting)]
    filled = len(set(order_place(indexed, device_set).op_devices.tolist()))
    parallelism = average_parallelism(indexed)
    stages = min(len(device_set), math.ceil(parallelism)) if parallelism >= 2 else 1
    assert [c[:2] for c in candidates] == [
        ("cpd_topo_order", "adjusting_placement"),
        ("cpd_topo_order", "order_place_clusters"),
        *([("kahn_order", "order_place_clusters")] if filled > 1 else []),
        *[("_heavy_input_cpd_order", f"balanced_fill_{k}") for k in range(2, stages + 1)],
    ]


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 120), st.integers(0, 10_000), st.floats(0.3, 3.0), st.integers(2, 4))
def test_celeritas_is_never_slower_in_simulation_than_the_papers_adjusting_placement_or_order_place_when_they_fit(
    size, seed, headroom, count
):
    graph = random_dag(
        size, seed=seed, average_degree=2.5, group_fraction=0.2, transfer_model=TransferModel.default()
    )
    device_set = DeviceSet.parse(
        f"/device:GPU:0-{count - 1}", max(1, int(graph_memory(graph) * headroom / count))
    )
    indexed = index_graph(graph, device_set.typical_link)
    chosen = celeritas(indexed, device_set, exploration_range=3)
    for other in (
        celeritas(indexed, device_set, exploration_range=3, order_place_guard=False),
        order_place(indexed, device_set, exploration_range=3),
    ):
        if not other.ledger.overcommits():
            assert not chosen.ledger.overcommits()
            step = simulate(indexed, chosen.op_devices, device_set).makespan
            assert step <= simulate(indexed, other.op_devices, device_set).makespan * (1 + 1e-9)
