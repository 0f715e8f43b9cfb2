"""How the pieces of a split TensorFlow op read their inputs: which range of which axis, of what size.

A split cuts one dimension of the op into ranges by the plan's shares (:func:`piece_ranges`); a
piece reads each input in the layout of the op's partition rule (:mod:`tfplace.split.rules`),
except scalars and broadcast operands, which it reads whole (:func:`read_layout`). A depthwise
convolution's output channels are its input channels times the channel multiplier: a range of
input channels is ``multiplier`` times that range of a tensor with the output's channels
(:func:`range_scale`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from tfplace.split.rules import BATCH, RULES, Layout, SplitRule
from tfplace.tf_graph.split_windows import SPATIAL, piece_axis_size

__all__ = [
    "CHANNEL_MULTIPLIED",
    "axis_of",
    "dimension",
    "piece_ranges",
    "range_scale",
    "read_layout",
    "sliced_sizes",
    "static_shape",
]

CHANNEL_MULTIPLIED = frozenset(
    {"DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"}
)
"""Op types whose sliced tensors may hold a whole multiple of the split dimension (channels times
the depthwise channel multiplier)."""
_ELEMENTWISE_RULE = RULES["AddV2"][BATCH]


def piece_ranges(size: int, shares: Sequence[float]) -> list[tuple[int, int]]:
    """``[lo, hi)`` of each piece of a dimension of ``size`` cut by ``shares``."""
    bounds = [0, *(round(size * sum(shares[: i + 1])) for i in range(len(shares)))]
    bounds[-1] = size
    return list(pairwise(bounds))


def static_shape(tensor: Any) -> tuple[int | None, ...]:
    return () if tensor.shape.rank is None else tuple(tensor.shape.as_list())


def axis_of(layout: Layout, rank: int) -> int:
    assert layout.axis is not None
    return layout.axis % rank if rank else 0


def read_layout(op: Any, rule: SplitRule, slot: int) -> Layout:
    """How a piece reads input ``slot``: as the rule says, except a scalar (an axis, a shape) and an
    element-wise op's operand broadcast along the split axis (a bias vector), which it reads whole."""
    layout = rule.read(slot)
    shape, out = static_shape(op.inputs[slot]), static_shape(op.outputs[0])
    if not shape or (rule is _ELEMENTWISE_RULE and (len(shape) != len(out) or shape[0] == 1 != out[0])):
        return Layout("replicated")
    return layout


def sliced_sizes(op: Any, rule: SplitRule) -> list[int | None]:
    """The static size along its axis of every input a piece reads a slice of."""
    sizes = []
    for slot, tensor in enumerate(op.inputs):
        layout = read_layout(op, rule, slot)
        if layout.kind == "sharded":
            shape = static_shape(tensor)
            sizes.append(shape[axis_of(layout, len(shape))])
    return sizes


def dimension(op: Any, rule: SplitRule) -> tuple[int, int | None]:
    """The axis and static size of the dimension a piece's range runs over: a spatial split's rows
    (:func:`~tfplace.tf_graph.split_windows.piece_axis_size`), else the first sliced input's axis."""
    halos = [layout for layout in rule.reads if layout.kind == "halo"]
    if halos and op.type in SPATIAL:
        axis = axis_of(halos[0], 4)
        return axis, piece_axis_size(op, axis)
    for slot in range(len(op.inputs)):
        layout = read_layout(op, rule, slot)
        if layout.kind == "sharded":
            shape = static_shape(op.inputs[slot])
            axis = axis_of(layout, len(shape))
            return axis, shape[axis]
    for slot, tensor in enumerate(op.outputs if not op.inputs else ()):  # a placeholder
        if rule.write(slot).kind == "sharded" and tensor.shape.rank:
            shape = static_shape(tensor)
            axis = axis_of(rule.write(slot), len(shape))
            return axis, shape[axis]
    return 0, None


def range_scale(op: Any, tensor: Any, axis: int, size: int) -> int:
    """How many of ``tensor``'s rows along ``axis`` one unit of the split dimension (of ``size``)
    covers: the channel multiplier for a depthwise convolution's output channels, else 1."""
    if op.type not in CHANNEL_MULTIPLIED:
        return 1
    rows = static_shape(tensor)[axis]
    return rows // size if rows is not None and size and rows % size == 0 else 1
