"""Adjusting Placement (Algorithm 2, Eq. 7-9) and Order-Place on coarse graphs."""

import pytest

from helpers import UNIT_LINK, graph_from_edges
from tfplace.devices import DeviceSet
from tfplace.indexed import index_graph
from tfplace.placer.adjusting import adjusting_placement, order_place_clusters
from tfplace.placer.fusion import coarsen
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.timeline import Timeline


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
