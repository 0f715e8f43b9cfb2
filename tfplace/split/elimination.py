"""OptCNN's Algorithm 1: minimize a sum of node and edge costs over configurations by eliminations.

The problem (OptCNN section 5): each node ``v`` of an undirected graph picks a configuration ``c_v``
from its own list; the cost is ``sum_v node[v][c_v] + sum_(u,v) edge[u,v][c_u, c_v]``. Algorithm 1
shrinks the graph without losing the optimum:

* **node elimination**: a node ``j`` with exactly two neighbours ``i`` and ``k`` becomes an edge
  ``(i, k)`` of cost ``min_cj edge[i,j][ci,cj] + node[j][cj] + edge[j,k][cj,ck]`` (keeping the
  argmin);
* **edge elimination**: parallel edges between two nodes become one, their costs summed;
* a node with one neighbour folds into that neighbour's node cost the same way, and a node with none
  takes its cheapest configuration (the same elimination with fewer terms; OptCNN's CNNs end as a
  chain, training graphs have leaves such as the loss).

When no node can be eliminated, the remaining nodes are searched exhaustively if their
configurations' product is at most :data:`EXHAUSTIVE_LIMIT`; otherwise (a documented fallback for
graphs Algorithm 1 cannot reduce) by coordinate descent from each node's cheapest configuration
until no single change helps. Undoing the eliminations in reverse order then gives each eliminated
node its best configuration given its neighbours'.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["EXHAUSTIVE_LIMIT", "Eliminated", "Problem", "solve"]

EXHAUSTIVE_LIMIT = 20_000
"""Most joint configurations of the irreducible remainder searched one by one."""

Node = Hashable


@dataclass
class Problem:
    """Node costs (a vector per node, one entry per configuration) and edge costs (a matrix per
    unordered pair, rows the first node's configurations)."""

    nodes: dict[Node, np.ndarray]
    edges: dict[tuple[Node, Node], np.ndarray] = field(default_factory=dict)

    def add_edge(self, u: Node, v: Node, cost: np.ndarray) -> None:
        """Add ``cost`` (rows ``u``'s configurations) to edge ``(u, v)``: edge elimination."""
        if (v, u) in self.edges:
            u, v, cost = v, u, cost.T
        self.edges[u, v] = self.edges[u, v] + cost if (u, v) in self.edges else cost

    def edge(self, u: Node, v: Node) -> np.ndarray:
        """The cost matrix of ``(u, v)`` with rows ``u``'s configurations."""
        return self.edges[u, v] if (u, v) in self.edges else self.edges[v, u].T

    def total(self, choice: Mapping[Node, int]) -> float:
        return float(
            sum(cost[choice[v]] for v, cost in self.nodes.items())
            + sum(cost[choice[u], choice[v]] for (u, v), cost in self.edges.items())
        )


@dataclass(frozen=True)
class Eliminated:
    """What undoing one elimination needs: the node, its neighbours then, and its best
    configuration for each of their configurations (an array indexed by theirs)."""

    node: Node
    neighbours: tuple[Node, ...]
    best: np.ndarray


def solve(problem: Problem) -> tuple[dict[Node, int], int]:
    """The configuration index of every node minimizing the problem's cost, and how many nodes were
    left after the eliminations (module docstring). Deterministic: nodes are eliminated in the order
    ``problem.nodes`` lists them."""
    nodes = {v: cost.astype(float) for v, cost in problem.nodes.items()}
    work = Problem(nodes, {})
    for (u, v), cost in problem.edges.items():
        work.add_edge(u, v, cost.astype(float))
    neighbours: dict[Node, dict[Node, None]] = {v: {} for v in nodes}
    for u, v in work.edges:
        neighbours[u][v] = None
        neighbours[v][u] = None
    undo: list[Eliminated] = []
    changed = True
    while changed:
        changed = False
        for j in list(nodes):
            if j in nodes and len(neighbours[j]) <= 2:
                undo.append(_eliminate(work, neighbours, j))
                changed = True
    choice = _search_remainder(work, list(nodes))
    left = len(nodes)
    for step in reversed(undo):
        index = tuple(choice[n] for n in step.neighbours)
        choice[step.node] = int(step.best[index])
    return choice, left


def _eliminate(work: Problem, neighbours: dict[Node, dict[Node, None]], j: Node) -> Eliminated:
    """Fold node ``j`` (at most two neighbours) into its neighbours; what undoing it needs."""
    around = tuple(neighbours[j])
    own = work.nodes.pop(j)
    for n in around:
        del neighbours[n][j]
    del neighbours[j]
    if not around:
        return Eliminated(j, (), np.array(int(np.argmin(own))))
    if len(around) == 1:
        (i,) = around
        through = work.edge(i, j) + own[None, :]  # [ci, cj]
        work.edges.pop((i, j), None)
        work.edges.pop((j, i), None)
        work.nodes[i] = work.nodes[i] + through.min(axis=1)
        return Eliminated(j, (i,), through.argmin(axis=1))
    i, k = around
    through = work.edge(i, j)[:, :, None] + own[None, :, None] + work.edge(j, k)[None, :, :]  # [ci, cj, ck]
    for pair in ((i, j), (j, i), (j, k), (k, j)):
        work.edges.pop(pair, None)
    work.add_edge(i, k, through.min(axis=1))
    neighbours[i][k] = None
    neighbours[k][i] = None
    return Eliminated(j, (i, k), through.argmin(axis=1))


def _search_remainder(work: Problem, left: Sequence[Node]) -> dict[Node, int]:
    """The best joint configuration of the nodes no elimination removed (module docstring)."""
    if not left:
        return {}
    sizes = [len(work.nodes[v]) for v in left]
    if int(np.prod(sizes, dtype=float)) <= EXHAUSTIVE_LIMIT:
        best: tuple[float, dict[Node, int]] | None = None
        for combination in itertools.product(*(range(n) for n in sizes)):
            choice = dict(zip(left, combination))
            total = work.total(choice)
            if best is None or total < best[0]:
                best = (total, choice)
        assert best is not None
        return best[1]
    choice = {v: int(np.argmin(work.nodes[v])) for v in left}
    improved = True
    while improved:
        improved = False
        for v in left:
            costs = work.nodes[v].copy()
            for (a, b), cost in work.edges.items():
                if a == v:
                    costs += cost[:, choice[b]]
                elif b == v:
                    costs += cost[choice[a], :]
            best_index = int(np.argmin(costs))
            if costs[best_index] < costs[choice[v]] - 1e-15:
                choice[v], improved = best_index, True
    return choice
