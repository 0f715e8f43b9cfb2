"""How many rows this machine's CPU ``MatMul`` kernels compute per pass over the weights.

TensorFlow runs a CPU ``MatMul`` as oneDNN's ``_MklMatMul``; with ``transpose_b`` and few rows
``m`` it passes over the weights once per three rows: a ``[m, 1024] x [768, 1024]^T`` product took
53-62 us at m = 1-3, 99-107 at 4-6, 146-155 at 7-9, 192-200 at 10-12 (issue 17, brief 17b), while
the same product without the transpose grows smoothly. Such an op's time is a staircase in ``m``
with one step per **row block**; :class:`~tfplace.estimator.regression.OpCostRegression` regresses
it on the rows its passes cover, ``ceil(m / block) * block`` (:class:`RowBlocking`).

The block is a property of the machine's kernels, timed once (``tfplace calibrate``,
:func:`time_matmul_rows`, the only function here that needs TensorFlow) and found by
:func:`staircase_period`; it is stored per transpose variant (:func:`matmul_variant`) in
:attr:`~tfplace.core.device_model.CpuCalibration.matmul_row_blocks`. :func:`matmul_row_blockings`
reads each ``MatMul``'s rows from a profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.core.progress import track
from tfplace.estimator.profiler import ProfileSet, profiling_config

__all__ = [
    "FLOAT32_BYTES",
    "MATMUL_VARIANTS",
    "ROW_BLOCK_TRIALS",
    "STAIRCASE_FIT",
    "STEP_SHARE",
    "TIMED_ROWS",
    "RowBlocking",
    "matmul_row_blockings",
    "matmul_variant",
    "measure_matmul_row_blocks",
    "row_block",
    "staircase_period",
    "time_matmul_rows",
]

MATMUL_VARIANTS = ("MatMul", "MatMul/transpose_a", "MatMul/transpose_b", "MatMul/transpose_a/transpose_b")
"""The transpose variants of ``MatMul`` whose row blocks are measured (:func:`matmul_variant`)."""

STAIRCASE_FIT = 0.4
"""Steps of a period must leave at most this share of the squared residuals of a line on the rows
for :func:`staircase_period` to take it. On this machine's ``transpose_b`` timings (load about 1)
steps of three rows left under 0.01 of them (five runs of :func:`time_matmul_rows`), 0.04-0.74 in
single sessions with one product slow throughout, and steps of two or four rows 0.93-1.0; timings
without the transpose 0.64 at best, constant times with noise 0.64-1.0."""

STEP_SHARE = 0.2
"""A step must rise by more than this share of the smallest time (one row's): a pass over the
weights is much of a product's time (steps of 25-45 us here after 80 us at one row, session 10,
the session call included), where noise that happens to fit steps is a few percent of it. The
times are the ops' traced times (:func:`time_matmul_rows`), without the session call: on session
31's VM the call alone took 95-110 us, and steps of 26-33 us cleared this share of whole steps by
at most 4 us, so a calibration voted the staircase away."""

TIMED_ROWS = 12
"""The rows :func:`time_matmul_rows` times, up to which a staircase is known: past 15 rows the
``transpose_b`` product changed algorithm (729 us at 16 rows against 237-247 at 13-15)."""

ROW_BLOCK_TRIALS = 3
"""Independent timings a row block is found from, each row's time their median
(:func:`row_block`): of two ``tfplace calibrate`` runs a minute apart (session 10, load 1) one
found ``transpose_b`` products in blocks of 1 row, the other and three separate timings in blocks
of 3; session 34's three timings found 1, 3 and 1 (one row 10-29 us off its pass in each, its
own), their median 3."""

FLOAT32_BYTES = 4
"""Bytes of an element of the output: the staircase was measured on float32 products."""


def matmul_variant(attrs: Mapping[str, Any] | None) -> str:
    """``"MatMul"`` followed by ``/transpose_a`` and ``/transpose_b`` when those attributes are set
    (a cost graph's ``attrs``): the key of :data:`MATMUL_VARIANTS`."""
    attrs = attrs or {}
    return "/".join(["MatMul", *(flag for flag in ("transpose_a", "transpose_b") if attrs.get(flag))])


def staircase_period(seconds: Sequence[float], fit: float = STAIRCASE_FIT) -> int:
    """The row block of a kernel from its times at ``m = 1, 2, ..., len(seconds)`` rows (each the
    minimum of repeats).

    Each period ``p`` from 2 up to a third of the rows timed (three passes at least) adds steps to
    a line on the rows: ``a + d * m + c * ceil(m / p)`` by least squares. The period is the one
    whose steps leave the least squared residuals, when that is at most ``fit`` times the line's
    alone and each step rises more than the other rows of its pass together (``c > (p - 1) * d``:
    most of the growth is in the steps, which the rows' own cost within a pass keeps from being
    flat) and than :data:`STEP_SHARE` of the smallest time. Otherwise 1: each
    row costs alike (smooth), also for times that do not vary.
    """
    times = np.asarray(seconds, dtype=float)
    rows = np.arange(1, len(times) + 1, dtype=float)

    def least_squares(*columns: np.ndarray) -> tuple[float, np.ndarray]:
        design = np.column_stack([np.ones(len(rows)), *columns])
        coefficients = np.linalg.lstsq(design, times, rcond=None)[0]
        error = times - design @ coefficients
        return float(error @ error), coefficients

    best, best_error = 1, fit * least_squares(rows)[0]
    for period in range(2, len(times) // 3 + 1):
        error, (_, per_row, step) = least_squares(rows, np.ceil(rows / period))
        if step > max((period - 1) * per_row, STEP_SHARE * times.min()) and error < best_error:
            best, best_error = period, error
    return best


@dataclass(frozen=True)
class RowBlocking:
    """One op whose time is a staircase in its rows: ``rows_per_example`` rows of its output per
    example of the batch, computed ``block`` rows per pass."""

    rows_per_example: Fraction
    block: int

    def covered_rows(self, batch_size: float) -> float:
        """The rows its passes cover at ``batch_size``: ``ceil(m / block) * block`` for its ``m`` rows."""
        rows = self.rows_per_example * Fraction(batch_size)
        passes = -(-rows.numerator // (rows.denominator * self.block))
        return float(passes * self.block)

    def batch_units(self, batch_size: float) -> float:
        """:meth:`covered_rows` in examples (the regression's unit): the batch size whose rows fill
        its passes; ``batch_size`` itself when the rows fill them exactly."""
        return self.covered_rows(batch_size) / float(self.rows_per_example)


def matmul_row_blockings(
    graph: CostGraph, profile_set: ProfileSet, blocks: Mapping[str, int]
) -> dict[str, RowBlocking]:
    """The ``MatMul`` ops of ``graph`` whose rows grow with the batch and whose variant's block in
    ``blocks`` (:func:`matmul_variant`; absent: 1) is over 1.

    An op's rows at each batch size of ``profile_set`` are its first output's profiled bytes over
    its columns (the static last dimension of its ``output_shapes``) of float32 elements. It
    qualifies when those rows are whole, in the same proportion to the batch at every batch and
    at most :data:`TIMED_ROWS` (beyond, the staircase was not measured: the Transformer's products
    of 16 rows and more, fitted on blocks of three, predicted its step's MatMuls no better).
    """
    blockings = {}
    for op, attrs in graph.nodes(data=True):
        block = int(blocks.get(matmul_variant(attrs.get("attrs")), 1))
        shapes = attrs.get("output_shapes")
        if attrs.get("op_type") != "MatMul" or block <= 1 or not shapes or len(shapes[0]) != 2:
            continue
        columns = shapes[0][1]
        sizes = {
            b: per_op[op].output_sizes[0]
            for b, per_op in profile_set.costs.items()
            if op in per_op and per_op[op].output_sizes
        }
        if columns <= 0 or len(sizes) != len(profile_set.costs) or not sizes:
            continue
        ratios = {Fraction(size, columns * FLOAT32_BYTES) / b for b, size in sizes.items()}
        rows = [Fraction(size, columns * FLOAT32_BYTES) for size in sizes.values()]
        if len(ratios) == 1 and all(r.denominator == 1 and 0 < r <= TIMED_ROWS for r in rows):
            blockings[op] = RowBlocking(ratios.pop(), block)
    return blockings


def time_matmul_rows(
    variant: str,
    rows: int = TIMED_ROWS,
    *,
    inner: int = 1024,
    columns: int = 768,
    repeats: int = 30,
    sessions: int = 3,
) -> list[float]:
    """The time of a float32 ``variant`` product (:data:`MATMUL_VARIANTS`) of ``m`` rows, ``inner``
    deep, into ``columns``, for ``m = 1 .. rows``: the NMT's shape, from variables (nothing to
    fold), as the profiler times an op (:func:`~tfplace.estimator.profiling_process.profiling_session`
    under :func:`~tfplace.estimator.profiler.profiling_config`: a worker process of its own with
    one intra-op thread, the op's traced time). Each is the smallest over ``sessions`` sessions of
    ``repeats`` traced steps each, the rows interleaved (within one session a product of some ``m``
    could take 10-20% more in every one of 100 steps, its buffers presumably, 262 us against 222 in
    the next session; other processes only add time too).

    In the process that calls it the kernels would run on the intra-op pool its first session
    sized (TensorFlow sizes it once per process): ``tfplace calibrate`` opens others first, and on
    two threads the staircase of ``transpose_b`` products blurs into a line (session 34: a period of
    3 in every timing in a fresh process, 1 in every calibration that day)."""
    import tensorflow as tf

    from tfplace.estimator.profiling_process import profiling_session
    from tfplace.tf_graph.step_stats import collect_op_traces

    transpose_a, transpose_b = "transpose_a" in variant, "transpose_b" in variant
    best = [float("inf")] * rows
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    for _ in range(sessions):
        graph = tf.Graph()
        with graph.as_default():
            weights = tf.compat.v1.Variable(
                tf.random.normal([columns, inner] if transpose_b else [inner, columns]), name="weights"
            )
            products = []
            for m in range(1, rows + 1):
                left = tf.compat.v1.Variable(
                    tf.random.normal([inner, m] if transpose_a else [m, inner]), name=f"rows{m}"
                )
                products.append(
                    tf.matmul(
                        left, weights, transpose_a=transpose_a, transpose_b=transpose_b, name=f"product{m}"
                    ).op
                )
            initializer = tf.compat.v1.global_variables_initializer()
        with profiling_session(graph, profiling_config(), "worker") as (session, _):
            session.run(initializer)
            session.run(products)  # warm up every kernel
            for _ in range(repeats):
                for m, product in enumerate(products):
                    metadata = tf.compat.v1.RunMetadata()
                    session.run(product, options=options, run_metadata=metadata)
                    trace = collect_op_traces(metadata, {product.name}).get(product.name)
                    if trace is not None:
                        best[m] = min(best[m], trace.compute_time)
    if not all(map(np.isfinite, best)):
        raise RuntimeError(f"no traced time of a {variant} product for some rows: {best}")
    return best


def row_block(timings: Sequence[Sequence[float]]) -> int:
    """The row block of a kernel from independent ``timings`` of it (each :func:`time_matmul_rows`):
    the :func:`staircase_period` of each row's median time over them. A timing's noise is a row or
    two off its pass, a different row in each (a product of some ``m`` slow throughout a session),
    and a median of three takes one such row out where a fit to each timing alone may see no
    staircase (session 34: periods 1, 3 and 1 timing by timing; the medians' 3)."""
    if not timings:
        raise ValueError("a row block needs at least one timing")
    return staircase_period(np.median(np.asarray(timings, dtype=float), axis=0))


def measure_matmul_row_blocks(rows: int = TIMED_ROWS, trials: int = ROW_BLOCK_TRIALS) -> dict[str, int]:
    """For each of :data:`MATMUL_VARIANTS`, the :func:`row_block` of ``trials`` independent
    timings (:func:`time_matmul_rows`)."""
    return {
        variant: row_block([time_matmul_rows(variant, rows=rows) for _ in range(trials)])
        for variant in track(MATMUL_VARIANTS, "MatMul row blocks")
    }
