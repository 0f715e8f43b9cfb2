"""Building the nodes of a rewritten ``GraphDef``: unique names, devices recorded, constants, and
the slicing, joining and padding nodes a split plan's pieces need (``StridedSlice``, ``ConcatV2``,
``PadV2``), each made once per tensor and range."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["DT_BOOL", "DT_INT32", "NodeBuilder"]

DT_INT32, DT_BOOL = 3, 10
"""TensorFlow's ``DataType`` enum values of ``int32`` (index and shape constants) and ``bool``."""


class NodeBuilder:
    """Appends nodes to ``out`` (a ``GraphDef``), naming them uniquely among ``names`` and recording
    each node's device in ``devices``."""

    def __init__(self, out: Any, names: set[str], devices: dict[str, str]) -> None:
        self.out = out
        self.names = names
        self.devices = devices
        self.cache: dict[tuple[Any, ...], str] = {}

    def unique(self, name: str) -> str:
        candidate, index = name, 0
        while candidate in self.names:
            index += 1
            candidate = f"{name}_{index}"
        self.names.add(candidate)
        return candidate

    def emit(self, node: Any) -> str:
        self.out.node.append(node)
        self.devices[node.name] = node.device
        return node.name

    def node(self, op_type: str, name: str, inputs: Iterable[str], device: str, **attrs: Any) -> str:
        from tensorflow.core.framework import node_def_pb2

        node = node_def_pb2.NodeDef(op=op_type, name=self.unique(name), input=list(inputs), device=device)
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
        return self.emit(node)

    def const(self, value: Any, device: str, name: str) -> str:
        import tensorflow as tf
        from tensorflow.core.framework import attr_value_pb2

        proto = tf.compat.v1.make_tensor_proto(np.asarray(value))
        return self.node(
            "Const",
            name,
            (),
            device,
            value=attr_value_pb2.AttrValue(tensor=proto),
            dtype=attr_value_pb2.AttrValue(type=proto.dtype),
        )

    @staticmethod
    def dtype(dtype: int) -> Any:
        from tensorflow.core.framework import attr_value_pb2

        return attr_value_pb2.AttrValue(type=dtype)

    @staticmethod
    def integer(value: int) -> Any:
        from tensorflow.core.framework import attr_value_pb2

        return attr_value_pb2.AttrValue(i=value)

    def concat(self, parts: Sequence[str], axis: int, dtype: int, device: str, name: str) -> str:
        """``parts`` concatenated along ``axis`` (the one part itself when there is one)."""
        if len(parts) == 1:
            return parts[0]
        axis_const = self.const(np.int32(axis), device, f"{name}/axis")
        return self.node(
            "ConcatV2",
            name,
            [*parts, axis_const],
            device,
            T=self.dtype(dtype),
            N=self.integer(len(parts)),
            Tidx=self.dtype(DT_INT32),
        )

    def slice(self, tensor: str, rank: int, axis: int, lo: int, hi: int, dtype: int, device: str) -> str:
        """Rows ``lo:hi`` of ``tensor`` along ``axis`` (a ``StridedSlice``, made once)."""
        key = ("slice", tensor, axis, lo, hi)
        if key not in self.cache:
            base = tensor.partition(":")[0]
            begin, end = [0] * rank, [0] * rank
            begin[axis], end[axis] = lo, hi
            mask = ((1 << rank) - 1) & ~(1 << axis)
            name = f"{base}/slice_{axis}_{lo}_{hi}"
            self.cache[key] = self.node(
                "StridedSlice",
                name,
                [
                    tensor,
                    self.const(np.asarray(begin, np.int32), device, f"{name}/begin"),
                    self.const(np.asarray(end, np.int32), device, f"{name}/end"),
                    self.const(np.ones(rank, np.int32), device, f"{name}/strides"),
                ],
                device,
                T=self.dtype(dtype),
                Index=self.dtype(DT_INT32),
                begin_mask=self.integer(mask),
                end_mask=self.integer(mask),
                ellipsis_mask=self.integer(0),
                new_axis_mask=self.integer(0),
                shrink_axis_mask=self.integer(0),
            )
        return self.cache[key]

    def pad(self, tensor: str, paddings: Sequence[Sequence[int]], value: Any, device: str, name: str) -> str:
        """``tensor`` padded by ``paddings`` (before, after per axis) with ``value`` (a numpy scalar of
        the tensor's type): a ``PadV2``."""
        import tensorflow as tf

        return self.node(
            "PadV2",
            name,
            [
                tensor,
                self.const(np.asarray(paddings, np.int32), device, f"{name}/paddings"),
                self.const(value, device, f"{name}/value"),
            ],
            device,
            T=self.dtype(tf.as_dtype(np.asarray(value).dtype).as_datatype_enum),
            Tpaddings=self.dtype(DT_INT32),
        )
