"""The layer-wise search: OptCNN's Algorithm 1 over coarse layers, each configured as a whole.

OptCNN (section 5) prices a configuration of every layer by ``t_c`` (its pieces' compute), ``t_x``
(moving tensors between neighbouring layers' configurations) and ``t_s`` (synchronizing its weight's
gradients), and minimizes their sum over the graph by node and edge eliminations and a dynamic
program (:mod:`tfplace.split.elimination`). Here:

* **coarse nodes** are :func:`tfplace.split.coarsen.layer_groups` (Tofu section 5.1: a weight with
  its reads, update, layer ops, their element-wise chains and all their gradients); every other op
  keeps its data-parallel split (:func:`tfplace.split.data_parallel.data_parallel_plan`), the fixed
  context the layers' costs are priced against;
* **configurations** of a layer, per block of devices of :func:`device_blocks` (Tofu section 5.2's
  recursive two-way split: all devices, each half, each quarter, ... one device; or, ``flat``,
  OptCNN's aligned blocks of every degree dividing the device count): ``batch`` (data parallelism
  restricted to the block), ``channel`` (OptCNN's parameter split: the layer's ops that can split
  on their output features do, each other op taking the cheapest of its own split, ``channel``,
  ``reduction`` and replicas) and, on one device, ``whole``. Pieces are proportional to the
  devices' speeds (BBGraP); a device of speed ``s`` computes in ``1/s`` of the graph's time;
* **node cost**: ``t_c`` of the layer's ops plus ``t_x``/``t_s`` of its edges to itself and the
  context; **edge cost**: ``t_x`` of the edges between two layers, each priced by
  :func:`edge_seconds` on the devices' typical link as :func:`tfplace.split.expand.expand_plan`
  moves them (weight gradients all-reduced in buckets pay no per-tensor latency);
* **memory**: a configuration whose layer alone cannot fit a device (its weights there plus its
  largest piece's outputs and scratch exceed the device's memory) is not offered; :func:`layerwise_plan` then simulates the
  result and, when its peak exceeds a device, searches again with the all-device configurations
  only (memory spread evenly), before falling back on the next candidate.

Configurations on fewer devices than all are priced on the first block of their size; the result
then moves each such layer to the least-loaded block of that size, a layer joined to one already on
a block of its size following it there (OptCNN's sum of costs does not see which block; the load
does).

:func:`layerwise_plan` keeps a guard: it simulates the searched plan, data parallelism, one device
and any whole-op placement given, and returns the fastest whose simulated peak fits every device.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import networkx as nx
import numpy as np

from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.split.buckets import DEFAULT_BUCKET_BYTES
from tfplace.split.coarsen import layer_groups, weight_groups
from tfplace.split.costs import piece_time, scaling_of
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.elimination import Problem, solve
from tfplace.split.expand import simulate_plan
from tfplace.split.plan import OpSplit, SplitPlan, dimension_size, inputs_known, rule_of
from tfplace.split.rules import (
    CHANNEL,
    PARTIAL,
    REDUCTION,
    REPLICA,
    SHAPE_OPS,
    SplitRule,
    can_replicate,
    op_rules,
)

__all__ = ["Held", "device_blocks", "edge_seconds", "layerwise_plan", "search_plan"]

WHOLE, SPLIT, PARTIAL_SUM, REPLICAS = "whole", "split", "partial", "replica"
BATCH_CONFIG, CHANNEL_CONFIG = "batch", "channel"


@dataclass(frozen=True)
class Held:
    """How a tensor is held: ``kind`` (``whole``, ``split`` along ``axis``, ``partial`` sums or
    ``replica``s) on ``devices``."""

    kind: str
    axis: int | None
    devices: tuple[str, ...]


def edge_seconds(nbytes: float, source: Held, target: Held, per_byte: float, latency: float) -> float:
    """Seconds to bring a tensor of ``nbytes`` from the ``source`` layout to the ``target`` one, on
    links of ``per_byte`` seconds a byte and ``latency`` seconds a message (ring collectives over the
    larger of the two device sets; every pair of devices has its own link)."""
    if nbytes <= 0 or source == target:
        return 0.0
    if source.kind == REPLICAS:
        return 0.0 if set(target.devices) <= set(source.devices) else nbytes * per_byte + latency
    k = max(len(source.devices), len(target.devices))
    slices = nbytes * (k - 1) / k * per_byte + (k - 1) * latency  # gather, scatter, reduce-scatter
    if source.kind == WHOLE:
        if target.kind == WHOLE:
            return nbytes * per_byte + latency
        return nbytes * per_byte + latency if target.kind == REPLICAS else slices
    if source.kind == SPLIT:
        return nbytes * (k - 1) / k / k * per_byte + (k - 1) * latency if target.kind == SPLIT else slices
    # partial sums: summed onto one device, reduce-scattered, or all-reduced.
    if target.kind == WHOLE:
        return nbytes * (k - 1) * per_byte + (k - 1) * latency
    return 2 * slices if target.kind == REPLICAS else slices


def _edges(graph: nx.DiGraph, ops: Iterable[str]) -> list[tuple[str, str, int]]:
    """Data edges ``(producer, consumer, slot)`` touching ``ops`` (shape ops' inputs carry no bytes)."""
    found: dict[tuple[str, str, int], None] = {}
    for op in ops:
        for u, v, slots in [*graph.in_edges(op, data="slots"), *graph.out_edges(op, data="slots")]:
            if graph.nodes[v]["op_type"] not in SHAPE_OPS:
                found.update(((u, v, s), None) for s in slots or ())
    return list(found)


class _Pricer:
    """OptCNN's ``t_c`` and ``t_x + t_s`` of ops and edges under a mapping of splits, on links of
    ``per_byte`` seconds a byte and ``latency`` a message; ``bucketed``: weight gradients'
    all-reduces pay no per-tensor latency. Rules and edges are looked up once per op."""

    def __init__(
        self, graph: nx.DiGraph, per_byte: float, latency: float, speeds: Mapping[str, float], bucketed: bool
    ) -> None:
        self.graph, self.per_byte, self.latency = graph, per_byte, latency
        self.speeds, self.bucketed = speeds, bucketed
        self._rules: dict[tuple[str, str | None], SplitRule | None] = {}
        self._edges: dict[str, list[tuple[str, str, int]]] = {}
        self._positions: dict[tuple[str, str, int], int] = {}

    def unbucketed(self) -> _Pricer:
        pricer = _Pricer(self.graph, self.per_byte, self.latency, self.speeds, False)
        pricer._rules, pricer._edges, pricer._positions = self._rules, self._edges, self._positions
        return pricer

    def edges(self, ops: Iterable[str]) -> list[tuple[str, str, int]]:
        """:func:`_edges` of ``ops``, each op's looked up once."""
        found: dict[tuple[str, str, int], None] = {}
        for op in ops:
            if op not in self._edges:
                self._edges[op] = _edges(self.graph, [op])
            found.update(dict.fromkeys(self._edges[op]))
        return list(found)

    def _rule(self, op: str, split: OpSplit) -> SplitRule | None:
        key = (op, split.dimension if split.degree > 1 else None)
        if key not in self._rules:
            self._rules[key] = rule_of(self.graph, op, split)
        return self._rules[key]

    def writes(self, op: str, split: OpSplit, slot: int) -> Held:
        if split.degree == 1:
            return Held(WHOLE, None, split.devices)
        if split.dimension == REPLICA:
            return Held(REPLICAS, None, split.devices)
        rule = self._rule(op, split)
        layout = rule.write(slot) if rule is not None else None
        if layout == PARTIAL:
            return Held(PARTIAL_SUM, None, split.devices)
        return Held(SPLIT, layout.axis if layout else None, split.devices)

    def reads(self, op: str, split: OpSplit, producer: str, slot: int) -> Held:
        if split.degree == 1:
            return Held(WHOLE, None, split.devices)
        rule = self._rule(op, split)
        if rule is None:
            return Held(REPLICAS, None, split.devices)
        key = (op, producer, slot)
        if key not in self._positions:
            inputs = self.graph.nodes[op].get("inputs") or [(producer, slot)]
            self._positions[key] = next((i for i, e in enumerate(inputs) if tuple(e) == (producer, slot)), 0)
        layout = rule.read(self._positions[key])
        kind = {"replicated": REPLICAS, "partial": PARTIAL_SUM}.get(layout.kind, SPLIT)
        return Held(kind, layout.axis if kind == SPLIT else None, split.devices)

    def compute(self, ops: Iterable[str], splits: Mapping[str, OpSplit]) -> float:
        """The ops' slowest pieces, one after the other."""
        batch, block = scaling_of(self.graph.graph)
        seconds = 0.0
        for op in ops:
            split, attrs = splits[op], self.graph.nodes[op]
            seconds += max(
                piece_time(
                    attrs, split.dimension or "", share if split.dimension != REPLICA else 1.0, batch, block
                )
                / self.speeds.get(device, 1.0)
                for device, share in zip(split.devices, split.shares)
            )
        return seconds

    def moves(self, edges: Iterable[tuple[str, str, int]], splits: Mapping[str, OpSplit]) -> float:
        """Moving the edges' tensors, each once per layout it is brought into (as
        :func:`tfplace.split.expand.expand_plan` does)."""
        held = dict.fromkeys(  # in the edges' order: sums do not depend on hash seeds
            (u, slot, self.writes(u, splits[u], slot), self.reads(v, splits[v], u, slot))
            for u, v, slot in edges
        )
        seconds = 0.0
        for u, slot, source, target in held:
            sizes = self.graph.nodes[u]["output_sizes"]
            nbytes = sizes[slot] if slot < len(sizes) else 0
            summed = self.bucketed and source.kind == PARTIAL_SUM and target.kind == REPLICAS
            seconds += edge_seconds(nbytes, source, target, self.per_byte, 0.0 if summed else self.latency)
        return seconds


def device_blocks(names: Sequence[str], spread: str = "recursive") -> list[tuple[str, ...]]:
    """The blocks of devices a layer may run on, largest first: ``recursive`` halves all devices,
    then each half, down to single devices (Tofu section 5.2); ``flat`` cuts them into aligned
    blocks of every size dividing their count (OptCNN). For a power of two both give the same."""
    devices = tuple(names)
    if spread == "flat":
        sizes = sorted((d for d in range(1, len(devices) + 1) if len(devices) % d == 0), reverse=True)
        return [devices[i : i + d] for d in sizes for i in range(0, len(devices), d)]
    if spread != "recursive":
        raise ValueError(f"spread must be 'recursive' or 'flat', got {spread!r}")
    blocks: list[tuple[str, ...]] = []
    level = [devices]
    while level:
        blocks.extend(level)
        level = [
            half
            for block in level
            if len(block) > 1
            for half in (block[: (len(block) + 1) // 2], block[(len(block) + 1) // 2 :])
        ]
    return blocks


def _op_choices(
    graph: nx.DiGraph, op: str, names: tuple[str, ...], shares: tuple[float, ...]
) -> list[OpSplit]:
    """The ways to run ``op`` over ``names`` other than the batch: its output features
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


def _on_block(split: OpSplit, block: tuple[str, ...], shares: tuple[float, ...]) -> OpSplit:
    """A data-parallel op's split moved onto ``block``."""
    if split.degree == 1 or len(block) == 1:
        return OpSplit.whole(block[0])
    if split.dimension == REPLICA:
        return OpSplit(block, REPLICA)
    return OpSplit(block, split.dimension, shares)


def _feature_split(
    graph: nx.DiGraph,
    group: Sequence[str],
    context: dict[str, OpSplit],
    block: tuple[str, ...],
    shares: tuple[float, ...],
    pricer: _Pricer,
) -> dict[str, OpSplit] | None:
    """OptCNN's parameter split of a layer on ``block``: its ops that can split on their output
    features do so, then each other op in turn takes the choice of :func:`_op_choices` (or its data
    parallel split) that is cheapest with the rest fixed. ``None`` when no op splits so."""
    option = {
        op: OpSplit(block, CHANNEL, shares)
        for op in group
        if CHANNEL in {c.dimension for c in _op_choices(graph, op, block, shares)}
    }
    if not option:
        return None
    view = ChainMap(option, context)
    for op in (op for op in group if op not in option):
        edges = pricer.edges([op])
        best: tuple[float, OpSplit] | None = None
        for choice in (_on_block(context[op], block, shares), *_op_choices(graph, op, block, shares)):
            option[op] = choice
            seconds = pricer.compute([op], view) + pricer.moves(edges, view)
            if best is None or seconds < best[0]:
                best = (seconds, choice)
        assert best is not None
        option[op] = best[1]
    return option


def _least_bytes(graph: nx.DiGraph, option: Mapping[str, OpSplit]) -> dict[str, float]:
    """A lower bound of what the ops of ``option`` need on each device at the step's peak: their
    weights (resident all step) and the largest one piece's outputs and scratch."""
    weights: dict[str, float] = {}
    largest: dict[str, float] = {}
    for op, split in option.items():
        attrs = graph.nodes[op]
        rule = rule_of(graph, op, split)
        for device, share in zip(split.devices, split.shares):
            part = 1.0 if split.dimension in (None, REPLICA) else share
            outputs = sum(
                size * (1.0 if rule is None or rule.write(slot).axis is None else part)
                for slot, size in enumerate(attrs["output_sizes"])
            )
            weights[device] = weights.get(device, 0.0) + attrs["persistent_bytes"] * part
            largest[device] = max(largest.get(device, 0.0), outputs + attrs["temporary_bytes"] * part)
    return {device: weights[device] + largest[device] for device in weights}


@dataclass(frozen=True)
class _Configuration:
    block: tuple[str, ...]
    splits: dict[str, OpSplit]


def _configurations(
    graph: nx.DiGraph,
    group: Sequence[str],
    context: dict[str, OpSplit],
    blocks: Sequence[tuple[str, ...]],
    shares_of: Callable[[tuple[str, ...]], tuple[float, ...]],
    pricer: _Pricer,
    memory: Mapping[str, int],
) -> list[_Configuration]:
    """A layer's configurations on each of ``blocks`` (module docstring) that can fit each device's
    ``memory`` (:func:`_least_bytes`); the first (data parallelism on all devices) when none can."""
    found = []
    for block in blocks:
        shares = shares_of(block)
        found.append(_Configuration(block, {op: _on_block(context[op], block, shares) for op in group}))
        feature = _feature_split(graph, group, context, block, shares, pricer) if len(block) > 1 else None
        if feature is not None:
            found.append(_Configuration(block, feature))
    fitting = [
        c
        for c in found
        if all(nbytes <= memory.get(d, nbytes) for d, nbytes in _least_bytes(graph, c.splits).items())
    ]
    return fitting or found[:1]


def _moved(
    configuration: _Configuration, block: tuple[str, ...], shares: tuple[float, ...]
) -> dict[str, OpSplit]:
    """``configuration``'s splits on ``block`` (of its block's size) instead of its own block."""
    onto = dict(zip(configuration.block, block))
    return {
        op: OpSplit(
            tuple(onto.get(d, d) for d in split.devices),
            split.dimension,
            shares if split.degree == len(block) and split.dimension not in (None, REPLICA) else split.shares,
        )
        for op, split in configuration.splits.items()
    }


def search_plan(
    graph: nx.DiGraph,
    devices: DeviceSet,
    *,
    speeds: Sequence[float] | None = None,
    bucket_bytes: int | None = DEFAULT_BUCKET_BYTES,
    spread: str = "recursive",
    all_devices_only: bool = False,
    parallel: SplitPlan | None = None,
) -> SplitPlan:
    """The plan of OptCNN's Algorithm 1 over the coarse layers (module docstring), not yet simulated.

    ``spread`` chooses the blocks of :func:`device_blocks`; ``all_devices_only`` offers each layer
    only configurations over all devices (the memory fallback of :func:`layerwise_plan`);
    ``parallel`` is :func:`~tfplace.split.data_parallel.data_parallel_plan` of the same arguments
    when the caller has made it already (it is not changed).
    """
    names = tuple(devices.names)
    if parallel is None:
        parallel = data_parallel_plan(graph, devices, speeds=speeds, bucket_bytes=bucket_bytes)
    plan = SplitPlan(
        dict(parallel.splits),
        devices,
        placer="layerwise",
        batch_size=parallel.batch_size,
        bucket_bytes=parallel.bucket_bytes,
    )
    if len(names) == 1:
        return plan
    speed_of = dict(zip(names, speeds)) if speeds is not None else {}

    def shares_of(block: tuple[str, ...]) -> tuple[float, ...]:
        weights = [speed_of.get(d, 1.0) for d in block]
        return tuple(w / sum(weights) for w in weights)

    link = devices.typical_link
    pricer = _Pricer(graph, link.k, link.b, speed_of, bucket_bytes is not None)
    context = plan.splits
    blocks = device_blocks(names, spread)
    first_of_size: dict[int, tuple[str, ...]] = {}
    for block in blocks:
        first_of_size.setdefault(len(block), block)
    offered = [names] if all_devices_only else list(first_of_size.values())
    memory = {d.name: devices.memory_of(i) for i, d in enumerate(devices.all_devices)}
    weights = weight_groups(graph)
    groups = layer_groups(graph, weights)
    group_of = {op: i for i, group in enumerate(groups) for op in group}
    problem = Problem({})
    configurations: list[list[_Configuration]] = []
    cross: dict[tuple[int, int], list[tuple[str, str, int]]] = {}
    for i, group in enumerate(groups):
        own = []
        for u, v, slot in pricer.edges(group):
            other = group_of.get(v if group_of.get(u) == i else u)
            if other is None or other == i:
                own.append((u, v, slot))
            elif i < other:
                cross.setdefault((i, other), []).append((u, v, slot))
        options = _configurations(graph, group, context, offered, shares_of, pricer, memory)
        configurations.append(options)
        problem.nodes[i] = np.array(
            [
                pricer.compute(group, ChainMap(c.splits, context))
                + pricer.moves(own, ChainMap(c.splits, context))
                for c in options
            ]
        )
    for (i, j), edges in cross.items():
        problem.add_edge(
            i,
            j,
            np.array(
                [
                    [pricer.moves(edges, ChainMap(a.splits, b.splits, context)) for b in configurations[j]]
                    for a in configurations[i]
                ]
            ),
        )
    choice, _ = solve(problem)
    _place_blocks(
        graph,
        {op for group in weights for op in group},
        [configurations[i][choice[i]] for i in range(len(groups))],
        cross,
        blocks,
        shares_of,
        pricer,
        context,
    )
    return plan


def _place_blocks(
    graph: nx.DiGraph,
    weighted: set[str],
    chosen: Sequence[_Configuration],
    cross: Mapping[tuple[int, int], object],
    blocks: Sequence[tuple[str, ...]],
    shares_of: Callable[[tuple[str, ...]], tuple[float, ...]],
    pricer: _Pricer,
    splits: dict[str, OpSplit],
) -> None:
    """Write each layer's chosen configuration into ``splits``, a layer on fewer devices than all
    moved to the block of its size where a neighbouring layer of that size already is, else to the
    least-loaded one (load: seconds of compute placed on a device); then :func:`_spread_replicas`
    (``weighted``: the ops of the weight groups, whose replicas stay)."""
    names = blocks[0]
    load = dict.fromkeys(names, 0.0)
    neighbours: dict[int, list[int]] = {}
    for i, j in cross:
        neighbours.setdefault(i, []).append(j)
        neighbours.setdefault(j, []).append(i)
    placed: dict[int, tuple[str, ...]] = {}
    for i, configuration in enumerate(chosen):
        size = len(configuration.block)
        option = configuration.splits
        if size < len(names):
            same = [placed[j] for j in neighbours.get(i, ()) if len(placed.get(j, ())) == size]
            candidates = [b for b in blocks if len(b) == size]
            block = (
                same[0]
                if same
                else min(candidates, key=lambda b: (max(load[d] for d in b), candidates.index(b)))
            )
            option = _moved(configuration, block, shares_of(block))
            placed[i] = block
        splits.update(option)
        for op, split in option.items():
            seconds = pricer.compute([op], option)
            for device in split.devices:
                load[device] += seconds
    _spread_replicas(graph, weighted, splits, names, load, pricer.unbucketed())


def _spread_replicas(
    graph: nx.DiGraph,
    weighted: set[str],
    splits: dict[str, OpSplit],
    names: tuple[str, ...],
    load: dict[str, float],
    pricer: _Pricer,
) -> None:
    """Run a replicated op outside the layers (a constant, an op on replicas' results) or a
    replicated shape op anywhere whole on the least-loaded device when that is cheaper: a replica
    keeps every device busy for its time, a whole op one device, which with the work balanced over
    the ``k`` devices adds ``1/k`` of its time to the step, plus sending its outputs to its readers."""
    for op in nx.topological_sort(graph):
        if splits[op].dimension != REPLICA or (
            op in weighted and graph.nodes[op]["op_type"] not in SHAPE_OPS
        ):
            continue
        replica = splits[op]
        device = min(names, key=lambda d: (load[d], names.index(d)))
        seconds = float(graph.nodes[op]["compute_time"]) / pricer.speeds.get(device, 1.0)
        edges = pricer.edges([op])
        replicated = pricer.compute([op], splits) + pricer.moves(edges, splits)
        splits[op] = OpSplit.whole(device)
        whole = pricer.moves(edges, splits) + seconds / len(names)
        if whole < replicated:
            load[device] += seconds
        else:
            splits[op] = replica


def _fits(plan: SplitPlan, memory: Mapping[str, int]) -> bool:
    return all(peak <= memory.get(device, peak) for device, peak in plan.peak_memory.items())


def _busiest_device_seconds(graph: nx.DiGraph, plan: SplitPlan, speeds: Mapping[str, float]) -> float:
    """A lower bound of ``plan``'s step time: the compute of its busiest device, without waiting or
    transfers (the simulator runs one op at a time per device)."""
    batch, block = scaling_of(graph.graph)
    busy: dict[str, float] = {}
    for op, split in plan.splits.items():
        for device, share in zip(split.devices, split.shares):
            piece = piece_time(
                graph.nodes[op],
                split.dimension or "",
                share if split.dimension != REPLICA else 1.0,
                batch,
                block,
            )
            busy[device] = busy.get(device, 0.0) + piece / speeds.get(device, 1.0)
    return max(busy.values(), default=0.0)


def layerwise_plan(
    graph: nx.DiGraph,
    devices: DeviceSet,
    *,
    speeds: Sequence[float] | None = None,
    placements: Sequence[Placement] = (),
    bucket_bytes: int | None = DEFAULT_BUCKET_BYTES,
    spread: str = "recursive",
) -> SplitPlan:
    """The searched plan, simulated; when its peak exceeds a device, the search again with
    configurations over all devices only (module docstring). Then the guard: the fastest fitting
    plan among that, data parallelism's, one device's and those of ``placements`` (whole-op
    placements), each simulated unless its busiest device's compute alone
    (:func:`_busiest_device_seconds`) is no faster than a fitting plan already simulated; when none
    fits, every candidate is simulated and the lowest peak chosen. Ties keep that order."""
    names = tuple(devices.names)
    by_name = dict(zip(names, speeds)) if speeds is not None else {}
    memory = {d.name: devices.memory_of(i) for i, d in enumerate(devices.all_devices)}
    parallel = data_parallel_plan(graph, devices, speeds=speeds, bucket_bytes=bucket_bytes)
    search = partial(
        search_plan,
        graph,
        devices,
        speeds=speeds,
        bucket_bytes=bucket_bytes,
        spread=spread,
        parallel=parallel,
    )
    searched = search()
    simulate_plan(graph, searched, speeds=by_name)
    if not _fits(searched, memory) and len(names) > 1:
        searched = search(all_devices_only=True)
        simulate_plan(graph, searched, speeds=by_name)
    candidates = [
        searched,
        parallel,
        SplitPlan({op: OpSplit.whole(names[0]) for op in graph}, devices, placer="single"),
        *(SplitPlan.from_placement(p) for p in placements),
    ]
    simulated = [searched]
    for candidate in candidates[1:]:
        best = min((p.step_time or 0.0 for p in simulated if _fits(p, memory)), default=float("inf"))
        if candidate.splits == searched.splits and candidate.bucket_bytes == searched.bucket_bytes:
            continue
        if _busiest_device_seconds(graph, candidate, by_name) < best:
            simulate_plan(graph, candidate, speeds=by_name)
            simulated.append(candidate)
    fitting = [plan for plan in simulated if _fits(plan, memory)]
    if fitting:
        chosen = min(fitting, key=lambda plan: plan.step_time or 0.0)
    else:
        for candidate in candidates:
            if all(candidate is not plan for plan in simulated):
                simulate_plan(graph, candidate, speeds=by_name)
        chosen = min(candidates, key=lambda plan: max(plan.peak_memory.values(), default=0))
    chosen.placer = f"layerwise ({chosen.placer or 'placement'})"
    chosen.batch_size = chosen.batch_size or graph.graph.get("batch_size")  # what the rewrite feeds
    return chosen
