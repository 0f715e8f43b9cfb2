"""Favorite children for m-SCT: the relaxed linear program of Hanen and Munier's SCT, as Baechi uses it.

For every edge ``(i, j)`` a variable ``x_ij`` in ``[0, 1]`` says whether ``j`` is *not* ``i``'s
favorite child (``0``: favorite, so ``j`` runs right after ``i`` on ``i``'s device and the edge costs
nothing). With start times ``s_i >= 0``, compute times ``p_i``, edge transfer times ``c_ij`` and the
makespan ``w`` (BASELINES.md, "m-SCT")::

    minimize   w
    subject to s_i + p_i + c_ij * x_ij <= s_j     for every edge (i, j)
               sum_j x_ij >= outdegree(i) - 1      at most one favorite child per op
               sum_i x_ij >= indegree(j) - 1       an op is the favorite of at most one parent
               s_i + p_i <= w                      for every op (only sinks need a row)

The matrix is built sparse and solved by HiGHS (:func:`scipy.optimize.linprog`). ``x_ij`` below
one half rounds to "favorite"; rounding alone already respects both "at most one" rows (two values
below one half cannot satisfy them), but values within solver tolerance of one half can, so ties are
resolved greedily, smallest ``x`` first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse
from scipy.optimize import linprog

from tfplace.core.indexed import IndexedGraph
from tfplace.core.transfer import TransferModel

__all__ = ["NO_FAVORITE", "FavoriteChildren", "favorite_children"]

#: Favorite child of an op that has none.
NO_FAVORITE = -1


@dataclass(frozen=True)
class FavoriteChildren:
    """The rounded LP solution and facts about the LP for reports.

    Attributes
    ----------
    favorite : numpy.ndarray
        Favorite child of each op, :data:`NO_FAVORITE` where it has none (all of them when the LP
        was not solved).
    status : int
        :func:`scipy.optimize.linprog` status: 0 solved, 1 iteration or time limit, 2 infeasible,
        3 unbounded, 4 numerical difficulties.
    message : str
        The solver's message.
    seconds : float
        Seconds spent building and solving the LP.
    variables, constraints, nonzeros : int
        Size of the LP.
    relaxed_makespan : float or None
        The LP's optimal ``w`` in seconds, when solved: the makespan on unlimited devices when every
        edge but the favorite ones pays its transfer (not a bound on a schedule that keeps several
        children on their parent's device).
    """

    favorite: np.ndarray
    status: int
    message: str
    seconds: float
    variables: int
    constraints: int
    nonzeros: int
    relaxed_makespan: float | None

    @property
    def solved(self) -> bool:
        return self.status == 0

    def report(self) -> dict[str, object]:
        """The LP facts as a plain dict (PlacerOutput details)."""
        return {
            "variables": self.variables,
            "constraints": self.constraints,
            "nonzeros": self.nonzeros,
            "status": self.status,
            "message": self.message,
            "seconds": self.seconds,
            "relaxed_makespan": self.relaxed_makespan,
            "favorite_children": int((self.favorite != NO_FAVORITE).sum()),
        }


def favorite_children(
    graph: IndexedGraph, link: TransferModel, *, time_limit: float = 60.0, threshold: float = 0.5
) -> FavoriteChildren:
    """Solve the relaxed SCT program on ``graph`` and round it to favorite children.

    Parameters
    ----------
    graph : IndexedGraph
        The ops; ``p_i`` is ``graph.compute`` and ``c_ij`` each edge's time on ``link``.
    link : TransferModel
        The link every edge is assumed to cross (the device set's typical link).
    time_limit : float
        Seconds HiGHS may run; past it the result is unsolved (``status`` 1, no favorites).
    threshold : float
        ``x_ij`` below it makes ``j`` the favorite child of ``i``.

    Returns
    -------
    FavoriteChildren
    """
    started = time.perf_counter()
    n = len(graph)
    outdegree = np.fromiter((len(s) for s in graph.succ), dtype=np.int64, count=n)
    indegree = np.fromiter((len(p) for p in graph.pred), dtype=np.int64, count=n)
    src = np.repeat(np.arange(n), outdegree)
    dst = np.fromiter((v for s in graph.succ for v in s), dtype=np.int64, count=len(src))
    cost = np.fromiter(
        (graph.edge_time(u, k, link) for u in range(n) for k in range(len(graph.succ[u]))),
        dtype=float,
        count=len(src),
    )
    favorite = np.full(n, NO_FAVORITE, dtype=np.int64)
    if len(src) == 0:
        return FavoriteChildren(favorite, 0, "no edges", time.perf_counter() - started, 0, 0, 0, None)
    compute = graph.compute
    unit = _time_unit(compute, cost)
    matrix, bound = _constraints(src, dst, cost / unit, compute / unit, outdegree, indegree)
    edges = len(src)
    objective = np.zeros(edges + n + 1)
    objective[-1] = 1.0
    bounds = np.zeros((edges + n + 1, 2))
    bounds[:edges, 1] = 1.0
    bounds[edges:, 1] = np.inf
    result = linprog(
        objective,
        A_ub=matrix,
        b_ub=bound,
        bounds=bounds,
        method="highs",
        options={"time_limit": float(time_limit)},
    )
    relaxed = None
    if result.status == 0:
        relaxed = float(result.x[-1] * unit)
        favorite = _round(result.x[:edges], src, dst, cost, n, threshold)
    return FavoriteChildren(
        favorite=favorite,
        status=int(result.status),
        message=str(result.message),
        seconds=time.perf_counter() - started,
        variables=edges + n + 1,
        constraints=matrix.shape[0],
        nonzeros=int(matrix.nnz),
        relaxed_makespan=relaxed,
    )


def _time_unit(compute: np.ndarray, cost: np.ndarray) -> float:
    """Mean of the positive times: the LP is solved in that unit, so that HiGHS's absolute
    tolerances (about 1e-7) are small against every time, whether microseconds or hours."""
    times = np.concatenate([compute, cost])
    positive = times[times > 0]
    return float(positive.mean()) if positive.size else 1.0


def _constraints(
    src: np.ndarray,
    dst: np.ndarray,
    cost: np.ndarray,
    compute: np.ndarray,
    outdegree: np.ndarray,
    indegree: np.ndarray,
) -> tuple[scipy.sparse.csr_array, np.ndarray]:
    """``A_ub`` and ``b_ub`` of the program; variables are ``x`` (one per edge), ``s`` (one per op), ``w``."""
    edges, n = len(src), len(compute)
    x = np.arange(edges)
    s = edges + np.arange(n)
    w = edges + n
    rows, cols, values, bound = [], [], [], []
    # s_i - s_j + c_ij x_ij <= -p_i
    e = np.arange(edges)
    rows += [e, e, e]
    cols += [s[src], s[dst], x]
    values += [np.ones(edges), -np.ones(edges), cost]
    bound.append(-compute[src])
    row = edges
    # -sum_j x_ij <= 1 - outdegree(i), for ops with two or more children (and likewise parents)
    for ends, degree in ((src, outdegree), (dst, indegree)):
        busy = np.flatnonzero(degree >= 2)
        row_of = np.full(n, -1)
        row_of[busy] = row + np.arange(len(busy))
        mask = row_of[ends] >= 0
        rows.append(row_of[ends][mask])
        cols.append(x[mask])
        values.append(-np.ones(int(mask.sum())))
        bound.append(1.0 - degree[busy])
        row += len(busy)
    # s_i - w <= -p_i for sinks
    sinks = np.flatnonzero(outdegree == 0)
    sink_rows = row + np.arange(len(sinks))
    rows += [sink_rows, sink_rows]
    cols += [s[sinks], np.full(len(sinks), w)]
    values += [np.ones(len(sinks)), -np.ones(len(sinks))]
    bound.append(-compute[sinks])
    row += len(sinks)
    matrix = scipy.sparse.csr_array(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(row, w + 1)
    )
    return matrix, np.concatenate(bound)


def _round(
    x: np.ndarray, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, n: int, threshold: float
) -> np.ndarray:
    """Favorite child per op from ``x < threshold``; conflicts go to the smallest ``x``, then the
    costliest edge, so that each op has at most one favorite child and one favorite parent."""
    favorite = np.full(n, NO_FAVORITE, dtype=np.int64)
    has_parent = np.zeros(n, dtype=bool)
    chosen = np.flatnonzero(x < threshold)
    for e in chosen[np.lexsort((-cost[chosen], x[chosen]))].tolist():
        u, v = int(src[e]), int(dst[e])
        if favorite[u] == NO_FAVORITE and not has_parent[v]:
            favorite[u] = v
            has_parent[v] = True
    return favorite
