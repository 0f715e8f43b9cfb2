"""The hard constraints TensorFlow's placer puts on a graph: co-location groups and kernel availability.

A placement that keeps every group found here on one device, and every op on a device type it has
a kernel for, is accepted by a session with ``allow_soft_placement=False``, and its ops run where it
says (TensorFlow moves nothing behind its back). The rules were checked on TensorFlow 2.21 by
placing small graphs on two virtual CPUs and reading FULL_TRACE step stats.

Co-location (:func:`colocation_groups`), merged transitively (an op in two groups joins them):

1. ``_class`` attributes: an op with ``loc:@name`` shares a group with the op ``name``.
2. Resource and reference edges: a data edge into an input the consumer declares ``DT_RESOURCE``
   or a reference type puts producer and consumer in one group. TensorFlow goes further than
   refusing to split them: a ``ReadVariableOp`` asked to run on ``CPU:1`` whose variable is on
   ``CPU:0`` silently runs on ``CPU:0``, also with ``allow_soft_placement=False``, and so does an
   ``Identity`` of the handle and everything reading through it.

   TensorFlow exempts some consumers from this rule (functional control flow, function calls,
   ``IdentityN``); tfplace does not, for what was observed at run time: a functional ``While`` or
   ``If`` is lowered to ``Enter``/``Switch`` frames *before* placement, and the lowered nodes that
   carry the handle (and the body's reads) run on the variable's device whatever the ``While``'s
   device; a function call runs its body's reads on the variable's device; and a
   ``ReadVariableOp`` behind an ``IdentityN`` placed away from the variable fails at run time
   ("Trying to access resource v located in device CPU:0 from device CPU:1"). Keeping such ops
   with their resources makes the placement say what TensorFlow does, at the price of some
   freedom (an RNN's ``While`` stays with the weights it reads).
3. Dataset pipelines: a ``DT_VARIANT`` edge between two dataset ops (the rule TensorFlow keeps for
   ``tf.data``).
4. Legacy control flow (v1 ``while_loop`` and ``cond``): a ``Switch`` runs on the device of the
   producer of its data input, an ``Exit`` on its ``Switch``'s, a ``NextIteration`` on its
   ``Merge``'s, an ``Enter`` on its first data consumer's (in graph order). TensorFlow moves them
   there whatever their requested device, again without an error (an ``Exit`` even leaves its
   ``_class`` group for it). Found by comparing random placements of small loops and conds with
   step stats: a ``Switch`` fed by a ``Square`` always ran with the ``Square``, a loop-invariant
   ``Enter`` feeding ``B``, ``A`` and ``C`` (created in that order) always ran with ``B``; ``Merge``,
   ``LoopCond`` and the ``Identity`` after a ``Switch`` ran where placed.

Device kinds (:func:`op_device_kinds`): the device types with a registered kernel that accepts
the op's type attributes, from TensorFlow's kernel registry; ``None`` (any device) when a kernel
is registered for ``DEFAULT`` or no kernel at all is registered (a call of a library function).
The registry of the ``tensorflow-cpu`` 2.21 wheel lists the GPU kernels too; a build whose
registry has no GPU kernel at all says nothing about GPUs, and then :data:`CPU_ONLY_OP_TYPES`
decides. In both cases an op with a ``DT_STRING`` input or output runs on CPUs only. A group's
kinds are the intersection of its members' (:func:`group_device_kinds`).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from networkx.utils import UnionFind

__all__ = [
    "CPU_ONLY_OP_TYPES",
    "ConstraintError",
    "colocation_groups",
    "group_device_kinds",
    "kernel_device_types",
    "op_device_kinds",
]


class ConstraintError(ValueError):
    """A graph's constraints cannot be met by any placement: the message names the ops."""


#: Op types without a GPU kernel, used when the kernel registry knows no GPU kernel at all.
#: String processing and parsing, image decoding, summaries, ``tf.data`` datasets, Python
#: functions, checkpoints and files, readers, lookup tables: each one is registered for
#: ``CPU`` only in the registry of the ``tensorflow-cpu`` 2.21 wheel, which does list GPU kernels
#: (``tests/test_tf_import.py`` checks that).
CPU_ONLY_OP_TYPES: frozenset[str] = frozenset(
    {
        # strings, parsing, decoding
        "AsString", "DecodeBase64", "DecodeCSV", "DecodeJpeg", "DecodePng", "DecodeRaw",
        "EncodeBase64", "EncodeJpeg", "EncodePng", "ParseExample", "ParseExampleV2",
        "ParseSingleExample", "ParseSequenceExample", "ReduceJoin", "RegexFullMatch",
        "RegexReplace", "StringFormat", "StringJoin", "StringLength", "StringLower", "StringSplit",
        "StringSplitV2", "StringStrip", "StringToHashBucket", "StringToHashBucketFast",
        "StringToNumber", "StringUpper", "Substr", "UnicodeDecode", "UnicodeEncode",
        # summaries
        "AudioSummary", "AudioSummaryV2", "HistogramSummary", "ImageSummary", "MergeSummary",
        "ScalarSummary", "TensorSummary", "TensorSummaryV2", "WriteAudioSummary",
        "WriteHistogramSummary", "WriteImageSummary", "WriteScalarSummary", "WriteSummary",
        # tf.data datasets and TF1 iterators
        "BatchDatasetV2", "CacheDatasetV2", "FilterDataset", "FlatMapDataset", "MapDataset",
        "PaddedBatchDatasetV2", "ParallelInterleaveDatasetV4", "ParallelMapDatasetV2",
        "RangeDataset", "RepeatDataset", "ShuffleDatasetV3", "SkipDataset", "TakeDataset",
        "TensorDataset", "TensorSliceDataset", "TFRecordDatasetV2", "ZipDataset",
        "Iterator", "IteratorFromStringHandle", "OneShotIterator",
        # Python functions, printing
        "PyFunc", "PyFuncStateless", "Print", "PrintV2",
        # checkpoints and files
        "MatchingFiles", "MergeV2Checkpoints", "ReadFile", "Restore", "RestoreSlice", "RestoreV2",
        "Save", "SaveSlices", "SaveV2", "ShardedFilename", "ShardedFilespec", "WriteFile",
        # readers, lookup tables, shuffling
        "ReaderReadV2", "TFRecordReaderV2", "TextLineReaderV2", "WholeFileReaderV2",
        "HashTableV2", "InitializeTableV2", "LookupTableFindV2", "LookupTableImportV2",
        "MutableHashTableV2", "RandomShuffle",
    }
)  # fmt: skip

_DATASET_OP = re.compile(r"(Dataset|DatasetV\d+|DatasetFromGraph)$")
_ENTER = frozenset({"Enter", "RefEnter"})
_MOVED_TO_CONSUMER = frozenset({"NextIteration", "RefNextIteration"})
_MOVED_TO_PRODUCER = frozenset({"Exit", "RefExit", "Switch", "RefSwitch"})
_ANY = "DEFAULT"
#: XLA's compilation-only device types (``XLA_CPU_JIT``), registered once XLA loads: no device
#: has them, so they are left out.
_JIT = "_JIT"


def _is_dataset_op(op: Any) -> bool:
    """TensorFlow's test: one ``DT_VARIANT`` output and a name ending in ``Dataset`` / ``DatasetV<n>``."""
    import tensorflow as tf

    outputs = op.outputs
    return len(outputs) == 1 and outputs[0].dtype == tf.variant and bool(_DATASET_OP.search(op.type))


def _needs_colocation(consumer: Any, index: int, producer: Any) -> bool:
    """Whether the data edge into input ``index`` of ``consumer`` ties it to its producer."""
    import tensorflow as tf

    declared = consumer._input_types[index]  # the consumer's own input type: refs stay refs
    if declared == tf.resource or declared._is_ref_dtype:
        return True
    return declared == tf.variant and _is_dataset_op(producer) and _is_dataset_op(consumer)


def _frame_partner(op: Any) -> Any:
    """The op a legacy control-flow op always runs with (rule 4 of the module notes), or ``None``."""
    if op.type in _MOVED_TO_PRODUCER:
        return op.inputs[0].op
    if op.type in _ENTER or op.type in _MOVED_TO_CONSUMER:
        consumers = op.outputs[0].consumers()
        return min(consumers, key=lambda consumer: consumer._id) if consumers else None
    return None


def colocation_groups(graph: Any) -> dict[str, str]:
    """The co-location group of every constrained op of a ``tf.Graph``.

    Parameters
    ----------
    graph : tf.Graph

    Returns
    -------
    dict of str to str
        Op name -> group name, for ops that share a group with at least one other op. A group is
        named after its alphabetically first member, so the names do not depend on the order of
        the graph's ops.

    Raises
    ------
    ConstraintError
        An op's ``_class`` names an op the graph does not have.
    """
    ops = graph.get_operations()
    names = {op.name for op in ops}
    union = UnionFind()
    for op in ops:
        for entry in op.colocation_groups():
            other = entry.decode().removeprefix("loc:@")
            if other == op.name:
                continue
            if other not in names:
                raise ConstraintError(
                    f"op {op.name!r} is to be colocated with {other!r}, which is not in the graph"
                )
            union.union(op.name, other)
        for index, tensor in enumerate(op.inputs):
            if _needs_colocation(op, index, tensor.op):
                union.union(op.name, tensor.op.name)
        partner = _frame_partner(op)
        if partner is not None:
            union.union(op.name, partner.name)
    groups: dict[str, str] = {}
    for members in union.to_sets():
        if len(members) > 1:
            name = min(members)
            groups.update(dict.fromkeys(members, name))
    return groups


@functools.cache
def _kernels(op_type: str) -> tuple[tuple[str, tuple[tuple[str, frozenset[int]], ...]], ...]:
    """Registered kernels of ``op_type``: ``(device type, ((type attr, allowed dtype enums), ...))``.

    Cached: the kernels of a device type are registered when its library loads, before any graph
    is imported (only XLA's ``*_JIT`` types come later, and those are left out).
    """
    from tensorflow.python.framework.kernels import get_registered_kernels_for_op

    return tuple(
        (
            kernel.device_type,
            tuple((c.name, frozenset(c.allowed_values.list.type)) for c in kernel.constraint),
        )
        for kernel in get_registered_kernels_for_op(op_type).kernel
        if not kernel.device_type.endswith(_JIT)
    )


@functools.cache
def _registry_knows_gpus() -> bool:
    """Whether this build registers GPU kernels (then the registry decides GPU availability)."""
    return any(device == "GPU" for device, _ in _kernels("MatMul"))


def _attr_types(attr: Any) -> tuple[int, ...]:
    """The dtype enums an ``AttrValue`` holds: one for ``type``, several for ``list(type)``."""
    if attr.WhichOneof("value") == "type":
        return (attr.type,)
    return tuple(attr.list.type)


def kernel_device_types(op_type: str, attrs: Mapping[str, Any]) -> frozenset[str] | None:
    """Device types with a registered kernel for an op of ``op_type`` with these attributes.

    Parameters
    ----------
    op_type : str
    attrs : mapping of str to AttrValue
        The op's ``NodeDef.attr``; a kernel matches when every type attribute it constrains has
        allowed values (an attribute the NodeDef lacks does not rule a kernel out).

    Returns
    -------
    frozenset of str or None
        ``None`` when any device will do: a kernel registered for ``DEFAULT`` matches, or the
        registry has no kernel for ``op_type`` (a library function called as an op, or an op this
        build does not know, whose device TensorFlow decides when it runs).
    """
    kernels = _kernels(op_type)
    if not kernels:
        return None
    types = {
        device
        for device, constraints in kernels
        if all(name not in attrs or set(_attr_types(attrs[name])) <= allowed for name, allowed in constraints)
    }
    return None if _ANY in types else frozenset(types)


def op_device_kinds(op: Any) -> tuple[str, ...] | None:
    """The device types ``op`` (a ``tf.Operation``) can run on, ``None`` for any; see the module notes."""
    import tensorflow as tf

    dtypes = [t.base_dtype for t in op._input_types] + [t.dtype.base_dtype for t in op.outputs]
    if tf.string in dtypes:
        return ("CPU",)
    if not _registry_knows_gpus():
        return ("CPU",) if op.type in CPU_ONLY_OP_TYPES else None
    types = kernel_device_types(op.type, op.node_def.attr)
    return None if types is None else tuple(sorted(types))


def group_device_kinds(
    kinds: Mapping[str, tuple[str, ...] | None], groups: Mapping[str, str]
) -> dict[str, tuple[str, ...] | None]:
    """Every op's kinds narrowed to the intersection over its co-location group.

    Raises
    ------
    ConstraintError
        A group has no device type every member can run on; the message names the members
        and their kinds.
    """
    members: dict[str, list[str]] = defaultdict(list)
    for op, group in groups.items():
        members[group].append(op)
    narrowed = dict(kinds)
    for ops in members.values():
        common = _intersection(kinds[op] for op in ops)
        if common is not None and not common:
            listed = ", ".join(f"{op} {kinds[op]}" for op in sorted(ops) if kinds[op] is not None)
            raise ConstraintError(f"no device type can run the whole co-location group: {listed}")
        narrowed.update(dict.fromkeys(ops, common))
    return narrowed


def _intersection(kinds: Iterable[tuple[str, ...] | None]) -> tuple[str, ...] | None:
    common: set[str] | None = None
    for entry in kinds:
        if entry is not None:
            common = set(entry) if common is None else common & set(entry)
    return None if common is None else tuple(sorted(common))
