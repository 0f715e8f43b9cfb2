"""Small builders shared by the tests."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.core.transfer import TransferModel

#: A link with no per-transfer overhead and 1 second per byte: transfer times equal byte counts.
UNIT_LINK = TransferModel(k=1.0, b=0.0, name="unit")


def chain_graph(
    compute: Iterable[float], edge_bytes: Iterable[int], memory: Iterable[int] | None = None
) -> CostGraph:
    """ops o0 -> o1 -> ... with the given compute times, edge bytes (= seconds on UNIT_LINK) and
    persistent memory."""
    compute = list(compute)
    memory = list(memory) if memory is not None else [0] * len(compute)
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    sizes = [*edge_bytes, 0]
    for i, (t, m) in enumerate(zip(compute, memory)):
        graph.add_op(
            f"o{i}", compute_time=t, persistent_bytes=m, output_sizes=(sizes[i],) if sizes[i] else ()
        )
    for i in range(len(compute) - 1):
        graph.add_dependency(f"o{i}", f"o{i + 1}", slots=(0,) if sizes[i] else (), control=not sizes[i])
    return graph


def graph_from_edges(
    edges: Iterable[tuple[str, str, int]],
    compute: dict[str, float] | None = None,
    **op_attrs: dict[str, object],
) -> CostGraph:
    """A graph from ``(src, dst, bytes)`` triples on UNIT_LINK; each op's single output carries the
    largest of its out-edges' bytes."""
    edges = list(edges)
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    names = list(dict.fromkeys(n for e in edges for n in e[:2]))
    for name in names:
        out = max((b for s, _, b in edges if s == name), default=0)
        attrs = {key: value[name] for key, value in op_attrs.items() if name in value}
        graph.add_op(
            name, compute_time=(compute or {}).get(name, 1.0), output_sizes=(out,) if out else (), **attrs
        )
    for src, dst, nbytes in edges:
        graph.add_dependency(src, dst, slots=(0,) if nbytes else (), nbytes=nbytes, control=not nbytes)
    return graph


_OVERCOMMIT = re.compile(r"(\S+) is overcommitted by ([\d,]+) bytes \(([\d,]+) placed on ([\d,]+)\)")


def reported_overcommits(warnings: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """``{device: (shortfall, bytes placed, memory)}`` from a placement's overcommit warnings."""
    reported = {}
    for warning in warnings:
        match = _OVERCOMMIT.fullmatch(warning)
        if match:
            shortfall, used, memory = (int(match.group(i).replace(",", "")) for i in (2, 3, 4))
            reported[match.group(1)] = (shortfall, used, memory)
    return reported


def variable_values(graph):
    """Fetches reading every variable (weights, optimizer slots, moving averages) without new ops."""
    import tensorflow as tf

    return [
        v.name if v.op.type == "VariableV2" else f"{v.op.name}/Read/ReadVariableOp:0"
        for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    ]


def feed_function(entry: dict[str, Any], seed: int = 0) -> Callable[[int], dict[str, np.ndarray]]:
    """``feed_fn(batch_size)`` for a saved test graph's ``graphs.json`` entry: fixed random data per
    batch size; integer placeholders get labels in ``0..2``, ``None`` dimensions the batch size."""

    def feed_fn(batch_size: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng((seed, batch_size))
        feeds = {}
        for name, spec in entry["placeholders"].items():
            shape = [batch_size if d is None else d for d in spec["shape"]]
            if spec["dtype"].startswith("int"):
                feeds[f"{name}:0"] = rng.integers(0, 3, shape).astype(spec["dtype"])
            else:
                feeds[f"{name}:0"] = rng.standard_normal(shape).astype(spec["dtype"])
        return feeds

    return feed_fn


#: Small variants of every model, fast enough to train on a CPU in a test.
SMALL_MODELS: dict[str, dict[str, Any]] = {
    "inception_v3": {"image_size": 75, "classes": 10},
    "nmt": {"units": 8, "layers": 3, "source_length": 4, "target_length": 3, "vocab_size": 13},
    "nmt_while": {"units": 8, "layers": 3, "source_length": 4, "target_length": 3, "vocab_size": 13},
    "transformer": {
        "layers": 2,
        "heads": 2,
        "d_model": 8,
        "d_ff": 16,
        "source_length": 5,
        "target_length": 4,
        "vocab_size": 13,
        "dropout": 0.0,
    },
    "tensor_holography": {"image_size": 16, "conv_layers": 6, "filters": 4},
}


def small_cnn_graph(batch: int = 8) -> CostGraph:
    """A convolution's training step at ``batch`` with the split fields of schema 3: images and a
    variable feed a Conv2D, its Relu, a loss summed over the batch, the ReluGrad, the filter's
    gradient (Conv2DBackpropFilter) and the variable's update. Activations are ``batch * 1000``
    bytes, the filter 400 bytes; times in seconds, 1 per example for the convolution's ops."""
    nhwc = {"data_format": "NHWC"}
    act, act_shape = batch * 1000, ((-1, 10, 10, 10),)
    graph = CostGraph(batch_size=batch, transfer_model=UNIT_LINK.to_dict())
    ops: list[tuple[str, str, float, int, dict[str, Any] | None, list[tuple[str, int]]]] = [
        ("x", "Placeholder", 0.0, act, None, []),
        ("w", "VarHandleOp", 0.0, 400, None, []),
        ("conv", "Conv2D", 1.0 * batch, act, nhwc, [("x", 0), ("w", 0)]),
        ("relu", "Relu", 0.1 * batch, act, None, [("conv", 0)]),
        ("loss", "Sum", 0.05 * batch, 4, {"reduces_axis0": True}, [("relu", 0), ("axes", 0)]),
        ("axes", "Const", 0.0, 16, None, []),
        ("relu_grad", "ReluGrad", 0.1 * batch, act, None, [("loss", 0), ("relu", 0)]),
        ("dw", "Conv2DBackpropFilter", 1.0 * batch, 400, nhwc, [("x", 0), ("w", 0), ("relu_grad", 0)]),
        ("update", "AssignSubVariableOp", 0.001, 0, None, [("w", 0), ("dw", 0)]),
    ]
    for name, op_type, seconds, size, attrs, _ in ops:
        shapes = act_shape if size == act else ((),)
        graph.add_op(
            name,
            op_type=op_type,
            compute_time=seconds,
            output_sizes=(size,),
            output_shapes=shapes,
            attrs=attrs,
            persistent_bytes=400 if op_type == "VarHandleOp" else 0,
        )
    for name, *_, inputs in ops:
        graph.nodes[name]["inputs"] = tuple(inputs)
        for producer, slot in inputs:
            graph.add_dependency(producer, name, slots=(slot,))
    return graph
