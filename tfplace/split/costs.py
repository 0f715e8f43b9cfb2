"""What one piece of a split op costs: time, output bytes and scratch memory.

The time model, per dimension:

* **batch**, on a cost graph with the regression's coefficients (``batch_costs``, schema 3) whose
  times are the profiling device's own: the op's ``compute_time`` scaled by ``f(share * B) / f(B)``,
  where ``f`` is the op's fitted time model (Celeritas section 4.2.1: a line or a power law of the
  batch size) and ``B`` the graph's batch size. The ratio carries the fixed cost the regression found
  (a kernel's launch, an overhead that does not shrink with the batch) over to the piece. A graph
  converted to another device (``device_model``, :func:`tfplace.core.device_model.convert_graph`)
  has roofline times, linear in the work, and a CPU's fixed costs would not carry over: its pieces
  are costed as every other case below (:func:`scaling_of`).
* **channel**, on a graph whose profiling device computes channels in blocks (``channel_block``, a
  graph attribute: a CPU's float32 SIMD lanes, 16 with AVX-512, for oneDNN's blocked layouts
  ``nChw16c``): the piece costs what its blocks cost, ``t0 + (t - t0) * ceil(c/b) / ceil(C/b)`` for
  ``c`` of the op's ``C`` output channels in blocks of ``b``. Measured on this project's 2-core
  AVX-512 machine (one intra-op thread, 3x3 convolutions, forward and both gradients alike): 6 of 12
  channels take 0.98-1.00 of the whole op's time, 32 of 64 take 0.55-0.57, 16 of 64 take 0.31.
* **every other case** (another dimension, or no coefficients): the op's fixed overhead
  (:data:`PIECE_OVERHEAD`, a GPU kernel's launch, or the whole time when it is smaller) plus the
  piece's share of the rest: ``t0 + share * (t - t0)``. Dense kernels' work is proportional to the
  FLOPs of the output slice they compute (OptCNN section 5.1 assumes the same equal partitioning).

Memory: a sharded output slot holds ``share`` of the whole slot's bytes, a partial or replicated
slot all of them; temporary bytes scale by ``share``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tfplace.core.costgraph import CHANNEL_BLOCK

__all__ = ["PIECE_OVERHEAD", "piece_time", "scaling_of", "time_at_batch"]

PIECE_OVERHEAD = 8e-6
"""Seconds of an op's time that a split does not divide: a kernel's launch on a V100
(:attr:`tfplace.core.device_model.DeviceModel.launch_overhead`)."""


def scaling_of(graph_attrs: Mapping[str, Any]) -> tuple[int | None, int]:
    """``(batch_size, channel_block)`` for :func:`piece_time` from a cost graph's attributes: the
    batch size only when its times are the profiling device's (no ``device_model`` conversion), so
    that the regression's curve describes them; the channel block (1: channels in proportion)."""
    batch = None if graph_attrs.get("device_model") else graph_attrs.get("batch_size")
    return batch, int(graph_attrs.get(CHANNEL_BLOCK, 1))


def time_at_batch(batch_costs: Mapping[str, Any], batch: float) -> float:
    """The fitted time model of ``batch_costs["time"]`` at ``batch``, in the profiling device's
    seconds: ``["line", slope, intercept]``, ``["convex", slope, intercept, scale, exponent]`` (the
    larger of the line and the power law,
    :class:`~tfplace.estimator.regression.OpCostRegression`), or ``["power", scale, exponent]``
    (cost graphs written before the convex model).

    Raises
    ------
    ValueError
        Another model name.
    """
    model, *coefficients = batch_costs["time"]
    if model == "line":
        slope, intercept = coefficients
        return float(slope * batch + intercept)
    if model == "convex":
        slope, intercept, scale, exponent = coefficients
        return float(max(slope * batch + intercept, scale * batch**exponent))
    if model == "power":
        scale, exponent = coefficients
        return float(scale * batch**exponent)
    raise ValueError(f"unknown time model {model!r} in batch_costs (line, convex or power)")


def piece_time(
    attrs: Mapping[str, Any], dimension: str, share: float, batch_size: int | None, channel_block: int = 1
) -> float:
    """Seconds a piece doing ``share`` of op ``attrs`` along ``dimension`` takes (module docstring);
    ``channel_block``: the channels the graph's device computes together (1: in proportion)."""
    seconds = float(attrs["compute_time"])
    if share >= 1.0:
        return seconds
    coefficients = attrs.get("batch_costs")
    if dimension == "batch" and coefficients and batch_size:
        whole = time_at_batch(coefficients, batch_size)
        if whole > 0:
            return seconds * min(1.0, time_at_batch(coefficients, share * batch_size) / whole)
    if dimension == "channel" and channel_block > 1:
        share = _block_share(attrs, share, channel_block)
    fixed = min(seconds, PIECE_OVERHEAD)
    return fixed + share * (seconds - fixed)


def _block_share(attrs: Mapping[str, Any], share: float, block: int) -> float:
    """The share of the op's channel blocks a piece with ``share`` of its output channels computes;
    ``share`` itself when the output's channels are not recorded."""
    shapes = attrs.get("output_shapes")
    channels = shapes[0][-1] if shapes and shapes[0] else -1
    if channels <= 0:
        return share
    piece = max(1, round(share * channels))
    return min(1.0, math.ceil(piece / block) / math.ceil(channels / block))
