"""Encoder-decoder Transformer (Vaswani et al. 2017), the attention model of Celeritas section 6.2.1.

The paper's variant has "12 layers and 16 heads containing 2048 hidden units". Read here as:

- ``layers`` = 12 encoder layers *and* 12 decoder layers (Vaswani's ``N``). The op count decides it:
  one encoder plus one decoder layer build 2,750 ops here, so 12 + 12 layers give 33,350 ops (with
  the embeddings, the loss and Adam), within 8% of Table 2's 36,352, while 6 + 6 give 16,850.
- ``d_ff`` = 2048: the "hidden units" are the units of the one hidden layer the model has, the inner
  layer of each position-wise feed-forward network (Vaswani et al. 2017, section 3.3, where the base
  model's is also 2048); it parallels the NMT model's "2048 hidden units per LSTM", the units of its
  hidden state. The op count cannot tell widths apart (it does not depend on them).
- ``d_model`` = 1024 with 16 heads of 64 dimensions: the width of Transformer (big), the
  configuration with 16 heads, keeping the head size of 64 both of Vaswani's models use.

Architecture: shared source/target embedding that is also the output projection (section 3.4),
scaled by ``sqrt(d_model)``, plus sinusoidal positional encoding (section 3.5); post-norm residual
sub-layers with dropout (section 5.4); causal self-attention in the decoder; label-smoothed
cross-entropy (epsilon 0.1) and Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 (section 5.3) at a
constant learning rate of 1e-4 (the warm-up schedule only changes a scalar and is left out).
Sentences have a fixed length, so no padding masks are needed. The paper gives no sentence length
or vocabulary; the defaults are 50 tokens (the maximum length of the TensorFlow NMT tutorial) and
a 32,000-token vocabulary, as for the NMT model. Neither changes the op count.
"""

from __future__ import annotations

import math

import tensorflow as tf

from models.common import Input, ModelSpec, check_positive, model_graph, placeholders, training_spec

__all__ = ["build_transformer"]

PAPER_OP_COUNT = 36352
"""Ops of the Transformer graph in Celeritas Table 2."""

LABEL_SMOOTHING = 0.1
LEARNING_RATE = 1e-4
LAYER_NORM_EPSILON = 1e-6
MASKED_SCORE = -1e9
"""Added to the attention scores of future positions in decoder self-attention."""


def build_transformer(
    layers: int = 12,
    heads: int = 16,
    d_model: int = 1024,
    d_ff: int = 2048,
    source_length: int = 50,
    target_length: int = 50,
    vocab_size: int = 32000,
    dropout: float = 0.1,
) -> ModelSpec:
    """Build the Transformer training graph.

    Parameters
    ----------
    layers : int
        Encoder layers, and as many decoder layers.
    heads : int
        Attention heads; must divide ``d_model``.
    d_model : int
        Width of the embeddings and of every sub-layer's output.
    d_ff : int
        Inner width of the position-wise feed-forward networks.
    source_length, target_length : int
        Tokens per source and per target sentence.
    vocab_size : int
        Size of the shared source/target vocabulary.
    dropout : float
        Dropout rate on embeddings and sub-layer outputs, in [0, 1); 0 builds no dropout ops.

    Returns
    -------
    ModelSpec
        Inputs ``source`` (``(None, source_length)``), ``target_in`` and ``target_out``
        (``(None, target_length)``), all int32 token ids in ``[0, vocab_size)``.
    """
    sizes = {
        "layers": layers,
        "heads": heads,
        "d_model": d_model,
        "d_ff": d_ff,
        "source_length": source_length,
        "target_length": target_length,
        "vocab_size": vocab_size,
    }
    check_positive(**sizes)
    if d_model % heads:
        raise ValueError(f"heads ({heads}) must divide d_model ({d_model})")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    inputs = (
        Input("source", (source_length,), "int32", 0, vocab_size),
        Input("target_in", (target_length,), "int32", 0, vocab_size),
        Input("target_out", (target_length,), "int32", 0, vocab_size),
    )
    with model_graph():
        fed = placeholders(inputs)
        model = _Transformer(heads, d_model, d_ff, dropout)
        with tf.compat.v1.variable_scope("transformer"):
            embedding = tf.compat.v1.get_variable(
                "embedding",
                (vocab_size, d_model),
                initializer=tf.random_normal_initializer(0.0, d_model**-0.5),
            )
            memory = model.embed(embedding, fed["source"], "encoder_input")
            for layer in range(layers):
                with tf.compat.v1.variable_scope(f"encoder_{layer}"):
                    memory = model.encoder_layer(memory)
            x = model.embed(embedding, fed["target_in"], "decoder_input")
            for layer in range(layers):
                with tf.compat.v1.variable_scope(f"decoder_{layer}"):
                    x = model.decoder_layer(x, memory)
            logits = tf.matmul(tf.reshape(x, (-1, d_model)), embedding, transpose_b=True)
            loss = _smoothed_cross_entropy(logits, tf.reshape(fed["target_out"], (-1,)), vocab_size)
        optimizer = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE, beta1=0.9, beta2=0.98, epsilon=1e-9)
        return training_spec(
            "transformer",
            loss,
            optimizer,
            inputs,
            knobs={**sizes, "dropout": dropout},
            paper_batch_size=256,
            paper_op_count=PAPER_OP_COUNT,
        )


def _smoothed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """Mean cross-entropy against targets smoothed by :data:`LABEL_SMOOTHING` (Szegedy et al. 2016)."""
    targets = tf.one_hot(
        labels,
        vocab_size,
        on_value=1.0 - LABEL_SMOOTHING + LABEL_SMOOTHING / vocab_size,
        off_value=LABEL_SMOOTHING / vocab_size,
    )
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits))


def _positional_encoding(length: int, d_model: int) -> tf.Tensor:
    """Sinusoidal encoding ``(length, d_model)`` of Vaswani et al. 2017, section 3.5 (graph ops)."""
    positions = tf.cast(tf.range(length), tf.float32)[:, None]
    rates = tf.exp(tf.cast(tf.range(0, d_model, 2), tf.float32) * (-math.log(10000.0) / d_model))
    angles = positions * rates[None, :]
    interleaved = tf.stack([tf.sin(angles), tf.cos(angles)], axis=2)
    return tf.reshape(interleaved, (length, -1))[:, :d_model]


class _Transformer:
    """Builds the Transformer's layers into the default graph; one instance per graph."""

    def __init__(self, heads: int, d_model: int, d_ff: int, dropout: float) -> None:
        self.heads = heads
        self.d_model = d_model
        self.d_ff = d_ff
        self.dropout = dropout

    def embed(self, embedding: tf.Variable, ids: tf.Tensor, name: str) -> tf.Tensor:
        """Scaled token embeddings plus positional encoding, with dropout (sections 3.4, 3.5, 5.4)."""
        with tf.name_scope(name):
            x = tf.nn.embedding_lookup(embedding, ids) * math.sqrt(self.d_model)
            return self._dropout(x + _positional_encoding(int(ids.shape[1]), self.d_model))

    def encoder_layer(self, x: tf.Tensor) -> tf.Tensor:
        """Self-attention then feed-forward, each a residual sub-layer (section 3.1)."""
        x = self._sublayer(x, self._attention(x, x, causal=False, name="self_attention"), "norm_1")
        return self._sublayer(x, self._feed_forward(x), "norm_2")

    def decoder_layer(self, x: tf.Tensor, memory: tf.Tensor) -> tf.Tensor:
        """Causal self-attention, attention over the encoder output, feed-forward (section 3.1)."""
        x = self._sublayer(x, self._attention(x, x, causal=True, name="self_attention"), "norm_1")
        x = self._sublayer(x, self._attention(x, memory, causal=False, name="cross_attention"), "norm_2")
        return self._sublayer(x, self._feed_forward(x), "norm_3")

    def _sublayer(self, x: tf.Tensor, y: tf.Tensor, name: str) -> tf.Tensor:
        """``LayerNorm(x + Dropout(y))`` (section 5.4)."""
        return self._layer_norm(x + self._dropout(y), name)

    def _dropout(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.dropout(x, rate=self.dropout) if self.dropout else x

    def _layer_norm(self, x: tf.Tensor, name: str) -> tf.Tensor:
        with tf.compat.v1.variable_scope(name):
            gain = tf.compat.v1.get_variable("gain", (self.d_model,), initializer=tf.ones_initializer())
            bias = tf.compat.v1.get_variable("bias", (self.d_model,), initializer=tf.zeros_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * gain + bias

    def _dense(self, x: tf.Tensor, width: int, name: str) -> tf.Tensor:
        with tf.compat.v1.variable_scope(name):
            kernel = tf.compat.v1.get_variable("kernel", (x.shape[-1], width))
            bias = tf.compat.v1.get_variable("bias", (width,), initializer=tf.zeros_initializer())
        return tf.nn.bias_add(tf.tensordot(x, kernel, axes=1), bias)

    def _feed_forward(self, x: tf.Tensor) -> tf.Tensor:
        """``max(0, x W1 + b1) W2 + b2`` (section 3.3)."""
        with tf.compat.v1.variable_scope("feed_forward"):
            return self._dense(tf.nn.relu(self._dense(x, self.d_ff, "inner")), self.d_model, "output")

    def _split_heads(self, x: tf.Tensor) -> tf.Tensor:
        """``(batch, length, d_model)`` -> ``(batch, heads, length, d_model / heads)``."""
        length = int(x.shape[1])
        x = tf.reshape(x, (-1, length, self.heads, self.d_model // self.heads))
        return tf.transpose(x, (0, 2, 1, 3))

    def _attention(self, queries: tf.Tensor, keys: tf.Tensor, *, causal: bool, name: str) -> tf.Tensor:
        """Multi-head scaled dot-product attention (section 3.2, Eq. 1)."""
        with tf.compat.v1.variable_scope(name):
            q = self._split_heads(self._dense(queries, self.d_model, "query"))
            k = self._split_heads(self._dense(keys, self.d_model, "key"))
            v = self._split_heads(self._dense(keys, self.d_model, "value"))
            scores = tf.matmul(q, k, transpose_b=True) * (self.d_model // self.heads) ** -0.5
            if causal:
                length = int(queries.shape[1])
                future = 1.0 - tf.linalg.band_part(tf.ones((length, length)), -1, 0)
                scores += future * MASKED_SCORE
            context = tf.matmul(tf.nn.softmax(scores), v)
            context = tf.reshape(
                tf.transpose(context, (0, 2, 1, 3)), (-1, int(queries.shape[1]), self.d_model)
            )
            return self._dense(context, self.d_model, "output")
