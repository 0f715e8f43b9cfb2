"""Per-op linear regression of costs on the batch size (Celeritas section 4.2.1, rough estimation).

Celeritas profiles a model at small batch sizes that fit one device and fits, per op, a linear
model of memory on the batch size; it notes that compute time follows the batch size less
faithfully. :class:`OpCostRegression` is that estimator, in scikit-learn's style:
hyperparameters in ``__init__``, learned state in attributes ending with ``_`` set by :meth:`fit`,
and :meth:`predict` using only that state. :func:`fill_cost_graph` writes predicted costs into a
cost graph's structure. No TensorFlow is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tfplace.core.costgraph import AliasedOutput, CostGraph, CostGraphError
from tfplace.core.transfer import TransferModel
from tfplace.estimator.profiler import TIME_FLOOR, OpCost, ProfileSet, shared_aliases
from tfplace.estimator.row_blocks import RowBlocking
from tfplace.estimator.twins import pooled_twin_times

__all__ = ["OpCostRegression", "fill_cost_graph", "regime_starts"]


def _lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares ``slope`` and ``intercept`` of each row of ``y`` (shape ``(n, len(x))``) on ``x``."""
    dx = x - x.mean()
    slope = (y - y.mean(axis=1, keepdims=True)) @ dx / float(dx @ dx)
    return slope, y.mean(axis=1) - slope * x.mean()


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Theil-Sen ``slope`` (at least 0) and ``intercept`` of each row of ``y`` on ``x``: the median of
    the slopes between every two points of distinct ``x`` (0 when there are none), and the median
    of ``y - slope * x``."""
    first, second = np.triu_indices(len(x), k=1)
    distinct = x[second] != x[first]
    first, second = first[distinct], second[distinct]
    if not distinct.any():
        return np.zeros(len(y)), np.median(y, axis=1)
    slopes = (y[:, second] - y[:, first]) / (x[second] - x[first])
    slope = np.maximum(np.median(slopes, axis=1), 0.0)
    return slope, np.median(y - slope[:, None] * x, axis=1)


def _line_and_power(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(slope, intercept, exponent, log_scale)`` of each row of ``y`` (positive times) on ``x``:
    its :func:`_theil_sen` line and its power law ``exp(log_scale) * x ** exponent`` by least
    squares on the logarithms, the exponent clipped to ``[0, 1]``."""
    logs = np.log(y)
    exponent = np.clip(_lines(np.log(x), logs)[0], 0.0, 1.0)
    return (*_theil_sen(x, y), exponent, logs.mean(axis=1) - exponent * np.log(x).mean())


def _memory_lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_lines` of bytes on the batch size, where a falling line becomes the largest
    measurement: memory does not shrink as the batch grows, so a negative slope is noise (a
    loop's peak that depends on the order its nodes ran in), and extrapolating it to a large
    batch would predict nothing."""
    slope, intercept = _lines(x, y)
    falling = slope < 0
    return np.where(falling, 0.0, slope), np.where(falling, y.max(axis=1), intercept)


def regime_starts(
    x: np.ndarray,
    times: np.ndarray,
    tolerance: float,
    errors: np.ndarray | None = None,
    significance: float = 0.0,
) -> np.ndarray:
    """Per op, the index in ``x`` of the first batch size of its upper regime.

    The regime's slope is that of the op's time between the two largest batch sizes ``x`` (its
    row of ``times``). Going down, a smaller batch size joins the regime unless the time rises
    from it to the next one more steeply than ``1 / (1 - tolerance)`` times the regime's slope:
    there each added example cost more than it does nearer the target (another kernel at that
    batch, or too few examples to keep the vector units busy), and that batch size and all
    smaller ones are left out. So is one from which the time rises less than ``1 - tolerance``
    times the regime's slope, where that slope is positive: each added example cost less there
    than nearer the target, a kernel whose cost per row ramps up (the NMT's forward products,
    ``[m, 768] x [768, 1024]``, took 110, 110, 133 and 163 us at m = 2, 4, 6, 8 as a bare kernel,
    session 35). A time that falls towards the next batch size (noise) never ends the regime.
    With ``tolerance`` of 1 or more, or fewer than three batch sizes, every op's regime starts
    at the smallest (0).

    With ``errors`` (the standard errors of ``times``, :attr:`~tfplace.estimator.profiler.ProfileSet.time_errors`),
    a change of slope also has to be ``significance`` times its standard error or more to end the
    regime: measurements that cannot tell the two slopes apart keep the batch size. On a busy
    machine the 24 weight-gradient products of the NMT's first decoder layer (kernel twins,
    pooled) took 285, 302 and 339 us on average at batches 2, 4 and 6, with standard errors of
    7, 6 and 5 us: 8.8, then 18.1 us per example, a change of 9.3 +- 7.4 that the ratio alone
    read as a ramp. The line from batch 4 on predicted about 383 us at batch 8, where two
    measurements gave 358-366 (``results/table5_profiles``).
    """
    slopes = np.diff(times, axis=1) / np.diff(x)
    starts = np.zeros(len(times), dtype=int)
    if tolerance >= 1 or len(x) < 3:
        return starts
    regime = slopes[:, -1]
    widths = np.diff(x)
    open_ = np.ones(len(times), dtype=bool)
    for segment in range(slopes.shape[1] - 2, -1, -1):
        slope = slopes[:, segment]
        steeper = (slope > 0) & (slope * (1 - tolerance) > regime)
        flatter = (slope >= 0) & (slope < regime * (1 - tolerance))
        ends = steeper | flatter
        if errors is not None:
            weights = np.zeros(len(x))  # regime - slope as a weighted sum of the times
            weights[-2:] += np.array([-1.0, 1.0]) / widths[-1]
            weights[segment : segment + 2] -= np.array([-1.0, 1.0]) / widths[segment]
            spread = np.sqrt((errors**2) @ weights**2)
            ends &= np.abs(regime - slope) >= significance * spread
        starts = np.where(open_ & ends, segment + 1, starts)
        open_ &= ~ends
    return starts


class OpCostRegression:
    """Predict every op's costs at any batch size from costs profiled at a few small ones.

    Memory (each output slot's bytes, temporary bytes) is fitted by least squares as
    ``bytes = slope * batch + intercept``: tensors scale with the batch, so the line is exact for
    memory that is linear in the batch size, and predictions are rounded and never negative. A
    line that falls as the batch grows is noise and predicts the largest measurement instead.
    Persistent memory does not depend on the batch and is copied. An output slot is aliased (an
    input's buffer, :attr:`~tfplace.estimator.profiler.OpCost.aliased_outputs`) in the prediction
    when it was at every profiled batch size: a slot seen allocated once counts as allocated.

    Compute time follows the batch size less faithfully (section 4.2.1), and the times of small ops
    are dominated by the executor's overhead and by noise. Each op's time gets one of two models,
    both never negative and never falling as the batch grows:

    - ``"line"``: ``seconds = slope * batch + intercept``, fitted by Theil-Sen (Theil 1950, Sen
      1968: the slope is the median of the slopes between every two profiled batch sizes, the
      intercept the median of ``seconds - slope * batch``), with the slope at least 0, over the
      op's **upper regime** (:func:`regime_starts`): the profiled batch sizes from which on each
      added example costs about the same. A smaller batch size where an added example cost
      clearly more (over ``1 / (1 - regime_tolerance)`` times, twice by default) is off the
      regime and left out: a kernel that runs another algorithm at batch 1, or too few examples
      to keep the vector units busy, both of which the target batch is past. On Inception V3
      profiled at 1, 2, 4 and measured twice at 8, the forward 1 x 7 and 7 x 1 convolutions
      take 60-100 us at batch 1 and 1.17-1.23 ms at 2, 4 and 8 (1.3 ms at 16): the line through
      all three batch sizes predicted 2.0 ms at 8, the regime's 1.3 ms, and the deviation
      weighted by time fell from 11.4% to 5.2% (the two measurements differ by 3.5%; load 2-3,
      the same profiles for both fits). So is one where an added example cost clearly less
      (under ``1 - regime_tolerance`` times, half by default; since session 35): a kernel whose
      cost per row ramps up towards the target, which a line through the flat start
      underpredicts (the NMT's forward products). Within the regime Theil-Sen keeps one batch size
      measured low (a disturbed measurement) from bending the line, where least squares would
      tilt it and extrapolate the error: on Tensor Holography (load 13) the deviation weighted
      by time fell from 5.1% (least squares) to 3.6%, against 3.5% between the two
      measurements. An op shorter than ``flat_below`` at every profiled batch whose time grows
      by less than ``flat_growth`` from the smallest to the largest of them is overhead: its
      line is the constant mean of its times, since a slope fitted to its noise would only
      extrapolate the noise (the Transformer, small, same conditions: 20.5% mean deviation per
      op with a line everywhere, 16.7% with the constant, 14.3% between two measurements). A
      longer op keeps its line however little it grows: the NMT's weight-gradient matmuls
      (250-280 us at batches 1-4, writing the same gradient whatever the batch) grow slowly but
      surely, and a constant for them raised the NMT's deviation weighted by time from 11.6% to
      16.4%;
    - ``"convex"`` where the line would cross zero at a positive batch (times growing faster than
      the batch): the larger of that line and ``seconds = scale * batch ** exponent``, fitted by
      least squares on the logarithms of the regime's times with the exponent clipped to
      ``[0, 1]``. The power law holds at small batches, where the line would be negative (a piece
      of a split batch); past the profiled batches the line, whose median slope carries on the
      growth per added example. The power law alone, proportional at most and through the
      times' geometric mean, fell below the largest measurement: Tensor Holography's ``Relu``
      of a 2 MB output (at batch 8) took 19, 55 and 109 us at batches 2, 4 and 6 and 167 us at
      8, where the power law predicted 106 and the line 155. On two sets of profiles (batches 2,
      4, 6 and 8 twice, quiet machine) the deviation weighted by time went from 4.38% and 5.64%
      to 3.14% and 4.01% on Tensor Holography (32-38 such ops, a fifth of its time; its floor
      2.84% and 1.51%), from 4.15% / 3.85% to 4.11% / 3.79% on Inception V3, from 7.12% / 10.41%
      to 7.17% / 10.77% on the Transformer (whose per-example cost falls again towards batch 8),
      and did not move on the NMT.

    A ``MatMul`` whose kernel passes over its weights once per block of rows
    (:mod:`tfplace.estimator.row_blocks`: oneDNN's ``transpose_b`` products here, three rows per
    pass) takes a staircase of times in its rows ``m``, which no line or power of the batch size
    follows: profiled at batches 2, 4 and 6 (one, two and two passes of three rows) the NMT's
    ``[m, 1024] x [768, 1024]^T`` products cannot show the third pass at batch 8 (issue 17); fitted
    on their passes, the deviation of those 48 ops weighted by time fell from 19-20.5% to 2.1-2.4%
    and the step's from 9.7-10.1% to 7.1-7.5% (three sets of profiles, each predicted both ways,
    load 1-2; ``benchmarks/estimation_accuracy.py``). Such
    an op (``row_blockings`` of :meth:`fit`) is fitted, at every profiled batch size and with no
    regime, on the rows its passes cover, ``ceil(m / block) * block``, expressed in examples (the
    batch size whose rows fill those passes), and predicted on the same at the target batch.
    Its :meth:`batch_costs` are that line (or convex model) of the batch size itself: the staircase's
    upper envelope, exact where the rows fill whole passes.

    Ops that run one kernel on one shape (``twins`` of :meth:`fit`,
    :func:`~tfplace.estimator.twins.kernel_twins`: an unrolled RNN's cells, a Transformer's layers)
    grow alike with the batch. Each is fitted on its group's mean times plus its own mean offset
    from them (:func:`~tfplace.estimator.twins.pooled_twin_times`), so that the noise of one op's
    measurements is not extrapolated to the target batch; a group whose mean at the largest
    profiled batch is under ``flat_below`` is fitted op by op. Pooled too, such short ops put
    Tensor Holography's mean deviation per op at 34.4% and 34.2% (idle, busy) where alone they
    gave 29.0% and 31.0%, while the NMT's weighted deviation fell as much either way (6.9% ->
    5.0% idle; session 35, ``results/table5_profiles`` refitted).

    Below its regime the line overestimates an op (a piece of a split batch,
    :func:`tfplace.split.costs.time_at_batch`): the regime's per-example cost is the one that
    holds from its first batch size up.

    Parameters
    ----------
    flat_growth : float
        Relative growth of an op's time from the smallest to the largest profiled batch below
        which the time of an op shorter than ``flat_below`` is predicted constant.
    flat_below : float
        Seconds: ops at least this long at some profiled batch always get a line or a convex model;
        groups of twins this long on average at the largest profiled batch are pooled.
    regime_tolerance : float
        How much steeper or flatter (as a fraction: the regime's slope over the smaller batch's,
        or the smaller batch's over the regime's, is below ``1 - regime_tolerance``) the time of
        an op may rise towards a smaller batch size before that batch size is off its regime
        (:func:`regime_starts`); 1 or more: every profiled batch size is in the regime.
    regime_significance : float
        Standard errors a change of slope must be to end a regime (:func:`regime_starts`, with the
        profile's :attr:`~tfplace.estimator.profiler.ProfileSet.time_errors`, pooled over kernel
        twins as their times are); 0: the ratio alone decides.
    time_floor : float
        Seconds an op takes at least in a prediction.

    Attributes
    ----------
    ops_ : list of str
        The ops fitted, in the order of the coefficient arrays.
    batch_sizes_ : ndarray
        The profiled batch sizes.
    time_fit_ : list of str
        Which model fits each op's time: ``"line"`` or ``"convex"``.
    time_regime_ : ndarray of int
        Per op, the index in ``batch_sizes_`` of the first batch size its time was fitted on.
    row_blockings_ : dict of str to RowBlocking
        The ops fitted on the rows their passes cover, as given to :meth:`fit`.
    twins_ : list of list of str
        The groups of kernel twins whose times were pooled: those given to :meth:`fit` (profiled
        ops only) whose mean time at the largest profiled batch is at least ``flat_below``.
    time_line_ : ndarray of shape (n_ops, 2)
        ``[slope, intercept]`` of each op's time line (seconds per example, seconds).
    time_power_ : ndarray of shape (n_ops, 2)
        ``[scale, exponent]`` of each ``"convex"`` op's power law; 0 for the others.
    output_coef_ : dict of str to ndarray of shape (n_slots, 2)
        ``[slope, intercept]`` of the bytes of each output slot of each op.
    temporary_coef_ : ndarray of shape (n_ops, 2)
        ``[slope, intercept]`` of each op's temporary bytes.
    persistent_bytes_ : ndarray of shape (n_ops,)
        Each op's persistent bytes.
    aliased_outputs_ : dict of str to tuple of (int, str, int)
        Each op's output slots that were an input's buffer at every profiled batch size.
    kernel_share_ : dict of str to float or None
        The median over the batch sizes of the part of each op's time its kernels ran (its
        predicted ``kernel_time`` is that part of its predicted time); ``None`` when not measured.

    Examples
    --------
    >>> model = OpCostRegression().fit(profile_set)  # doctest: +SKIP
    >>> costs = model.predict(32)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        flat_growth: float = 0.3,
        flat_below: float = 20e-6,
        regime_tolerance: float = 0.5,
        regime_significance: float = 2.0,
        time_floor: float = TIME_FLOOR,
    ) -> None:
        self.flat_growth = flat_growth
        self.regime_tolerance = regime_tolerance
        self.regime_significance = regime_significance
        self.flat_below = flat_below
        self.time_floor = time_floor

    def fit(
        self,
        profile_set: ProfileSet,
        row_blockings: Mapping[str, RowBlocking] | None = None,
        twins: Sequence[Sequence[str]] = (),
    ) -> OpCostRegression:
        """Fit one model per op to the costs of ``profile_set`` (at least two batch sizes); the ops
        of ``row_blockings`` (:func:`~tfplace.estimator.row_blocks.matmul_row_blockings`) on the rows
        their passes cover (class docstring). Without it (or from blocks that are all 1, which
        block no op) the fit is the one without row blocks. Each group of ``twins``
        (:func:`~tfplace.estimator.twins.kernel_twins`) is fitted on its pooled times
        (:func:`~tfplace.estimator.twins.pooled_twin_times`: the group's growth, each op's level);
        ops of a group that were not profiled are left out of it.

        Raises
        ------
        ValueError
            Fewer than two batch sizes, or an op profiled at some batch sizes but not others.
        """
        sizes = sorted(profile_set.costs)
        if len(sizes) < 2:
            raise ValueError(f"fitting costs on the batch size needs two batch sizes or more, got {sizes}")
        ops = sorted(profile_set.costs[sizes[0]])
        for b in sizes[1:]:
            differ = set(ops).symmetric_difference(profile_set.costs[b])
            if differ:
                raise ValueError(
                    f"ops {sorted(differ)[:5]} ({len(differ)} in all) are profiled at batch {b} "
                    f"or at batch {sizes[0]} but not both"
                )
        x = np.asarray(sizes, dtype=float)
        per_batch = [[profile_set.costs[b][op] for b in sizes] for op in ops]
        index = {op: i for i, op in enumerate(ops)}
        measured = np.array([[cost.compute_time for cost in row] for row in per_batch])
        groups = [[index[op] for op in group if op in index] for group in twins]
        groups = [group for group in groups if group and measured[group, -1].mean() >= self.flat_below]
        self.twins_ = [[ops[i] for i in group] for group in groups]
        times = pooled_twin_times(measured, groups)
        errors = pooled_twin_times(
            np.array([[profile_set.time_errors.get(b, {}).get(op, 0.0) for b in sizes] for op in ops]), groups
        )
        self.row_blockings_ = {
            op: blocking
            for op, blocking in (row_blockings or {}).items()
            if op in profile_set.costs[sizes[0]]
        }
        self._fit_time(x, times, errors)
        for i, op in enumerate(ops):
            if op in self.row_blockings_:
                self._fit_blocked_time(i, [self.row_blockings_[op].batch_units(b) for b in sizes], times[i])
        temporary = np.array([[cost.temporary_bytes for cost in row] for row in per_batch], dtype=float)
        self.temporary_coef_ = np.column_stack(_memory_lines(x, temporary))
        self.output_coef_ = {op: self._fit_outputs(x, row) for op, row in zip(ops, per_batch)}
        self.persistent_bytes_ = np.array([row[-1].persistent_bytes for row in per_batch], dtype=np.int64)
        self.aliased_outputs_ = {op: shared_aliases(row) for op, row in zip(ops, per_batch)}
        self.kernel_share_ = {op: _kernel_share(row) for op, row in zip(ops, per_batch)}
        self.ops_ = ops
        self.batch_sizes_ = x
        return self

    def _fit_time(self, x: np.ndarray, times: np.ndarray, errors: np.ndarray) -> None:
        times = np.maximum(times, self.time_floor)  # logarithms need positive times
        flat = (times[:, -1] < (1 + self.flat_growth) * times[:, 0]) & (times.max(axis=1) < self.flat_below)
        self.time_regime_ = np.where(
            flat, 0, regime_starts(x, times, self.regime_tolerance, errors, self.regime_significance)
        )
        slope, intercept = np.zeros(len(times)), np.zeros(len(times))
        exponent, log_scale = np.zeros(len(times)), np.zeros(len(times))
        for start in np.unique(self.time_regime_):
            ops = self.time_regime_ == start
            slope[ops], intercept[ops], exponent[ops], log_scale[ops] = _line_and_power(
                x[start:], times[ops, start:]
            )
        slope = np.where(flat, 0.0, slope)
        intercept = np.where(flat, times.mean(axis=1), intercept)
        line = flat | (intercept >= 0)
        self.time_fit_ = ["line" if kept else "convex" for kept in line]
        self.time_line_ = np.column_stack([slope, intercept])
        self.time_power_ = np.where(line[:, None], 0.0, np.column_stack([np.exp(log_scale), exponent]))

    def _fit_blocked_time(self, i: int, units: list[float], times: np.ndarray) -> None:
        """Refit op ``i``'s time on ``units`` (the examples its row passes cover at each profiled
        batch size), over every one of them: a line, or where the line crosses zero the larger of
        it and a power law (``"convex"``)."""
        (slope,), (intercept,), (exponent,), (log_scale,) = _line_and_power(
            np.asarray(units), np.maximum(times, self.time_floor)[None, :]
        )
        self.time_regime_[i] = 0
        self.time_line_[i] = (slope, intercept)
        if intercept >= 0:
            self.time_fit_[i] = "line"
            self.time_power_[i] = 0.0
        else:
            self.time_fit_[i] = "convex"
            self.time_power_[i] = (np.exp(log_scale), exponent)

    @staticmethod
    def _fit_outputs(x: np.ndarray, row: list[OpCost]) -> np.ndarray:
        width = max(len(cost.output_sizes) for cost in row)
        sizes = np.zeros((width, len(row)))
        for column, cost in enumerate(row):
            sizes[: len(cost.output_sizes), column] = cost.output_sizes
        return np.column_stack(_memory_lines(x, sizes)) if width else np.zeros((0, 2))

    def batch_costs(self) -> dict[str, dict[str, object]]:
        """Each op's fitted coefficients as the cost graph's ``batch_costs`` field (schema version 3):
        ``{"time": [model, ...], "outputs": [[slope, intercept], ...], "temporary": [slope,
        intercept]}`` with the time ``["line", slope, intercept]`` or ``["convex", slope, intercept,
        scale, exponent]`` (the larger of the line and ``scale * batch ** exponent``);
        :func:`tfplace.split.costs.time_at_batch` evaluates them without this estimator."""
        if not hasattr(self, "ops_"):
            raise RuntimeError("OpCostRegression.batch_costs called before fit")
        return {
            op: {
                "time": [
                    kind,
                    *map(float, self.time_line_[i]),
                    *(map(float, self.time_power_[i]) if kind == "convex" else ()),
                ],
                "outputs": self.output_coef_[op].tolist(),
                "temporary": self.temporary_coef_[i].tolist(),
            }
            for i, (op, kind) in enumerate(zip(self.ops_, self.time_fit_))
        }

    def predict(self, batch_size: int) -> dict[str, OpCost]:
        """The predicted costs of every fitted op at ``batch_size``."""
        if not hasattr(self, "ops_"):
            raise RuntimeError("OpCostRegression.predict called before fit")
        if batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        b = float(batch_size)
        line = np.array([kind == "line" for kind in self.time_fit_])
        units = np.array(
            [
                self.row_blockings_[op].batch_units(batch_size) if op in self.row_blockings_ else b
                for op in self.ops_
            ]
        )  # what each op's time was fitted on (class docstring)
        lines = self.time_line_[:, 0] * units + self.time_line_[:, 1]
        times = np.where(
            line, lines, np.maximum(lines, self.time_power_[:, 0] * units ** self.time_power_[:, 1])
        )
        times = np.maximum(times, self.time_floor)
        temporary = _bytes(self.temporary_coef_, b)
        return {
            op: OpCost(
                compute_time=float(times[i]),
                output_sizes=tuple(int(s) for s in _bytes(self.output_coef_[op], b)),
                temporary_bytes=int(temporary[i]),
                persistent_bytes=int(self.persistent_bytes_[i]),
                aliased_outputs=self.aliased_outputs_[op],
                kernel_time=_share_of(self.kernel_share_[op], float(times[i])),
            )
            for i, op in enumerate(self.ops_)
        }


def _kernel_share(costs: Sequence[OpCost]) -> float | None:
    """The median over ``costs`` (one op's, per batch size) of ``kernel_time / compute_time``."""
    shares = [cost.kernel_time / cost.compute_time for cost in costs if cost.kernel_time is not None]
    return float(np.median(np.minimum(shares, 1.0))) if len(shares) == len(costs) else None


def _share_of(share: float | None, seconds: float) -> float | None:
    """``share`` of ``seconds`` (``None`` when the share is)."""
    return None if share is None else share * seconds


def _bytes(coef: np.ndarray, batch_size: float) -> np.ndarray:
    return np.maximum(np.rint(coef @ [batch_size, 1.0]), 0).astype(np.int64)


def fill_cost_graph(
    graph: CostGraph, costs: Mapping[str, OpCost], transfer_model: TransferModel | None = None
) -> CostGraph:
    """A copy of ``graph`` with every op's costs set from ``costs`` and edges recomputed.

    Each edge's ``bytes`` becomes the sum of the producer's ``output_sizes`` over the edge's
    ``slots`` (control edges carry 0), and its ``transfer_time`` follows ``t = k * bytes + b``
    (section 4.1) under ``transfer_model``, or under the graph's own model when it is ``None``.
    An op's ``aliased_outputs`` are the cost's, except those naming a tensor that no edge of
    ``graph`` brings to the op (a legacy ``while`` loop's back edge, which the graph drops): such
    an output counts as allocated.

    Parameters
    ----------
    graph : CostGraph
        The structure (ops, edges with slots), for example ``import_graph(...).cost_graph``.
    costs : Mapping of str to OpCost
        For every op of ``graph`` (more ops are ignored), e.g. ``OpCostRegression.predict(b)``.
    transfer_model : TransferModel, optional

    Raises
    ------
    CostGraphError
        Naming the ops that have no cost, or an edge that carries a slot its producer lacks.
    """
    lacking = [op for op in graph if op not in costs]
    if lacking:
        raise CostGraphError(f"{len(lacking)} ops of the graph have no cost, e.g. {lacking[:5]}")
    filled = graph.copy()
    for op, attrs in filled.nodes(data=True):
        cost = costs[op]
        attrs.update(
            compute_time=float(cost.compute_time),
            persistent_bytes=int(cost.persistent_bytes),
            output_sizes=tuple(int(s) for s in cost.output_sizes),
            temporary_bytes=int(cost.temporary_bytes),
            aliased_outputs=_carried_aliases(filled, op, cost.aliased_outputs),
            kernel_time=cost.kernel_time,
        )
        shapes = attrs.get("output_shapes")
        if shapes is not None and len(shapes) != len(attrs["output_sizes"]):
            attrs["output_shapes"] = None
    for src, dst, attrs in filled.edges(data=True):
        sizes = filled.nodes[src]["output_sizes"]
        beyond = [slot for slot in attrs["slots"] if slot >= len(sizes)]
        if beyond:
            raise CostGraphError(
                f"edge {src!r} -> {dst!r} carries output slots {beyond} but {src!r} has {len(sizes)} outputs"
            )
        attrs["bytes"] = 0 if attrs["control"] else sum(sizes[slot] for slot in attrs["slots"])
    filled.set_transfer_model(transfer_model or graph.transfer_model)
    return filled


def _carried_aliases(
    graph: CostGraph, op: str, aliases: tuple[AliasedOutput, ...]
) -> tuple[AliasedOutput, ...]:
    """The aliases of ``op`` whose input tensor an edge of ``graph`` brings to it."""
    kept = []
    for slot, producer, source in aliases:
        edge = graph.get_edge_data(producer, op)
        if edge is not None and source in edge["slots"]:
            kept.append((slot, producer, source))
    return tuple(kept)
