"""What a TensorFlow op's split needs to know about it: the ``attrs`` and ``output_shapes`` fields
of cost-graph schema version 3 (:mod:`tfplace.split.rules` reads them).

This module imports TensorFlow (lazily) and works on ``tf.Operation`` objects.
"""

from __future__ import annotations

from typing import Any

from tfplace.core.costgraph import CostGraph

__all__ = [
    "PADS",
    "PROBE_BATCHES",
    "annotate_split_fields",
    "constant_value",
    "op_inputs",
    "op_output_shapes",
    "op_split_attrs",
    "probed_split_attrs",
]

_FLAG_ATTRS = ("transpose_a", "transpose_b", "adj_x", "adj_y")
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Min", "Prod"})
PADS = frozenset({"Pad", "PadV2", "MirrorPad"})
"""Op types whose input 1 holds the paddings, ``[rank, 2]`` amounts before and after each axis."""
_AXIS_INPUT = {"ConcatV2": -1, "Split": 0, "GatherV2": 2}
"""Op type -> the input that holds its axis."""


def constant_value(tensor: Any) -> Any:
    """The value of ``tensor`` when it is a ``Const`` op's output, else ``None``."""
    from tensorflow.python.framework import tensor_util

    if tensor.op.type != "Const":
        return None
    return tensor_util.MakeNdarray(tensor.op.get_attr("value"))


def _rank(tensor: Any) -> int | None:
    return tensor.shape.rank


def _leads_with_batch(tensor: Any) -> bool:
    """Whether ``tensor``'s leading dimension is unknown statically (the batch)."""
    return bool(tensor.shape.rank) and tensor.shape[0] is None


def _keeps_axis0(op: Any) -> bool | None:
    """Whether slicing axis 0 of the op's first data input slices axis 0 of its outputs alike."""
    if op.type == "Transpose":
        perm = constant_value(op.inputs[1])
        return None if perm is None else bool(int(perm.flat[0]) == 0)
    if op.type in ("Reshape", "Slice"):
        before, after = op.inputs[0].shape, op.outputs[0].shape
        if before.rank is None or after.rank is None or before.rank == 0 or after.rank == 0:
            return None
        # Row-major order: contiguous slices of a batch-led tensor stay contiguous rows; a Slice
        # whose result still leads with the unknown batch is taken to keep all of it (a concat's
        # gradient slicing channels), since a begin computed at run time is not known here.
        return (
            before[0] == after[0]  # both unknown (the batch), or the same static size
            and before[1:].is_fully_defined()
            and after[1:].is_fully_defined()
        )
    axis = constant_value(op.inputs[_AXIS_INPUT[op.type]])
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
        axes = constant_value(op.inputs[1])
        rank = _rank(op.inputs[0])
        if axes is not None and rank:
            attrs["reduces_axis0"] = 0 in {int(a) % rank for a in axes.flat}
        elif _leads_with_batch(op.inputs[0]) and op.outputs[0].shape.is_fully_defined():
            attrs["reduces_axis0"] = True  # axes computed at run time, but the batch is gone
    if op.type in ("ConcatV2", "Split", "Reshape", "Transpose", "Slice"):
        keeps = _keeps_axis0(op)
        if keeps is not None:
            attrs["keeps_axis0"] = keeps
    if op.type in PADS:
        paddings = constant_value(op.inputs[1])
        if paddings is not None and paddings.ndim == 2 and len(paddings):
            attrs["pads_axis0"] = bool(paddings[0].any())
            attrs["pads_last_axis"] = bool(paddings[-1].any())
    if op.type == "GatherV2":
        axis = constant_value(op.inputs[2])
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


PROBE_BATCHES = (7, 11)
"""Two batch sizes no model dimension is likely to equal or share a factor with: a dimension that
is 7 in a graph shaped for batch 7 and 11 in one shaped for 11 (or 7 and 11 times one length) is
the batch's."""


def _batch_axis(small: Any, large: Any) -> int | None:
    """The axis of a tensor that scales with the batch, between its shapes at :data:`PROBE_BATCHES`;
    ``None`` when none does or a shape is unknown."""
    if small.shape.rank is None or large.shape.rank is None or small.shape.rank != large.shape.rank:
        return None
    b1, b2 = PROBE_BATCHES
    for axis, (d1, d2) in enumerate(zip(small.shape.as_list(), large.shape.as_list())):
        if d1 and d2 and d1 != d2 and d1 * b2 == d2 * b1:
            return axis
    return None


_DATA_INPUT = {"Split": 1}
"""Op type -> the input that holds the data (input 0 for the others)."""


def probed_split_attrs(small: Any, large: Any) -> dict[str, Any]:
    """``reduces_axis0`` or ``keeps_axis0`` of an op read from the op in graphs shaped for the two
    :data:`PROBE_BATCHES` (:func:`tfplace.estimator.shapes.shaped_graph`): exact where TensorFlow's
    shape inference, given the batch, knows the shapes that computed axes and permutations leave
    unknown otherwise. ``{}`` when the shapes do not say."""
    if not small.inputs or not small.outputs:
        return {}
    index = _DATA_INPUT.get(small.type, 0)
    before = _batch_axis(small.inputs[index], large.inputs[index])
    after = _batch_axis(small.outputs[0], large.outputs[0])
    if before != 0:
        return {}
    if small.type in _REDUCTIONS and small.outputs[0].shape.is_fully_defined():
        return {"reduces_axis0": after is None}
    if small.type in ("ConcatV2", "Split", "Reshape", "Transpose", "Slice"):
        return {"keeps_axis0": after == 0}
    return {}


def annotate_split_fields(graph: CostGraph, tf_graph: Any, probes: tuple[Any, Any] | None = None) -> int:
    """Write ``attrs``, ``output_shapes`` and ``inputs`` of every op of ``graph`` found in
    ``tf_graph`` by name (in place; a cost graph saved before version 3 gains what splitting needs
    without profiling again). ``probes``, the graph shaped for the two :data:`PROBE_BATCHES`,
    settle the attributes static shapes leave open (:func:`probed_split_attrs`) and give output
    shapes with ``-1`` for the batch. Returns how many ops were annotated."""
    annotated = 0
    for op in tf_graph.get_operations():
        if op.name not in graph:
            continue
        node = graph.nodes[op.name]
        attrs = op_split_attrs(op) or {}
        shapes = op_output_shapes(op)
        if probes is not None:
            small, large = (probe.get_operation_by_name(op.name) for probe in probes)
            attrs.update(probed_split_attrs(small, large))
            shapes = _probed_shapes(small, large) or shapes
        node["attrs"] = attrs or None
        node["output_shapes"] = (
            shapes if shapes is not None and len(shapes) == len(node["output_sizes"]) else None
        )
        node["inputs"] = op_inputs(op)
        annotated += 1
    return annotated


def _probed_shapes(small: Any, large: Any) -> tuple[tuple[int, ...], ...] | None:
    """Output shapes from the graph shaped for the smaller probe batch, ``-1`` on the batch's axis."""
    shapes = op_output_shapes(small)
    if shapes is None:
        return None
    return tuple(
        tuple(-1 if axis == _batch_axis(tiny, big) else d for axis, d in enumerate(shape))
        for shape, tiny, big in zip(shapes, small.outputs, large.outputs)
    )
