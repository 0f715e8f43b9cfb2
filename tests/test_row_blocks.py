"""The machine's MatMul row blocks: the staircase period of timings, which MatMuls of a profiled step
follow it, and the rows their passes cover (tfplace.estimator.row_blocks)."""

from fractions import Fraction

import numpy as np
import pytest

from tfplace.core.costgraph import CostGraph
from tfplace.estimator.profiler import OpCost, ProfileSet
from tfplace.estimator.row_blocks import (
    RowBlocking,
    matmul_row_blockings,
    matmul_variant,
    row_block,
    staircase_period,
)

# Minimum times (us) of a [m, 1024] x [768, 1024]^T product at m = 1..12 on this machine: over three
# sessions (row_blocks.time_matmul_rows), then five single sessions (load 1-2); and of the same
# product without the transpose.
TRANSPOSE_B = [
    [79, 83, 87, 123, 128, 133, 169, 173, 179, 214, 219, 223],
    [80, 87, 88, 137, 128, 133, 170, 173, 178, 215, 242, 224],
    [83, 92, 91, 128, 142, 138, 202, 185, 188, 227, 223, 228],
    [79, 86, 89, 124, 139, 134, 171, 175, 180, 216, 221, 228],
    [82, 87, 90, 126, 130, 148, 171, 176, 181, 216, 220, 228],
    [81, 85, 95, 126, 130, 134, 171, 174, 179, 215, 220, 237],
]
PLAIN = [81, 84, 86, 97, 111, 123, 138, 152, 184, 185, 194, 206]
# The same product's kernel times on session 31's VM, less a step running nothing (95-110 us there,
# row_blocks.time_matmul_rows): four timings, load below 1.
KERNEL_TRANSPOSE_B = [
    [62, 53, 57, 87, 109, 116, 148, 147, 159, 212, 225, 203],
    [55, 57, 64, 105, 110, 106, 154, 162, 168, 207, 215, 221],
    [49, 54, 57, 99, 94, 100, 140, 144, 149, 186, 192, 196],
    [48, 57, 62, 99, 102, 105, 142, 148, 153, 191, 195, 199],
]
KERNEL_PLAIN = [44, 50, 55, 67, 78, 93, 106, 119, 154, 153, 160, 172]
# Three kernel timings of the same product in one calibration on session 34's VM (load below 1), each
# with a row or two off its pass (m = 2 and 11; 10; 10-12).
NOISY_KERNEL_TRANSPOSE_B = [
    [66, 83, 76, 117, 117, 125, 158, 163, 174, 221, 250, 227],
    [65, 66, 73, 118, 124, 134, 173, 185, 188, 224, 224, 232],
    [56, 68, 71, 97, 105, 116, 171, 181, 187, 250, 220, 213],
]


@pytest.mark.parametrize("times", TRANSPOSE_B + KERNEL_TRANSPOSE_B)
def test_the_measured_staircase_of_three_rows_per_pass_has_period_three(times):
    assert staircase_period([t * 1e-6 for t in times]) == 3


@pytest.mark.parametrize("times", [PLAIN, KERNEL_PLAIN])
def test_times_growing_smoothly_with_the_rows_have_block_one(times):
    assert staircase_period([t * 1e-6 for t in times]) == 1


def test_a_noisy_staircase_keeps_its_period_and_noise_alone_or_on_a_line_makes_none():
    rng = np.random.default_rng(0)
    rows = np.arange(1, 13)
    for _ in range(50):
        noise = rng.uniform(-3e-6, 3e-6, len(rows))
        assert staircase_period(10e-6 + 45e-6 * np.ceil(rows / 4) + noise) == 4
        assert staircase_period(80e-6 + 4e-6 * rows + 35e-6 * np.ceil(rows / 3) + noise) == 3
        assert staircase_period(50e-6 + noise) == 1
        assert staircase_period(50e-6 + 5e-6 * rows + noise) == 1


def test_times_that_do_not_rise_or_one_jump_to_another_algorithm_have_block_one():
    assert staircase_period([5e-5] * 12) == 1
    assert staircase_period(list(np.linspace(2e-4, 1e-4, 12))) == 1
    assert staircase_period([111e-6] + [2138e-6 + 14e-6 * m for m in range(11)]) == 1
    assert staircase_period([1e-5, 2e-5, 3e-5, 4e-5, 5e-5]) == 1  # too few rows to see three steps


def test_the_row_block_is_the_staircase_of_each_rows_median_over_the_timings():
    timings = [[t * 1e-6 for t in times] for times in NOISY_KERNEL_TRANSPOSE_B]
    assert [staircase_period(times) for times in timings] == [1, 3, 1]  # a vote of periods loses it
    assert row_block(timings) == 3
    assert row_block([[t * 1e-6 for t in KERNEL_PLAIN]] * 3) == 1
    assert row_block(timings[:1]) == 1
    with pytest.raises(ValueError, match="at least one timing"):
        row_block([])


def test_the_variant_names_the_transposes_set():
    assert matmul_variant(None) == "MatMul"
    assert matmul_variant({"transpose_a": False, "transpose_b": True}) == "MatMul/transpose_b"
    assert matmul_variant({"transpose_a": True, "transpose_b": True}) == "MatMul/transpose_a/transpose_b"


@pytest.mark.parametrize(("batch", "units"), [(1, 3.0), (3, 3.0), (4, 6.0), (6, 6.0), (8, 9.0)])
def test_the_rows_covered_fill_whole_passes(batch, units):
    assert RowBlocking(Fraction(1), 3).batch_units(batch) == units


def test_two_rows_per_example_cover_passes_in_half_examples():
    blocking = RowBlocking(Fraction(2), 3)
    assert blocking.covered_rows(2) == 6.0 and blocking.covered_rows(4) == 9.0
    assert blocking.batch_units(4) == 4.5


def step(sizes=(2, 4, 6)):
    """A step of MatMuls of 768 columns (float32): ``tb`` and ``plain`` of one row per example,
    ``wide`` of eight, ``fixed`` of four rows whatever the batch."""
    graph = CostGraph()
    for name, flags in (("tb", {"transpose_b": True}), ("plain", {}), ("wide", {"transpose_b": True})):
        graph.add_op(
            name, op_type="MatMul", attrs={"transpose_a": False, **flags}, output_shapes=((-1, 768),)
        )
    graph.add_op("fixed", op_type="MatMul", attrs={"transpose_b": True}, output_shapes=((4, 768),))
    graph.add_op("relu", op_type="Relu", output_shapes=((-1, 768),))
    rows = {"tb": 1, "plain": 1, "wide": 8, "relu": 1}

    def costs(b):
        per_op = {op: OpCost(1e-4, (4 * 768 * r * b,), 0, 0) for op, r in rows.items()}
        return {**per_op, "fixed": OpCost(1e-4, (4 * 768 * 4,), 0, 0)}

    return graph, ProfileSet(batch_sizes=sizes, costs={b: costs(b) for b in sizes})


def test_only_matmuls_of_a_blocked_variant_whose_rows_grow_with_the_batch_within_those_timed_are_blocked():
    graph, profile = step()
    blockings = matmul_row_blockings(graph, profile, {"MatMul": 1, "MatMul/transpose_b": 3})
    assert blockings == {"tb": RowBlocking(Fraction(1), 3)}  # wide has 16-48 rows, past the 12 timed


def test_blocks_of_one_block_nothing():
    graph, profile = step()
    assert matmul_row_blockings(graph, profile, {"MatMul/transpose_b": 1}) == {}
    assert matmul_row_blockings(graph, profile, {}) == {}


@pytest.mark.tensorflow
@pytest.mark.slow
def test_products_are_timed_by_their_traces_for_every_row():
    from tfplace.estimator.row_blocks import time_matmul_rows

    times = time_matmul_rows("MatMul/transpose_b", rows=3, inner=64, columns=32, repeats=2, sessions=1)
    assert len(times) == 3 and all(0 < seconds < 1 for seconds in times)
