"""Run a split plan in TensorFlow: rewrite a graph so that each split op runs as pieces on their devices.

:func:`apply_split_plan` replaces every op the plan splits (:class:`~tfplace.split.plan.SplitPlan`)
by one op of the same type per piece, on the piece's device, reading its inputs in the layouts the
op's partition rule (:mod:`tfplace.split.rules`) asks for (Tofu's partition-n-reduce):

* a replicated input is the whole tensor; TensorFlow sends it to each piece's device once, however
  many pieces there read it (a weight is read by every piece's device once);
* a sharded input is the piece's range along the rule's axis: taken straight from the producer's
  piece when the producer was split alike (BBGraP: consecutive ops split the same way pass pieces on
  with no join and re-split in between), else cut by ``StridedSlice`` on the device that holds the
  tensor, so that only the slice moves (from several producer pieces when the ranges differ);
* a halo input (height or width splits of ``Conv2D`` and ``DepthwiseConv2dNative``, their
  gradients, ``MaxPool``, ``AvgPool`` and their gradients, ``Pad``) is the rows the piece's windows
  read, from the neighbouring slices too, with the window's padding made explicit
  (:mod:`tfplace.tf_graph.split_pieces`, which also shards a ``GatherV2``'s table).

A piece's output is joined only where a consumer needs the whole tensor or another split: sharded
outputs by ``ConcatV2`` along the axis, partial results (weight gradients under a batch or spatial
split, sums over a split reduction, a gather's shards) by ``AddN``. Every op of the user's graph
keeps its name: a split op's name becomes an ``Identity`` (``IdentityN`` for several outputs) of
the joined outputs, so fetches and feeds of the session code stay valid (unfetched joins are pruned
by the session).

Exactness. Pieces compute what the op computes, up to the order of float sums (a partial sum,
a ``Mean`` over a split batch weighted by each piece's share) and one rounding of SAME average
pooling's border windows. What depends on the whole batch stays exact by running whole
(:func:`~tfplace.tf_graph.split_refusal.keeps_whole`: batch norm in training mode, fed
placeholders, resource reads). A split fed placeholder runs whole on the host CPU of its first
piece's task (:func:`~tfplace.split.feeds.feed_host`), where the slices each piece reads are cut,
so that each device receives only its slice, as the plan's simulation assumes. An op the plan runs
as replicas (``"replica"``) runs once, on its first device, and every device that reads it receives
it once, which computes what replicas would.
Plans the rewrite cannot run are refused with a one-line ``ValueError`` naming the op
(:func:`~tfplace.tf_graph.split_refusal.refusal`), the user's graph untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.split.plan import OpSplit, SplitPlan
from tfplace.split.rules import BATCH, REDUCTION, REPLICA, op_rules
from tfplace.tf_graph.apply import apply_placement
from tfplace.tf_graph.importer import load_graph
from tfplace.tf_graph.split_attrs import op_split_attrs
from tfplace.tf_graph.split_refusal import frame_ops, keeps_whole, refusal
from tfplace.tf_graph.split_rewriter import Rewriter, SplitRewrite

__all__ = [
    "SplitRewrite",
    "apply_split_plan",
    "rewrite_graph_def",
    "split_graph",
    "static_graph",
    "uniform_plan",
    "with_batch_size",
    "write_graph",
]


def with_batch_size(source: Any, batch_size: int) -> Any:
    """A copy of ``source`` (``GraphDef`` or ``MetaGraphDef``) whose placeholders of unknown batch
    (first dimension ``None``) take ``batch_size``: static shapes, which a split needs to cut its
    pieces, follow when the copy is imported. The copy runs that batch size only."""
    copy = type(source)()
    copy.CopyFrom(source)
    graph_def = getattr(copy, "graph_def", copy)
    for node in graph_def.node:
        if node.op == "Placeholder" and "shape" in node.attr:
            dims = node.attr["shape"].shape.dim
            if dims and dims[0].size == -1:
                dims[0].size = batch_size
    for node in graph_def.node:
        node.attr.pop("_output_shapes", None)
    return copy


def _meta_graph(graph: Any) -> Any:
    """``graph`` with its collections as a ``MetaGraphDef`` (also while eager execution is on)."""
    import tensorflow as tf

    with graph.as_default():
        return tf.compat.v1.train.export_meta_graph(graph=graph)


def static_graph(source: Any, batch_size: int | None) -> Any:
    """``source`` as a ``tf.Graph``, its unknown batch set to ``batch_size`` when given."""
    import tensorflow as tf

    if batch_size is None:
        return load_graph(source)
    if isinstance(source, (str, os.PathLike)):
        source = load_graph(source)
    if isinstance(source, tf.Graph):
        source = _meta_graph(source)
    return load_graph(with_batch_size(source, batch_size))


def rewrite_graph_def(plan: SplitPlan, source: Any, batch_size: int | None = None) -> SplitRewrite:
    """The ``GraphDef`` of ``source`` (a ``tf.Graph``, ``GraphDef`` or ``MetaGraphDef``) with ``plan``
    applied (module docstring). Ops the plan does not name keep their device and run whole.
    ``batch_size`` fixes an unknown batch (:func:`with_batch_size`); the result runs that batch.

    Raises
    ------
    ValueError
        One line naming the first op the rewrite cannot split as the plan says.
    """
    graph = static_graph(source, batch_size)
    frames = frame_ops(graph)
    for op in graph.get_operations():
        split = plan.splits.get(op.name)
        reason = refusal(op, split, frames) if split is not None else None
        if reason is not None:
            raise ValueError(f"op {op.name!r} ({op.type}): {reason}")
    rewriter = Rewriter(graph, plan)
    whole_ops = []
    for op in graph.get_operations():  # in creation order: producers first
        split = plan.splits.get(op.name)
        if split is None or split.degree == 1 or split.dimension in (None, REPLICA):
            whole_ops.append((op, rewriter.device_of(op)))
            continue
        reason = keeps_whole(op, split)
        if reason is not None:
            rewriter.result.kept_whole[op.name] = reason
            whole_ops.append((op, rewriter.device_of(op)))
            continue
        rewriter.split(op, split, op_rules(op.type, op_split_attrs(op))[split.dimension])
    for op, device in whole_ops:
        rewriter.whole_op(op, device)
    for op_name in list(rewriter.result.pieces):
        rewriter.named_join(graph.get_operation_by_name(op_name), plan.splits[op_name].devices[0])
    return rewriter.result


def apply_split_plan(plan: SplitPlan, target: Any, batch_size: int | None = None) -> Any:
    """Rewrite ``target`` to run ``plan``; the user's graph is never changed.

    Parameters
    ----------
    plan : SplitPlan
    target : tf.Graph, GraphDef or MetaGraphDef
    batch_size : int, optional
        The batch the plan was made for, when the graph's placeholders leave it unknown.

    Returns
    -------
    A new object of the same kind: a ``tf.Graph`` (with the original's collections, so its
    initializers and ``train_op`` are found as before), a ``GraphDef`` or a ``MetaGraphDef``.
    """
    import tensorflow as tf

    if isinstance(target, tf.Graph):
        return split_graph(plan, target, batch_size)[0]
    if not isinstance(target, (tf.compat.v1.GraphDef, tf.compat.v1.MetaGraphDef)):
        raise TypeError(
            f"cannot rewrite a {type(target).__name__}: give a tf.Graph, GraphDef or MetaGraphDef"
        )
    rewritten = rewrite_graph_def(plan, target, batch_size).graph_def
    if isinstance(target, tf.compat.v1.GraphDef):
        return rewritten
    meta = tf.compat.v1.MetaGraphDef()
    meta.CopyFrom(target)
    meta.graph_def.CopyFrom(rewritten)
    return meta


def split_graph(plan: SplitPlan, graph: Any, batch_size: int | None = None) -> tuple[Any, SplitRewrite]:
    """A new ``tf.Graph`` running ``plan`` on ``graph`` (with its collections: variables, ``train_op``,
    so initializers and fetches are found as before), and the :class:`SplitRewrite` it came from."""

    meta = _meta_graph(graph)
    rewrite = rewrite_graph_def(plan, meta, batch_size)
    meta.graph_def.CopyFrom(rewrite.graph_def)
    return load_graph(meta), rewrite


def write_graph(plan: Placement | SplitPlan, target: Any) -> Any:
    """The graph writer :mod:`tfplace` registers: a split plan (or a placement made from one) is
    rewritten into its pieces (:func:`apply_split_plan` at the plan's ``batch_size``); a placement
    of whole ops is written by :func:`~tfplace.tf_graph.apply.apply_placement`."""
    if isinstance(plan, Placement) and plan.split_plan is not None:
        plan = plan.split_plan
    if isinstance(plan, SplitPlan):
        return apply_split_plan(plan, target, plan.batch_size)
    return apply_placement(plan, target)


def uniform_plan(
    graph: Any,
    devices: Sequence[str],
    dimension: str,
    *,
    ops: Mapping[str, str] | None = None,
    shares: Sequence[float] | None = None,
    batch_size: int | None = None,
) -> SplitPlan:
    """A forced plan: every op of ``graph`` the rewrite can split along ``dimension`` split over all
    ``devices``, every other op whole on the first device.

    Along ``"batch"``, only ops that process examples split (data parallelism): a placeholder's
    outputs carry examples, and so do the outputs of an op that reads them, except a partial sum
    over the batch. An op whose rules sum over the batch instead (a dense layer's weight gradient
    ``a^T @ dy``, a loss summed or averaged over the batch) splits along its ``"reduction"``.
    ``ops`` names the ops to split instead (op -> dimension), every other op whole.
    """
    names = tuple(devices)
    device_set = DeviceSet.parse(list(names), "1TB")
    share = tuple(shares) if shares is not None else (1.0 / len(names),) * len(names)
    tf_graph = static_graph(graph, batch_size)
    frames = frame_ops(tf_graph)
    splits: dict[str, OpSplit] = {}
    examples: set[str] = set()
    for op in tf_graph.get_operations():
        wanted = (ops or {}).get(op.name, dimension if ops is None else None)
        carries = op.type == "Placeholder" or any(t.name in examples for t in op.inputs)
        if wanted == BATCH and ops is None and not carries:
            wanted = None
        splits[op.name] = OpSplit.whole(names[0])
        for candidate in [wanted, REDUCTION] if wanted == BATCH else [wanted] if wanted else []:
            split = OpSplit(names, candidate, share)
            rules = op_rules(op.type, op_split_attrs(op))
            if candidate == REDUCTION and (
                candidate not in rules
                or {lay.axis for lay in rules[candidate].reads if lay.kind == "sharded"} != {0}
            ):
                continue
            if len(names) > 1 and refusal(op, split, frames) is None and keeps_whole(op, split) is None:
                splits[op.name] = split
                break
        if carries:
            rule = op_rules(op.type, op_split_attrs(op)).get(splits[op.name].dimension or "")
            examples.update(
                t.name
                for slot, t in enumerate(op.outputs)
                if rule is None or rule.write(slot).kind != "partial"
            )
    return SplitPlan(splits, device_set, placer=f"uniform-{dimension}", batch_size=batch_size)
