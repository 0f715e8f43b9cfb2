"""OptCNN's Algorithm 1 (issue 15, step 4): eliminations keep the optimum of the configuration search."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tfplace.split import elimination
from tfplace.split.elimination import Problem, solve


def random_problem(
    edges: list[tuple[int, int]], nodes: int, configurations: int = 3, seed: int = 0
) -> Problem:
    rng = np.random.default_rng(seed)
    problem = Problem({v: rng.uniform(0, 10, configurations) for v in range(nodes)})
    for u, v in edges:
        problem.add_edge(u, v, rng.uniform(0, 10, (configurations, configurations)))
    return problem


def brute_force(problem: Problem) -> float:
    nodes = list(problem.nodes)
    sizes = [len(problem.nodes[v]) for v in nodes]
    return min(
        problem.total(dict(zip(nodes, choice))) for choice in itertools.product(*(range(n) for n in sizes))
    )


def test_node_elimination_folds_a_chain_and_recovers_every_nodes_best_configuration():
    problem = random_problem([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)], 6)
    choice, left = solve(problem)
    assert left == 0
    assert problem.total(choice) == pytest.approx(brute_force(problem))


def test_parallel_edges_are_merged_into_one_by_summing_their_costs():
    problem = Problem({0: np.zeros(2), 1: np.zeros(2)})
    problem.add_edge(0, 1, np.array([[0.0, 5.0], [5.0, 9.0]]))
    problem.add_edge(1, 0, np.array([[4.0, 0.0], [0.0, 0.0]]))  # rows: node 1's configurations
    assert len(problem.edges) == 1
    assert problem.edge(0, 1).tolist() == [[4.0, 5.0], [5.0, 9.0]]
    choice, _ = solve(problem)
    assert problem.total(choice) == 4.0


def test_a_training_graph_of_branches_and_leaves_reduces_completely_and_stays_optimal():
    # an inception-like block: 0 fans out to three branches (1, 2-3, 4) that join in 5; 6 is a leaf (the loss)
    edges = [(0, 1), (0, 2), (2, 3), (0, 4), (1, 5), (3, 5), (4, 5), (5, 6), (0, 5)]
    for seed in range(5):
        problem = random_problem(edges, 7, seed=seed)
        choice, left = solve(problem)
        assert left == 0
        assert problem.total(choice) == pytest.approx(brute_force(problem))


def test_what_no_elimination_removes_is_searched_exhaustively():
    complete = [(u, v) for u in range(5) for v in range(u + 1, 5)]  # every node has four neighbours
    problem = random_problem(complete, 5)
    choice, left = solve(problem)
    assert left == 5
    assert problem.total(choice) == pytest.approx(brute_force(problem))


def test_a_remainder_too_large_to_enumerate_ends_where_no_single_change_helps(monkeypatch):
    monkeypatch.setattr(elimination, "EXHAUSTIVE_LIMIT", 10)
    complete = [(u, v) for u in range(5) for v in range(u + 1, 5)]
    problem = random_problem(complete, 5, seed=3)
    choice, _ = solve(problem)
    for v in problem.nodes:
        for other in range(3):
            assert problem.total({**choice, v: other}) >= problem.total(choice) - 1e-12
