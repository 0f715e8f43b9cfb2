"""Topological orders: m-TOPO's Kahn order, DFS-TOPO and CPD-TOPO (Algorithm 1), Eq. 2-3."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import graph_from_edges
from tfplace.core.costgraph import CostGraph, CostGraphError
from tfplace.core.indexed import index_graph
from tfplace.core.orders import (
    bottom_levels,
    cpd_topo_order,
    dfs_topo_order,
    kahn_order,
    leaders_first,
    top_levels,
)
from tfplace.core.synthetic import random_dag

# Figure 3's shape: two sources, each the head of its own chain.
TWO_CHAINS = [("a", "a1", 1), ("a1", "a2", 1), ("b", "b1", 1), ("b1", "b2", 1)]


def names(graph, order):
    return [graph.names[i] for i in order]


def test_kahn_order_is_breadth_first():
    graph = index_graph(graph_from_edges(TWO_CHAINS))
    assert names(graph, kahn_order(graph)) == ["a", "b", "a1", "b1", "a2", "b2"]


def test_dfs_topo_follows_each_chain_to_its_end():
    graph = index_graph(graph_from_edges(TWO_CHAINS))
    assert names(graph, dfs_topo_order(graph)) == ["a", "a1", "a2", "b", "b1", "b2"]


def test_levels_follow_equations_2_and_3():
    # s -> x (edge 5), s -> y (edge 1), x -> t (edge 1), y -> t (edge 2); compute s=1, x=2, y=4, t=1
    graph = index_graph(
        graph_from_edges(
            [("s", "x", 5), ("s", "y", 1), ("x", "t", 1), ("y", "t", 2)], {"s": 1, "x": 2, "y": 4, "t": 1}
        )
    )
    tlevel = dict(zip(graph.names, top_levels(graph)))
    blevel = dict(zip(graph.names, bottom_levels(graph)))
    assert tlevel == {"s": 0, "x": 6, "y": 2, "t": 9}  # t: max(6 + 2 + 1, 2 + 4 + 2)
    assert blevel == {"t": 1, "x": 4, "y": 7, "s": 10}  # s: max(4 + 5, 7 + 1) + 1


def test_cpd_topo_starts_with_the_source_on_the_critical_path_and_follows_it():
    # short source q feeds a light path; source p heads the critical path p -> c -> d
    graph = index_graph(
        graph_from_edges(
            [("q", "light", 1), ("p", "c", 1), ("c", "d", 1), ("p", "side", 1)],
            {"q": 1, "light": 1, "p": 1, "c": 10, "d": 10, "side": 1},
        )
    )
    assert names(graph, cpd_topo_order(graph)) == ["p", "c", "d", "side", "q", "light"]


def test_cpd_topo_pushes_children_by_increasing_cpath_so_the_largest_comes_next():
    graph = index_graph(
        graph_from_edges(
            [("r", "small", 1), ("r", "big", 1), ("r", "mid", 1)], {"r": 1, "small": 1, "big": 9, "mid": 5}
        )
    )
    assert names(graph, cpd_topo_order(graph)) == ["r", "big", "mid", "small"]


def test_cpd_topo_breaks_cpath_ties_in_graph_order():
    graph = index_graph(graph_from_edges([("r", "a", 1), ("r", "b", 1), ("r", "c", 1)]))
    assert names(graph, cpd_topo_order(graph)) == ["r", "a", "b", "c"]


def test_dfs_topo_emits_ready_children_in_graph_order_before_older_ready_ops():
    graph = index_graph(graph_from_edges([("r", "a", 1), ("r", "b", 1), ("s", "t", 1), ("a", "a1", 1)]))
    assert names(graph, dfs_topo_order(graph)) == ["r", "a", "a1", "b", "s", "t"]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 120), st.integers(0, 10_000))
def test_every_order_is_topological_and_complete(size, seed):
    graph = index_graph(random_dag(size, seed=seed))
    for order in (kahn_order(graph), dfs_topo_order(graph), cpd_topo_order(graph)):
        assert sorted(order) == list(range(size))
        position = {op: i for i, op in enumerate(order)}
        assert all(position[u] < position[v] for u in range(size) for v in graph.succ[u])


def test_ordering_a_cyclic_graph_names_the_ops_on_the_cycle():
    graph = CostGraph()
    for name in ("start", "x", "y", "z"):
        graph.add_op(name)
    for src, dst in [("start", "x"), ("x", "y"), ("y", "z"), ("z", "x")]:
        graph.add_dependency(src, dst, control=True)
    with pytest.raises(CostGraphError, match="cycle") as error:
        cpd_topo_order(index_graph(graph))
    assert all(op in str(error.value) for op in ("x", "y", "z"))
    assert "start ->" not in str(error.value)


def test_leaders_first_holds_a_co_placed_gradient_op_until_its_forward_op_came():
    graph = CostGraph(name="gradient_constant")
    graph.add_op("gradients/f_grad/Shape", compute_time=1e-6, gradient_of="f")
    graph.add_op("x", compute_time=1e-3)
    graph.add_op("f", compute_time=1e-3)
    graph.add_op("gradients/f_grad/Mul", compute_time=1e-3, gradient_of="f")
    for src, dst in [
        ("x", "f"),
        ("f", "gradients/f_grad/Mul"),
        ("gradients/f_grad/Shape", "gradients/f_grad/Mul"),
    ]:
        graph.add_dependency(src, dst)
    indexed = index_graph(graph, coplace_gradients=True)
    order = kahn_order(indexed)
    assert indexed.names[order[0]] == "gradients/f_grad/Shape"
    assert [indexed.names[v] for v in leaders_first(indexed, order)] == [
        "x",
        "f",
        "gradients/f_grad/Shape",
        "gradients/f_grad/Mul",
    ]
    assert leaders_first(index_graph(graph), order) == order  # without co-placement nothing follows
