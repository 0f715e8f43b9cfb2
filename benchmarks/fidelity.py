"""Fidelity of the simulator: simulated step time and peak memory of placed graphs against real runs.

For each model (small variants), each kind of CPU device (``virtual``: CPUs of one process;
``loopback``: one worker process per device, started afresh for each model, tensors over gRPC)
and each placement (one device, a whole-op placement split over the devices, ``auto``), the step
is

- placed on the costs Standard Evaluation profiled at the batch size (read from ``--cache_dir``
  when stored);
- run as it was profiled: the GraphDef's own ops (no Grappler rewrites, which would run other
  ops than the simulated ones), one intra-op thread
  (:func:`tfplace.estimator.calibration.profiled_run_config`). Every placement of a model runs in
  two sessions at once; after a warm-up into the executor's steady state (``--warmup_steps``:
  TensorFlow runs the kernels it has found cheap inline only after about 90 steps), the sessions
  step in interleaved rounds, at least ``--timed_seconds`` each, so that a 5 ms step gets hundreds
  of steps, each session's turn a block of steps back to back whose first steps
  (``--block_untimed_steps``) are not timed, as a training job runs its steps
  (:func:`interleaved_steps`);
- profiled again **side by side** with those runs: ``--profile_steps`` traced steps of the
  profiler's one-device sessions (three, one after another, as the profiler takes them), each on
  a worker process of its own (:func:`open_profile`), spread over the same rounds
  (:class:`SideBySideProfile`). This
  machine's speed moves by up to a quarter over seconds while nothing shows in the load average;
  a profile from minutes before compares two speeds (``profile_drift``: the side-by-side profile's
  summed op times against the first profile's, -26% for a Transformer profile cached in a slow
  spell);
- simulated (:func:`tfplace.simulator.simulate`) on the side-by-side profile through the
  machine's CPU device model (:class:`tfplace.core.device_model.CpuCalibration`, made once by
  ``tfplace calibrate`` and read from ``--calibration``): every op's traced time plus the per-op
  overhead of a real step (since session 30 the graph's own, from the side-by-side profile's
  untraced steps: :meth:`~tfplace.core.device_model.CpuCalibration.op_overhead`), the per-step
  overhead, the inter-op threads of each process on the machine's shared cores, and the calibrated link of the device kind, on loopback workers with
  the CPU a transfer costs them probed side by side with the runs too (``link_copy_b_us``:
  :class:`SideBySideLink`; ``calibrated_link_simulated_s`` and ``calibrated_link_error`` with the
  calibration's). No factor is fitted to any model.

``profile_traced_s`` is the side-by-side profile's op times summed, ``profile_untraced_s`` the
profiler's statistic of the untraced steps its session runs before each traced one (the second of
them, back to back with the first): the model's own untraced step on the profile's worker (a remote
session, so the loopback step overhead and feeds included), beside what its traced kernels add up to;
``profile_untraced_here_s`` the same of a session of the graph in this process, which the virtual
rows are simulated on (since session 32).

``measured_s`` is the profiler's statistic of the steps of both sessions
(:func:`tfplace.estimator.step_timing.step_statistic`, the tenth quantile): the simulated step
is made of op times that add up to that quantile of the profiled steps, what a step takes when
nothing slows it, and the calibration's per-op overhead is measured against untraced steps
reduced the same way; ``median_s`` and ``median_error`` give the median step beside it.
``noise`` is the difference of the two sessions' statistics: the same placement measured twice,
the noise floor below which the simulator's error means nothing. ``simulated_transfers`` counts the
simulated step's transfers between devices (tensors, and on loopback control messages; a small
constant TensorFlow copies to each worker sends none:
:func:`tfplace.simulator.plan.replicated_constants`), ``recv_calls`` the ``RecvTensor`` calls of a
traced real step on loopback (0 on virtual CPUs). ``cpu_s`` is the CPU seconds per step of this
process and the workers (on a busy machine closer to a quiet machine's step than wall-clock time,
where one thread runs the step).

Memory: per device the placement uses, the simulated peak against the allocator's: the most bytes
the step's kernels held at once by the allocation records of a ``FULL_TRACE`` step
(:func:`tfplace.tf_graph.step_stats.allocation_peaks`), plus the variables resident on the device
(their buffers, sized from the placed graph's variables), which the allocator holds from before the
step, the most of either session's steps (since session 10; before, the median of the two).
``allocator_peak_mb`` is ``--first_traces`` steps of each session from its fourth on (each
session's fourth alone until session 21), as the executor runs the first steps of a session
(every kernel not declared inexpensive goes through the thread pool, the order
``simulated_peak_mb`` follows: :data:`tfplace.core.device_model.INEXPENSIVE_KERNELS`);
``steady_peak_mb`` is ``--steady_traces`` steps of each after the timed ones, once the executor
runs inline every kernel it has timed below 8,000 cycles, which reorders the step (the small NMT: 3.30 MB up to step 80, 4.87
MB from step 120), the order ``simulated_steady_peak_mb`` follows (each op's profiled kernel time
on the machine's cycle counter: :func:`tfplace.core.device_model.inline_ops`, :func:`cycle_counter_hz`).
Both compare the device with the largest simulated peak. On loopback workers the simulated
peak is the larger of the two orders a received tensor's race on the shared cores can give (rule 4
of :mod:`tfplace.simulator.engine`; Inception V3's split held 236.78 MB in most real steps and
188-197 MB in others).

``error = (simulated - measured) / measured``; the targets are 5% for time and 10% for memory.
All of this is one *pass*; ``--runs`` passes run one after the other, each over every kind and model,
so that a model's passes lie minutes apart. ``--output`` has each row's pass of median error
(:func:`median_runs`) with the passes' least and largest error (``error_min``, ``error_max``) and
their memory error farthest from 0 (``worst_memory_error``); ``--runs_output`` every pass's rows;
``--inputs_output`` what each pass simulated its rows from (the side-by-side profile, the devices,
each placement's device per op, and the device model: :func:`save_inputs`), which
``benchmarks/resimulate_fidelity.py`` simulates again under another device model.
This machine's speed drifts between passes more than within one: the small NMT's real step moved
from 3.33 to 4.72 ms between two passes of the same code (session 23), and by up to half within a
minute of one session (session 24), where its two sessions of one pass, interleaved, agree within 2%.
Each model waits until the one-minute load average is below ``--max_load`` (at most
``--max_wait`` seconds) and the printout records the load before and after its steps. Writes
``--output`` and prints it. Run from the repository root, after ``tfplace calibrate``:

    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py
    PYTHONPATH=. .venv/bin/python benchmarks/fidelity.py --models=nmt --kinds=virtual --runs=1
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from absl import app, flags, logging

from tfplace.api import DEFAULT_CACHE_DIR
from tfplace.core.costgraph import UNTRACED_STEP
from tfplace.estimator.calibration import SplitProbe
from tfplace.estimator.profiler import UNTRACED_BEFORE_TRACE, TracedSteps
from tfplace.estimator.profiling_process import PROFILED_KIND
from tfplace.estimator.step_timing import back_to_back_seconds, step_statistic
from tfplace.estimator.thread_accounting import OWN_TASKS

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["nmt", "transformer", "tensor_holography", "inception_v3"], "Models to run.")
flags.DEFINE_list("kinds", ["virtual", "loopback"], "CPU device kinds (tfplace.core.device_model.CPU_KINDS).")
flags.DEFINE_list("placements", ["single", "dfs_topo", "auto"], "Placers (tfplace.placer.PLACERS).")
flags.DEFINE_integer("devices", 2, "Devices of each kind: virtual CPUs, or loopback workers.")
flags.DEFINE_integer(
    "steps",
    30,
    "Timed steps per session at least: Inception V3's 0.1 s step gets 30 rounds, and with them all "
    "its --profile_steps (10 until session 36: 13-16 rounds, a tenth quantile of 13-16 steps).",
)
flags.DEFINE_float(
    "timed_seconds",
    2.0,
    "Seconds of timed steps per session at least: a step of a few milliseconds gets hundreds of "
    "steps, so that its median is not one scheduler time slice's luck.",
)
flags.DEFINE_integer("max_steps", 1000, "Timed steps per session at most.")
flags.DEFINE_float(
    "block_seconds",
    0.02,
    "Seconds of timed steps a session runs back to back in each round at least (at least one step), "
    "after --block_untimed_steps untimed ones (interleaved_steps).",
)
flags.DEFINE_integer(
    "block_untimed_steps",
    1,
    "Untimed steps at the start of each session's block, after another session's steps (eight "
    "instead of one lowered the small NMT's measured and simulated steps alike, session 29).",
)
flags.DEFINE_integer(
    "warmup_steps",
    100,
    "Steps dropped at the start of each session, at most --warmup_seconds "
    "long: past the ~90 steps TensorFlow's executor takes to learn which kernels are cheap enough "
    "to run inline, so that the timed steps are the steady state a training job runs in.",
)
flags.DEFINE_integer(
    "first_traces",
    4,
    "Traced steps of each session from its fourth on, in the executor's first-steps order, for its "
    "allocator's peak: a peak that depends on a race between workers lands on either mode.",
)
flags.DEFINE_integer(
    "steady_traces", 3, "Traced steps of each session in the steady state, for its allocator's peak."
)
flags.DEFINE_float("warmup_seconds", 10.0, "Seconds of warm-up per session at most (at least 3 steps).")
flags.DEFINE_float("max_load", 1.0, "Wait before each model until the 1-minute load average is below this.")
flags.DEFINE_float("max_wait", 60.0, "Seconds to wait for a low load before measuring anyway.")
flags.DEFINE_string(
    "calibration",
    os.path.join(".tfplace_cache", "calibration.json"),
    "The machine's CPU device model, written by tfplace calibrate.",
)
flags.DEFINE_integer(
    "profile_steps",
    30,
    "Traced steps of the model's one-device profile taken during the timed rounds, spread evenly "
    "over them (at most one per round): the costs the rows are simulated on, measured side by side "
    "with the runs they are compared with.",
)
flags.DEFINE_integer(
    "link_probe_steps",
    10,
    "On loopback workers, steps of each probe of the link's CPU per transfer (a split training step "
    "against the same step on one worker, tfplace.estimator.calibration.split_probe), one probe beside "
    "each side-by-side profile step: the copy_b the rows are simulated with, measured side by side "
    "with the runs (0: the calibration's).",
)
flags.DEFINE_integer(
    "runs",
    3,
    "Passes over every model and kind, one after the other (each a model's full measurement: fresh "
    "workers, its own sessions and side-by-side profile); a row is the pass of median error "
    "(median_runs), since this machine's speed drifts between passes.",
)
flags.DEFINE_string("output", "results/fidelity.csv", "CSV file written: each row's median pass.")
flags.DEFINE_string(
    "runs_output", "results/fidelity_runs.csv", "CSV file written: every pass's rows ('' writes none)."
)
flags.DEFINE_string(
    "inputs_output",
    "results/fidelity_inputs",
    "Directory written: per pass, model and kind, the side-by-side profile its rows were simulated on, "
    "the devices and each placement's device per op (save_inputs), and the CPU device model of the run, "
    "which benchmarks/resimulate_fidelity.py simulates again under another ('' writes none).",
)
flags.DEFINE_string("cache_dir", DEFAULT_CACHE_DIR, "Profile cache directory ('' always profiles).")

_SMALL_NMT = {"units": 64, "layers": 2, "source_length": 6, "target_length": 6, "vocab_size": 500}

#: Size knobs and batch size of each model: steps of 5 to 100 milliseconds on one 2-core CPU.
MODEL_SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "nmt": (_SMALL_NMT, 8),
    "transformer": ({"layers": 2, "heads": 4, "d_model": 64, "d_ff": 128, "vocab_size": 500}, 8),
    "tensor_holography": ({"image_size": 48, "conv_layers": 10, "filters": 12}, 4),
    "inception_v3": ({"image_size": 75, "classes": 10}, 2),
}

PASS_COLUMNS = (
    "model",
    "placement",
    "kind",
    "devices_used",
    "simulated_transfers",
    "recv_calls",
    "simulated_s",
    "unfed_simulated_s",
    "calibrated_link_simulated_s",
    "link_copy_b_us",
    "measured_s",
    "median_s",
    "median_error",
    "profile_drift",
    "profile_traced_s",
    "profile_untraced_s",
    "profile_untraced_here_s",
    "error",
    "calibrated_link_error",
    "noise",
    "steps",
    "cpu_s",
    "simulated_peak_mb",
    "allocator_peak_mb",
    "memory_error",
    "simulated_steady_peak_mb",
    "steady_peak_mb",
    "steady_memory_error",
    "load",
)
"""The columns of one pass's row (``--runs_output`` adds ``run``, the pass's number from 1)."""

COLUMNS = (*PASS_COLUMNS[:3], "runs", "error_min", "error_max", "worst_memory_error", *PASS_COLUMNS[3:])
"""The columns of ``--output``: the median pass's row (:func:`median_runs`), after the passes'
count, their least and largest time error and their memory error farthest from 0."""

MB = 1e6


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def wait_for_quiet() -> None:
    """Sleep until the 1-minute load average is below ``--max_load`` or ``--max_wait`` has passed."""
    deadline = time.monotonic() + FLAGS.max_wait
    while os.getloadavg()[0] >= FLAGS.max_load and time.monotonic() < deadline:
        time.sleep(5)


def device_names(kind: str, count: int) -> list[str]:
    if kind == "virtual":
        return [f"/device:CPU:{i}" for i in range(count)]
    return [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(count)]


def placements(cost_graph, structure, devices, names: Sequence[str]) -> dict[str, Any]:
    """Each placer's placement of the step, extended to every op of ``structure``.

    DFS-TOPO fills a device up to its memory: it gets devices of 55% of the step's simulated peak
    on one device each, so that it splits the step into contiguous parts (a whole-op split
    placement).
    """
    from tfplace.api import place_costs
    from tfplace.core.devices import Device

    total = int(simulated(cost_graph, dict.fromkeys(cost_graph, devices.names[0]), devices).peak_memory[0])
    result = {}
    for name in names:
        placed_on = devices
        if name == "dfs_topo":
            capped = tuple(Device(d.name, max(int(0.55 * total), 1)) for d in devices.devices)
            placed_on = dataclasses.replace(devices, devices=capped)
        placement = place_costs(
            cost_graph, placed_on, structure=structure, placer=name, simulate=False, progress=False
        )
        placement.devices = devices
        result[name] = placement
    return result


def cycle_counter_hz() -> float:
    """The rate of the cycle counter TensorFlow's executor times kernels with, the processor's
    time-stamp counter: Linux's ``cpu MHz`` in ``/proc/cpuinfo`` (the counter's rate on a machine
    without frequency scaling, as this VM; with scaling it is the current clock)."""
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            key, _, value = line.partition(":")
            if key.strip() == "cpu MHz":
                return float(value) * 1e6
    raise RuntimeError("/proc/cpuinfo gives no 'cpu MHz': the executor's cycle counter rate is unknown")


def simulated(cost_graph, assignment, devices, cycles_per_second: float | None = None, record: bool = False):
    """The simulated step of ``assignment``, the devices following TensorFlow's CPU executor: as in
    a session's first steps, or with ``cycles_per_second`` (:func:`cycle_counter_hz`) in its steady
    state (:func:`tfplace.core.device_model.inline_ops`); with ``record``, its schedule too."""
    from tfplace.core.device_model import inline_ops
    from tfplace.simulator import simulate

    return simulate(
        cost_graph, assignment, devices, inline_ops=inline_ops(cost_graph, cycles_per_second), record=record
    )


def variable_bytes(graph, placement) -> dict[str, int]:
    """Bytes of the variables each device holds: every ``VarHandleOp``/``VariableV2``'s shape and
    dtype, on the device its op is placed on."""
    import numpy as np
    import tensorflow as tf

    held: dict[str, int] = {}
    for op in graph.get_operations():
        if op.type not in ("VarHandleOp", "VariableV2"):
            continue
        shape = tf.TensorShape(op.get_attr("shape"))
        size = int(np.prod(shape.as_list())) * tf.as_dtype(op.get_attr("dtype")).size
        device = placement.assignment[op.name]
        held[device] = held.get(device, 0) + size
    return held


def allocator_peaks(spec, placement, run_metadata) -> dict[str, int]:
    """Per device (by placement name), the most bytes its allocator held at once in a traced step
    (:func:`allocation_changes`) plus the variables resident on it (:func:`variable_bytes`)."""
    from tfplace.core.devices import DeviceName

    resident = variable_bytes(spec.graph, placement)
    changes = allocation_changes(spec.graph, run_metadata)
    peaks = {}
    for name in placement.devices.names:
        in_use = peak = 0
        for _, nbytes in sorted(changes.get(DeviceName.parse(name), ())):
            in_use += nbytes
            peak = max(peak, in_use)
        peaks[name] = peak + resident.get(name, 0)
    return peaks


_RECEIVED = re.compile(r"edge_\d+_(?P<tensor>\S+) from \S+ to \S+$")


def allocation_changes(graph, run_metadata) -> dict[Any, list[tuple[int, int]]]:
    """Per device, ``(microseconds, bytes)`` of every allocation (> 0) and free (< 0) in the step.

    The kernels' allocation records (:func:`tfplace.tf_graph.step_stats.allocation_peaks` sums
    the same), and the tensors a worker received over gRPC, which the RPC layer allocates outside
    any kernel, so that no record has them: each from its ``RecvTensor`` record to the end of its
    producer's last consumer on the receiving device in the trace.
    """
    from tfplace.core.devices import DeviceName
    from tfplace.tf_graph import step_stats

    changes: dict[Any, list[tuple[int, int]]] = {}
    ends: dict[tuple[Any, str], int] = {}
    received = []
    for dev_stats in run_metadata.step_stats.dev_stats:
        device = DeviceName.parse(dev_stats.device)
        for node in step_stats.set_repeated(dev_stats, "node_stats"):
            for memory in step_stats.set_repeated(node, "memory"):
                changes.setdefault(device, []).extend(step_stats.allocation_record_changes(memory))
            end = int(node.all_start_micros + node.all_end_rel_micros)
            ends[device, node.node_name] = max(ends.get((device, node.node_name), 0), end)
            match = _RECEIVED.search(node.timeline_label) if node.node_name == "RecvTensor" else None
            outputs = step_stats.set_repeated(node, "output")
            if match and outputs:
                nbytes = step_stats.output_allocation(outputs[0]).requested_bytes
                producer = match.group("tensor").split(":")[0]
                received.append((device, producer, int(node.all_start_micros), end, nbytes))
    for device, producer, start, end, nbytes in received:
        try:
            outputs = graph.get_operation_by_name(producer).outputs
        except KeyError:  # a fetch or feed of the session: no consumer in the graph
            outputs = []
        consumers = [consumer.name for output in outputs for consumer in output.consumers()]
        freed = max([end] + [ends.get((device, c), 0) for c in consumers])
        changes.setdefault(device, []).extend([(start, nbytes), (freed, -nbytes)])
    return changes


def profiled_model(name: str) -> tuple[Any, int, Any]:
    """``name``'s small variant: its model spec, batch, and cost estimate at that batch (read from
    ``--cache_dir`` when a profile measured there by the same procedure is stored)."""
    from models import build_model
    from tfplace.api import estimate_costs

    knobs, batch = MODEL_SIZES[name]
    spec = build_model(name, **knobs)
    estimate = estimate_costs(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch,
        profile_batch_sizes=[batch],
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir or None,
        progress=False,
    )
    return spec, batch, estimate


@dataclasses.dataclass
class Series:
    """One session of a placement and what its steps took: wall-clock and CPU seconds (of every
    process of the step: this one and the workers) per timed step."""

    session: Any
    fetches: Any
    feeds: dict[str, Any]
    wall: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)

    def step(self, workers: Sequence[int]) -> tuple[float, float]:
        """Run one untraced step; its wall-clock seconds and the CPU seconds of this process and of
        the ``workers`` (process ids; ``/proc`` counts their CPU in ticks of 10 ms, so only a mean
        over many steps of theirs means something)."""
        from tfplace.estimator.calibration import process_cpu_seconds

        cpu = time.process_time() + sum(process_cpu_seconds(pid) for pid in workers)
        start = time.perf_counter()
        self.session.run(self.fetches, self.feeds)
        wall = time.perf_counter() - start
        return wall, time.process_time() + sum(process_cpu_seconds(pid) for pid in workers) - cpu


def run_config(kind: str, cluster, calibration) -> tuple[Any, str]:
    """The session config and target of a real step on ``kind`` devices, configured as the graph
    was profiled (:func:`tfplace.estimator.calibration.profiled_run_config`): ``--devices``
    virtual CPUs sharing the calibrated threads, or ``cluster``'s workers with their servers'."""
    from tfplace.estimator.calibration import profiled_run_config

    if kind == "virtual":
        return profiled_run_config(FLAGS.devices, calibration.process("virtual").threads), ""
    config = profiled_run_config()
    config.ClearField("device_count")
    return config, cluster.target


def open_series(stack, spec, batch: int, placement, kind: str, cluster, calibration) -> Series:
    """A session of ``placement`` (closed with ``stack``), its variables initialized, configured as
    the graph was profiled (:func:`tfplace.estimator.calibration.profiled_run_config`)."""
    import tensorflow as tf

    from tfplace.runner import placed_copy

    graph, fetches, feeds, initializer = placed_copy(
        spec.graph, placement, spec.train_op, spec.feed_fn(batch), spec.init_op, batch
    )
    config, target = run_config(kind, cluster, calibration)
    session = stack.enter_context(tf.compat.v1.Session(target, graph=graph, config=config))
    session.run(initializer)
    return Series(session, fetches, feeds)


def calibrated_costs(calibration, kind: str, cost_graph, devices):
    """``cost_graph`` (a profile) as a real step on ``kind`` devices costs it
    (:meth:`~tfplace.core.device_model.CpuCalibration.step_costs`), its transfers on ``devices``'
    typical link: what every row is placed and simulated on."""
    costs = calibration.step_costs(cost_graph, kind)
    costs.set_transfer_model(devices.typical_link)
    return costs


def loopback_placements(
    name: str, calibration, placers: Sequence[str]
) -> tuple[Any, int, Any, Any, Any, dict]:
    """``name``'s small variant placed by each of ``placers`` on two loopback workers, as the
    loopback rows are: its spec, batch and estimate (:func:`profiled_model`), the calibrated
    devices, the step's costs on them and the placements."""
    spec, batch, estimate = profiled_model(name)
    devices = calibration.device_set(device_names("loopback", 2), 1 << 40)
    costs = calibrated_costs(calibration, "loopback", estimate.cost_graph, devices)
    return (
        spec,
        batch,
        estimate,
        devices,
        costs,
        placements(costs, estimate.imported.cost_graph, devices, placers),
    )


def open_warm_sessions(stack, spec, batch: int, placed: dict, cluster, calibration) -> dict[str, Series]:
    """A session of each of ``placed`` on ``cluster`` (closed with ``stack``), each after
    ``--warmup_steps`` untimed steps."""
    sessions = {
        placer: open_series(stack, spec, batch, placement, "loopback", cluster, calibration)
        for placer, placement in placed.items()
    }
    for series in sessions.values():
        for _ in range(FLAGS.warmup_steps):
            series.step([])
    return sessions


def warm_up(series: Series, workers: Sequence[int]) -> tuple[float, list[Any]]:
    """Run ``--warmup_steps`` steps (at least 3, at most ``--warmup_seconds``), tracing
    ``--first_traces`` from the fourth on (:func:`traced_step`); the last step's seconds and those
    traces: the allocator as the executor runs the first steps of a session, before it has learnt
    which kernels are cheap."""
    deadline = time.monotonic() + FLAGS.warmup_seconds
    seconds = 0.0
    for _ in range(3):
        seconds = series.step(workers)[0]
    first_steps = [traced_step(series) for _ in range(FLAGS.first_traces)]
    for _ in range(3 + FLAGS.first_traces, FLAGS.warmup_steps):
        if time.monotonic() > deadline:
            break
        seconds = series.step(workers)[0]
    return seconds, first_steps


def interleaved_steps(
    sessions: Sequence[Series],
    workers: Sequence[int],
    profile: SideBySideProfile | None = None,
    link: SideBySideLink | None = None,
) -> tuple[int, list[Any]]:
    """Time the sessions' steps in rounds, one block of steps of each per round, the order rotating
    from round to round: a busy spell of the machine slows every session a little rather than one a
    lot, and no session always runs after the same other one. A block is a training job's steps,
    back to back: its first ``--block_untimed_steps``, which follow another session's, run untimed
    (the caches hold that session's graph and, on loopback, the workers' threads slept through it:
    the small NMT's one-worker step was 4.5 ms timed after other sessions' steps and 3.4-3.7 ms back
    to back), then
    its timed steps, at least ``--block_seconds`` of them. Each session gets at least ``--steps``
    and ``--timed_seconds`` of timed steps (at most ``--max_steps``); ``profile``, if given, takes
    ``--profile_steps`` traced steps spread evenly over the rounds, each after the profiler's
    untraced steps of its own (:meth:`SideBySideProfile.step`), and ``link``, if given, probes the
    link beside each (:meth:`SideBySideLink.step`). Returns the timed steps of each session and each
    session's traces of its first steps (:func:`warm_up`)."""
    warmed = [warm_up(series, workers) for series in sessions]
    longest = max(max(seconds for seconds, _ in warmed), 1e-6)
    timed = math.ceil(FLAGS.block_seconds / longest)
    steps = min(max(FLAGS.steps, math.ceil(FLAGS.timed_seconds / longest)), FLAGS.max_steps)
    rounds = math.ceil(steps / timed)
    every = max(1, rounds // max(FLAGS.profile_steps, 1))
    for index in range(rounds):
        if profile is not None and index % every == 0 and len(profile.steps.wall) < FLAGS.profile_steps:
            profile.step()
            if link is not None:
                link.step()
        shift = index % len(sessions)
        for series in [*sessions[shift:], *sessions[:shift]]:
            for _ in range(FLAGS.block_untimed_steps):
                series.step(workers)
            for _ in range(timed):
                wall, cpu = series.step(workers)
                series.wall.append(wall)
                series.cpu.append(cpu)
    return rounds * timed, [traces for _, traces in warmed]


@dataclasses.dataclass
class SideBySideLink:
    """The loopback link's CPU per transfer (``copy_b``) probed on the workers while their
    placements run (:func:`~tfplace.estimator.calibration.split_probe`, ``--link_probe_steps``
    steps a probe), as the profile is taken again beside them.

    A loopback split's step moves with what a transfer costs the workers' processors, and that
    moves with the machine: one session's relay probes read 88-155 us per side on session 26's
    VM, and the loopback splits' simulated steps move by about 0.45% per microsecond of
    ``copy_b``; a calibration minutes before compares two speeds of it. The mean probe (less
    the calibrated per-byte CPU of the probe's mean tensor) replaces the calibrated ``copy_b``
    (:func:`with_copy_b`): the kernel counts CPU in ticks of 10 ms, so one probe of 10 steps
    reads in steps of about 12 us per tensor and side (run Y's medians were 63.4, 69.7, 82.2 or
    94.7 us), and the mean of 30 resolves what the median cannot."""

    probe: SplitProbe
    copy_k: float
    samples: list[float] = dataclasses.field(default_factory=list)

    def step(self) -> None:
        """One probe of ``--link_probe_steps`` steps."""
        self.samples.append(self.probe(FLAGS.link_probe_steps))

    def copy_b(self) -> float:
        """The mean probe less ``copy_k`` for the probe's mean tensor, at least 0."""
        return self.probe.copy_b(statistics.fmean(self.samples), self.copy_k)


def open_link(stack, calibration, cluster) -> SideBySideLink | None:
    """A :class:`SideBySideLink` between ``cluster``'s first two workers (closed with ``stack``);
    ``None`` without a second worker or with ``--link_probe_steps=0``."""
    from tfplace.estimator.calibration import split_probe

    if cluster.num_workers < 2 or FLAGS.link_probe_steps < 1:
        return None
    config, target = run_config("loopback", cluster, calibration)
    [probe] = stack.enter_context(
        split_probe(
            cluster.device(0), cluster.device(1), cluster.pids[:2], target=target, config=config, reset=False
        )
    )
    return SideBySideLink(probe, calibration.process("loopback").link.copy_k)


def with_copy_b(calibration, kind: str, copy_b: float):
    """``calibration`` with ``kind``'s link costing its devices ``copy_b`` per transfer (at most the
    link's ``b``, the whole of a transfer alone)."""
    model = calibration.process(kind)
    link = dataclasses.replace(model.link, copy_b=min(copy_b, model.link.b))
    return dataclasses.replace(
        calibration, processes={**calibration.processes, kind: dataclasses.replace(model, link=link)}
    )


@dataclasses.dataclass
class SideBySideProfile:
    """The model's one-device profile taken again while its placements run: traced steps of the
    profiler's sessions (the original graph, :func:`~tfplace.estimator.profiler.profiling_config`,
    the profiler's warm-up) in some of the timed rounds, reduced per op as the profiler reduces its
    repeats (:class:`~tfplace.estimator.profiler.TracedSteps`: the steps
    :func:`~tfplace.estimator.statistics.kept_steps` keeps, preempted observations taken out, the
    statistic of each session's steps averaged over the sessions).

    This VM's speed moves by up to a quarter over seconds while the load average stays below 1:
    the Transformer's untraced step had medians of 17.2 to 22.3 ms over 2-second windows of one
    session, its process's CPU time per step moving with them, with no steal time (session 8). A
    profile taken minutes before the runs compares two speeds of the machine; taken in the same
    rounds, profile and runs see the same one.

    As the profiler (:attr:`~tfplace.estimator.statistics.RepeatPolicy.sessions`, session 18) the
    steps are spread over ``sessions`` sessions one after another, ``total_steps`` of them in
    all: part of an op's time belongs to the session that ran it (four sessions of the small NMT
    differed by 3.8-6.3% weighted by time). ``reopen`` closes the running session and opens the
    next, initialized and warmed up, returning it and its ``tasks``; without it the profile keeps
    ``session``.

    ``session`` may run in another process (:func:`open_profile` runs each in a worker of its own);
    ``tasks`` is then that process's ``/proc/<pid>/task``, whose TensorFlow threads run the ops
    and whose preemptions are counted (:func:`~tfplace.estimator.thread_accounting.tensorflow_threads`);
    ``kind`` is the CPU device kind its steps run as. ``here``, a session of the same graph in this
    process, takes untraced steps of its own before the session's, back to back in the steady
    state as the profiler's does (:func:`tfplace.estimator.profiler.profile_graph`; here before
    every traced step, the profiler before every third): the step on a virtual CPU."""

    session: Any
    fetches: Any
    feeds: dict[str, Any]
    ops: frozenset[str]
    untraced_before: int = UNTRACED_BEFORE_TRACE
    tasks: Path = OWN_TASKS
    kind: str = PROFILED_KIND["worker"]
    here: Any = None
    reopen: Callable[[], tuple[Any, Path]] | None = None
    sessions: int = 1
    total_steps: int = 1
    steps: TracedSteps = dataclasses.field(default_factory=TracedSteps)

    def step(self) -> None:
        """One traced step after ``untraced_before`` untraced ones (by default the profiler's
        :data:`~tfplace.estimator.profiler.UNTRACED_BEFORE_TRACE`, as the profiler takes them), in
        the session whose share of ``total_steps`` it falls in, ``here``'s as many before them;
        its op traces, wall-clock seconds and the preemptions of TensorFlow's threads during it
        kept (:mod:`tfplace.estimator.thread_accounting`)."""
        from tfplace.estimator.thread_accounting import preemptions_between, tensorflow_threads
        from tfplace.tf_graph.step_stats import collect_op_traces

        session = self.session_of(len(self.steps.wall))
        if self.steps.sessions and session != self.steps.sessions[-1]:
            self.session, self.tasks = self.reopen()  # type: ignore[misc]  # session_of checks it
        if self.here is not None:
            steadily = back_to_back_seconds(self.here, self.fetches, self.feeds)
            self.steps.untraced.setdefault(PROFILED_KIND["this"], []).extend(steadily)
        for index in range(self.untraced_before):
            start = time.perf_counter()
            self.session.run(self.fetches, self.feeds)
            if index:  # the first follows other sessions' steps; the others run back to back
                self.steps.untraced.setdefault(self.kind, []).append(time.perf_counter() - start)
        threads = tensorflow_threads(self.tasks)
        start = time.perf_counter()
        metadata = traced_step(self)
        wall = time.perf_counter() - start
        preempted = preemptions_between(threads, tensorflow_threads(self.tasks))
        self.steps.add(collect_op_traces(metadata, self.ops), wall, preempted, session)

    def session_of(self, step: int) -> int:
        """The session (its number) that takes traced step ``step``: ``total_steps`` shared evenly
        over the sessions, one session only without ``reopen``."""
        if self.reopen is None:
            return 0
        return min(step * self.sessions // max(self.total_steps, 1), self.sessions - 1)

    def compute_times(self) -> dict[str, float]:
        """Each op's compute time by the profiler's statistic (:meth:`TracedSteps.statistics`). (The
        kernel times that decide the steady state's inline set stay the first profile's, measured
        in sessions' steps as the profiler takes them: interleaved with other sessions' steps,
        the NMT's ``gradients/AddN_27`` crossed TensorFlow's 3.1 us threshold and the steady peak
        came out 3.99 MB instead of 4.87.)"""
        from tfplace.estimator.statistics import RepeatPolicy

        return {op: seconds for op, (seconds, _) in self.steps.statistics(RepeatPolicy()).items()}


def open_profile(stack, spec, batch: int, ops: frozenset[str]) -> SideBySideProfile:
    """The profiler's sessions of ``spec`` at ``batch`` (the last closed with ``stack``),
    :attr:`~tfplace.estimator.statistics.RepeatPolicy.sessions` of them over the
    ``--profile_steps`` traced steps, each initialized and warmed up as
    :func:`tfplace.api.estimate_costs` warms it up, where the profiler runs it: a worker process
    of its own under TensorFlow's BFC allocator for the CPU, started afresh, the previous
    session's closed first (:func:`~tfplace.estimator.profiling_process.profiling_session`).
    Its threads keep the priority of the steps it is compared with, not the profiler's raised one
    (:attr:`~tfplace.estimator.statistics.RepeatPolicy.niceness`): at nice -15 beside steps at 0
    the NMT's virtual one-device row came out -17.6% and -9.5%, at nice 0 -4.0% and -4.6%
    (four runs in turn, session 22; the Transformer's -8.1% to -9.1% either way). Beside them a
    session of the graph in this process, warmed up, times the untraced step on a virtual CPU
    (:attr:`SideBySideProfile.here`), as the profiler does.

    In this process, beside the six sessions of a virtual-CPU pass, the heap is not a profiler's:
    the small Transformer's traced steps faulted 2,625 times each (322 with only the profile here,
    during the loopback pass), its side-by-side profile summed 25% above the loopback pass's, and
    its virtual rows came out +26% to +33% (session 15; +15% to +31% in four runs of sessions 12
    and 13). On a worker of its own they came out +8% to +21% in five runs. A fresh worker for
    each model, as the loopback workers are (:func:`main`): processes that had run other models
    before ran Inception V3's kernels slower than a fresh one (its loopback rows against a fresh
    profile worker -13% to -15% when the loopback workers had run three models first, -2% to -7%
    when they were fresh too; one run each)."""
    import contextlib
    import inspect

    from tfplace.api import estimate_costs
    from tfplace.estimator.profiler import profiling_config
    from tfplace.estimator.profiling_process import profiling_session
    from tfplace.estimator.statistics import RepeatPolicy

    feeds = spec.feed_fn(batch)
    warmup_steps = inspect.signature(estimate_costs).parameters["warmup_steps"].default
    here, _ = stack.enter_context(profiling_session(spec.graph, profiling_config(), "this"))
    here.run(spec.init_op)
    for _ in range(warmup_steps):
        here.run(spec.train_op, feeds)
    running = stack.enter_context(contextlib.ExitStack())  # after here: sessions nest as a stack

    def reopen() -> tuple[Any, Path]:
        running.close()
        session, tasks = running.enter_context(profiling_session(spec.graph, profiling_config(), "worker"))
        session.run(spec.init_op)
        for _ in range(warmup_steps):
            session.run(spec.train_op, feeds)
        return session, tasks

    session, tasks = reopen()
    return SideBySideProfile(
        session,
        spec.train_op,
        feeds,
        ops,
        tasks=tasks,
        here=here,
        reopen=reopen,
        sessions=RepeatPolicy().sessions,
        total_steps=FLAGS.profile_steps,
    )


def with_compute_times(cost_graph, times: dict[str, float]):
    """A copy of ``cost_graph`` whose ops measured in ``times`` take those seconds; its ops' summed
    time over theirs before, minus one: how far the machine moved between the two profiles."""
    graph = cost_graph.copy()
    before = after = 0.0
    for op, seconds in times.items():
        if op in graph:
            before += graph.nodes[op]["compute_time"]
            after += seconds
            graph.nodes[op]["compute_time"] = seconds
    return graph, after / before - 1 if before else 0.0


def traced_step(series: Series | SideBySideProfile):
    """The ``FULL_TRACE`` step stats of one more step of ``series``."""
    import tensorflow as tf

    metadata = tf.compat.v1.RunMetadata()
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    series.session.run(series.fetches, series.feeds, options=options, run_metadata=metadata)
    return metadata


def measure_model(name: str, kind: str, cluster, calibration) -> list[dict[str, Any]]:
    """Profile, place, run and simulate ``name`` on ``kind`` devices.

    The placements are decided on the costs Standard Evaluation profiled (:func:`profiled_model`).
    Every placement then runs in two sessions at once, all of them stepping in interleaved rounds
    (:func:`interleaved_steps`) beside the profiler's session taking its traced steps again
    (:class:`SideBySideProfile`): the rows are simulated on that side-by-side profile, whose sum of
    op times over the first one's is ``profile_drift``. ``measured_s`` is :func:`step_statistic` of
    both sessions' steps together and ``noise`` the difference of the two sessions' statistics over
    it, the noise floor of the row (the same placement measured twice), which a simulator's error
    below it cannot be told from (:func:`finish_row`).
    """
    import contextlib

    from tfplace.tf_graph.session import device_mismatches

    spec, batch, estimate = profiled_model(name)
    names = device_names(kind, FLAGS.devices)
    devices = calibration.device_set(names, 1 << 40)
    cost_graph = calibrated_costs(calibration, kind, estimate.cost_graph, devices)
    placed = placements(cost_graph, estimate.imported.cost_graph, devices, FLAGS.placements)
    rows = {placer: {"model": name, "placement": placer, "kind": kind} for placer in placed}
    workers = cluster.pids if kind == "loopback" else []
    wait_for_quiet()
    before = load()
    with contextlib.ExitStack() as stack:
        sessions = [
            open_series(stack, spec, batch, placement, kind, cluster, calibration)
            for placement in placed.values()
            for _ in "ab"
        ]
        profile = open_profile(stack, spec, batch, frozenset(estimate.cost_graph))
        link = open_link(stack, calibration, cluster) if kind == "loopback" else None
        steps, first_traces = interleaved_steps(sessions, workers, profile, link)
        loads = f"{before} -> {load()}"
        for index, (placer, placement) in enumerate(placed.items()):
            pair = sessions[2 * index : 2 * index + 2]
            steady_traces = [traced_step(series) for series in pair for _ in range(FLAGS.steady_traces)]
            mismatches = device_mismatches(steady_traces[-1], placement)
            if mismatches:
                logging.warning("%s: %d ops ran elsewhere than placed", placer, len(mismatches))
            row = rows[placer]
            row.update(steps=steps, load=loads, series=[series.wall for series in pair])
            row["recv_calls"] = recv_calls(steady_traces[-1])
            row["cpu_s"] = statistics.mean(seconds for series in pair for seconds in series.cpu)
            row["allocator_runs"] = [
                allocator_peaks(spec, placement, trace)
                for traces in first_traces[2 * index : 2 * index + 2]
                for trace in traces
            ]
            row["steady_runs"] = [allocator_peaks(spec, placement, trace) for trace in steady_traces]
    compute_times = profile.compute_times()
    side_by_side, drift = with_compute_times(estimate.cost_graph, compute_times)
    untraced = {kind: step_statistic(times) for kind, times in profile.steps.untraced.items() if times}
    side_by_side.graph.pop(UNTRACED_STEP, None)  # the first profile's, beside other op times
    if untraced:
        side_by_side.graph[UNTRACED_STEP] = untraced
    profile_steps = {
        "profile_traced_s": sum(compute_times.values()),
        "profile_untraced_s": untraced.get(PROFILED_KIND["worker"], math.nan),
        "profile_untraced_here_s": untraced.get(PROFILED_KIND["this"], math.nan),
    }
    copy_b = link.copy_b() if link is not None and link.samples else None  # none with --profile_steps=0
    probed = calibration if copy_b is None else with_copy_b(calibration, kind, copy_b)
    probed_devices = probed.device_set(names, 1 << 40)
    simulated_on = calibrated_costs(probed, kind, side_by_side, probed_devices)
    fed_for_free = calibrated_costs(fed_freely(probed, kind), kind, side_by_side, probed_devices)
    as_calibrated = calibrated_costs(calibration, kind, side_by_side, devices)
    cycles_per_second = cycle_counter_hz()
    for placer, placement in placed.items():
        assignment = {op: placement.assignment[op] for op in simulated_on}
        result = simulated(simulated_on, assignment, probed_devices)
        steady = simulated(simulated_on, assignment, probed_devices, cycles_per_second)
        used = sorted(set(assignment.values()))
        rows[placer].update(
            profile=side_by_side,
            assignment=assignment,
            devices_used=len(used),
            simulated_transfers=result.transfers,
            used=used,
            simulated_s=result.makespan,
            unfed_simulated_s=simulated(fed_for_free, assignment, probed_devices).makespan,
            calibrated_link_simulated_s=simulated(as_calibrated, assignment, devices).makespan,
            link_copy_b=copy_b,
            link_copy_b_us=math.nan if copy_b is None else copy_b * 1e6,
            profile_drift=drift,
            **profile_steps,
            simulated_peaks={d: int(result.peak_memory[probed_devices.index(d)]) for d in used},
            simulated_steady_peaks={d: int(steady.peak_memory[probed_devices.index(d)]) for d in used},
        )
        finish_row(rows[placer])
    return list(rows.values())


def fed_freely(calibration, kind: str):
    """``calibration`` with ``kind``'s feeds free (:class:`~tfplace.core.device_model.FeedCost` of 0),
    as before session 16: the rows' ``unfed_simulated_s``, what modelling the feeds changed."""
    from tfplace.core.device_model import FeedCost

    free = dataclasses.replace(calibration.process(kind), feed=FeedCost())
    return dataclasses.replace(calibration, processes={**calibration.processes, kind: free})


def recv_calls(run_metadata) -> int:
    """``RecvTensor`` calls of a traced step: the tensors and control messages the workers sent
    each other over gRPC (0 between virtual CPUs), against ``simulated_transfers``."""
    from tfplace.tf_graph.step_stats import recv_tensor_records

    return len(recv_tensor_records(run_metadata))


def finish_row(row: dict[str, Any]) -> None:
    """The measured time (:func:`step_statistic` of both sessions' steps together, and their
    median), its noise floor (the two sessions' statistics apart), the errors, and the memory of
    the device with the largest simulated peak against the allocator's (the most any traced step
    of either session held: a device runs out of memory at its fullest step), in a session's first
    steps and in its steady state."""
    first, second = (step_statistic(series) for series in row["series"])
    steps = [seconds for series in row["series"] for seconds in series]
    row["measured_s"] = step_statistic(steps)
    row["median_s"] = statistics.median(steps)
    row["noise"] = abs(first - second) / row["measured_s"]
    row["error"] = (row["simulated_s"] - row["measured_s"]) / row["measured_s"]
    row["calibrated_link_error"] = (row["calibrated_link_simulated_s"] - row["measured_s"]) / row[
        "measured_s"
    ]
    row["median_error"] = (row["simulated_s"] - row["median_s"]) / row["median_s"]
    for simulated_peaks, simulated_mb, runs, peaks, peak_mb, error in (
        ("simulated_peaks", "simulated_peak_mb", "allocator_runs", "allocator_peaks", "allocator_peak_mb", "memory_error"),
        ("simulated_steady_peaks", "simulated_steady_peak_mb", "steady_runs", "steady_peaks", "steady_peak_mb",
         "steady_memory_error"),
    ):  # fmt: skip
        fullest = max(row["used"], key=lambda d: row[simulated_peaks][d])
        row[simulated_mb] = row[simulated_peaks][fullest] / MB
        # the order of the ops, and so the peak, can differ from step to step: Inception V3's
        # loopback split held 236.78 MB in two thirds of its steps and 188-197 MB in the others
        # (17c); the median of two sessions in different modes was a peak no step had (213 MB)
        row[peaks] = {d: max(run[d] for run in row[runs]) for d in row["used"]}
        row[peak_mb] = row[peaks][fullest] / MB
        row[error] = (row[simulated_mb] - row[peak_mb]) / row[peak_mb]
    logging.info(
        "%s/%s/%s: simulated %.4f s, measured %.4f s (noise %.1f%%)",
        row["model"], row["kind"], row["placement"], row["simulated_s"], row["measured_s"], 100 * row["noise"],
    )  # fmt: skip


def median_runs(passes: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per row (model, placement, kind), the pass whose time error is the median of the passes'
    (the lower middle one of an even count), with ``runs``, ``error_min``, ``error_max`` and
    ``worst_memory_error`` (the passes' memory error farthest from 0, for the 10% target on every
    pass) added; rows in the first pass's order. One pass of a few minutes on this machine catches
    one phase of its speed: the small NMT's real step moved from 3.33 to 4.72 ms between two
    passes of the same code, its error from +2.3% to -15.5% (session 23)."""
    by_row: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rows in passes:
        for row in rows:
            by_row.setdefault((row["model"], row["placement"], row["kind"]), []).append(row)
    median = []
    for runs in by_row.values():
        ordered = sorted(runs, key=lambda row: row["error"])
        median.append(
            {
                **ordered[(len(ordered) - 1) // 2],
                "runs": len(runs),
                "error_min": ordered[0]["error"],
                "error_max": ordered[-1]["error"],
                "worst_memory_error": max((row["memory_error"] for row in runs), key=abs),
            }
        )
    return median


#: Decimals each numeric column is written with.
DECIMALS = {
    "simulated_s": 6,
    "unfed_simulated_s": 6,
    "calibrated_link_simulated_s": 6,
    "link_copy_b_us": 1,
    "calibrated_link_error": 6,
    "median_s": 6,
    "median_error": 6,
    "profile_drift": 6,
    "profile_traced_s": 6,
    "profile_untraced_s": 6,
    "profile_untraced_here_s": 6,
    "measured_s": 6,
    "error": 6,
    "error_min": 6,
    "error_max": 6,
    "noise": 6,
    "cpu_s": 6,
    "memory_error": 6,
    "worst_memory_error": 6,
    "simulated_peak_mb": 2,
    "allocator_peak_mb": 2,
    "simulated_steady_peak_mb": 2,
    "steady_peak_mb": 2,
    "steady_memory_error": 6,
}


def write_rows(path: str, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> Path:
    """Write the rows' ``columns`` to ``path`` (numbers with :data:`DECIMALS`); its path."""
    output = Path(path)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            formatted = {k: f"{row[k]:.{DECIMALS[k]}f}" for k in columns if k in DECIMALS}
            writer.writerow({**row, **formatted})
    return output


INPUTS_CALIBRATION = "calibration.json"
"""The file of ``--inputs_output`` that holds the CPU device model its passes were simulated under."""


def inputs_paths(directory: str | os.PathLike[str], model: str, kind: str, run: int) -> tuple[Path, Path]:
    """The files :func:`save_inputs` writes for one pass of ``model`` on ``kind`` devices: the
    side-by-side profile (a cost graph) and the placements' assignments."""
    stem = f"{model}-{kind}-{run}"
    return Path(directory) / f"{stem}.costs.json.gz", Path(directory) / f"{stem}.assignments.json.gz"


def save_inputs(
    directory: str | os.PathLike[str], run: int, devices: Sequence[str], rows: Sequence[dict[str, Any]]
) -> None:
    """Write what one pass simulated one model's ``rows`` (one kind, every placement) from: the
    side-by-side profile, before any CPU device model (:func:`tfplace.core.costgraph.save_json`),
    the ``devices`` and each placement's device per op, so that the rows can be simulated again
    under another calibration without running anything (:func:`load_inputs`,
    ``benchmarks/resimulate_fidelity.py``)."""
    from tfplace.core.costgraph import atomic_write_bytes, save_json

    [(model, kind)] = {(row["model"], row["kind"]) for row in rows}
    costs, assignments = inputs_paths(directory, model, kind, run)
    costs.parent.mkdir(parents=True, exist_ok=True)
    save_json(rows[0]["profile"], costs)
    document = {
        "devices": list(devices),
        "assignments": {row["placement"]: row["assignment"] for row in rows},
        "link_copy_b": rows[0].get("link_copy_b"),
    }
    atomic_write_bytes(assignments, gzip.compress(json.dumps(document, sort_keys=True).encode(), mtime=0))


def load_inputs(
    directory: str | os.PathLike[str], model: str, kind: str, run: int
) -> tuple[Any, list[str], dict[str, dict[str, str]], float | None]:
    """The side-by-side profile, the devices, the assignments by placement and the link's
    side-by-side ``copy_b`` (``None`` where the pass probed none: virtual CPUs, or a pass
    before session 26) that :func:`save_inputs` wrote for one pass of ``model`` on ``kind``
    devices."""
    from tfplace.core.costgraph import load_json

    costs, assignments = inputs_paths(directory, model, kind, run)
    with gzip.open(assignments, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    return load_json(costs), document["devices"], document["assignments"], document.get("link_copy_b")


def main(argv: Sequence[str]) -> None:
    del argv
    import contextlib

    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    unknown = sorted(set(FLAGS.models) - set(MODEL_SIZES))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(MODEL_SIZES)}")
    calibration = CpuCalibration.load(FLAGS.calibration)
    if FLAGS.runs < 1:
        raise app.UsageError(f"--runs must be at least 1, got {FLAGS.runs}")
    if FLAGS.inputs_output:  # the device model the saved inputs were simulated under
        Path(FLAGS.inputs_output).mkdir(parents=True, exist_ok=True)
        calibration.save(Path(FLAGS.inputs_output) / INPUTS_CALIBRATION)
    passes = []
    for run in range(1, FLAGS.runs + 1):  # each pass over all models: their runs minutes apart
        rows = []
        for kind in FLAGS.kinds:
            for name in FLAGS.models:  # fresh workers per model, as a training job starts its own
                workers = LocalCluster(FLAGS.devices) if kind == "loopback" else contextlib.nullcontext()
                with workers as cluster:
                    measured = [
                        {**row, "run": run} for row in measure_model(name, kind, cluster, calibration)
                    ]
                if FLAGS.inputs_output:
                    save_inputs(FLAGS.inputs_output, run, device_names(kind, FLAGS.devices), measured)
                rows += measured
        logging.info("pass %d of %d: %s", run, FLAGS.runs, summary(rows))
        passes.append(rows)
    if FLAGS.runs_output:
        write_rows(FLAGS.runs_output, [row for rows in passes for row in rows], ("run", *PASS_COLUMNS))
    rows = median_runs(passes)
    output = write_rows(FLAGS.output, rows, COLUMNS)
    print(f"CPU device model ({FLAGS.calibration}): {calibration.to_dict()}")
    print(output.read_text(), end="")
    print(
        "model,kind,placement,step of each session (statistic / median) [s],steps,load 1/5/15 min before -> after"
    )
    for row in rows:
        sessions = " ".join(
            f"{step_statistic(series):.5f}/{statistics.median(series):.5f}" for series in row["series"]
        )
        print(f"{row['model']},{row['kind']},{row['placement']},{sessions},{row['steps']},{row['load']}")
    for row in rows:
        peaks = ", ".join(
            f"{d}: {row['simulated_peaks'][d] / MB:.2f}/{row['allocator_peaks'][d] / MB:.2f}, "
            f"{row['simulated_steady_peaks'][d] / MB:.2f}/{row['steady_peaks'][d] / MB:.2f}"
            for d in row["used"]
        )
        print(
            f"{row['model']}/{row['kind']}/{row['placement']} peak MB simulated/allocator, first steps "
            f"then steady: {peaks}"
        )
    print(summary(rows))


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """How many rows meet the targets, and how many rows' noise floor is itself above 2%; of the
    median rows (:func:`median_runs`), also how many meet them on every pass."""

    def within(key: str, bound: float) -> int:
        return sum(abs(row[key]) <= bound for row in rows)

    unfed = sum(abs(r["unfed_simulated_s"] / r["measured_s"] - 1) <= 0.05 for r in rows)
    every_pass = ""
    if rows and "runs" in rows[0]:
        both = sum(max(abs(r["error_min"]), abs(r["error_max"])) <= 0.05 for r in rows)
        every_pass = (
            f"on every one of {rows[0]['runs']} passes: step within 5% {both}/{len(rows)}, "
            f"memory within 10% {within('worst_memory_error', 0.10)}/{len(rows)}; of the median pass: "
        )
    return every_pass + (
        f"step within 5%: {within('error', 0.05)}/{len(rows)} ({unfed} with feeds for free), "
        f"within 10%: {within('error', 0.10)} "
        f"(the median step within 5%: {within('median_error', 0.05)}); "
        f"within its noise floor: {sum(abs(r['error']) <= r['noise'] for r in rows)}; "
        f"noise floor above 2%: {sum(r['noise'] > 0.02 for r in rows)}; memory within 10%: first steps "
        f"{within('memory_error', 0.10)}/{len(rows)}, steady {within('steady_memory_error', 0.10)}/{len(rows)}"
    )


if __name__ == "__main__":
    app.run(main)
