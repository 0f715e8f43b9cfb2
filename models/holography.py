"""Tensor Holography (Shi et al. 2021), the fully convolutional model of Celeritas section 6.2.1.

Shi et al.'s network maps an RGB-D image (4 channels) to a hologram, amplitude and phase per colour
(6 channels), with 30 convolution layers of 24 3x3 filters each at full resolution (no
down-sampling), which is why it needs so much memory. It is a residual network with ReLU; the
exact block layout below is this module's reading, not copied from the authors' code:

- one 3x3 convolution from the 4 input channels to ``filters`` channels, batch norm, ReLU;
- ``conv_layers / 2 - 1`` residual blocks ``relu(x + bn(conv(relu(bn(conv(x))))))`` (He et al. 2016);
- one linear 3x3 convolution with bias to the 6 output channels: amplitude (channels 0-2), phase (3-5).

Batch normalization (training mode, convolutions before it without bias) is what makes the graph
the paper's size: 3,632 ops against Table 2's 3,810, while the same network without it builds 2,124.
The loss is the mean squared error of amplitude plus that of phase against fed targets; the
optimizer is Adam at learning rate 1e-4.
"""

from __future__ import annotations

import math

import tensorflow as tf
import tf_keras

from models.common import Input, ModelSpec, check_positive, model_graph, placeholders, training_spec

__all__ = ["build_tensor_holography"]

PAPER_OP_COUNT = 3810
"""Ops of the Tensor Holography graph in Celeritas Table 2."""

INPUT_CHANNELS = 4
"""RGB plus depth."""

COLOURS = 3
"""Amplitude and phase are predicted per colour channel."""

LEARNING_RATE = 1e-4


def build_tensor_holography(image_size: int = 384, conv_layers: int = 30, filters: int = 24) -> ModelSpec:
    """Build the Tensor Holography training graph.

    Parameters
    ----------
    image_size : int
        Height and width of the square RGB-D input (the paper: 384).
    conv_layers : int
        Convolution layers in all, including the input and output ones; even, at least 2.
    filters : int
        Filters (output channels) of every hidden convolution layer.

    Returns
    -------
    ModelSpec
        Inputs ``rgbd`` (float32 ``(None, image_size, image_size, 4)`` in [0, 1)), ``amplitude``
        (targets in [0, 1)) and ``phase`` (targets in [-pi, pi)), both ``(None, image_size,
        image_size, 3)``.
    """
    check_positive(image_size=image_size, conv_layers=conv_layers, filters=filters)
    if conv_layers < 2 or conv_layers % 2:
        raise ValueError(
            f"conv_layers must be even and at least 2 (input, residual pairs, output), got {conv_layers}"
        )
    image = (image_size, image_size)
    inputs = (
        Input("rgbd", (*image, INPUT_CHANNELS), "float32", 0.0, 1.0),
        Input("amplitude", (*image, COLOURS), "float32", 0.0, 1.0),
        Input("phase", (*image, COLOURS), "float32", -math.pi, math.pi),
    )
    with model_graph():
        fed = placeholders(inputs)
        layers = _Layers()
        with tf.compat.v1.variable_scope("holography"):
            x = tf.nn.relu(layers.conv_bn(fed["rgbd"], filters, "conv_0"))
            for block in range(1, conv_layers // 2):
                y = tf.nn.relu(layers.conv_bn(x, filters, f"block_{block}_conv_a"))
                x = tf.nn.relu(x + layers.conv_bn(y, filters, f"block_{block}_conv_b"))
            hologram = layers.conv(x, 2 * COLOURS, f"conv_{conv_layers - 1}")
            amplitude, phase = tf.split(hologram, 2, axis=3)
            loss = tf.reduce_mean(tf.square(amplitude - fed["amplitude"])) + tf.reduce_mean(
                tf.square(phase - fed["phase"])
            )
        return training_spec(
            "tensor_holography",
            loss,
            tf.compat.v1.train.AdamOptimizer(LEARNING_RATE),
            inputs,
            knobs={"image_size": image_size, "conv_layers": conv_layers, "filters": filters},
            paper_batch_size=32,
            paper_op_count=PAPER_OP_COUNT,
            updates=layers.updates,
        )


class _Layers:
    """Convolutions and batch normalizations of one graph, remembering the moving-average updates."""

    def __init__(self) -> None:
        self.updates: list[tf.Operation] = []

    def conv(self, x: tf.Tensor, filters: int, name: str, *, bias: bool = True) -> tf.Tensor:
        """3x3 same-padded convolution, with a bias unless batch normalization follows."""
        with tf.compat.v1.variable_scope(name):
            kernel = tf.compat.v1.get_variable("kernel", (3, 3, x.shape[-1], filters))
            y = tf.nn.conv2d(x, kernel, strides=1, padding="SAME")
            if not bias:
                return y
            offset = tf.compat.v1.get_variable("bias", (filters,), initializer=tf.zeros_initializer())
        return tf.nn.bias_add(y, offset)

    def conv_bn(self, x: tf.Tensor, filters: int, name: str) -> tf.Tensor:
        """3x3 convolution followed by batch normalization in training mode (batch statistics)."""
        norm = tf_keras.layers.BatchNormalization(name=f"{name}_bn")
        y = norm(self.conv(x, filters, name, bias=False), training=True)
        self.updates.extend(norm.updates)
        return y
