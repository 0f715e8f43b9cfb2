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
import: any object with the fields and the ``HasField``/``ListFields`` of ``tensorflow.RunMetadata``
works.

Forwarded buffers. An op whose output can reuse an input's buffer allocates nothing: ``Identity``,
``Reshape``, ``ExpandDims`` always share it; element-wise kernels (``Relu``, ``Mul``, ``AddV2``,
``ReluGrad``, ...) write in place when they are the input's last user; ``Split``, ``Unpack`` and a
``StridedSlice`` along the first dimension return views into it. Step stats still report such an
output with the input buffer's ``allocated_bytes``, as if it were new. What tells them apart is the
buffer's address, ``allocation_description.ptr``: an output whose ``ptr`` equals the ``ptr`` of one
of the node's inputs (the producer's record of the same step) is that input's buffer. The executor
keeps a node's inputs alive until its kernel has finished, so no new allocation can take an
input's address meanwhile; equal addresses of tensors that are not a node's inputs prove nothing,
since the allocator hands a freed address out again. A view reports the address and the sizes of
the whole buffer it lies in (its root). Checked on a traced training step of Inception V3 (CPU,
Grappler off, images of 75x75, batch 2): for each of its 4,275 nodes, the bytes the tracking
allocator saw it allocate (``memory[*].total_bytes`` minus ``memory_stats.temp_memory_size``)
equal exactly the bytes of its outputs this rule does not call an input's; 1,022 outputs were an
input's buffer, 110 MB. On a GPU the host-side record carries outputs and memory (see
:func:`_host_records`) and the rule reads it the same way; that has not been checked on a GPU
here. A ``ReadVariableOp`` returns its variable's buffer, which no input tensor has: when its
record shows no allocation (``memory`` empty; a copy-on-read would allocate), its output is taken
as the buffer of the handle it reads, whose op holds the variable as persistent memory. An input
produced by a lowered ``While``/``If`` is not matched (its runtime exit nodes do not name the
output slot they stand for): such outputs stay counted as new allocations, an upper bound.

Unset fields. A sub-message or repeated field is read only when the record has it
(:func:`set_message`, :func:`set_repeated`). Protobuf's Python runtime (upb) answers a read of an
unset one with a stub whose own arena is freed with its parent, and after every 10,000 arena blocks
freed it calls ``malloc_trim(0)``: glibc then hands every freed page of every thread's heap back to
the OS, TensorFlow's recycled tensor buffers among them, and the next steps fault them in again
(session 13: 20 reads of one small Transformer step's stats made 803 ``madvise`` calls under
``strace``, none once only set fields were read).

Times are seconds and sizes bytes.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfplace.core.costgraph import AliasedOutput

__all__ = [
    "OpTrace",
    "OutputAllocation",
    "RecvTensorRecord",
    "allocation_peaks",
    "allocation_record_changes",
    "collect_op_traces",
    "node_compute_time",
    "node_kernel_time",
    "op_name_for_node",
    "output_allocation",
    "output_shapes",
    "recv_tensor_records",
    "set_fields",
    "set_message",
    "set_repeated",
]

_FED = re.compile(r"^_arg_(.+)_(\d+)_\d+$")
_PARTITIONER_SUFFIX = re.compile(r"^_\d+$")
_FUNCTION_PREFIX = "Func/"
_TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_VARIABLE_READS = frozenset({"ReadVariableOp"})
_RECV_TENSOR = re.compile(r"^\[[^]]*\] \[[^]]*\] edge_\d+_(?P<tensor>\S+) from (?P<src>\S+) to (?P<dst>\S+)$")
_CLIENT_FEED = re.compile(r"^_recv_(.+)_\d+$")
_GPU_STREAM = re.compile(r"^(.*)/(stream:[^/]+|memcpy)$")
_DTYPE_BYTES = {
    **{code: 1 for code in (4, 6, 10, 11, 12, 24, 25, 26, 27, 28)},
    **{code: 2 for code in (5, 14, 15, 16, 17, 19)},
    **{code: 4 for code in (1, 3, 13, 22)},
    **{code: 8 for code in (2, 8, 9, 23)},
    18: 16,
}
"""Bytes per element of TensorFlow's ``DataType`` codes with a fixed size (``DT_FLOAT`` = 1, ...);
strings, resources and variants have none."""


def set_message(message: Any, name: str) -> Any:
    """Sub-message ``name`` of ``message``, or ``None`` when it is unset (module docstring: an
    unset one is never read)."""
    return getattr(message, name) if message.HasField(name) else None


def set_repeated(message: Any, name: str) -> Sequence[Any]:
    """Repeated field ``name`` of ``message``, or ``()`` when it has no elements (module
    docstring: an empty one is never read)."""
    return set_fields(message).get(name, ())


def set_fields(message: Any) -> dict[str, Any]:
    """The fields ``message`` has set, by name: sub-messages, repeated fields with elements and
    scalars other than their default (``ListFields``)."""
    return {field.name: value for field, value in message.ListFields()}


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
        Seconds, the sum over every record of the op of its kernel's time
        (:func:`node_kernel_time`), or on a GPU the kernel's time on its stream.
    output_sizes : tuple of int
        Bytes of each output slot of the op's own node (its exact name or its fed ``_Arg``),
        summed over executions; ``()`` when only generated nodes ran (a lowered ``While``), whose
        output slots the trace cannot tell apart.
    temporary_bytes : int
        Scratch memory the op's own node reported (``memory_stats.temp_memory_size``), plus the
        most bytes the nodes generated from the op (a lowered loop's body, every iteration) held
        at once: their allocation records summed in time order, as :func:`allocation_peaks` does
        for a device (an iteration frees what the next does not need). A generated node without
        allocation records adds its ``memory[*].total_bytes``. An upper bound of the memory the
        op uses while it runs.
    persistent_bytes : int
        ``memory_stats.persistent_memory_size`` minus outputs that are that persistent memory (a
        ``Const`` reports its value both ways); variables' buffers are not reported here, see
        :func:`tfplace.estimator.shapes.variable_bytes`.
    device : str
        The device that ran the op's own node, else the device that ran most of its records.
    executions : int
        How many records the op has: 1 for a plain op, one per runtime node for lowered control
        flow, one per iteration for an op inside a legacy ``while`` frame.
    aliased_outputs : tuple of (int, str, int)
        ``(slot, producer, producer_slot)``: output slots of the op's own node whose buffer is the
        input tensor ``producer:producer_slot`` (module docstring), in every record of the node;
        ``()`` unless :func:`collect_op_traces` was given the ops' inputs.
    kernel_time : float
        Seconds, the sum of :func:`node_kernel_time` over every record of the op: its kernels
        alone, what TensorFlow's executor times to tell cheap kernels from expensive ones.
    node_time : float
        Seconds, the sum of :func:`node_compute_time` over every record of the op: the kernels
        with the executor's and the tracer's handling of each node, for comparison
        (``benchmarks/op_overhead_by_model.py``).
    """

    compute_time: float
    output_sizes: tuple[int, ...]
    temporary_bytes: int
    persistent_bytes: int
    device: str
    executions: int
    aliased_outputs: tuple[AliasedOutput, ...] = ()
    kernel_time: float = 0.0
    node_time: float = 0.0


def node_compute_time(node_stats: Any) -> float:
    """Seconds one record's node took: ``all_end_rel`` (nanoseconds where TensorFlow reports them).

    ``all_end_rel`` spans the whole processing of the node by the executor: preparing inputs, the
    kernel (``op_start_rel`` .. ``op_end_rel``) and handing the outputs on, with the tracer's own
    recording of them. On a GPU's ``stream:all`` device it is the kernel's time on the GPU. Host
    records count their kernel alone (:func:`node_kernel_time`): the rest is mostly the tracer's
    bookkeeping, which an untraced step does not do and which differs from op to op (session 12:
    0.35-0.6 us on elementwise chains and 0.6-1.1 us per op of the models; by kernel times alone
    the chains and the small NMT and Tensor Holography agreed within 0.05 us per op).
    """
    nanos = int(getattr(node_stats, "all_end_rel_nanos", 0))
    if nanos > 0:
        return nanos * 1e-9
    return int(node_stats.all_end_rel_micros) * 1e-6


def node_kernel_time(node_stats: Any) -> float:
    """Seconds one record's kernel ran (``op_start_rel`` .. ``op_end_rel``, nanoseconds where
    TensorFlow reports them): the span TensorFlow's executor times (``KernelTimer`` around
    ``Compute``) to learn which kernels are cheap enough to run inline, and the time a host
    record counts in a profile. It leaves out the node's own handling that
    :func:`node_compute_time` includes (0.3-0.9 us on a CPU, more for ops of many inputs); what
    a real step spends between kernels is the calibrated per-op overhead
    (:class:`tfplace.core.device_model.CpuProcessModel`)."""
    end = int(getattr(node_stats, "op_end_rel_nanos", 0))
    if end > 0:
        return max(end - int(node_stats.op_start_rel_nanos), 0) * 1e-9
    return max(int(node_stats.op_end_rel_micros) - int(node_stats.op_start_rel_micros), 0) * 1e-6


def _op_type(node_stats: Any) -> str:
    """The op type from a ``timeline_label`` like ``"x/_1 = _Recv()"``."""
    label = str(node_stats.timeline_label)
    _, sep, call = label.partition(" = ")
    return call.split("(", 1)[0] if sep else ""


@dataclass(frozen=True)
class OutputAllocation:
    """An output's ``tensor_description.allocation_description``: zeros when it is unset."""

    requested_bytes: int = 0
    allocated_bytes: int = 0
    ptr: int = 0


def output_allocation(output: Any) -> OutputAllocation:
    """The allocation an output's record describes, read without touching unset fields."""
    description = set_message(output, "tensor_description")
    allocation = set_message(description, "allocation_description") if description is not None else None
    if allocation is None:
        return OutputAllocation()
    return OutputAllocation(
        int(allocation.requested_bytes), int(allocation.allocated_bytes), int(allocation.ptr)
    )


def _memory_stat(node: Any, name: str) -> int:
    """Field ``name`` of a record's ``memory_stats``, 0 when it has none."""
    stats = set_message(node, "memory_stats")
    return int(getattr(stats, name)) if stats is not None else 0


def _tensor_bytes(output: Any) -> int:
    """Bytes of an output: what its allocation requested, or its own size when it is a view.

    A view into a larger buffer (a ``Split`` output) reports the whole buffer's sizes; its own
    elements times their size is then smaller than the buffer's ``requested_bytes``. The request,
    not the allocated chunk: a BFC allocator (a GPU's, or the CPU's of the profiler's worker,
    :mod:`tfplace.estimator.profiling_process`) rounds chunks up to 256 bytes, which TensorFlow's
    default CPU allocator does not.
    """
    allocation = output_allocation(output)
    reported = allocation.requested_bytes or allocation.allocated_bytes
    own = _shape_bytes(set_message(output, "tensor_description"))
    return own if own is not None and own < allocation.requested_bytes else reported


def _dims(description: Any | None) -> tuple[int, ...] | None:
    """The dimensions of an output's ``TensorDescription`` (``-1`` for an unknown one), ``None``
    for an unknown rank; an unset description or shape is a scalar's."""
    shape = set_message(description, "shape") if description is not None else None
    if shape is None:
        return ()
    return None if shape.unknown_rank else tuple(int(dim.size) for dim in set_repeated(shape, "dim"))


def _shape_bytes(description: Any | None) -> int | None:
    """Elements times element size of an output's ``TensorDescription``; ``None`` when either is
    unknown."""
    size = _DTYPE_BYTES.get(int(description.dtype)) if description is not None else None
    dims = _dims(description)
    if size is None or dims is None or any(dim < 0 for dim in dims):
        return None
    return math.prod(dims) * size


def _is_preallocated(output: Any) -> bool:
    """True for a tensor the step did not allocate (a constant's value, a fed array)."""
    allocation = output_allocation(output)
    return allocation.allocated_bytes == 0 and allocation.requested_bytes > 0


@dataclass
class _Totals:
    compute_time: float = 0.0
    kernel_time: float = 0.0
    node_time: float = 0.0
    outputs: dict[int, int] = field(default_factory=dict)
    temporary_bytes: int = 0
    persistent_bytes: int = 0
    own_device: str = ""
    executions: int = 0
    records_by_device: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    own_records: int = 0
    aliases: Counter[AliasedOutput] = field(default_factory=Counter)
    generated_allocations: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class _OwnRecord:
    """A record of an op's own node, with its outputs and memory read once from its set fields."""

    node: Any
    outputs: Sequence[Any]
    memory: Sequence[Any]

    @classmethod
    def read(cls, node: Any) -> _OwnRecord:
        fields = set_fields(node)
        return cls(node, fields.get("output", ()), fields.get("memory", ()))


class _Addresses:
    """The buffer address of every tensor the step has produced so far, to find forwarded outputs.

    Records are read in the order they started; a tensor's address is its producer's latest record
    (an op inside a legacy ``while`` frame runs once per iteration).
    """

    def __init__(self, inputs: Mapping[str, Sequence[tuple[str, int]]]) -> None:
        self.inputs = inputs
        self.address: dict[tuple[str, int], int] = {}

    def aliases(self, op: str, record: _OwnRecord, first_slot: int) -> list[AliasedOutput]:
        """Output slots of ``record`` (of ``op``'s own node) whose buffer is one of its inputs'."""
        owner: dict[int, tuple[str, int]] = {}
        for tensor in self.inputs.get(op, ()):
            owner.setdefault(self.address.get(tensor, 0), tensor)
        owner.pop(0, None)  # no address: a fed array, an empty tensor
        inputs = self.inputs.get(op, ())
        if (
            inputs
            and _op_type(record.node) in _VARIABLE_READS
            and not any(m.total_bytes for m in record.memory)
        ):
            return [(first_slot + output.slot, *inputs[0]) for output in record.outputs]
        return [
            (first_slot + output.slot, *owner[address])
            for output in record.outputs
            if (address := output_allocation(output).ptr) in owner
        ]

    def record(self, op: str, record: _OwnRecord, first_slot: int) -> None:
        for output in record.outputs:
            self.address[op, first_slot + output.slot] = output_allocation(output).ptr


def _host_records(run_metadata: Any) -> Iterable[tuple[str, Any, float]]:
    """``(device, node_stats, compute_time)`` per executed node: its kernel's time
    (:func:`node_kernel_time`), GPU stream time preferred.

    A GPU step reports each kernel twice more: under ``<device>/stream:all`` (the kernel's time on
    the GPU) and under ``<device>/stream:<n>`` or ``<device>/memcpy``. The host-side record (under
    the device's own name) carries outputs and memory; the ``stream:all`` time replaces its launch
    time, and the other stream records are duplicates.
    """
    stream_time: dict[tuple[str, str], float] = defaultdict(float)
    host = []
    step_stats = set_message(run_metadata, "step_stats")
    for dev_stats in set_repeated(step_stats, "dev_stats") if step_stats is not None else ():
        stream = _GPU_STREAM.match(dev_stats.device)
        if stream is None:
            host.append(dev_stats)
        elif stream.group(2) == "stream:all":
            for node in set_repeated(dev_stats, "node_stats"):
                stream_time[stream.group(1), node.node_name] += node_compute_time(node)
    for dev_stats in host:
        for node in set_repeated(dev_stats, "node_stats"):
            time = stream_time.get((dev_stats.device, node.node_name))
            yield dev_stats.device, node, node_kernel_time(node) if time is None else time


def collect_op_traces(
    run_metadata: Any,
    graph_ops: Collection[str],
    inputs: Mapping[str, Sequence[tuple[str, int]]] | None = None,
) -> dict[str, OpTrace]:
    """Per GraphDef op, the costs one FULL_TRACE step measured, summed over its runtime nodes.

    Parameters
    ----------
    run_metadata : tensorflow.compat.v1.RunMetadata
        Filled by ``session.run(..., options=RunOptions(trace_level=FULL_TRACE), run_metadata=...)``.
    graph_ops : Collection of str
        Names of the GraphDef's ops (see :func:`op_name_for_node`).
    inputs : Mapping of str to sequence of (str, int), optional
        Each op's data inputs in order, as ``(producer, output slot)``: with them, the traces
        report which outputs are an input's buffer (:attr:`OpTrace.aliased_outputs`).

    Returns
    -------
    dict of str to OpTrace
        Only ops that have at least one record; ``_Send``/``_Recv`` records and runtime internals
        are left out.
    """
    ops = graph_ops if isinstance(graph_ops, (set, frozenset, dict)) else set(graph_ops)
    addresses = _Addresses(inputs) if inputs is not None else None
    totals: dict[str, _Totals] = {}
    for device, node, time in sorted(_host_records(run_metadata), key=_started):
        if _op_type(node) in _TRANSFER_OPS:
            continue
        op = op_name_for_node(node.node_name, ops)
        if op is None:
            continue
        total = totals.setdefault(op, _Totals())
        total.compute_time += time
        total.kernel_time += node_kernel_time(node)
        total.node_time += node_compute_time(node)
        total.executions += 1
        total.records_by_device[device] += 1
        fed = _FED.match(node.node_name)
        if node.node_name == op or fed is not None:
            total.temporary_bytes += _memory_stat(node, "temp_memory_size")
            total.own_device = device
            first_slot = int(fed.group(2)) if fed is not None else 0  # "_arg_x_1_0" stands for x:1
            record = _OwnRecord.read(node)
            _add_own_record(total, record, first_slot)
            if addresses is not None:
                total.aliases.update(addresses.aliases(op, record, first_slot))
                addresses.record(op, record, first_slot)
        else:
            for memory in set_repeated(node, "memory"):
                if set_repeated(memory, "allocation_records"):
                    total.generated_allocations.extend(allocation_record_changes(memory))
                else:
                    total.temporary_bytes += int(memory.total_bytes)
            total.persistent_bytes += _memory_stat(node, "persistent_memory_size")
    return {op: _finish(total) for op, total in totals.items()}


def _started(record: tuple[str, Any, float]) -> int:
    """Nanoseconds at which a record's node started."""
    node = record[1]
    return int(getattr(node, "all_start_nanos", 0)) or int(node.all_start_micros) * 1000


def _add_own_record(total: _Totals, record: _OwnRecord, first_slot: int) -> None:
    """Add the outputs and persistent memory of a record of the op's own node."""
    total.own_records += 1
    preallocated = 0
    for output in record.outputs:
        size = _tensor_bytes(output)
        slot = first_slot + output.slot
        total.outputs[slot] = total.outputs.get(slot, 0) + size
        preallocated += size if _is_preallocated(output) else 0
    persistent = _memory_stat(record.node, "persistent_memory_size")
    total.persistent_bytes += max(persistent - preallocated, 0)


def _finish(total: _Totals) -> OpTrace:
    outputs = total.outputs
    sizes = tuple(outputs.get(slot, 0) for slot in range(max(outputs) + 1)) if outputs else ()
    device = total.own_device or max(total.records_by_device, key=lambda d: total.records_by_device[d])
    return OpTrace(
        compute_time=total.compute_time,
        output_sizes=sizes,
        temporary_bytes=total.temporary_bytes + _peak_in_use(total.generated_allocations),
        persistent_bytes=total.persistent_bytes,
        device=device,
        executions=total.executions,
        aliased_outputs=tuple(sorted(a for a, n in total.aliases.items() if n == total.own_records)),
        kernel_time=total.kernel_time,
        node_time=total.node_time,
    )


def output_shapes(run_metadata: Any, ops: Collection[str]) -> dict[str, tuple[tuple[int, ...], ...]]:
    """The shapes of the outputs each of ``ops`` produced in a traced step, as the records report
    them (``output[i].tensor_description.shape``; ``-1`` for an unknown dimension)."""
    shapes = {}
    for _, node, _ in _host_records(run_metadata):
        op = op_name_for_node(node.node_name, ops)
        outputs = set_repeated(node, "output")
        if op is not None and outputs:
            shapes[op] = tuple(_dims(set_message(output, "tensor_description")) or () for output in outputs)
    return shapes


def allocation_peaks(run_metadata: Any) -> dict[str, int]:
    """Per device, the most bytes the step's kernels held at once, from their allocation records.

    A FULL_TRACE step records every allocation a kernel makes under its node
    (``memory[*].allocation_records``: ``alloc_bytes`` > 0 when it allocated, < 0 when the buffer
    was freed, also after the node ended, with ``alloc_micros``). Summed in time order per device
    (at equal microseconds frees first), they give the bytes in use. A buffer counts on the device
    of the node that allocated it until it is freed, wherever it was read; state allocated before
    the step (variables) and fed arrays are not in it.

    Returns
    -------
    dict of str to int
        Devices whose kernels allocated anything.
    """
    changes: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for device, node, _ in _host_records(run_metadata):
        for memory in set_repeated(node, "memory"):
            changes[device].extend(allocation_record_changes(memory))
    return {device: _peak_in_use(events) for device, events in changes.items()}


def allocation_record_changes(memory: Any) -> Iterable[tuple[int, int]]:
    """``(microseconds, bytes)`` of an allocator's records under a node: > 0 allocated, < 0 freed."""
    return ((int(r.alloc_micros), int(r.alloc_bytes)) for r in set_repeated(memory, "allocation_records"))


def _peak_in_use(changes: Iterable[tuple[int, int]]) -> int:
    """The most bytes in use when ``changes`` are applied in time order (frees first at a tie)."""
    in_use = peak = 0
    for _, nbytes in sorted(changes):
        in_use += nbytes
        peak = max(peak, in_use)
    return peak


@dataclass(frozen=True)
class RecvTensorRecord:
    """One tensor a worker fetched from another over gRPC in a traced distributed step.

    ``producer`` is the op whose output crossed (the client-fed placeholder for a fed tensor, which
    the master's worker forwards); ``start`` is when the sender began sending it, or when the
    receiver asked for it if that was later, and ``end`` when the receiver had it, both in seconds
    on the machine's clock (the workers' records share it on one machine).
    """

    producer: str
    src_device: str
    dst_device: str
    start: float
    end: float


def recv_tensor_records(run_metadata: Any) -> list[RecvTensorRecord]:
    """The ``RecvTensor`` records of a traced step, in the order the step stats list them.

    TensorFlow's gRPC worker cache logs one per tensor a worker receives from another while a
    step is traced (``node_name`` ``"RecvTensor"``), its ``timeline_label`` reading
    ``[<size>] [<rate>] edge_<id>_<producer> from <src device> to <dst device>``; a tensor the
    client fed arrives as ``_recv_<placeholder>_<slot>``. Records of another form are skipped.
    """
    records = []
    for device in set_repeated(run_metadata.step_stats, "dev_stats"):
        for node in set_repeated(device, "node_stats"):
            if node.node_name != "RecvTensor":
                continue
            label = _RECV_TENSOR.match(node.timeline_label)
            if label is None:
                continue
            tensor = label.group("tensor")
            fed = _CLIENT_FEED.match(tensor)
            start = node.all_start_micros * 1e-6
            records.append(
                RecvTensorRecord(
                    producer=fed.group(1) if fed else tensor,
                    src_device=label.group("src"),
                    dst_device=label.group("dst"),
                    start=start,
                    end=start + node.all_end_rel_micros * 1e-6,
                )
            )
    return records
