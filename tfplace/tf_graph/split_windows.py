"""Window arithmetic of spatial splits: which rows a piece of a convolution, a pooling or a
convolution's gradient reads, and with what padding (NHWC; axis 1 is the height, 2 the width).

A window op maps input rows to output rows: output row ``o`` reads input rows
``o * stride - before`` to ``o * stride - before + extent`` (TensorFlow's SAME, VALID and EXPLICIT
padding; ``extent`` is the dilated kernel's). A piece computing output rows ``lo:hi`` reads the
input rows its windows cover, clipped to the image, with the clipped rows made explicit padding
(:func:`forward_rows`). The input gradient is the transposed map: a piece computing input-gradient
rows ``lo:hi`` reads the output-gradient rows whose windows touch them (:func:`backward_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfplace.tf_graph.split_attrs import constant_value

__all__ = [
    "BACKWARD_INPUT",
    "FILTER_GRADIENTS",
    "PADDED",
    "POOL_GRADIENTS",
    "SPATIAL",
    "BackwardRows",
    "Window",
    "avg_pool_divisor_factor",
    "backward_rows",
    "forward_rows",
    "window",
]

PADDED = frozenset({"Pad", "PadV2"})
"""Constant padding: a window of one row at stride 1, padded as the op pads the axis."""
FILTER_GRADIENTS = frozenset({"Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"})
"""Filter gradients: ``(input, filter_sizes, output_gradient)``, summed over the output's rows."""
FORWARD = frozenset({"Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", *FILTER_GRADIENTS, *PADDED})
"""Ops whose pieces compute a range of the forward window's output rows (a filter gradient sums
over them)."""
BACKWARD_INPUT = frozenset(
    {"Conv2DBackpropInput", "Conv2DBackpropInputV2", "DepthwiseConv2dNativeBackpropInput"}
)
"""Ops whose pieces compute a range of the forward window's input rows (the input gradient)."""
POOL_GRADIENTS = frozenset({"MaxPoolGrad", "AvgPoolGrad"})
"""Pooling's input gradients: pieces compute ranges of the forward window's input rows, running the
windows that touch them whole (``VALID`` on padded rows) and keeping their own rows."""
SPATIAL = FORWARD | BACKWARD_INPUT | POOL_GRADIENTS
"""Op types the rewrite splits along the height and the width."""


@dataclass(frozen=True)
class Window:
    """One spatial axis of a window op: dilated kernel extent, stride, padding before and after,
    and the forward op's input and output sizes along the axis."""

    extent: int
    stride: int
    before: int
    after: int
    size: int
    out: int

    def start(self, row: int) -> int:
        """The first input row output row ``row``'s window reads (negative: padding)."""
        return row * self.stride - self.before


def _dim(tensor: Any, axis: int) -> int:
    return int(tensor.shape[axis])


def window(op: Any, axis: int) -> Window:
    """``op``'s :class:`Window` along ``axis`` (1 height, 2 width)."""
    if op.type in PADDED:
        before, after = (int(amount) for amount in constant_value(op.inputs[1])[axis])
        return Window(1, 1, before, after, _dim(op.inputs[0], axis), _dim(op.outputs[0], axis))
    strides = list(op.get_attr("strides"))
    if op.type in ("MaxPool", "AvgPool", *POOL_GRADIENTS):
        kernel, dilation = int(list(op.get_attr("ksize"))[axis]), 1
    else:
        filter_shape = op.outputs[0] if op.type in FILTER_GRADIENTS else op.inputs[1]
        kernel, dilation = _dim(filter_shape, axis - 1), int(list(op.get_attr("dilations"))[axis])
    if op.type in BACKWARD_INPUT or op.type in POOL_GRADIENTS:
        size, out = _dim(op.outputs[0], axis), _dim(op.inputs[-1], axis)
    elif op.type in FILTER_GRADIENTS:
        size, out = _dim(op.inputs[0], axis), _dim(op.inputs[2], axis)
    else:
        size, out = _dim(op.inputs[0], axis), _dim(op.outputs[0], axis)
    extent, stride = (kernel - 1) * dilation + 1, int(strides[axis])
    padding = op.get_attr("padding").decode()
    if padding == "EXPLICIT":
        pads = list(op.get_attr("explicit_paddings"))
        return Window(extent, stride, int(pads[2 * axis]), int(pads[2 * axis + 1]), size, out)
    total = max((out - 1) * stride + extent - size, 0) if padding == "SAME" else 0
    return Window(extent, stride, total // 2, total - total // 2, size, out)


def piece_axis_size(op: Any, axis: int) -> int:
    """The rows a spatial split of ``op`` divides among its pieces: output rows of the forward window,
    input rows for an input gradient."""
    geometry = window(op, axis)
    return geometry.size if op.type in BACKWARD_INPUT or op.type in POOL_GRADIENTS else geometry.out


def forward_rows(w: Window, lo: int, hi: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The input rows output rows ``lo:hi`` read, clipped to the input, and the padding (before,
    after) that stands for the clipped rows."""
    first, last = w.start(lo), w.start(hi - 1) + w.extent
    return (max(0, first), min(w.size, last)), (max(0, -first), max(0, last - w.size))


@dataclass(frozen=True)
class BackwardRows:
    """What the piece of an input gradient computing input rows ``lo:hi`` needs.

    ``gradient``: the output-gradient rows whose windows touch ``lo:hi``; ``rows``: the input rows
    those windows cover within ``lo:hi`` (the piece computes them, with ``padding`` standing for the
    windows' rows outside); ``zeros``: rows before and after ``rows`` that no window reads (a stride
    above the kernel's extent, VALID's unread last rows), whose gradient is zero."""

    gradient: tuple[int, int]
    rows: tuple[int, int]
    padding: tuple[int, int]
    zeros: tuple[int, int]


def backward_rows(w: Window, lo: int, hi: int) -> BackwardRows | None:
    """:class:`BackwardRows` of input-gradient rows ``lo:hi``; ``None`` when no window reads them."""
    first = max(0, -(-(lo + w.before - w.extent + 1) // w.stride))
    last = min(w.out, (hi - 1 + w.before) // w.stride + 1)
    if first >= last:
        return None
    start, end = w.start(first), w.start(last - 1) + w.extent
    rows = (max(lo, start), min(hi, end))
    if rows[0] >= rows[1]:
        return None
    return BackwardRows(
        (first, last),
        rows,
        (rows[0] - start, end - rows[1]),
        (rows[0] - lo, hi - rows[1]),
    )


def _valid_counts(w: Window, lo: int, hi: int) -> np.ndarray:
    """Per output row ``lo:hi``, how many of its window's rows lie inside the input."""
    starts = np.arange(lo, hi) * w.stride - w.before
    return np.minimum(starts + w.extent, w.size) - np.maximum(starts, 0)


def avg_pool_divisor_factor(op: Any, axis: int, lo: int, hi: int) -> np.ndarray | None:
    """For the piece of ``AvgPool`` computing output rows ``lo:hi`` along ``axis`` as a VALID average
    over zero-padded rows (every window divided by its full size): the factor ``size / valid count``
    per output position (shape ``[1, rows, columns, 1]``) that turns it into the whole op's average
    of the valid values only (SAME's border windows); ``None`` when every window is inside."""
    counts = []
    for spatial in (1, 2):
        w = window(op, spatial)
        rows = (lo, hi) if spatial == axis else (0, w.out)
        counts.append(_valid_counts(w, *rows).astype(np.float64) / w.extent)
    factor = 1.0 / np.outer(counts[0], counts[1])
    if np.all(factor == 1.0):
        return None
    return factor[np.newaxis, :, :, np.newaxis]
