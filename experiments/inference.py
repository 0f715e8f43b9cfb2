"""Inference (forward-only) cost graphs for the split-plan latency table (issue 15, step 5).

Two sources:

* :func:`forward_graph` cuts the forward pass out of a saved *training* graph (Inception V3's): every
  gradient op (``gradient_of``, or named under ``gradients/``) and every op that depends on one (the
  optimizer's updates) is dropped; its batch-norm ops keep their training-mode kernels.
* :func:`profile_resnet50_inference` profiles a tf_keras ResNet50 built forward-only in graph mode
  (``training=False``: inference batch norm) at small batches, predicts the target batch by
  Standard Evaluation's regression, converts the times to a GPU's by the device model and records
  what splitting needs (:func:`tfplace.tf_graph.split_attrs.annotate_split_fields`). The result is
  committed as ``results/graphs/resnet50_inference.json.gz`` so the tables are remade without
  TensorFlow.

:func:`at_batch` then re-costs either graph at each latency batch: an op that processes examples
(one data parallelism splits on the batch) takes what a batch piece of ``batch / B`` costs
(:func:`tfplace.split.costs.piece_time`: the regression's time model when the graph has
``batch_costs``, else a kernel's launch plus the share of the rest), and its outputs and scratch
``batch / B`` of the bytes; weight-side ops keep theirs.
"""

from __future__ import annotations

import os
from typing import Any

import networkx as nx

from tfplace.core.costgraph import CostGraph
from tfplace.core.device_model import DEVICE_MODELS, convert_graph
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.split.costs import piece_time
from tfplace.split.data_parallel import data_parallel_plan

__all__ = [
    "RESNET50_BATCH",
    "RESNET50_IMAGE_SIZE",
    "at_batch",
    "forward_graph",
    "profile_resnet50_inference",
    "resnet50_forward",
]

RESNET50_IMAGE_SIZE = 224
"""ResNet50's image side: ImageNet's, the size its latency is usually quoted at."""

RESNET50_BATCH = 64
"""The batch the saved ResNet50 inference graph is predicted at: the largest latency batch, which
:func:`at_batch` scales down from (the regression is fitted on profiled batches 1, 2, 4)."""


def forward_graph(training: CostGraph) -> CostGraph:
    """The forward pass of a training graph (module docstring), at the training graph's batch."""
    backward = {op for op in training if training.nodes[op].get("gradient_of") or op.startswith("gradients/")}
    for op in list(nx.topological_sort(training)):
        if any(u in backward for u in training.predecessors(op)):
            backward.add(op)
    forward = CostGraph(training.subgraph(op for op in training if op not in backward).copy())
    forward.graph.update(training.graph)
    return forward


def at_batch(graph: CostGraph, batch: int) -> CostGraph:
    """``graph`` (costs at its ``batch_size`` ``B``) re-costed at ``batch <= B`` (module docstring)."""
    profiled = int(graph.graph["batch_size"])
    if not 0 < batch <= profiled:
        raise ValueError(f"the batch must be in [1, {profiled}] (the graph's), got {batch}")
    two = DeviceSet.parse("/device:GPU:0-1", DEVICE_MODELS["V100-32GB"].memory)
    examples = [  # found at the graph's batch, which two devices can always split
        op
        for op, split in data_parallel_plan(graph, two).splits.items()
        if split.dimension in ("batch", "reduction")
    ]
    scaled = graph.copy()
    scaled.graph["batch_size"] = batch
    share = batch / profiled
    for op in examples:
        node = scaled.nodes[op]
        node["compute_time"] = piece_time(node, "batch", share, profiled)
        node["output_sizes"] = tuple(int(size * share) for size in node["output_sizes"])
        node["temporary_bytes"] = int(node["temporary_bytes"] * share)
    for u, _, edge in scaled.edges(data=True):
        if not edge["control"]:
            sizes = scaled.nodes[u]["output_sizes"]
            edge["bytes"] = sum(sizes[slot] for slot in edge["slots"])
    scaled.set_transfer_model(graph.transfer_model)
    return scaled


def profile_resnet50_inference(
    link: TransferModel,
    *,
    device: str = "V100-32GB",
    image_size: int = RESNET50_IMAGE_SIZE,
    batch: int = RESNET50_BATCH,
    profile_batch_sizes: tuple[int, ...] = (1, 2, 4),
    cache_dir: str | os.PathLike[str] | None = None,
) -> CostGraph:
    """The ResNet50 forward pass's cost graph at ``batch`` on ``device`` (module docstring), its edges
    priced on ``link``. Imports TensorFlow."""
    from tfplace.api import estimate_costs
    from tfplace.estimator.shapes import shaped_graph
    from tfplace.tf_graph.split_attrs import PROBE_BATCHES, annotate_split_fields

    graph, output, init_op, feed_fn = resnet50_forward(image_size)
    estimate = estimate_costs(
        graph,
        output,
        feed_fn,
        batch,
        profile_batch_sizes=profile_batch_sizes,
        init_op=init_op,
        cache_dir=cache_dir,
    )
    costs = convert_graph(estimate.cost_graph, DEVICE_MODELS[device])
    probes = tuple(
        shaped_graph(graph, {key: value.shape for key, value in feed_fn(b).items()}) for b in PROBE_BATCHES
    )
    annotate_split_fields(costs, graph, (probes[0], probes[1]))
    costs.graph["name"] = "resnet50_inference"
    costs.set_transfer_model(link)
    return costs


def resnet50_forward(image_size: int) -> tuple[Any, str, str, Any]:
    """A seeded graph-mode ResNet50 (1000 classes, no weights loaded) applied with ``training=False``:
    the graph, its output's name, the initializer's name and the feed function."""
    import tensorflow as tf
    import tf_keras

    from models.common import Input, feed_function, model_graph, placeholders

    inputs = [Input("images", (image_size, image_size, 3), "float32", -1.0, 1.0)]
    with model_graph() as graph:
        images = placeholders(inputs)["images"]
        model = tf_keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3))
        output = model(images, training=False)
        init_op = tf.compat.v1.global_variables_initializer()
    return graph, output.name, init_op.name, feed_function(inputs)
