"""The layer-wise search: per coarse node, data parallelism or the whole layer on one device.

OptCNN (section 5) prices a configuration of every layer by ``t_c`` (its pieces' compute), ``t_x``
(moving tensors between neighbouring layers' configurations) and ``t_s`` (synchronizing its weight's
gradients). The coarse nodes are those of :func:`tfplace.split.coarsen.weight_groups` (Tofu section
5.1); their configurations here are

* ``data parallel``: what :func:`tfplace.split.data_parallel.data_parallel_plan` does to the
  layer's ops (pieces along the batch, the weight replicated, its gradient all-reduced), and
* ``whole on device d``: every op of the layer on ``d``, which needs no all-reduce but gathers the
  layer's inputs onto ``d``, runs its compute unsplit and scatters its outputs again.

The coarse graphs of training steps do not reduce under Algorithm 1's node and edge eliminations
(the backward pass joins every layer to its forward neighbours and the loss), so the search is the
documented fallback: one coordinate-descent sweep over the coarse nodes from the data-parallel plan,
each node taking the configuration of least ``t_c + t_x + t_s`` with its neighbours fixed (edges
priced by :func:`edge_seconds` on the target devices' link, the simulator's transfer model), the
whole-layer configurations going to the device least loaded by the layers already moved (BBGraP's
balance: device load is measured in seconds at its speed).

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
from tfplace.split.plan import OpSplit, SplitPlan, rule_of
from tfplace.split.rules import PARTIAL, REPLICA, SHAPE_OPS

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
    if source == SPLIT:
        return slices
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
    return PARTIAL_SUM if rule is not None and rule.write(slot) == PARTIAL else SPLIT


def _reads(graph: nx.DiGraph, op: str, split: OpSplit, producer: str, slot: int) -> str:
    if split.degree == 1:
        return f"{WHOLE}@{split.devices[0]}"
    rule = rule_of(graph, op, split)
    if rule is None:
        return REPLICAS
    inputs = graph.nodes[op].get("inputs") or [(producer, slot)]
    index = next((i for i, edge in enumerate(inputs) if tuple(edge) == (producer, slot)), 0)
    kind = rule.read(index).kind
    return {"replicated": REPLICAS, "partial": PARTIAL_SUM}.get(kind, SPLIT)


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
    for u, v, slot in _edges(graph, group):
        sizes = graph.nodes[u]["output_sizes"]
        nbytes = sizes[slot] if slot < len(sizes) else 0
        degree = max(splits[u].degree, splits[v].degree)
        seconds += edge_seconds(
            nbytes,
            _writes(graph, u, splits[u], slot),
            _reads(graph, v, splits[v], u, slot),
            degree,
            link.k,
            link.b,
        )
    return seconds


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
    for group in weight_groups(graph):
        current = {op: splits[op] for op in group}
        best = _group_seconds(graph, group, splits, devices, speed_of)
        choice = None
        for device in sorted(names, key=lambda d: (load[d], names.index(d))):
            splits.update({op: OpSplit.whole(device) for op in group})
            seconds = _group_seconds(graph, group, splits, devices, speed_of)
            if seconds < best:
                best, choice = seconds, device
            splits.update(current)
        if choice is not None:
            splits.update({op: OpSplit.whole(choice) for op in group})
            load[choice] += sum(float(graph.nodes[op]["compute_time"]) for op in group) / speed_of.get(
                choice, 1.0
            )
    return plan


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
    return chosen
