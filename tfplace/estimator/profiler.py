"""Standard Evaluation, rough estimation (Celeritas section 4.2.1): profile a graph at small batches.

:func:`profile_graph` runs the step a user wants placed at a few batch sizes that fit one device,
traces it, and records per op the compute time, the bytes of every output, temporary and
persistent memory. :class:`~tfplace.estimator.regression.OpCostRegression` then extrapolates these
to the batch size to place.

Measurement choices (each documented where it is made):

- threads: one inter-op thread, so ops run one at a time and a record measures one op, not one
  op sharing the cores with others; one intra-op thread unless the config sets another count
  (:func:`profiling_config`);
- process: each session on a worker process of its own under TensorFlow's BFC allocator for the
  CPU, where a traced step's own records do not slow its allocating kernels down
  (:mod:`tfplace.estimator.profiling_process`; this process for a step that calls back into its
  Python, or with ``process="this"``);
- graph rewrites: Grappler and the classic graph optimizer are off by default, so that each op
  of the GraphDef runs as itself (fusion would hide ``Conv2D`` inside ``_FusedConv2D`` named after
  its ``Relu``; constant folding and CSE would remove ops) and gets its own measurement;
- repeats (:mod:`tfplace.estimator.statistics`, :class:`RepeatPolicy`): the traced steps are
  taken in turns across the batch sizes (a slow phase of the machine then affects every batch
  size, not one); a step much slower than the others at its batch size is dropped; the op times
  a preemption of TensorFlow's thread inflated are taken out, told by the scheduler's accounting
  read around each step (:mod:`tfplace.estimator.thread_accounting`,
  :func:`~tfplace.estimator.statistics.without_preemption`); per op the tenth quantile of the
  kept steps' times by Harrell and Davis's estimator, all ops scaled by one factor so that they
  add up to that quantile of the steps (preemption only adds time; or each op's own quantile
  unscaled, the mean of its lowest tenth, a trimmed mean or the median:
  :func:`~tfplace.estimator.statistics.location`), with its error measured
  between the even- and the odd-numbered steps
  (:attr:`ProfileSet.time_errors`); rounds of steps go on until the op times' relative error,
  weighted by time, is below a target at every batch size, or up to a most;
- compute time per record: its kernel's (:func:`~tfplace.tf_graph.step_stats.node_kernel_time`;
  the node's handling around it is mostly the tracer's, and a real step's own is the calibrated
  per-op overhead), or a GPU kernel's on its stream; times of zero
  (records below the clock's resolution) are raised to :data:`TIME_FLOOR`;
- persistent memory is measured once (it does not depend on the batch): variables' buffers from
  their static sizes, other state from the kernels' reports at the first batch size;
- an output slot that is an input's buffer (TensorFlow forwarded it: see
  :mod:`tfplace.tf_graph.step_stats`) is recorded in :attr:`OpCost.aliased_outputs` at a batch
  size only when every traced step there says so: whether a kernel writes in place depends on
  the order ops ran in, and counting a forwarded output as new memory only overestimates;
- ops of the step that no trace reports get shape-based estimates
  (:mod:`tfplace.estimator.shapes`) and are listed in :attr:`ProfileSet.estimated_ops`;
- with ``TFPLACE_PERTURB_PROFILES=SEED`` in the environment, every op's measured compute time is
  multiplied by a seeded factor in 0.6-1.6 and its temporary bytes by one in 0-2, as another
  machine might measure them (:mod:`tfplace.estimator.perturb`); the seed is part of the cache key.

TensorFlow is imported inside the functions that run it; the data classes need none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfplace.core.costgraph import AliasedOutput
from tfplace.core.device_model import least_cost_estimate
from tfplace.core.progress import Progress, track
from tfplace.estimator.cache import ProfileCache, profile_key
from tfplace.estimator.perturb import cost_factors, perturbation_seed
from tfplace.estimator.profiling_process import (
    PROFILED_KIND,
    WORKER_ENVIRONMENT,
    ProfilingProcess,
    profiling_process_for,
    profiling_session,
)
from tfplace.estimator.scheduling_priority import raised_priority
from tfplace.estimator.shapes import (
    UNKNOWN_OP_TIME,
    estimate_op,
    fit_flop_rate,
    shaped_graph,
    variable_bytes,
)
from tfplace.estimator.statistics import (
    RepeatPolicy,
    across_sessions,
    interleaved_rounds,
    kept_steps,
    location,
    split_half_error,
    weighted_relative_error,
    without_preemption,
)
from tfplace.estimator.step_timing import back_to_back_seconds, step_statistic, timed_step
from tfplace.estimator.thread_accounting import preemptions_between, tensorflow_threads
from tfplace.tf_graph.fetches import (
    as_graph,
    element_name,
    fetch_closure,
    fetch_elements,
    step_graph_def,
    tensor_name,
    validate_feeds,
)
from tfplace.tf_graph.native_log import filtered_native_stderr
from tfplace.tf_graph.step_stats import OpTrace, collect_op_traces, output_shapes

__all__ = [
    "CPU_RUNTIME_VARIABLES",
    "STEADY_STEPS_EVERY",
    "TIME_FLOOR",
    "UNTRACED_BEFORE_TRACE",
    "OpCost",
    "ProfileSet",
    "RepeatPolicy",
    "TracedSteps",
    "median_cost",
    "profile_graph",
    "profiling_config",
    "shared_aliases",
    "time_statistics",
]

TIME_FLOOR = 1e-7
"""Seconds a measured op takes at least (0.1 us). Records shorter than the clock resolution show
0. Since profiles count kernel times (format 10) the smallest kernels take 20-90 ns, so about a
fifth of a training graph's ops sit at the floor: 756 of the small NMT's 3,873, adding at most
0.08 ms to its 3.5 ms step (session 12)."""

UNTRACED_BEFORE_TRACE = 2
"""Untraced steps of its batch size the profiler runs before each traced step, as a training job
runs its steps back to back. A traced step right after another one runs its kernels slower than a
real step: the small NMT's kernels summed 3.8-4.3 ms in consecutive traced steps, 3.3-3.4 ms after
one untraced step and 3.0-3.5 ms after two, against 3.2-3.4 ms of the whole untraced step; the
small Transformer's 16.9-18.6, 16.2 and 14.5-16.9 ms against 13.3-13.8 (session 12; more than two
did not bring either lower). Tensor Holography's large kernels did not move (10.2-10.7 ms)."""

STEADY_STEPS_EVERY = 3
"""A worker's profile times this process's steady step (eight untimed and two timed steps,
:func:`~tfplace.estimator.step_timing.back_to_back_seconds`) before the first traced step of
each batch size in each session and every third after it. Before every one, the profiles of
``benchmarks/estimation_accuracy.py`` took 2.1-2.5 times as long (Inception V3 407 s against
161, the NMT 190 against 101, session 32); the step's statistic needs a few samples per batch
size, not one per traced step."""

CPU_RUNTIME_VARIABLES = ("TF_CPU_ALLOCATOR_USE_BFC", "TF_ENABLE_ONEDNN_OPTS")
"""Environment variables that change what a CPU op costs, part of a profile's key when set:
TensorFlow's CPU allocator (read when the process creates its first CPU device) and oneDNN's
kernels. Under the default allocator a traced step's own records fragment the heap, so the
kernels write their outputs to buffers not in the caches and the small Transformer's traced
kernels summed 0.7-1.1 us per op above its untraced step; under ``TF_CPU_ALLOCATOR_USE_BFC=true``
within 0.25 us, but ``benchmarks/fidelity.py``'s real steps ran up to 13% slower (session 13,
``benchmarks/op_overhead_by_model.py``, ``docs/experiments.md``). So the profiler traces in a
worker process under it (:mod:`tfplace.estimator.profiling_process`, session 19); these variables
of the process profiled in still key the profile."""

_PROFILE_FORMAT = 12
"""Version of :meth:`ProfileSet.to_dict`'s document, part of the cache key. 2: costs record
aliased outputs, and a view's output size is its own (profiles of format 1 lack both). 3: the
temporary memory of a lowered loop is what its runtime nodes allocated, not every output they
passed on. 4: it is the most those nodes held at once, not the sum over the iterations. 5: times are a
robust statistic over a number of steps chosen by their spread, with their standard errors and the
steps kept and taken. 6: the errors (and so the number of steps) are measured between the even- and
the odd-numbered steps. 7: costs record the time of the op's kernels alone. 8: observations a
preemption of the op-running thread inflated are taken out
(:func:`~tfplace.estimator.statistics.without_preemption`). 9: the kernel time is the least the
executor's running estimate of it gets to (:func:`~tfplace.core.device_model.least_cost_estimate`),
not the median. 10: a CPU op's compute time is its kernels' time, without the node's handling
around them (:func:`~tfplace.tf_graph.step_stats.node_kernel_time`), and each traced step follows
:data:`UNTRACED_BEFORE_TRACE` untraced ones. 11: the untraced steps are timed too
(:attr:`ProfileSet.untraced_step_times`) and the profile says where it ran (``process``). 12: a
profile on a worker times the untraced steps in this process too, per CPU device kind."""


@dataclass(frozen=True)
class OpCost:
    """The costs of one op at one batch size, in the units of the cost graph (seconds, bytes).

    ``aliased_outputs`` lists ``(slot, producer, producer_slot)`` for the output slots that are
    the buffer of the op's input ``producer:producer_slot`` (the cost graph's attribute of that
    name): the op allocates nothing for them. ``kernel_time`` is the part of ``compute_time`` its
    kernels ran, by the least the executor's running estimate of it gets to over the repeats
    (:func:`~tfplace.core.device_model.least_cost_estimate`; the cost graph's attribute of that
    name), ``None`` when not measured.
    """

    compute_time: float
    output_sizes: tuple[int, ...]
    temporary_bytes: int
    persistent_bytes: int
    aliased_outputs: tuple[AliasedOutput, ...] = ()
    kernel_time: float | None = None

    def to_list(self) -> list[Any]:
        aliases = [list(alias) for alias in self.aliased_outputs]
        return [
            self.compute_time,
            list(self.output_sizes),
            self.temporary_bytes,
            self.persistent_bytes,
            aliases,
            self.kernel_time,
        ]

    @classmethod
    def from_list(cls, values: Sequence[Any]) -> OpCost:
        time_, sizes, temporary, persistent, aliases, kernel = values
        return cls(
            float(time_),
            tuple(int(s) for s in sizes),
            int(temporary),
            int(persistent),
            tuple((int(slot), str(producer), int(source)) for slot, producer, source in aliases),
            None if kernel is None else float(kernel),
        )


@dataclass
class ProfileSet:
    """Per-op costs measured at several batch sizes: the input of the regression.

    Attributes
    ----------
    batch_sizes : tuple of int
        Ascending.
    costs : dict of int to dict of str to OpCost
        ``costs[batch_size][op]``, for every op the fetches need (measured or estimated).
    estimated_ops : tuple of str
        Ops no trace reported: all their costs are shape-based estimates.
    estimated_outputs : tuple of str
        Ops that were traced but whose output slots were not all reported (a lowered ``While``):
        those slots' sizes are shape-based estimates.
    step_times : dict of int to float
        Median wall-clock seconds of a kept traced step per batch size.
    untraced_step_times : dict of str to dict of int to float
        Per CPU device kind the steps ran as (:data:`~tfplace.core.device_model.CPU_KINDS`: the
        profiling worker's ``"loopback"``, this process's ``"virtual"``) and batch size, the whole
        untraced step: :func:`~tfplace.estimator.step_timing.step_statistic` of the worker's
        untraced steps before the traced ones that ran back to back with another of their batch
        size (all of :data:`UNTRACED_BEFORE_TRACE` but the first), and of this process's steps
        timed back to back in the steady state beside them; what the step costs beyond its ops'
        traced times (:meth:`untraced_steps`).
    process : {"worker", "this"}
        Where the steps ran (:mod:`tfplace.estimator.profiling_process`).
    time_errors : dict of int to dict of str to float
        ``time_errors[batch_size][op]``: the standard error of the op's measured compute time
        measured from its repeats (:func:`~tfplace.estimator.statistics.split_half_error`); absent
        for estimated ops.
    steps : dict of int to tuple of (int, int)
        Traced steps kept (not outliers) and taken per batch size.
    devices : dict of str to str
        The device each traced op ran on (at the largest batch size).
    fetches : tuple of str
        Names of the fetched tensors or ops.
    key : str
        Cache key of this profile (:func:`tfplace.estimator.cache.profile_key`).
    profiling_seconds : float
        Wall-clock seconds the profiling took (TensorFlow runs and estimates).
    from_cache : bool
        True when this profile was read from the cache instead of measured.
    """

    batch_sizes: tuple[int, ...]
    costs: dict[int, dict[str, OpCost]]
    estimated_ops: tuple[str, ...] = ()
    estimated_outputs: tuple[str, ...] = ()
    step_times: dict[int, float] = field(default_factory=dict)
    untraced_step_times: dict[str, dict[int, float]] = field(default_factory=dict)
    process: ProfilingProcess = "worker"
    time_errors: dict[int, dict[str, float]] = field(default_factory=dict)
    steps: dict[int, tuple[int, int]] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    fetches: tuple[str, ...] = ()
    key: str = ""
    profiling_seconds: float = 0.0
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form (read back by :meth:`from_dict`)."""
        return {
            "format": _PROFILE_FORMAT,
            "batch_sizes": list(self.batch_sizes),
            "costs": {
                str(b): {op: cost.to_list() for op, cost in per_op.items()}
                for b, per_op in self.costs.items()
            },
            "estimated_ops": list(self.estimated_ops),
            "estimated_outputs": list(self.estimated_outputs),
            "step_times": {str(b): t for b, t in self.step_times.items()},
            "untraced_step_times": {
                kind: {str(b): t for b, t in steps.items()}
                for kind, steps in self.untraced_step_times.items()
            },
            "process": self.process,
            "time_errors": {str(b): errors for b, errors in self.time_errors.items()},
            "steps": {str(b): list(counts) for b, counts in self.steps.items()},
            "devices": self.devices,
            "fetches": list(self.fetches),
            "key": self.key,
            "profiling_seconds": self.profiling_seconds,
        }

    def untraced_steps(self, batch_size: int) -> dict[str, float]:
        """The whole untraced step at ``batch_size`` per CPU device kind it was timed on: as
        measured at a profiled batch size, else on the least-squares line through the profiled
        ones (a step's time grows with its batch as its ops' do). A line that falls as the batch
        grows is noise (one spell of the machine slower than another) and predicts the largest
        measurement instead, as memory's does (:mod:`~tfplace.estimator.regression`). A kind with
        one batch size profiled and another asked, or whose line is not positive there, is left
        out: the device model then spreads its calibrated overhead instead."""
        steps = {}
        for kind, times in self.untraced_step_times.items():
            if batch_size in times:
                steps[kind] = times[batch_size]
            elif len(times) >= 2:
                sizes, seconds = zip(*sorted(times.items()), strict=True)
                slope, intercept = np.polyfit(np.array(sizes, dtype=float), np.array(seconds), 1)
                predicted = max(seconds) if slope < 0 else float(slope * batch_size + intercept)
                if predicted > 0:
                    steps[kind] = predicted
        return steps

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> ProfileSet:
        if document.get("format") != _PROFILE_FORMAT:
            raise ValueError(f"not a profile of format {_PROFILE_FORMAT}: {document.get('format')!r}")
        return cls(
            batch_sizes=tuple(int(b) for b in document["batch_sizes"]),
            costs={
                int(b): {op: OpCost.from_list(values) for op, values in per_op.items()}
                for b, per_op in document["costs"].items()
            },
            estimated_ops=tuple(document["estimated_ops"]),
            estimated_outputs=tuple(document["estimated_outputs"]),
            step_times={int(b): float(t) for b, t in document["step_times"].items()},
            untraced_step_times={
                kind: {int(b): float(t) for b, t in steps.items()}
                for kind, steps in document["untraced_step_times"].items()
            },
            process=document["process"],
            time_errors={
                int(b): {op: float(e) for op, e in errors.items()}
                for b, errors in document["time_errors"].items()
            },
            steps={int(b): (int(kept), int(taken)) for b, (kept, taken) in document["steps"].items()},
            devices=dict(document["devices"]),
            fetches=tuple(document["fetches"]),
            key=str(document["key"]),
            profiling_seconds=float(document["profiling_seconds"]),
        )


def profiling_config(config: Any = None) -> Any:
    """The session config profiling uses: ``config`` with explicit thread counts, or the default.

    The default runs one op at a time on one thread (``inter_op_parallelism_threads=1``,
    ``intra_op_parallelism_threads=1``): on a machine shared by several processes, ops measured in
    parallel would compete for cores and each would look slower than it is. It also turns off
    Grappler and the classic graph optimizer (``opt_level=L0``), so that each op of the GraphDef runs
    under its own name. A given ``config`` is copied and only its unset (0) thread counts become 1.

    TensorFlow sizes the intra-op pool once per process, from the first session: profile in a
    fresh process when the intra-op count matters.
    """
    import tensorflow as tf

    result = tf.compat.v1.ConfigProto()
    if config is None:
        result.graph_options.rewrite_options.disable_meta_optimizer = True
        result.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
        result.graph_options.optimizer_options.do_constant_folding = False
        result.graph_options.optimizer_options.do_common_subexpression_elimination = False
    else:
        result.CopyFrom(config)
    result.inter_op_parallelism_threads = result.inter_op_parallelism_threads or 1
    result.intra_op_parallelism_threads = result.intra_op_parallelism_threads or 1
    return result


def _check_feeds_follow_the_batch(feeds: Mapping[int, Mapping[str, Any]]) -> None:
    """Refuse feeds whose shapes are the same at every batch size profiled: a ``feed_fn`` that
    ignores its argument would make the regression fit costs that never change with the batch."""
    shapes = {
        tuple(sorted((name, tuple(array.shape)) for name, array in per.items())) for per in feeds.values()
    }
    if len(feeds) > 1 and len(shapes) == 1 and any(per for per in feeds.values()):
        raise ValueError(
            f"feed_fn returned arrays of the same shapes for batch sizes {sorted(feeds)}: it must "
            "return a batch of the size it is given (or profile at the one batch size the graph takes)"
        )


#: Ops that hand the step a batch from a ``tf.data`` iterator.
ITERATOR_OPS = frozenset({"IteratorGetNext", "IteratorGetNextSync"})


def _check_iterators_follow_the_batch(
    shapes: Mapping[str, Sequence[tuple[int, ...]]], batch_size: int
) -> None:
    """Refuse a step whose ``tf.data`` iterator produced batches of another size than ``batch_size``.

    ``shapes`` are the output shapes of the iterators' ``GetNext`` ops in a traced step at
    ``batch_size``. A ``feed_fn`` cannot change the batch a one-shot iterator yields, so profiling
    several batch sizes would run the iterator's batch every time and the regression would see
    costs that never change with the batch.
    """
    for op, outputs in sorted(shapes.items()):
        ran = sorted({shape[0] for shape in outputs if shape and shape[0] >= 0})
        if ran and ran != [batch_size]:
            raise ValueError(
                f"the step reads its inputs from the tf.data iterator {op!r}, which ran batches of "
                f"{' and '.join(map(str, ran))} when batch {batch_size} was asked for: feed_fn cannot change "
                "an iterator's batch, so the profile would not follow the batch size. Feed the inputs "
                "through placeholders (feed_fn(batch_size) returning arrays of that batch), or profile "
                f"at the iterator's batch only (profile_batch_sizes=[{ran[0]}]) and place for that batch"
            )


def _initializer(graph: Any, init_op: Any, needed_ops: Sequence[Any]) -> list[Any]:
    """What to run before the first step: ``init_op``, else every variable's initializer."""
    import tensorflow as tf

    if init_op is not None:
        return [graph.as_graph_element(element_name(init_op))]
    with graph.as_default():
        variables = tf.compat.v1.global_variables() + tf.compat.v1.local_variables()
    has_variables = any(op.type in ("VarHandleOp", "VariableV2", "Variable") for op in needed_ops)
    if has_variables and not variables:
        raise ValueError(
            "the step uses variables but the graph has no variables collection "
            "(an imported GraphDef?): pass init_op, the op that initializes them"
        )
    return [variable.initializer for variable in variables]


def shared_aliases(records: Sequence[OpTrace] | Sequence[OpCost]) -> tuple[AliasedOutput, ...]:
    """The aliased outputs every one of ``records`` reports: an op's traces, or its costs at
    several batch sizes."""
    first, *rest = (record.aliased_outputs for record in records)
    return tuple(sorted(set(first).intersection(*rest)))


def median_cost(traces: Sequence[OpTrace]) -> tuple[float, tuple[int, ...], int]:
    """Median over traced steps of one op's time, per-slot output bytes and temporary bytes."""
    width = max(len(trace.output_sizes) for trace in traces)
    sizes = tuple(
        int(statistics.median(trace.output_sizes[slot] for trace in traces if slot < len(trace.output_sizes)))
        for slot in range(width)
    )
    compute = max(statistics.median(trace.compute_time for trace in traces), TIME_FLOOR)
    temporary = int(statistics.median(trace.temporary_bytes for trace in traces))
    return compute, sizes, temporary


def time_statistics(
    steps: Sequence[Mapping[str, OpTrace]],
    policy: RepeatPolicy,
    preemptions: Sequence[int] | None = None,
) -> dict[str, tuple[float, float]]:
    """Per op, ``policy``'s statistic of its compute time over ``steps`` (at least
    :data:`TIME_FLOOR`) and that statistic's error measured between the even- and the
    odd-numbered steps (:func:`~tfplace.estimator.statistics.split_half_error`).

    ``preemptions`` (one count per step: :mod:`tfplace.estimator.thread_accounting`) say how often the
    thread running the ops was preempted in each step; with ``policy.preemption`` the observations
    they inflated are taken out first (:func:`~tfplace.estimator.statistics.without_preemption`).
    """
    ops = sorted({op for step in steps for op in step})
    if not ops:
        return {}
    row = {op: i for i, op in enumerate(ops)}
    matrix = np.full((len(ops), len(steps)), np.nan)
    for column, step in enumerate(steps):
        for op, trace in step.items():
            matrix[row[op], column] = trace.compute_time
    if policy.preemption and preemptions is not None:
        matrix = without_preemption(matrix, preemptions)
    times = np.maximum(location(matrix, policy.statistic, policy.trim, policy.lower_fraction), TIME_FLOOR)
    errors = split_half_error(matrix, policy.statistic, policy.trim, policy.lower_fraction)
    return dict(zip(ops, zip(times.tolist(), errors.tolist())))


@dataclass
class TracedSteps:
    """Traced steps of one batch size: each step's traces, wall-clock seconds, preemptions and
    the session (its number) that ran it, reduced per op as the profiler reduces them
    (:meth:`statistics`); and per CPU device kind the steps ran as
    (:data:`~tfplace.core.device_model.CPU_KINDS`), the seconds of the untraced steps before them
    that followed another untraced step of theirs (``untraced``)."""

    traces: list[dict[str, OpTrace]] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    untraced: dict[str, list[float]] = field(default_factory=dict)

    def add(self, traces: dict[str, OpTrace], wall: float, preemptions: int, session: int) -> None:
        """Record one traced step of ``session``."""
        self.traces.append(traces)
        self.wall.append(wall)
        self.preemptions.append(preemptions)
        self.sessions.append(session)

    def statistics(self, policy: RepeatPolicy, session: int | None = None) -> dict[str, tuple[float, float]]:
        """:func:`time_statistics` over the kept steps of each session (of ``session`` alone when
        given), combined over the sessions (:func:`~tfplace.estimator.statistics.across_sessions`)."""
        by_session: dict[int, list[int]] = {}
        for i in self.kept(policy):
            if session is None or self.sessions[i] == session:
                by_session.setdefault(self.sessions[i], []).append(i)
        return across_sessions(
            [
                time_statistics([self.traces[i] for i in kept], policy, [self.preemptions[i] for i in kept])
                for kept in by_session.values()
            ]
        )

    def kept(self, policy: RepeatPolicy) -> list[int]:
        """Indices of the steps that are not outliers among all of the batch size's
        (:func:`~tfplace.estimator.statistics.kept_steps`)."""
        return [i for i, keep in enumerate(kept_steps(self.wall, policy.outlier_factor)) if keep]

    def relative_error(self, policy: RepeatPolicy, session: int) -> tuple[int, int, float]:
        """Steps ``session`` took and kept, and the time-weighted relative error of its op times."""
        kept = sum(1 for i in self.kept(policy) if self.sessions[i] == session)
        taken = self.sessions.count(session)
        stats = np.array(list(self.statistics(policy, session).values()))
        if not stats.size:
            return taken, kept, 0.0
        return taken, kept, weighted_relative_error(stats[:, 0], stats[:, 1])


@dataclass
class _BatchMeasurement:
    traces: dict[str, list[OpTrace]]
    times: dict[str, tuple[float, float]]
    step_time: float
    untraced_step_times: dict[str, float]
    kept: int
    taken: int


def _summarize(steps: TracedSteps, policy: RepeatPolicy) -> _BatchMeasurement:
    """The kept steps of one batch size: each op's traces, time statistic and the median step."""
    kept = steps.kept(policy)
    traces: dict[str, list[OpTrace]] = {}
    for i in kept:
        for op, trace in steps.traces[i].items():
            traces.setdefault(op, []).append(trace)
    return _BatchMeasurement(
        traces=traces,
        times=steps.statistics(policy),
        step_time=statistics.median(steps.wall[i] for i in kept),
        untraced_step_times={kind: step_statistic(times) for kind, times in steps.untraced.items() if times},
        kept=len(kept),
        taken=len(steps.wall),
    )


def _measure(
    graph: Any,
    fetches: Sequence[Any],
    feeds: Mapping[int, Mapping[str, Any]],
    initializer: Sequence[Any],
    config: Any,
    warmup_steps: int,
    traced_steps: int,
    policy: RepeatPolicy,
    op_inputs: Mapping[str, Sequence[tuple[str, int]]],
    process: ProfilingProcess,
) -> dict[int, _BatchMeasurement]:
    """:attr:`RepeatPolicy.sessions` sessions one after another (in ``process``:
    :func:`~tfplace.estimator.profiling_process.profiling_session`), each initialized and warmed up at
    every batch size, its threads at :attr:`RepeatPolicy.niceness`
    (:func:`~tfplace.estimator.scheduling_priority.raised_priority`); in each, rounds of traced
    steps, one step per unfinished batch size each
    (:func:`~tfplace.estimator.statistics.interleaved_rounds`), each after
    :data:`UNTRACED_BEFORE_TRACE` untraced steps of its batch size, until
    :meth:`RepeatPolicy.done` says every batch size has its share of the steps
    (:meth:`RepeatPolicy.per_session`).

    The rounds go across the batch sizes (``b1, b2, b3, b1, b2, b3, ...``) rather than one batch
    size after another: when other processes slow the machine down for a while, every batch size
    gets some slow steps, instead of one batch size measuring slow throughout, which would bend the
    regression on the batch size. The batch sizes share each session, so the variables (and
    optimizer slots) are held once: a session per batch size would multiply the memory of a large
    model's profile by the number of batch sizes.

    Beside a worker's session a session of the same graph runs in this process (its allocator and
    threads, as the user's own steps run), and before each of the worker's untraced steps of a
    batch size (:data:`STEADY_STEPS_EVERY`) takes untraced steps of its own, timed back to back in
    the steady state a training job runs in as the calibration times them
    (:func:`~tfplace.estimator.step_timing.back_to_back_seconds`): the step on a virtual CPU
    (:data:`~tfplace.estimator.profiling_process.PROFILED_KIND`).
    What a step costs beyond its traced ops depends on the process as well as on the graph: on
    session 31's VM the small NMT's step took 1.7 ms (0.44 us per op) more on a worker than here,
    where the calibration's chains put the two 0.035 us per op apart, and its virtual fidelity rows
    came out +21..+30% (run W); with the step timed here, -0.6% and -1.3% and its split -6.4% (run
    X, ``results/README.md``). Timed as the worker's are, right after another process's steps,
    the step here ran 14% slower than the steady state. This process holds a second copy of the
    variables meanwhile.
    """
    import tensorflow as tf

    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    iterator_ops = {
        op.name for op in graph.get_operations() if op.name in op_inputs and op.type in ITERATOR_OPS
    }
    kind, here_kind = PROFILED_KIND[process], PROFILED_KIND["this"]
    steps = {b: TracedSteps() for b in feeds}
    shares = policy.per_session(traced_steps)
    for index, (each, fewest) in enumerate(shares):
        label = "profiling traced steps" + (f", session {index + 1}/{len(shares)}" if len(shares) > 1 else "")
        with contextlib.ExitStack() as stack:
            session, tasks = stack.enter_context(profiling_session(graph, config, process))
            stack.enter_context(raised_priority(tasks, policy.niceness))
            here = None
            if process == "worker":
                here, own_tasks = stack.enter_context(profiling_session(graph, config, "this"))
                stack.enter_context(raised_priority(own_tasks, policy.niceness))
            for each_session in (session, here) if here is not None else (session,):
                if initializer:
                    each_session.run(initializer)
                for _batch_size, feed in track(feeds.items(), "profiling warm-up", detail=_batch):
                    for _ in range(warmup_steps):
                        each_session.run(fetches, feed_dict=feed)
            done = {b: False for b in feeds}
            with Progress(label, each.most_steps(fewest) * len(feeds)) as progress:
                while not all(done.values()):
                    for b in interleaved_rounds(list(feeds), done):
                        if here is not None and not steps[b].sessions.count(index) % STEADY_STEPS_EVERY:
                            steadily = back_to_back_seconds(here, fetches, feeds[b])
                            steps[b].untraced.setdefault(here_kind, []).extend(steadily)
                        session.run(fetches, feed_dict=feeds[b])  # after another session's step
                        times = steps[b].untraced.setdefault(kind, [])
                        for _ in range(UNTRACED_BEFORE_TRACE - 1):
                            times.append(timed_step(session, fetches, feeds[b]))
                        metadata = tf.compat.v1.RunMetadata()
                        threads = tensorflow_threads(tasks)
                        start = time.perf_counter()
                        with filtered_native_stderr():
                            session.run(fetches, feed_dict=feeds[b], options=options, run_metadata=metadata)
                        wall = time.perf_counter() - start
                        preempted = preemptions_between(threads, tensorflow_threads(tasks))
                        steps[b].add(
                            collect_op_traces(metadata, op_inputs, op_inputs), wall, preempted, index
                        )
                        if len(steps[b].wall) == 1:
                            _check_iterators_follow_the_batch(output_shapes(metadata, iterator_ops), b)
                        progress.advance(f"batch {b}, step {steps[b].sessions.count(index)}")
                    for b in feeds:
                        if not done[b]:
                            taken, kept, error = steps[b].relative_error(policy, index)
                            done[b] = each.done(kept, taken, fewest, error)
    return {b: _summarize(steps[b], policy) for b in feeds}


def _batch(item: tuple[int, Any]) -> str:
    return f"batch {item[0]}"


def profile_graph(
    graph: Any,
    fetches: Any,
    feed_fn: Callable[[int], Mapping[Any, Any]],
    batch_sizes: Sequence[int] = (1, 2, 4),
    *,
    warmup_steps: int = 2,
    traced_steps: int = 5,
    config: Any = None,
    init_op: Any = None,
    cache_dir: Any = None,
    repeats: RepeatPolicy | None = None,
    process: ProfilingProcess = "worker",
) -> ProfileSet:
    """Measure per-op costs of one step of ``graph`` at each of ``batch_sizes``.

    A ``Session`` and the initializer (``repeats.sessions`` of them, one after another, each in
    ``process``);
    ``warmup_steps`` untraced steps at each batch size; then rounds of steps with
    ``RunOptions(trace_level=FULL_TRACE)``, one per batch size each, each after
    :data:`UNTRACED_BEFORE_TRACE` untraced steps of its batch size, at least ``traced_steps`` in
    all and until the op times are precise enough (``repeats``); steps far slower than the others
    are dropped; per op a robust statistic of its time over each session's kept steps (by default
    its tenth quantile, scaled to add up to the steps'), averaged over the sessions, and the
    median of its memory. Ops the fetches
    need that no trace reports get shape-based estimates and are listed in ``estimated_ops``.

    Parameters
    ----------
    graph : tf.Graph, GraphDef or MetaGraphDef
    fetches : tensor, op, name, or a list of them
        What one step runs (for training, the train op).
    feed_fn : callable
        ``feed_fn(batch_size)`` returns the feed dictionary of one step: placeholder names
        (``"x:0"`` or ``"x"``) or tensors to numpy arrays.
    batch_sizes : sequence of int
        Small enough for one device.
    warmup_steps, traced_steps : int
        Untraced steps first (allocations, kernel caches), then the fewest traced steps (at least 1).
    config : tf.compat.v1.ConfigProto, optional
        See :func:`profiling_config`.
    init_op : op or name, optional
        Initializes the variables; by default every variable's initializer from the graph's
        collections.
    cache_dir : str or os.PathLike, optional
        Where profiles are cached (:mod:`tfplace.estimator.cache`); a profile with the same key is
        returned without running TensorFlow. ``None`` or ``""``: no cache.
    repeats : RepeatPolicy, optional
        The most traced steps, the target relative error, the statistic, the outlier factor and
        the sessions (:class:`~tfplace.estimator.statistics.RepeatPolicy`; default
        ``RepeatPolicy()``: up to twice ``traced_steps``, a relative error of 1%, the steps' tenth
        quantile, three sessions, the threads that run the steps at nice -15 where permitted).
        ``RepeatPolicy(max_steps=traced_steps)`` takes exactly ``traced_steps`` steps.
    process : {"worker", "this"}
        Where the sessions run (:mod:`tfplace.estimator.profiling_process`): ``"worker"`` (the
        default), a worker process of their own under TensorFlow's BFC allocator for the CPU, where a
        traced step's records do not slow its kernels down; ``"this"``, this process. A step with
        ops that call back into this process's Python, or on a machine with GPUs, is always
        profiled here.

    Returns
    -------
    ProfileSet

    Raises
    ------
    ValueError
        Bad fetches, feeds (naming the placeholder and shapes), batch sizes or step counts.
    """
    import tensorflow as tf

    started = time.perf_counter()
    policy = repeats if repeats is not None else RepeatPolicy()
    sizes = tuple(sorted({int(b) for b in batch_sizes}))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be positive integers, got {list(batch_sizes)}")
    if traced_steps < 1 or warmup_steps < 0:
        raise ValueError(f"need traced_steps >= 1 and warmup_steps >= 0, got {traced_steps}, {warmup_steps}")
    graph = as_graph(graph)
    fetched = fetch_elements(graph, fetches)
    fetch_names = tuple(element_name(element) for element in fetched)
    raw_feeds = {b: feed_fn(b) for b in sizes}
    fed_names = {tensor_name(key) for feeds in raw_feeds.values() for key in feeds}
    needed = fetch_closure(graph, fetched, fed_names)
    feeds = {b: validate_feeds(graph, raw_feeds[b], needed) for b in sizes}
    _check_feeds_follow_the_batch(feeds)
    initializer = _initializer(graph, init_op, needed)
    session_config = profiling_config(config)
    process = profiling_process_for(
        (op.type for op in graph.get_operations()),
        process,
        gpus=bool(tf.config.list_physical_devices("GPU")),
    )

    settings = {
        "fetches": list(fetch_names),
        "batch_sizes": list(sizes),
        "feeds": {
            str(b): {name: [str(a.dtype), list(a.shape)] for name, a in sorted(feeds[b].items())}
            for b in sizes
        },
        "warmup_steps": warmup_steps,
        "traced_steps": traced_steps,
        "untraced_before_trace": UNTRACED_BEFORE_TRACE,
        "repeats": policy.settings(),
        "config": session_config.SerializeToString(deterministic=True).hex(),
        "init": sorted(op.name for op in initializer),
        "tensorflow": tf.__version__,
        "profile_format": _PROFILE_FORMAT,
    }
    if process == "worker":
        settings["worker_environment"] = WORKER_ENVIRONMENT
    perturbation = perturbation_seed()
    if perturbation is not None:
        settings["perturbation_seed"] = perturbation
    runtime = {name: os.environ[name] for name in CPU_RUNTIME_VARIABLES if name in os.environ}
    if runtime:
        settings["cpu_runtime"] = runtime
    key = profile_key(step_graph_def(graph, needed), settings)
    cache = ProfileCache(cache_dir) if cache_dir is not None and os.fspath(cache_dir) != "" else None
    if cache is not None:
        document = cache.load(key)
        if document is not None:
            cached = ProfileSet.from_dict(document)
            cached.from_cache = True
            return cached

    inputs = {op.name: [(tensor.op.name, tensor.value_index) for tensor in op.inputs] for op in needed}
    measured = _measure(
        graph,
        fetched,
        feeds,
        initializer,
        session_config,
        warmup_steps,
        traced_steps,
        policy,
        inputs,
        process,
    )
    profile = _assemble(graph, needed, measured, {b: feeds[b] for b in sizes})
    if perturbation is not None:
        profile.costs = _perturbed(profile.costs, perturbation)
    profile.fetches = fetch_names
    profile.process = process
    profile.key = key
    profile.profiling_seconds = time.perf_counter() - started
    if cache is not None:
        cache.store(key, profile.to_dict())
    return profile


def _assemble(
    graph: Any,
    needed: Sequence[Any],
    measured: Mapping[int, _BatchMeasurement],
    feeds: Mapping[int, Mapping[str, Any]],
) -> ProfileSet:
    """Time statistics and memory medians per op, persistent memory once, shape-based estimates
    for what traces missed."""
    sizes = tuple(sorted(measured))
    first = measured[sizes[0]].traces
    persistent = {op: int(statistics.median(t.persistent_bytes for t in first[op])) for op in first}
    for op, nbytes in variable_bytes(needed).items():
        persistent[op] = persistent.get(op, 0) + nbytes

    fed = {
        op.name
        for op in needed
        if op.outputs
        and all(f"{op.name}:{slot}" in feeds[b] for b in sizes for slot in range(len(op.outputs)))
    }
    untraced = {op.name for op in needed if any(op.name not in m.traces for m in measured.values())}
    missing = sorted(untraced - fed)
    partial = sorted(
        op.name
        for op in needed
        if op.name not in untraced
        and any(len(t.output_sizes) < len(op.outputs) for m in measured.values() for t in m.traces[op.name])
    )
    costs: dict[int, dict[str, OpCost]] = {}
    for b in sizes:
        per_op: dict[str, OpCost] = {}
        for op, traces in measured[b].traces.items():
            _, outputs, temporary = median_cost(traces)
            compute = measured[b].times[op][0]
            kernel = least_cost_estimate([trace.kernel_time for trace in traces])
            aliases = shared_aliases(traces)
            per_op[op] = OpCost(compute, outputs, temporary, persistent.get(op, 0), aliases, kernel)
        for op in sorted((untraced & fed) - per_op.keys()):
            per_op[op] = _fed_cost(op, feeds[b], persistent.get(op, 0))
        if missing or partial:
            _estimate_from_shapes(graph, per_op, missing, partial, feeds[b], b, persistent)
        costs[b] = per_op
    largest = measured[sizes[-1]].traces
    return ProfileSet(
        batch_sizes=sizes,
        costs=costs,
        estimated_ops=tuple(missing),
        estimated_outputs=tuple(partial),
        step_times={b: m.step_time for b, m in measured.items()},
        untraced_step_times=_by_kind({b: m.untraced_step_times for b, m in measured.items()}),
        time_errors={b: {op: error for op, (_, error) in m.times.items()} for b, m in measured.items()},
        steps={b: (m.kept, m.taken) for b, m in measured.items()},
        devices={op: traces[-1].device for op, traces in largest.items()},
    )


def _by_kind(per_batch: Mapping[int, Mapping[str, float]]) -> dict[str, dict[int, float]]:
    """``{batch: {kind: seconds}}`` as ``{kind: {batch: seconds}}``."""
    per_kind: dict[str, dict[int, float]] = {}
    for batch_size, steps in per_batch.items():
        for kind, seconds in steps.items():
            per_kind.setdefault(kind, {})[batch_size] = seconds
    return per_kind


def _fed_cost(op: str, feeds: Mapping[str, Any], persistent: int) -> OpCost:
    """The cost of an op whose every output the step is fed and no trace reports (on a worker the
    client's arrays arrive through ``_Recv`` nodes, not as the op's own record): each output the
    fed array's bytes, no time of its own (feeding is the calibrated
    :class:`~tfplace.core.device_model.FeedCost`)."""
    sizes = []
    for slot in itertools.count():
        array = feeds.get(f"{op}:{slot}")
        if array is None:
            break
        sizes.append(int(array.nbytes))
    return OpCost(TIME_FLOOR, tuple(sizes), 0, persistent, (), TIME_FLOOR)


def _perturbed(costs: Mapping[int, Mapping[str, OpCost]], seed: int) -> dict[int, dict[str, OpCost]]:
    """``costs`` as another machine might measure them (:mod:`tfplace.estimator.perturb`): each
    op's compute time (kept at least :data:`TIME_FLOOR`) and temporary bytes scaled by its seeded
    factors, the same at every batch size."""
    result: dict[int, dict[str, OpCost]] = {}
    for batch_size, per_op in costs.items():
        result[batch_size] = {}
        for op, cost in per_op.items():
            time_factor, temporary_factor = cost_factors(seed, op)
            result[batch_size][op] = dataclasses.replace(
                cost,
                compute_time=max(cost.compute_time * time_factor, TIME_FLOOR),
                temporary_bytes=int(cost.temporary_bytes * temporary_factor),
            )
    return result


def _estimate_from_shapes(
    graph: Any,
    per_op: dict[str, OpCost],
    missing: Sequence[str],
    partial: Sequence[str],
    feeds: Mapping[str, Any],
    batch_size: int,
    persistent: Mapping[str, int],
) -> None:
    """Fill ``per_op`` for the ``missing`` ops and the unreported output slots of ``partial`` ones.

    Compute time of a missing op: its FLOPs over the FLOP rate of the ops measured at this batch
    size, or :data:`~tfplace.estimator.shapes.UNKNOWN_OP_TIME` without a FLOP count or a rate.
    """
    shaped = shaped_graph(graph, {name: array.shape for name, array in feeds.items()})
    estimates = {name: estimate_op(shaped.get_operation_by_name(name), batch_size) for name in missing}
    measured_flops = {
        name: estimate_op(shaped.get_operation_by_name(name), batch_size).flops
        for name in per_op
        if name not in partial
    }
    rate = fit_flop_rate(measured_flops, {name: cost.compute_time for name, cost in per_op.items()})
    for name in missing:
        estimate = estimates[name]
        seconds = estimate.flops / rate if estimate.flops and rate else UNKNOWN_OP_TIME
        per_op[name] = OpCost(max(seconds, TIME_FLOOR), estimate.output_sizes, 0, persistent.get(name, 0))
    for name in partial:
        cost = per_op[name]
        static = estimate_op(shaped.get_operation_by_name(name), batch_size).output_sizes
        outputs = cost.output_sizes + static[len(cost.output_sizes) :]
        per_op[name] = dataclasses.replace(cost, output_sizes=outputs)
