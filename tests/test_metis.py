"""METIS: k-way partition balancing compute, cutting few bytes, co-location groups contracted."""

import numpy as np
import pytest

from helpers import UNIT_LINK, graph_from_edges
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.placer import place_cost_graph
from tfplace.placer.base import check_constraints
from tfplace.placer.metis import contracted_graph, metis


def gpus(count, memory=10**9):
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=UNIT_LINK)


def grid(side, **op_attrs):
    """A side x side grid of 1-second ops, each feeding its right and lower neighbor with 1 byte."""
    edges = []
    for i in range(side):
        for j in range(side):
            if j + 1 < side:
                edges.append((f"n{i}_{j}", f"n{i}_{j + 1}", 1))
            if i + 1 < side:
                edges.append((f"n{i}_{j}", f"n{i + 1}_{j}", 1))
    return graph_from_edges(edges, **op_attrs)


def place(graph, devices, **options):
    indexed = index_graph(graph, devices.typical_link)
    output = metis(indexed, devices, **options)
    check_constraints(indexed, devices, output.op_devices)
    return dict(zip(indexed.names, output.op_devices.tolist())), output


@pytest.mark.parametrize("imbalance", [0.03, 0.1])
def test_compute_is_balanced_within_the_allowed_imbalance_on_a_symmetric_graph(imbalance):
    _, output = place(grid(16), gpus(4), imbalance=imbalance)
    compute = np.array(list(output.details["part_compute"].values()))
    assert len(compute) == 4
    assert compute.max() <= (1 + imbalance) * 256 / 4


def test_the_partition_cuts_the_light_edge_between_two_heavy_clusters():
    left = [(f"l{i}", f"l{j}", 100) for i in range(4) for j in range(i + 1, 4)]
    right = [(f"r{i}", f"r{j}", 100) for i in range(4) for j in range(i + 1, 4)]
    placed, output = place(graph_from_edges([*left, *right, ("l3", "r0", 1)]), gpus(2))
    assert len({placed[f"l{i}"] for i in range(4)}) == 1
    assert len({placed[f"r{i}"] for i in range(4)}) == 1
    assert placed["l0"] != placed["r0"]
    assert output.details["edge_cut_bytes"] == 1


def test_a_colocation_group_spanning_the_graph_lands_on_one_device():
    group = {"n0_0": "g", "n15_15": "g", "n0_15": "g", "n15_0": "g"}
    placed, _ = place(grid(16, colocation_group=group), gpus(4))
    assert len({placed[name] for name in group}) == 1


def test_colocation_groups_are_contracted_to_one_vertex_with_their_edges_united():
    graph = index_graph(
        graph_from_edges([("a", "b", 3), ("b", "c", 4), ("a", "c", 5)], colocation_group={"a": "g", "c": "g"})
    )
    weights, adjacency, edge_weights = contracted_graph(graph)
    assert len(weights) == 2 and weights.sum() == pytest.approx(2000, abs=1)
    assert list(adjacency.adj_starts) == [0, 1, 2]
    assert edge_weights.tolist() == [7, 7]  # a -> b and b -> c; a -> c is inside the group


def test_a_group_that_cannot_run_on_its_parts_device_goes_where_the_ledger_sends_it():
    devices = DeviceSet.parse("/device:CPU:0,/device:GPU:0", 10**9, intra_host=UNIT_LINK)
    kinds = {f"n{i}_{j}": ("GPU",) for i in range(8) for j in range(8)}
    kinds["n0_0"] = ("CPU",)
    placed, _ = place(grid(8, device_kinds=kinds), devices)
    assert placed["n0_0"] == 0
    assert {placed[name] for name in kinds if name != "n0_0"} == {1}


def test_metis_ignores_memory_and_the_ledger_reports_the_overcommit():
    placement = place_cost_graph(
        grid(4, persistent_bytes={f"n{i}_{j}": 40 for i in range(4) for j in range(4)}),
        gpus(2, memory=100),
        placer="metis",
        simulate=False,
    )
    overcommits = [w for w in placement.warnings if "overcommitted" in w]
    assert len(overcommits) == 2
    assert "no placement fits" in placement.warnings[0]  # 640 bytes on 2 x 100


def test_a_nonpositive_imbalance_is_rejected():
    with pytest.raises(ValueError, match="imbalance must be > 0"):
        place(grid(2), gpus(2), imbalance=0)
