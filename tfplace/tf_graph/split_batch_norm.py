"""Synchronized batch norm: a training ``FusedBatchNorm``/``FusedBatchNormV3`` and its gradient
split along the batch, with per-channel statistics combined exactly over the pieces.

A training batch norm normalizes with the mean and variance of the whole batch, so pieces cannot
each use their own. The rewrite decomposes the op into sums over the pieces (the cross-replica
batch norm of synchronized data parallelism), computed as the fused kernel computes them:

* forward: each piece sums its rows per channel; the first device adds the sums into the mean; each
  piece sums its squared deviations from that mean; the first device adds them into the (biased)
  variance; each piece then normalizes its rows with the combined moments,
  ``(x - mean) * scale / sqrt(var + eps) + offset`` as the fused kernel does. The op's other outputs are whole on the first device: the batch mean and the
  Bessel-corrected variance (blended with the running statistics when ``exponential_avg_factor`` is
  not 1), and the mean and biased variance as the reserve spaces a CPU kernel saves for the gradient;
* gradient (``offset' = sum(dy)``, ``scale' = sum(dy * x_hat)``,
  ``x' = scale / sqrt(var + eps) * (dy - offset' / n - x_hat * scale' / n)`` with
  ``x_hat = (x - mean) / sqrt(var + eps)``): each piece sums its rows of ``dy`` and ``dy * x_hat``,
  the first device adds them into the two weight gradients, and each piece forms its rows of ``x'``.
  The moments are the ones the synchronized forward computed, or, when the forward ran otherwise,
  recomputed from the gradient's ``x`` input as the forward does (a GPU kernel's reserve spaces hold
  an inverse deviation, not the variance).

Pieces agree with the whole op up to the order of float sums. The plan's partition rule
(:data:`tfplace.split.rules.RULES`, batch pieces with partial statistics) prices these sums as the
all-reduce of a vector per channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfplace.tf_graph.split_nodes import DT_INT32
from tfplace.tf_graph.split_pieces import Rewriter

__all__ = ["Moments", "synchronized_batch_norm", "synchronized_batch_norm_grad"]

Moments = tuple[str, str]
"""The whole batch's mean and biased variance per channel, tensors on the first piece's device."""


class _Builder:
    """Element-wise and per-channel nodes of one split batch norm, in the op's statistics type."""

    def __init__(self, rw: Rewriter, op: Any, devices: Sequence[str]) -> None:
        self.rw, self.op, self.devices = rw, op, devices
        self.x_type = op.inputs[0].dtype
        self.u_type = op.inputs[2].dtype  # scale: the statistics' type (``U``, float32)
        shape = op.inputs[0].shape.as_list()
        self.count = int(np.prod(shape)) // shape[3]
        self.base = f"{op.name}/sync"

    def node(self, op_type: str, inputs: Sequence[str], device: str, **attrs: Any) -> str:
        return self.rw.node(op_type, f"{self.base}/{op_type.lower()}", inputs, device, **attrs)

    def binary(self, op_type: str, a: str, b: str, device: str) -> str:
        return self.node(op_type, [a, b], device, T=self.rw.dtype(self.u_type.as_datatype_enum))

    def scalar(self, value: float, device: str) -> str:
        return self.rw.const(np.asarray(value, self.u_type.as_numpy_dtype), device, f"{self.base}/c")

    def to_statistics_type(self, tensor: str, device: str) -> str:
        return self._cast(tensor, device, self.x_type, self.u_type)

    def to_input_type(self, tensor: str, device: str) -> str:
        return self._cast(tensor, device, self.u_type, self.x_type)

    def _cast(self, tensor: str, device: str, source: Any, target: Any) -> str:
        if source == target:
            return tensor
        return self.node(
            "Cast",
            [tensor],
            device,
            SrcT=self.rw.dtype(source.as_datatype_enum),
            DstT=self.rw.dtype(target.as_datatype_enum),
        )

    def channel_sum(self, tensor: str, device: str) -> str:
        """Per-channel sum of a piece's rows (NHWC, the only layout the rules split: every axis but the
        last)."""
        from tensorflow.core.framework import attr_value_pb2

        axes = np.asarray([0, 1, 2], np.int32)
        return self.node(
            "Sum",
            [tensor, self.rw.const(axes, device, f"{self.base}/axes")],
            device,
            T=self.rw.dtype(self.u_type.as_datatype_enum),
            Tidx=self.rw.dtype(DT_INT32),
            keep_dims=attr_value_pb2.AttrValue(b=False),
        )

    def total(self, parts: Sequence[str], scale: float) -> str:
        """``scale`` times the sum of the pieces' ``parts``, on the first device."""
        first = self.devices[0]
        added = (
            parts[0]
            if len(parts) == 1
            else self.node(
                "AddN",
                parts,
                first,
                T=self.rw.dtype(self.u_type.as_datatype_enum),
                N=self.rw.integer(len(parts)),
            )
        )
        return self.binary("Mul", added, self.scalar(scale, first), first)

    def moments(self, rows: Sequence[str]) -> tuple[Moments, list[str]]:
        """The two-pass mean and biased variance of the pieces' ``rows`` (statistics type), and each
        piece's rows less the mean."""
        sums = [self.channel_sum(x, d) for x, d in zip(rows, self.devices)]
        mean = self.total(sums, 1.0 / self.count)
        centered = [self.binary("Sub", x, mean, d) for x, d in zip(rows, self.devices)]
        squares = [
            self.channel_sum(self.node("Square", [c], d, T=self.statistics_type()), d)
            for c, d in zip(centered, self.devices)
        ]
        return (mean, self.total(squares, 1.0 / self.count)), centered

    def inverse_deviation(self, variance: str) -> str:
        """``1 / sqrt(variance + epsilon)`` on the first device."""
        first = self.devices[0]
        epsilon = self.scalar(self.op.get_attr("epsilon"), first)
        return self.node(
            "Rsqrt", [self.binary("AddV2", variance, epsilon, first)], first, T=self.statistics_type()
        )

    def statistics_type(self) -> Any:
        return self.rw.dtype(self.u_type.as_datatype_enum)


def _rows(
    rw: Rewriter, op: Any, slot: int, ranges: Sequence[tuple[int, int]], devices: Sequence[str]
) -> list[str]:
    return [rw.region(op.inputs[slot], 0, lo, hi, d) for (lo, hi), d in zip(ranges, devices)]


def synchronized_batch_norm(
    rw: Rewriter, op: Any, ranges: Sequence[tuple[int, int]], devices: Sequence[str]
) -> tuple[list[str], list[str], Moments]:
    """Pieces of a training batch norm (module docstring): the pieces' normalized rows (output 0),
    the op's other outputs whole on ``devices[0]``, and the combined moments."""
    build = _Builder(rw, op, devices)
    first = devices[0]
    rows = _rows(rw, op, 0, ranges, devices)
    (mean, variance), centered = build.moments(
        [build.to_statistics_type(x, d) for x, d in zip(rows, devices)]
    )
    coefficient = build.binary("Mul", rw.whole(op.inputs[1], first), build.inverse_deviation(variance), first)
    normalized = []
    for rows_less_mean, device in zip(centered, devices):
        scaled = build.binary("Mul", rows_less_mean, coefficient, device)
        shifted = build.binary("AddV2", scaled, rw.whole(op.inputs[2], device), device)
        normalized.append(build.to_input_type(shifted, device))
    unbiased = build.binary(
        "Mul", variance, build.scalar(build.count / max(build.count - 1, 1), first), first
    )
    running = [_blend(build, op, slot, value) for slot, value in ((3, mean), (4, unbiased))]
    others = [*running, mean, variance]
    if len(op.outputs) > 5:  # V3's reserve_space_3: unused on every device
        others.append(rw.const(np.zeros(0, build.u_type.as_numpy_dtype), first, f"{build.base}/reserve"))
    return normalized, others, (mean, variance)


def _blend(build: _Builder, op: Any, slot: int, batch_value: str) -> str:
    """Output 1 or 2: the batch statistic, blended with the running one (input ``slot``) when the op
    keeps an exponential average itself (``exponential_avg_factor`` below 1)."""
    factor = op.get_attr("exponential_avg_factor") if "exponential_avg_factor" in op.node_def.attr else 1.0
    if factor == 1.0:
        return batch_value
    first = build.devices[0]
    running = build.rw.whole(op.inputs[slot], first)
    kept = build.binary("Mul", running, build.scalar(1.0 - factor, first), first)
    new = build.binary("Mul", batch_value, build.scalar(factor, first), first)
    return build.binary("AddV2", kept, new, first)


def synchronized_batch_norm_grad(
    rw: Rewriter,
    op: Any,
    ranges: Sequence[tuple[int, int]],
    devices: Sequence[str],
    moments: Moments | None,
) -> tuple[list[str], list[str]]:
    """Pieces of a training batch norm's gradient (module docstring): the pieces' rows of the input
    gradient (output 0) and the op's other outputs whole on ``devices[0]``. ``moments`` are the
    synchronized forward's, or ``None`` to recompute them from ``x``."""
    build = _Builder(rw, op, devices)
    first = devices[0]
    dys = [build.to_statistics_type(t, d) for t, d in zip(_rows(rw, op, 0, ranges, devices), devices)]
    xs = [build.to_statistics_type(t, d) for t, d in zip(_rows(rw, op, 1, ranges, devices), devices)]
    if moments is None:
        (mean, variance), centered = build.moments(xs)
    else:
        mean, variance = moments
        centered = [build.binary("Sub", x, mean, d) for x, d in zip(xs, devices)]
    inverse = build.inverse_deviation(variance)
    normalized = [build.binary("Mul", c, inverse, d) for c, d in zip(centered, devices)]
    offset_grad = build.total([build.channel_sum(dy, d) for dy, d in zip(dys, devices)], 1.0)
    products = [build.binary("Mul", dy, x_hat, d) for dy, x_hat, d in zip(dys, normalized, devices)]
    scale_grad = build.total([build.channel_sum(p, d) for p, d in zip(products, devices)], 1.0)
    coefficient = build.binary("Mul", rw.whole(op.inputs[2], first), inverse, first)
    mean_dy = build.binary("Mul", offset_grad, build.scalar(1.0 / build.count, first), first)
    mean_dy_x_hat = build.binary("Mul", scale_grad, build.scalar(1.0 / build.count, first), first)
    input_grads = []
    for dy, x_hat, device in zip(dys, normalized, devices):
        centered_dy = build.binary("Sub", dy, mean_dy, device)
        along = build.binary("Mul", x_hat, mean_dy_x_hat, device)
        grad = build.binary("Mul", coefficient, build.binary("Sub", centered_dy, along, device), device)
        input_grads.append(build.to_input_type(grad, device))
    empty = [
        rw.const(np.zeros(0, build.u_type.as_numpy_dtype), first, f"{build.base}/reserve")
        for _ in op.outputs[3:]
    ]
    return input_grads, [scale_grad, offset_grad, *empty]
