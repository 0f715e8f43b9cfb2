"""A training step's fetches and feeds in a ``tf.Graph``: the graph from any of its forms, the
elements a step fetches, the ops it runs, its feed dictionary checked against the placeholders, and
the ``GraphDef`` of just those ops.

TensorFlow is imported inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfplace.tf_graph.importer import did_you_mean

__all__ = [
    "as_graph",
    "element_name",
    "fetch_closure",
    "fetch_elements",
    "step_graph_def",
    "tensor_name",
    "validate_feeds",
]


def as_graph(graph: Any) -> Any:
    """A ``tf.Graph`` from a ``tf.Graph``, ``GraphDef`` or ``MetaGraphDef``."""
    import tensorflow as tf

    if isinstance(graph, tf.Graph):
        return graph
    result = tf.Graph()
    with result.as_default():
        if isinstance(graph, tf.compat.v1.GraphDef):
            tf.graph_util.import_graph_def(graph, name="")
        elif isinstance(graph, tf.compat.v1.MetaGraphDef):
            tf.compat.v1.train.import_meta_graph(graph)
        else:
            raise TypeError(f"expected a tf.Graph, GraphDef or MetaGraphDef, got {type(graph).__name__}")
    return result


def element_name(element: Any) -> str:
    """The name of an op, a tensor or a name."""
    return element if isinstance(element, str) else str(element.name)


def tensor_name(key: Any) -> str:
    """The tensor a feed key names: ``"x"`` means ``"x:0"``."""
    name = element_name(key)
    return name if ":" in name else f"{name}:0"


def fetch_elements(graph: Any, fetches: Any) -> list[Any]:
    if not graph.get_operations():
        raise ValueError("the graph is empty: it has no op to fetch or profile")
    items = list(fetches) if isinstance(fetches, (list, tuple)) else [fetches]
    if not items:
        raise ValueError("profile_graph needs at least one fetch")
    elements = []
    for item in items:
        if not isinstance(item if isinstance(item, str) else getattr(item, "name", None), str):
            raise ValueError(f"cannot fetch {item!r}: give ops, tensors or their names")
        try:
            elements.append(graph.as_graph_element(element_name(item)))
        except (KeyError, ValueError) as error:
            hint = did_you_mean(element_name(item), (op.name for op in graph.get_operations()))
            raise ValueError(f"fetch {element_name(item)!r} is not in the graph: {error}{hint}") from None
    return elements


def fetch_closure(graph: Any, fetches: Sequence[Any], fed: Iterable[str] = ()) -> list[Any]:
    """The ops a step fetching ``fetches`` runs: their transitive inputs and control inputs.

    A fed tensor's producer is included (its ``_Arg`` record stands for it) but not what it
    depends on.

    Parameters
    ----------
    graph : tf.Graph
    fetches : sequence of tf.Tensor or tf.Operation
    fed : iterable of str
        Names of fed tensors (``"x:0"``).

    Returns
    -------
    list of tf.Operation
        In the graph's creation order.
    """
    fed_names = set(fed)
    seen: set[str] = set()
    stack = [getattr(element, "op", element) for element in fetches]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.outputs and all(out.name in fed_names for out in op.outputs):
            continue
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def validate_feeds(graph: Any, feeds: Mapping[Any, Any], needed_ops: Iterable[Any]) -> dict[str, Any]:
    """Check a feed dictionary against the graph; return it keyed by tensor name as numpy arrays.

    Parameters
    ----------
    graph : tf.Graph
    feeds : Mapping
        Keys are tensor names (``"x:0"``), op names (``"x"``, meaning output 0) or tensors.
    needed_ops : iterable of tf.Operation
        The ops the step runs; each ``Placeholder`` among them must be fed.

    Raises
    ------
    ValueError
        Naming the tensor, when a key names no tensor of the graph, a needed placeholder is not fed,
        or a value's dtype cannot be cast to the tensor's dtype or its shape is incompatible with the
        tensor's static shape.
    """
    import numpy as np

    arrays: dict[str, Any] = {}
    for key, value in feeds.items():
        name = tensor_name(key)
        try:
            tensor = graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            placeholders = sorted(op.name for op in graph.get_operations() if op.type == "Placeholder")
            raise ValueError(
                f"feed {name!r} names no tensor of the graph; its placeholders are {placeholders}"
            ) from None
        array = np.asarray(value)
        target = tensor.dtype.as_numpy_dtype
        if np.dtype(target) != np.dtype(object) and not np.can_cast(array.dtype, target, casting="same_kind"):
            raise ValueError(
                f"feed {name!r}: placeholder dtype is {tensor.dtype.name}, the fed array's is {array.dtype}"
            )
        if not tensor.shape.is_compatible_with(array.shape):
            raise ValueError(
                f"feed {name!r}: shape {tuple(array.shape)} is incompatible with the placeholder's "
                f"static shape {tensor.shape}"
            )
        arrays[name] = array
    missing = [op.name for op in needed_ops if op.type == "Placeholder" and f"{op.name}:0" not in arrays]
    if missing:
        raise ValueError(f"placeholders {missing} are needed by the fetches but not fed")
    return arrays


def step_graph_def(graph: Any, ops: Iterable[Any]) -> Any:
    """The ``GraphDef`` of ``graph`` restricted to ``ops`` (with the whole function library).

    The profile cache fingerprints this instead of the whole graph: ops a step does not run
    (initializers, whose random seeds tf_keras draws anew in every process; summaries) do not
    change what the step costs.
    """
    full = graph.as_graph_def()
    names = {op.name for op in ops}
    pruned = type(full)()
    pruned.versions.CopyFrom(full.versions)
    pruned.library.CopyFrom(full.library)
    pruned.node.extend(node for node in full.node if node.name in names)
    return pruned
