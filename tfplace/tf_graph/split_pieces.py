"""The inputs and outputs of pieces that need more than a slice: spatial pieces of convolutions,
their gradients and pooling (halos and explicit padding), and a gather's pieces over shards of its
table (ids offset and masked).

* A spatial piece of ``Conv2D``, ``Conv2DBackpropFilter`` (and their depthwise forms), ``MaxPool``
  or ``AvgPool`` computing the window's output rows ``lo:hi`` reads the input rows those windows cover (its halo: rows of the
  neighbouring slices) and runs with the clipped rows as explicit padding: ``EXPLICIT`` padding for
  the convolutions, a ``PadV2`` (``-inf`` for a max, zeros for an average) and ``VALID`` for the
  pooling. A filter gradient's pieces are partial sums over their rows, joined by ``AddN``.
* A spatial piece of ``Pad`` (``PadV2``) computing padded rows ``lo:hi`` reads the input rows among
  them and pads them by the part of the op's padding that falls in ``lo:hi`` (its other axes as the
  whole op pads them).
* An ``AvgPool`` piece averages zero-padded windows over their full size, so where the whole op's
  SAME windows hang over the border (and average only their valid values) the piece multiplies by
  ``size / valid count`` (:func:`~tfplace.tf_graph.split_windows.avg_pool_divisor_factor`): exact
  up to one rounding, on the border rows only.
* A piece of ``Conv2DBackpropInput`` (``V2``) computing input-gradient rows ``lo:hi`` reads the
  output-gradient rows whose windows touch them, computes the rows those windows cover with
  explicit padding for the windows' rows outside, and pads with zeros the rows no window reads.
* A piece of ``MaxPoolGrad`` or ``AvgPoolGrad`` computing input-gradient rows ``lo:hi`` runs every
  window touching them whole (``VALID`` on rows padded with ``-inf``; an average's gradient rows
  scaled by ``size / valid count``), keeps its rows and pads with zeros the rows no window reads.
* A piece of ``GatherV2`` over table rows ``lo:hi`` gathers ``clip(ids - lo, 0, hi - lo - 1)`` from
  its shard and keeps the rows whose id it holds, zeros elsewhere (a vocabulary-parallel
  embedding); the pieces' partial results are summed, where exactly one term of each row is not
  zero.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tfplace.split.rules import HEIGHT, REDUCTION, WIDTH
from tfplace.tf_graph.split_attrs import constant_value
from tfplace.tf_graph.split_nodes import DT_BOOL, DT_INT32
from tfplace.tf_graph.split_windows import (
    BACKWARD_INPUT,
    FILTER_GRADIENTS,
    PADDED,
    POOL_GRADIENTS,
    BackwardRows,
    avg_pool_divisor_factor,
    backward_rows,
    forward_rows,
    window,
)

__all__ = ["Rewriter", "finish_piece", "gather_shard_ids", "spatial_inputs"]


class Rewriter(Protocol):
    """What piece builders use of the rewriter: its node building
    (:class:`~tfplace.tf_graph.split_nodes.NodeBuilder`) and the tensors of the original graph as
    it holds them."""

    cache: dict[tuple[Any, ...], str]

    def region(self, tensor: Any, axis: int, lo: int, hi: int, device: str) -> str: ...
    def whole(self, tensor: Any, device: str) -> str: ...
    def node(self, op_type: str, name: str, inputs: Any, device: str, **attrs: Any) -> str: ...
    def const(self, value: Any, device: str, name: str) -> str: ...
    def pad(self, tensor: str, paddings: Any, value: Any, device: str, name: str) -> str: ...
    def slice(self, tensor: str, rank: int, axis: int, lo: int, hi: int, dtype: int, device: str) -> str: ...
    def dtype(self, dtype: int) -> Any: ...
    def integer(self, value: int) -> Any: ...


_FORWARD_CONVOLUTIONS = frozenset({"Conv2D", "DepthwiseConv2dNative"})
_CONVOLUTIONS = frozenset({*_FORWARD_CONVOLUTIONS, *FILTER_GRADIENTS, *BACKWARD_INPUT})


def _explicit(node: Any, paddings: list[list[int]]) -> None:
    from tensorflow.core.framework import attr_value_pb2

    node.attr["padding"].s = b"EXPLICIT"
    flat = [amount for pair in paddings for amount in pair]
    node.attr["explicit_paddings"].CopyFrom(
        attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(i=flat))
    )


def _padded_valid(op: Any) -> bool:
    """Whether the piece pads explicitly with zeros and runs ``VALID``: TensorFlow's CPU kernels of the
    convolution gradients take no explicit padding with dilations above 1."""
    if op.type not in _CONVOLUTIONS - _FORWARD_CONVOLUTIONS:
        return False
    return any(int(d) > 1 for d in op.get_attr("dilations"))


def _zero(tensor: Any) -> Any:
    return np.asarray(0, tensor.dtype.as_numpy_dtype)


def _piece_paddings(op: Any, axis: int, lo: int, hi: int) -> list[list[int]]:
    """Per NHWC axis, the padding (before, after) of the piece computing rows ``lo:hi`` along ``axis``:
    its own along ``axis``, the whole op's along the other spatial axis."""
    paddings = [[0, 0], [0, 0], [0, 0], [0, 0]]
    other = window(op, 3 - axis)
    paddings[3 - axis] = [other.before, other.after]
    geometry = window(op, axis)
    if op.type in BACKWARD_INPUT:
        rows = backward_rows(geometry, lo, hi)
        assert rows is not None
        paddings[axis] = list(rows.padding)
    else:
        paddings[axis] = list(forward_rows(geometry, lo, hi)[1])
    return paddings


def spatial_inputs(rw: Rewriter, op: Any, node: Any, axis: int, lo: int, hi: int, device: str) -> list[str]:
    """The inputs of ``node``, the piece of spatial op ``op`` computing rows ``lo:hi`` along ``axis``
    (module docstring); sets the piece's padding attributes."""
    if op.type in PADDED:
        return _padded_rows(rw, op, node, axis, lo, hi, device)
    if op.type in POOL_GRADIENTS:
        return _pool_gradient_inputs(rw, op, node, axis, lo, hi, device)
    paddings = _piece_paddings(op, axis, lo, hi)
    padded_valid = _padded_valid(op)
    if op.type in _CONVOLUTIONS and not padded_valid:
        _explicit(node, paddings)
    else:
        node.attr["padding"].s = b"VALID"
    if op.type in BACKWARD_INPUT:
        rows = backward_rows(window(op, axis), lo, hi)
        assert rows is not None  # refused otherwise
        if op.type == "Conv2DBackpropInputV2":  # reads its input for the shape only: the piece's rows
            sizes = rw.region(op.inputs[0], axis, *rows.rows, device)
            if padded_valid:
                sizes = rw.pad(sizes, paddings, _zero(op.inputs[0]), device, f"{node.name}/padded_input")
        else:
            shape = list(op.outputs[0].shape.as_list())
            shape[axis] = rows.rows[1] - rows.rows[0]
            if padded_valid:
                shape = [size + sum(pair) for size, pair in zip(shape, paddings)]
            sizes = rw.const(np.asarray(shape, np.int32), device, f"{node.name}/input_sizes")
        return [sizes, rw.whole(op.inputs[1], device), rw.region(op.inputs[2], axis, *rows.gradient, device)]
    (first, last), _ = forward_rows(window(op, axis), lo, hi)
    inputs = [rw.region(op.inputs[0], axis, first, last, device)]
    if (op.type not in _CONVOLUTIONS or padded_valid) and any(amount for pair in paddings for amount in pair):
        fill = np.asarray(-np.inf if op.type == "MaxPool" else 0, op.inputs[0].dtype.as_numpy_dtype)
        inputs = [rw.pad(inputs[0], paddings, fill, device, f"{node.name}/pad")]
    if op.type in FILTER_GRADIENTS:  # the filter's shape, as a constant on the piece's device
        filter_shape = np.asarray(op.outputs[0].shape.as_list(), op.inputs[1].dtype.as_numpy_dtype)
        inputs.append(rw.const(filter_shape, device, f"{node.name}/filter_sizes"))
    elif op.type in _CONVOLUTIONS:
        inputs.append(rw.whole(op.inputs[1], device))
    if op.type in FILTER_GRADIENTS:
        inputs.append(rw.region(op.inputs[2], axis, lo, hi, device))
    return inputs


def _pool_windows(op: Any, axis: int, lo: int, hi: int) -> tuple[BackwardRows, list[list[int]], int, int]:
    """For the piece of a pooling gradient computing input rows ``lo:hi`` along ``axis``: the rows of
    the windows that touch them, the padding that makes every such window whole (NHWC pairs), and
    the input rows ``start:end`` those windows read (beyond the image where padded)."""
    geometry = window(op, axis)
    rows = backward_rows(geometry, lo, hi)
    assert rows is not None  # refused otherwise
    first, last = rows.gradient
    start, end = geometry.start(first), geometry.start(last - 1) + geometry.extent
    paddings = [[0, 0], [0, 0], [0, 0], [0, 0]]
    other = window(op, 3 - axis)
    paddings[3 - axis] = [other.before, other.after]
    paddings[axis] = [max(0, -start), max(0, end - geometry.size)]
    return rows, paddings, start, end


def _pool_gradient_inputs(
    rw: Rewriter, op: Any, node: Any, axis: int, lo: int, hi: int, device: str
) -> list[str]:
    """The inputs of the piece of ``MaxPoolGrad`` or ``AvgPoolGrad`` computing input rows ``lo:hi``: the
    gradient rows of every window touching them, and, for a max, the input rows those windows read
    (padded with ``-inf`` where they overhang) and the windows' forward outputs, all run ``VALID``.
    An average's gradient rows are scaled by ``size / valid count`` where SAME's windows overhang
    (the whole op divides by the valid count, the piece's ``VALID`` windows by their size)."""
    rows, paddings, start, end = _pool_windows(op, axis, lo, hi)
    first, last = rows.gradient
    node.attr["padding"].s = b"VALID"
    gradient = rw.region(op.inputs[-1], axis, first, last, device)
    if op.type == "MaxPoolGrad":
        inputs = rw.region(op.inputs[0], axis, max(0, start), min(window(op, axis).size, end), device)
        if any(amount for pair in paddings for amount in pair):
            fill = np.asarray(-np.inf, op.inputs[0].dtype.as_numpy_dtype)
            inputs = rw.pad(inputs, paddings, fill, device, f"{node.name}/pad")
        return [inputs, rw.region(op.inputs[1], axis, first, last, device), gradient]
    factor = avg_pool_divisor_factor(op, axis, first, last)
    if factor is not None:
        dtype = op.inputs[-1].dtype
        weights = rw.const(factor.astype(dtype.as_numpy_dtype), device, f"{node.name}/divisor")
        gradient = rw.node(
            "Mul",
            f"{node.name}/valid_average",
            [gradient, weights],
            device,
            T=rw.dtype(dtype.as_datatype_enum),
        )
    shape = [size + sum(pair) for size, pair in zip(op.outputs[0].shape.as_list(), paddings)]
    shape[axis] = end - start
    return [rw.const(np.asarray(shape, np.int32), device, f"{node.name}/input_shape"), gradient]


def _padded_rows(rw: Rewriter, op: Any, node: Any, axis: int, lo: int, hi: int, device: str) -> list[str]:
    """The inputs of the piece of a ``Pad`` computing padded rows ``lo:hi`` along ``axis``: the input
    rows among them, and the op's paddings with ``axis``'s made the part of its padding in ``lo:hi``."""
    (first, last), padding = forward_rows(window(op, axis), lo, hi)
    paddings = np.array(constant_value(op.inputs[1]))
    paddings[axis] = padding
    amounts = rw.const(paddings.astype(op.inputs[1].dtype.as_numpy_dtype), device, f"{node.name}/paddings")
    rest = [rw.whole(tensor, device) for tensor in op.inputs[2:]]  # PadV2's constant_values
    return [rw.region(op.inputs[0], axis, first, last, device), amounts, *rest]


def gather_shard_ids(rw: Rewriter, ids: str, tensor: Any, lo: int, hi: int, device: str, name: str) -> str:
    """The ids a gather's piece over table rows ``lo:hi`` reads: offset into its shard and clipped to
    it (:func:`finish_piece` zeroes the rows of ids it does not hold)."""
    dtype = tensor.dtype
    numpy_type, enum = dtype.as_numpy_dtype, rw.dtype(dtype.as_datatype_enum)
    local = rw.node(
        "Sub",
        f"{name}/local_ids",
        [ids, rw.const(numpy_type(lo), device, f"{name}/first_row")],
        device,
        T=enum,
    )
    floor = rw.node(
        "Maximum",
        f"{name}/ids_above",
        [local, rw.const(numpy_type(0), device, f"{name}/zero")],
        device,
        T=enum,
    )
    clipped = rw.node(
        "Minimum",
        f"{name}/shard_ids",
        [floor, rw.const(numpy_type(hi - lo - 1), device, f"{name}/last")],
        device,
        T=enum,
    )
    rw.cache[("local_ids", name)], rw.cache[("shard_ids", name)] = local, clipped
    return clipped


def _gather_mask(rw: Rewriter, op: Any, piece: str, device: str) -> str:
    """The piece's gathered rows where its shard holds the id, zeros elsewhere."""
    local, clipped = rw.cache[("local_ids", piece)], rw.cache[("shard_ids", piece)]
    ids = op.inputs[1]
    enum = rw.dtype(ids.dtype.as_datatype_enum)
    held = rw.node("Equal", f"{piece}/held", [local, clipped], device, T=enum)
    rank_out, rank_ids = op.outputs[0].shape.rank, ids.shape.rank
    shape = np.asarray([*ids.shape.as_list(), *[1] * (rank_out - rank_ids)], np.int32)
    mask = rw.node(
        "Reshape",
        f"{piece}/held_rows",
        [held, rw.const(shape, device, f"{piece}/mask_shape")],
        device,
        T=rw.dtype(DT_BOOL),
        Tshape=rw.dtype(DT_INT32),
    )
    out_type = rw.dtype(op.outputs[0].dtype.as_datatype_enum)
    zeros = rw.node("ZerosLike", f"{piece}/zeros", [piece], device, T=out_type)
    return rw.node("SelectV2", f"{piece}/held_only", [mask, piece, zeros], device, T=out_type)


def _pool_gradient_rows(rw: Rewriter, op: Any, piece: str, axis: int, lo: int, hi: int, device: str) -> str:
    """The rows ``lo:hi`` of a pooling gradient's piece, which computed the padded rows of every window
    touching them: cropped to the image's other axis and to ``lo:hi``, zeros where no window reads."""
    rows, paddings, start, _ = _pool_windows(op, axis, lo, hi)
    output = op.outputs[0]
    dtype = output.dtype.as_datatype_enum
    other = 3 - axis
    before = paddings[other][0]
    piece = rw.slice(piece, 4, other, before, before + output.shape[other], dtype, device)
    piece = rw.slice(piece, 4, axis, rows.rows[0] - start, rows.rows[1] - start, dtype, device)
    if not any(rows.zeros):
        return piece
    zeros = [[0, 0]] * 4
    zeros[axis] = list(rows.zeros)
    return rw.pad(piece, zeros, _zero(output), device, f"{piece.partition(':')[0]}/unread_rows")


def finish_piece(
    rw: Rewriter, op: Any, dimension: str | None, piece: str, lo: int, hi: int, size: int, device: str
) -> str:
    """The tensor standing for output 0 of ``piece``: the piece itself, or what corrects it into its
    part of the whole op's output (module docstring)."""
    axis = {HEIGHT: 1, WIDTH: 2}.get(dimension or "")
    if op.type == "AvgPool" and axis is not None:
        factor = avg_pool_divisor_factor(op, axis, lo, hi)
        if factor is None:
            return piece
        weights = rw.const(factor.astype(op.outputs[0].dtype.as_numpy_dtype), device, f"{piece}/divisor")
        return rw.node(
            "Mul",
            f"{piece}/valid_average",
            [piece, weights],
            device,
            T=rw.dtype(op.outputs[0].dtype.as_datatype_enum),
        )
    if op.type in BACKWARD_INPUT and axis is not None:
        rows = backward_rows(window(op, axis), lo, hi)
        assert rows is not None
        paddings = _piece_paddings(op, axis, lo, hi)
        output = op.outputs[0]
        if _padded_valid(op) and any(sum(pair) for pair in paddings):  # crop the padding off
            dtype, shape = output.dtype.as_datatype_enum, output.shape.as_list()
            shape[axis] = rows.rows[1] - rows.rows[0]
            for spatial in (1, 2):
                before = paddings[spatial][0]
                piece = rw.slice(piece, 4, spatial, before, before + shape[spatial], dtype, device)
        if not any(rows.zeros):
            return piece
        zeros = [[0, 0]] * 4
        zeros[axis] = list(rows.zeros)
        return rw.pad(piece, zeros, _zero(output), device, f"{piece.partition(':')[0]}/unread_rows")
    if op.type in POOL_GRADIENTS and axis is not None:
        return _pool_gradient_rows(rw, op, piece, axis, lo, hi, device)
    if op.type == "GatherV2" and dimension == REDUCTION:
        return _gather_mask(rw, op, piece, device)
    return piece
