"""m-SCT: favorite children from the relaxed LP, and devices that wait for them."""

import numpy as np
import pytest

from helpers import UNIT_LINK, chain_graph
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.synthetic import random_dag
from tfplace.placer import place_cost_graph
from tfplace.placer.base import check_constraints
from tfplace.placer.etf import m_etf, m_sct
from tfplace.placer.favorite_child import NO_FAVORITE, favorite_children


def gpus(count=2):
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", 10**9, intra_host=UNIT_LINK)


def fork_with_a_heavy_edge():
    """p (1 s) feeds c_light over 1 byte and then c_heavy over 5 bytes; both children take 10 s."""
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("p", compute_time=1, output_sizes=(1, 5))
    graph.add_op("c_light", compute_time=10)
    graph.add_op("c_heavy", compute_time=10)
    graph.add_dependency("p", "c_light", slots=(0,))
    graph.add_dependency("p", "c_heavy", slots=(1,))
    return index_graph(graph, UNIT_LINK)


def test_the_lp_makes_the_heavy_edge_favorite_and_its_optimum_is_the_relaxed_makespan():
    graph = fork_with_a_heavy_edge()
    lp = favorite_children(graph, UNIT_LINK)
    assert lp.solved
    p, light, heavy = (graph.index[n] for n in ("p", "c_light", "c_heavy"))
    assert lp.favorite[p] == heavy
    assert lp.favorite[light] == lp.favorite[heavy] == NO_FAVORITE
    # the relaxation splits the edges: x_light = 5/6 and x_heavy = 1/6 balance both children's paths
    assert lp.relaxed_makespan == pytest.approx(1 + 10 + 5 / 6)


def test_the_favorite_child_runs_on_its_parents_device_where_m_etf_moves_it_away():
    graph = fork_with_a_heavy_edge()
    etf, sct = m_etf(graph, gpus()), m_sct(graph, gpus())
    p, heavy = graph.index["p"], graph.index["c_heavy"]
    # m-ETF starts c_light (first in Kahn order) beside p, so c_heavy pays 5 s on the other GPU.
    assert etf.op_devices[heavy] != etf.op_devices[p]
    assert etf.estimated_makespan == pytest.approx(1 + 5 + 10)
    # m-SCT keeps p's GPU for c_heavy; c_light moves and pays 1 s.
    assert sct.op_devices[heavy] == sct.op_devices[p]
    assert sct.estimated_makespan == pytest.approx(1 + 1 + 10)
    assert sct.details["favorites_on_parent_device"] == 1


def test_on_a_chain_each_favorite_child_follows_its_parent_on_one_device():
    graph = index_graph(chain_graph([1, 1, 1, 1], [9, 9, 9]), UNIT_LINK)
    output = m_sct(graph, gpus(3))
    lp = favorite_children(graph, UNIT_LINK)
    assert lp.favorite.tolist() == [1, 2, 3, NO_FAVORITE]
    assert len(set(output.op_devices.tolist())) == 1
    assert output.estimated_makespan == pytest.approx(4)


def test_the_lp_gives_each_op_at_most_one_favorite_child_and_each_child_at_most_one_favorite_parent():
    graph = index_graph(
        random_dag(500, seed=11, average_degree=3.0), DeviceSet.parse("GPU:0", "1GB").typical_link
    )
    lp = favorite_children(graph, graph.link)
    assert lp.solved
    children = lp.favorite[lp.favorite != NO_FAVORITE]
    assert len(children) > 0
    assert len(set(children.tolist())) == len(children)
    for parent in np.flatnonzero(lp.favorite != NO_FAVORITE).tolist():
        assert lp.favorite[parent] in graph.succ[parent]


def test_the_lp_of_a_2000_op_random_dag_solves_and_m_sct_reports_its_size():
    devices = DeviceSet.parse("/device:GPU:0-3", "16GB")
    graph = index_graph(random_dag(2000, seed=5, group_fraction=0.2), devices.typical_link)
    output = m_sct(graph, devices)
    check_constraints(graph, devices, output.op_devices)
    lp = output.details["lp"]
    edges = sum(map(len, graph.succ))
    assert lp["status"] == 0
    assert lp["variables"] == edges + len(graph) + 1
    assert lp["constraints"] >= edges
    assert lp["seconds"] > 0
    assert lp["favorite_children"] > 0
    assert "warning" not in output.details


def test_when_the_lp_runs_out_of_time_m_sct_falls_back_to_m_etf_with_a_warning():
    devices = DeviceSet.parse("/device:GPU:0-1", "16GB")
    graph = index_graph(random_dag(2000, seed=6), devices.typical_link)
    output = m_sct(graph, devices, lp_time_limit=0.0)
    assert output.details["lp"]["status"] == 1
    assert "not solved" in output.details["warning"]
    assert output.op_devices.tolist() == m_etf(graph, devices).op_devices.tolist()


def test_place_cost_graph_passes_on_the_warning_that_m_sct_fell_back_to_m_etf():
    devices = DeviceSet.parse("/device:GPU:0-1", "16GB")
    graph = random_dag(2000, seed=6)
    placement = place_cost_graph(graph, devices, "m_sct", simulate=False, lp_time_limit=0.0)
    assert any("not solved" in warning and "m-ETF" in warning for warning in placement.warnings)
