"""Builders of the four benchmark models of Celeritas (section 6.2.1, Table 2) as TensorFlow training graphs.

>>> from models import MODELS, build_model
>>> spec = build_model("tensor_holography", image_size=16)  # doctest: +SKIP
>>> sorted(MODELS)  # doctest: +SKIP
['inception_v3', 'nmt', 'nmt_while', 'tensor_holography', 'transformer']

Every builder returns a :class:`~models.common.ModelSpec`: a fresh graph-mode ``tf.Graph`` with one
training step (forward, gradients, optimizer update), its initializer, and a ``feed_fn`` for any
batch size. The defaults are the paper's sizes; the keyword knobs shrink them.

Importing this package sets the environment variable ``TF_USE_LEGACY_KERAS=1`` unless it is already
set: the NMT models need ``tf.compat.v1.nn.rnn_cell.LSTMCell``, which TensorFlow 2.21 provides only
when that variable is set before it first loads Keras. A side effect for the whole process is that
``tf.keras`` then means Keras 2 (``tf_keras``), the Keras that works in graph mode. The variable is
set before TensorFlow is imported here; it also takes effect when TensorFlow was imported earlier, as
long as nothing has touched ``tf.keras`` or ``tf.compat.v1.nn.rnn_cell`` yet.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from collections.abc import Callable
from typing import Any

from models.common import ModelSpec
from models.holography import build_tensor_holography
from models.inception import build_inception_v3
from models.nmt import build_nmt, build_nmt_while
from models.transformer import build_transformer

__all__ = ["MODELS", "ModelSpec", "build_model"]

MODELS: dict[str, Callable[..., ModelSpec]] = {
    "inception_v3": build_inception_v3,
    "nmt": build_nmt,
    "nmt_while": build_nmt_while,
    "transformer": build_transformer,
    "tensor_holography": build_tensor_holography,
}
"""Model name -> builder; each builder's keyword arguments are the model's size knobs."""


def build_model(name: str, **knobs: Any) -> ModelSpec:
    """Build the training graph of the model registered as ``name`` with the given size knobs.

    Raises
    ------
    ValueError
        For an unknown model name (the message lists the known ones) or an invalid knob value.
    TypeError
        For a knob the model does not have.
    """
    try:
        builder = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}") from None
    return builder(**knobs)
