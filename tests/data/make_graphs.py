"""Build the small TensorFlow training graphs the tests import, place and run.

Run from the repository root: ``.venv/bin/python tests/data/make_graphs.py``. It writes, beside
itself, one binary ``MetaGraphDef`` per graph and ``graphs.json``, which says for each file the
loss tensor, the training op, the placeholders to feed (shape with ``null`` for the batch
dimension, dtype) and how the graph was built. The loss and train op also travel inside each file,
in the standard collections ``losses`` and ``train_op``.

``cnn.meta``
    conv 3x3 -> batch normalization (batch moments, moving averages updated by the step) -> relu ->
    max pool -> conv 3x3 -> relu -> dense -> softmax cross-entropy, trained by Adam.
``lstm_v1.meta`` / ``lstm_v2.meta``
    one LSTM layer unrolled by ``tf.compat.v1.while_loop`` over 4 time steps, then dense ->
    softmax cross-entropy, trained by gradient descent; ``v1`` has legacy control-flow frames
    (Enter / Merge / Switch / NextIteration / Exit, a cyclic GraphDef), ``v2`` one functional
    ``While`` op (its body in the function library).
``colocation.meta``
    explicit co-location: ops built under ``tf.compat.v1.colocate_with`` in a chain (a group
    that only merges transitively), a reference (non-resource) variable with an ``AssignAdd``,
    resource variables with their update ops, gradients colocated with their forward ops
    (``colocate_gradients_with_ops=True``), trained by gradient descent.

Every random initializer has a fixed seed, so every session starts from the same weights.

Beside them, not written by this script, two cost graphs measured once on a 2-core machine, so that
tests of what placers decide on a real graph's costs see the same numbers on every machine:
``cnn_costs_b64.json.gz`` (``tfplace profile --graph tests/data/cnn.meta --batch_size=64
--profile_batch_sizes=1,2,4 --cache_dir= --out ...``) and ``lstm_v1_costs_b64.json.gz`` (the same
for ``lstm_v1.meta`` with ``--input_shape=inputs=4,B,5``). ``cnn_split_costs_b64.json.gz`` is the
first with what splitting needs (``attrs``, ``output_shapes``, ``inputs`` of schema version 3) read
from ``cnn.meta`` by :func:`tfplace.tf_graph.split_attrs.annotate_split_fields`, costs unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

HERE = Path(__file__).resolve().parent
SEED = 7
TIME_STEPS, FEATURES, HIDDEN, CLASSES = 4, 5, 8, 3


def _dense(inputs: tf.Tensor, units: int, name: str) -> tf.Tensor:
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable("kernel", [inputs.shape[-1], units])
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.nn.bias_add(tf.matmul(inputs, kernel), bias)


def _loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss"
    )


def build_cnn() -> tuple[tf.Tensor, tf.Operation]:
    """Conv + batch norm + Adam on 8x8x3 images, 10 classes."""
    images = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="images")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    with tf.compat.v1.variable_scope("conv1"):
        kernel = tf.compat.v1.get_variable("kernel", [3, 3, 3, 8])
        hidden = tf.nn.conv2d(images, kernel, strides=1, padding="SAME")
    with tf.compat.v1.variable_scope("bn"):
        gamma = tf.compat.v1.get_variable("gamma", [8], initializer=tf.compat.v1.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [8], initializer=tf.compat.v1.zeros_initializer())
        moving_mean = tf.compat.v1.get_variable(
            "moving_mean", [8], initializer=tf.compat.v1.zeros_initializer(), trainable=False
        )
        moving_var = tf.compat.v1.get_variable(
            "moving_variance", [8], initializer=tf.compat.v1.ones_initializer(), trainable=False
        )
        mean, variance = tf.nn.moments(hidden, [0, 1, 2])
        hidden = tf.nn.batch_normalization(hidden, mean, variance, beta, gamma, 1e-3)
        updates = [
            moving_mean.assign_sub(0.1 * (moving_mean - mean)),
            moving_var.assign_sub(0.1 * (moving_var - variance)),
        ]
    hidden = tf.nn.max_pool2d(tf.nn.relu(hidden), 2, 2, "VALID")
    with tf.compat.v1.variable_scope("conv2"):
        kernel = tf.compat.v1.get_variable("kernel", [3, 3, 8, 8])
        hidden = tf.nn.relu(tf.nn.conv2d(hidden, kernel, strides=1, padding="SAME"))
    logits = _dense(tf.reshape(hidden, [-1, 4 * 4 * 8]), 10, "dense")
    loss = _loss(logits, labels)
    step = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss)
    return loss, tf.group(step, *updates, name="train_op")


def build_lstm() -> tuple[tf.Tensor, tf.Operation]:
    """One LSTM layer over ``inputs[TIME_STEPS, batch, FEATURES]`` in a while loop, then dense."""
    inputs = tf.compat.v1.placeholder(tf.float32, [TIME_STEPS, None, FEATURES], name="inputs")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    with tf.compat.v1.variable_scope("lstm"):
        kernel = tf.compat.v1.get_variable("kernel", [FEATURES + HIDDEN, 4 * HIDDEN])
        bias = tf.compat.v1.get_variable("bias", [4 * HIDDEN], initializer=tf.compat.v1.zeros_initializer())
    zeros = tf.zeros(tf.stack([tf.shape(inputs)[1], HIDDEN]))

    def step(t: tf.Tensor, h: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        gates = tf.matmul(tf.concat([tf.gather(inputs, t), h], 1), kernel) + bias
        i, f, o, g = tf.split(gates, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        return t + 1, tf.sigmoid(o) * tf.tanh(c), c

    _, last, _ = tf.compat.v1.while_loop(
        lambda t, h, c: t < TIME_STEPS, step, [tf.constant(0), zeros, zeros], name="rnn"
    )
    loss = _loss(_dense(last, CLASSES, "dense"), labels)
    return loss, tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op")


def build_colocation() -> tuple[tf.Tensor, tf.Operation]:
    """A linear model with explicit co-location groups, a reference variable and colocated gradients."""
    inputs = tf.compat.v1.placeholder(tf.float32, [None, 4], name="inputs")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    weights = tf.compat.v1.get_variable("weights", [4, CLASSES])
    counter = tf.compat.v1.Variable(tf.zeros([CLASSES]), use_resource=False, name="counter")
    scale = tf.compat.v1.get_variable("scale", [], initializer=tf.compat.v1.ones_initializer())
    first = tf.square(inputs, name="first")
    with tf.compat.v1.colocate_with(first):
        second = tf.multiply(first, 2.0, name="second")
    with tf.compat.v1.colocate_with(second):
        third = tf.add(second, 1.0, name="third")  # joins `first` only through `second`
    logits = tf.matmul(third, weights) * scale
    with tf.compat.v1.colocate_with(weights):
        norm = tf.reduce_sum(tf.square(weights.read_value()), name="norm")
    loss = tf.add(_loss(logits, labels), 1e-3 * norm, name="total_loss")
    step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, colocate_gradients_with_ops=True)
    count = tf.compat.v1.assign_add(counter, tf.reduce_sum(tf.nn.softmax(logits), 0), name="count")
    return loss, tf.group(step, count, name="train_op")


GRAPHS: dict[str, tuple[Callable[[], tuple[tf.Tensor, tf.Operation]], bool, str]] = {
    "cnn": (build_cnn, True, "conv + batch norm + dense, Adam"),
    "lstm_v1": (build_lstm, False, "LSTM in a legacy (control flow v1) while loop, gradient descent"),
    "lstm_v2": (build_lstm, True, "LSTM in a functional (control flow v2) While op, gradient descent"),
    "colocation": (build_colocation, True, "colocate_with chains, a ref variable, colocated gradients"),
}


def write(name: str) -> dict[str, object]:
    """Build graph ``name``, save it as ``<name>.meta`` and return its ``graphs.json`` entry."""
    build, control_flow_v2, description = GRAPHS[name]
    (tf.compat.v1.enable_control_flow_v2 if control_flow_v2 else tf.compat.v1.disable_control_flow_v2)()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(SEED)
        loss, train_op = build()
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, loss)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.TRAIN_OP, train_op)
        path = HERE / f"{name}.meta"
        tf.compat.v1.train.export_meta_graph(filename=str(path), graph=graph, as_text=False)
        placeholders = {
            op.name: {
                "shape": op.outputs[0].shape.as_list(),
                "dtype": op.outputs[0].dtype.name,
            }
            for op in graph.get_operations()
            if op.type == "Placeholder"
        }
    tf.compat.v1.enable_control_flow_v2()
    return {
        "file": path.name,
        "description": description,
        "loss": loss.name,
        "train_op": train_op.name,
        "placeholders": placeholders,
        "ops": len(graph.get_operations()),
        "bytes": path.stat().st_size,
    }


def main() -> None:
    tf.compat.v1.disable_eager_execution()
    index = {name: write(name) for name in GRAPHS}
    (HERE / "graphs.json").write_text(json.dumps(index, indent=1) + "\n")
    for entry in index.values():
        print(f"{entry['file']}: {entry['ops']} ops, {entry['bytes']:,} bytes")


if __name__ == "__main__":
    main()
