"""Padding splits: ``Pad`` and ``PadV2`` run as pieces along the batch, the channels, the height and
the width (each spatial piece padding by the part of the padding in its rows), ``MirrorPad`` along
the batch and the channels; the pieces compute the unsplit graph's outputs and gradients, and
splits that cannot be cut are refused naming the op."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfplace.split.plan import OpSplit
from tfplace.split.rules import BATCH, CHANNEL, HEIGHT, WIDTH, op_rules
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_attrs import op_split_attrs
from tfplace.tf_graph.split_check import compare_split
from tfplace.tf_graph.split_rewrite import rewrite_graph_def, uniform_plan

pytestmark = pytest.mark.tensorflow

TOLERANCE = 1e-5
"""Largest deviation relative to max(1, |value|): a filter gradient's partial sums in another order."""
THREE_CPUS = [f"/device:CPU:{i}" for i in range(3)]
SHAPE = (3, 9, 10, 4)


def _padded_network(paddings: list[list[int]]) -> tuple[tf.Graph, list[str], dict[str, Any]]:
    """x -> Pad -> 3x3 convolution (stride 2, VALID) -> PadV2 (constant 1.5) -> loss; fetches: both
    pads and the gradients of the loss with respect to x and the filter."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")
        depth = SHAPE[3] + sum(paddings[3])
        kernel = np.random.default_rng(1).standard_normal((3, 3, depth, 6)).astype(np.float32)
        padded = tf.pad(x, paddings, name="pad")
        hidden = tf.nn.conv2d(padded, tf.constant(kernel, name="w"), 2, "VALID")
        bordered = tf.pad(hidden, [[0, 0], [1, 2], [2, 0], [0, 0]], constant_values=1.5, name="border")
        loss = tf.reduce_sum(tf.square(bordered))
        gradients = tf.gradients(loss, [x, graph.get_tensor_by_name("w:0")])
    fetches = [padded.name, bordered.name, *(t.name for t in gradients)]
    feeds = {"x:0": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}
    return graph, fetches, feeds


def _plan(graph: tf.Graph, dimension: str) -> Any:
    """Every pad and the convolution split along ``dimension`` over three CPUs (along the batch: every
    op that processes examples)."""
    if dimension == BATCH:
        return uniform_plan(graph, THREE_CPUS, BATCH)
    ops = {op.name: dimension for op in graph.get_operations() if op.type in ("Pad", "PadV2", "Conv2D")}
    return uniform_plan(graph, THREE_CPUS, dimension, ops=ops)


@pytest.mark.parametrize("dimension", [BATCH, CHANNEL, HEIGHT, WIDTH])
def test_pads_split_along_each_dimension_compute_the_unsplit_outputs_and_gradients(dimension: str) -> None:
    graph, fetches, feeds = _padded_network([[0, 0], [3, 2], [1, 2], [0, 0]])
    plan = _plan(graph, dimension)
    assert {plan.splits["pad"].dimension, plan.splits["border"].dimension} == {dimension}
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


def test_a_spatial_piece_pads_its_input_rows_by_the_part_of_the_padding_in_its_range() -> None:
    # 9 rows padded 3 before and 2 after: 14 rows, cut 0:5, 5:9, 9:14 over three pieces.
    graph, _, _ = _padded_network([[0, 0], [3, 2], [1, 2], [0, 0]])
    rewrite = rewrite_graph_def(_plan(graph, HEIGHT), graph)
    nodes = {node.name: node for node in rewrite.graph_def.node}
    amounts = [
        tf.make_ndarray(nodes[f"pad/piece{i}/paddings"].attr["value"].tensor).tolist() for i in range(3)
    ]
    assert [rows[1] for rows in amounts] == [[3, 0], [0, 0], [0, 2]]
    assert all(rows[2] == [1, 2] for rows in amounts)  # the width padded as the whole op pads it


def test_the_split_attributes_say_which_axes_a_pad_pads_and_the_rules_follow_them() -> None:
    graph, _, _ = _padded_network([[0, 0], [3, 2], [1, 2], [0, 0]])
    attrs = op_split_attrs(graph.get_operation_by_name("pad"))
    assert attrs == {"pads_axis0": False, "pads_last_axis": False}
    assert set(op_rules("Pad", attrs)) == {BATCH, CHANNEL, HEIGHT, WIDTH}
    assert set(op_rules("Pad", {"pads_axis0": True, "pads_last_axis": True})) == {HEIGHT, WIDTH}
    assert set(op_rules("MirrorPad", attrs)) == {BATCH, CHANNEL}


@pytest.mark.parametrize(
    ("paddings", "dimension", "message"),
    [
        ([[1, 0], [0, 0], [0, 0], [0, 0]], BATCH, "cannot split along 'batch'"),
        ([[0, 0], [0, 0], [0, 0], [0, 2]], CHANNEL, "cannot split along 'channel'"),
        ([[0, 0], [0, 0], [1, 8], [0, 0]], WIDTH, "its rows 13:19 along width are all padding"),
    ],
)
def test_pad_splits_that_cannot_be_cut_are_refused_naming_the_op(
    paddings: list[list[int]], dimension: str, message: str
) -> None:
    graph, _, _ = _padded_network(paddings)
    plan = uniform_plan(graph, THREE_CPUS, BATCH, ops={})
    plan.splits["pad"] = OpSplit(tuple(THREE_CPUS), dimension, (1 / 3,) * 3)
    before = graph.as_graph_def()
    with pytest.raises(ValueError, match=f"^op 'pad' \\(Pad\\): {message}"):
        rewrite_graph_def(plan, graph)
    assert graph.as_graph_def() == before


def test_a_mirrored_pad_splits_along_the_batch_and_is_refused_along_the_height() -> None:
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")
        mirrored = tf.pad(x, [[0, 0], [2, 2], [1, 1], [0, 0]], mode="REFLECT", name="mirror")
        gradient = tf.gradients(tf.reduce_sum(tf.square(mirrored)), x)[0]
    feeds = {"x:0": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}
    plan = uniform_plan(graph, THREE_CPUS, BATCH)
    assert plan.splits["mirror"].dimension == BATCH
    check = compare_split(
        graph, plan, [mirrored.name, gradient.name], feeds, steps=1, config=virtual_cpu_config(3)
    )
    assert check.max_deviation < TOLERANCE and not check.misplaced
    plan.splits["mirror"] = OpSplit(tuple(THREE_CPUS), HEIGHT, (1 / 3,) * 3)
    with pytest.raises(ValueError, match=r"^op 'mirror' \(MirrorPad\): cannot split along 'height'"):
        rewrite_graph_def(plan, graph)
