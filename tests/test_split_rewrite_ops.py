"""Op families the rewrite splits beyond the batch: SAME average pooling and convolution gradients
along the height and width, depthwise convolutions and their gradients along channels, gathers over
shards of their table; forced plans compute the outputs and gradients of the unsplit graph, and ops
inside legacy while loops are refused naming the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfplace.split.plan import OpSplit
from tfplace.split.rules import CHANNEL, HEIGHT, REDUCTION, WIDTH
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import compare_split
from tfplace.tf_graph.split_rewrite import apply_split_plan, rewrite_graph_def, uniform_plan

pytestmark = pytest.mark.tensorflow

TOLERANCE = 1e-5
"""Largest deviation relative to max(1, |value|): float sums in another order, one rounding."""
THREE_CPUS = [f"/device:CPU:{i}" for i in range(3)]


def _graph(build: Callable[[Any], list[Any]], shape: tuple[int, ...]) -> tuple[tf.Graph, list[str], dict]:
    """A forward graph ``build(x)`` returning its outputs, its fetches (the outputs, then the gradients
    of a loss over them with respect to ``x`` and every weight), and a feed of ``x``."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        outputs = build(x)
        loss = tf.add_n([tf.reduce_sum(tf.square(y)) for y in outputs])
        weights = [
            op.outputs[0] for op in graph.get_operations() if op.type == "Const" and op.name.startswith("w")
        ]
        gradients = tf.gradients(loss, [x, *weights])
    fetches = [t.name for t in (*outputs, *gradients)]
    feeds = {"x:0": np.random.default_rng(7).standard_normal(shape).astype(np.float32)}
    return graph, fetches, feeds


def _weight(name: str, shape: list[int]) -> Any:
    return tf.constant(
        np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape).astype(np.float32), name=name
    )


def _split_types(plan: Any, graph: tf.Graph, dimension: str) -> set[str]:
    return {
        graph.get_operation_by_name(op).type for op, s in plan.split_ops.items() if s.dimension == dimension
    }


@pytest.mark.parametrize(("stride", "size"), [(1, 3), (2, 3), (2, 2), (3, 5)])
@pytest.mark.parametrize("dimension", [HEIGHT, WIDTH])
def test_same_average_pooling_splits_spatially_and_its_border_windows_average_only_valid_values(
    stride: int, size: int, dimension: str
) -> None:
    def build(x: Any) -> list[Any]:
        hidden = tf.nn.conv2d(x, _weight("w1", [3, 3, 3, 4]), 1, "SAME")
        return [tf.nn.avg_pool2d(hidden, size, stride, "SAME")]

    graph, fetches, feeds = _graph(build, (2, 13, 11, 3))
    plan = uniform_plan(graph, THREE_CPUS, dimension)
    assert {"AvgPool", "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"} <= _split_types(
        plan, graph, dimension
    )
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


@pytest.mark.parametrize(
    ("stride", "size", "padding"), [(1, 3, "SAME"), (2, 3, "SAME"), (2, 2, "VALID"), (3, 2, "VALID")]
)
@pytest.mark.parametrize("pool", [tf.nn.max_pool2d, tf.nn.avg_pool2d])
@pytest.mark.parametrize("dimension", [HEIGHT, WIDTH])
def test_pooling_gradients_split_spatially_compute_the_whole_input_gradient(
    stride: int, size: int, padding: str, pool: Any, dimension: str
) -> None:
    # A piece runs every window touching its rows whole (a max on -inf padding, an average's border
    # windows rescaled) and keeps its rows; a window of 2 at stride 3 leaves rows no window reads.
    def build(x: Any) -> list[Any]:
        hidden = tf.nn.conv2d(x, _weight("w1", [3, 3, 3, 4]), 1, "SAME")
        return [pool(hidden, size, stride, padding)]

    graph, fetches, feeds = _graph(build, (2, 13, 11, 3))
    plan = uniform_plan(graph, THREE_CPUS, dimension)
    gradient = "MaxPoolGrad" if pool is tf.nn.max_pool2d else "AvgPoolGrad"
    assert gradient in _split_types(plan, graph, dimension)
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [
        (3, 1, "SAME", 1),
        (3, 2, "SAME", 1),
        (3, 1, "VALID", 2),
        (1, 2, "VALID", 1),
        (1, 3, "SAME", 1),
        (5, 2, "VALID", 1),
    ],
)
@pytest.mark.parametrize("dimension", [HEIGHT, WIDTH])
def test_convolution_gradients_split_spatially_compute_the_whole_input_and_filter_gradients(
    kernel: int, stride: int, padding: str, dilation: int, dimension: str
) -> None:
    # A 1x1 window at stride 2 or 3 leaves input rows no window reads (zero gradient); VALID at
    # stride 2 leaves the last row unread: pieces pad those rows with zeros.
    def build(x: Any) -> list[Any]:
        return [tf.nn.conv2d(x, _weight("w1", [kernel, kernel, 3, 4]), stride, padding, dilations=dilation)]

    graph, fetches, feeds = _graph(build, (2, 14, 13, 3))
    plan = uniform_plan(graph, THREE_CPUS, dimension)
    assert {"Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"} <= _split_types(plan, graph, dimension)
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run == check.pieces_in_step == 9 and not check.misplaced


def test_filter_gradient_pieces_are_partial_sums_joined_by_addn() -> None:
    graph, _, _ = _graph(lambda x: [tf.nn.conv2d(x, _weight("w1", [3, 3, 3, 4]), 1, "SAME")], (2, 8, 8, 3))
    rewrite = rewrite_graph_def(uniform_plan(graph, THREE_CPUS, HEIGHT), graph)
    nodes = {node.name: node for node in rewrite.graph_def.node}
    (filter_grad,) = [op.name for op in graph.get_operations() if op.type == "Conv2DBackpropFilter"]
    joined = nodes[f"{filter_grad}/join_0"]
    assert joined.op == "AddN" and len(joined.input) == 3
    assert all(nodes[f"{filter_grad}/piece{i}"].attr["padding"].s == b"EXPLICIT" for i in range(3))


@pytest.mark.parametrize(("multiplier", "stride", "devices"), [(1, 1, 2), (2, 1, 3), (3, 2, 2)])
def test_depthwise_convolutions_and_their_gradients_split_along_channels(
    multiplier: int, stride: int, devices: int
) -> None:
    def build(x: Any) -> list[Any]:
        return [
            tf.nn.depthwise_conv2d(x, _weight("w1", [3, 3, 5, multiplier]), [1, stride, stride, 1], "SAME")
        ]

    graph, fetches, feeds = _graph(build, (2, 9, 9, 5))
    names = [f"/device:CPU:{i}" for i in range(devices)]
    plan = uniform_plan(graph, names, CHANNEL, shares=None)
    assert _split_types(plan, graph, CHANNEL) == {
        "DepthwiseConv2dNative",
        "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
    }
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(devices))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run == check.pieces_in_step == 3 * devices and not check.misplaced


@pytest.mark.parametrize(
    ("multiplier", "stride", "padding", "dilation"),
    [(1, 1, "SAME", 1), (2, 2, "SAME", 1), (1, 1, "VALID", 2), (3, 2, "VALID", 1)],
)
@pytest.mark.parametrize("dimension", [HEIGHT, WIDTH])
def test_depthwise_convolutions_and_their_gradients_split_spatially_with_halos(
    multiplier: int, stride: int, padding: str, dilation: int, dimension: str
) -> None:
    def build(x: Any) -> list[Any]:
        kernel = _weight("w1", [3, 3, 5, multiplier])
        return [tf.nn.depthwise_conv2d(x, kernel, [1, stride, stride, 1], padding, dilations=[dilation] * 2)]

    graph, fetches, feeds = _graph(build, (2, 13, 14, 5))
    plan = uniform_plan(graph, THREE_CPUS, dimension)
    assert _split_types(plan, graph, dimension) == {
        "DepthwiseConv2dNative",
        "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
    }
    check = compare_split(graph, plan, fetches, feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


@pytest.mark.parametrize("id_type", [tf.int32, tf.int64])
def test_a_gather_split_over_its_table_rows_sums_shards_that_hold_each_id_once(id_type: Any) -> None:
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        table = tf.compat.v1.get_variable(
            "table", [10, 4], initializer=tf.compat.v1.random_normal_initializer(seed=3), use_resource=False
        )
        ids = tf.compat.v1.placeholder(id_type, [3, 5], name="ids")
        rows = tf.gather(table, ids, name="lookup")
        loss = tf.reduce_sum(tf.square(rows) * tf.range(4, dtype=tf.float32), name="loss")
        (gradient,) = tf.gradients(loss, [table])
        tf.convert_to_tensor(gradient, name="table_gradient")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    plan = uniform_plan(graph, THREE_CPUS, REDUCTION, ops={"lookup": REDUCTION})
    assert plan.splits["lookup"].dimension == REDUCTION
    feeds = {"ids:0": np.array([[0, 3, 9, 3, 4], [6, 7, 8, 2, 0], [9, 9, 1, 5, 3]])}
    fetches = ["lookup:0", "table_gradient:0", "loss:0", "train"]
    check = compare_split(graph, plan, fetches, feeds, steps=3, config=virtual_cpu_config(3))
    assert check.max_deviation == 0.0, check.worst  # one term of each sum is not zero: exact
    assert check.pieces_run == 3 and not check.misplaced


def test_an_op_inside_a_legacy_while_loop_is_refused_naming_its_frame() -> None:
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
            _, total = tf.compat.v1.while_loop(
                lambda i, acc: i < 3,
                lambda i, acc: (i + 1, tf.nn.relu(acc) * 2.0),
                [tf.constant(0), x],
                name="loop",
            )
            tf.identity(total, name="y")
    finally:
        tf.compat.v1.enable_control_flow_v2()
    body = [op.name for op in graph.get_operations() if op.type == "Relu"]
    assert len(body) == 1
    plan = uniform_plan(graph, THREE_CPUS[:2], "batch")
    assert plan.splits[body[0]].degree == 1  # forced plans keep loop bodies whole
    plan.splits[body[0]] = OpSplit(tuple(THREE_CPUS[:2]), "batch")
    with pytest.raises(
        ValueError, match=r"\(Relu\): is inside the legacy while loop frame 'loop/while_context'"
    ) as refused:
        apply_split_plan(plan, graph)
    assert "\n" not in str(refused.value)


def _with_v1_input_gradients(graph_def: Any) -> tf.Graph:
    """``graph_def`` with every ``Conv2DBackpropInputV2`` computed by ``Conv2DBackpropInput`` of its
    input's ``Shape``: what V2 computes, on a kernel this TensorFlow build registers."""
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)
    for node in list(copy.node):
        if node.op == "Conv2DBackpropInputV2":
            shape = copy.node.add(name=f"{node.name}/input_shape", op="Shape", device=node.device)
            shape.input.append(node.input[0])
            shape.attr["T"].type, shape.attr["out_type"].type = node.attr["T"].type, tf.int32.as_datatype_enum
            node.op, node.input[0] = "Conv2DBackpropInput", shape.name
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(copy, name="")
    return graph


@pytest.mark.parametrize("dimension", ["batch", HEIGHT, WIDTH, CHANNEL])
def test_conv2d_backprop_input_v2_pieces_read_their_own_rows_of_the_input_for_its_shape(
    dimension: str,
) -> None:
    # TensorFlow 2.21 registers no kernel for Conv2DBackpropInputV2 on any device: the pieces are
    # checked by running both graphs with V2 computed as V1 of the input's shape.
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 11, 10, 3], name="x")
        dy = tf.compat.v1.placeholder(tf.float32, [2, 6, 5, 4], name="dy")
        x_pieces = tf.identity(x, name="x_pieces")
        tf.raw_ops.Conv2DBackpropInputV2(
            input=x_pieces,
            filter=_weight("w1", [3, 3, 3, 4]),
            out_backprop=dy,
            strides=[1, 2, 2, 1],
            padding="SAME",
            name="dx",
        )
    plan = uniform_plan(graph, THREE_CPUS[:2], dimension, ops={"dx": dimension, "x_pieces": "batch"})
    assert plan.splits["dx"].dimension == dimension
    rewrite = rewrite_graph_def(plan, graph)
    pieces = [node for node in rewrite.graph_def.node if node.name.startswith("dx/piece")]
    assert [node.op for node in pieces] == ["Conv2DBackpropInputV2"] * 2
    rng = np.random.default_rng(9)
    feeds = {"x:0": rng.standard_normal((2, 11, 10, 3)), "dy:0": rng.standard_normal((2, 6, 5, 4))}
    values = []
    for graph_def in (graph.as_graph_def(), rewrite.graph_def):
        with tf.compat.v1.Session(
            graph=_with_v1_input_gradients(graph_def), config=virtual_cpu_config(2)
        ) as session:
            values.append(session.run("dx:0", feeds))
    np.testing.assert_allclose(
        values[1], values[0], rtol=0, atol=TOLERANCE * max(1.0, np.abs(values[0]).max())
    )
