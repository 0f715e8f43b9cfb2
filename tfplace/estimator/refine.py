"""Standard Evaluation, step 2 (Celeritas section 4.2.1): measure the target batch itself.

Step 1 (:mod:`~tfplace.estimator.regression`) predicts every op's costs at the target batch from
small batches that fit one device; compute time follows the batch size only roughly. Step 2 runs
the graph *at the target batch* for a few steps, spread over the available devices by the
memory-aware sequential DFS-TOPO placement (section 4.2.2), since the target batch may not fit one
device; it reads each op's compute time, output bytes and temporary memory from FULL_TRACE step
stats and puts them in place of the predictions.

Measurement choices follow :func:`~tfplace.estimator.profiler.profiling_config`: one intra-op
thread, one inter-op thread per device and no graph rewrites, so each record times one GraphDef
op, one at a time per device; per op,
the median over the traced steps (:func:`~tfplace.estimator.profiler.median_cost`). Persistent
memory does not depend on the batch and is kept from step 1 (variables' buffers are not reported
by step stats), and so are the aliased outputs: step 1 saw every input of an op on one device,
where a placement over several devices hides the inputs that arrive from another one. Ops the
traces do not report keep their predictions, and so do the output slots they leave out (a lowered
``While``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from absl import logging

from tfplace.core.costgraph import UNTRACED_STEP, CostGraph
from tfplace.core.device_model import least_cost_estimate
from tfplace.core.devices import DeviceName
from tfplace.core.placement import Placement
from tfplace.estimator.profiler import OpCost, median_cost
from tfplace.estimator.regression import fill_cost_graph
from tfplace.tf_graph.step_stats import OpTrace, collect_op_traces

__all__ = ["Refinement", "measured_costs", "refine_costs"]


@dataclass(frozen=True)
class Refinement:
    """The outcome of Standard Evaluation step 2.

    Attributes
    ----------
    cost_graph : CostGraph
        The step's cost graph with measured costs wherever the traces had them.
    measured_ops : frozenset of str
        The ops whose costs were measured (the others keep step 1's predictions).
    placement : Placement
        The DFS-TOPO placement the measurement ran with.
    report : RunReport
        What the run measured (step times, traces, where each op ran).
    """

    cost_graph: CostGraph
    measured_ops: frozenset[str]
    placement: Any
    report: Any


def measured_costs(
    run_metadata: list[Any], predicted: Mapping[str, OpCost]
) -> tuple[dict[str, OpCost], frozenset[str]]:
    """Per op of ``predicted``, the costs the traced steps measured, else the prediction.

    Parameters
    ----------
    run_metadata : list of RunMetadata
        FULL_TRACE steps at the target batch.
    predicted : mapping of str to OpCost
        Step 1's costs of every op of the step.

    Returns
    -------
    costs : dict of str to OpCost
        Compute time, output bytes and temporary bytes: the median over the steps that traced the
        op; output slots no trace reported, persistent bytes and aliased outputs: the prediction's.
    measured : frozenset of str
        The ops that had traces.
    """
    traces: dict[str, list[OpTrace]] = {}
    for metadata in run_metadata:
        for op, trace in collect_op_traces(metadata, predicted).items():
            traces.setdefault(op, []).append(trace)
    costs = dict(predicted)
    for op, op_traces in traces.items():
        compute, outputs, temporary = median_cost(op_traces)
        guess = predicted[op]
        costs[op] = OpCost(
            compute_time=compute,
            output_sizes=outputs + guess.output_sizes[len(outputs) :],
            temporary_bytes=temporary,
            persistent_bytes=guess.persistent_bytes,
            aliased_outputs=guess.aliased_outputs,
            kernel_time=least_cost_estimate([trace.kernel_time for trace in op_traces]),
        )
    return costs, frozenset(traces)


def refine_costs(
    graph: Any,
    fetches: Any,
    feed_fn: Callable[[int], Mapping[Any, Any]],
    estimated: CostGraph,
    placement: Placement,
    run_placement: Callable[..., Any],
    *,
    warmup_steps: int = 2,
    traced_steps: int = 3,
    init_op: Any = None,
    cluster: Any = None,
) -> Refinement:
    """Replace step 1's predictions in ``estimated`` by costs measured at its batch size.

    Parameters
    ----------
    graph : tf.Graph, GraphDef, MetaGraphDef or path of a saved one
    fetches : op, tensor, name or list of them
        What one training step runs.
    feed_fn : callable
        ``feed_fn(batch_size)`` returns the feed dict of one step.
    estimated : CostGraph
        Step 1's cost graph of the training step, with ``graph.graph["batch_size"]`` the target batch.
    placement : Placement
        Where to measure, every op of ``graph`` placed (:func:`tfplace.api.measurement_placement`:
        DFS-TOPO fills the devices in order up to their memory). Virtual CPUs (``/device:CPU:0-1``),
        loopback workers (``/job:worker/task:0-1/device:CPU:0``) or the GPUs of the cluster given as
        ``cluster``.
    run_placement : callable
        Runs ``placement`` and traces it (:func:`tfplace.runner.run_placement`), passed in by the
        API that sits above the estimator.
    warmup_steps, traced_steps : int
        Untraced steps first, then traced steps whose per-op medians are taken.
    init_op : op or name, optional
        Initializes the variables; by default every variable's initializer.
    cluster : LocalCluster or str, optional
        See :func:`tfplace.runner.run_placement`.

    Returns
    -------
    Refinement
    """
    batch_size = int(estimated.graph["batch_size"])
    logging.info(
        "tfplace: Standard Evaluation step 2 at batch %d on %s",
        batch_size,
        ", ".join(placement.devices.names),
    )
    report = run_placement(
        graph,
        placement,
        fetches,
        feed_fn,
        batch_size=batch_size,
        steps=1,
        warmup_steps=warmup_steps,
        traced_steps=traced_steps,
        init_op=init_op,
        cluster=cluster,
        config=_measurement_config(placement, cluster),
    )
    predicted = {
        op: OpCost(
            compute_time=attrs["compute_time"],
            output_sizes=attrs["output_sizes"],
            temporary_bytes=attrs["temporary_bytes"],
            persistent_bytes=attrs["persistent_bytes"],
            aliased_outputs=attrs.get("aliased_outputs", ()),
            kernel_time=attrs.get("kernel_time"),
        )
        for op, attrs in estimated.nodes(data=True)
    }
    costs, measured = measured_costs(report.run_metadata, predicted)
    refined = fill_cost_graph(estimated, costs)
    refined.graph["refined_ops"] = len(measured)
    refined.graph.pop(UNTRACED_STEP, None)  # timed beside step 1's op times, not these
    logging.info("tfplace: measured %d of %d ops at batch %d", len(measured), len(estimated), batch_size)
    return Refinement(cost_graph=refined, measured_ops=measured, placement=placement, report=report)


def _measurement_config(placement: Any, cluster: Any) -> Any:
    """:func:`~tfplace.estimator.profiler.profiling_config` with soft placement off; in-process,
    one virtual CPU per ``/device:CPU:i`` and one inter-op thread per device.

    The devices of one process share its inter-op threads. With a single thread, a kernel that
    the executor hands to the pool waits there while the other device's executor holds the
    thread, and its record counts the wait: Inception V3's ``MaxPoolGrad`` measured 4.2 ms
    instead of 0.1 ms that way. A thread per device runs each device's ops one at a time, as
    the simulator assumes.
    """
    from tfplace.estimator.profiler import profiling_config

    config = profiling_config()
    config.allow_soft_placement = False
    specs = {DeviceName.parse(name) for name in placement.assignment.values()}
    if cluster is None and all(spec.job == "localhost" for spec in specs):
        config.device_count["CPU"] = 1 + max((s.index for s in specs if s.kind == "CPU"), default=0)
        config.inter_op_parallelism_threads = len(specs)
    return config
