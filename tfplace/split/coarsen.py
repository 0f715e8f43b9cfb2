"""Coarsening for the layer-wise search (Tofu section 5.1): ops that must share a configuration.

:func:`layer_groups` extends :func:`weight_groups` along element-wise chains: an element-wise op
(split along the batch only, reading and writing its slices alike) whose data inputs come from one
group's ops (and ops in no group) joins that group, and so do its gradient ops; an activation, a
bias or a residual branch's scaling thus shares its layer's configuration, and neighbouring layers
become neighbours of the coarse graph.

A coarse node is what OptCNN calls a layer: a weight (a variable op) with every op that touches it
directly (its reads, its update, a gather; of at least
:data:`MIN_WEIGHT_BYTES`), the ops that consume those reads (the layer's forward
op), and every gradient op of those forward ops (the cost graph's ``gradient_of``, schema 2). Ops
with no weight are coarse nodes of their own; a graph without ``gradient_of`` still groups a weight
with its reads, readers and updates. Groups are listed in the graph's topological order, members in
it too, so the result does not depend on hash seeds.
"""

from __future__ import annotations

import networkx as nx

from tfplace.split.rules import BATCH, SHAPE_OPS, op_rules, sharded

__all__ = ["MIN_WEIGHT_BYTES", "VARIABLE_TYPES", "WEIGHT_READ_TYPES", "layer_groups", "weight_groups"]

MIN_WEIGHT_BYTES = 1024
"""Variables smaller than this (a step counter, Adam's powers of beta, a learning rate) are read by
every update: grouping them would join all layers into one coarse node, so they stay alone."""

VARIABLE_TYPES = frozenset({"VarHandleOp", "VariableV2", "Variable"})
"""Op types that hold a weight."""

WEIGHT_READ_TYPES = frozenset({"ReadVariableOp", "Identity"})
"""Op types through which a layer reads its weight."""


def _weight_bytes(graph: nx.DiGraph, variable: str) -> int:
    """The largest tensor ``variable`` or one of its direct readers outputs (a resource handle is
    small; its reads give the weight's size)."""
    ops = [variable, *graph.successors(variable)]
    return max((int(size) for op in ops for size in graph.nodes[op]["output_sizes"]), default=0)


def weight_groups(graph: nx.DiGraph) -> list[list[str]]:
    """The coarse nodes of ``graph`` that hold a weight, each in topological order (module docstring).

    A gradient op joins the group of its forward op; two weights read by one op (a kernel and a
    shared embedding) end in one group.
    """
    order = list(nx.topological_sort(graph))
    position = {op: i for i, op in enumerate(order)}
    parent = {op: op for op in order}

    def find(op: str) -> str:
        while parent[op] != op:
            parent[op] = parent[parent[op]]
            op = parent[op]
        return op

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=position.__getitem__)] = min(ra, rb, key=position.__getitem__)

    weighted: set[str] = set()
    for op in order:
        if graph.nodes[op]["op_type"] not in VARIABLE_TYPES or _weight_bytes(graph, op) < MIN_WEIGHT_BYTES:
            continue
        weighted.add(op)
        for reader in graph.successors(op):
            union(op, reader)
            weighted.add(reader)
            if graph.nodes[reader]["op_type"] in WEIGHT_READ_TYPES:
                for layer in graph.successors(reader):
                    union(op, layer)
                    weighted.add(layer)
    for op in order:
        forward = graph.nodes[op].get("gradient_of")
        if forward in weighted:
            union(op, forward)
    roots = {find(op) for op in weighted}
    groups: dict[str, list[str]] = {}
    for op in order:
        root = find(op)
        if root in roots:
            groups.setdefault(root, []).append(op)
    return list(groups.values())


def _element_wise(graph: nx.DiGraph, op: str) -> bool:
    rules = op_rules(graph.nodes[op]["op_type"], graph.nodes[op].get("attrs"))
    batch = rules.get(BATCH)
    return batch is not None and batch.reads == (sharded(0),) and batch.writes == (sharded(0),)


def layer_groups(graph: nx.DiGraph, weights: list[list[str]] | None = None) -> list[list[str]]:
    """:func:`weight_groups` (or ``weights``, as it returned them) grown along element-wise chains
    (module docstring), in the same order."""
    groups = [list(group) for group in (weight_groups(graph) if weights is None else weights)]
    member = {op: index for index, group in enumerate(groups) for op in group}
    order = list(nx.topological_sort(graph))
    for op in order:
        if op in member:
            continue
        forward = graph.nodes[op].get("gradient_of")
        owners = {
            member[producer]
            for producer, _, slots in graph.in_edges(op, data="slots")
            if slots and producer in member and graph.nodes[producer]["op_type"] not in SHAPE_OPS
        }
        if forward in member:
            owners = {member[forward]}
        elif not (_element_wise(graph, op) and len(owners) == 1):
            continue
        (owner,) = owners
        member[op] = owner
        groups[owner].append(op)
    position = {op: i for i, op in enumerate(order)}
    return [sorted(group, key=position.__getitem__) for group in groups]
