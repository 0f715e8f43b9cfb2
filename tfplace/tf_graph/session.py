"""Run training steps in-process on virtual CPU devices, and check where each op ran.

One process can hold several TensorFlow CPU devices (``ConfigProto(device_count={"CPU": n})`` gives
``/device:CPU:0`` .. ``/device:CPU:n-1``), which is enough to prove that a placement is accepted,
that the placed graph computes what the unplaced one does, and that every op ran where the
placement said. Transfers between these devices are pointer hand-offs, so their timings say
nothing about real links (use :class:`~tfplace.tf_graph.cluster.LocalCluster` for that).

Where an op ran comes from FULL_TRACE step stats. Their node names are not all GraphDef ops: a
lowered functional ``While`` runs as ``while/body/_1/add_0``, ``while/next_iteration/_36``, ...; the
partitioner adds ``_Send`` / ``_Recv`` pairs; the executor adds ``_SOURCE``. Records are mapped back
to GraphDef ops by :func:`tfplace.tf_graph.step_stats.op_name_for_node`, and transfers and
internals are skipped.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfplace.core.devices import DeviceName
from tfplace.core.placement import Placement
from tfplace.tf_graph.step_stats import op_name_for_node

__all__ = [
    "StepResults",
    "default_initializers",
    "device_mismatches",
    "executed_devices",
    "run_steps",
    "virtual_cpu_config",
]

_TRANSFER_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")

#: Records that copy an op's value rather than run the op where it was placed: a fed placeholder
#: becomes an ``_Arg`` on the client's device (``_arg_labels_0_1``), and Grappler replicates a
#: small constant onto every device that consumes it (``Adam/beta1/replicate/_3``).
_COPIES = re.compile(r"^_arg_|/replicate/_\d+$")

#: ``body/_<n>/<node>`` (after the op's name): a node inlined from a function body of a lowered
#: ``While`` (``body``, ``cond``), ``If`` (``then``, ``else``) or ``Case`` (``branch<k>``).
_FUNCTION_BODY = re.compile(r"^(body|cond|then|else|branch\d*)/_\d+/.")


def virtual_cpu_config(
    n: int,
    *,
    inter_op_threads: int | None = None,
    intra_op_threads: int | None = None,
    remapping: bool = False,
) -> Any:
    """A ``ConfigProto`` with ``n`` CPU devices and soft placement off (a misplaced op is an error).

    Parameters
    ----------
    n : int
        Number of virtual CPUs, ``/device:CPU:0`` .. ``/device:CPU:{n-1}``.
    inter_op_threads, intra_op_threads : int, optional
        Thread pool sizes; ``None`` lets TensorFlow choose.
    remapping : bool
        Grappler's remapper fuses op patterns into one kernel *across devices*: a ``BiasAdd`` placed
        on ``CPU:1`` after a ``MatMul`` on ``CPU:0`` runs, fused with it, on ``CPU:0``. It is off
        by default, so that every op runs where the placement put it; the other Grappler passes
        stay on.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    if n < 1:
        raise ValueError(f"a session needs at least one CPU device, got {n}")
    config = tf.compat.v1.ConfigProto(device_count={"CPU": n}, allow_soft_placement=False)
    if not remapping:
        config.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
    if inter_op_threads is not None:
        config.inter_op_parallelism_threads = inter_op_threads
    if intra_op_threads is not None:
        config.intra_op_parallelism_threads = intra_op_threads
    return config


@dataclass
class StepResults:
    """What :func:`run_steps` returns.

    Attributes
    ----------
    values : list
        The fetched values of each step (numpy arrays, in the structure of ``fetches``).
    run_metadata : list of RunMetadata
        One per traced step (the last ``trace_steps`` steps), with FULL_TRACE step stats.
    final_values : object
        The values of ``final_fetches`` after the last step (the trained weights, say), or ``None``.
    """

    values: list[Any] = field(default_factory=list)
    run_metadata: list[Any] = field(default_factory=list)
    final_values: Any = None


def default_initializers(graph: Any) -> list[Any]:
    """The ops that initialize ``graph``: every global and local variable's initializer and the
    ``table_initializer`` collection. Nothing is added to the graph."""
    import tensorflow as tf

    keys = tf.compat.v1.GraphKeys
    variables = graph.get_collection(keys.GLOBAL_VARIABLES) + graph.get_collection(keys.LOCAL_VARIABLES)
    return [v.initializer for v in variables] + graph.get_collection(keys.TABLE_INITIALIZERS)


def run_steps(
    graph: Any,
    fetches: Any,
    feed_fn: Callable[[], Mapping[Any, Any]] | None,
    steps: int,
    config: Any,
    *,
    trace_steps: int = 0,
    init_op: Any = None,
    final_fetches: Any = None,
) -> StepResults:
    """Initialize ``graph`` in a new v1 ``Session`` and run ``fetches`` ``steps`` times.

    Parameters
    ----------
    graph : tf.Graph
    fetches : anything ``Session.run`` fetches (ops, tensors, names, lists of them)
    feed_fn : callable or None
        Called once per step; returns the feed dict (``{"x:0": array}``, ...). ``None`` feeds nothing.
    steps : int
    config : ConfigProto
        For example :func:`virtual_cpu_config`.
    trace_steps : int
        How many of the last steps run with ``RunOptions(trace_level=FULL_TRACE)``.
    init_op : op or list of ops, optional
        Run once before the steps; default :func:`default_initializers`.
    final_fetches : optional
        Fetched once after the last step, without feeds (weights are read there, not during a
        step, where a read and the update that changes the weight may run in either order).

    Returns
    -------
    StepResults
    """
    import tensorflow as tf

    if not 0 <= trace_steps <= steps:
        raise ValueError(f"trace_steps must be between 0 and steps={steps}, got {trace_steps}")
    results = StepResults()
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(init_op if init_op is not None else default_initializers(graph))
        for step in range(steps):
            feeds = dict(feed_fn()) if feed_fn is not None else None
            if step >= steps - trace_steps:
                metadata = tf.compat.v1.RunMetadata()
                results.values.append(session.run(fetches, feeds, options=trace, run_metadata=metadata))
                results.run_metadata.append(metadata)
            else:
                results.values.append(session.run(fetches, feeds))
        if final_fetches is not None:
            results.final_values = session.run(final_fetches)
    return results


def _is_transfer(node_stats: Any) -> bool:
    """A ``_Send`` / ``_Recv`` record (its ``timeline_label`` reads ``"x/_1 = _Recv()"``)."""
    _, _, call = str(node_stats.timeline_label).partition(" = ")
    return call.startswith(tuple(f"{op}(" for op in _TRANSFER_OPS))


_OWN, _BODY, _PLUMBING = "own", "body", "plumbing"


def _record_kind(node_name: str, op: str) -> str:
    """Whether a record is the op's own node, a node of its inlined function bodies
    (``while/body/_1/add_0``, ``cond/then/_0/mul``), or control-flow plumbing of a lowered
    ``While`` / ``If`` (``while/enter/_4``, ``while/merge/_9``, ``Func/while/body/_1/input/_35``)."""
    if node_name == op:
        return _OWN
    if node_name.startswith("Func/"):
        return _PLUMBING
    return _BODY if _FUNCTION_BODY.match(node_name[len(op) + 1 :]) else _PLUMBING


def _op_records(run_metadata: Any, graph_ops: Collection[str]) -> Iterator[tuple[str, str, str]]:
    """``(op, device, record kind)`` per step-stats record of a GraphDef op, without transfers and
    copies (see :data:`_COPIES`)."""
    ops = graph_ops if isinstance(graph_ops, (set, frozenset, dict)) else set(graph_ops)
    for dev_stats in run_metadata.step_stats.dev_stats:
        for node in dev_stats.node_stats:
            if _is_transfer(node) or _COPIES.search(node.node_name):
                continue
            op = op_name_for_node(node.node_name, ops)
            if op is not None:
                yield op, dev_stats.device, _record_kind(node.node_name, op)


def executed_devices(run_metadata: Any, graph_ops: Collection[str]) -> dict[str, str]:
    """The device each GraphDef op ran on in a traced step.

    Parameters
    ----------
    run_metadata : RunMetadata
        From a FULL_TRACE run.
    graph_ops : collection of str
        The GraphDef's op names, to map runtime names back (``while/body/_1/add_0`` -> ``while``).

    Returns
    -------
    dict of str to str
        Op -> device as step stats spell it (``/job:localhost/replica:0/task:0/device:CPU:1``): the
        device of the op's own node; for an op that only ran as generated nodes (a lowered
        ``While``), the device most nodes of its function bodies ran on, else most of its
        control-flow plumbing. Ops without records (pruned, folded into constants, fed, not in the
        step) are absent.
    """
    counts: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for op, device, kind in _op_records(run_metadata, graph_ops):
        counts[op][kind][device] += 1
    return {
        op: next(by_kind[kind] for kind in (_OWN, _BODY, _PLUMBING) if by_kind[kind]).most_common(1)[0][0]
        for op, by_kind in counts.items()
    }


def device_mismatches(run_metadata: Any, placement: Placement) -> list[tuple[str, str, str]]:
    """Ops that ran somewhere else than ``placement`` put them, from a FULL_TRACE step.

    Every record of an op's own node and of its function bodies counts, so a lowered ``While``
    whose body ran partly elsewhere is reported. Not counted: the plumbing TensorFlow generates
    when it lowers a ``While`` / ``If`` (``Enter``, ``Merge``, ``Switch``, argument identities),
    which it places next to each loop variable's producer or consumer, not where the op was
    placed; feeds; and constants Grappler replicates onto their consumers' devices. Names are
    compared canonically (``/device:CPU:1`` equals ``/job:localhost/replica:0/task:0/device:CPU:1``).

    Returns
    -------
    list of (op, placed device, device it ran on)
        Sorted; empty when everything ran where it was placed. Ops the placement does not know
        are ignored.
    """
    assignment = placement.assignment
    ran: dict[str, set[str]] = defaultdict(set)
    for op, device, kind in _op_records(run_metadata, assignment):
        if kind != _PLUMBING:
            ran[op].add(device)
    return sorted(
        (op, assignment[op], device)
        for op, devices in ran.items()
        for device in devices
        if not _same_device(assignment[op], device)
    )


def _same_device(a: str, b: str) -> bool:
    return DeviceName.parse(a) == DeviceName.parse(b)
