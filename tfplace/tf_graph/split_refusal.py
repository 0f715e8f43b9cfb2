"""Which plans the TensorFlow rewrite refuses, and which split ops it runs whole.

:func:`refusal` says, in one line, why the rewrite cannot run an op as a plan splits it (a
dimension its rules do not allow, a degree above the dimension's size, a device without a kernel,
an op inside a legacy ``while`` frame, ...); :func:`keeps_whole` says why a split op runs whole on
its first piece's device instead (a fed placeholder, a resource variable's read). Batch norm in
training mode never splits on the batch: its rules (:data:`tfplace.split.rules.BATCH_NORMS`) have
no batch rule then, so :func:`refusal` refuses such a plan as the plan's validation does.
"""

from __future__ import annotations

from typing import Any

from tfplace.core.devices import DeviceName
from tfplace.split.plan import OpSplit
from tfplace.split.rules import (
    FED_WHOLE,
    HEIGHT,
    REDUCTION,
    REPLICA,
    SHAPE_INPUT,
    WIDTH,
    SplitRule,
    can_replicate,
    op_rules,
)
from tfplace.tf_graph.constraints import kernel_device_types
from tfplace.tf_graph.split_attrs import constant_value, op_split_attrs
from tfplace.tf_graph.split_layouts import (
    CHANNEL_MULTIPLIED,
    dimension,
    piece_ranges,
    sliced_sizes,
)
from tfplace.tf_graph.split_windows import (
    BACKWARD_INPUT,
    PADDED,
    POOL_GRADIENTS,
    SPATIAL,
    backward_rows,
    forward_rows,
    piece_axis_size,
    window,
)

__all__ = ["FRAME_TYPES", "frame_ops", "keeps_whole", "refusal", "sums_partials"]

FRAME_TYPES = frozenset({"Enter", "RefEnter"})


def frame_ops(graph: Any) -> dict[str, str]:
    """Ops inside legacy ``while`` frames (downstream of an ``Enter``, not past its ``Exit``) -> the
    frame's name."""
    inside: dict[str, str] = {}
    stack = [
        (op, op.get_attr("frame_name").decode()) for op in graph.get_operations() if op.type in FRAME_TYPES
    ]
    while stack:
        op, frame = stack.pop()
        if op.name in inside or op.type in ("Exit", "RefExit"):
            continue
        inside[op.name] = frame
        stack.extend((consumer, frame) for out in op.outputs for consumer in out.consumers())
        stack.extend((consumer, frame) for consumer in op._control_outputs)
    return inside


def _spatial_refusal(op: Any, split: OpSplit, axis: int) -> str | None:
    if op.type not in SPATIAL:
        return (
            f"splits along {split.dimension} only as convolutions, pooling, their gradients and padding"
            f" do, not as {op.type}"
        )
    if not all(tensor.shape.is_fully_defined() for tensor in (*op.inputs, *op.outputs)):
        return "needs static shapes for a spatial split"
    if op.type in PADDED:
        if op.outputs[0].shape.rank <= axis:
            return f"has no axis {axis} to split along {split.dimension} (rank {op.outputs[0].shape.rank})"
        if constant_value(op.inputs[1]) is None:
            return f"needs constant paddings to pad each piece's rows along {split.dimension}"
        geometry = window(op, axis)
        for lo, hi in piece_ranges(geometry.out, split.shares):
            (first, last), _ = forward_rows(geometry, lo, hi)
            if hi > lo and first >= last:
                return f"its rows {lo}:{hi} along {split.dimension} are all padding (no input row to read)"
    if op.type in BACKWARD_INPUT or op.type in POOL_GRADIENTS:
        geometry = window(op, axis)
        for lo, hi in piece_ranges(piece_axis_size(op, axis), split.shares):
            if hi > lo and backward_rows(geometry, lo, hi) is None:
                return (
                    f"its rows {lo}:{hi} along {split.dimension} receive no gradient (no window reads them)"
                )
    return None


def refusal(op: Any, split: OpSplit, frames: dict[str, str]) -> str | None:
    """Why the rewrite cannot run ``op`` as ``split`` says, or ``None`` when it can."""
    for device in split.devices:
        kinds = kernel_device_types(op.type, op.node_def.attr)
        try:
            kind = DeviceName.parse(device).kind
        except ValueError as error:
            return str(error)
        if kinds is not None and kind not in kinds:
            return f"has no {kind} kernel (device {device}); kernels for {sorted(kinds)}"
    if split.degree == 1 and split.dimension in (None, REPLICA):
        return None
    if split.dimension == REPLICA:
        return None if can_replicate(op.type) else "cannot run as replicas"
    rules = op_rules(op.type, op_split_attrs(op))
    if split.dimension not in rules:
        return f"cannot split along {split.dimension!r}; it splits along {sorted(rules) or 'nothing'}"
    if op.name in frames:
        return (
            f"is inside the legacy while loop frame {frames[op.name]!r}: Enter, Merge, Switch, NextIteration "
            "and Exit run a loop body as one unit per iteration, which the rewrite does not cut into pieces"
        )
    if op.type == "GatherV2" and split.dimension == REDUCTION and op.get_attr("batch_dims") != 0:
        return "splits over its table's rows only without batch_dims"
    rule = rules[split.dimension]
    cut = [t for slot, t in enumerate(op.inputs) if rule.read(slot).kind in ("sharded", "halo")]
    cut += [t for slot, t in enumerate(op.outputs) if rule.write(slot).kind == "sharded"]
    if any(t.shape.rank is None for t in cut):
        return "slices a tensor of unknown rank, which the rewrite cannot cut"
    if split.dimension in (HEIGHT, WIDTH):
        reason = _spatial_refusal(op, split, 1 if split.dimension == HEIGHT else 2)
        if reason is not None:
            return reason
    if sums_partials(op, rule):
        return None  # runs whole on the partial sums' total (keeps_whole)
    _, size = dimension(op, rule)
    if size is None:
        return f"its {split.dimension} dimension has no static size (build the graph with a fixed batch)"
    sizes = sliced_sizes(op, rule)
    multiples = op.type in CHANNEL_MULTIPLIED and all(s is not None and s % size == 0 for s in sizes)
    if not any(layout.kind == "halo" for layout in rule.reads) and len(set(sizes)) > 1 and not multiples:
        return f"the inputs it slices differ in their {split.dimension} size {sizes}"
    if split.degree > size:
        return f"degree {split.degree} exceeds its {split.dimension} dimension of {size}"
    if min(hi - lo for lo, hi in piece_ranges(size, split.shares)) < 1:
        return f"shares {split.shares} leave a piece of its {split.dimension} dimension of {size} empty"
    if op.type in SHAPE_INPUT and not op.outputs[0].shape[1:].is_fully_defined():
        return "needs a static output shape to give each piece its own"
    if op.type == "GatherV2" and split.dimension == REDUCTION and not op.inputs[1].shape.is_fully_defined():
        return "needs its indices' static shape to mask the rows each piece's shard holds"
    return None


def sums_partials(op: Any, rule: SplitRule) -> bool:
    """Whether ``op`` under ``rule`` reads partial sums and slices nothing (it passes a sum on)."""
    reads = [rule.read(slot).kind for slot in range(len(op.inputs))]
    writes = [rule.write(slot).kind for slot in range(len(op.outputs))]
    return "partial" in reads and not {"sharded", "halo"} & {*reads, *writes}


def keeps_whole(op: Any, split: OpSplit) -> str | None:
    """Why the rewrite runs a split op whole on its first device, or ``None`` when it splits it."""
    if split.dimension == REDUCTION and sums_partials(op, op_rules(op.type, op_split_attrs(op))[REDUCTION]):
        return "reads partial sums only (a data-parallel plan's gradient passed on): runs on their total"
    if op.type in FED_WHOLE:
        return "a fed tensor is fed whole under its name, on the host; each piece reading it takes its slice"
    if any(t.dtype.base_dtype.name == "resource" for t in op.inputs):
        return "reads a resource variable, which TensorFlow runs on the variable's device only"
    return None
