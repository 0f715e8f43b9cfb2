"""Run a split plan in TensorFlow: rewrite a graph so that each split op runs as pieces on their devices.

:func:`apply_split_plan` replaces every op the plan splits (:class:`~tfplace.split.plan.SplitPlan`)
by one op of the same type per piece, on the piece's device, reading its inputs in the layouts the
op's partition rule (:mod:`tfplace.split.rules`) asks for (Tofu's partition-n-reduce):

* a replicated input is the whole tensor; TensorFlow sends it to each piece's device once, however
  many pieces there read it (a weight is read by every piece's device once);
* a sharded input is the piece's range along the rule's axis: taken straight from the producer's
  piece when the producer was split alike (BBGraP: consecutive ops split the same way pass pieces on
  with no join and re-split in between), else cut by ``StridedSlice`` on the device that holds the
  tensor, so that only the slice moves (from several producer pieces when the ranges differ);
* a halo input (height or width splits of ``Conv2D``, ``MaxPool`` and ``AvgPool``) is the rows the
  piece's windows read, from the neighbouring slices too; the piece runs with the window's padding
  made explicit (``Conv2D`` with ``padding="EXPLICIT"``, ``MaxPool`` after ``PadV2`` with ``-inf``),
  so that SAME, VALID and explicit padding, strides and dilations compute exactly the original rows.

A piece's output is joined only where a consumer needs the whole tensor or another split: sharded
outputs by ``ConcatV2`` along the axis, partial results (weight gradients under a batch split,
sums over a split reduction) by ``AddN``. Every op of the user's graph keeps its name: a split op's
name becomes an ``Identity`` (``IdentityN`` for several outputs) of the joined outputs, so fetches
and feeds of the session code stay valid (unfetched joins are pruned by the session).

Exactness. Pieces compute what the op computes, up to the order of float sums (a partial sum,
a ``Mean`` over a split batch weighted by each piece's share). Two kinds of op keep what depends on
the whole batch exact by running whole: ``FusedBatchNorm*`` and their gradients in training mode
(``is_training=True``: their statistics are over the whole batch) split along the batch run whole
on their first piece's device (:attr:`SplitRewrite.kept_whole` lists them); in inference mode they
split. A split placeholder is fed whole under its name (each piece reading it takes its slice),
and an op a data-parallel plan gives only partial sums to read (an ``Identity`` of a weight
gradient) runs whole on their total. So do ops reading a resource variable (``ResourceGather``), which TensorFlow runs on the
variable's device whatever the piece's device. An op the plan runs as replicas (``"replica"``: a variable, its reads and updates under data
parallelism) runs once, on its first device; every device that reads it receives it once, which
computes what replicas would.

Refused with a one-line ``ValueError`` naming the op (nothing is changed then): a dimension the
op's rules do not allow, a degree above the dimension's size, a dimension of unknown static size, a
device without a kernel for the op, a spatial split of anything but ``Conv2D`` and pooling,
``AvgPool`` with SAME padding split spatially (its border windows average fewer values), a
``GatherV2`` split over its table's rows, ``Conv2DBackpropInputV2``, inputs a piece slices that
differ in size, and ops inside legacy ``while`` frames.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from tfplace.core.devices import DeviceName, DeviceSet
from tfplace.core.placement import Placement
from tfplace.split.plan import OpSplit, SplitPlan
from tfplace.split.rules import (
    BATCH,
    HEIGHT,
    REDUCTION,
    REPLICA,
    RULES,
    WIDTH,
    Layout,
    SplitRule,
    can_replicate,
    op_rules,
)
from tfplace.tf_graph.apply import apply_placement
from tfplace.tf_graph.constraints import kernel_device_types
from tfplace.tf_graph.importer import load_graph
from tfplace.tf_graph.split_attrs import op_split_attrs

__all__ = [
    "SplitRewrite",
    "apply_split_plan",
    "rewrite_graph_def",
    "split_graph",
    "static_graph",
    "uniform_plan",
    "with_batch_size",
    "write_graph",
]

_BATCH_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV3", "FusedBatchNormGrad", "FusedBatchNormGradV3"})
_WINDOWED = frozenset({"Conv2D", "MaxPool", "AvgPool"})
_SHAPE_INPUT = {
    "Conv2DBackpropInput": 0,
    "Conv2DBackpropFilter": 1,
    "AvgPoolGrad": 0,
    "DepthwiseConv2dNativeBackpropInput": 0,
    "DepthwiseConv2dNativeBackpropFilter": 1,
}
"""Op type -> the input slot holding a shape the op computes with: a piece gets its own shape."""
_UNSUPPORTED = {
    ("Conv2DBackpropInputV2", None): "it reads its input only for the input's shape",
    ("GatherV2", REDUCTION): "a piece of the table would need its indices offset and masked",
}
"""(op type, dimension or ``None`` for every one) -> why the rewrite cannot split so yet."""
_ELEMENTWISE_RULE = RULES["AddV2"][BATCH]
_FRAME_TYPES = frozenset({"Enter", "RefEnter"})


@dataclass
class SplitRewrite:
    """The rewritten ``GraphDef``, the nodes each op became, and the split ops the rewrite ran whole."""

    graph_def: Any
    pieces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kept_whole: dict[str, str] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    """Every node of the rewritten graph -> its device (pieces, slices, joins included)."""


@dataclass
class _Value:
    """One output of an original op as the rewritten graph holds it: whole, in pieces, or partial."""

    dtype: int
    shape: tuple[int | None, ...]
    whole: str | None = None
    whole_device: str = ""
    axis: int | None = None
    pieces: tuple[tuple[int, int, str, str], ...] = ()  # (start, stop, tensor, device)
    partial: tuple[tuple[str, str], ...] = ()  # (tensor, device)


def _ranges(size: int, shares: Sequence[float]) -> list[tuple[int, int]]:
    bounds = [0, *(round(size * sum(shares[: i + 1])) for i in range(len(shares)))]
    bounds[-1] = size
    return list(pairwise(bounds))


def _static_shape(tensor: Any) -> tuple[int | None, ...]:
    return () if tensor.shape.rank is None else tuple(tensor.shape.as_list())


def _window(op: Any, axis: int) -> tuple[int, int, int, int, int]:
    """``(kernel extent, stride, pad before, pad after, input size)`` of ``op``'s window along ``axis``
    (1 height, 2 width; NHWC): TensorFlow's SAME/VALID/EXPLICIT padding arithmetic."""
    strides = list(op.get_attr("strides"))
    if op.type == "Conv2D":
        kernel = int(op.inputs[1].shape[axis - 1])
        dilation = int(list(op.get_attr("dilations"))[axis])
    else:
        kernel, dilation = int(list(op.get_attr("ksize"))[axis]), 1
    extent, stride = (kernel - 1) * dilation + 1, int(strides[axis])
    size, out = int(op.inputs[0].shape[axis]), int(op.outputs[0].shape[axis])
    padding = op.get_attr("padding").decode()
    if padding == "EXPLICIT":
        pads = list(op.get_attr("explicit_paddings"))
        return extent, stride, int(pads[2 * axis]), int(pads[2 * axis + 1]), size
    total = max((out - 1) * stride + extent - size, 0) if padding == "SAME" else 0
    return extent, stride, total // 2, total - total // 2, size


class _Rewriter:
    def __init__(self, graph: Any, plan: SplitPlan) -> None:
        from tensorflow.core.framework import graph_pb2

        source = graph.as_graph_def()
        self.plan = plan
        self.out = graph_pb2.GraphDef()
        self.out.versions.CopyFrom(source.versions)
        self.out.library.CopyFrom(source.library)
        self.names = {node.name for node in source.node}
        self.values: dict[str, _Value] = {}
        self.cache: dict[tuple[Any, ...], str] = {}
        self.result = SplitRewrite(self.out)

    # -- nodes -------------------------------------------------------------------------------
    def _unique(self, name: str) -> str:
        candidate, index = name, 0
        while candidate in self.names:
            index += 1
            candidate = f"{name}_{index}"
        self.names.add(candidate)
        return candidate

    def _emit(self, node: Any) -> str:
        self.out.node.append(node)
        self.result.devices[node.name] = node.device
        return node.name

    def _node(self, op_type: str, name: str, inputs: Iterable[str], device: str, **attrs: Any) -> str:
        from tensorflow.core.framework import node_def_pb2

        node = node_def_pb2.NodeDef(op=op_type, name=self._unique(name), input=list(inputs), device=device)
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
        return self._emit(node)

    def _const(self, value: Any, device: str, name: str) -> str:
        import tensorflow as tf
        from tensorflow.core.framework import attr_value_pb2

        array = np.asarray(value)
        proto = tf.compat.v1.make_tensor_proto(array)
        return self._node(
            "Const",
            name,
            (),
            device,
            value=attr_value_pb2.AttrValue(tensor=proto),
            dtype=attr_value_pb2.AttrValue(type=proto.dtype),
        )

    @staticmethod
    def _type(dtype: int) -> Any:
        from tensorflow.core.framework import attr_value_pb2

        return attr_value_pb2.AttrValue(type=dtype)

    @staticmethod
    def _int(value: int) -> Any:
        from tensorflow.core.framework import attr_value_pb2

        return attr_value_pb2.AttrValue(i=value)

    def _concat(self, parts: Sequence[str], axis: int, dtype: int, device: str, name: str) -> str:
        if len(parts) == 1:
            return parts[0]
        axis_const = self._const(np.int32(axis), device, f"{name}/axis")
        return self._node(
            "ConcatV2",
            name,
            [*parts, axis_const],
            device,
            T=self._type(dtype),
            N=self._int(len(parts)),
            Tidx=self._type(3),  # DT_INT32
        )

    def _slice(self, tensor: str, rank: int, axis: int, lo: int, hi: int, dtype: int, device: str) -> str:
        key = ("slice", tensor, axis, lo, hi)
        if key not in self.cache:
            base = tensor.partition(":")[0]
            begin, end = [0] * rank, [0] * rank
            begin[axis], end[axis] = lo, hi
            mask = ((1 << rank) - 1) & ~(1 << axis)
            name = f"{base}/slice_{axis}_{lo}_{hi}"
            self.cache[key] = self._node(
                "StridedSlice",
                name,
                [
                    tensor,
                    self._const(np.asarray(begin, np.int32), device, f"{name}/begin"),
                    self._const(np.asarray(end, np.int32), device, f"{name}/end"),
                    self._const(np.ones(rank, np.int32), device, f"{name}/strides"),
                ],
                device,
                T=self._type(dtype),
                Index=self._type(3),
                begin_mask=self._int(mask),
                end_mask=self._int(mask),
                ellipsis_mask=self._int(0),
                new_axis_mask=self._int(0),
                shrink_axis_mask=self._int(0),
            )
        return self.cache[key]

    # -- values ------------------------------------------------------------------------------
    def value(self, tensor: Any) -> _Value:
        if tensor.name not in self.values:  # an op that runs whole keeps its name
            self.values[tensor.name] = _Value(
                tensor.dtype.as_datatype_enum,
                _static_shape(tensor),
                whole=tensor.name,
                whole_device=self.device_of(tensor.op),
            )
        return self.values[tensor.name]

    def device_of(self, op: Any) -> str:
        split = self.plan.splits.get(op.name)
        return split.devices[0] if split is not None else op.device

    def whole(self, tensor: Any, device: str) -> str:
        value = self.value(tensor)
        if value.whole is None:
            name = f"{tensor.op.name}/join_{tensor.value_index}"
            if value.partial:
                tensors = [t for t, _ in value.partial]
                value.whole = self._node(
                    "AddN", name, tensors, device, T=self._type(value.dtype), N=self._int(len(tensors))
                )
            else:
                assert value.axis is not None
                value.whole = self._concat(
                    [t for *_, t, _ in value.pieces], value.axis, value.dtype, device, name
                )
            value.whole_device = device
        return value.whole

    def region(self, tensor: Any, axis: int, lo: int, hi: int, device: str) -> str:
        """``tensor``'s rows ``lo:hi`` along ``axis``, from pieces where they are (no join)."""
        value = self.value(tensor)
        rank = len(value.shape)
        size = value.shape[axis]
        if value.axis == axis and value.whole is None:
            parts = []
            for start, stop, piece, piece_device in value.pieces:
                a, b = max(lo, start), min(hi, stop)
                if a >= b:
                    continue
                if (a, b) == (start, stop):
                    parts.append(piece)
                else:
                    parts.append(
                        self._slice(piece, rank, axis, a - start, b - start, value.dtype, piece_device)
                    )
            name = f"{tensor.op.name}/gather_{tensor.value_index}_{lo}_{hi}"
            key = ("gather", tensor.name, axis, lo, hi)
            if key not in self.cache:
                self.cache[key] = self._concat(parts, axis, value.dtype, device, name)
            return self.cache[key]
        whole = self.whole(tensor, device)
        if lo == 0 and hi == size:
            return whole
        return self._slice(whole, rank, axis, lo, hi, value.dtype, value.whole_device)

    # -- ops ---------------------------------------------------------------------------------
    def split(self, op: Any, split: OpSplit, rule: SplitRule) -> None:
        _, size = _dimension(op, rule)
        assert size is not None
        ranges = _ranges(size, split.shares)
        mean_reduction = op.type == "Mean" and split.dimension == REDUCTION
        pieces = []
        for index, ((lo, hi), device) in enumerate(zip(ranges, split.devices)):
            node = self._piece_node(op, rule, index, lo, hi, device)
            pieces.append(self._emit(node))
        self.result.pieces[op.name] = tuple(pieces)
        for slot, tensor in enumerate(op.outputs):
            layout = rule.write(slot)
            outputs = [f"{piece}:{slot}" if slot else piece for piece in pieces]
            value = _Value(tensor.dtype.as_datatype_enum, _static_shape(tensor))
            if op.type in _BATCH_NORMS and slot > 0 and layout.kind == "partial":
                value.whole, value.whole_device = outputs[0], split.devices[0]  # inference: passed through
            elif layout.kind == "partial":
                if mean_reduction:
                    outputs = [
                        self._node(
                            "Mul",
                            f"{out.partition(':')[0]}/share",
                            [
                                out,
                                self._const(
                                    np.asarray((hi - lo) / size, tensor.dtype.as_numpy_dtype), d, f"{out}/w"
                                ),
                            ],
                            d,
                            T=self._type(value.dtype),
                        )
                        for out, (lo, hi), d in zip(outputs, ranges, split.devices)
                    ]
                value.partial = tuple(zip(outputs, split.devices))
            elif layout.kind == "sharded":
                axis = _axis(layout, len(value.shape))
                value.axis = axis
                value.pieces = tuple(
                    (lo, hi, out, d) for (lo, hi), out, d in zip(ranges, outputs, split.devices)
                )
            else:
                value.whole, value.whole_device = outputs[0], split.devices[0]
            self.values[tensor.name] = value

    def _piece_node(self, op: Any, rule: SplitRule, index: int, lo: int, hi: int, device: str) -> Any:
        node = type(op.node_def)()
        node.CopyFrom(op.node_def)
        node.name = self._unique(f"{op.name}/piece{index}")
        node.device = device
        for attr in ("_class", "_output_shapes"):
            if attr in node.attr:
                del node.attr[attr]
        del node.input[:]
        for slot, tensor in enumerate(op.inputs):
            layout = _read_layout(op, rule, slot)
            rank = len(_static_shape(tensor))
            if op.type == "Reshape" and slot == 1:
                node.input.append(
                    self._const(
                        np.asarray([-1, *op.outputs[0].shape[1:]], np.int32), device, f"{node.name}/shape"
                    )
                )
            elif _SHAPE_INPUT.get(op.type) == slot:
                shape = list(op.outputs[0].shape.as_list())
                write = rule.write(0)
                if write.kind == "sharded":
                    shape[_axis(write, len(shape))] = hi - lo
                node.input.append(self._const(np.asarray(shape, np.int32), device, f"{node.name}/shape"))
            elif op.type == "Slice" and slot > 0 and rule.read(0).kind == "sharded":
                node.input.append(self._slice_bounds(op, slot, device, node.name))
            elif layout.kind == "replicated":
                node.input.append(self.whole(tensor, device))
            elif layout.kind == "halo":
                node.input.append(self._halo(op, node, tensor, _axis(layout, rank), lo, hi, device))
            else:
                node.input.append(self.region(tensor, _axis(layout, rank), lo, hi, device))
        for control in op.control_inputs:
            node.input.extend(f"^{name}" for name in self.control_names(control))
        return node

    def _slice_bounds(self, op: Any, slot: int, device: str, name: str) -> str:
        """A batch piece of a ``Slice`` keeping axis 0 whole: its ``begin`` (slot 1) or ``size``
        (slot 2) with axis 0 made the piece's own (begin 0, size -1 = every row of the piece); the
        whole op's bounds give the whole batch's size, more rows than the piece has."""
        whole = self.whole(op.inputs[slot], device)
        index = op.get_attr("Index").as_numpy_dtype
        rank = len(_static_shape(op.inputs[0]))
        keep = np.ones(rank, index)
        keep[0] = 0
        kept = self._node(
            "Mul",
            f"{name}/bounds{slot}",
            [whole, self._const(keep, device, f"{name}/keep{slot}")],
            device,
            T=self._type(op.inputs[slot].dtype.as_datatype_enum),
        )
        if slot == 1:
            return kept
        all_rows = np.zeros(rank, index)
        all_rows[0] = -1
        return self._node(
            "Add",
            f"{name}/size",
            [kept, self._const(all_rows, device, f"{name}/all_rows")],
            device,
            T=self._type(op.inputs[slot].dtype.as_datatype_enum),
        )

    def _halo(self, op: Any, node: Any, tensor: Any, axis: int, lo: int, hi: int, device: str) -> str:
        """The input rows the piece's output rows ``lo:hi`` read, padding made explicit in ``node``."""
        from tensorflow.core.framework import attr_value_pb2

        pads = {}
        for spatial in (1, 2):
            extent, stride, before, after, size = _window(op, spatial)
            if spatial != axis:
                pads[spatial] = (before, after)
                continue
            first, last = lo * stride - before, (hi - 1) * stride - before + extent
            pads[spatial] = (max(0, -first), max(0, last - size))
            rows = (max(0, first), min(size, last))
        source = self.region(tensor, axis, rows[0], rows[1], device)
        paddings = [[0, 0], list(pads[1]), list(pads[2]), [0, 0]]
        flat = [amount for pair in paddings for amount in pair]
        if op.type == "Conv2D":
            node.attr["padding"].s = b"EXPLICIT"
            node.attr["explicit_paddings"].CopyFrom(
                attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(i=flat))
            )
            return source
        node.attr["padding"].s = b"VALID"
        if not any(flat):
            return source
        dtype = tensor.dtype
        return self._node(
            "PadV2",
            f"{node.name}/pad",
            [
                source,
                self._const(np.asarray(paddings, np.int32), device, f"{node.name}/paddings"),
                self._const(np.asarray(-np.inf, dtype.as_numpy_dtype), device, f"{node.name}/lowest"),
            ],
            device,
            T=self._type(dtype.as_datatype_enum),
            Tpaddings=self._type(3),
        )

    def control_names(self, op: Any) -> tuple[str, ...]:
        return self.result.pieces.get(op.name, (op.name,))

    def whole_op(self, op: Any, device: str) -> None:
        node = type(op.node_def)()
        node.CopyFrom(op.node_def)
        node.device = device
        del node.input[:]
        node.input.extend(self.whole(tensor, device) for tensor in op.inputs)
        for control in op.control_inputs:
            node.input.extend(f"^{name}" for name in self.control_names(control))
        self._emit(node)

    def named_join(self, op: Any, device: str) -> None:
        """The original op's name over the joined outputs, so that fetches by name keep working."""
        from tensorflow.core.framework import attr_value_pb2

        wholes = [self.whole(tensor, device) for tensor in op.outputs]
        self.names.discard(op.name)
        if len(wholes) == 1:
            self._node(
                "Identity", op.name, wholes, device, T=self._type(op.outputs[0].dtype.as_datatype_enum)
            )
        elif wholes:
            types = attr_value_pb2.AttrValue.ListValue(type=[t.dtype.as_datatype_enum for t in op.outputs])
            self._node("IdentityN", op.name, wholes, device, T=attr_value_pb2.AttrValue(list=types))
        else:
            self._node("NoOp", op.name, [f"^{p}" for p in self.result.pieces[op.name]], device)


def _axis(layout: Layout, rank: int) -> int:
    assert layout.axis is not None
    return layout.axis % rank if rank else 0


def _read_layout(op: Any, rule: SplitRule, slot: int) -> Layout:
    """How a piece reads input ``slot``: as the rule says, except a scalar (an axis, a shape) and an
    element-wise op's operand broadcast along the split axis (a bias vector), which it reads whole."""
    layout = rule.read(slot)
    shape, out = _static_shape(op.inputs[slot]), _static_shape(op.outputs[0])
    if not shape or (rule is _ELEMENTWISE_RULE and (len(shape) != len(out) or shape[0] == 1 != out[0])):
        return Layout("replicated")
    return layout


def _sliced_sizes(op: Any, rule: SplitRule) -> list[int | None]:
    """The static size along its axis of every input a piece reads a slice of."""
    sizes = []
    for slot, tensor in enumerate(op.inputs):
        layout = _read_layout(op, rule, slot)
        if layout.kind == "sharded":
            shape = _static_shape(tensor)
            sizes.append(shape[_axis(layout, len(shape))])
    return sizes


def _dimension(op: Any, rule: SplitRule) -> tuple[int, int | None]:
    """The axis and static size of the dimension a piece's range runs over: the output's axis for a
    halo rule, else the first sliced input's."""
    if rule.reads[0].kind == "halo":
        axis = _axis(rule.reads[0], 4)
        return axis, op.outputs[0].shape[axis]
    for slot in range(len(op.inputs)):
        layout = _read_layout(op, rule, slot)
        if layout.kind == "sharded":
            shape = _static_shape(op.inputs[slot])
            axis = _axis(layout, len(shape))
            return axis, shape[axis]
    for slot, tensor in enumerate(op.outputs if not op.inputs else ()):  # a placeholder
        if rule.write(slot).kind == "sharded" and tensor.shape.rank:
            shape = _static_shape(tensor)
            axis = _axis(rule.write(slot), len(shape))
            return axis, shape[axis]
    return 0, None


def _frame_ops(graph: Any) -> set[str]:
    """Ops inside legacy ``while`` frames: downstream of an ``Enter`` and not past its ``Exit``."""
    inside: set[str] = set()
    stack = [op for op in graph.get_operations() if op.type in _FRAME_TYPES]
    while stack:
        op = stack.pop()
        if op.name in inside or op.type in ("Exit", "RefExit"):
            continue
        inside.add(op.name)
        stack.extend(consumer for out in op.outputs for consumer in out.consumers())
        stack.extend(op._control_outputs)
    return inside


def _refusal(op: Any, split: OpSplit, frames: set[str]) -> str | None:
    """Why the rewrite cannot run ``op`` as ``split`` says, or ``None`` when it can."""
    for device in split.devices:
        kinds = kernel_device_types(op.type, op.node_def.attr)
        try:
            kind = DeviceName.parse(device).kind
        except ValueError as error:
            return str(error)
        if kinds is not None and kind not in kinds:
            return f"has no {kind} kernel (device {device}); kernels for {sorted(kinds)}"
    if split.degree == 1 and split.dimension in (None, REPLICA):
        return None
    if split.dimension == REPLICA:
        return None if can_replicate(op.type) else "cannot run as replicas"
    rules = op_rules(op.type, op_split_attrs(op))
    if split.dimension not in rules:
        return f"cannot split along {split.dimension!r}; it splits along {sorted(rules) or 'nothing'}"
    reason = _UNSUPPORTED.get((op.type, split.dimension), _UNSUPPORTED.get((op.type, None)))
    if reason is not None:
        return f"is not split along {split.dimension} by the rewrite yet ({reason})"
    if op.name in frames:
        return "is inside a while loop's frame, which the rewrite does not split yet"
    rule = rules[split.dimension]
    cut = [t for slot, t in enumerate(op.inputs) if rule.read(slot).kind in ("sharded", "halo")]
    cut += [t for slot, t in enumerate(op.outputs) if rule.write(slot).kind == "sharded"]
    if any(t.shape.rank is None for t in cut):
        return "slices a tensor of unknown rank, which the rewrite cannot cut"
    if split.dimension in (HEIGHT, WIDTH):
        if op.type not in _WINDOWED:
            return f"splits along {split.dimension} only as Conv2D and pooling do, not yet as {op.type}"
        if not all(s is not None for s in (*_static_shape(op.inputs[0]), *_static_shape(op.outputs[0]))):
            return "needs static shapes for a spatial split"
        if op.type == "AvgPool" and sum(_window(op, a)[2] + _window(op, a)[3] for a in (1, 2)):
            return "AvgPool with padding cannot split spatially yet (border windows average fewer values)"
    if _sums_partials(op, rule):
        return None  # runs whole on the partial sums' total (_keeps_whole)
    _, size = _dimension(op, rule)
    if size is None:
        return f"its {split.dimension} dimension has no static size (build the graph with a fixed batch)"
    if rule.reads[0].kind != "halo" and len(set(_sliced_sizes(op, rule))) > 1:
        return f"the inputs it slices differ in their {split.dimension} size {_sliced_sizes(op, rule)}"
    if split.degree > size:
        return f"degree {split.degree} exceeds its {split.dimension} dimension of {size}"
    if min(hi - lo for lo, hi in _ranges(size, split.shares)) < 1:
        return f"shares {split.shares} leave a piece of its {split.dimension} dimension of {size} empty"
    if (op.type in _SHAPE_INPUT or op.type == "Reshape") and not op.outputs[0].shape[1:].is_fully_defined():
        return "needs a static output shape to give each piece its own"
    return None


def _sums_partials(op: Any, rule: SplitRule) -> bool:
    """Whether ``op`` under ``rule`` reads partial sums and slices nothing (it passes a sum on)."""
    reads = [rule.read(slot).kind for slot in range(len(op.inputs))]
    writes = [rule.write(slot).kind for slot in range(len(op.outputs))]
    return "partial" in reads and not {"sharded", "halo"} & {*reads, *writes}


def _keeps_whole(op: Any, split: OpSplit) -> str | None:
    """Why the rewrite runs a split op whole on its first device, or ``None`` when it splits it."""
    if op.type in _BATCH_NORMS and split.dimension == BATCH and op.get_attr("is_training"):
        return "batch norm in training mode: statistics over the whole batch"
    if split.dimension == REDUCTION and _sums_partials(op, op_rules(op.type, op_split_attrs(op))[REDUCTION]):
        return "reads partial sums only (a data-parallel plan's gradient passed on): runs on their total"
    if op.type == "Placeholder":
        return "a fed tensor is fed whole under its name; each piece reading it takes its slice"
    if any(t.dtype.base_dtype.name == "resource" for t in op.inputs):
        return "reads a resource variable, which TensorFlow runs on the variable's device only"
    return None


def with_batch_size(source: Any, batch_size: int) -> Any:
    """A copy of ``source`` (``GraphDef`` or ``MetaGraphDef``) whose placeholders of unknown batch
    (first dimension ``None``) take ``batch_size``: static shapes, which a split needs to cut its
    pieces, follow when the copy is imported. The copy runs that batch size only."""
    copy = type(source)()
    copy.CopyFrom(source)
    graph_def = getattr(copy, "graph_def", copy)
    for node in graph_def.node:
        if node.op == "Placeholder" and "shape" in node.attr:
            dims = node.attr["shape"].shape.dim
            if dims and dims[0].size == -1:
                dims[0].size = batch_size
    for node in graph_def.node:
        node.attr.pop("_output_shapes", None)
    return copy


def _meta_graph(graph: Any) -> Any:
    """``graph`` with its collections as a ``MetaGraphDef`` (also while eager execution is on)."""
    import tensorflow as tf

    with graph.as_default():
        return tf.compat.v1.train.export_meta_graph(graph=graph)


def static_graph(source: Any, batch_size: int | None) -> Any:
    """``source`` as a ``tf.Graph``, its unknown batch set to ``batch_size`` when given."""
    import tensorflow as tf

    if batch_size is None:
        return load_graph(source)
    if isinstance(source, (str, os.PathLike)):
        source = load_graph(source)
    if isinstance(source, tf.Graph):
        source = _meta_graph(source)
    return load_graph(with_batch_size(source, batch_size))


def rewrite_graph_def(plan: SplitPlan, source: Any, batch_size: int | None = None) -> SplitRewrite:
    """The ``GraphDef`` of ``source`` (a ``tf.Graph``, ``GraphDef`` or ``MetaGraphDef``) with ``plan``
    applied (module docstring). Ops the plan does not name keep their device and run whole.
    ``batch_size`` fixes an unknown batch (:func:`with_batch_size`); the result runs that batch.

    Raises
    ------
    ValueError
        One line naming the first op the rewrite cannot split as the plan says.
    """
    graph = static_graph(source, batch_size)
    frames = _frame_ops(graph) if any(op.type in _FRAME_TYPES for op in graph.get_operations()) else set()
    for op in graph.get_operations():
        split = plan.splits.get(op.name)
        reason = _refusal(op, split, frames) if split is not None else None
        if reason is not None:
            raise ValueError(f"op {op.name!r} ({op.type}): {reason}")
    rewriter = _Rewriter(graph, plan)
    whole_ops = []
    for op in graph.get_operations():  # in creation order: producers first
        split = plan.splits.get(op.name)
        if split is None or split.degree == 1 or split.dimension in (None, REPLICA):
            whole_ops.append((op, rewriter.device_of(op)))
            continue
        reason = _keeps_whole(op, split)
        if reason is not None:
            rewriter.result.kept_whole[op.name] = reason
            whole_ops.append((op, split.devices[0]))
            continue
        rewriter.split(op, split, op_rules(op.type, op_split_attrs(op))[split.dimension])
    for op, device in whole_ops:
        rewriter.whole_op(op, device)
    for op_name in list(rewriter.result.pieces):
        rewriter.named_join(graph.get_operation_by_name(op_name), plan.splits[op_name].devices[0])
    return rewriter.result


def apply_split_plan(plan: SplitPlan, target: Any, batch_size: int | None = None) -> Any:
    """Rewrite ``target`` to run ``plan``; the user's graph is never changed.

    Parameters
    ----------
    plan : SplitPlan
    target : tf.Graph, GraphDef or MetaGraphDef
    batch_size : int, optional
        The batch the plan was made for, when the graph's placeholders leave it unknown.

    Returns
    -------
    A new object of the same kind: a ``tf.Graph`` (with the original's collections, so its
    initializers and ``train_op`` are found as before), a ``GraphDef`` or a ``MetaGraphDef``.
    """
    import tensorflow as tf

    if isinstance(target, tf.Graph):
        return split_graph(plan, target, batch_size)[0]
    if not isinstance(target, (tf.compat.v1.GraphDef, tf.compat.v1.MetaGraphDef)):
        raise TypeError(
            f"cannot rewrite a {type(target).__name__}: give a tf.Graph, GraphDef or MetaGraphDef"
        )
    rewritten = rewrite_graph_def(plan, target, batch_size).graph_def
    if isinstance(target, tf.compat.v1.GraphDef):
        return rewritten
    meta = tf.compat.v1.MetaGraphDef()
    meta.CopyFrom(target)
    meta.graph_def.CopyFrom(rewritten)
    return meta


def split_graph(plan: SplitPlan, graph: Any, batch_size: int | None = None) -> tuple[Any, SplitRewrite]:
    """A new ``tf.Graph`` running ``plan`` on ``graph`` (with its collections: variables, ``train_op``,
    so initializers and fetches are found as before), and the :class:`SplitRewrite` it came from."""

    meta = _meta_graph(graph)
    rewrite = rewrite_graph_def(plan, meta, batch_size)
    meta.graph_def.CopyFrom(rewrite.graph_def)
    return load_graph(meta), rewrite


def write_graph(plan: Placement | SplitPlan, target: Any) -> Any:
    """The graph writer :mod:`tfplace` registers: a split plan (or a placement made from one) is
    rewritten into its pieces (:func:`apply_split_plan` at the plan's ``batch_size``); a placement
    of whole ops is written by :func:`~tfplace.tf_graph.apply.apply_placement`."""
    if isinstance(plan, Placement) and plan.split_plan is not None:
        plan = plan.split_plan
    if isinstance(plan, SplitPlan):
        return apply_split_plan(plan, target, plan.batch_size)
    return apply_placement(plan, target)


def uniform_plan(
    graph: Any,
    devices: Sequence[str],
    dimension: str,
    *,
    ops: Mapping[str, str] | None = None,
    shares: Sequence[float] | None = None,
    batch_size: int | None = None,
) -> SplitPlan:
    """A forced plan: every op of ``graph`` the rewrite can split along ``dimension`` split over all
    ``devices``, every other op whole on the first device.

    Along ``"batch"``, only ops that process examples split (data parallelism): a placeholder's
    outputs carry examples, and so do the outputs of an op that reads them, except a partial sum
    over the batch. An op whose rules sum over the batch instead (a dense layer's weight gradient
    ``a^T @ dy``, a loss summed or averaged over the batch) splits along its ``"reduction"``.
    ``ops`` names the ops to split instead (op -> dimension), every other op whole.
    """
    names = tuple(devices)
    device_set = DeviceSet.parse(list(names), "1TB")
    share = tuple(shares) if shares is not None else (1.0 / len(names),) * len(names)
    tf_graph = static_graph(graph, batch_size)
    frames = (
        _frame_ops(tf_graph) if any(op.type in _FRAME_TYPES for op in tf_graph.get_operations()) else set()
    )
    splits: dict[str, OpSplit] = {}
    examples: set[str] = set()
    for op in tf_graph.get_operations():
        wanted = (ops or {}).get(op.name, dimension if ops is None else None)
        carries = op.type == "Placeholder" or any(t.name in examples for t in op.inputs)
        if wanted == BATCH and ops is None and not carries:
            wanted = None
        splits[op.name] = OpSplit.whole(names[0])
        for candidate in [wanted, REDUCTION] if wanted == BATCH else [wanted] if wanted else []:
            split = OpSplit(names, candidate, share)
            rules = op_rules(op.type, op_split_attrs(op))
            if candidate == REDUCTION and (
                candidate not in rules
                or {lay.axis for lay in rules[candidate].reads if lay.kind == "sharded"} != {0}
            ):
                continue
            if len(names) > 1 and _refusal(op, split, frames) is None and _keeps_whole(op, split) is None:
                splits[op.name] = split
                break
        if carries:
            rule = op_rules(op.type, op_split_attrs(op)).get(splits[op.name].dimension or "")
            examples.update(
                t.name
                for slot, t in enumerate(op.outputs)
                if rule is None or rule.write(slot).kind != "partial"
            )
    return SplitPlan(splits, device_set, placer=f"uniform-{dimension}", batch_size=batch_size)
