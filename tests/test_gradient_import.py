"""The importer records which forward op each gradient op of a TensorFlow graph differentiates."""

from __future__ import annotations

import pytest

from tfplace.core.costgraph import gradient_pairs
from tfplace.core.devices import DeviceSet
from tfplace.placer import place_cost_graph
from tfplace.tf_graph.importer import import_graph

pytestmark = pytest.mark.tensorflow


def _training_graph(colocate: bool):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        with tf.compat.v1.variable_scope("layer"):
            w = tf.compat.v1.get_variable("w", [3, 2], use_resource=True)
            y = tf.nn.relu(tf.matmul(x, w, name="matmul"), name="relu")
        loss = tf.reduce_sum(y * y, name="loss")
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        grads = optimizer.compute_gradients(loss, colocate_gradients_with_ops=colocate)
        optimizer.apply_gradients(grads, name="train")
    return graph


@pytest.mark.parametrize("colocate", [False, True])
def test_gradient_ops_of_a_tf_training_graph_name_their_forward_ops(colocate):
    cost_graph = import_graph(_training_graph(colocate)).cost_graph
    relation = dict(gradient_pairs(cost_graph))
    assert relation["gradients/layer/matmul_grad/MatMul_1"] == "layer/matmul"
    assert relation["gradients/layer/relu_grad/ReluGrad"] == "layer/relu"
    assert all(not op.startswith("train") for op in relation)  # optimizer updates are no gradients
    assert "gradients/Fill" not in relation


def test_placed_by_default_a_tf_graphs_gradient_ops_share_their_forward_ops_device_and_updates_their_variable():
    cost_graph = import_graph(_training_graph(colocate=False)).cost_graph
    placement = place_cost_graph(
        cost_graph, DeviceSet.parse("/device:CPU:0-3", 1 << 30), "metis", simulate=False
    )
    assignment = placement.assignment
    assert all(assignment[g] == assignment[f] for g, f in gradient_pairs(cost_graph))
    update = next(op for op in cost_graph if op.startswith("train/update_layer/w/"))
    assert assignment[update] == assignment["layer/w"]
