"""A split plan rewritten into TensorFlow runs each split op as pieces on their devices and computes
what the unsplit graph computes; bad plans are refused and leave the graph as it was."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfplace.core.devices import DeviceSet
from tfplace.split.expand import simulate_plan
from tfplace.split.plan import OpSplit, SplitPlan
from tfplace.split.rules import BATCH, CHANNEL, HEIGHT, WIDTH
from tfplace.tf_graph.cluster import LocalCluster
from tfplace.tf_graph.importer import import_graph
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import compare_split
from tfplace.tf_graph.split_rewrite import apply_split_plan, rewrite_graph_def, uniform_plan

pytestmark = pytest.mark.tensorflow

TWO_CPUS = ["/device:CPU:0", "/device:CPU:1"]
THREE_CPUS = [f"/device:CPU:{i}" for i in range(3)]
TOLERANCE = 1e-5
"""Largest deviation, relative to max(1, |value|): pieces differ from the whole op by float sums only."""


def small_training_graph(batch: int = 6) -> tuple[tf.Graph, dict[str, np.ndarray]]:
    """Conv (stride 2, SAME) + bias + relu, max pool (SAME), conv (VALID), dense, mean cross-entropy,
    SGD: every kind of join (concatenation, weight gradients summed, a mean over the batch)."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [batch, 12, 12, 3], name="images")
        labels = tf.compat.v1.placeholder(tf.int32, [batch], name="labels")

        def weight(name: str, shape: list[int]) -> Any:
            init = tf.compat.v1.random_normal_initializer(0.0, 0.3, seed=len(name))
            return tf.compat.v1.get_variable(name, shape, initializer=init)

        hidden = tf.nn.conv2d(images, weight("w1", [3, 3, 3, 8]), 2, "SAME")
        hidden = tf.nn.relu(tf.nn.bias_add(hidden, weight("b1", [8])))
        hidden = tf.nn.max_pool2d(hidden, 3, 2, "SAME")
        hidden = tf.nn.conv2d(hidden, weight("w2", [2, 2, 8, 6]), 1, "VALID")
        hidden = tf.reshape(hidden, [batch, -1])
        logits = tf.matmul(hidden, weight("w3", [hidden.shape[1], 5])) + weight("b3", [5])
        entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        tf.reduce_mean(entropy, name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            graph.get_tensor_by_name("loss:0"), name="train"
        )
    rng = np.random.default_rng(0)
    feeds = {
        "images:0": rng.standard_normal((batch, 12, 12, 3)).astype(np.float32),
        "labels:0": rng.integers(0, 5, batch).astype(np.int32),
    }
    return graph, feeds


def windowed_graph(padding: str, stride: int, dilation: int, pool: str) -> tuple[tf.Graph, str, dict]:
    """A convolution then a 3x3 pooling window (max: same padding as the convolution; average:
    VALID, see the refusal of SAME), forward only, on an odd-sized image."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [2, 13, 11, 3], name="images")
        kernel = tf.constant(np.random.default_rng(1).standard_normal((3, 3, 3, 4)).astype(np.float32))
        conv = tf.nn.conv2d(images, kernel, stride, padding, dilations=dilation)
        pool_fn = tf.nn.max_pool2d if pool == "max" else tf.nn.avg_pool2d
        output = pool_fn(conv, 3, 1, padding if pool == "max" else "VALID")
    feeds = {"images:0": np.random.default_rng(2).standard_normal((2, 13, 11, 3)).astype(np.float32)}
    return graph, output.name, feeds


def test_a_batch_split_training_graph_keeps_its_losses_and_weights_over_20_steps() -> None:
    graph, feeds = small_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    assert plan.splits["gradients/Conv2D_grad/Conv2DBackpropFilter"].dimension == BATCH
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=20, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.values[-1][0] < check.values[0][0]  # it trains
    assert check.pieces_run > 20 and not check.misplaced


@pytest.mark.parametrize("dimension", [CHANNEL, HEIGHT])
def test_channel_and_height_splits_of_a_training_graph_compute_the_same_step(dimension: str) -> None:
    graph, feeds = small_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, dimension)
    assert plan.split_ops
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=3, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


@pytest.mark.parametrize(
    ("padding", "stride", "dilation", "pool"),
    [("SAME", 1, 1, "max"), ("SAME", 2, 1, "avg"), ("VALID", 1, 2, "max"), ("VALID", 2, 1, "avg")],
)
@pytest.mark.parametrize("dimension", [HEIGHT, WIDTH])
def test_spatial_pieces_read_halos_and_compute_exactly_the_windows_of_the_whole_op(
    padding: str, stride: int, dilation: int, pool: str, dimension: str
) -> None:
    graph, output, feeds = windowed_graph(padding, stride, dilation, pool)
    plan = uniform_plan(graph, [f"/device:CPU:{i}" for i in range(3)], dimension)
    assert {op for op, split in plan.split_ops.items() if split.dimension == dimension} == {
        op.name for op in graph.get_operations() if op.type in ("Conv2D", "MaxPool", "AvgPool")
    }
    check = compare_split(graph, plan, [output], feeds, steps=1, config=virtual_cpu_config(3))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run == check.pieces_in_step == 6 and not check.misplaced


def test_ops_split_alike_pass_pieces_straight_on_and_weights_are_one_tensor_for_every_piece() -> None:
    graph, _ = small_training_graph()
    rewrite = rewrite_graph_def(uniform_plan(graph, TWO_CPUS, BATCH), graph)
    nodes = {node.name: node for node in rewrite.graph_def.node}
    for index in (0, 1):
        relu = nodes[f"Relu/piece{index}"]
        assert relu.input[0] == f"BiasAdd/piece{index}"  # no ConcatV2 / StridedSlice in between
        assert relu.device == TWO_CPUS[index]
    filters = {nodes[f"Conv2D/piece{i}"].input[1] for i in (0, 1)}
    assert len(filters) == 1 and nodes[filters.pop().split(":")[0]].op != "StridedSlice"
    summed = nodes["gradients/Conv2D_grad/Conv2DBackpropFilter/join_0"]
    assert summed.op == "AddN" and len(summed.input) == 2


def test_every_name_of_the_user_graph_stays_fetchable_in_the_rewrite() -> None:
    graph, _ = small_training_graph()
    rewritten = apply_split_plan(uniform_plan(graph, TWO_CPUS, BATCH), graph)
    for op in graph.get_operations():
        assert len(rewritten.get_operation_by_name(op.name).outputs) == len(op.outputs)
    assert rewritten.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP) or rewritten.get_operation_by_name(
        "train"
    )


def test_a_graph_of_unknown_batch_splits_at_the_plan_batch_size() -> None:
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.nn.relu(tf.matmul(x, tf.ones([4, 3])), name="y")
    plan = uniform_plan(graph, TWO_CPUS, BATCH, batch_size=4)
    with pytest.raises(ValueError, match=r"op 'MatMul' \(MatMul\): its batch dimension has no static size"):
        rewrite_graph_def(plan, graph)
    feeds = {"x:0": np.arange(16, dtype=np.float32).reshape(4, 4)}
    check = compare_split(graph, plan, ["y:0"], feeds, steps=1, config=virtual_cpu_config(2), batch_size=4)
    assert check.max_deviation == 0 and check.pieces_in_step == 4


@pytest.mark.parametrize(
    ("op", "split", "message"),
    [
        (
            "Conv2D",
            OpSplit(tuple(TWO_CPUS), "embedding"),
            r"op 'Conv2D' \(Conv2D\): cannot split along 'embedding'",
        ),
        ("Relu", OpSplit(tuple(TWO_CPUS), HEIGHT), r"op 'Relu' \(Relu\): cannot split along 'height'"),
        (
            "Conv2D",
            OpSplit(tuple(f"/device:CPU:{i}" for i in range(7)), BATCH),
            r"op 'Conv2D' \(Conv2D\): degree 7 exceeds its batch dimension of 6",
        ),
        (
            "Conv2D",
            OpSplit(("/device:CPU:0", "/device:TPU:0"), BATCH),
            r"op 'Conv2D' \(Conv2D\): has no TPU kernel",
        ),
        ("MaxPool2d", OpSplit(tuple(TWO_CPUS), WIDTH, (0.9, 0.1)), r"op 'MaxPool2d' \(MaxPool\): shares"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_op_and_the_graph_is_untouched(
    op: str, split: OpSplit, message: str
) -> None:
    graph, _ = small_training_graph()
    before = graph.as_graph_def()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    plan.splits[op] = split
    for target in (graph, before):
        with pytest.raises(ValueError, match=message) as refused:
            apply_split_plan(plan, target)
        assert "\n" not in str(refused.value)
    assert graph.as_graph_def() == before


def batch_norm_training_graph() -> tuple[tf.Graph, dict[str, np.ndarray]]:
    """A convolution, a training batch norm (fused, moving averages updated), relu, mean loss, SGD:
    on 5 examples, so that two pieces hold 3 and 2 of them."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [5, 6, 6, 3], name="x")
        kernel = tf.compat.v1.get_variable(
            "w", [3, 3, 3, 4], initializer=tf.compat.v1.glorot_uniform_initializer(1)
        )
        hidden = tf.nn.conv2d(x, kernel, 1, "SAME")
        scale = tf.compat.v1.get_variable("scale", [4], initializer=tf.compat.v1.ones_initializer())
        offset = tf.compat.v1.get_variable("offset", [4], initializer=tf.compat.v1.zeros_initializer())
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(hidden, scale, offset, is_training=True)
        moving = tf.compat.v1.get_variable(
            "moving_variance", [4], initializer=tf.compat.v1.ones_initializer()
        )
        update = tf.compat.v1.assign(moving, 0.9 * moving + 0.1 * variance)
        loss = tf.reduce_mean(tf.square(tf.nn.relu(y) - 0.5) + 0.0 * tf.reduce_sum(mean), name="loss")
        with tf.control_dependencies([update]):
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    feeds = {"x:0": np.random.default_rng(3).standard_normal((5, 6, 6, 3)).astype(np.float32) * 2 + 1}
    return graph, feeds


BATCH_NORM_OPS = ["FusedBatchNormV3", "gradients/FusedBatchNormV3_grad/FusedBatchNormGradV3"]


def test_a_training_batch_norm_splits_on_the_batch_with_the_whole_batch_statistics() -> None:
    graph, feeds = batch_norm_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    assert all(plan.splits[op].degree == 2 and plan.splits[op].dimension == BATCH for op in BATCH_NORM_OPS)
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=5, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst  # losses, weights, the moving variance
    assert not check.kept_whole and check.pieces_run > 0 and not check.misplaced
    # the simulator runs the same pieces
    cost_graph = import_graph(graph, "train").cost_graph
    in_step = SplitPlan({op: plan.splits[op] for op in cost_graph}, DeviceSet.parse(TWO_CPUS, "1GB"))
    _, expanded = simulate_plan(cost_graph, in_step)
    assert all(len(expanded.nodes_of[op]) == 2 for op in BATCH_NORM_OPS)


@pytest.mark.parametrize("split_op", BATCH_NORM_OPS)
def test_a_batch_norm_split_without_its_gradient_or_forward_still_trains_exactly(split_op: str) -> None:
    graph, feeds = batch_norm_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    other = next(op for op in BATCH_NORM_OPS if op != split_op)
    plan.splits[other] = OpSplit.whole(TWO_CPUS[1])
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=5, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
    assert not check.misplaced


def test_a_split_fed_tensor_and_its_slices_are_on_the_host_cpu_and_the_step_stays_exact() -> None:
    # pieces on CPU:1 and CPU:2, the host's CPU:0 beside them: the images are fed there, cut there,
    # and each piece's device receives its slice (as the plan's simulation assumes)
    graph, feeds = small_training_graph()
    pieces = THREE_CPUS[1:]
    forced = uniform_plan(graph, pieces, BATCH)
    plan = SplitPlan(dict(forced.splits), DeviceSet.parse(THREE_CPUS, "1TB"))
    plan.splits["images"] = OpSplit(tuple(pieces), BATCH)
    rewrite = rewrite_graph_def(plan, graph)
    readers = [node for node in rewrite.graph_def.node if {"images", "images:0"} & set(node.input)]
    assert rewrite.devices["images"] == "/device:CPU:0"
    assert {(node.op, node.device) for node in readers} == {("StridedSlice", "/device:CPU:0")}
    assert len(readers) == len(pieces)
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=5, config=virtual_cpu_config(3))
    assert check.kept_whole["images"].startswith("a fed tensor")
    assert not check.misplaced
    assert check.max_deviation < TOLERANCE, check.worst


def test_a_batch_split_trains_alike_on_two_loopback_workers() -> None:
    graph, feeds = small_training_graph()
    with LocalCluster(2) as cluster:
        plan = uniform_plan(graph, [cluster.device(0), cluster.device(1)], BATCH)
        check = compare_split(
            graph, plan, ["loss:0", "train"], feeds, steps=20, config=None, target=cluster.target
        )
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run > 0 and not check.misplaced


def test_a_plan_and_the_placement_made_from_it_apply_by_rewriting_the_graph() -> None:
    graph, _ = small_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    for applied in (plan.apply(graph), plan.to_placement().apply(graph)):
        assert applied is not graph
        assert applied.get_operation_by_name("Relu/piece1").device == TWO_CPUS[1]
        assert applied.get_operation_by_name("Relu").type == "Identity"
    assert plan.to_placement().apply(graph.as_graph_def()).node  # a GraphDef in, a GraphDef out
    assert "Relu/piece0" not in {op.name for op in graph.get_operations()}


def test_the_tensorboard_graph_of_a_rewrite_holds_each_piece_with_its_device(tmp_path) -> None:
    from tfplace.tf_graph.export import write_tensorboard_graph

    graph, _ = small_training_graph()
    rewritten = apply_split_plan(uniform_plan(graph, TWO_CPUS, BATCH), graph)
    event_file = write_tensorboard_graph(rewritten, tmp_path)
    (event,) = [e for e in tf.compat.v1.train.summary_iterator(event_file) if e.graph_def]
    devices = {node.name: node.device for node in tf.compat.v1.GraphDef.FromString(event.graph_def).node}
    assert devices["Conv2D/piece0"] == TWO_CPUS[0] and devices["Conv2D/piece1"] == TWO_CPUS[1]


def test_the_worked_example_of_docs_splitting_runs_verbatim(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    document = (Path(__file__).resolve().parents[1] / "docs" / "splitting.md").read_text()
    (example,) = [block.split("```")[0] for block in document.split("```python\n")[1:]]
    done = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 on another device than planned" in done.stdout


def test_a_channel_concat_trains_split_on_the_batch_its_gradient_slices_keep_each_piece_rows() -> None:
    # The gradient of a concat along channels slices it with begin/size of the whole batch
    # (ShapeN of the forward inputs): each batch piece must slice its own rows, not the whole batch.
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3, 3, 2], name="x")
        w1 = tf.compat.v1.get_variable("w1", [1, 1, 2, 3], initializer=tf.compat.v1.ones_initializer())
        w2 = tf.compat.v1.get_variable("w2", [1, 1, 2, 2], initializer=tf.compat.v1.ones_initializer())
        a = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        b = tf.nn.relu(tf.nn.conv2d(x, w2, 1, "SAME"))
        joined = tf.concat([a, b], axis=3)
        loss = tf.reduce_mean(tf.square(joined), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train")
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    assert plan.splits["gradients/concat_grad/Slice"].dimension == BATCH
    feeds = {"x:0": np.random.default_rng(4).standard_normal((4, 3, 3, 2)).astype(np.float32)}
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=5, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
    assert not check.misplaced


def test_a_depthwise_convolution_trains_split_on_the_batch_with_its_gradients() -> None:
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 6, 6, 3], name="x")
        init = tf.compat.v1.random_normal_initializer(0.0, 0.3, seed=5)
        w = tf.compat.v1.get_variable("w", [3, 3, 3, 2], initializer=init)
        y = tf.nn.depthwise_conv2d(tf.nn.relu(x), w, [1, 1, 1, 1], "SAME")
        loss = tf.reduce_mean(tf.square(y), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, name="train")
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    depthwise = [op.name for op in graph.get_operations() if op.type.startswith("DepthwiseConv2dNative")]
    assert len(depthwise) == 3 and all(plan.splits[op].degree == 2 for op in depthwise)
    feeds = {"x:0": np.random.default_rng(5).standard_normal((4, 6, 6, 3)).astype(np.float32)}
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=5, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
    assert check.pieces_run >= 6 and not check.misplaced


def test_a_shape_of_a_tensor_held_in_pieces_is_its_static_shape_not_a_join() -> None:
    graph, feeds = small_training_graph()
    plan = uniform_plan(graph, TWO_CPUS, BATCH)
    rewrite = rewrite_graph_def(plan, graph)
    nodes = {node.name: node for node in rewrite.graph_def.node}
    shapes = [
        op.name
        for op in graph.get_operations()
        if op.type in ("Shape", "ShapeN") and any(plan.splits[t.op.name].degree > 1 for t in op.inputs)
    ]
    assert shapes
    for name in shapes:
        inputs = [i.partition(":")[0] for i in nodes[name].input] if nodes[name].op == "IdentityN" else [name]
        assert {nodes[i].op for i in inputs} == {"Const"}
    check = compare_split(graph, plan, ["loss:0", "train"], feeds, steps=2, config=virtual_cpu_config(2))
    assert check.max_deviation < TOLERANCE, check.worst
