"""What a TensorFlow op's split needs to know about it: the ``attrs`` and ``output_shapes`` fields
of cost-graph schema version 3 (:mod:`tfplace.split.rules` reads them).

This module imports TensorFlow (lazily) and works on ``tf.Operation`` objects.
"""

from __future__ import annotations

from typing import Any

from tfplace.core.costgraph import CostGraph

__all__ = ["annotate_split_fields", "op_inputs", "op_output_shapes", "op_split_attrs"]

_FLAG_ATTRS = ("transpose_a", "transpose_b", "adj_x", "adj_y")
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Min", "Prod"})
_AXIS_INPUT = {"ConcatV2": -1, "Split": 0, "GatherV2": 2}
"""Op type -> the input that holds its axis."""


def _constant(tensor: Any) -> Any:
    """The value of ``tensor`` when it is a ``Const`` op's output, else ``None``."""
    from tensorflow.python.framework import tensor_util

    if tensor.op.type != "Const":
        return None
    return tensor_util.MakeNdarray(tensor.op.get_attr("value"))


def _rank(tensor: Any) -> int | None:
    return tensor.shape.rank


def _keeps_axis0(op: Any) -> bool | None:
    """Whether slicing axis 0 of the op's first data input slices axis 0 of its outputs alike."""
    if op.type == "Transpose":
        perm = _constant(op.inputs[1])
        return None if perm is None else bool(int(perm.flat[0]) == 0)
    if op.type == "Reshape":
        before, after = op.inputs[0].shape, op.outputs[0].shape
        if before.rank is None or after.rank is None or before.rank == 0 or after.rank == 0:
            return None
        # Row-major order: contiguous slices of a batch-led tensor stay contiguous rows.
        return (
            before[0] == after[0]  # both unknown (the batch), or the same static size
            and before[1:].is_fully_defined()
            and after[1:].is_fully_defined()
        )
    axis = _constant(op.inputs[_AXIS_INPUT[op.type]])
    rank = _rank(op.outputs[0])
    if axis is None or rank is None:
        return None
    return int(axis) % max(rank, 1) != 0


def op_split_attrs(op: Any) -> dict[str, Any] | None:
    """The attributes :mod:`tfplace.split.rules` conditions on, for ``op``; ``None`` when it has none."""
    attrs: dict[str, Any] = {}
    node_attrs = op.node_def.attr
    if "data_format" in node_attrs:
        attrs["data_format"] = node_attrs["data_format"].s.decode()
    for name in _FLAG_ATTRS:
        if name in node_attrs:
            attrs[name] = bool(node_attrs[name].b)
    if op.type in _REDUCTIONS:
        axes = _constant(op.inputs[1])
        rank = _rank(op.inputs[0])
        if axes is not None and rank:
            attrs["reduces_axis0"] = 0 in {int(a) % rank for a in axes.flat}
    if op.type in ("ConcatV2", "Split", "Reshape", "Transpose"):
        keeps = _keeps_axis0(op)
        if keeps is not None:
            attrs["keeps_axis0"] = keeps
    if op.type == "GatherV2":
        axis = _constant(op.inputs[2])
        if axis is not None:
            attrs["axis"] = int(axis)
    return attrs or None


def op_output_shapes(op: Any) -> tuple[tuple[int, ...], ...] | None:
    """Each output's static shape with ``-1`` for unknown dimensions; ``None`` when a rank is unknown."""
    shapes = []
    for tensor in op.outputs:
        if tensor.shape.rank is None:
            return None
        shapes.append(tuple(-1 if d is None else int(d) for d in tensor.shape.as_list()))
    return tuple(shapes)


def op_inputs(op: Any) -> tuple[tuple[str, int], ...]:
    """``(producer, slot)`` of each data input of ``op``, in input order."""
    return tuple((tensor.op.name, tensor.value_index) for tensor in op.inputs)


def annotate_split_fields(graph: CostGraph, tf_graph: Any) -> int:
    """Write ``attrs``, ``output_shapes`` and ``inputs`` of every op of ``graph`` found in ``tf_graph`` by name
    (in place; a cost graph saved before version 3 gains what splitting needs without profiling
    again). Returns how many ops were annotated."""
    annotated = 0
    for op in tf_graph.get_operations():
        if op.name not in graph:
            continue
        node = graph.nodes[op.name]
        node["attrs"] = op_split_attrs(op)
        shapes = op_output_shapes(op)
        node["output_shapes"] = (
            shapes if shapes is not None and len(shapes) == len(node["output_sizes"]) else None
        )
        node["inputs"] = op_inputs(op)
        annotated += 1
    return annotated
