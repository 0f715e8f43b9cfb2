"""Run a placed graph for real and time its training steps: the measurement a placement is judged by.

:func:`run_placement` writes a :class:`~tfplace.core.placement.Placement` into a copy of the graph and
runs training steps where the placement says:

- devices named ``/device:CPU:i`` (job ``localhost``): one process with that many virtual CPUs
  (:func:`~tfplace.tf_graph.session.virtual_cpu_config`); transfers between them are pointer
  hand-offs;
- devices named ``/job:worker/task:k/device:CPU:0``: TensorFlow worker processes on the loopback
  interface (:class:`~tfplace.tf_graph.cluster.LocalCluster`), started and stopped here when no
  ``cluster`` is given; tensors crossing tasks go through gRPC;
- anything else (GPUs, several hosts): a cluster the caller started, given as its session target.

Timing follows Celeritas section 6.3: the first steps are warm-up (allocations, kernel caches, the
gRPC channels) and are dropped; the mean of the next ones is the step time. Then the last steps run
with ``FULL_TRACE`` (outside the timing, since tracing costs time), and the trace is read for where
each op ran (:func:`~tfplace.tf_graph.session.device_mismatches`) and written as a Chrome trace
(``tensorflow.python.client.timeline``) beside the simulator's trace of the same placement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from absl import logging

from tfplace.core.costgraph import atomic_write_text
from tfplace.core.devices import DeviceName
from tfplace.core.placement import Placement
from tfplace.core.progress import Progress, quiet
from tfplace.tf_graph.native_log import filtered_native_stderr

__all__ = ["RunReport", "placed_copy", "run_placement", "session_target_kind", "simulated_trace_path"]

FeedFunction = Callable[[int], Mapping[Any, Any]]


@dataclass(frozen=True)
class RunReport:
    """What running a placed graph measured.

    Attributes
    ----------
    step_seconds : tuple of float
        Wall-clock seconds of each timed step (after the warm-up, before the traced steps).
    warmup_seconds : tuple of float
        Seconds of each dropped warm-up step.
    traced_step_seconds : tuple of float
        Seconds of each ``FULL_TRACE`` step (slower than untraced steps: not part of the timing).
    mismatches : list of (op, placed device, device it ran on)
        From the last traced step; empty when every op ran where it was placed.
    trace_path : str or None
        The real step's Chrome trace, when asked for.
    simulated_trace_path : str or None
        The simulator's Chrome trace of the same placement beside it (when the placement holds
        the cost graph it was made with).
    target : str
        The session target: ``""`` in-process, ``grpc://...`` on a cluster.
    devices : tuple of str
        The devices the placement uses.
    values : list
        The fetched values of every step, warm-up and traced steps included, in order.
    run_metadata : list of RunMetadata
        One per traced step, with FULL_TRACE step stats of every device.
    load_average : tuple of float
        ``os.getloadavg()`` after the timed steps: other processes on the machine distort timings.
    """

    step_seconds: tuple[float, ...]
    warmup_seconds: tuple[float, ...]
    traced_step_seconds: tuple[float, ...]
    mismatches: list[tuple[str, str, str]]
    trace_path: str | None
    simulated_trace_path: str | None
    target: str
    devices: tuple[str, ...]
    values: list[Any] = field(repr=False)
    run_metadata: list[Any] = field(repr=False)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def mean_step_time(self) -> float:
        """Mean seconds of the timed steps (Celeritas section 6.3's step time)."""
        return sum(self.step_seconds) / len(self.step_seconds)

    @property
    def median_step_time(self) -> float:
        """Median seconds of the timed steps, robust to a step slowed by another process."""
        ordered = sorted(self.step_seconds)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def session_target_kind(placement: Placement) -> str:
    """How :func:`run_placement` runs ``placement`` without a ``cluster``.

    Returns
    -------
    str
        ``"in_process"`` when every device is a local one (``/device:CPU:i``, ``/device:GPU:i``);
        ``"local_cluster"`` when every device is ``/job:worker/task:k/device:CPU:0``.

    Raises
    ------
    ValueError
        For other devices (another job, GPUs of workers, several jobs): they need a cluster the
        caller runs; the message names the devices.
    """
    specs = {DeviceName.parse(name) for name in placement.assignment.values()}
    jobs = {spec.job for spec in specs}
    if jobs == {"localhost"}:
        return "in_process"
    from tfplace.tf_graph.cluster import JOB

    if jobs == {JOB} and all(spec.kind == "CPU" and spec.index == 0 for spec in specs):
        return "local_cluster"
    names = ", ".join(sorted(spec.full_name for spec in specs))
    raise ValueError(
        f"tfplace starts loopback workers only for /job:{JOB}/task:k/device:CPU:0 devices; "
        f"for {names} pass cluster=<session target of a running cluster>"
    )


def simulated_trace_path(trace_path: str | os.PathLike[str]) -> Path:
    """Where the simulated trace goes beside the real one: ``step.json`` -> ``step.simulated.json``."""
    path = Path(trace_path)
    return path.with_name(f"{path.stem}.simulated{path.suffix or '.json'}")


def run_placement(
    graph: Any,
    placement: Placement,
    fetches: Any,
    feed_fn: FeedFunction,
    *,
    batch_size: int,
    steps: int = 10,
    warmup_steps: int = 3,
    cluster: Any = None,
    init_op: Any = None,
    trace_path: str | os.PathLike[str] | None = None,
    traced_steps: int = 1,
    config: Any = None,
    progress: bool = True,
) -> RunReport:
    """Run ``graph`` placed by ``placement`` and time its steps.

    The graph itself is not changed: the placement is written into a copy (its ``MetaGraphDef``,
    so variables and collections come along).

    Parameters
    ----------
    graph : tf.Graph, GraphDef, MetaGraphDef or path of a saved one
    placement : Placement
        A device for every op of ``graph`` (:func:`tfplace.place` gives one).
    fetches : op, tensor, name, or a list or dict of them
        What one step runs (the train op, and the loss to see it).
    feed_fn : callable
        ``feed_fn(batch_size)`` returns the feed dict; it is called once and fed to every step.
    batch_size : int
        The batch size ``feed_fn`` is called with.
    steps : int
        Timed steps, after the warm-up.
    warmup_steps : int
        Steps run first and dropped (Celeritas drops 5 and averages the next 50).
    cluster : LocalCluster or str, optional
        A running cluster (a :class:`~tfplace.tf_graph.cluster.LocalCluster` or a session target
        ``"grpc://host:port"``) for devices of jobs. Without it, loopback workers are started for
        ``/job:worker`` devices and stopped at the end, also after an error
        (:func:`session_target_kind`).
    init_op : op or name, optional
        Initializes the variables; by default every variable's initializer.
    trace_path : path, optional
        Write the last traced step as a Chrome trace there, and the simulated step of the same
        placement at :func:`simulated_trace_path` when ``placement.cost_graph`` is set.
    traced_steps : int
        ``FULL_TRACE`` steps after the timed ones (at least 1).
    config : tf.compat.v1.ConfigProto, optional
        Session config. By default soft placement is off (a misplaced op is an error) and so is
        Grappler's remapper, which fuses ops across devices; in-process, one virtual CPU per
        ``/device:CPU:i`` of the placement.
    progress : bool
        Show the steps as they run on standard error (:mod:`tfplace.core.progress`).

    Returns
    -------
    RunReport

    Raises
    ------
    ValueError
        Bad step counts, feeds, or devices no session here can create (a GPU placement run
        in-process on a machine without GPUs names the missing devices).
    tfplace.core.placement.PlacementError
        The placement misses ops of the graph or splits a co-location group.
    """
    from tfplace.tf_graph.cluster import LocalCluster

    if steps < 1 or warmup_steps < 0 or traced_steps < 1:
        raise ValueError(
            f"need steps >= 1, warmup_steps >= 0, traced_steps >= 1; got {steps}, {warmup_steps}, {traced_steps}"
        )
    if cluster is None and session_target_kind(placement) == "in_process":
        check_local_devices(placement)
    placed_graph, run_fetches, feeds, initializer = placed_copy(
        graph, placement, fetches, feed_fn(batch_size), init_op, batch_size
    )
    run = _Run(steps, warmup_steps, traced_steps, progress)
    if cluster is not None:
        target = cluster if isinstance(cluster, str) else cluster.target
        run.execute(target, placed_graph, run_fetches, feeds, initializer, config or _remote_config())
    elif session_target_kind(placement) == "in_process":
        session_config = config or _local_config(placement)
        run.execute("", placed_graph, run_fetches, feeds, initializer, session_config)
    else:
        tasks = 1 + max(DeviceName.parse(d).task for d in placement.assignment.values())
        logging.info("tfplace: starting %d loopback workers", tasks)
        with LocalCluster(tasks) as local:
            run.execute(
                local.target, placed_graph, run_fetches, feeds, initializer, config or _remote_config()
            )
    return run.report(placement, trace_path, placed_graph)


def placed_copy(
    graph: Any, placement: Placement, fetches: Any, feeds: Mapping[Any, Any], init_op: Any, batch_size: int
) -> tuple[Any, Any, dict[str, Any], list[Any]]:
    """A new graph with the placement's devices (rewritten into pieces when it came from a split
    plan, at ``batch_size``), the fetches by name, validated feeds, initializer."""
    import tensorflow as tf

    from tfplace.tf_graph.apply import apply_placement
    from tfplace.tf_graph.fetches import fetch_closure, validate_feeds
    from tfplace.tf_graph.importer import load_graph
    from tfplace.tf_graph.session import default_initializers
    from tfplace.tf_graph.split_rewrite import apply_split_plan

    source = load_graph(graph)
    with source.as_default():
        meta = tf.compat.v1.train.export_meta_graph()
    if placement.split_plan is not None:
        placed = load_graph(apply_split_plan(placement.split_plan, meta, batch_size))
    else:
        placed = load_graph(apply_placement(placement, meta))
    by_name = tf.nest.map_structure(lambda f: f if isinstance(f, str) else f.name, fetches)
    elements = [placed.as_graph_element(name) for name in tf.nest.flatten(by_name)]
    arrays = validate_feeds(placed, feeds, [])  # keyed by tensor name
    validate_feeds(placed, arrays, fetch_closure(placed, elements, arrays))  # every needed one fed
    if init_op is None:
        initializer = default_initializers(placed)
    else:
        initializer = [placed.as_graph_element(init_op if isinstance(init_op, str) else init_op.name)]
    return placed, by_name, arrays, initializer


def check_local_devices(placement: Placement) -> None:
    """Refuse, naming them, the placement's devices of kinds this machine lacks (GPUs on a CPU-only
    machine), before a session fails on them with TensorFlow's own error."""
    import tensorflow as tf

    by_kind: dict[str, set[str]] = {}
    for device in placement.assignment.values():
        by_kind.setdefault(DeviceName.parse(device).kind, set()).add(device)
    for kind, names in sorted(by_kind.items()):
        if kind != "CPU" and not tf.config.list_physical_devices(kind):
            raise ValueError(
                f"the placement uses {kind} devices but this machine has none ({', '.join(sorted(names))}): "
                "to try it here, place on virtual CPUs (/device:CPU:0-3) or run it on a cluster that has them"
            )


def _local_config(placement: Placement) -> Any:
    from tfplace.tf_graph.session import virtual_cpu_config

    pieces = [d for devices in placement.pieces.values() for d in devices]
    specs = [DeviceName.parse(d) for d in [*placement.assignment.values(), *pieces]]
    return virtual_cpu_config(1 + max((spec.index for spec in specs if spec.kind == "CPU"), default=0))


def _remote_config() -> Any:
    """Soft placement and the remapper off, as in :func:`_local_config`, without local devices."""
    from tfplace.tf_graph.session import virtual_cpu_config

    config = virtual_cpu_config(1)
    config.ClearField("device_count")
    return config


class _Run:
    """The steps of one run and what they measured."""

    def __init__(self, steps: int, warmup_steps: int, traced_steps: int, progress: bool = True) -> None:
        self.progress = progress
        self.steps = steps
        self.warmup_steps = warmup_steps
        self.traced_steps = traced_steps
        self.seconds: dict[str, list[float]] = {"warm-up": [], "timed": [], "traced": []}
        self.values: list[Any] = []
        self.run_metadata: list[Any] = []
        self.target = ""
        self.load_average = (0.0, 0.0, 0.0)

    def execute(
        self, target: str, graph: Any, fetches: Any, feeds: Any, initializer: Any, config: Any
    ) -> None:
        import tensorflow as tf

        self.target = target
        trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        phases = [("warm-up", self.warmup_steps), ("timed", self.steps), ("traced", self.traced_steps)]
        total = sum(count for _, count in phases)
        with (
            tf.compat.v1.Session(target, graph=graph, config=config) as session,
            quiet(not self.progress),
            Progress("running steps", total) as progress,
        ):
            session.run(initializer)
            for phase, count in phases:
                for _ in range(count):
                    options, metadata = (
                        (trace, tf.compat.v1.RunMetadata()) if phase == "traced" else (None, None)
                    )
                    start = time.perf_counter()
                    with filtered_native_stderr():
                        self.values.append(
                            session.run(fetches, feeds, options=options, run_metadata=metadata)
                        )
                    seconds = time.perf_counter() - start
                    self.seconds[phase].append(seconds)
                    if metadata is not None:
                        self.run_metadata.append(metadata)
                    progress.advance(f"{phase}, {seconds:.4f} s")
                if phase == "timed":
                    self.load_average = os.getloadavg()

    def report(self, placement: Placement, trace_path: Any, graph: Any) -> RunReport:
        from tfplace.tf_graph.session import device_mismatches

        real, simulated = None, None
        if trace_path is not None:
            real, simulated = _write_traces(self.run_metadata[-1], graph, placement, Path(trace_path))
        timed = self.seconds["timed"]
        logging.info(
            "tfplace: mean step %.4f s over %d steps (%d warm-up dropped)",
            sum(timed) / len(timed),
            len(timed),
            self.warmup_steps,
        )
        return RunReport(
            step_seconds=tuple(timed),
            warmup_seconds=tuple(self.seconds["warm-up"]),
            traced_step_seconds=tuple(self.seconds["traced"]),
            mismatches=device_mismatches(self.run_metadata[-1], placement),
            trace_path=real,
            simulated_trace_path=simulated,
            target=self.target,
            devices=tuple(sorted(set(placement.assignment.values()))),
            values=self.values,
            run_metadata=self.run_metadata,
            load_average=self.load_average,
        )


def _write_traces(run_metadata: Any, graph: Any, placement: Placement, path: Path) -> tuple[str, str | None]:
    """The real step's Chrome trace at ``path``, the simulated one beside it when there is a cost graph."""
    from tensorflow.python.client import timeline

    atomic_write_text(path, timeline.Timeline(run_metadata.step_stats, graph).generate_chrome_trace_format())
    cost_graph = placement.cost_graph
    if cost_graph is None:
        return str(path), None
    from tfplace.simulator import simulate, to_chrome_trace

    op_devices = {op: placement.assignment[op] for op in cost_graph}
    result = simulate(cost_graph, op_devices, placement.devices, record=True)
    simulated = simulated_trace_path(path)
    to_chrome_trace(result, placement.devices, simulated)
    return str(path), str(simulated)
