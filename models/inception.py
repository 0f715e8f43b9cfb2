"""Inception V3 (Szegedy et al. 2016) training graph, the image model of Celeritas section 6.2.1.

The network is ``tf_keras.applications.InceptionV3`` (Keras 2: Keras 3's ``tf.keras`` cannot build on
a graph-mode placeholder, see ``TF_NOTES.md``) with random initial weights, built in training mode so
that batch normalization normalizes with batch statistics and updates its moving averages in every
step. The optimizer is the one of Szegedy et al.'s best models (2016, section 8): RMSProp with decay
0.9, epsilon 1.0 and learning rate 0.045, here with momentum 0.9 (the momentum of their earlier
runs), which adds a second slot per variable as common Inception training setups do.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from models.common import Input, ModelSpec, check_positive, model_graph, placeholders, training_spec

__all__ = ["build_inception_v3"]

MIN_IMAGE_SIZE = 75
"""Smallest input side Keras' Inception V3 accepts (the stride-2 stages need it)."""


def build_inception_v3(image_size: int = 299, classes: int = 1000) -> ModelSpec:
    """Build the Inception V3 training graph.

    Parameters
    ----------
    image_size : int
        Height and width of the square RGB input, at least 75 (the paper: 299).
    classes : int
        Number of classes of the softmax classifier.

    Returns
    -------
    ModelSpec
        Inputs ``images`` (float32, ``(None, image_size, image_size, 3)``, values in [-1, 1) as Keras'
        Inception preprocessing produces) and ``labels`` (int32 class ids, ``(None,)``); the loss is
        the mean softmax cross-entropy of the logits.
    """
    check_positive(image_size=image_size, classes=classes)
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be at least {MIN_IMAGE_SIZE} for Inception V3, got {image_size}")
    inputs = (
        Input("images", (image_size, image_size, 3), "float32", -1.0, 1.0),
        Input("labels", (), "int32", 0, classes),
    )
    with model_graph(), tf_keras.backend.learning_phase_scope(1):
        fed = placeholders(inputs)
        model = tf_keras.applications.InceptionV3(
            weights=None, input_tensor=fed["images"], classes=classes, classifier_activation=None
        )
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=fed["labels"], logits=model.output)
        )
        optimizer = tf.compat.v1.train.RMSPropOptimizer(0.045, decay=0.9, momentum=0.9, epsilon=1.0)
        return training_spec(
            "inception_v3",
            loss,
            optimizer,
            inputs,
            knobs={"image_size": image_size, "classes": classes},
            paper_batch_size=512,
            paper_op_count=6332,
            updates=model.updates,
        )
