"""The rewriter behind :func:`~tfplace.tf_graph.split_rewrite.rewrite_graph_def`: it copies a graph
op by op into a new ``GraphDef``, replacing each split op by its pieces and tracking, per tensor of
the original graph, whether the rewrite holds it whole, in pieces along an axis, or as partial sums,
so that a consumer split alike takes pieces straight on and a join is made only where needed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfplace.split.feeds import feed_host
from tfplace.split.plan import OpSplit, SplitPlan
from tfplace.split.rules import (
    BATCH,
    BATCH_NORMS,
    FED_WHOLE,
    HEIGHT,
    REDUCTION,
    SHAPE_INPUT,
    SHAPE_OPS,
    SplitRule,
)
from tfplace.tf_graph.split_batch_norm import Moments, synchronized_batch_norm, synchronized_batch_norm_grad
from tfplace.tf_graph.split_layouts import (
    axis_of,
    dimension,
    piece_ranges,
    range_scale,
    read_layout,
    static_shape,
)
from tfplace.tf_graph.split_nodes import NodeBuilder
from tfplace.tf_graph.split_pieces import finish_piece, gather_shard_ids, spatial_inputs
from tfplace.tf_graph.split_windows import SPATIAL

__all__ = ["Rewriter", "SplitRewrite"]


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


class Rewriter(NodeBuilder):
    def __init__(self, graph: Any, plan: SplitPlan) -> None:
        from tensorflow.core.framework import graph_pb2

        source = graph.as_graph_def()
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(source.versions)
        out.library.CopyFrom(source.library)
        self.result = SplitRewrite(out)
        super().__init__(out, {node.name for node in source.node}, self.result.devices)
        self.plan = plan
        self.values: dict[str, _Value] = {}
        self.moments: dict[str, Moments] = {}
        """Training batch norm split on the batch -> the whole batch's moments it computed."""

    # -- values ------------------------------------------------------------------------------
    def value(self, tensor: Any) -> _Value:
        if tensor.name not in self.values:  # an op that runs whole keeps its name
            self.values[tensor.name] = _Value(
                tensor.dtype.as_datatype_enum,
                static_shape(tensor),
                whole=tensor.name,
                whole_device=self.device_of(tensor.op),
            )
        return self.values[tensor.name]

    def device_of(self, op: Any) -> str:
        """Where ``op`` runs whole: a split fed tensor on its host (:func:`~tfplace.split.feeds.feed_host`,
        so the slices cut from it are cut there too), any other op on its split's first device."""
        split = self.plan.splits.get(op.name)
        if split is None:
            return str(op.device)
        if op.type in FED_WHOLE and split.degree > 1:
            return feed_host(self.plan.devices, split.devices[0])
        return split.devices[0]

    def whole(self, tensor: Any, device: str) -> str:
        value = self.value(tensor)
        if value.whole is None:
            name = f"{tensor.op.name}/join_{tensor.value_index}"
            if value.partial:
                tensors = [t for t, _ in value.partial]
                value.whole = self.node(
                    "AddN", name, tensors, device, T=self.dtype(value.dtype), N=self.integer(len(tensors))
                )
            else:
                assert value.axis is not None
                value.whole = self.concat(
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
                        self.slice(piece, rank, axis, a - start, b - start, value.dtype, piece_device)
                    )
            name = f"{tensor.op.name}/gather_{tensor.value_index}_{lo}_{hi}"
            key = ("gather", tensor.name, axis, lo, hi)
            if key not in self.cache:
                self.cache[key] = self.concat(parts, axis, value.dtype, device, name)
            return self.cache[key]
        whole = self.whole(tensor, device)
        if lo == 0 and hi == size:
            return whole
        return self.slice(whole, rank, axis, lo, hi, value.dtype, value.whole_device)

    # -- ops ---------------------------------------------------------------------------------
    def split(self, op: Any, split: OpSplit, rule: SplitRule) -> None:
        _, size = dimension(op, rule)
        assert size is not None
        ranges = piece_ranges(size, split.shares)
        if op.type in BATCH_NORMS and split.dimension == BATCH and op.get_attr("is_training"):
            self.result.pieces[op.name] = self._synchronized(op, split.devices, ranges)
            return
        pieces, finished = [], []
        for index, ((lo, hi), device) in enumerate(zip(ranges, split.devices)):
            node = self._piece_node(op, split, rule, index, lo, hi, device)
            pieces.append(self.emit(node))
            finished.append(finish_piece(self, op, split.dimension, pieces[-1], lo, hi, size, device))
        self.result.pieces[op.name] = tuple(pieces)
        for slot, tensor in enumerate(op.outputs):
            layout = rule.write(slot)
            outputs = [f"{piece}:{slot}" if slot else piece for piece in (finished if slot == 0 else pieces)]
            value = _Value(tensor.dtype.as_datatype_enum, static_shape(tensor))
            if op.type in BATCH_NORMS and slot > 0 and layout.kind == "partial":
                value.whole, value.whole_device = outputs[0], split.devices[0]  # inference: passed through
            elif layout.kind == "partial":
                if op.type == "Mean" and split.dimension == REDUCTION:
                    outputs = [
                        self._weighted(out, (hi - lo) / size, tensor, d)
                        for out, (lo, hi), d in zip(outputs, ranges, split.devices)
                    ]
                value.partial = tuple(zip(outputs, split.devices))
            elif layout.kind == "sharded":
                axis = axis_of(layout, len(value.shape))
                scale = range_scale(op, tensor, axis, size)
                value.axis = axis
                value.pieces = tuple(
                    (lo * scale, hi * scale, out, d)
                    for (lo, hi), out, d in zip(ranges, outputs, split.devices)
                )
            else:
                value.whole, value.whole_device = outputs[0], split.devices[0]
            self.values[tensor.name] = value

    def _synchronized(
        self, op: Any, devices: tuple[str, ...], ranges: list[tuple[int, int]]
    ) -> tuple[str, ...]:
        """A training batch norm or its gradient as pieces over ``ranges`` of the batch with the whole
        batch's statistics (:mod:`~tfplace.tf_graph.split_batch_norm`); returns the pieces' nodes."""
        if "Grad" in op.type:
            moments = self.moments.get(op.inputs[3].op.name)
            pieces, others = synchronized_batch_norm_grad(self, op, ranges, devices, moments)
        else:
            pieces, others, self.moments[op.name] = synchronized_batch_norm(self, op, ranges, devices)
        first = op.outputs[0]
        self.values[first.name] = _Value(
            first.dtype.as_datatype_enum,
            static_shape(first),
            axis=0,
            pieces=tuple((lo, hi, piece, d) for (lo, hi), piece, d in zip(ranges, pieces, devices)),
        )
        for tensor, whole in zip(op.outputs[1:], others):
            self.values[tensor.name] = _Value(
                tensor.dtype.as_datatype_enum, static_shape(tensor), whole=whole, whole_device=devices[0]
            )
        return tuple(piece.partition(":")[0] for piece in pieces)

    def _weighted(self, tensor: str, share: float, original: Any, device: str) -> str:
        """A piece's mean over its rows weighted by its share of the whole batch."""
        weight = self.const(np.asarray(share, original.dtype.as_numpy_dtype), device, f"{tensor}/w")
        return self.node(
            "Mul",
            f"{tensor.partition(':')[0]}/share",
            [tensor, weight],
            device,
            T=self.dtype(original.dtype.as_datatype_enum),
        )

    def _piece_node(
        self, op: Any, split: OpSplit, rule: SplitRule, index: int, lo: int, hi: int, device: str
    ) -> Any:
        node = type(op.node_def)()
        node.CopyFrom(op.node_def)
        node.name = self.unique(f"{op.name}/piece{index}")
        node.device = device
        for attr in ("_class", "_output_shapes"):
            if attr in node.attr:
                del node.attr[attr]
        del node.input[:]
        if op.type in SPATIAL and any(layout.kind == "halo" for layout in rule.reads):
            node.input.extend(
                spatial_inputs(self, op, node, 1 if split.dimension == HEIGHT else 2, lo, hi, device)
            )
        else:
            node.input.extend(
                self._sliced_input(op, split, rule, slot, node.name, lo, hi, device)
                for slot in range(len(op.inputs))
            )
        for control in op.control_inputs:
            node.input.extend(f"^{name}" for name in self.control_names(control))
        return node

    def _sliced_input(
        self, op: Any, split: OpSplit, rule: SplitRule, slot: int, name: str, lo: int, hi: int, device: str
    ) -> str:
        """Input ``slot`` of a piece of ``op`` computing rows ``lo:hi`` of the split dimension."""
        tensor = op.inputs[slot]
        layout = read_layout(op, rule, slot)
        rank = len(static_shape(tensor))
        if op.type == "Reshape" and slot == 1:
            return self.const(np.asarray([-1, *op.outputs[0].shape[1:]], np.int32), device, f"{name}/shape")
        if SHAPE_INPUT.get(op.type) == slot:
            shape = list(op.outputs[0].shape.as_list())
            write = rule.write(0)
            if write.kind == "sharded":
                shape[axis_of(write, len(shape))] = hi - lo
            return self.const(np.asarray(shape, np.int32), device, f"{name}/shape")
        if op.type == "Slice" and slot > 0 and rule.read(0).kind == "sharded":
            return self._slice_bounds(op, slot, device, name)
        if op.type == "GatherV2" and split.dimension == REDUCTION and slot == 1:
            return gather_shard_ids(self, self.whole(tensor, device), tensor, lo, hi, device, name)
        if layout.kind == "replicated":
            return self.whole(tensor, device)
        axis = axis_of(layout, rank)
        _, size = dimension(op, rule)
        scale = range_scale(op, tensor, axis, size or 1)
        return self.region(tensor, axis, lo * scale, hi * scale, device)

    def _slice_bounds(self, op: Any, slot: int, device: str, name: str) -> str:
        """A batch piece of a ``Slice`` keeping axis 0 whole: its ``begin`` (slot 1) or ``size``
        (slot 2) with axis 0 made the piece's own (begin 0, size -1 = every row of the piece); the
        whole op's bounds give the whole batch's size, more rows than the piece has."""
        whole = self.whole(op.inputs[slot], device)
        index = op.get_attr("Index").as_numpy_dtype
        rank = len(static_shape(op.inputs[0]))
        keep = np.ones(rank, index)
        keep[0] = 0
        dtype = self.dtype(op.inputs[slot].dtype.as_datatype_enum)
        kept = self.node(
            "Mul",
            f"{name}/bounds{slot}",
            [whole, self.const(keep, device, f"{name}/keep{slot}")],
            device,
            T=dtype,
        )
        if slot == 1:
            return kept
        all_rows = np.zeros(rank, index)
        all_rows[0] = -1
        return self.node(
            "Add", f"{name}/size", [kept, self.const(all_rows, device, f"{name}/all_rows")], device, T=dtype
        )

    def control_names(self, op: Any) -> tuple[str, ...]:
        return self.result.pieces.get(op.name, (op.name,))

    def whole_op(self, op: Any, device: str) -> None:
        if op.type in BATCH_NORMS and "Grad" in op.type and op.inputs[3].op.name in self.moments:
            # the gradient of a synchronized forward: its reserve spaces hold the moments, which a
            # GPU kernel would read as an inverse deviation, so it runs as one synchronized piece
            self._synchronized(op, (device,), [(0, static_shape(op.inputs[0])[0] or 0)])
            self.named_join(op, device)
            return
        elsewhere = any(  # in pieces, or whole on another device (a fed batch on the host)
            self.value(t).whole is None or self.value(t).whole_device not in ("", device) for t in op.inputs
        )
        if op.type in SHAPE_OPS and elsewhere and all(t.shape.is_fully_defined() for t in op.inputs):
            self._static_shapes(op, device)
            return
        node = type(op.node_def)()
        node.CopyFrom(op.node_def)
        node.device = device
        del node.input[:]
        node.input.extend(self.whole(tensor, device) for tensor in op.inputs)
        for control in op.control_inputs:
            node.input.extend(f"^{name}" for name in self.control_names(control))
        self.emit(node)

    def _static_shapes(self, op: Any, device: str) -> None:
        """``op`` (``Shape``, ``ShapeN``, ``Size``, ``Rank``) of tensors held in pieces or on another
        device, as constants under its name: their static shapes are the whole tensors', so no join
        is made and nothing moves to read them."""
        from tensorflow.core.framework import attr_value_pb2

        values = []
        for tensor, out in zip(op.inputs if op.type == "ShapeN" else op.inputs[:1], op.outputs):
            shape = tensor.shape.as_list()
            value = {"Size": int(np.prod(shape)), "Rank": len(shape)}.get(op.type, shape)
            values.append(np.asarray(value, out.dtype.as_numpy_dtype))
        controls = [f"^{name}" for control in op.control_inputs for name in self.control_names(control)]
        self.names.discard(op.name)
        consts = []
        for index, value in enumerate(values):
            consts.append(
                self.const(value, device, op.name if op.type != "ShapeN" else f"{op.name}/static{index}")
            )
            self.out.node[-1].input.extend(controls)
        if op.type == "ShapeN":
            types = attr_value_pb2.AttrValue.ListValue(type=[t.dtype.as_datatype_enum for t in op.outputs])
            self.node("IdentityN", op.name, consts, device, T=attr_value_pb2.AttrValue(list=types))

    def named_join(self, op: Any, device: str) -> None:
        """The original op's name over the joined outputs, so that fetches by name keep working."""
        from tensorflow.core.framework import attr_value_pb2

        wholes = [self.whole(tensor, device) for tensor in op.outputs]
        self.names.discard(op.name)
        if len(wholes) == 1:
            self.node("Identity", op.name, wholes, device, T=self.dtype(op.outputs[0].dtype.as_datatype_enum))
        elif wholes:
            types = attr_value_pb2.AttrValue.ListValue(type=[t.dtype.as_datatype_enum for t in op.outputs])
            self.node("IdentityN", op.name, wholes, device, T=attr_value_pb2.AttrValue(list=types))
        else:
            self.node("NoOp", op.name, [f"^{p}" for p in self.result.pieces[op.name]], device)
