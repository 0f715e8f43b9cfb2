"""Read a TensorFlow graph into the structure of a :class:`~tfplace.core.costgraph.CostGraph`.

:func:`import_graph` takes a ``tf.Graph``, a ``GraphDef``, a ``MetaGraphDef`` or a saved file, and
returns an :class:`ImportedGraph`: one cost-graph node per GraphDef node with its op type,
co-location group, device kinds and statically known output sizes, one edge per producer-consumer
pair (data edges with the producer's output slots, control edges with ``control=True``), and zero
compute times for the estimator to fill (Celeritas section 4.1, ``G(V, E)``).

Loops: legacy control flow (``Enter`` / ``Merge`` / ``Switch`` / ``NextIteration`` / ``Exit``, from
``tf.compat.v1.disable_control_flow_v2()`` or a TF1-era GraphDef) closes each loop with a
``NextIteration -> Merge`` edge; those back edges are left out of the cost graph and listed in
:attr:`ImportedGraph.broken_back_edges`, so that the cost graph is acyclic. A functional ``While``
or ``If`` (control flow v2) is one op, its body in the function library. Any other cycle is an
error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from tfplace.core.costgraph import CostGraph, find_cycle_ops
from tfplace.tf_graph.constraints import colocation_groups, group_device_kinds, op_device_kinds
from tfplace.tf_graph.split_attrs import op_inputs, op_output_shapes, op_split_attrs

__all__ = [
    "GraphImportError",
    "ImportedGraph",
    "fetch_op_names",
    "import_graph",
    "load_graph",
    "step_closure",
]

_NEXT_ITERATION = frozenset({"NextIteration", "RefNextIteration"})
_MERGE = frozenset({"Merge", "RefMerge"})
_UNSIZED = frozenset({"string", "resource", "variant"})


class GraphImportError(ValueError):
    """A graph cannot be imported: unreadable file, unknown fetch, or a cycle outside loop frames."""


@dataclass(frozen=True)
class ImportedGraph:
    """A TensorFlow graph as tfplace sees it before profiling.

    Attributes
    ----------
    cost_graph : CostGraph
        The structure: every op, with ``op_type``, ``colocation_group``, ``device_kinds`` and
        ``output_sizes`` (bytes of each output whose shape is fully known statically, else 0);
        compute times and memory are 0 until the estimator fills them.
    graph_def : GraphDef
        The graph the cost graph was read from.
    step_ops : frozenset of str
        Ops that run when the fetches run: their transitive inputs through data and control
        edges (back edges included); every op when no fetches were given. The other ops
        (initializers, savers) are in the cost graph too, with zero costs.
    broken_back_edges : tuple of (str, str)
        ``(NextIteration op, Merge op)`` edges of legacy while loops, left out of the cost graph.
    requested_devices : dict of str to str
        The device each op's NodeDef asked for, for ops that asked for one.
    fetches : tuple of str
        Names of the fetched ops (empty when none were given).
    """

    cost_graph: CostGraph
    graph_def: Any
    step_ops: frozenset[str]
    broken_back_edges: tuple[tuple[str, str], ...]
    requested_devices: dict[str, str]
    fetches: tuple[str, ...] = ()


def _read_proto(path: Path) -> Any:
    """A ``GraphDef`` (``.pb``, ``.pbtxt``) or ``MetaGraphDef`` (``.meta``), binary or text.

    A binary file cut at a field boundary, or empty, still parses: as a graph missing its last
    ops. TensorFlow writes a graph's ``versions`` after its ops, in binary and in text, so a
    ``.pb`` or ``.meta`` file whose graph lacks them is refused as truncated. A ``.pbtxt`` file
    is exempt: hand-written ones often leave ``versions`` out.
    """
    import tensorflow as tf
    from google.protobuf import message, text_format

    if path.suffix not in (".meta", ".pb", ".pbtxt"):
        raise GraphImportError(f"{path}: expected a .pb or .pbtxt GraphDef or a .meta MetaGraphDef")
    make = tf.compat.v1.MetaGraphDef if path.suffix == ".meta" else tf.compat.v1.GraphDef
    kind = make.__name__
    data = path.read_bytes()
    problem = None
    if path.suffix != ".pbtxt":
        proto = make()
        try:
            proto.ParseFromString(data)
        except message.DecodeError as error:
            problem = f"truncated or corrupted ({error})"
        else:
            if _graph_def_of(proto).HasField("versions"):
                return proto
            problem = f"truncated: its {len(data):,} bytes lack the versions TensorFlow writes after the ops"
    proto = make()  # a text proto, also under a binary suffix
    try:
        text_format.Parse(data.decode("utf-8"), proto)
    except (text_format.ParseError, UnicodeDecodeError) as error:
        raise GraphImportError(f"{path}: not a readable {kind}: {problem or error}") from None
    if problem is not None and not _graph_def_of(proto).HasField("versions"):
        raise GraphImportError(f"{path}: not a readable {kind}: {problem}")
    return proto


def load_graph(source: Any) -> Any:
    """A ``tf.Graph`` for ``source``: the graph itself, or a new graph importing the proto or file.

    A ``MetaGraphDef`` is imported with its collections (variables, ``train_op``, ``losses``), so
    its initializers and training op can be found in the new graph. Op names are kept unchanged.

    Raises
    ------
    GraphImportError
        The source is not a graph, the file cannot be read, the GraphDef has a cycle that is not
        a legacy while loop (the message names its ops), or TensorFlow rejects the GraphDef (the
        message is TensorFlow's, naming the node).
    """
    import tensorflow as tf
    from tensorflow.python.framework import meta_graph

    if isinstance(source, tf.Graph):
        return source
    if isinstance(source, (str, os.PathLike)):
        source = _read_proto(Path(source))
    if not isinstance(source, (tf.compat.v1.GraphDef, tf.compat.v1.MetaGraphDef)):
        raise GraphImportError(
            f"cannot import a {type(source).__name__}: give a tf.Graph, GraphDef, MetaGraphDef "
            "or the path of a .pb, .pbtxt or .meta file"
        )
    _check_acyclic(_dependencies(_graph_def_of(source)))
    graph = tf.Graph()
    with graph.as_default():
        try:
            if isinstance(source, tf.compat.v1.MetaGraphDef):
                # not tf.compat.v1.train.import_meta_graph, which adds a Saver's ops to the graph
                meta_graph.import_scoped_meta_graph(source, graph=graph)
            else:
                tf.graph_util.import_graph_def(source, name="")
        except ValueError as error:
            raise GraphImportError(f"TensorFlow cannot import the graph: {error}") from None
    return graph


def _graph_def_of(source: Any, graph: Any = None) -> Any:
    """The ``GraphDef`` of a ``GraphDef`` or ``MetaGraphDef``, else ``graph``'s."""
    import tensorflow as tf

    if isinstance(source, tf.compat.v1.MetaGraphDef):
        return source.graph_def
    return source if isinstance(source, tf.compat.v1.GraphDef) else graph.as_graph_def()


def fetch_op_names(graph: Any, fetches: Any) -> tuple[str, ...]:
    """Op names of ``fetches``: one or a list of ops, tensors, ``"op"`` or ``"op:0"`` names.

    Raises
    ------
    GraphImportError
        Naming every fetch the graph does not have.
    """
    items = fetches if isinstance(fetches, (list, tuple, set, frozenset)) else [fetches]
    names = []
    for item in items:
        name = item if isinstance(item, str) else getattr(item, "name", None)
        if not isinstance(name, str):
            raise GraphImportError(f"cannot fetch {item!r}: give ops, tensors or their names")
        names.append(name.split(":")[0].removeprefix("^"))
    known = {op.name for op in graph.get_operations()}
    unknown = [name for name in names if name not in known]
    if unknown:
        empty = " (the graph is empty)" if not known else ""
        raise GraphImportError(f"the graph has no op {', '.join(map(repr, unknown))} to fetch{empty}")
    return tuple(dict.fromkeys(names))


def step_closure(graph: Any, fetch_ops: Iterable[str]) -> frozenset[str]:
    """The ops that run when ``fetch_ops`` run: their transitive data and control inputs."""
    seen: set[str] = set()
    stack = [graph.get_operation_by_name(name) for name in fetch_ops]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    return frozenset(seen)


def _output_sizes(op: Any) -> tuple[int, ...]:
    """Bytes of each output whose static shape is fully known; 0 for the others."""
    sizes = []
    for tensor in op.outputs:
        dtype = tensor.dtype.base_dtype
        known = tensor.shape.is_fully_defined() and dtype.name not in _UNSIZED
        sizes.append(tensor.shape.num_elements() * dtype.size if known else 0)
    return tuple(sizes)


def _is_back_edge(producer_type: str, consumer_type: str) -> bool:
    return producer_type in _NEXT_ITERATION and consumer_type in _MERGE


def _dependencies(graph_def: Any) -> nx.DiGraph:
    """The GraphDef's data and control edges, without legacy while loops' back edges.

    TensorFlow refuses to import a GraphDef with another cycle but names no op ("2 nodes in a
    cycle"): checking this graph first gives an error that does.
    """
    op_types = {node.name: node.op for node in graph_def.node}
    dependencies = nx.DiGraph()
    dependencies.add_nodes_from(op_types)
    for node in graph_def.node:
        for name in node.input:
            producer = name.removeprefix("^").split(":")[0]
            if producer in op_types and not _is_back_edge(op_types[producer], node.op):
                dependencies.add_edge(producer, node.name)
    return dependencies


def import_graph(source: Any, fetches: Any = None) -> ImportedGraph:
    """Import a TensorFlow graph's structure and constraints into a cost graph.

    Parameters
    ----------
    source : tf.Graph, GraphDef, MetaGraphDef, str or path
        The graph, or a ``.pb`` / ``.pbtxt`` / ``.meta`` file holding it.
    fetches : op, tensor, name or list of them, optional
        What a training step runs (the train op, the loss); defines :attr:`ImportedGraph.step_ops`.

    Returns
    -------
    ImportedGraph

    Raises
    ------
    GraphImportError
        An unreadable source, an unknown fetch, or a cycle that is not a legacy while loop's
        ``NextIteration -> Merge`` back edge (the message names ops on the cycle).
    tfplace.tf_graph.constraints.ConstraintError
        A co-location group no device type can run, or a ``_class`` naming a missing op.

    Examples
    --------
    >>> imported = import_graph(tf_graph, fetches=train_op)  # doctest: +SKIP
    >>> imported.cost_graph.nodes["conv1/Conv2D"]["op_type"]  # doctest: +SKIP
    'Conv2D'
    """
    graph = load_graph(source)
    ops = graph.get_operations()
    fetch_ops = fetch_op_names(graph, fetches) if fetches is not None else ()
    groups = colocation_groups(graph)
    kinds = group_device_kinds({op.name: op_device_kinds(op) for op in ops}, groups)
    name = Path(source).stem if isinstance(source, (str, os.PathLike)) else ""
    cost_graph = CostGraph(name=name, source="tensorflow")
    for op in ops:
        cost_graph.add_op(
            op.name,
            op_type=op.type,
            output_sizes=_output_sizes(op),
            colocation_group=groups.get(op.name),
            device_kinds=kinds[op.name],
            attrs=op_split_attrs(op),
            output_shapes=op_output_shapes(op),
            inputs=op_inputs(op),
        )
    back_edges = []
    for op in ops:
        for tensor in op.inputs:
            if _is_back_edge(tensor.op.type, op.type):
                back_edges.append((tensor.op.name, op.name))
            else:
                cost_graph.add_dependency(tensor.op.name, op.name, slots=(tensor.value_index,))
        for control in op.control_inputs:
            cost_graph.add_dependency(control.name, op.name, control=True)
    _check_acyclic(cost_graph)
    return ImportedGraph(
        cost_graph=cost_graph,
        graph_def=_graph_def_of(source, graph),
        step_ops=step_closure(graph, fetch_ops) if fetch_ops else frozenset(op.name for op in ops),
        broken_back_edges=tuple(back_edges),
        requested_devices={op.name: op.device for op in ops if op.device},
        fetches=fetch_ops,
    )


def _check_acyclic(dependencies: nx.DiGraph) -> None:
    if nx.is_directed_acyclic_graph(dependencies):  # linear; find_cycle is far slower on a large DAG
        return
    cycle = find_cycle_ops(dependencies)
    if cycle:
        shown: Sequence[str] = cycle if len(cycle) <= 12 else [*cycle[:12], "..."]
        raise GraphImportError(
            "the graph has a cycle that is not a while loop's NextIteration -> Merge back edge: "
            + " -> ".join(shown)
        )
