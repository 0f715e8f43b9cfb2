"""Per-op costs read from TensorFlow's FULL_TRACE step stats (``RunMetadata.step_stats``).

A traced step reports one record per node the executor ran, and those nodes are not exactly the
GraphDef's ops. TensorFlow adds nodes at run time and names them after the op they came from:

- lowered functional control flow (control flow v2): a ``While`` op named ``while`` runs as
  ``while/enter/_264``, ``while/merge/_269``, ``while/body/_261/add_0``,
  ``while/next_iteration/_290``, ..., once per iteration; an ``If`` named ``cond`` runs as
  ``cond/switch_pred/_298``, ``cond/then/_296/mul_0``, ``cond/output/_302``; the identities that
  pass arguments into an inlined body are ``Func/rnn/while/body/_1/input/_384``;
- fed tensors: the executor replaces a fed ``x:0`` by an ``_Arg`` node ``_arg_x_0_<index>``;
- the graph partitioner's ``_Send`` / ``_Recv`` pair for a tensor of ``x`` crossing devices:
  ``x/_0`` and ``x/_1``;
- optimizer rewrites: a constant replicated per device (``mul/y/replicate/_1``), a folded
  constant (``x/_0__cf__0``), new nodes (``ConstantFolding/...``);
- executor internals: ``_SOURCE``, ``_SINK``, ``_retval_...``.

:func:`op_name_for_node` maps a runtime name back to its GraphDef op (or ``None``) and
:func:`collect_op_traces` sums the records of every op. Reading the protos needs no TensorFlow
import: any object with the fields of ``tensorflow.RunMetadata`` works.

Times are seconds and sizes bytes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpTrace", "collect_op_traces", "node_compute_time", "op_name_for_node"]

_FED = re.compile(r"^_arg_(.+)_(\d+)_\d+$")
_PARTITIONER_SUFFIX = re.compile(r"^_\d+$")
_FUNCTION_PREFIX = "Func/"
_TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_GPU_STREAM = re.compile(r"^(.*)/(stream:[^/]+|memcpy)$")


def op_name_for_node(node_name: str, graph_ops: Collection[str]) -> str | None:
    """The GraphDef op a step-stats node belongs to, or ``None`` for runtime internals.

    Rules, in order:

    1. a name that is an op of ``graph_ops`` is that op;
    2. ``_arg_<op>_<slot>_<index>`` (a fed tensor) is ``<op>``;
    3. a leading ``Func/`` (argument identities of an inlined function body) is dropped;
    4. otherwise the longest ``/``-delimited prefix that is an op is the op the node was generated
       from (a lowered ``While``/``If``, a replicated or folded constant), except when the rest of
       the name is a single ``_<N>``: that is the partitioner's ``_Send``/``_Recv`` for one of the
       op's tensors, which is a transfer, not part of the op;
    5. anything else (``_SOURCE``, ``_SINK``, ``_retval_*``, ``ConstantFolding/...``) is ``None``.

    Parameters
    ----------
    node_name : str
        ``NodeExecStats.node_name`` of one record.
    graph_ops : Collection of str
        Names of the GraphDef's ops; a ``set`` makes the look-ups fast.

    Returns
    -------
    str or None

    Examples
    --------
    >>> ops = {"while", "cond", "x", "gradients/while_grad/while_grad"}
    >>> op_name_for_node("while/body/_1/add_0", ops)
    'while'
    >>> op_name_for_node("gradients/while_grad/while_grad/merge/_51", ops)
    'gradients/while_grad/while_grad'
    >>> op_name_for_node("_arg_x_0_1", ops), op_name_for_node("x/_3", ops), op_name_for_node("_SOURCE", ops)
    ('x', None, None)
    """
    if node_name in graph_ops:
        return node_name
    fed = _FED.match(node_name)
    if fed and fed.group(1) in graph_ops:
        return fed.group(1)
    name = node_name.removeprefix(_FUNCTION_PREFIX)
    parts = name.split("/")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = "/".join(parts[:cut])
        if prefix in graph_ops:
            rest = parts[cut:]
            if len(rest) == 1 and _PARTITIONER_SUFFIX.match(rest[0]):
                return None
            return prefix
    return None


@dataclass(frozen=True)
class OpTrace:
    """What one traced step measured for one GraphDef op, summed over its runtime nodes.

    Attributes
    ----------
    compute_time : float
        Seconds, the sum of :func:`node_compute_time` over every record of the op.
    output_sizes : tuple of int
        Bytes of each output slot of the op's own node (its exact name or its fed ``_Arg``),
        summed over executions; ``()`` when only generated nodes ran (a lowered ``While``), whose
        output slots the trace cannot tell apart.
    temporary_bytes : int
        Scratch memory the kernels reported (``memory_stats.temp_memory_size``), plus every tensor
        that nodes generated from the op allocated (a lowered loop's body): an upper bound of the
        memory the op uses while it runs.
    persistent_bytes : int
        ``memory_stats.persistent_memory_size`` minus outputs that are that persistent memory (a
        ``Const`` reports its value both ways); variables' buffers are not reported here, see
        :func:`tfplace.estimator.shapes.variable_bytes`.
    device : str
        The device that ran the op's own node, else the device that ran most of its records.
    executions : int
        How many records the op has: 1 for a plain op, one per runtime node for lowered control
        flow, one per iteration for an op inside a legacy ``while`` frame.
    """

    compute_time: float
    output_sizes: tuple[int, ...]
    temporary_bytes: int
    persistent_bytes: int
    device: str
    executions: int


def node_compute_time(node_stats: Any) -> float:
    """Seconds one record took: ``all_end_rel`` (nanoseconds where TensorFlow reports them).

    ``all_end_rel`` spans the whole processing of the node by the executor: preparing inputs, the
    kernel (``op_start_rel`` .. ``op_end_rel``) and handing the outputs on. The executor thread is
    busy for all of it, so it is the time the node keeps a device from running another one; the
    kernel alone misses a per-node overhead of about 1-3 us, which adds up over the thousands of
    small ops of a training graph. Measured with one inter-op thread on a small CNN training step:
    the per-node sums were 10.65 ms (kernels) and 10.88 ms (``all_end_rel``) against 11.43 ms of
    untraced wall time per step.
    """
    nanos = int(getattr(node_stats, "all_end_rel_nanos", 0))
    if nanos > 0:
        return nanos * 1e-9
    return int(node_stats.all_end_rel_micros) * 1e-6


def _op_type(node_stats: Any) -> str:
    """The op type from a ``timeline_label`` like ``"x/_1 = _Recv()"``."""
    label = str(node_stats.timeline_label)
    _, sep, call = label.partition(" = ")
    return call.split("(", 1)[0] if sep else ""


def _tensor_bytes(output: Any) -> int:
    allocation = output.tensor_description.allocation_description
    return int(allocation.allocated_bytes or allocation.requested_bytes)


def _is_preallocated(output: Any) -> bool:
    """True for a tensor the step did not allocate (a constant's value, a fed array)."""
    allocation = output.tensor_description.allocation_description
    return allocation.allocated_bytes == 0 and allocation.requested_bytes > 0


@dataclass
class _Totals:
    compute_time: float = 0.0
    outputs: dict[int, int] = field(default_factory=dict)
    temporary_bytes: int = 0
    persistent_bytes: int = 0
    own_device: str = ""
    executions: int = 0
    records_by_device: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _host_records(run_metadata: Any) -> Iterable[tuple[str, Any, float]]:
    """``(device, node_stats, compute_time)`` per executed node, GPU stream time preferred.

    A GPU step reports each kernel twice more: under ``<device>/stream:all`` (the kernel's time on
    the GPU) and under ``<device>/stream:<n>`` or ``<device>/memcpy``. The host-side record (under
    the device's own name) carries outputs and memory; the ``stream:all`` time replaces its launch
    time, and the other stream records are duplicates.
    """
    stream_time: dict[tuple[str, str], float] = defaultdict(float)
    host = []
    for dev_stats in run_metadata.step_stats.dev_stats:
        stream = _GPU_STREAM.match(dev_stats.device)
        if stream is None:
            host.append(dev_stats)
        elif stream.group(2) == "stream:all":
            for node in dev_stats.node_stats:
                stream_time[stream.group(1), node.node_name] += node_compute_time(node)
    for dev_stats in host:
        for node in dev_stats.node_stats:
            time = stream_time.get((dev_stats.device, node.node_name))
            yield dev_stats.device, node, node_compute_time(node) if time is None else time


def collect_op_traces(run_metadata: Any, graph_ops: Collection[str]) -> dict[str, OpTrace]:
    """Per GraphDef op, the costs one FULL_TRACE step measured, summed over its runtime nodes.

    Parameters
    ----------
    run_metadata : tensorflow.compat.v1.RunMetadata
        Filled by ``session.run(..., options=RunOptions(trace_level=FULL_TRACE), run_metadata=...)``.
    graph_ops : Collection of str
        Names of the GraphDef's ops (see :func:`op_name_for_node`).

    Returns
    -------
    dict of str to OpTrace
        Only ops that have at least one record; ``_Send``/``_Recv`` records and runtime internals
        are left out.
    """
    ops = graph_ops if isinstance(graph_ops, (set, frozenset, dict)) else set(graph_ops)
    totals: dict[str, _Totals] = {}
    for device, node, time in _host_records(run_metadata):
        if _op_type(node) in _TRANSFER_OPS:
            continue
        op = op_name_for_node(node.node_name, ops)
        if op is None:
            continue
        total = totals.setdefault(op, _Totals())
        total.compute_time += time
        total.executions += 1
        total.records_by_device[device] += 1
        total.temporary_bytes += int(node.memory_stats.temp_memory_size)
        fed = _FED.match(node.node_name)
        if node.node_name == op or fed is not None:
            total.own_device = device
            first_slot = int(fed.group(2)) if fed is not None else 0  # "_arg_x_1_0" stands for x:1
            preallocated = 0
            for output in node.output:
                size = _tensor_bytes(output)
                slot = first_slot + output.slot
                total.outputs[slot] = total.outputs.get(slot, 0) + size
                preallocated += size if _is_preallocated(output) else 0
            persistent = int(node.memory_stats.persistent_memory_size)
            total.persistent_bytes += max(persistent - preallocated, 0)
        else:
            total.temporary_bytes += sum(_tensor_bytes(o) for o in node.output if not _is_preallocated(o))
            total.persistent_bytes += int(node.memory_stats.persistent_memory_size)
    return {op: _finish(total) for op, total in totals.items()}


def _finish(total: _Totals) -> OpTrace:
    outputs = total.outputs
    sizes = tuple(outputs.get(slot, 0) for slot in range(max(outputs) + 1)) if outputs else ()
    device = total.own_device or max(total.records_by_device, key=lambda d: total.records_by_device[d])
    return OpTrace(
        compute_time=total.compute_time,
        output_sizes=sizes,
        temporary_bytes=total.temporary_bytes,
        persistent_bytes=total.persistent_bytes,
        device=device,
        executions=total.executions,
    )
