"""Partition rules: how each TensorFlow op type splits into pieces, one small table keyed by op type.

Tofu's partition-n-reduce (section 4) and OptCNN's parallelizable dimensions (Table 1) in the
vocabulary of PyTorch DTensor and JAX's ``PartitionSpec``: a piece of an op split along a named
dimension (``"batch"``, ``"channel"``, ``"height"``, ``"width"``, ``"reduction"``) reads each input
as

* :data:`REPLICATED`: the whole tensor (a convolution's filter under a batch split);
* ``sharded(d)``: the piece's slice along axis ``d`` of the input;
* :data:`PARTIAL`: the piece's own partial sum of the input (a linear op on partial sums);
* ``halo(d)``: its slice along ``d`` plus the rows a window (kernel, stride) needs from the
  neighbouring slices, for height and width splits of convolutions and pooling;

and writes each output as

* ``sharded(d)``: pieces are joined by concatenating along axis ``d``;
* :data:`PARTIAL`: every piece holds a partial result of the whole output, joined by summing
  (weight gradients under a batch split, a split of a contraction's reduction dimension).

Axes are those of TensorFlow's default layouts: NHWC activations, HWIO filters, ``[rows, columns]``
matrices; ``-1`` is the last axis. An op whose attributes move an axis (``transpose_a``, ``adj_x``,
``data_format="NCHW"``, a reduction's axes) is split only when the cost graph records those
attributes (the ``attrs`` node field of schema version 3) and they match the rule's ``when``; an op
type missing from :data:`RULES`, or an attribute-dependent op without its attributes, stays whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BATCH",
    "BATCH_NORMS",
    "CHANNEL",
    "DIMENSIONS",
    "FED_WHOLE",
    "HEIGHT",
    "PARTIAL",
    "REDUCTION",
    "REPLICA",
    "REPLICATED",
    "RULES",
    "SHAPE_INPUT",
    "SHAPE_OPS",
    "UNREPLICABLE",
    "WIDTH",
    "Layout",
    "SplitRule",
    "can_replicate",
    "halo",
    "op_rules",
    "sharded",
]

BATCH, CHANNEL, HEIGHT, WIDTH, REDUCTION = "batch", "channel", "height", "width", "reduction"
DIMENSIONS = (BATCH, CHANNEL, HEIGHT, WIDTH, REDUCTION)
"""The named dimensions an op may split along (OptCNN Table 1 plus Tofu's reduction splits)."""

BATCH_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV3", "FusedBatchNormGrad", "FusedBatchNormGradV3"})
"""Batch norm and its gradient: in training mode (``is_training``) over the whole batch's statistics."""


@dataclass(frozen=True)
class Layout:
    """How a piece holds one tensor: ``"replicated"``, ``"sharded"`` or ``"halo"`` along ``axis``,
    or ``"partial"`` (a summand of the whole tensor)."""

    kind: str
    axis: int | None = None

    def __str__(self) -> str:
        return self.kind if self.axis is None else f"{self.kind}({self.axis})"


REPLICATED = Layout("replicated")
PARTIAL = Layout("partial")


def sharded(axis: int) -> Layout:
    """The piece's slice along ``axis``."""
    return Layout("sharded", axis)


def halo(axis: int) -> Layout:
    """The piece's slice along ``axis`` plus the window's overlap with the neighbouring slices."""
    return Layout("halo", axis)


@dataclass(frozen=True)
class SplitRule:
    """One way to split an op: the layout each input is read in and each output is written in.

    ``reads[i]`` is input slot ``i``'s layout and ``writes[s]`` output slot ``s``'s; an op with more
    inputs (outputs) than listed reads (writes) the rest like the last entry (``AddN``,
    ``ConcatV2``, ``Split``). ``when`` lists attribute values the op must have (the cost graph's
    ``attrs``) for the rule to apply; an empty ``when`` applies to every op of the type.
    """

    reads: tuple[Layout, ...]
    writes: tuple[Layout, ...]
    when: Mapping[str, Any] = field(default_factory=dict)

    def read(self, slot: int) -> Layout:
        return self.reads[min(slot, len(self.reads) - 1)]

    def write(self, slot: int) -> Layout:
        return self.writes[min(slot, len(self.writes) - 1)]

    def applies_to(self, attrs: Mapping[str, Any] | None) -> bool:
        """Whether an op with attributes ``attrs`` (``None``: unknown) splits by this rule."""
        if not self.when:
            return True
        return attrs is not None and all(attrs.get(key) == value for key, value in self.when.items())


def _rule(reads: tuple[Layout, ...], writes: tuple[Layout, ...], **when: Any) -> SplitRule:
    return SplitRule(reads, writes, when)


S0, S1, S2, SL, R, P = sharded(0), sharded(1), sharded(2), sharded(-1), REPLICATED, PARTIAL
_NHWC = {"data_format": "NHWC"}
_ROWS_MAJOR = {"transpose_a": False, "transpose_b": False}

_ELEMENTWISE = {BATCH: _rule((S0,), (S0,))}
"""Element-wise ops, activations and their gradients: every input and output sliced alike. A
broadcast operand (a bias vector, a scalar) is read as its slice too, which at worst moves a
little less of a tensor that is small anyway."""

_ELEMENTWISE_TYPES = (
    "Relu", "Relu6", "Elu", "Selu", "Tanh", "Sigmoid", "Softplus", "LeakyRelu", "Gelu",
    "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "TanhGrad", "SigmoidGrad", "SoftplusGrad",
    "LeakyReluGrad", "AddV2", "Add", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum",
    "Minimum", "SquaredDifference", "Square", "Sqrt", "Rsqrt", "RsqrtGrad", "SqrtGrad", "Exp",
    "Log", "Neg", "Reciprocal", "Pow", "Cast", "SelectV2", "Select", "GreaterEqual", "Greater",
    "Less", "LessEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "AddN",
    "ZerosLike", "OnesLike", "Softmax", "LogSoftmax", "Identity", "Floor", "Abs", "Sign",
    "StopGradient", "PreventGradient", "Snapshot",
)  # fmt: skip

_LINEAR_TYPES = ("AddN", "AddV2", "Add", "Identity", "Neg")
"""Element-wise ops that are linear in every input: pieces that read only partial sums (each its
own) write partial sums of the result, so a sum of weight gradients over time steps is all-reduced
once, not once per step (DTensor's and Tofu's partial layouts passing through additions)."""

_WINDOWED = {
    BATCH: _rule((S0,), (S0,), **_NHWC),
    HEIGHT: _rule((halo(1),), (S1,), **_NHWC),
    WIDTH: _rule((halo(2),), (S2,), **_NHWC),
    CHANNEL: _rule((SL,), (SL,), **_NHWC),
}
"""Pooling: each window reads one channel of one example; spatial pieces need a halo."""

_PADDING = {
    BATCH: _rule((S0, R), (S0,), pads_axis0=False),
    CHANNEL: _rule((SL, R), (SL,), pads_last_axis=False),
    HEIGHT: _rule((halo(1), R), (S1,)),
    WIDTH: _rule((halo(2), R), (S2,)),
}
"""``Pad``, ``PadV2`` (``constant_values`` read whole) and ``MirrorPad``; the cost graph's ``attrs``
say which axes the paddings pad (:func:`tfplace.tf_graph.split_attrs.op_split_attrs`)."""

RULES: dict[str, dict[str, SplitRule]] = {
    # y = conv(x, w): x NHWC, w HWIO (OptCNN Table 1: sample, channel, height, width).
    "Conv2D": {
        BATCH: _rule((S0, R), (S0,), **_NHWC),
        HEIGHT: _rule((halo(1), R), (S1,), **_NHWC),
        WIDTH: _rule((halo(2), R), (S2,), **_NHWC),
        CHANNEL: _rule((R, SL), (SL,), **_NHWC),
        REDUCTION: _rule((SL, S2), (P,), **_NHWC),
    },
    # dx = conv_backprop_input(x_shape, w, dy)
    "Conv2DBackpropInput": {
        BATCH: _rule((R, R, S0), (S0,), **_NHWC),
        HEIGHT: _rule((R, R, halo(1)), (S1,), **_NHWC),
        WIDTH: _rule((R, R, halo(2)), (S2,), **_NHWC),
        CHANNEL: _rule((R, S2, R), (SL,), **_NHWC),
        REDUCTION: _rule((R, SL, SL), (P,), **_NHWC),
    },
    # dw = conv_backprop_filter(x, w_shape, dy): a batch or spatial split sums partial gradients.
    "Conv2DBackpropFilter": {
        BATCH: _rule((S0, R, S0), (P,), **_NHWC),
        HEIGHT: _rule((halo(1), R, S1), (P,), **_NHWC),
        WIDTH: _rule((halo(2), R, S2), (P,), **_NHWC),
        CHANNEL: _rule((R, R, SL), (SL,), **_NHWC),
    },
    # Depthwise convolution (MobileNet) and its gradients: examples are independent; the filter's
    # gradient sums the pieces' partial gradients. Each input channel is convolved alone, so a
    # channel split gives a piece its input channels, their filters (HWCM: axis 2) and the
    # multiplier's output channels of each (``c * multiplier + m``: a contiguous range).
    # Spatial splits read halos and sum the filter's partial gradients, as Conv2D's do.
    "DepthwiseConv2dNative": {
        BATCH: _rule((S0, R), (S0,), **_NHWC),
        HEIGHT: _rule((halo(1), R), (S1,), **_NHWC),
        WIDTH: _rule((halo(2), R), (S2,), **_NHWC),
        CHANNEL: _rule((SL, S2), (SL,), **_NHWC),
    },
    "DepthwiseConv2dNativeBackpropInput": {
        BATCH: _rule((R, R, S0), (S0,), **_NHWC),
        HEIGHT: _rule((R, R, halo(1)), (S1,), **_NHWC),
        WIDTH: _rule((R, R, halo(2)), (S2,), **_NHWC),
        CHANNEL: _rule((R, S2, SL), (SL,), **_NHWC),
    },
    "DepthwiseConv2dNativeBackpropFilter": {
        BATCH: _rule((S0, R, S0), (P,), **_NHWC),
        HEIGHT: _rule((halo(1), R, S1), (P,), **_NHWC),
        WIDTH: _rule((halo(2), R, S2), (P,), **_NHWC),
        CHANNEL: _rule((SL, R, SL), (S2,), **_NHWC),
    },
    # dx = conv_backprop_input_v2(x, w, dy) (TensorFlow 2.x): reads x for its shape only, so a piece
    # reads its own rows of x (local where x was split alike), as the piece's shape.
    "Conv2DBackpropInputV2": {
        BATCH: _rule((S0, R, S0), (S0,), **_NHWC),
        HEIGHT: _rule((S1, R, halo(1)), (S1,), **_NHWC),
        WIDTH: _rule((S2, R, halo(2)), (S2,), **_NHWC),
        CHANNEL: _rule((SL, S2, R), (SL,), **_NHWC),
        REDUCTION: _rule((R, SL, SL), (P,), **_NHWC),
    },
    # c = a @ b without transposes: rows are the batch, columns the out-features, k the reduction.
    "MatMul": {
        BATCH: _rule((S0, R), (S0,), **_ROWS_MAJOR),
        CHANNEL: _rule((R, S1), (S1,), **_ROWS_MAJOR),
        REDUCTION: _rule((S1, S0), (P,), **_ROWS_MAJOR),
    },
    # dw = a^T @ dy, the weight gradient of a dense layer: the batch is the reduction dimension.
    "MatMul/transpose_a": {
        REDUCTION: _rule((S0, S0), (P,), transpose_a=True, transpose_b=False),
        CHANNEL: _rule((R, S1), (S1,), transpose_a=True, transpose_b=False),
    },
    # dx = dy @ w^T, the input gradient of a dense layer.
    "MatMul/transpose_b": {
        BATCH: _rule((S0, R), (S0,), transpose_a=False, transpose_b=True),
        CHANNEL: _rule((R, S0), (S1,), transpose_a=False, transpose_b=True),
        REDUCTION: _rule((S1, S1), (P,), transpose_a=False, transpose_b=True),
    },
    # Batched matmuls (attention): the leading axis is the batch of independent products.
    "BatchMatMulV2": {BATCH: _rule((S0, S0), (S0,))},
    "BiasAdd": {BATCH: _rule((S0, R), (S0,)), CHANNEL: _rule((SL, S0), (SL,), **_NHWC)},
    "BiasAddGrad": {BATCH: _rule((S0,), (P,)), CHANNEL: _rule((SL,), (S0,), **_NHWC)},
    "MaxPool": _WINDOWED,
    "AvgPool": _WINDOWED,
    # grad(orig_input, orig_output, dy) and grad(orig_input_shape, dy)
    # A spatial piece computes a range of input rows from the windows touching it (their input and
    # forward output rows for a max, their gradient rows): halos of all three.
    "MaxPoolGrad": {
        BATCH: _rule((S0,), (S0,), **_NHWC),
        HEIGHT: _rule((halo(1),), (S1,), **_NHWC),
        WIDTH: _rule((halo(2),), (S2,), **_NHWC),
        CHANNEL: _rule((SL,), (SL,), **_NHWC),
    },
    "AvgPoolGrad": {
        BATCH: _rule((R, S0), (S0,), **_NHWC),
        HEIGHT: _rule((R, halo(1)), (S1,), **_NHWC),
        WIDTH: _rule((R, halo(2)), (S2,), **_NHWC),
        CHANNEL: _rule((R, SL), (SL,), **_NHWC),
    },
    # Batch norm normalizes each channel on its own: a channel piece computes its channels exactly.
    # In inference mode a batch piece normalizes its examples with the moving statistics it reads
    # (outputs 1 and 2 pass them on). In training mode batch pieces sum per-channel statistics over
    # the pieces (synchronized batch norm, tfplace.tf_graph.split_batch_norm): the partial outputs.
    "FusedBatchNormV3": {
        BATCH: _rule((S0, R), (S0, P), **_NHWC),
        CHANNEL: _rule((SL, S0), (SL, S0), **_NHWC),
    },
    "FusedBatchNormGradV3": {
        BATCH: _rule((S0, S0, R), (S0, P, P, R), **_NHWC),
        CHANNEL: _rule((SL, SL, S0), (SL, S0), **_NHWC),
    },
    # Padding (ResNet's ZeroPadding2D): the pieces of a batch or channel split pad their slices as the
    # whole op pads the tensor, where it pads neither the batch nor the channels; a piece of a
    # spatial split computes a range of the padded rows, reading the input rows in it and padding by
    # the part of the padding in it (a window of one row: no halo is read).
    "Pad": _PADDING,
    "PadV2": _PADDING,
    # A mirrored pad reflects rows from inside the tensor: spatial pieces would read others' rows.
    "MirrorPad": {key: rule for key, rule in _PADDING.items() if key in (BATCH, CHANNEL)},
    "SoftmaxCrossEntropyWithLogits": {BATCH: _rule((S0,), (S0,))},
    "SparseSoftmaxCrossEntropyWithLogits": {BATCH: _rule((S0,), (S0,))},
    # Reductions: keeping axis 0 (layer norm's moments) or summing over it (a loss, a bias gradient).
    "Sum": {
        BATCH: _rule((S0, R), (S0,), reduces_axis0=False),
        REDUCTION: _rule((S0, R), (P,), reduces_axis0=True),
    },
    "Mean": {
        BATCH: _rule((S0, R), (S0,), reduces_axis0=False),
        REDUCTION: _rule((S0, R), (P,), reduces_axis0=True),
    },
    # Shape-moving ops split where they keep axis 0 in place; the axis/perm inputs are replicated.
    "ConcatV2": {BATCH: _rule((S0,), (S0,), keeps_axis0=True)},  # the axis: a scalar, read alike
    "Slice": {BATCH: _rule((S0, R, R), (S0,), keeps_axis0=True)},
    "Split": {BATCH: _rule((R, S0), (S0,), keeps_axis0=True)},
    "Reshape": {BATCH: _rule((S0, R), (S0,), keeps_axis0=True)},
    "Transpose": {BATCH: _rule((S0, R), (S0,), keeps_axis0=True)},
    # A broadcast's piece is its slice of the result: the operand and the shape are read whole.
    "BroadcastTo": {BATCH: _rule((R, R), (S0,))},
    "OneHot": {BATCH: _rule((S0, R), (S0,))},
    # A random draw split on the batch draws each piece's numbers on its own device, as each replica
    # of MirroredStrategy does: the same distribution, not the same numbers as the whole op.
    "RandomUniform": {BATCH: _rule((R,), (S0,))},
    "RandomStandardNormal": {BATCH: _rule((R,), (S0,))},
    # A fed tensor is fed to each piece as its slice of the examples.
    "Placeholder": {BATCH: _rule((R,), (S0,))},
    # Embedding lookups: rows of ids pick rows of the table, or the table's rows are sharded and
    # each piece contributes the rows it holds (zeros elsewhere), summed.
    "GatherV2": {BATCH: _rule((R, S0, R), (S0,), axis=0), REDUCTION: _rule((S0, R, R), (P,), axis=0)},
    "ResourceGather": {BATCH: _rule((R, S0), (S0,))},
    "UnsortedSegmentSum": {BATCH: _rule((S0, S0, R), (P,))},
}
for _type in _ELEMENTWISE_TYPES:
    RULES[_type] = _ELEMENTWISE
for _type in _LINEAR_TYPES:
    RULES[_type] = {**RULES[_type], REDUCTION: _rule((P,), (P,))}
RULES["BatchMatMulV3"] = RULES["BatchMatMul"] = RULES["BatchMatMulV2"]
RULES["FusedBatchNorm"] = RULES["FusedBatchNormV3"]
RULES["FusedBatchNormGrad"] = RULES["FusedBatchNormGradV3"]

SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
"""Op types that read only their inputs' shapes, which a plan knows without moving the tensors: in
a plan their inputs are dependencies that carry no bytes (the TensorFlow rewrite gives them the
whole tensor's shape)."""

FED_WHOLE = frozenset({"Placeholder"})
"""Op types a split runs whole on the host of its first device (:func:`tfplace.split.feeds.feed_host`):
a fed tensor is fed once, under its name (the user's feed), into host memory, and each piece
reading it receives its slice from there (the TensorFlow rewrite and the plan's expansion alike)."""

SHAPE_INPUT = {
    "Conv2DBackpropInput": 0,
    "Conv2DBackpropFilter": 1,
    "AvgPoolGrad": 0,
    "DepthwiseConv2dNativeBackpropInput": 0,
    "DepthwiseConv2dNativeBackpropFilter": 1,
    "Reshape": 1,
}
"""Op type -> the input slot holding a shape the op computes with. A piece of a split op gets its own
shape as a constant on its device (the TensorFlow rewrite writes it from the static shapes), so
that input moves no bytes and waits for nothing."""

REPLICA = "replica"
"""Not a dimension: every piece runs the whole op on its own device (a variable, its reads and its
update under data parallelism, MirroredStrategy's replicas). Each reads its inputs whole and writes
whole outputs; a partial input is summed first (an all-reduce over the replicas' devices)."""

UNREPLICABLE = frozenset(
    {"RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "Multinomial",
     "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "IteratorGetNext",
     "Print", "PrintV2", "WriteSummary", "Save", "SaveV2", "Restore", "RestoreV2"}
)  # fmt: skip
"""Op types whose replicas would not compute the same thing (a random draw per device) or would
repeat an effect outside the graph (I/O): they never run as replicas."""


def can_replicate(op_type: str) -> bool:
    """Whether replicas of an op of ``op_type`` on several devices all compute what the op computes."""
    return op_type not in UNREPLICABLE


_VARIANT_ATTRS = {"MatMul": ("transpose_a", "transpose_b")}
"""Op types whose rules differ by attribute: ``"MatMul/transpose_a"`` holds ``MatMul``'s rules
when ``transpose_a`` is set."""


def op_rules(op_type: str, attrs: Mapping[str, Any] | None = None) -> dict[str, SplitRule]:
    """The dimensions an op of ``op_type`` with attributes ``attrs`` splits along, with their rules.

    ``{}`` when the op stays whole: an op type without rules, or rules whose ``when`` the op's
    attributes (``None``: not recorded) do not satisfy.
    """
    tables = [RULES.get(op_type, {})]
    for attr in _VARIANT_ATTRS.get(op_type, ()):
        if attrs is not None and attrs.get(attr):
            tables = [RULES.get(f"{op_type}/{attr}", {})]
    return {dim: rule for table in tables for dim, rule in table.items() if rule.applies_to(attrs)}
