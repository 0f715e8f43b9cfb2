"""The layer-wise search: per coarse node, data parallelism or the whole layer on one device.

OptCNN (section 5) prices a configuration of every layer by ``t_c`` (its pieces' compute), ``t_x``
(moving tensors between neighbouring layers' configurations) and ``t_s`` (synchronizing its weight's
gradients). The coarse nodes are those of :func:`tfplace.split.coarsen.weight_groups` (Tofu section
5.1: a weight with its reads, update, layer ops and their gradients); their configurations are

* ``data parallel``: what :func:`tfplace.split.data_parallel.data_parallel_plan` does to the
  layer's ops (pieces along the batch, the weight replicated, its gradient all-reduced);
* ``output features``: the layer's ops that can split on their output features (``channel``) do
  so over all devices, each of its other ops then taking, in topological order, the cheapest of
  its own, ``channel``, ``reduction`` and replicas (OptCNN's parameter split; the weight is read in
  slices of its replicas, its gradient gathered instead of all-reduced);
* ``whole on device d``: every op of the layer on ``d`` (no all-reduce; the layer's inputs are
  gathered onto ``d``, its compute unsplit, its outputs scattered again).

Edges are priced by :func:`edge_seconds` on the target devices' typical link (the simulator's
transfer model: seconds a byte and a latency a message), a tensor once per layout it is brought
into, as :func:`tfplace.split.expand.expand_plan` does.

The coarse graphs of training steps do not reduce under Algorithm 1's node and edge eliminations
(the backward pass joins every layer to its forward neighbours, the loss and the gradient clipping),
so the search is the documented fallback: one coordinate-descent sweep over the coarse nodes in
topological order from the data-parallel plan, each taking the configuration of least
``t_c + t_x + t_s`` with its neighbours fixed, whole layers going to the device least loaded by the
layers already moved (devices of different speeds: load in seconds at the device's speed, batch
pieces proportional to the speeds as BBGraP balances them). A last pass runs replicated ops outside
the layers (constants, the clipping of replicated gradients) and replicated shape ops whole on the least-loaded
device when that is cheaper (:func:`_spread_replicas`).

:func:`layerwise_plan` then *selects*: it simulates the searched plan, data parallelism, one device
and any whole-op placement given, and returns the fastest whose simulated peak fits every device
(the lowest peak when none fits). So the result is never slower than those candidates by the
simulator because it is chosen among them, not because the search guarantees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import networkx as nx

from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.split.coarsen import weight_groups
from tfplace.split.costs import piece_time
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan
from tfplace.split.plan import OpSplit, SplitPlan, dimension_size, inputs_known, rule_of
from tfplace.split.rules import CHANNEL, PARTIAL, REDUCTION, REPLICA, SHAPE_OPS, can_replicate, op_rules

__all__ = ["edge_seconds", "layerwise_plan", "search_plan"]

WHOLE, SPLIT, PARTIAL_SUM, REPLICAS = "whole", "split", "partial", "replica"


def edge_seconds(
    nbytes: float, source: str, target: str, degree: int, per_byte: float, latency: float
) -> float:
    """Seconds to bring a tensor of ``nbytes`` from the ``source`` layout to the ``target`` one over
    ``degree`` devices, on links of ``per_byte`` seconds a byte and ``latency`` seconds a message
    (ring collectives; every pair of devices has its own link). ``whole@d`` layouts name the device."""
    if (source == target and not source.startswith(WHOLE)) or source == REPLICAS or nbytes <= 0:
        return 0.0
    k = degree
    slices = nbytes * (k - 1) / k * per_byte + (k - 1) * latency  # gather, scatter, reduce-scatter
    if source.startswith(WHOLE):
        if target.startswith(WHOLE):
            return 0.0 if source == target else nbytes * per_byte + latency
        return nbytes * per_byte + latency if target == REPLICAS else slices
    if source.startswith(SPLIT):
        return nbytes * (k - 1) / k / k * per_byte + (k - 1) * latency if target.startswith(SPLIT) else slices
    # partial sums: summed onto one device, reduce-scattered, or all-reduced.
    if target.startswith(WHOLE):
        return nbytes * (k - 1) * per_byte + (k - 1) * latency
    return 2 * slices if target == REPLICAS else slices


def _writes(graph: nx.DiGraph, op: str, split: OpSplit, slot: int) -> str:
    if split.degree == 1:
        return f"{WHOLE}@{split.devices[0]}"
    if split.dimension == REPLICA:
        return REPLICAS
    rule = rule_of(graph, op, split)
    if rule is None:
        return SPLIT
    layout = rule.write(slot)
    return PARTIAL_SUM if layout == PARTIAL else f"{SPLIT}({layout.axis})"


def _reads(graph: nx.DiGraph, op: str, split: OpSplit, producer: str, slot: int) -> str:
    if split.degree == 1:
        return f"{WHOLE}@{split.devices[0]}"
    rule = rule_of(graph, op, split)
    if rule is None:
        return REPLICAS
    inputs = graph.nodes[op].get("inputs") or [(producer, slot)]
    index = next((i for i, edge in enumerate(inputs) if tuple(edge) == (producer, slot)), 0)
    layout = rule.read(index)
    return {"replicated": REPLICAS, "partial": PARTIAL_SUM}.get(layout.kind, f"{SPLIT}({layout.axis})")


def _edges(graph: nx.DiGraph, ops: Iterable[str]) -> list[tuple[str, str, int]]:
    """Data edges ``(producer, consumer, slot)`` touching ``ops`` (shape ops' inputs carry no bytes)."""
    found: dict[tuple[str, str, int], None] = {}
    for op in ops:
        for u, v, slots in [*graph.in_edges(op, data="slots"), *graph.out_edges(op, data="slots")]:
            if graph.nodes[v]["op_type"] not in SHAPE_OPS:
                found.update(((u, v, s), None) for s in slots or ())
    return list(found)


def _group_seconds(
    graph: nx.DiGraph,
    group: Sequence[str],
    splits: Mapping[str, OpSplit],
    devices: DeviceSet,
    speeds: Mapping[str, float],
) -> float:
    """``t_c + t_x + t_s`` of ``group`` under ``splits``: its ops' slowest pieces and every edge
    touching it (the all-reduce of a weight gradient is an edge from partial sums to replicas)."""
    link = devices.typical_link
    batch = graph.graph.get("batch_size")
    seconds = 0.0
    for op in group:
        split = splits[op]
        attrs = graph.nodes[op]
        seconds += max(
            piece_time(attrs, split.dimension or "", share if split.dimension != REPLICA else 1.0, batch)
            / speeds.get(device, 1.0)
            for device, share in zip(split.devices, split.shares)
        )
    moves = {
        (u, slot, _writes(graph, u, splits[u], slot), _reads(graph, v, splits[v], u, slot)): max(
            splits[u].degree, splits[v].degree
        )
        for u, v, slot in _edges(graph, group)
    }  # a tensor brought into one layout once serves every reader of that layout, as expand_plan does
    for (u, slot, source, target), degree in moves.items():
        sizes = graph.nodes[u]["output_sizes"]
        nbytes = sizes[slot] if slot < len(sizes) else 0
        seconds += edge_seconds(nbytes, source, target, degree, link.k, link.b)
    return seconds


def _op_choices(
    graph: nx.DiGraph, op: str, names: tuple[str, ...], shares: tuple[float, ...]
) -> list[OpSplit]:
    """The ways to run ``op`` over all devices other than the batch: its output features
    (``channel``), its contraction (``reduction``, partial results) or replicas."""
    attrs = graph.nodes[op]
    rules = op_rules(attrs["op_type"], attrs.get("attrs"))
    choices = [
        OpSplit(names, dimension, shares)
        for dimension in (CHANNEL, REDUCTION)
        if dimension in rules
        and inputs_known(graph, op, rules[dimension])
        and (dimension_size(graph, op, dimension) or 0) >= len(names)
    ]
    if can_replicate(attrs["op_type"]):
        choices.append(OpSplit(names, REPLICA))
    return choices


def _feature_split(
    graph: nx.DiGraph,
    group: Sequence[str],
    splits: dict[str, OpSplit],
    devices: DeviceSet,
    shares: tuple[float, ...],
    speeds: Mapping[str, float],
) -> dict[str, OpSplit] | None:
    """OptCNN's parameter split of a layer: its ops that can split on their output features do so,
    then each other op of the group in turn takes the choice of :func:`_op_choices` (or keeps its own)
    that makes the group cheapest with its neighbours fixed. ``None`` when no op splits so."""
    names = tuple(devices.names)
    current = {op: splits[op] for op in group}
    seed = {
        op: OpSplit(names, CHANNEL, shares)
        for op in group
        if CHANNEL in {c.dimension for c in _op_choices(graph, op, names, shares)}
    }
    if not seed:
        return None
    splits.update(seed)
    for op in (op for op in group if op not in seed):
        options = [splits[op], current[op], *_op_choices(graph, op, names, shares)]
        costs = []
        for option in options:
            splits[op] = option
            costs.append(_group_seconds(graph, [op], splits, devices, speeds))
        splits[op] = options[costs.index(min(costs))]
    chosen = {op: splits[op] for op in group}
    splits.update(current)
    return chosen


def search_plan(graph: nx.DiGraph, devices: DeviceSet, *, speeds: Sequence[float] | None = None) -> SplitPlan:
    """The coordinate-descent plan of the module docstring (not yet simulated)."""
    names = tuple(devices.names)
    plan = data_parallel_plan(graph, devices, speeds=speeds)
    plan.placer = "layerwise"
    if len(names) == 1:
        return plan
    speed_of = dict(zip(names, speeds)) if speeds is not None else {}
    load = dict.fromkeys(names, 0.0)
    splits = plan.splits
    shares = (
        tuple(w / sum(speeds) for w in speeds) if speeds is not None else (1.0 / len(names),) * len(names)
    )
    groups = weight_groups(graph)
    for group in groups:
        current = {op: splits[op] for op in group}
        best = _group_seconds(graph, group, splits, devices, speed_of)
        choice: dict[str, OpSplit] | None = None
        feature = _feature_split(graph, group, splits, devices, shares, speed_of)
        wholes = [
            {op: OpSplit.whole(d) for op in group}
            for d in sorted(names, key=lambda d: (load[d], names.index(d)))
        ]
        for option in [*([feature] if feature else []), *wholes]:
            splits.update(option)
            seconds = _group_seconds(graph, group, splits, devices, speed_of)
            if seconds < best:
                best, choice = seconds, option
            splits.update(current)
        if choice is not None:
            splits.update(choice)
            for op, split in choice.items():
                if split.degree == 1:
                    load[split.devices[0]] += float(graph.nodes[op]["compute_time"]) / speed_of.get(
                        split.devices[0], 1.0
                    )
    _spread_replicas(graph, {op for group in groups for op in group}, splits, devices, load, speed_of)
    return plan


def _spread_replicas(
    graph: nx.DiGraph,
    weighted: set[str],
    splits: dict[str, OpSplit],
    devices: DeviceSet,
    load: dict[str, float],
    speeds: Mapping[str, float],
) -> None:
    """Run a replicated op outside the weight groups (a constant, an op on replicas' results) or a
    replicated shape op anywhere whole on the least-loaded device when that is cheaper: a replica
    keeps every device busy for its time, a whole op one device, which with the work balanced over
    the ``k`` devices adds ``1/k`` of its time to the step, plus sending its outputs to its readers."""
    names = tuple(devices.names)
    for op in nx.topological_sort(graph):
        if splits[op].dimension != REPLICA or (
            op in weighted and graph.nodes[op]["op_type"] not in SHAPE_OPS
        ):
            continue
        replica = splits[op]
        device = min(names, key=lambda d: (load[d], names.index(d)))
        seconds = float(graph.nodes[op]["compute_time"]) / speeds.get(device, 1.0)
        replicated = _group_seconds(graph, [op], splits, devices, speeds)
        splits[op] = OpSplit.whole(device)
        whole = _group_seconds(graph, [op], splits, devices, speeds) - seconds + seconds / len(names)
        if whole < replicated:
            load[device] += seconds
        else:
            splits[op] = replica


def layerwise_plan(
    graph: nx.DiGraph,
    devices: DeviceSet,
    *,
    speeds: Sequence[float] | None = None,
    placements: Sequence[Placement] = (),
) -> SplitPlan:
    """The fastest fitting plan among the search's, data parallelism's, one device's and those of
    ``placements`` (whole-op placements), each simulated (module docstring). Ties keep that order."""
    names = tuple(devices.names)
    by_name = dict(zip(names, speeds)) if speeds is not None else None
    candidates = [
        search_plan(graph, devices, speeds=speeds),
        data_parallel_plan(graph, devices, speeds=speeds),
        SplitPlan({op: OpSplit.whole(names[0]) for op in graph}, devices, placer="single"),
        *(SplitPlan.from_placement(p) for p in placements),
    ]
    memory = {d.name: devices.memory_of(i) for i, d in enumerate(devices.all_devices)}
    for candidate in candidates:
        simulate_plan(graph, candidate, speeds=by_name)

    def fits(plan: SplitPlan) -> bool:
        return all(peak <= memory.get(device, peak) for device, peak in plan.peak_memory.items())

    fitting = [plan for plan in candidates if fits(plan)]
    if fitting:
        chosen = min(fitting, key=lambda plan: plan.step_time or 0.0)
    else:
        chosen = min(candidates, key=lambda plan: max(plan.peak_memory.values(), default=0))
    chosen.placer = f"layerwise ({chosen.placer or 'placement'})"
    chosen.batch_size = chosen.batch_size or graph.graph.get("batch_size")  # what the rewrite feeds
    return chosen
