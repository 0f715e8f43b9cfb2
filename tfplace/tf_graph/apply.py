"""Write a placement's devices into a TensorFlow graph, and nothing else.

:func:`apply_placement` sets the ``device`` of every op: in place for a ``tf.Graph``, in a copy for a
``GraphDef`` or ``MetaGraphDef``. Every other field (op types, inputs, attributes, the function
library, collections) stays as it was. Before writing anything it checks that the placement names
every op of the graph and keeps each co-location group
(:func:`~tfplace.tf_graph.constraints.colocation_groups`) on one device, so that a placed graph
is one TensorFlow accepts with ``allow_soft_placement=False``.

The other way in, for code that builds the graph itself, is the placement's device function:
``with tf.device(placement.device_fn()):`` around the model's construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tfplace.core.devices import DeviceName
from tfplace.core.placement import Placement, PlacementError
from tfplace.tf_graph.constraints import colocation_groups
from tfplace.tf_graph.importer import load_graph

__all__ = ["apply_placement", "check_placement", "without_devices"]

_SHOWN = 8


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def check_placement(assignment: Mapping[str, str], graph: Any) -> None:
    """Raise :class:`~tfplace.core.placement.PlacementError` unless ``assignment`` fits ``graph``.

    Parameters
    ----------
    assignment : mapping of str to str
        Device name of each op, by op name; names of ops the graph does not have are ignored.
    graph : tf.Graph

    Raises
    ------
    PlacementError
        Ops of the graph without a device, a malformed device name, or a co-location group whose
        ops are on different devices (names compared canonically: ``/device:CPU:1`` is
        ``/job:localhost/replica:0/task:0/device:CPU:1``); the message names the ops.
    """
    names = [op.name for op in graph.get_operations()]
    missing = [name for name in names if name not in assignment]
    if missing:
        raise PlacementError(f"the placement has no device for {len(missing)} ops: {_listed(missing)}")
    canonical = {}
    for name in names:
        try:
            canonical[name] = DeviceName.parse(assignment[name])
        except ValueError as error:
            raise PlacementError(f"op {name!r}: {error}") from None
    devices_of_group: dict[str, dict[DeviceName, list[str]]] = defaultdict(lambda: defaultdict(list))
    for op, group in colocation_groups(graph).items():
        devices_of_group[group][canonical[op]].append(op)
    for by_device in devices_of_group.values():
        if len(by_device) > 1:
            parts = "; ".join(
                f"{_listed(sorted(ops))} on {device.full_name}" for device, ops in by_device.items()
            )
            raise PlacementError(f"the placement splits a co-location group: {parts}")


def apply_placement(placement: Placement, target: Any) -> Any:
    """Set every op's device to the one ``placement`` gives it.

    Parameters
    ----------
    placement : Placement
    target : tf.Graph, GraphDef or MetaGraphDef
        A ``tf.Graph`` is changed in place; a proto is copied and the copy is placed.

    Returns
    -------
    tf.Graph, GraphDef or MetaGraphDef
        The placed graph (``target`` itself for a ``tf.Graph``). Device names are written as the
        placement spells them.

    Raises
    ------
    PlacementError
        See :func:`check_placement`; nothing is changed then.

    Examples
    --------
    >>> placed = apply_placement(placement, graph_def)  # doctest: +SKIP
    >>> tf.graph_util.import_graph_def(placed, name="")  # doctest: +SKIP
    """
    import tensorflow as tf

    assignment = placement.assignment
    if isinstance(target, tf.Graph):
        check_placement(assignment, target)
        for op in target.get_operations():
            op._set_device(assignment[op.name])
        return target
    if not isinstance(target, (tf.compat.v1.GraphDef, tf.compat.v1.MetaGraphDef)):
        raise TypeError(f"cannot place a {type(target).__name__}: give a tf.Graph, GraphDef or MetaGraphDef")
    check_placement(assignment, load_graph(target))
    placed = type(target)()
    placed.CopyFrom(target)
    graph_def = placed.graph_def if isinstance(placed, tf.compat.v1.MetaGraphDef) else placed
    for node in graph_def.node:
        node.device = assignment[node.name]
    return placed


def without_devices(proto: Any) -> Any:
    """A copy of a ``NodeDef``, ``GraphDef`` or ``MetaGraphDef`` with every device field cleared,
    the function library's nodes included: what placing a graph does not change."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    graph_def = getattr(copy, "graph_def", copy)  # a MetaGraphDef holds one
    if not hasattr(graph_def, "node"):  # a NodeDef
        graph_def.ClearField("device")
        return copy
    for node in graph_def.node:
        node.ClearField("device")
    for function in graph_def.library.function:
        for node in function.node_def:
            node.ClearField("device")
    return copy
