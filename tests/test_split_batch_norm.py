"""A training batch norm split along the batch (synchronized batch norm) against float64 truth: its
forward outputs, running statistics and gradients are as close to the exact values as TensorFlow's
fused kernel on the whole batch is."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfplace.split.rules import BATCH
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import deviation
from tfplace.tf_graph.split_rewrite import split_graph, uniform_plan

pytestmark = pytest.mark.tensorflow

EPSILON = 1e-3
OUTPUTS = ["y", "running_mean", "running_variance", "dx", "dscale", "doffset"]


def batch_norm_step(shape: tuple[int, ...], factor: float) -> tf.Graph:
    """``FusedBatchNormV3`` in training mode with its gradient for a fed ``dy``; running statistics
    blended by the op when ``factor`` (``exponential_avg_factor``) is below 1, as Keras does."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    channels = shape[-1]
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        dy = tf.compat.v1.placeholder(tf.float32, shape, name="dy")
        scale = tf.compat.v1.placeholder(tf.float32, [channels], name="scale")
        offset = tf.compat.v1.placeholder(tf.float32, [channels], name="offset")
        mean = tf.compat.v1.placeholder(tf.float32, [channels], name="mean")
        variance = tf.compat.v1.placeholder(tf.float32, [channels], name="variance")
        y, running_mean, running_variance = tf.compat.v1.nn.fused_batch_norm(
            x,
            scale,
            offset,
            mean=mean,
            variance=variance,
            epsilon=EPSILON,
            is_training=True,
            exponential_avg_factor=factor,
        )
        grads = tf.gradients(y, [x, scale, offset], grad_ys=dy)
        for name, tensor in zip(OUTPUTS, [y, running_mean, running_variance, *grads]):
            tf.identity(tensor, name=name)
    return graph


def float64_truth(feeds: dict[str, np.ndarray], factor: float) -> list[np.ndarray]:
    """The outputs of :func:`batch_norm_step` in float64: Ioffe and Szegedy (2015), Algorithm 1 and
    its backpropagation, the running variance Bessel-corrected with the whole batch's count."""
    x, dy, scale, offset, mean, variance = (
        feeds[f"{name}:0"].astype(np.float64) for name in ("x", "dy", "scale", "offset", "mean", "variance")
    )
    axes = tuple(range(x.ndim - 1))
    count = x.size // x.shape[-1]
    batch_mean = x.mean(axes)
    batch_variance = ((x - batch_mean) ** 2).mean(axes)
    inverse = 1.0 / np.sqrt(batch_variance + EPSILON)
    x_hat = (x - batch_mean) * inverse
    doffset = dy.sum(axes)
    dscale = (dy * x_hat).sum(axes)
    dx = scale * inverse * (dy - doffset / count - x_hat * dscale / count)
    running_mean = (1 - factor) * mean + factor * batch_mean
    running_variance = (1 - factor) * variance + factor * batch_variance * count / (count - 1)
    return [x_hat * scale + offset, running_mean, running_variance, dx, dscale, doffset]


def feeds_for(shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    """Inputs far from zero mean (where a one-pass variance loses digits), channels of very
    different spread, and some rows equal (small variances, as late Inception layers have)."""
    rng = np.random.default_rng(seed)
    channels = shape[-1]
    x = rng.standard_normal(shape) * rng.uniform(0.01, 3, channels) + rng.uniform(-5, 5, channels)
    x[-1] = x[0]
    feeds = {
        "x:0": x,
        "dy:0": rng.standard_normal(shape),
        "scale:0": rng.uniform(0.5, 2, channels),
        "offset:0": rng.standard_normal(channels),
        "mean:0": rng.standard_normal(channels),
        "variance:0": rng.uniform(0.5, 2, channels),
    }
    return {name: value.astype(np.float32) for name, value in feeds.items()}


def run(graph: tf.Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with tf.compat.v1.Session(graph=graph, config=virtual_cpu_config(2)) as session:
        return session.run([f"{name}:0" for name in OUTPUTS], feeds)


@pytest.mark.parametrize("factor", [1.0, 0.01])
@pytest.mark.parametrize("shape", [(4, 1, 1, 16), (5, 6, 6, 3)])
def test_a_split_training_batch_norm_is_as_close_to_float64_truth_as_the_fused_kernel(
    shape: tuple[int, ...], factor: float
) -> None:
    graph = batch_norm_step(shape, factor)
    plan = uniform_plan(graph, ["/device:CPU:0", "/device:CPU:1"], BATCH)
    assert plan.splits["FusedBatchNormV3"].degree == 2
    rewritten, rewrite = split_graph(plan, graph)
    assert "FusedBatchNormV3" not in rewrite.kept_whole
    feeds = feeds_for(shape, seed=len(shape) + shape[0])
    truth = float64_truth(feeds, factor)
    for name, exact, fused, split in zip(OUTPUTS, truth, run(graph, feeds), run(rewritten, feeds)):
        fused_error, split_error = deviation(exact, fused), deviation(exact, split)
        assert fused_error < 1e-5, name  # the reference computes what TensorFlow computes
        # float32 rounding: the split's error is of the fused kernel's size, a few units in the last place
        assert split_error <= max(4 * fused_error, 1e-6), (name, split_error, fused_error)
