"""Optimal Operation Fusion: Eq. 4-6 breakpoints, the coarse graph, Lemma 2."""

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import UNIT_LINK, chain_graph, graph_from_edges
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import cpd_topo_order, dfs_topo_order, kahn_order
from tfplace.core.synthetic import random_dag
from tfplace.placer.celeritas import celeritas
from tfplace.placer.fusion import coarsen, fuse, optimal_breakpoints


def crossing_cost(graph, order, breakpoints):
    """Total c_km over edges whose ends fall in different clusters."""
    cluster = {}
    for c, (a, b) in enumerate(itertools.pairwise(breakpoints)):
        for op in order[a:b]:
            cluster[op] = c
    return sum(
        t
        for u in range(len(graph))
        for v, t in zip(graph.succ[u], graph.succ_time[u])
        if cluster[u] != cluster[v]
    )


def brute_force_best(graph, order, R, M):
    n = len(order)
    memory = graph.memory[order]
    best = math.inf
    for cuts in itertools.product([False, True], repeat=n - 1):
        points = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [n]
        if all(b - a <= R and (b - a == 1 or memory[a:b].sum() <= M) for a, b in itertools.pairwise(points)):
            best = min(best, crossing_cost(graph, order, points))
    return best


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 11), st.integers(0, 1000), st.integers(1, 5), st.sampled_from([math.inf, 3e6, 1e6]))
def test_breakpoints_minimize_the_crossing_communication(size, seed, R, M):
    graph = index_graph(random_dag(size, seed=seed, locality=5))
    order = cpd_topo_order(graph)
    points = optimal_breakpoints(graph, order, R, M)
    assert crossing_cost(graph, order, points) == pytest.approx(
        brute_force_best(graph, order, R, M), abs=1e-9
    )


def test_a_chain_is_cut_at_its_cheapest_edges():
    graph = index_graph(chain_graph([1] * 6, [5, 5, 1, 5, 5]))
    assert optimal_breakpoints(graph, list(range(6)), exploration_range=3) == [0, 3, 6]


def test_clusters_respect_the_exploration_range():
    graph = index_graph(chain_graph([1] * 10, [1] * 9))
    points = optimal_breakpoints(graph, list(range(10)), exploration_range=4)
    assert all(b - a <= 4 for a, b in itertools.pairwise(points))
    assert len(points) - 1 == 3


def test_clusters_respect_the_memory_cap_but_a_heavy_op_stands_alone():
    graph = index_graph(chain_graph([1] * 5, [9, 9, 9, 9], memory=[4, 4, 100, 4, 4]))
    points = optimal_breakpoints(graph, list(range(5)), memory_cap=9 + 9 + 8)
    clusters = [list(range(a, b)) for a, b in itertools.pairwise(points)]
    assert [2] in clusters
    for cluster in clusters:
        assert len(cluster) == 1 or graph.memory[cluster].sum() <= 26


def test_the_coarse_graph_sums_costs_and_merges_crossing_edges():
    # a -> b carries slot 0 to two ops c, d of the next cluster: sent once
    graph = graph_from_edges([("a", "b", 0), ("b", "c", 10), ("b", "d", 10), ("c", "e", 0), ("d", "e", 0)])
    indexed = index_graph(graph)
    order = [indexed.index[n] for n in "abcde"]
    fusion = coarsen(indexed, order, [0, 2, 5])
    coarse = fusion.coarse
    assert coarse.nodes["cluster0"]["compute_time"] == 2.0
    assert coarse.nodes["cluster0"]["members"] == ("a", "b")
    edge = coarse.edges["cluster0", "cluster1"]
    assert (edge["bytes"], edge["transfers"], edge["transfer_time"]) == (10, 1, UNIT_LINK.time(10))
    assert list(fusion.cluster_of[order]) == [0, 0, 1, 1, 1]


def test_control_edges_between_clusters_are_kept_with_zero_bytes():
    graph = graph_from_edges([("a", "b", 0)])
    indexed = index_graph(graph)
    coarse = coarsen(indexed, [0, 1], [0, 1, 2]).coarse
    assert coarse.edges["cluster0", "cluster1"]["control"] is True
    assert coarse.edges["cluster0", "cluster1"]["bytes"] == 0


def random_topological_order(graph, rng):
    """Kahn's algorithm taking a random ready op each time: any topological order can come out."""
    indegree = [len(p) for p in graph.pred]
    ready = [op for op in range(len(graph)) if not indegree[op]]
    order = []
    while ready:
        op = ready.pop(int(rng.integers(len(ready))))
        order.append(op)
        for child in graph.succ[op]:
            indegree[child] -= 1
            if not indegree[child]:
                ready.append(child)
    return order


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 400),
    st.integers(0, 100_000),
    st.floats(0.5, 4.0),
    st.integers(2, 80),
    st.sampled_from(["cpd_topo", "dfs_topo", "kahn", "random"]),
    st.sampled_from([1, 2, 7, 40, 200]),
    st.sampled_from([1e4, 1e6, 1e7, math.inf]),
)
def test_fusion_never_creates_a_cycle(size, seed, degree, locality, order_name, R, M):
    # Lemma 2: clusters are runs of a topological order, so every coarse edge goes forward.
    graph = index_graph(
        random_dag(size, seed=seed, average_degree=degree, locality=locality, group_fraction=0.2)
    )
    orders = {
        "cpd_topo": cpd_topo_order,
        "dfs_topo": dfs_topo_order,
        "kahn": kahn_order,
        "random": lambda g: random_topological_order(g, np.random.default_rng(seed)),
    }
    fusion = fuse(graph, orders[order_name](graph), R, M)
    assert nx.is_directed_acyclic_graph(fusion.coarse)
    assert sorted(op for members in fusion.members for op in members) == list(range(size))
    cluster = fusion.cluster_of
    crossing = {
        (cluster[u], cluster[v]) for u in range(size) for v in graph.succ[u] if cluster[u] != cluster[v]
    }
    coarse_edges = {(int(a[len("cluster") :]), int(b[len("cluster") :])) for a, b in fusion.coarse.edges}
    assert coarse_edges == crossing
    assert all(a < b for a, b in coarse_edges)


def test_merging_ops_that_are_not_adjacent_in_a_topological_order_creates_a_cycle():
    # Figure 4: merging m and n around y (m -> y -> n, m -> n) gives the cycle X -> y -> X, which
    # the property above would catch if fusion ever cut anything but a topological order.
    graph = index_graph(graph_from_edges([("m", "y", 1), ("y", "n", 1), ("m", "n", 1)]))
    m, y, n = (graph.index[name] for name in "myn")
    fusion = coarsen(graph, [m, n, y], [0, 2, 3])
    assert not nx.is_directed_acyclic_graph(fusion.coarse)


def test_celeritas_fuses_with_r_200_and_a_quarter_of_the_smallest_device_by_default():
    # A chain of 1000 ops of 1 MB and a 1-byte output each, all edges equal: the fewest clusters
    # win, as long as R and M allow.
    graph = index_graph(chain_graph([1] * 1000, [1] * 999, memory=[10**6] * 1000))
    roomy = DeviceSet.parse("/device:GPU:0-1", [10**12, 10**12])
    assert celeritas(graph, roomy).details["clusters"] == 5  # 200 ops per cluster (R)
    tight = DeviceSet.parse("/device:GPU:0-1", [4 * 10**12, 4 * 100 * (10**6 + 1)])
    assert celeritas(graph, tight).details["clusters"] == 10  # 100 ops per cluster (M)
