"""Topological orders of a cost graph and the critical-path levels they are built from.

* :func:`kahn_order` is the BFS-like order of Baechi's m-TOPO (a FIFO queue of ready ops).
* :func:`dfs_topo_order` is DFS-TOPO (Celeritas section 4.2.2): ready children go to the head of
  the queue, so an op's descendants follow it closely.
* :func:`cpd_topo_order` is CPD-TOPO (Algorithm 1): DFS-TOPO whose ready queue starts sorted by
  decreasing ``cpath = tlevel + blevel`` (Eq. 2-3) and whose children are pushed on the head in
  increasing ``cpath``, so the child on the critical path comes next.

* :func:`heavy_input_order` keeps together the ops that share a heavy input (the time steps of an
  unrolled recurrent layer, which all read the layer's weights): each op joins the family of the
  producer of its heaviest input, and a ready op of an earlier family goes first; ops of a
  chain hanging off a source (weight reads) come just before their first consumer.

* :func:`leaders_first` delays, within any of them, the gradient ops co-placed with a forward op
  (``graph.follower``) until an op of their group that is no follower came, so that placers which
  give a group the device of its first op in the order let the forward op decide.

All functions take an :class:`~tfplace.core.indexed.IndexedGraph` and return op positions; they raise
:class:`~tfplace.core.costgraph.CostGraphError` naming ops of a cycle when the graph is not acyclic.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from heapq import heapify, heappop, heappush
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraphError
from tfplace.core.indexed import IndexedGraph

__all__ = [
    "average_parallelism",
    "bottom_levels",
    "cpd_topo_order",
    "critical_path_lengths",
    "dfs_topo_order",
    "heavy_input_order",
    "kahn_order",
    "leaders_first",
    "top_levels",
]


def kahn_order(graph: IndexedGraph) -> list[int]:
    """m-TOPO's order: repeatedly emit the op at the head of a FIFO queue of ready ops (computed
    once per graph: placing orders and replays ask for it several times)."""
    cached: tuple[int, ...] | None = graph.__dict__.get(_KAHN_ORDER)
    if cached is None:
        cached = tuple(_kahn_order(graph))
        object.__setattr__(graph, _KAHN_ORDER, cached)  # the graph is frozen; this is a cache, not a field
    return list(cached)


_KAHN_ORDER = "_kahn_order"


def _kahn_order(graph: IndexedGraph) -> list[int]:
    indegree = [len(p) for p in graph.pred]
    succ = graph.succ
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    order: list[int] = []
    while queue:
        u = queue.popleft()
        order.append(u)
        for v in succ[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    _check_complete(graph, order)
    return order


def leaders_first(graph: IndexedGraph, order: Sequence[int]) -> list[int]:
    """``order`` with each follower (and what depends on it) held back until an op of its group
    that is no follower has come; otherwise as close to ``order`` as that allows (the ready op
    earliest in ``order`` first). Should every ready op be held (a group whose leaders depend on
    its followers), the group with the lowest id is let go. A graph without followers keeps ``order``."""
    if not graph.follower.any():
        return list(order)
    position = [0] * len(graph)
    for i, op in enumerate(order):
        position[op] = i
    group: list[int] = graph.group.tolist()
    follower: list[bool] = graph.follower.tolist()
    succ = graph.succ
    open_groups = set(group[op] for op in np.flatnonzero(~graph.follower).tolist())
    waiting = [len(p) for p in graph.pred]
    ready = sorted(position[v] for v in range(len(graph)) if not waiting[v])  # a heap of positions
    held: dict[int, list[int]] = {}
    result: list[int] = []
    while len(result) < len(graph):
        if not ready:
            stalled = min(held)
            open_groups.discard(stalled)
            for v in held.pop(stalled):
                heappush(ready, position[v])
            continue
        v = order[heappop(ready)]
        g = group[v]
        if g in open_groups:
            if follower[v]:
                held.setdefault(g, []).append(v)
                continue
            open_groups.discard(g)
            for w in held.pop(g, ()):
                heappush(ready, position[w])
        result.append(v)
        for w in succ[v]:
            left = waiting[w] = waiting[w] - 1
            if not left:
                heappush(ready, position[w])
    return result


def heavy_input_order(graph: IndexedGraph, order: Sequence[int]) -> list[int]:
    """A topological order that emits the ops of one heavy-input family together, the families in
    the order ``order`` first reaches them, and within a family as close to ``order`` as allowed.

    An op's *family* is that of the producer of its costliest input edge (largest transfer time
    ``c_ij`` of Eq. 1; a source, or an op whose inputs cost nothing, starts its own family): the
    tensor it would cost most to receive from another device. Every time step of an unrolled
    recurrent layer multiplies by the layer's weights, so the layer's time steps (and the ops fed
    by them) form one family, while ``order`` (CPD-TOPO) follows the critical path across the
    layers time step by time step. Fusion along this order (Celeritas Algorithm 1) then yields
    clusters of one layer, whose contiguous runs are the layers of a pipeline. ``order`` is any
    topological order; ties of edge cost go to the first input.
    """
    position = [0] * len(graph)
    for i, op in enumerate(order):
        position[op] = i
    family = list(range(len(graph)))
    for v in order:
        times = graph.pred_time[v]
        if times:
            heaviest = max(range(len(times)), key=times.__getitem__)
            if times[heaviest] > 0:
                family[v] = family[graph.pred[v][heaviest]]
    # a family's rank: where ``order`` first reaches one of its ops fed by another family (a
    # layer's weights, sources, are read early; its first time step runs when its input came)
    rank = [len(graph)] * len(graph)
    for v in order:
        f = family[v]
        if rank[f] == len(graph) and any(family[p] != f for p in graph.pred[v]):
            rank[f] = position[v]
    for v in order:
        f = family[v]
        if rank[f] == len(graph):
            rank[f] = position[v]
    # an op no other op takes as its heaviest input (an input fed to a layer) goes with the
    # earliest family it feeds
    members = Counter(family)
    first = [rank[f] for f in family]
    for v in reversed(order):
        if members[family[v]] == 1 and graph.succ[v]:
            first[v] = min(first[w] for w in graph.succ[v])
    key = [(first[v], position[v], v) for v in range(len(graph))]
    waiting = [len(p) for p in graph.pred]
    ready = [key[v] for v in range(len(graph)) if not waiting[v]]
    heapify(ready)
    result: list[int] = []
    succ = graph.succ
    while ready:
        v = heappop(ready)[2]
        result.append(v)
        for w in succ[v]:
            left = waiting[w] = waiting[w] - 1
            if not left:
                heappush(ready, key[w])
    result = _source_fed_just_in_time(graph, result)
    _check_complete(graph, result)
    return result


def _source_fed_just_in_time(graph: IndexedGraph, order: Sequence[int]) -> list[int]:
    """``order`` with each op of a chain hanging off a source (a source with successors, or an op
    whose single input is such an op: a variable, its read, a constant axis) moved to just before
    its first consumer, its input before it. Being ready from the start, such an op comes out of a
    ready queue whenever nothing else is ready, far from the ops reading it (a layer's weight read
    among an earlier layer's time steps), and a fill that cuts the order would place it there."""
    pred, succ = graph.pred, graph.succ
    source_fed = [False] * len(graph)
    for v in order:
        source_fed[v] = bool(succ[v]) and (not pred[v] or (len(pred[v]) == 1 and source_fed[pred[v][0]]))
    emitted = [False] * len(graph)
    result: list[int] = []
    for v in order:
        if source_fed[v]:
            continue
        stack = [v]
        while stack:  # depth first through v's unemitted source-fed inputs, each after its inputs
            u = stack[-1]
            waiting = [p for p in pred[u] if not emitted[p]]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            if not emitted[u]:
                emitted[u] = True
                result.append(u)
    return result


def top_levels(graph: IndexedGraph, order: Sequence[int] | None = None) -> np.ndarray:
    """``tlevel`` of Eq. 2: the longest path from a source to each op, excluding the op itself.

    ``pred(v_i)`` are the ops with an edge to ``v_i``; a control dependency adds no transfer time.
    ``order`` is any topological order (default: :func:`kahn_order`).
    """
    order = kahn_order(graph) if order is None else order
    compute, pred, pred_time = graph.compute.tolist(), graph.pred, graph.pred_time
    tlevel = [0.0] * len(graph)
    finish = [0.0] * len(graph)  # tlevel + compute
    for v in order:
        best = 0.0
        for u, c in zip(pred[v], pred_time[v]):
            arrival = finish[u] + c
            if arrival > best:
                best = arrival
        tlevel[v] = best
        finish[v] = best + compute[v]
    return np.asarray(tlevel)


def bottom_levels(graph: IndexedGraph, order: Sequence[int] | None = None) -> np.ndarray:
    """``blevel`` of Eq. 3: the longest path from each op to a sink, including the op itself."""
    order = kahn_order(graph) if order is None else order
    compute, succ, succ_time = graph.compute.tolist(), graph.succ, graph.succ_time
    blevel = [0.0] * len(graph)
    for u in reversed(order):
        best = 0.0
        for v, c in zip(succ[u], succ_time[u]):
            candidate = blevel[v] + c
            if candidate > best:
                best = candidate
        blevel[u] = best + compute[u]
    return np.asarray(blevel)


def average_parallelism(graph: IndexedGraph) -> float:
    """Total compute over the longest path's compute, transfers free: how many devices the ops
    could keep busy on average (``1`` for a chain; ``0`` for a graph without compute)."""
    compute = graph.compute.tolist()
    pred = graph.pred
    finish = [0.0] * len(graph)
    for v in kahn_order(graph):
        ready = 0.0
        for p in pred[v]:
            if finish[p] > ready:
                ready = finish[p]
        finish[v] = ready + compute[v]
    longest = max(finish, default=0.0)
    return float(graph.compute.sum()) / longest if longest > 0 else 0.0


def critical_path_lengths(graph: IndexedGraph) -> np.ndarray:
    """``cpath = tlevel + blevel`` (section 5.1.3): the longest path through each op."""
    order = kahn_order(graph)
    return top_levels(graph, order) + bottom_levels(graph, order)


def dfs_topo_order(graph: IndexedGraph) -> list[int]:
    """DFS-TOPO (section 4.2.2): the queue starts with the sources in graph order; an emitted op's
    children that became ready go to the head of the queue, the first in graph order at the head."""
    return _head_insertion_order(graph, initial=range(len(graph)), child_key=lambda v: -v)


def cpd_topo_order(graph: IndexedGraph, cpath: np.ndarray | None = None) -> list[int]:
    """CPD-TOPO, function ``CPD_Topo`` of Algorithm 1.

    The queue ``Q`` starts with the sources sorted by decreasing ``cpath`` (lines 10-11); the op at
    its head is emitted, its children are sorted by increasing ``cpath`` and each that became ready
    is pushed on the head in turn (lines 17-22), so the ready child with the largest ``cpath``, the
    one on the critical path, is emitted next. Ties on ``cpath`` go to the op first in graph order.
    """
    cpath = critical_path_lengths(graph) if cpath is None else cpath
    value = cpath.tolist()
    sources = sorted((i for i in range(len(graph)) if not graph.pred[i]), key=lambda i: -value[i])
    return _head_insertion_order(graph, initial=sources, child_key=lambda v: (value[v], -v))


def _head_insertion_order(
    graph: IndexedGraph, initial: Sequence[int] | range, child_key: Callable[[int], Any]
) -> list[int]:
    """Emit the head of a ready queue; push its newly ready children on the head in increasing
    ``child_key`` order, so the largest key is emitted next."""
    indegree = [len(p) for p in graph.pred]
    succ = graph.succ
    queue = deque(i for i in initial if indegree[i] == 0)
    order: list[int] = []
    while queue:
        u = queue.popleft()
        order.append(u)
        ready = []
        for v in succ[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
        if len(ready) > 1:
            ready.sort(key=child_key)
        queue.extendleft(ready)
    _check_complete(graph, order)
    return order


def _check_complete(graph: IndexedGraph, order: list[int]) -> None:
    if len(order) == len(graph):
        return
    emitted = set(order)
    stuck = [i for i in range(len(graph)) if i not in emitted]
    cycle = _cycle_among(graph, set(stuck))
    raise CostGraphError(
        f"the graph has a cycle ({len(stuck)} ops cannot be ordered), through: "
        + " -> ".join(graph.names[i] for i in cycle[:12])
        + (" -> ..." if len(cycle) > 12 else "")
    )


def _cycle_among(graph: IndexedGraph, stuck: set[int]) -> list[int]:
    """Walk predecessors inside the unorderable ops until one repeats: that walk closes a cycle."""
    start = min(stuck)
    seen: dict[int, int] = {}
    walk: list[int] = []
    u = start
    while u not in seen:
        seen[u] = len(walk)
        walk.append(u)
        u = next(p for p in graph.pred[u] if p in stuck)
    cycle = walk[seen[u] :]
    cycle.reverse()
    return [*cycle, cycle[0]]
