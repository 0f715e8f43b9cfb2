"""Optimal Operation Fusion (Celeritas section 5.1.3, Algorithm 1).

Ops are laid out in a topological order (CPD-TOPO); breakpoints cut that sequence into clusters of
adjacent ops. The breakpoints minimize the total communication cost crossing cluster boundaries by
dynamic programming (Eq. 4-6), with each cluster at most ``R`` ops long and ``M`` bytes heavy.
Because every cluster is a contiguous run of a topological order, the coarse graph of clusters is
acyclic (Lemma 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, pairwise

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.core.indexed import IndexedGraph

__all__ = ["Fusion", "coarsen", "fuse", "optimal_breakpoints"]


def optimal_breakpoints(
    graph: IndexedGraph,
    order: Sequence[int],
    exploration_range: int = 200,
    memory_cap: float = math.inf,
) -> list[int]:
    """Function ``Optimal_BP`` of Algorithm 1: breakpoints minimizing the crossing communication.

    Position ``j`` of ``order`` is a breakpoint when a cluster starts there. With ``S(0) = 0``,

    * ``cost(i, j)`` (Eq. 4) sums ``c_km`` over edges from the cluster ``[i, j)`` to positions ``>= j``;
    * it grows incrementally (Eq. 5): ``cost(i, j + 1) = cost(i, j) + out(j) - in(j from [i, j))``;
    * ``S(j) = min_i S(i) + cost(i, j)`` over ``j - R <= i < j`` whose ops weigh at most ``M`` (Eq. 6);
      a single op heavier than ``M`` still forms a cluster of its own.

    Returns the sorted breakpoints, starting with ``0`` and ending with ``len(order)``. Ties prefer
    the longer cluster.

    Notes
    -----
    In a topological order every edge out of ``[i, j)`` either stays inside or crosses to a position
    ``>= j``, so ``cost(i, j) = O(j) - O(i) - Int(i, j)``: ``O(j)`` sums the costs of all edges out
    of the first ``j`` positions and ``Int(i, j)`` those of the edges inside ``[i, j)``. Hence
    ``S(j) - O(j) = min_i (S(i) - O(i) - Int(i, j))``: one array holds ``S(i) - O(i) - Int(i, j)``
    for the window of ``i``, and Eq. 5's step from ``j - 1`` to ``j`` subtracts each edge
    ``c_{s, j-1}`` from the entries ``i <= s`` (one slice per edge within reach ``R``). Each
    position then costs one ``argmin`` over at most ``R`` values: ``O(n R)`` in vectorized steps
    plus ``O(E)``.
    """
    if exploration_range < 1:
        raise ValueError(f"exploration range R must be >= 1, got {exploration_range}")
    n = len(order)
    ops = np.asarray(order, dtype=np.int64)
    weight = np.concatenate(([0], np.cumsum(graph.memory[ops])))
    ends = np.arange(n + 1)
    # first i of the window of each j: within R (Eq. 6), and [i, j) within M unless i = j - 1
    first = np.minimum(
        np.maximum(ends - exploration_range, np.searchsorted(weight, weight - memory_cap)), ends - 1
    ).tolist()
    consumer, producer, cost = _edges_within_reach(graph, ops, exploration_range)
    window = np.zeros(n + 1)  # S(i) - O(i) - Int(i, j) for the current j
    parent = [0] * (n + 1)
    edge = 0
    for j in range(1, n + 1):
        low = max(0, j - exploration_range)
        while edge < len(consumer) and consumer[edge] == j - 1:
            window[low : producer[edge] + 1] -= cost[edge]
            edge += 1
        start = first[j]
        choice = start + int(window[start:j].argmin())
        window[j] = window[choice]
        parent[j] = choice
    breakpoints = [n]
    while breakpoints[-1] > 0:
        breakpoints.append(parent[breakpoints[-1]])
    breakpoints.reverse()
    return breakpoints


def _edges_within_reach(
    graph: IndexedGraph, ops: np.ndarray, reach: int
) -> tuple[list[int], list[int], list[float]]:
    """Positions (consumer, producer) and cost of the edges with ``c > 0`` that can fall inside one
    cluster (``consumer - producer < reach``), sorted by consumer, producers in graph order."""
    n = len(ops)
    position = np.empty(n, dtype=np.int64)
    position[ops] = np.arange(n)
    preds = [graph.pred[op] for op in ops.tolist()]
    indegree = np.fromiter(map(len, preds), dtype=np.int64, count=n)
    total = int(indegree.sum())
    consumer = np.repeat(np.arange(n), indegree)
    producer = position[np.fromiter(chain.from_iterable(preds), dtype=np.int64, count=total)]
    times = (graph.pred_time[op] for op in ops.tolist())
    cost = np.fromiter(chain.from_iterable(times), dtype=float, count=total)
    keep = (cost > 0) & (consumer - producer < reach)
    return consumer[keep].tolist(), producer[keep].tolist(), cost[keep].tolist()


@dataclass(frozen=True)
class Fusion:
    """The coarse graph of Optimal Operation Fusion and how it maps back to ops.

    ``coarse`` is a :class:`CostGraph` with one node per cluster (``cluster0``, ...) carrying the
    schema's attributes (compute and persistent memory summed, outputs summed into one slot, the
    largest temporary memory) plus ``members``, the op names; its edges merge the crossing edges
    (each tensor counted once per destination cluster, ``transfers`` of them).
    ``members[c]`` lists the op positions of cluster ``c``; ``cluster_of[op]`` is the op's cluster.
    """

    coarse: CostGraph
    members: list[list[int]]
    cluster_of: np.ndarray
    breakpoints: list[int]


def coarsen(graph: IndexedGraph, order: Sequence[int], breakpoints: Sequence[int]) -> Fusion:
    """Merge the ops between adjacent breakpoints into clusters and build the coarse graph."""
    members = [list(order[a:b]) for a, b in pairwise(breakpoints)]
    ops = np.asarray(order, dtype=np.int64)
    starts = np.asarray(breakpoints[:-1], dtype=np.int64)
    cluster_of = np.empty(len(graph), dtype=np.int64)
    cluster_of[ops] = np.repeat(np.arange(len(members)), np.diff(breakpoints))
    compute = np.add.reduceat(graph.compute[ops], starts).tolist()
    persistent = np.add.reduceat(graph.persistent[ops], starts).tolist()
    outputs = np.add.reduceat(graph.outputs[ops], starts).tolist()
    temporary = np.maximum.reduceat(graph.temporary[ops], starts).tolist()
    coarse = CostGraph(name="coarse", transfer_model=graph.link.to_dict())
    names = [f"cluster{c}" for c in range(len(members))]
    for c, name in enumerate(names):
        coarse.add_op(
            name,
            compute_time=compute[c],
            persistent_bytes=persistent[c],
            output_sizes=(outputs[c],),
            temporary_bytes=temporary[c],
            op_type="Cluster",
        )
        coarse.nodes[name]["members"] = tuple(graph.names[op] for op in members[c])
    link = graph.link
    for (cu, cv), (nbytes, transfers) in _crossing_edges(graph, cluster_of).items():
        coarse.add_edge(
            names[cu],
            names[cv],
            bytes=nbytes,
            slots=(),
            transfers=transfers,
            control=nbytes == 0,
            transfer_time=link.k * nbytes + link.b * transfers if nbytes else 0.0,
        )
    return Fusion(coarse=coarse, members=members, cluster_of=cluster_of, breakpoints=list(breakpoints))


def _crossing_edges(graph: IndexedGraph, cluster_of: np.ndarray) -> dict[tuple[int, int], list[int]]:
    """``(source, destination)`` cluster -> ``[bytes, transfers]`` of the edges between them.

    A tensor (an op's output slot) that several ops of one cluster consume crosses once; an edge
    without slots is a tensor of its own; a control edge adds a pair with no bytes.
    """
    outdegree = np.fromiter(map(len, graph.succ), dtype=np.int64, count=len(graph))
    src = np.repeat(np.arange(len(graph)), outdegree)
    dst = np.fromiter(chain.from_iterable(graph.succ), dtype=np.int64, count=len(src))
    source, destination = cluster_of[src], cluster_of[dst]
    crossing = np.flatnonzero(source != destination)
    edge_bytes = list(chain.from_iterable(graph.succ_bytes))
    edge_slots = list(chain.from_iterable(graph.succ_slots))
    totals: dict[tuple[int, int], list[int]] = {}
    sent: set[tuple[int, int, int]] = set()
    for e, u, cu, cv in zip(
        crossing.tolist(), src[crossing].tolist(), source[crossing].tolist(), destination[crossing].tolist()
    ):
        pair = totals.setdefault((cu, cv), [0, 0])
        if edge_slots[e]:
            sizes = graph.output_sizes[u]
            for slot in edge_slots[e]:
                if (u, slot, cv) not in sent:
                    sent.add((u, slot, cv))
                    pair[0] += sizes[slot] if slot < len(sizes) else 0
                    pair[1] += 1
        elif edge_bytes[e]:
            pair[0] += edge_bytes[e]
            pair[1] += 1
    return totals


def fuse(
    graph: IndexedGraph,
    order: Sequence[int],
    exploration_range: int = 200,
    memory_cap: float = math.inf,
) -> Fusion:
    """Optimal Operation Fusion (Algorithm 1): breakpoints on ``order``, then the coarse graph."""
    return coarsen(graph, order, optimal_breakpoints(graph, order, exploration_range, memory_cap))
