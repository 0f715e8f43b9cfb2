"""Placers whose placements split ops (:mod:`tfplace.split`): a split plan made by one of the split
layer's planners, simulated with its pieces (:func:`tfplace.split.expand.simulate_plan`) and returned
as a :class:`~tfplace.core.placement.Placement` whose ``pieces`` name the split ops' devices and whose
``split_plan`` holds the plan (:meth:`~tfplace.core.placement.Placement.apply` rewrites a graph into its pieces). Memory is judged by that simulation, not the static model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from tfplace.core.costgraph import CostGraph, check_acyclic
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement, simulated_memory_warnings
from tfplace.split.buckets import DEFAULT_BUCKET_BYTES
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan
from tfplace.split.layerwise import layerwise_plan, search_plan
from tfplace.split.plan import SplitPlan

__all__ = ["data_parallel", "decision_fingerprint", "layerwise", "plan_placement", "records_split_fields"]


def records_split_fields(graph: CostGraph) -> bool:
    """Whether ``graph`` records what planning splits needs: its batch size and which input of each
    op is which (``inputs``, cost-graph schema version 3). Without them a split plan could split
    only the ops whose rules read every input alike, so ``auto`` does not try one."""
    return bool(graph.graph.get("batch_size")) and any(
        inputs is not None for _, inputs in graph.nodes(data="inputs")
    )


def decision_fingerprint(placement: Placement) -> str:
    """16 hex digits of a sha256 of what a placer decided: every op's split (devices, dimension,
    shares to 1e-12) and the gradient buckets, or every op's device, with the simulated step (to
    1e-9 s) and peak bytes per device. Equal fingerprints are equal decisions; a change meant only
    to make a placer faster keeps them (``benchmarks/split_decision_speed.py`` prints them)."""
    plan = placement.split_plan
    decided: list[Any]
    if plan is not None:
        decided = sorted(
            (op, split.devices, split.dimension, tuple(round(s, 12) for s in split.shares))
            for op, split in plan.splits.items()
        )
        extra: object = plan.bucket_bytes
    else:
        decided = sorted(placement.assignment.items())
        extra = None
    peaks = sorted((d, int(p)) for d, p in placement.peak_memory.items() if p)
    step = None if placement.step_time is None else round(placement.step_time, 9)
    return hashlib.sha256(repr((decided, extra, step, peaks)).encode()).hexdigest()[:16]


def plan_placement(
    graph: CostGraph,
    devices: DeviceSet,
    planner: Callable[[], SplitPlan],
    *,
    simulate: bool = True,
    speeds: Sequence[float] | None = None,
) -> Placement:
    """The plan ``planner()`` makes for ``graph`` as a :class:`Placement`, simulated when ``simulate``
    is true on devices of ``speeds`` (a warning names each device whose simulated peak exceeds its memory).

    Raises
    ------
    tfplace.core.costgraph.CostGraphError
        When the graph has a cycle (the message names ops on it).
    """
    check_acyclic(graph)
    start = time.perf_counter()
    plan = planner()
    plan.search_seconds = time.perf_counter() - start
    placement = plan.to_placement()
    placement.cost_graph = graph
    placement.details = {"memory_model": "simulated"}
    placement.warnings = simulated_memory_warnings(plan.peak_memory, devices)
    if not simulate:
        return placement
    by_name = dict(zip(devices.names, speeds)) if speeds is not None else None
    return placement.with_simulation(simulate_plan(graph, plan, speeds=by_name)[0])


def data_parallel(
    graph: CostGraph,
    devices: DeviceSet,
    *,
    simulate: bool = True,
    speeds: Sequence[float] | None = None,
    bucket_bytes: int | None = DEFAULT_BUCKET_BYTES,
) -> Placement:
    """``placer="data_parallel"``: :func:`tfplace.split.data_parallel.data_parallel_plan` (what
    ``tf.distribute.MirroredStrategy`` does) as a placement, its weight gradients all-reduced in
    buckets of ``bucket_bytes`` (``None``: one all-reduce per gradient)."""
    return plan_placement(
        graph,
        devices,
        lambda: data_parallel_plan(graph, devices, speeds=speeds, bucket_bytes=bucket_bytes),
        simulate=simulate,
        speeds=speeds,
    )


data_parallel.splits_ops = True  # type: ignore[attr-defined]


def layerwise(
    graph: CostGraph,
    devices: DeviceSet,
    *,
    simulate: bool = True,
    speeds: Sequence[float] | None = None,
    placements: Sequence[Placement] = (),
) -> Placement:
    """``placer="layerwise"``: :func:`tfplace.split.layerwise.layerwise_plan`, the layer-wise search
    selected against data parallelism, one device and ``placements`` by simulation (already
    simulated there, so not again here). Without ``simulate`` there is no selection: the searched
    plan (:func:`tfplace.split.layerwise.search_plan`) unsimulated."""
    if not simulate:
        return plan_placement(
            graph, devices, lambda: search_plan(graph, devices, speeds=speeds), simulate=False
        )
    return plan_placement(
        graph,
        devices,
        lambda: layerwise_plan(graph, devices, speeds=speeds, placements=placements),
        simulate=False,
    )


layerwise.splits_ops = True  # type: ignore[attr-defined]
