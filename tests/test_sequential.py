"""Sequential placers (DFS-TOPO fill, m-TOPO, single device) and the shared memory ledger."""

import numpy as np

from helpers import UNIT_LINK, graph_from_edges
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.synthetic import random_dag
from tfplace.placer.base import check_constraints
from tfplace.placer.sequential import dfs_topo, m_topo, single_device


def by_name(indexed, output):
    return dict(zip(indexed.names, output.op_devices.tolist()))


def test_dfs_topo_fills_the_first_device_to_its_memory_then_the_next():
    graph = graph_from_edges(
        [("a", "b", 0), ("b", "c", 0), ("a", "d", 0)], persistent_bytes={"a": 30, "b": 30, "c": 30, "d": 30}
    )
    indexed = index_graph(graph)
    placed = by_name(indexed, dfs_topo(indexed, DeviceSet.parse("/device:GPU:0-1", 100)))
    assert [placed[op] for op in "abcd"] == [0, 0, 0, 1]


def test_m_topo_spreads_ops_with_its_uniform_cap():
    graph = graph_from_edges(
        [(f"s{i}", "sink", 0) for i in range(8)], persistent_bytes={f"s{i}": 10 for i in range(8)}
    )
    indexed = index_graph(graph)
    placed = by_name(indexed, m_topo(indexed, DeviceSet.parse("/device:GPU:0-3", 1000)))
    counts = np.bincount([placed[f"s{i}"] for i in range(8)], minlength=4)
    assert counts.tolist() == [3, 3, 2, 0]  # cap 80 / 4 + 10 = 30 holds three 10-byte ops
    placed = by_name(indexed, m_topo(indexed, DeviceSet.parse("/device:GPU:0-3", 25)))
    counts = np.bincount([placed[f"s{i}"] for i in range(8)], minlength=4)
    assert counts.tolist() == [2, 2, 2, 2]  # a device smaller than the cap limits first


def test_m_topo_counts_a_whole_colocation_group_not_only_its_first_op():
    graph = graph_from_edges(
        [("v", "x", 0), ("x", "u", 0), ("w", "u", 0)],
        persistent_bytes={"v": 1, "x": 40, "u": 60, "w": 30},
        colocation_group={"v": "g", "u": "g"},
    )
    indexed = index_graph(graph)
    output = m_topo(indexed, DeviceSet.parse("/device:GPU:0-1", 100))
    placed = by_name(indexed, output)
    assert placed["v"] == placed["u"]
    assert all(output.ledger.used(d) <= 100 for d in range(2))


def test_single_device_puts_everything_on_the_first_device_and_reports_the_overcommit():
    graph = graph_from_edges([("a", "b", 0)], persistent_bytes={"a": 80, "b": 80})
    indexed = index_graph(graph)
    output = single_device(indexed, DeviceSet.parse("/device:GPU:0-1", 100))
    assert set(output.op_devices.tolist()) == {0}
    assert [o.shortfall for o in output.ledger.overcommits()] == [60]


def test_ops_without_a_gpu_kernel_go_to_the_hosts_cpu_when_only_gpus_are_given():
    graph = graph_from_edges([("a", "summary", 0), ("a", "b", 0)], device_kinds={"summary": ("CPU",)})
    indexed = index_graph(graph)
    device_set = DeviceSet.parse("/device:GPU:0-1", 100)
    for placer in (dfs_topo, m_topo, single_device):
        placed = by_name(indexed, placer(indexed, device_set))
        assert (
            device_set.all_devices[placed["summary"]].name == "/job:localhost/replica:0/task:0/device:CPU:0"
        )
        assert placed["a"] < 2


def test_ops_without_a_gpu_kernel_go_to_a_listed_cpu_when_there_is_one():
    graph = graph_from_edges([("a", "summary", 0)], device_kinds={"summary": ("CPU",)})
    indexed = index_graph(graph)
    device_set = DeviceSet.parse("/device:GPU:0,/device:CPU:0", 100)
    placed = by_name(indexed, dfs_topo(indexed, device_set))
    assert placed == {"a": 0, "summary": 1}


def test_sequential_placers_honor_every_constraint_on_random_graphs():
    for seed in range(20):
        graph = random_dag(
            150, seed=seed, group_fraction=0.3, cpu_only_fraction=0.05, transfer_model=UNIT_LINK
        )
        indexed = index_graph(graph)
        device_set = DeviceSet.parse("/device:GPU:0-2,/device:CPU:0", 20_000_000)
        for placer in (dfs_topo, m_topo, single_device):
            check_constraints(indexed, device_set, placer(indexed, device_set).op_devices)
