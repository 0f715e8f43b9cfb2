"""Shape-based estimates for ops a trace did not measure, and the sizes of variables.

Some ops that a step needs never show up in its step stats under their own name (a lowered
``While`` reports no per-slot outputs; a runtime rewrite may replace an op). The profiler estimates
them from static shapes instead of leaving zeros:

- output bytes from the static shape of each output, in a copy of the graph whose fed
  placeholders carry the fed arrays' shapes, so that shape inference propagates the batch size;
- compute time from the op's FLOP count (``tensorflow.python.framework.ops.get_stats_for_node_def``)
  divided by a FLOP rate fitted on the ops that were measured (:func:`fit_flop_rate`), and
  :data:`UNKNOWN_OP_TIME` for ops without a registered FLOP count.

Variables' buffers are not reported by step stats (their memory is allocated by the initializer);
:func:`variable_bytes` reads their size from the variable op's ``dtype`` and ``shape``.

This module imports TensorFlow (lazily) and works on ``tf.Graph`` / ``tf.Operation`` objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPAQUE_ELEMENT_BYTES",
    "UNKNOWN_OP_TIME",
    "ShapeEstimate",
    "dtype_bytes",
    "estimate_op",
    "fit_flop_rate",
    "shaped_graph",
    "tensor_bytes",
    "variable_bytes",
]

UNKNOWN_OP_TIME = 1e-6
"""Seconds assumed for an unmeasured op without a FLOP count: the executor's per-node cost of a
trivial op (``NoOp``, ``Identity``, shape ops take 0.2-3 us per record in traces on this machine)."""

OPAQUE_ELEMENT_BYTES = 8
"""Bytes assumed per element of a tensor whose dtype has no fixed size (resource handles, variants,
strings): one pointer; their real size is not knowable from the graph."""

_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})


@dataclass(frozen=True)
class ShapeEstimate:
    """What static shapes tell about one op at one batch size.

    Attributes
    ----------
    output_sizes : tuple of int
        Estimated bytes of each output slot.
    flops : int or None
        Floating-point operations of one execution, ``None`` when TensorFlow has no count for the
        op type or the shapes it needs are unknown.
    """

    output_sizes: tuple[int, ...]
    flops: int | None


def dtype_bytes(dtype: Any) -> int:
    """Bytes of one element of ``dtype``; :data:`OPAQUE_ELEMENT_BYTES` for handles and strings."""
    try:
        size = int(dtype.size)
    except (TypeError, ValueError, KeyError):  # resource and variant have no numpy type
        return OPAQUE_ELEMENT_BYTES
    return size if size > 0 else OPAQUE_ELEMENT_BYTES


def tensor_bytes(shape: Any, dtype: Any, batch_size: int) -> int:
    """Bytes of a tensor of static ``shape`` (a ``tf.TensorShape``) and ``dtype``.

    Dimensions shape inference left unknown count as ``batch_size`` in the leading position and as
    1 elsewhere; a tensor of unknown rank counts as ``batch_size`` elements.
    """
    dims = shape.as_list() if shape.rank is not None else [None]
    elements = math.prod(
        batch_size if dim is None and position == 0 else (1 if dim is None else dim)
        for position, dim in enumerate(dims)
    )
    return int(elements) * dtype_bytes(dtype)


def shaped_graph(graph: Any, feed_shapes: Mapping[str, Sequence[int]]) -> Any:
    """A copy of ``graph`` in which every fed tensor has the shape of the array fed to it.

    Fed ``Placeholder`` ops get their ``shape`` attribute replaced; other fed tensors are mapped to
    new placeholders. TensorFlow's shape inference then carries the batch size through the graph.

    Parameters
    ----------
    graph : tf.Graph
    feed_shapes : Mapping of str to sequence of int
        Fed tensor name (``"x:0"``) to the fed array's shape.

    Returns
    -------
    tf.Graph
        Ops keep their names.
    """
    import tensorflow as tf

    graph_def = graph.as_graph_def()
    nodes = {node.name: node for node in graph_def.node}
    input_map = {}
    remapped = {}
    for name, shape in feed_shapes.items():
        op_name, _, slot = name.partition(":")
        node = nodes.get(op_name)
        if node is not None and node.op == "Placeholder" and slot in ("", "0"):
            node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(shape)).as_proto())
        else:
            remapped[name] = shape
    copy = tf.Graph()
    with copy.as_default():
        for index, (name, shape) in enumerate(sorted(remapped.items())):
            dtype = graph.get_tensor_by_name(name).dtype
            input_map[name] = tf.compat.v1.placeholder(dtype, list(shape), name=f"_tfplace_feed_{index}")
        tf.graph_util.import_graph_def(graph_def, input_map=input_map, name="")
    return copy


def estimate_op(op: Any, batch_size: int) -> ShapeEstimate:
    """Output sizes and FLOPs of ``op`` (a ``tf.Operation``, ideally of a :func:`shaped_graph`)."""
    from tensorflow.python.framework import ops as tf_ops
    from tensorflow.python.util import deprecation

    sizes = tuple(tensor_bytes(out.shape, out.dtype, batch_size) for out in op.outputs)
    try:
        with deprecation.silence():  # TensorFlow's FLOP registry calls a deprecated TF1 helper
            flops = tf_ops.get_stats_for_node_def(op.graph, op.node_def, "flops").value
    except (ValueError, TypeError, KeyError):  # a shape the count needs is unknown
        flops = None
    return ShapeEstimate(output_sizes=sizes, flops=None if flops is None else int(flops))


def fit_flop_rate(flops: Mapping[str, int | None], times: Mapping[str, float]) -> float | None:
    """FLOPs per second of the measured ops that have a FLOP count: ``sum(flops) / sum(times)``.

    The ratio of sums weighs ops by their size, so the many tiny ops whose time is executor
    overhead do not drown the rate of the large kernels. ``None`` when no measured op has FLOPs.
    """
    pairs = [(flops[op], times[op]) for op in times if flops.get(op)]
    total_flops = sum(f for f, _ in pairs if f is not None)
    total_time = sum(t for _, t in pairs)
    return total_flops / total_time if total_flops > 0 and total_time > 0 else None


def variable_bytes(ops: Iterable[Any]) -> dict[str, int]:
    """Bytes of the buffer of every variable op among ``ops``, from its ``dtype`` and ``shape``.

    Unknown dimensions count as 1 (a variable created with ``validate_shape=False``).
    """
    import tensorflow as tf

    sizes = {}
    for op in ops:
        if op.type in _VARIABLE_OPS:
            shape = tf.TensorShape(op.get_attr("shape"))
            dtype = tf.as_dtype(op.get_attr("dtype"))
            sizes[op.name] = tensor_bytes(shape, dtype, 1)
    return sizes
