"""The slices and joins a split plan adds cost what the profiled graph's own copies cost."""

from __future__ import annotations

import pytest

from tfplace.core.costgraph import CostGraph
from tfplace.split.copy_costs import GPU_COPY, copy_cost


def test_copy_cost_is_fitted_on_the_graphs_small_and_large_copies() -> None:
    graph = CostGraph()
    for i, (op_type, nbytes) in enumerate([("AddN", 64), ("StridedSlice", 16), ("Slice", 1024)]):
        graph.add_op(f"small{i}", compute_time=20e-6, output_sizes=(nbytes,), op_type=op_type)
    for i, nbytes in enumerate([1 << 20, 1 << 22, 1 << 24]):
        graph.add_op(
            f"large{i}", compute_time=20e-6 + nbytes * 1e-10, output_sizes=(nbytes,), op_type="ConcatV2"
        )
    graph.add_op("conv", compute_time=1.0, output_sizes=(1 << 24,), op_type="Conv2D")  # not a copy
    cost = copy_cost(graph)
    assert cost.fixed == pytest.approx(20e-6)
    assert cost.per_byte == pytest.approx(1e-10)
    assert cost.seconds(1000) == pytest.approx(20e-6 + 1e-7)


def test_a_graph_without_copies_takes_the_gpu_constants() -> None:
    graph = CostGraph()
    graph.add_op("conv", compute_time=1.0, output_sizes=(1 << 24,), op_type="Conv2D")
    assert copy_cost(graph) == GPU_COPY
