"""GNMT-style neural machine translation (Wu et al. 2016), the LSTM model of Celeritas section 6.2.1.

Architecture (GNMT, Wu et al. 2016, section 3 and Fig. 1; ``layers`` = 4 and ``units`` = 2048 in the
paper):

- Encoder: the bottom layer is bidirectional (a forward and a backward LSTM, outputs concatenated),
  the other ``layers - 1`` layers are unidirectional; from the third layer on, each layer's input is
  added to its output (residual connections).
- Decoder: ``layers`` LSTM layers with additive (Bahdanau) attention over the top encoder outputs.
  At every step the bottom decoder layer reads the target embedding and the previous attention
  context; its output is the attention query; the new context is fed to every layer above it,
  which also has residual connections from the third layer on.
- The top decoder output is projected to the target vocabulary; the loss is the mean softmax
  cross-entropy over all target tokens. Training uses teacher forcing: the decoder reads
  ``target_in`` (in real data the reference shifted right) and predicts ``target_out``.

The paper gives no vocabulary size or sentence lengths: the vocabularies default to 32,000 tokens
(the size of GNMT's wordpiece vocabulary), the lengths to 24 tokens each
(:data:`DEFAULT_SOURCE_LENGTH`), which makes the unrolled graph the size of the paper's.

Training follows the defaults of the TensorFlow NMT tutorial for GNMT: plain SGD with learning rate
1.0, gradients clipped to a global norm of 5, weights initialized uniformly in [-0.1, 0.1].

Two variants build the same network:

- :func:`build_nmt` unrolls every LSTM over time with a Python loop (``static_rnn``): the graph has
  ops per time step, as the paper's 25,463-op graph does.
- :func:`build_nmt_while` runs each LSTM layer in ``dynamic_rnn``, a while loop: a functional
  ``While`` op (control flow v2) or, with ``control_flow_v1=True``, the legacy Enter / Merge /
  Switch / NextIteration / Exit frames, which form cycles in the graph.

Both use ``tf.compat.v1.nn.rnn_cell.LSTMCell``, which TensorFlow 2.21 serves only when the
environment variable ``TF_USE_LEGACY_KERAS=1`` is set before TensorFlow first resolves its Keras
modules; importing the :mod:`models` package sets it unless it is already set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import tensorflow as tf

from models.common import Input, ModelSpec, check_positive, model_graph, placeholders, training_spec

__all__ = ["build_nmt", "build_nmt_while"]

PAPER_OP_COUNT = 25463
"""Ops of the NMT graph in Celeritas Table 2."""

DEFAULT_SOURCE_LENGTH = 24
"""Default source sentence length in tokens.

The paper does not give its lengths; they set the unrolled op count. With 4 layers each source step
builds about 495 ops and each target step about 550 (forward, gradient and update), over a base of
about 790, so 24 + 24 tokens give 25,888 ops, 1.7% above Table 2's 25,463.
"""

DEFAULT_TARGET_LENGTH = 24
"""Default target sentence length in tokens (see :data:`DEFAULT_SOURCE_LENGTH`)."""

FIRST_RESIDUAL_LAYER = 2
"""0-based index of the first layer with a residual connection (GNMT: the third layer)."""

LEARNING_RATE = 1.0
CLIP_NORM = 5.0
INIT_SCALE = 0.1


def build_nmt(
    units: int = 2048,
    layers: int = 4,
    source_length: int = DEFAULT_SOURCE_LENGTH,
    target_length: int = DEFAULT_TARGET_LENGTH,
    vocab_size: int = 32000,
) -> ModelSpec:
    """Build the GNMT training graph unrolled over time (one set of LSTM ops per time step).

    Parameters
    ----------
    units : int
        Width of every LSTM layer, of the embeddings and of the attention (the paper: 2048).
    layers : int
        LSTM layers of the encoder (the bidirectional bottom layer counts as one) and of the decoder.
    source_length, target_length : int
        Tokens per source and per target sentence (every sentence has exactly this length).
    vocab_size : int
        Size of the source and of the target vocabulary.

    Returns
    -------
    ModelSpec
        Inputs ``source`` (``(None, source_length)``), ``target_in`` and ``target_out``
        (``(None, target_length)``), all int32 token ids in ``[0, vocab_size)``.
    """
    return _build_gnmt("nmt", _sizes(units, layers, source_length, target_length, vocab_size), unrolled=True)


def build_nmt_while(
    units: int = 2048,
    layers: int = 4,
    source_length: int = DEFAULT_SOURCE_LENGTH,
    target_length: int = DEFAULT_TARGET_LENGTH,
    vocab_size: int = 32000,
    control_flow_v1: bool = False,
) -> ModelSpec:
    """Build the GNMT training graph with one ``dynamic_rnn`` while loop per LSTM layer.

    Parameters are those of :func:`build_nmt`, plus:

    control_flow_v1 : bool
        Build legacy control-flow frames (``tf.compat.v1.disable_control_flow_v2``) instead of
        functional ``While`` ops. The switch is process-global in TensorFlow; it is set only while
        this graph is built and restored afterwards, even if building fails.
    """
    sizes = _sizes(units, layers, source_length, target_length, vocab_size)
    with _legacy_control_flow() if control_flow_v1 else nullcontext():
        return _build_gnmt("nmt_while", sizes, unrolled=False, control_flow_v1=control_flow_v1)


def _sizes(
    units: int, layers: int, source_length: int, target_length: int, vocab_size: int
) -> dict[str, int]:
    """The size knobs by name, checked."""
    sizes = {
        "units": units,
        "layers": layers,
        "source_length": source_length,
        "target_length": target_length,
        "vocab_size": vocab_size,
    }
    check_positive(**sizes)
    return sizes


@contextmanager
def _legacy_control_flow() -> Iterator[None]:
    """Build control flow v1 inside the block; restore the previous global setting on exit."""
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            tf.compat.v1.enable_control_flow_v2()


def _lstm_cell(units: int, name: str) -> Any:
    """A legacy ``LSTMCell``; a clear error when TensorFlow routes it to Keras 3 (which lacks it)."""
    try:
        cell_class = tf.compat.v1.nn.rnn_cell.LSTMCell
    except AttributeError as error:
        raise RuntimeError(
            "the NMT models need tf.compat.v1.nn.rnn_cell.LSTMCell, which TensorFlow only provides when "
            "TF_USE_LEGACY_KERAS=1 is set before it first loads Keras: set it in the environment (importing "
            "the models package does so unless TF_USE_LEGACY_KERAS is already set to something else)"
        ) from error
    return cell_class(units, name=name)


def _build_gnmt(name: str, sizes: dict[str, int], *, unrolled: bool, **flags: bool) -> ModelSpec:
    """The GNMT training graph of :func:`build_nmt` (``unrolled``) or :func:`build_nmt_while`.

    ``sizes`` are the checked size knobs; ``flags`` are further knobs to record in the spec.
    """
    units, layers, vocab_size = sizes["units"], sizes["layers"], sizes["vocab_size"]
    inputs = (
        Input("source", (sizes["source_length"],), "int32", 0, vocab_size),
        Input("target_in", (sizes["target_length"],), "int32", 0, vocab_size),
        Input("target_out", (sizes["target_length"],), "int32", 0, vocab_size),
    )
    initializer = tf.compat.v1.random_uniform_initializer(-INIT_SCALE, INIT_SCALE)
    with model_graph():
        fed = placeholders(inputs)
        with tf.compat.v1.variable_scope("gnmt", initializer=initializer):
            source = _embed(fed["source"], vocab_size, units, "encoder_embedding")
            target = _embed(fed["target_in"], vocab_size, units, "decoder_embedding")
            memory = _encoder(source, units, layers, unrolled)
            decoder_cell = _AttentionDecoderCell(
                [_lstm_cell(units, f"decoder_l{i}") for i in range(layers)],
                _additive_attention(memory, units),
            )
            outputs = _run_rnn(decoder_cell, target, unrolled, "decoder")
            logits = _dense(tf.reshape(outputs, (-1, units)), vocab_size, "output_projection")
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=tf.reshape(fed["target_out"], (-1,)), logits=logits
                )
            )
        return training_spec(
            name,
            loss,
            tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE),
            inputs,
            knobs={**sizes, **flags},
            paper_batch_size=512,
            paper_op_count=PAPER_OP_COUNT,
            clip_norm=CLIP_NORM,
        )


def _embed(ids: tf.Tensor, vocab_size: int, units: int, name: str) -> tf.Tensor:
    table = tf.compat.v1.get_variable(name, (vocab_size, units))
    return tf.nn.embedding_lookup(table, ids)


def _dense(x: tf.Tensor, width: int, name: str) -> tf.Tensor:
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable("kernel", (x.shape[-1], width))
        bias = tf.compat.v1.get_variable("bias", (width,), initializer=tf.compat.v1.zeros_initializer())
    return tf.nn.bias_add(tf.matmul(x, kernel), bias)


def _encoder(source: tf.Tensor, units: int, layers: int, unrolled: bool) -> tf.Tensor:
    """GNMT encoder outputs ``(batch, source_length, units)`` (bidirectional bottom layer, residuals)."""
    forward = _run_rnn(_lstm_cell(units, "encoder_l0_fw"), source, unrolled, "encoder_l0_fw")
    backward = tf.reverse(
        _run_rnn(_lstm_cell(units, "encoder_l0_bw"), tf.reverse(source, axis=[1]), unrolled, "encoder_l0_bw"),
        axis=[1],
    )
    if layers == 1:
        # Only the bidirectional layer: its two directions are summed to the attention width.
        return forward + backward
    x = tf.concat([forward, backward], axis=2)
    for layer in range(1, layers):
        y = _run_rnn(_lstm_cell(units, f"encoder_l{layer}"), x, unrolled, f"encoder_l{layer}")
        x = x + y if layer >= FIRST_RESIDUAL_LAYER else y
    return x


def _run_rnn(cell: Any, inputs: tf.Tensor, unrolled: bool, scope: str) -> tf.Tensor:
    """Outputs ``(batch, time, output_size)`` of ``cell`` over batch-major ``inputs`` from a zero state."""
    state = cell.zero_state(tf.shape(inputs)[0], tf.float32)
    if not unrolled:
        outputs, _ = tf.compat.v1.nn.dynamic_rnn(cell, inputs, initial_state=state, scope=scope)
        return outputs
    steps, _ = tf.compat.v1.nn.static_rnn(cell, tf.unstack(inputs, axis=1), initial_state=state, scope=scope)
    return tf.stack(steps, axis=1)


def _additive_attention(memory: tf.Tensor, units: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """Bahdanau attention over ``memory`` ``(batch, source_length, units)``: query -> context.

    ``score_j = v . tanh(W_k m_j + W_q q)``, ``context = sum_j softmax(score)_j m_j`` (Bahdanau et al.
    2015, the attention function of GNMT). The keys ``W_k m_j`` are computed once, outside the loop.
    """
    with tf.compat.v1.variable_scope("attention"):
        key_kernel = tf.compat.v1.get_variable("key_kernel", (units, units))
        query_kernel = tf.compat.v1.get_variable("query_kernel", (units, units))
        score_vector = tf.compat.v1.get_variable("score_vector", (units,))
        keys = tf.tensordot(memory, key_kernel, axes=1)

    def attend(query: tf.Tensor) -> tf.Tensor:
        projected = tf.expand_dims(tf.matmul(query, query_kernel), 1)
        scores = tf.reduce_sum(score_vector * tf.tanh(keys + projected), axis=2)
        weights = tf.expand_dims(tf.nn.softmax(scores), 1)
        return tf.squeeze(tf.matmul(weights, memory), axis=1)

    return attend


class _AttentionDecoderCell:
    """One GNMT decoder step over a stack of LSTM cells, usable by ``static_rnn`` and ``dynamic_rnn``.

    The state is the tuple of the layers' LSTM states followed by the last attention context.
    """

    def __init__(self, cells: Sequence[Any], attend: Callable[[tf.Tensor], tf.Tensor]) -> None:
        self._cells = list(cells)
        self._attend = attend

    @property
    def state_size(self) -> tuple[Any, ...]:
        return (*(cell.state_size for cell in self._cells), self.output_size)

    @property
    def output_size(self) -> int:
        return int(self._cells[-1].output_size)

    def zero_state(self, batch_size: tf.Tensor, dtype: tf.DType) -> tuple[Any, ...]:
        cell_states = (cell.zero_state(batch_size, dtype) for cell in self._cells)
        return (*cell_states, tf.zeros(tf.stack([batch_size, self.output_size]), dtype))

    def __call__(self, inputs: tf.Tensor, state: tuple[Any, ...]) -> tuple[tf.Tensor, tuple[Any, ...]]:
        *cell_states, context = state
        bottom, *upper = self._cells
        x, bottom_state = bottom(tf.concat([inputs, context], axis=1), cell_states[0])
        context = self._attend(x)
        new_states = [bottom_state]
        for layer, (cell, cell_state) in enumerate(zip(upper, cell_states[1:]), start=1):
            y, new_state = cell(tf.concat([x, context], axis=1), cell_state)
            x = x + y if layer >= FIRST_RESIDUAL_LAYER else y
            new_states.append(new_state)
        return x, (*new_states, context)
