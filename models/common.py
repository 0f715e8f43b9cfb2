"""What every benchmark model builder shares: the :class:`ModelSpec` result, fed inputs, the training step.

A builder describes its inputs once as :class:`Input` records; the placeholders in the graph and the
arrays :attr:`ModelSpec.feed_fn` returns both derive from them, so they always agree. Every
placeholder has a ``None`` batch dimension: one graph serves every batch size, which is what the
Standard Evaluation needs (Celeritas section 4.1: profile at small batch sizes, predict the large one).

Builders only build: nothing here creates a session or allocates a weight in Python. Graphs are
seeded (:data:`GRAPH_SEED`), so two builds with the same knobs have the same op names and the same
initial weights.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from tf_keras.src import backend as keras_backend

__all__ = [
    "FEED_SEED",
    "GRAPH_SEED",
    "Input",
    "ModelSpec",
    "check_positive",
    "feed_function",
    "model_graph",
    "parameter_count",
    "placeholders",
    "train_step_ops",
    "training_spec",
]

GRAPH_SEED = 20231
"""Graph-level seed of every model graph: initial weights (and dropout masks) are reproducible."""

FEED_SEED = 7
"""Seed of the random input data :attr:`ModelSpec.feed_fn` generates."""


@dataclass(frozen=True)
class Input:
    """One fed input of a model: a placeholder ``name`` of shape ``(None, *shape)``.

    Float inputs are drawn uniformly from ``[low, high)``; integer inputs (token ids, class labels)
    uniformly from the integers in ``[low, high)``, so labels are always valid classes.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    low: float
    high: float

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "int32"):
            raise ValueError(f"input {self.name!r}: dtype must be float32 or int32, got {self.dtype!r}")
        if not self.low < self.high:
            raise ValueError(f"input {self.name!r}: empty value range [{self.low}, {self.high})")

    def sample(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """A ``(batch_size, *shape)`` array of this input's dtype drawn from ``rng``."""
        size = (batch_size, *self.shape)
        if self.dtype == "int32":
            return rng.integers(int(self.low), int(self.high), size=size, dtype=np.int32)
        return rng.uniform(self.low, self.high, size=size).astype(np.float32)


@dataclass(frozen=True)
class ModelSpec:
    """A built training graph and what it takes to run one step of it.

    Attributes
    ----------
    name : str
        Registry name of the model (``"inception_v3"``, ...).
    graph : tf.Graph
        The training graph (forward, gradients, optimizer update, variable initializers).
    loss : str
        Name of the scalar loss tensor (``"loss:0"``).
    train_op : str
        Name of the op that runs one training step.
    init_op : str
        Name of the op that initializes every variable.
    feed_fn : callable
        ``feed_fn(batch_size)`` -> ``{"images:0": array, ...}``: one array per placeholder, the same
        arrays on every call with the same batch size.
    paper_batch_size : int
        Batch size of the model in Celeritas section 6.2.1.
    paper_op_count : int
        Number of ops of the model's graph in Celeritas Table 2.
    knobs : dict
        The size knobs the graph was built with, defaults included.
    """

    name: str
    graph: tf.Graph
    loss: str
    train_op: str
    init_op: str
    feed_fn: Callable[[int], dict[str, np.ndarray]]
    paper_batch_size: int
    paper_op_count: int
    knobs: dict[str, Any] = field(default_factory=dict)


def check_positive(**knobs: int) -> None:
    """Raise ``ValueError`` naming every knob that is not a positive integer."""
    bad = [
        f"{name}={value!r}"
        for name, value in knobs.items()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1
    ]
    if bad:
        raise ValueError(f"size knobs must be positive integers: {', '.join(bad)}")


@contextmanager
def model_graph() -> Iterator[tf.Graph]:
    """A fresh seeded graph, made the default graph inside the ``with`` block.

    The graph-level seed fixes every TensorFlow random op. Keras initializers without a seed draw
    their op seeds from Keras' seed generator, else from Python's global ``random``, so inside the
    block Keras gets a generator seeded by :data:`GRAPH_SEED` (what ``tf_keras.utils.set_random_seed``
    installs, without reseeding Python, NumPy and TensorFlow globally); the previous one is restored.
    """
    seeds = keras_backend._SEED_GENERATOR
    previous = getattr(seeds, "generator", None)
    seeds.generator = random.Random(GRAPH_SEED)
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.set_random_seed(GRAPH_SEED)
            yield graph
    finally:
        seeds.generator = previous


def placeholders(inputs: Iterable[Input]) -> dict[str, tf.Tensor]:
    """One placeholder per input, named after it, with a ``None`` batch dimension (default graph)."""
    return {
        spec.name: tf.compat.v1.placeholder(spec.dtype, (None, *spec.shape), name=spec.name)
        for spec in inputs
    }


def feed_function(inputs: Sequence[Input], seed: int = FEED_SEED) -> Callable[[int], dict[str, np.ndarray]]:
    """``feed_fn(batch_size)`` for ``inputs``: deterministic random arrays keyed by tensor name.

    Each call draws from a generator seeded by ``(seed, batch_size)``, so a batch size always gets
    the same data, whichever batch sizes were asked for before.
    """
    frozen = tuple(inputs)

    def feed_fn(batch_size: int) -> dict[str, np.ndarray]:
        check_positive(batch_size=batch_size)
        rng = np.random.default_rng((seed, batch_size))
        return {f"{spec.name}:0": spec.sample(rng, batch_size) for spec in frozen}

    return feed_fn


def training_spec(
    name: str,
    loss: tf.Tensor,
    optimizer: tf.compat.v1.train.Optimizer,
    inputs: Sequence[Input],
    *,
    knobs: Mapping[str, Any],
    paper_batch_size: int,
    paper_op_count: int,
    updates: Sequence[tf.Operation] = (),
    clip_norm: float | None = None,
) -> ModelSpec:
    """Add the training step and the initializer to the default graph and describe the result.

    Parameters
    ----------
    name : str
        Registry name of the model.
    loss : tf.Tensor
        Scalar loss; renamed ``loss:0`` through an identity op.
    optimizer : tf.compat.v1.train.Optimizer
        Applies the gradients of ``loss`` to every trainable variable.
    inputs : sequence of Input
        The inputs the placeholders were made from (see :func:`placeholders`).
    knobs, paper_batch_size, paper_op_count
        Copied into the :class:`ModelSpec`.
    updates : sequence of tf.Operation
        State updates a step also runs (batch-norm moving averages); the step waits for them.
    clip_norm : float, optional
        Clip the gradients to this global norm first (``tf.clip_by_global_norm``).

    Returns
    -------
    ModelSpec
        With ``train_op`` named ``"train_op"`` and ``init_op`` named ``"init"``.
    """
    loss = tf.identity(loss, name="loss")
    grads_and_vars = optimizer.compute_gradients(loss)
    missing = [var.op.name for grad, var in grads_and_vars if grad is None]
    if missing:
        raise ValueError(f"model {name!r}: the loss does not depend on variables {missing}")
    if clip_norm is not None:
        grads, _ = tf.clip_by_global_norm([grad for grad, _ in grads_and_vars], clip_norm)
        grads_and_vars = [(grad, var) for grad, (_, var) in zip(grads, grads_and_vars)]
    with tf.control_dependencies(list(updates)):
        train_op = optimizer.apply_gradients(grads_and_vars, name="train_op")
    init_op = tf.compat.v1.global_variables_initializer()
    return ModelSpec(
        name=name,
        graph=loss.graph,
        loss=loss.name,
        train_op=train_op.name,
        init_op=init_op.name,
        feed_fn=feed_function(inputs),
        paper_batch_size=paper_batch_size,
        paper_op_count=paper_op_count,
        knobs=dict(knobs),
    )


def train_step_ops(spec: ModelSpec) -> set[str]:
    """Names of the ops one training step can run: the train op's closure over data and control inputs.

    Initializers (and anything else no step needs) are left out. Ops inside function bodies (the body
    of a functional ``While``) are not graph ops and are not counted.
    """
    graph = spec.graph
    stack = [graph.get_operation_by_name(spec.train_op)]
    seen = {stack[0].name}
    while stack:
        op = stack.pop()
        for producer in [tensor.op for tensor in op.inputs] + list(op.control_inputs):
            if producer.name not in seen:
                seen.add(producer.name)
                stack.append(producer)
    return seen


def parameter_count(spec: ModelSpec) -> int:
    """Number of trainable scalars of the model, from the variables' static shapes (nothing is run)."""
    with spec.graph.as_default():
        variables = tf.compat.v1.trainable_variables()
    return sum(int(np.prod(var.shape.as_list())) for var in variables)
