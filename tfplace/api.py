"""One call for the common case: measure a TensorFlow graph, place it, return the placement.

:func:`place` chains the whole pipeline of Celeritas (Figure 2):

1. import the graph's structure and constraints (:func:`tfplace.tf_graph.import_graph`);
2. Standard Evaluation: profile the training step at small batch sizes
   (:func:`tfplace.estimator.profile_graph`, cached on disk), fit a per-op regression on the batch
   size and predict every op's costs at the target batch (:class:`~tfplace.estimator.OpCostRegression`);
   optionally turn the measured times into a target device's (:mod:`tfplace.core.device_model`);
3. place the step's cost graph with the chosen placer (:func:`tfplace.placer.place_cost_graph`)
   and simulate the step (:mod:`tfplace.simulator`);
4. give every op outside the step (initializers, savers) the device of its co-location group or of
   its inputs, so that the whole graph can be placed.

:func:`estimate_costs` stops after step 2, for users who place one profiled graph many times.
TensorFlow is imported only when these functions run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
from absl import logging

from tfplace.core.costgraph import CHANNEL_BLOCK, UNTRACED_STEP, CostGraph
from tfplace.core.device_model import DEVICE_MODELS, DeviceModel, convert_graph, device_model
from tfplace.core.devices import DeviceError, DeviceName, DeviceSet
from tfplace.core.placement import Placement
from tfplace.core.progress import note, quiet

__all__ = [
    "DEFAULT_CACHE_DIR",
    "CostEstimate",
    "as_device_set",
    "estimate_costs",
    "measurement_placement",
    "place",
    "place_costs",
    "place_remaining_ops",
    "split_rewrite_check",
    "unconverted_times_warning",
    "with_split_rewrite_check",
]

DEFAULT_CACHE_DIR = os.path.join(".tfplace_cache", "profiles")
"""Where profiles are cached unless the caller says otherwise (relative to the working directory)."""

FeedFunction = Callable[[int], Mapping[Any, Any]]


@dataclass(frozen=True)
class CostEstimate:
    """What Standard Evaluation learned about a graph.

    Attributes
    ----------
    cost_graph : CostGraph
        The ops of the training step with their predicted costs at the target batch size, FLOPs
        from static shapes, and edges priced by the graph's transfer model.
    imported : ImportedGraph
        The whole graph's structure (ops outside the step included) and constraints.
    profile : ProfileSet
        The measurements at the small batch sizes.
    regression : OpCostRegression
        The fitted per-op model.
    refinement : Refinement or None
        Step 2's measurement at the target batch, when asked for (``refine_on``); ``cost_graph``
        then holds its costs.
    """

    cost_graph: CostGraph
    imported: Any
    profile: Any
    regression: Any
    refinement: Any = None


def as_device_set(
    devices: DeviceSet | str | Sequence[str], memory: str | int | Sequence[str | int] | None
) -> DeviceSet:
    """A :class:`DeviceSet` from one, or from names (ranges allowed: ``/device:GPU:0-3``) and memory."""
    if isinstance(devices, DeviceSet):
        if memory is not None:
            raise DeviceError("give the memory inside the DeviceSet, not beside it")
        return devices
    if memory is None:
        raise DeviceError("give each device's memory (for example memory='32GB') with device names")
    return DeviceSet.parse(devices, memory)


def estimate_costs(
    graph: Any,
    fetches: Any,
    feed_fn: FeedFunction,
    batch_size: int,
    *,
    profile_batch_sizes: Sequence[int] = (1, 2, 4),
    init_op: Any = None,
    warmup_steps: int = 2,
    traced_steps: int = 5,
    cache_dir: str | os.PathLike[str] | None = DEFAULT_CACHE_DIR,
    config: Any = None,
    refine_on: DeviceSet | None = None,
    progress: bool = True,
    matmul_row_blocks: Mapping[str, int] | None = None,
) -> CostEstimate:
    """Standard Evaluation (Celeritas section 4.2.1): the step's costs at ``batch_size``.

    Step 1 profiles small batches and predicts the target batch by regression
    (:class:`~tfplace.estimator.regression.OpCostRegression`, each group of kernel twins on its
    pooled times: :func:`~tfplace.estimator.twins.kernel_twins`); with ``refine_on``,
    step 2 then runs the target batch on those devices (DFS-TOPO placement) and replaces the
    predictions by what it measured (:func:`tfplace.estimator.refine.refine_costs`).

    Parameters
    ----------
    graph : tf.Graph, GraphDef, MetaGraphDef or path of a saved one
    fetches : op, tensor, name or list of them
        What one training step runs (the train op; add the loss to also compute it).
    feed_fn : callable
        ``feed_fn(batch_size)`` returns the feed dict of one step at that batch size.
    batch_size : int
        The batch size to place for.
    profile_batch_sizes : sequence of int
        Small batch sizes that fit one device, at least two unless one of them is ``batch_size``.
    init_op, warmup_steps, traced_steps, config
        See :func:`tfplace.estimator.profile_graph`.
    cache_dir : path or None
        Profile cache; ``None`` or ``""`` always measures (as ``--cache_dir=`` on the CLI).
    refine_on : DeviceSet, optional
        Devices to run the target batch on for step 2 (virtual CPUs, loopback workers); ``None``
        keeps step 1's predictions.
    progress : bool
        Show the stages and the progress of profiling on standard error (:mod:`tfplace.core.progress`;
        ``TFPLACE_QUIET=1`` silences every call).
    matmul_row_blocks : mapping of str to int, optional
        The machine's ``MatMul`` rows per pass by variant, from its stored calibration
        (:attr:`~tfplace.core.device_model.CpuCalibration.matmul_row_blocks`): ``MatMul`` ops of those
        variants are regressed on the rows their passes cover
        (:func:`~tfplace.estimator.row_blocks.matmul_row_blockings`). ``None``: 1 for every variant.

    Returns
    -------
    CostEstimate
    """
    from tfplace.estimator.profiler import profile_graph
    from tfplace.estimator.regression import OpCostRegression, fill_cost_graph
    from tfplace.estimator.row_blocks import matmul_row_blockings
    from tfplace.estimator.simd import cpu_float_lanes
    from tfplace.estimator.twins import kernel_twins
    from tfplace.tf_graph.importer import import_graph, load_graph

    with quiet(not progress):
        if batch_size < 1:
            raise ValueError(f"the target batch size must be positive, got {batch_size}")
        tf_graph = load_graph(graph)
        imported = import_graph(tf_graph, fetches)
        note(
            "tfplace: profiling %s ops of the step at batch sizes %s",
            f"{len(imported.step_ops):,}",
            list(profile_batch_sizes),
        )
        started = time.perf_counter()
        profile = profile_graph(
            tf_graph,
            fetches,
            feed_fn,
            profile_batch_sizes,
            warmup_steps=warmup_steps,
            traced_steps=traced_steps,
            config=config,
            init_op=init_op,
            cache_dir=cache_dir,
        )
        note("tfplace: profile %s", _profile_source(profile, time.perf_counter() - started))
        if len(profile.batch_sizes) == 1 and profile.batch_sizes[0] != batch_size:
            raise ValueError(
                f"predicting batch {batch_size} needs two or more profiled batch sizes, got {list(profile.batch_sizes)}"
            )
        blockings = matmul_row_blockings(imported.cost_graph, profile, matmul_row_blocks or {})
        regression = (
            OpCostRegression().fit(profile, blockings, kernel_twins(imported.cost_graph, profile))
            if len(profile.batch_sizes) > 1
            else None
        )
        costs = regression.predict(batch_size) if regression is not None else profile.costs[batch_size]
        filled = fill_cost_graph(_step_graph(imported.cost_graph, imported.step_ops), costs)
        if regression is not None:
            for op, coefficients in regression.batch_costs().items():
                if op in filled:
                    filled.nodes[op]["batch_costs"] = coefficients
        for op, flops in _flops_at(tf_graph, feed_fn, batch_size, filled).items():
            filled.nodes[op]["flops"] = float(flops)
        filled.graph.update(
            name=imported.cost_graph.graph.get("name") or "graph",
            batch_size=batch_size,
            source="tensorflow",
            profile_key=profile.key,
            profile_batch_sizes=list(profile.batch_sizes),
            estimated_ops=list(profile.estimated_ops),
        )
        if profile.devices and all("CPU" in device.upper() for device in profile.devices.values()):
            filled.graph[CHANNEL_BLOCK] = cpu_float_lanes()  # what a channel split's pieces save
            untraced = profile.untraced_steps(batch_size)
            if untraced:  # what a real step costs beyond the traced ops, per device kind
                filled.graph[UNTRACED_STEP] = untraced
        refinement = None
        if refine_on is not None:
            from tfplace.estimator.refine import refine_costs
            from tfplace.runner import run_placement

            measured_on = measurement_placement(filled, imported.cost_graph, refine_on)
            refinement = refine_costs(
                tf_graph, fetches, feed_fn, filled, measured_on, run_placement, init_op=init_op
            )
            filled = refinement.cost_graph
        return CostEstimate(
            cost_graph=filled,
            imported=imported,
            profile=profile,
            regression=regression,
            refinement=refinement,
        )


def _profile_source(profile: Any, seconds: float) -> str:
    """Where a profile came from: ``"measured in 12.3 s"`` or ``"read from the cache in 0.2 s
    (measured in 12.3 s when it was stored)"``; ``seconds`` is how long getting it took now."""
    if profile.from_cache:
        return f"read from the cache in {seconds:.1f} s (measured in {profile.profiling_seconds:.1f} s when it was stored)"
    return f"measured in {profile.profiling_seconds:.1f} s"


def _step_graph(structure: nx.DiGraph, step_ops: frozenset[str]) -> CostGraph:
    """The ops of the step with their dependencies, in the order of ``structure`` (the GraphDef's).

    A networkx subgraph of fewer than half of the ops iterates them in the order of the set it was
    given, which changes with Python's hash seed; the placers break ties by op position, so the
    same graph would get different placements from run to run.
    """
    step = CostGraph(structure)
    step.remove_nodes_from([op for op in structure if op not in step_ops])
    return step


def _flops_at(tf_graph: Any, feed_fn: FeedFunction, batch_size: int, ops: Any) -> dict[str, int]:
    """FLOPs of each op at ``batch_size`` from static shapes.

    The feeds' shapes at ``batch_size`` are extrapolated from those at batch 1 and 2 (a dimension
    that grows with the batch grows linearly), so no large batch is ever materialized.
    """
    from tfplace.estimator.shapes import estimate_op, shaped_graph

    def shapes(batch: int) -> dict[str, tuple[int, ...]]:
        named = {
            (k if isinstance(k, str) else k.name): tuple(getattr(v, "shape", ()))
            for k, v in feed_fn(batch).items()
        }
        return {name if ":" in name else f"{name}:0": shape for name, shape in named.items()}

    one, two = shapes(1), shapes(2)
    target = {
        name: tuple(a + (b - a) * (batch_size - 1) for a, b in zip(shape, two[name]))
        for name, shape in one.items()
    }
    shaped = shaped_graph(tf_graph, target)
    flops = {}
    for op in ops:
        estimate = estimate_op(shaped.get_operation_by_name(op), batch_size)
        if estimate.flops:
            flops[op] = estimate.flops
    return flops


def place(
    graph: Any,
    fetches: Any,
    feed_fn: FeedFunction,
    devices: DeviceSet | str | Sequence[str],
    *,
    batch_size: int,
    memory: str | int | Sequence[str | int] | None = None,
    placer: str | None = None,
    placer_options: Mapping[str, Any] | None = None,
    target_device: str | DeviceModel | None = None,
    simulate: bool = True,
    progress: bool = True,
    coplace_gradients: bool = True,
    **estimate_options: Any,
) -> Placement:
    """Measure ``graph``, place every op on ``devices`` for ``batch_size``, and return the placement.

    Parameters
    ----------
    graph : tf.Graph, GraphDef, MetaGraphDef or path of a saved one
    fetches : op, tensor, name or list of them
        What one training step runs.
    feed_fn : callable
        ``feed_fn(batch_size)`` returns the feed dict of one step at that batch size.
    devices : DeviceSet, str or sequence of str
        The devices: a :class:`DeviceSet`, or names such as ``"/device:GPU:0-3"`` with ``memory``.
    batch_size : int
        The (large) batch size to place for.
    memory : str, int or sequence, optional
        Memory of each device (``"32GB"``), when ``devices`` are names.
    placer, placer_options, target_device, simulate, coplace_gradients
        See :func:`place_costs`.
    progress : bool
        Show each stage (profiling, placing) and the progress of the long ones on standard error;
        ``False``, or ``TFPLACE_QUIET=1`` in the environment, keeps the call silent but for warnings.
    **estimate_options
        ``profile_batch_sizes``, ``init_op``, ``warmup_steps``, ``traced_steps``, ``cache_dir``,
        ``config``, ``refine_on``: see :func:`estimate_costs`.

    Returns
    -------
    Placement
        Every op of the graph (initializers and other ops outside the step included) with a device;
        ``placement.cost_graph`` holds the step's costs it was placed with.

    Examples
    --------
    >>> placement = tfplace.place(graph, train_op, feed_fn, "/device:GPU:0-3", memory="32GB",
    ...                           batch_size=512)  # doctest: +SKIP
    >>> placement.apply(graph)  # doctest: +SKIP
    """
    device_set = as_device_set(devices, memory)
    started = time.perf_counter()
    with quiet(not progress):
        estimate = estimate_costs(graph, fetches, feed_fn, batch_size, **estimate_options)
        placement = place_costs(
            estimate.cost_graph,
            device_set,
            structure=estimate.imported.cost_graph,
            placer=placer,
            placer_options=with_split_rewrite_check(placer, placer_options, graph),
            target_device=target_device,
            simulate=simulate,
            coplace_gradients=coplace_gradients,
        )
        note("tfplace: measured and placed in %.1f s", time.perf_counter() - started)
    return placement


def place_costs(
    cost_graph: CostGraph,
    devices: DeviceSet,
    *,
    structure: nx.DiGraph | None = None,
    placer: str | None = None,
    placer_options: Mapping[str, Any] | None = None,
    target_device: str | DeviceModel | None = None,
    simulate: bool = True,
    progress: bool = True,
    coplace_gradients: bool = True,
) -> Placement:
    """Place a profiled step (a cost graph) on ``devices``; with ``structure``, the whole graph.

    Parameters
    ----------
    cost_graph : CostGraph
        The step's costs (:func:`estimate_costs`, or :func:`tfplace.core.costgraph.load_json`). Its edges
        are priced on the devices' typical link (a copy is placed when ``target_device`` converts it).
    devices : DeviceSet
    structure : networkx.DiGraph, optional
        The whole graph's structure (``ImportedGraph.cost_graph``): ops outside the step then get
        devices too (:func:`place_remaining_ops`), so that the placement applies to the graph.
    placer : str, optional
        A name of :data:`tfplace.placer.PLACERS`; default :data:`tfplace.placer.DEFAULT_PLACER`
        (``"auto"``: the fastest simulated placement that fits, among Celeritas and the baselines).
        ``"celeritas"`` is the paper's algorithm; ``"order_place"``, ``"m_etf"``, ``"m_sct"``,
        ``"m_topo"``, ``"metis"``, ``"dfs_topo"`` and ``"single"`` the baselines.
    placer_options : mapping, optional
        Keyword options of the placer (Celeritas: ``exploration_range``, ``cluster_memory``; every
        placer: ``memory_model``, ``"liveness"`` by default or the paper's ``"static"``).
    target_device : str or DeviceModel, optional
        When the devices are not the kind that was profiled (GPUs placed from a CPU profile), a
        device model (``"V100-32GB"``, ...) that turns measured times into the target's.
    simulate : bool
        Fill the estimated step time, peak memory and utilization from the simulator.
    progress : bool
        Show the stage and ``auto``'s search on standard error (see :func:`place`).
    coplace_gradients : bool
        Keep every gradient op on the device of the forward op it differentiates (the cost graph's
        ``gradient_of``); graphs without gradient ops are placed alike either way.

    Returns
    -------
    Placement
        With ``cost_graph`` set to the costs it was placed with; its warnings are logged too.
    """
    from tfplace.placer import DEFAULT_PLACER, place_cost_graph

    name = placer or DEFAULT_PLACER
    if target_device is not None:
        model = device_model(target_device) if isinstance(target_device, str) else target_device
        cost_graph = convert_graph(cost_graph, model)
    cost_graph.set_transfer_model(devices.typical_link)
    with quiet(not progress):
        note(
            "tfplace: placing %s ops of the step on %d devices with %s",
            f"{len(cost_graph):,}",
            len(devices),
            name,
        )
        placement = place_cost_graph(
            cost_graph,
            devices,
            name,
            simulate=simulate,
            coplace_gradients=coplace_gradients,
            **dict(placer_options or {}),
        )
    if structure is not None:
        placement.assignment = place_remaining_ops(structure, placement.assignment, devices)
    placement.cost_graph = cost_graph
    unconverted = unconverted_times_warning(cost_graph, devices)
    if unconverted:
        placement.warnings.append(unconverted)
    for warning in placement.warnings:
        logging.warning("tfplace: %s", warning)
    return placement


def split_rewrite_check(graph: Any) -> Callable[[Any], str | None]:
    """Why TensorFlow's rewrite (:mod:`tfplace.tf_graph.split_rewrite`) cannot run a split plan on
    ``graph`` (a ``tf.Graph``, ``GraphDef``, ``MetaGraphDef`` or a path of one), ``None`` when it can:
    the ``runnable`` check ``auto`` asks before a split plan wins (:mod:`tfplace.placer.auto`)."""

    def refusal(plan: Any) -> str | None:
        from tfplace.tf_graph.split_rewrite import rewrite_graph_def

        try:
            rewrite_graph_def(plan, graph, plan.batch_size)
        except ValueError as error:
            return str(error)
        return None

    return refusal


def with_split_rewrite_check(
    placer: str | None, options: Mapping[str, Any] | None, graph: Any
) -> Mapping[str, Any] | None:
    """``options`` with ``auto``'s ``runnable`` check on ``graph`` (:func:`split_rewrite_check`) when
    the placer is ``auto`` (the default) and the caller gave none."""
    from tfplace.placer import DEFAULT_PLACER

    if (placer or DEFAULT_PLACER) != "auto" or "runnable" in (options or {}):
        return options
    return {**(options or {}), "runnable": split_rewrite_check(graph)}


def measurement_placement(estimated: CostGraph, structure: nx.DiGraph, devices: DeviceSet) -> Placement:
    """Where Standard Evaluation step 2 measures ``estimated`` (:func:`tfplace.estimator.refine.refine_costs`):
    DFS-TOPO fills ``devices`` in order up to their memory, and the ops of ``structure`` outside the
    step follow (:func:`place_remaining_ops`)."""
    from tfplace.placer import place_cost_graph

    ordered = estimated.copy()
    ordered.set_transfer_model(devices.typical_link)
    # the static model: a real run at the target batch must not run out of memory
    placement = place_cost_graph(ordered, devices, "dfs_topo", simulate=False, memory_model="static")
    placement.assignment = place_remaining_ops(structure, placement.assignment, devices)
    return placement


def unconverted_times_warning(cost_graph: CostGraph, devices: DeviceSet) -> str:
    """The warning for GPUs placed with op times no device model converted (``""`` otherwise):
    the times are those of wherever the graph was profiled, a CPU here."""
    if "GPU" not in {device.kind for device in devices} or cost_graph.graph.get("device_model"):
        return ""
    return (
        "the op times are those measured where the graph was profiled; if that was not the target GPU, "
        f"give target_device (--target_device on the command line): {', '.join(DEVICE_MODELS)}"
    )


def place_remaining_ops(
    structure: nx.DiGraph, assignment: Mapping[str, str], devices: DeviceSet
) -> dict[str, str]:
    """Extend ``assignment`` to every op of ``structure`` (ops outside the placed step).

    In topological order, an unassigned op takes the device of its co-location group when a member
    has one, else the device of its first assigned input that can run it, else the first device
    that can (a fallback CPU when no target can). Groups stay whole and device kinds are honored.
    """
    result = dict(assignment)
    group_device = {
        attrs["colocation_group"]: result[op]
        for op, attrs in structure.nodes(data=True)
        if op in result and attrs["colocation_group"] is not None
    }
    everything = devices.all_devices
    for op in nx.topological_sort(structure):
        if op in result:
            continue
        attrs = structure.nodes[op]
        group = attrs["colocation_group"]
        if group is not None and group in group_device:
            result[op] = group_device[group]
            continue
        kinds = attrs["device_kinds"]  # the importer gives every op of a group the same kinds
        inputs = [result[p] for p in structure.predecessors(op) if p in result]
        preferred = dict.fromkeys([*inputs, *(d.name for d in everything)])
        allowed = [d for d in preferred if kinds is None or DeviceName.parse(d).kind in kinds]
        choice = allowed[0] if allowed else everything[0].name
        result[op] = choice
        if group is not None:
            group_device[group] = choice
    return result
