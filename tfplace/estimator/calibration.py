"""Calibrate the transfer model ``t = k * bytes + b`` of one link, and a step's per-host overhead.

Celeritas (section 4.2.1, after Pesto) takes the communication cost between two devices as a
linear function of the bytes sent, with ``k`` and ``b`` fitted off-line. :func:`calibrate_transfer`
fits them for a pair of TensorFlow devices: two virtual CPUs of one process, two workers of a
:class:`~tfplace.tf_graph.cluster.LocalCluster`, or two GPUs.

For each size, a variable of that many bytes lives on the source device, and a step reads it and
takes one element of it on the destination device (a tensor the consumer reads, so it crosses the
link; the graph's constant folding cannot remove it since a variable's value is unknown). The same
step with the consumer on the source device is timed alternately with it, and the difference of
the two smallest times is the transfer's time: session overhead and the read cancel out. Both steps also
fetch a scalar computed on the destination device, so that both run on both devices: on a
cluster, a step that involves a second worker costs about 0.35 ms more whatever it does (the
master's call to that worker), and that cost is the step's, not the transfer's
(:func:`calibrate_step_overhead` measures it; the simulator adds it once per host,
:attr:`tfplace.core.devices.DeviceSet.step_overhead`).

``b`` is a transfer's fixed cost when it is sent alone. Transfers sent together overlap part of it
(gRPC's request round trip): :func:`time_concurrent_transfers` sends 1, 4, 16 small tensors at once,
and the intercept of the time against the count is the link's ``latency``
(:class:`~tfplace.core.transfer.TransferModel`), the part of ``b`` that does not hold the link.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tfplace.core.device_model import CpuCalibration, CpuProcessModel
from tfplace.core.devices import Device, DeviceSet
from tfplace.core.progress import track
from tfplace.core.transfer import TransferModel
from tfplace.estimator.step_timing import back_to_back_seconds, step_statistic, timed_step

__all__ = [
    "DEFAULT_CHAINS",
    "DEFAULT_COUNTS",
    "DEFAULT_FITS",
    "DEFAULT_LINK_FITS",
    "DEFAULT_SIZES",
    "DEFAULT_SPLIT",
    "STEADY_STATE_STEPS",
    "WIDE_SPLIT",
    "ChainShape",
    "CopyCpu",
    "OverheadFit",
    "SplitProbe",
    "SplitShape",
    "StepTiming",
    "calibrate_copy_cpu",
    "calibrate_cpu",
    "calibrate_local_cluster",
    "calibrate_op_overhead",
    "calibrate_step_overhead",
    "calibrate_transfer",
    "copy_cpu_line",
    "fit_op_overhead",
    "handoff_on_threads",
    "handoff_per_tensor",
    "latency_from_counts",
    "op_chains",
    "overhead_per_host",
    "pooled_fits",
    "pooled_links",
    "process_cpu_seconds",
    "profiled_run_config",
    "profiled_sum",
    "slope_per_count",
    "split_probe",
    "time_concurrent_transfers",
    "time_step_overheads",
    "time_traced_and_untraced",
    "time_transfers",
]

DEFAULT_SIZES: tuple[int, ...] = tuple(2**p for p in range(10, 27, 2))
"""Bytes timed by default: 1 KiB to 64 MiB in powers of 4."""

DEFAULT_COUNTS: tuple[int, ...] = (1, 4, 16)
"""Small tensors sent at once to measure how much of ``b`` transfers overlap."""

HANDOFF_COUNTS: tuple[int, ...] = (16, 64, 128)
"""Tensors handed over at once between two virtual CPUs whose times' slope is one tensor's hand-off
(:func:`handoff_per_tensor`)."""

_CONCURRENT_BYTES = 1024
"""Size of each tensor :func:`time_concurrent_transfers` sends."""


class SplitShape(NamedTuple):
    """The training step :func:`split_probe` splits between two devices: ``layers`` dense layers of
    ``width`` units on ``rows`` rows, with residual adds, a squared loss and plain updates."""

    layers: int = 8
    width: int = 96
    rows: int = 16


DEFAULT_SPLIT = SplitShape()
"""The step :func:`calibrate_copy_cpu` splits for a tensor's fixed CPU: 41 tensors cross per step
(activations of 6 KB, weight gradients of 36 KB, bias gradients and shapes), the same order as
the small models' two-worker splits send (97-361)."""

WIDE_SPLIT = SplitShape(layers=8, width=512, rows=4)
"""The step :func:`calibrate_copy_cpu` splits for a tensor's CPU per byte: as many tensors as
:data:`DEFAULT_SPLIT`, weight gradients of 1 MB (397 KB on average against 16.5 KB), little
compute. Each side spent 0.45-0.6 ns per byte more than on the default step (session 34), where
one 64 MB tensor cost 0.32 ns per byte; the same step on 32 rows (more compute, the same bytes)
cost no more per tensor, and one of 96 units on 256 rows (56 KB, sixteen times the compute) about
what its bytes add."""


class CopyCpu(NamedTuple):
    """CPU seconds each side of a loopback transfer spends (:func:`calibrate_copy_cpu`): the link's
    ``copy_k`` and ``copy_b`` (:class:`~tfplace.core.transfer.TransferModel`)."""

    copy_k: float
    copy_b: float


class ChainShape(NamedTuple):
    """A small training step :func:`calibrate_op_overhead` times: about ``ops`` ops of dense layers
    of ``width`` units on ``rows`` rows (:func:`_op_chain`)."""

    ops: int
    width: int = 16
    rows: int = 4


DEFAULT_CHAINS: tuple[ChainShape, ...] = (
    ChainShape(150),
    ChainShape(600),
    ChainShape(1200),
    ChainShape(2400),
)
"""The steps :func:`calibrate_op_overhead` times: narrow chains of four lengths (a few KB
allocated per step), up to the op counts of the graphs the model is applied to (the small
models' 635-4,277 ops; the longest chain records 3,539). A real step's cost per op beyond its
traced kernels may grow with the graph: on session 26's VM two exploratory timings of chains of
1,779 and 3,539 records paid +0.044..+0.067 us per op where the fit over chains of up to 1,779
had given -0.020, and the small NMT (3,873 ops) came out 13% under its real step on virtual CPUs
with that fit; the five fits of the calibration with this chain then gave -0.089 (-0.153 ..
+0.029), so the chain spans the models' sizes without settling how the cost grows.

Chains of wide layers (2.7 to 10.9 MB allocated per step) ran their untraced steps slower than
their traced kernels by up to 1 ms, and from session 23 to 25 a per-byte overhead fitted on them
was added to every op. It did not carry over to the models on either machine it was measured on:
on the session-23 AMD EPYC the chains gave 18.7 us per allocated MB on virtual CPUs where the
Transformer's real steps needed 25-42 and the NMT's none; on the session-25 Intel Xeon they gave
65 where the Transformer needed 2, Tensor Holography -36 and the NMT 104, and the Transformer's,
Tensor Holography's and Inception V3's one-device steps came out 5-13% over with it, within 4%
without. Whatever makes wide chains slow untraced is not a cost per byte of what the ops
allocate (nor per parameter byte: Inception V3, with 262 MB of them, needed less than none)."""

DEFAULT_FITS = 5
"""Independent per-op overhead fits :func:`calibrate_op_overhead` pools (their median).

One fit of the narrow chains (20 repeats) scattered by 0.2-0.3 us per op on virtual CPUs
and 0.65 us on loopback between five calibrations in one run at load 3-6, and by 0.2 / 0.56 us
between two on the quiet machine; the NMT's 3,870 ops of 1-2 us miss by that much."""

DEFAULT_LINK_FITS = 3
"""Independent fits of the loopback link :func:`calibrate_local_cluster` pools (:func:`pooled_links`)."""

_OPS_PER_LAYER = 30
"""About the ops of one layer of :func:`_op_chain`'s training step (forward, gradient, update)."""


class StepTiming(NamedTuple):
    """One calibration step measured traced and untraced (:func:`time_traced_and_untraced`)."""

    records: int
    traced: float
    untraced: float


class OverheadFit(NamedTuple):
    """What an untraced step takes beyond its ops' traced times (:func:`fit_op_overhead`)."""

    op_overhead: float
    step_overhead: float


STEADY_STATE_STEPS = 100
"""Steps a session runs before its timing counts: TensorFlow's executor estimates each kernel's
cost from its runs (starting at 10^8 cycles, decaying by a tenth per run) and runs the kernels it
finds cheap inline only after about 90 steps, which changes the per-op dispatch cost; a training
job spends nearly all its steps after that."""


def time_transfers(
    src_device: str,
    dst_device: str,
    *,
    target: str = "",
    config: Any = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 10,
) -> list[float]:
    """Seconds one transfer of each of ``sizes`` bytes takes from ``src_device`` to ``dst_device``.

    Each value is the smallest of ``repeats`` timed steps that send the tensor minus the smallest of as
    many steps doing the same work without sending it (at least 0); both kinds of step run on both
    devices. See :func:`calibrate_transfer` for the parameters.
    """
    bad = [size for size in sizes if size < 4]
    if bad:
        raise ValueError(f"transfer sizes must be at least 4 bytes (one float32), got {bad}")
    build = _payload_steps(src_device, dst_device, sizes)
    label = f"calibrating {src_device} -> {dst_device}"
    return _time_differences(dst_device, build, sizes, label, target, config, repeats)


def _concurrent_steps(
    src_device: str, dst_device: str, counts: Sequence[int]
) -> Callable[[Any], list[tuple[Any, Any]]]:
    """``build(anchor)`` for :func:`_time_differences`: per count, that many tensors of 1 KiB made
    on ``src_device`` and summed there (``same``) or on ``dst_device`` (``crossing``)."""
    import tensorflow as tf

    def build(anchor: Any) -> list[tuple[Any, Any]]:
        steps = []
        for count in counts:
            with tf.device(src_device):
                base = tf.compat.v1.Variable(tf.zeros([_CONCURRENT_BYTES // 4]), name=f"base_{count}")
                tensors = [base.read_value() + float(i) for i in range(count)]
                local = tf.add_n([tensor[0] for tensor in tensors])
            with tf.device(dst_device):
                remote = tf.add_n([tensor[0] for tensor in tensors])
            steps.append(([local, anchor], [local, remote]))
        return steps

    return build


def _split_training_steps(
    src_device: str, dst_device: str, shapes: Sequence[SplitShape]
) -> Callable[[Any], list[tuple[Any, Any]]]:
    """``build(anchor)`` for :func:`_calibration_session`: per shape of ``shapes``, a training step
    of it, its forward pass and updates on ``src_device`` and its gradients there too (``same``) or
    on ``dst_device`` (``crossing``: the activations the gradients need cross, and the weight
    gradients cross back to their updates), the two parts a placement in topological order makes
    of a training step. The learning rate is 0, so that the values, and the kernels' speed, stay
    the same however many steps run."""
    import tensorflow as tf

    for shape in shapes:
        if min(shape) < 1:
            raise ValueError(f"a split training step needs at least one layer, unit and row, got {shape}")

    def training_step(shape: SplitShape, scope: str, gradient_device: str) -> Any:
        rng = np.random.default_rng(0)
        inputs, targets = (
            rng.standard_normal((shape.rows, shape.width)).astype(np.float32) for _ in range(2)
        )
        with tf.compat.v1.variable_scope(scope), tf.device(src_device):
            hidden = tf.constant(inputs)
            for layer in range(shape.layers):
                weights = tf.compat.v1.get_variable(
                    f"weights_{layer}",
                    [shape.width, shape.width],
                    initializer=tf.compat.v1.glorot_uniform_initializer(seed=layer),
                )
                biases = tf.compat.v1.get_variable(
                    f"biases_{layer}", [shape.width], initializer=tf.compat.v1.zeros_initializer()
                )
                activation = tf.nn.relu(tf.matmul(hidden, weights) + biases)
                hidden = hidden + activation if layer % 2 else tf.tanh(activation)
            loss = tf.reduce_mean(tf.square(hidden - tf.constant(targets)))
            variables = tf.compat.v1.trainable_variables(scope + "/")
            with tf.device(gradient_device):
                gradients = tf.compat.v1.gradients(loss, variables, colocate_gradients_with_ops=False)
            return tf.compat.v1.train.GradientDescentOptimizer(0.0).apply_gradients(zip(gradients, variables))

    def build(anchor: Any) -> list[tuple[Any, Any]]:
        return [
            (
                [training_step(shape, f"one_device_{index}", src_device), anchor],
                [training_step(shape, f"split_{index}", dst_device), anchor],
            )
            for index, shape in enumerate(shapes)
        ]

    return build


def _payload_steps(
    src_device: str, dst_device: str, sizes: Sequence[int]
) -> Callable[[Any], list[tuple[Any, Any]]]:
    """``build(anchor)`` for :func:`_time_differences`: per size, a variable of that many bytes on
    ``src_device``, one element of it taken there (``same``) or on ``dst_device`` (``crossing``)."""
    import tensorflow as tf

    def build(anchor: Any) -> list[tuple[Any, Any]]:
        steps = []
        for size in sizes:
            with tf.device(src_device):
                variable = tf.compat.v1.Variable(tf.zeros([size // 4]), name=f"payload_{size}")
                value = variable.read_value()
                local = value[0]
            with tf.device(dst_device):
                remote = value[0]
            steps.append(([local, anchor], [local, remote]))
        return steps

    return build


def time_concurrent_transfers(
    src_device: str,
    dst_device: str,
    *,
    target: str = "",
    config: Any = None,
    counts: Sequence[int] = DEFAULT_COUNTS,
    repeats: int = 10,
) -> list[float]:
    """Seconds ``count`` tensors of 1 KiB sent at once take from ``src_device`` to ``dst_device``.

    Like :func:`time_transfers`: the smallest of steps that send them minus the smallest of steps
    doing the same work on ``src_device``, both steps running on both devices.
    """
    if not counts or min(counts) < 1:
        raise ValueError(f"tensor counts must be positive, got {list(counts)}")
    build = _concurrent_steps(src_device, dst_device, counts)
    label = f"calibrating concurrent transfers {src_device} -> {dst_device}"
    return _time_differences(dst_device, build, counts, label, target, config, repeats)


@contextlib.contextmanager
def _calibration_session(
    dst_device: str,
    build: Callable[[Any], list[tuple[Any, Any]]],
    target: str,
    config: Any,
    reset: bool = True,
) -> Iterator[tuple[Any, list[tuple[Any, Any]]]]:
    """A session and the ``(same, crossing)`` pairs of fetches ``build(anchor)`` makes.

    ``anchor`` is a scalar computed on ``dst_device`` that the ``same`` fetches include, so that
    both steps run on both devices. The variables live in a container of their own, reset on a
    remote target afterwards if ``reset`` (a reset closes every session of the target's master,
    so a session among others' leaves its few bytes to the servers' end).
    """
    import tensorflow as tf

    container = f"tfplace_calibration_{uuid.uuid4().hex}"
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.container(container):
        with tf.device(dst_device):
            anchor = tf.compat.v1.Variable(tf.zeros([1]), name="anchor").read_value()[0]
        steps = build(anchor)
        initializer = tf.compat.v1.global_variables_initializer()
    try:  # closed, not left as the default session: others may open and close around it
        with contextlib.closing(tf.compat.v1.Session(target, graph=graph, config=config)) as session:
            session.run(initializer)
            yield session, steps
    finally:
        if target and reset:  # a remote server keeps the variables until their container is reset
            tf.compat.v1.Session.reset(target, [container])


def _time_differences(
    dst_device: str,
    build: Callable[[Any], list[tuple[Any, Any]]],
    items: Sequence[int],
    label: str,
    target: str,
    config: Any,
    repeats: int,
) -> list[float]:
    """Per ``(same, crossing)`` pair of :func:`_calibration_session` (one per item), the smallest
    time of ``crossing`` minus that of ``same``, the two timed alternately (other processes on the
    machine only add time)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    seconds = []
    with _calibration_session(dst_device, build, target, config) as (session, steps):
        for _, (same, crossing) in track(zip(items, steps), label, detail=_item):
            session.run([same, crossing])  # warm up both paths
            same_times, crossing_times = [], []
            for _ in range(repeats):
                same_times.append(timed_step(session, same))
                crossing_times.append(timed_step(session, crossing))
            seconds.append(max(min(crossing_times) - min(same_times), 0.0))
    return seconds


def _item(item: tuple[int, Any]) -> str:
    return f"{item[0]:,}"


def latency_from_counts(counts: Sequence[int], seconds: Sequence[float], b: float) -> float:
    """The part of ``b`` that transfers sent together overlap: the intercept of the seconds ``count``
    tensors take on the count (least squares), clipped to ``[0, b]``.

    With ``t(n) = latency + n * spacing``, one tensor alone takes ``latency + spacing``; its fixed
    cost ``b`` splits into the ``latency`` and the link's occupancy ``b - latency``.
    """
    if len(set(counts)) < 2:
        raise ValueError(f"the latency needs at least two different counts, got {list(counts)}")
    _, intercept = np.polyfit(np.asarray(counts, dtype=float), np.asarray(seconds, dtype=float), 1)
    return float(min(max(intercept, 0.0), b))


def calibrate_transfer(
    src_device: str,
    dst_device: str,
    *,
    target: str = "",
    config: Any = None,
    sizes: Sequence[int] | None = None,
    repeats: int = 10,
    counts: Sequence[int] | None = DEFAULT_COUNTS,
) -> TransferModel:
    """Fit the transfer model of the link ``src_device -> dst_device`` to timed transfers.

    Parameters
    ----------
    src_device, dst_device : str
        TensorFlow device names, e.g. ``/device:CPU:0`` and ``/device:CPU:1`` (with
        ``config=ConfigProto(device_count={"CPU": 2})``), or two tasks of a cluster
        (``LocalCluster.device(0)``, ``LocalCluster.device(1)`` with ``target=cluster.target``).
    target : str
        Session target; ``""`` for an in-process session.
    config : tf.compat.v1.ConfigProto, optional
        Session config (it must create both devices).
    sizes : sequence of int, optional
        Bytes per transfer; :data:`DEFAULT_SIZES` (2^10 .. 2^26) by default.
    repeats : int
        Timed steps per size and path.
    counts : sequence of int or None
        Numbers of small tensors sent at once to measure the link's ``latency``
        (:func:`latency_from_counts`); ``None`` leaves it 0 (all of ``b`` holds the link).

    Returns
    -------
    TransferModel
        ``k`` seconds per byte, ``b`` seconds per transfer and the ``latency`` part of ``b``, all
        >= 0, named ``"<src> -> <dst>"``.
    """
    chosen = tuple(sizes) if sizes is not None else DEFAULT_SIZES
    seconds = time_transfers(
        src_device, dst_device, target=target, config=config, sizes=chosen, repeats=repeats
    )
    fitted = TransferModel.fit(chosen, seconds, name=f"{src_device} -> {dst_device}")
    if counts is None:
        return fitted
    together = time_concurrent_transfers(
        src_device, dst_device, target=target, config=config, counts=counts, repeats=repeats
    )
    return dataclasses.replace(fitted, latency=latency_from_counts(counts, together, fitted.b))


def time_step_overheads(
    devices: Sequence[str], *, target: str = "", config: Any = None, repeats: int = 20
) -> list[float]:
    """Seconds of a step that reads one scalar on each of the first ``1, 2, ..., len(devices)``
    devices (the smallest of ``repeats``, the step sizes timed in turns): the framework's cost per step
    as more devices take part."""
    import tensorflow as tf

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    container = f"tfplace_calibration_{uuid.uuid4().hex}"
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.container(container):
        scalars = []
        for index, device in enumerate(devices):
            with tf.device(device):
                scalars.append(tf.compat.v1.Variable(tf.zeros([1]), name=f"scalar_{index}").read_value()[0])
        initializer = tf.compat.v1.global_variables_initializer()
    steps = [scalars[: used + 1] for used in range(len(devices))]
    times: list[list[float]] = [[] for _ in steps]
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as session:
            session.run(initializer)
            session.run(steps)
            for _ in range(repeats):
                for step, seconds in zip(steps, times):
                    seconds.append(timed_step(session, step))
    finally:
        if target:
            tf.compat.v1.Session.reset(target, [container])
    return [min(seconds) for seconds in times]


def overhead_per_host(seconds: Sequence[float]) -> float:
    """Least-squares seconds per host, through the origin, of ``seconds[i]`` (a step on ``i + 1`` hosts)."""
    hosts = np.arange(1, len(seconds) + 1, dtype=float)
    return max(float(np.dot(hosts, seconds) / np.dot(hosts, hosts)), 0.0)


def calibrate_step_overhead(
    devices: Sequence[str], *, target: str = "", config: Any = None, repeats: int = 20
) -> float:
    """Seconds a training step costs per host taking part, beyond its ops and transfers.

    Times steps that do next to nothing on 1, 2, ... of ``devices`` (give one device per host:
    the workers of a cluster) and fits :func:`overhead_per_host`: the value of
    :attr:`tfplace.core.devices.DeviceSet.step_overhead` (Celeritas section 6.3 times whole steps, and
    a session's per-step work is part of them).
    """
    if not devices:
        raise ValueError("calibrating the step overhead needs at least one device")
    return overhead_per_host(time_step_overheads(devices, target=target, config=config, repeats=repeats))


def calibrate_copy_cpu(
    src_device: str,
    dst_device: str,
    processes: Sequence[int],
    *,
    target: str = "",
    config: Any = None,
    repeats: int = 30,
    rounds: int = 5,
    shapes: tuple[SplitShape, SplitShape] = (DEFAULT_SPLIT, WIDE_SPLIT),
) -> CopyCpu:
    """CPU seconds per byte and per tensor that the sending and the receiving process each spend.

    The link's ``copy_k`` and ``copy_b`` (:class:`~tfplace.core.transfer.TransferModel`) when the
    devices' processors do the transfers' work (gRPC between TensorFlow processes on CPUs: the
    request's handling per tensor, serialization and copies per byte). Reads the CPU time of
    ``processes`` (the process ids hosting the two devices: ``LocalCluster.pids``) around
    ``repeats`` steps of a training step split between the devices against as many of it on one
    (:func:`split_probe`, one session), ``rounds`` times for each of two ``shapes`` whose tensors
    differ in size, the rounds interleaved; the line through each shape's median per tensor is
    :func:`copy_cpu_line`.

    What a tensor costs depends on what the two processes do around it. On session 31-32's AMD VM
    a tensor relayed back and forth alone cost each side 117-158 us, one of 64 sent at once
    35-80 us, and the small models' two-worker splits spent 83-96 us per tensor and side beyond
    their one-worker steps (run X's ``cpu_s``, ``docs/experiments.md``), as the split training
    step does (77-110 us): a split's mix of dependent hops and tensors that travel together is what
    the simulator charges, so a split is what is measured. Its bytes too: a split's tensors of tens
    to hundreds of kilobytes cost each side 0.45-0.6 ns per byte where one 64 MB tensor cost 0.32
    (:data:`WIDE_SPLIT`, session 34). CPU time, unlike wall-clock time, hardly changes when other
    processes share the machine. Linux only (``/proc``). The kernel counts it in ticks of 10 ms:
    30 split steps send about 1,200 tensors, about 20 ticks a side.
    """
    if repeats < 1 or rounds < 1:
        raise ValueError(f"need repeats >= 1 and rounds >= 1, got {repeats}, {rounds}")
    with split_probe(
        src_device, dst_device, processes, target=target, config=config, shapes=shapes
    ) as probes:
        reads: list[list[float]] = [[] for _ in probes]
        for _ in range(rounds):
            for probe, read in zip(probes, reads):
                read.append(probe(repeats))
    small, wide = ((probe.mean_bytes, float(np.median(read))) for probe, read in zip(probes, reads))
    return copy_cpu_line(small, wide)


def copy_cpu_line(small: tuple[float, float], wide: tuple[float, float]) -> CopyCpu:
    """The link's CPU per byte and per tensor a side through two split steps' ``(mean bytes, CPU
    seconds per tensor)``: ``copy_k`` the slope, at least 0 (a noisy wider step that reads less),
    and ``copy_b`` the rest of the smaller step's tensor, at least 0."""
    (small_bytes, small_cpu), (wide_bytes, wide_cpu) = small, wide
    if wide_bytes <= small_bytes:
        raise ValueError(
            f"the wide split's tensors ({wide_bytes:.0f} bytes on average) must be larger than the "
            f"small split's ({small_bytes:.0f})"
        )
    copy_k = max((wide_cpu - small_cpu) / (wide_bytes - small_bytes), 0.0)
    return CopyCpu(copy_k, max(small_cpu - copy_k * small_bytes, 0.0))


@dataclasses.dataclass(frozen=True)
class SplitProbe:
    """``probe(repeats)``: the CPU seconds the two devices' ``processes`` each spend per tensor
    of a split training step (:func:`_split_training_steps`), from ``repeats`` steps of the split
    against as many of the step on one device; ``transfers`` tensors cross per step, of
    ``mean_bytes`` on average."""

    session: Any
    pair: tuple[Any, Any]
    processes: Sequence[int]
    transfers: int
    mean_bytes: float

    def __call__(self, repeats: int) -> float:
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        spent = _cpu_difference(self.session, self.pair, self.processes, repeats)
        return spent / (len(self.processes) * repeats * self.transfers)

    def copy_b(self, per_tensor: float, copy_k: float) -> float:
        """A link's ``copy_b`` from ``per_tensor`` CPU seconds a side (what probes read): less
        ``copy_k`` for the probe's mean tensor, at least 0."""
        return max(per_tensor - copy_k * self.mean_bytes, 0.0)


@contextlib.contextmanager
def split_probe(
    src_device: str,
    dst_device: str,
    processes: Sequence[int],
    *,
    target: str = "",
    config: Any = None,
    shapes: Sequence[SplitShape] = (DEFAULT_SPLIT,),
    warmup_steps: int = 20,
    reset: bool = True,
) -> Iterator[list[SplitProbe]]:
    """A session of a training step of each of ``shapes`` split between ``src_device`` and
    ``dst_device`` and on ``src_device`` alone (:func:`_split_training_steps`), warmed up, and
    their :class:`SplitProbe` each. The tensors that cross are counted in a traced step of each:
    TensorFlow's ``RecvTensor`` records (:func:`~tfplace.tf_graph.step_stats.recv_tensor_records`;
    the anchor's scalar crosses in both), their bytes their producers' first outputs'. Beside other
    sessions of a remote ``target``, give ``reset=False``: resetting the probe's variables would
    close them (:func:`_calibration_session`). Probed again and again while other steps run, it
    follows the machine's speed."""
    import tensorflow as tf

    from tfplace.tf_graph.step_stats import recv_tensor_records

    build = _split_training_steps(src_device, dst_device, shapes)
    with _calibration_session(dst_device, build, target, config, reset) as (session, pairs):
        probes = []
        for pair in pairs:
            crossed = []
            for fetch in pair:
                for _ in range(warmup_steps):
                    session.run(fetch)
                metadata = tf.compat.v1.RunMetadata()
                options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                session.run(fetch, options=options, run_metadata=metadata)
                crossed.append([record.producer for record in recv_tensor_records(metadata)])
            own = set(crossed[0])
            split = [producer for producer in crossed[1] if producer not in own]
            if not split:
                raise RuntimeError(
                    f"no tensor crossed from {src_device} to {dst_device} or back in the split training step: "
                    "the devices are one process's, or the traced step recorded no RecvTensor"
                )
            tensors = [
                session.graph.get_operation_by_name(producer.split(":")[0]).outputs[0] for producer in split
            ]
            mean_bytes = float(
                np.mean([(tensor.shape.num_elements() or 0) * tensor.dtype.size for tensor in tensors])
            )
            probes.append(SplitProbe(session, pair, processes, len(split), mean_bytes))
        yield probes


def _cpu_difference(session: Any, pair: tuple[Any, Any], processes: Sequence[int], repeats: int) -> float:
    """CPU seconds ``processes`` spend over ``repeats`` steps of ``pair``'s ``crossing`` fetch
    beyond as many of its ``same`` one (a pair of :func:`_calibration_session`), at least 0."""
    spent = []
    for fetch in pair:
        before = sum(process_cpu_seconds(pid) for pid in processes)
        for _ in range(repeats):
            session.run(fetch)
        spent.append(sum(process_cpu_seconds(pid) for pid in processes) - before)
    return max(spent[1] - spent[0], 0.0)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process ``pid`` has used, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def calibrate_local_cluster(
    cluster: Any,
    memory: int,
    *,
    repeats: int = 30,
    counts: Sequence[int] | None = None,
    fits: int = DEFAULT_LINK_FITS,
) -> DeviceSet:
    """The devices of a :class:`~tfplace.tf_graph.cluster.LocalCluster` with every cost calibrated.

    One CPU device per worker, each of ``memory`` bytes, linked by the loopback gRPC link fitted by
    :func:`calibrate_transfer` between the first two workers, whose per-tensor and per-byte CPU on
    each side (:func:`calibrate_copy_cpu`, as a split training step spends it; its ``copy_b`` at
    most the link's ``b``, and the link's ``k`` at least its ``copy_k``: a split's tensors of tens to
    hundreds of kilobytes cost each side more per byte than the link's fit of one to 64 MB took
    whole, session 34) the simulator charges to the devices, each the median of ``fits`` fits
    (:func:`pooled_links`); the
    per-worker step overhead of :func:`calibrate_step_overhead`; and the machine's cores, which the
    workers share. A cluster of one worker gets only the overhead.
    """
    if fits < 1:
        raise ValueError(f"fits must be at least 1, got {fits}")
    names = [cluster.device(task) for task in range(cluster.num_workers)]
    devices = tuple(Device(name, memory) for name in names)
    overhead = calibrate_step_overhead(names, target=cluster.target)
    cores = os.cpu_count() or 0
    if len(names) < 2:
        return DeviceSet(devices, step_overhead=overhead, cores=cores)
    links = []
    for _ in range(fits):
        link = calibrate_transfer(names[0], names[1], target=cluster.target, repeats=repeats, counts=counts)
        copy = calibrate_copy_cpu(
            names[0], names[1], cluster.pids[:2], target=cluster.target, config=profiled_run_config()
        )
        links.append(
            dataclasses.replace(
                link, k=max(link.k, copy.copy_k), copy_k=copy.copy_k, copy_b=min(copy.copy_b, link.b)
            )
        )
    return DeviceSet(devices, inter_host=pooled_links(links), step_overhead=overhead, cores=cores)


def pooled_links(links: Sequence[TransferModel]) -> TransferModel:
    """The median of each parameter of several fits of one link (the first fit's name).

    Fits of the loopback gRPC link a minute apart read ``b`` 252 and 413 us and ``copy_b`` 164
    and 105 us (session 11, against 245-319 and 80-95 us in four calibrations before), and a
    split's simulated step on that link moves with them by a third: one fit in a busy moment
    must not set them (as :func:`pooled_fits` for the per-op overhead).
    """
    if not links:
        raise ValueError("pooling link fits needs at least one fit")

    def median(field: str) -> float:
        return float(np.median([getattr(link, field) for link in links]))

    return dataclasses.replace(
        links[0],
        k=median("k"),
        b=median("b"),
        latency=median("latency"),
        copy_k=median("copy_k"),
        copy_b=median("copy_b"),
    )


def handoff_per_tensor(
    src_device: str,
    dst_device: str,
    *,
    config: Any = None,
    counts: Sequence[int] = HANDOFF_COUNTS,
    repeats: int = 10,
    fits: int = DEFAULT_LINK_FITS,
) -> float:
    """Seconds one more tensor handed from ``src_device`` to ``dst_device`` of this process costs:
    the median over ``fits`` fits of the slope (least squares) of the time ``counts`` tensors of 1
    KiB take handed over at once (:func:`time_concurrent_transfers`), each at least 0.

    One tensor's time is the difference of two steps' minima and as small as their noise: 0-4.6 us
    on this machine from run to run, fitted ``b`` 1.35 us. The slope over 16-128 tensors measures
    the same cost many times over: 2.35 us in two runs in a row, as a chain of 400 ops crossing
    between the devices 9, 39 or 99 times costs 2.5-4.8 us per crossing (session 8). A training
    step hands over tensors by the dozen or hundred (98 for the small NMT split in two). One fit
    read 2.5, 4.1 and 4.7 us in three calibrations of session 33-34's VM, and the small NMT's
    virtual split, 97 hand-offs, moved by 4.5 points from the first to the last (run AA
    re-simulated): one fit in a busy moment must not set it (as :func:`pooled_links`)."""
    if fits < 1:
        raise ValueError(f"fits must be at least 1, got {fits}")
    slopes = [
        slope_per_count(
            counts,
            time_concurrent_transfers(src_device, dst_device, config=config, counts=counts, repeats=repeats),
        )
        for _ in range(fits)
    ]
    return float(np.median(slopes))


def slope_per_count(counts: Sequence[int], seconds: Sequence[float]) -> float:
    """Seconds each one more of ``counts`` adds: the least-squares slope of ``seconds`` on the
    counts, at least 0 (:func:`handoff_per_tensor`)."""
    if len(set(counts)) < 2:
        raise ValueError(f"a slope needs at least two different counts, got {list(counts)}")
    slope, _ = np.polyfit(np.asarray(counts, dtype=float), np.asarray(seconds, dtype=float), 1)
    return float(max(slope, 0.0))


def handoff_on_threads(link: TransferModel) -> TransferModel:
    """The link between two virtual CPUs of one process with all its work done by the process's
    own inter-op threads: ``copy_b = b`` and ``copy_k = k`` (no ``latency``), which hold a thread
    in the simulator.

    The hand-off is a ``_Send`` and a ``_Recv`` kernel and the rendezvous callback between them, all
    run by the executor's threads; there is no wire whose time transfers sent together could
    overlap. On this machine 64 tensors sent at once took 0.22-0.31 ms against 3-4 us for one, and
    the intercept of that time against the count scattered around 0 from run to run: time that a
    one-thread process cannot spend on ops."""
    return dataclasses.replace(link, latency=0.0, copy_b=link.b, copy_k=link.k)


def profiled_run_config(virtual_cpus: int = 1, inter_op_threads: int = 1) -> Any:
    """A session config whose untraced steps run the graph the profiler timed, as it timed it.

    The profiler (:func:`tfplace.estimator.profiler.profiling_config`) runs the GraphDef's own ops
    (Grappler and the classic optimizer off) with one intra-op thread; real steps under this config
    do too, so that the simulated and the real step run the same ops. ``virtual_cpus`` devices
    ``/device:CPU:i`` share ``inter_op_threads``; soft placement is off (a misplaced op is an
    error). On a cluster, clear ``device_count``: the workers' threads are their servers'.
    """
    from tfplace.estimator.profiler import profiling_config

    config = profiling_config()
    config.device_count["CPU"] = virtual_cpus
    config.inter_op_parallelism_threads = inter_op_threads
    config.allow_soft_placement = False
    return config


StepBuilder = Callable[[str], tuple[Any, Any, Any, Mapping[str, Any]]]
"""``build(device)``: a new graph of one training step on ``device``, its fetch, its initializer
and the feeds a step takes (:func:`time_traced_and_untraced`)."""


def _op_chain(shape: ChainShape, device: str) -> tuple[Any, Any, Any, Mapping[str, Any]]:
    """A small training step of about ``shape.ops`` ops on ``device``: a chain of dense layers
    (``rows`` x ``width`` activations) with their gradients and plain gradient descent, the mix of
    kernels, allocations and tensors of a training graph. A :data:`StepBuilder` (no feeds). Its
    variables are named after the shape: sessions on one worker share variables by name."""
    import tensorflow as tf

    graph = tf.Graph()
    scope = f"chain_{shape.ops}x{shape.width}x{shape.rows}"
    with graph.as_default(), tf.device(device), tf.name_scope(scope):
        h = tf.compat.v1.Variable(tf.ones([shape.rows, shape.width]), name="chain_input").read_value()
        for layer in range(max(shape.ops // _OPS_PER_LAYER, 1)):
            weight = tf.compat.v1.Variable(tf.eye(shape.width) * 0.5, name=f"w{layer}")
            bias = tf.compat.v1.Variable(tf.zeros([shape.width]), name=f"b{layer}")
            h = tf.nn.relu(tf.matmul(h, weight) + bias)
        loss = tf.reduce_sum(h * h)
        train = tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(loss)
        initializer = tf.compat.v1.global_variables_initializer()
    return graph, train, initializer, {}


def op_chains(shapes: Sequence[ChainShape]) -> list[StepBuilder]:
    """Builders of chains of dense layers (:func:`_op_chain`) of each of ``shapes``, the steps
    :func:`calibrate_op_overhead` times (:func:`time_traced_and_untraced`)."""
    return [functools.partial(_op_chain, shape) for shape in shapes]


def time_traced_and_untraced(
    steps: Sequence[StepBuilder],
    *,
    target: str = "",
    config: Any = None,
    device: str = "/device:CPU:0",
    repeats: int = 20,
    warmup_steps: int = STEADY_STATE_STEPS,
) -> list[StepTiming]:
    """Per training step ``steps`` build, the ops a ``FULL_TRACE`` step records and their times
    summed, as the profiler measures them (on a worker of its own under the BFC allocator,
    :mod:`tfplace.estimator.profiling_process`), and the seconds of a whole untraced step on ``device`` under ``config`` at ``target``, after
    ``warmup_steps`` untraced steps (:data:`STEADY_STATE_STEPS`: the executor's steady state).
    The steps and the two kinds of run are timed in turns, ``repeats`` times; each turn first runs
    its step once untimed, so that every timed step follows a step of its own graph, as in a
    training job (:data:`~tfplace.estimator.step_timing.WARM_STEPS`).

    The traced ops' times are reduced by the profiler's statistic over the ops and the
    ``repeats`` steps together (:func:`profiled_sum`), the untraced steps (``WARM_STEPS`` per
    turn) by the same statistic of whole steps (:func:`~tfplace.estimator.step_timing.step_statistic`): both the tenth quantile
    of the steps, what a step takes when nothing slows it, as ``benchmarks/fidelity.py`` compares
    them. (Each op's own quantile summed 10-18% below every traced step of the chains, and until
    session 10 the untraced step was the smallest of its repeats; the smallest traced *sum*
    instead needs one step with none of its ops preempted, which on a busy machine a step of
    1,800 ops never has.)"""
    import tensorflow as tf

    from tfplace.estimator.profiler import UNTRACED_BEFORE_TRACE, profiling_config
    from tfplace.estimator.profiling_process import profiling_session
    from tfplace.tf_graph.step_stats import node_kernel_time

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with contextlib.ExitStack() as stack:
        runs = []
        for build in steps:
            graph, fetch, initializer, feeds = build("/device:CPU:0")
            session, _ = stack.enter_context(profiling_session(graph, profiling_config(), "worker"))
            session.run(initializer)
            graph, remote_fetch, initializer, _ = build(device)
            remote = stack.enter_context(tf.compat.v1.Session(target, graph=graph, config=config))
            remote.run(initializer)
            for _ in range(warmup_steps):
                remote.run(remote_fetch, feeds)
            runs.append((session, fetch, remote, remote_fetch, feeds))
        records = [0] * len(steps)
        traced: list[dict[str, list[float]]] = [{} for _ in steps]
        untraced: list[list[float]] = [[] for _ in steps]
        for repeat in track(range(repeats + 2), "calibrating the per-op overhead"):
            for i, (session, fetch, remote, remote_fetch, feeds) in enumerate(runs):
                metadata = tf.compat.v1.RunMetadata()
                for _ in range(UNTRACED_BEFORE_TRACE):  # as the profiler's traced steps run
                    session.run(fetch, feeds)
                session.run(fetch, feeds, options=trace, run_metadata=metadata)
                seconds = back_to_back_seconds(remote, remote_fetch, feeds)
                if repeat < 2:  # warm-up
                    continue
                nodes = [
                    node
                    for dev in metadata.step_stats.dev_stats
                    for node in dev.node_stats
                    if not node.node_name.startswith("_SOURCE")
                ]
                records[i] = len(nodes)
                for node in nodes:
                    traced[i].setdefault(node.node_name, []).append(node_kernel_time(node))
                untraced[i].extend(seconds)
    return [
        StepTiming(count, profiled_sum(t), step_statistic(u))
        for count, t, u in zip(records, traced, untraced)
    ]


def profiled_sum(times: Mapping[str, Sequence[float]]) -> float:
    """The summed op times the profiler takes of traced steps (op -> seconds in each traced step,
    in step order): its statistic over the ops and steps together, as
    :func:`~tfplace.estimator.profiler.time_statistics` reduces a profile."""
    from tfplace.estimator.profiler import TIME_FLOOR
    from tfplace.estimator.statistics import RepeatPolicy, location

    policy = RepeatPolicy()
    steps = max((len(seconds) for seconds in times.values()), default=0)
    matrix = np.full((len(times), steps), np.nan)
    for row, seconds in enumerate(times.values()):
        matrix[row, : len(seconds)] = seconds
    return float(
        np.maximum(location(matrix, policy.statistic, policy.trim, policy.lower_fraction), TIME_FLOOR).sum()
    )


def fit_op_overhead(timings: Sequence[StepTiming]) -> OverheadFit:
    """The least-squares line of what an untraced step takes beyond its ops' traced times,
    ``untraced - traced = step_overhead + op_overhead * records``
    (:class:`~tfplace.core.device_model.CpuProcessModel`). The step overhead is at least 0: a
    negative intercept refits through the origin."""
    ops = np.array([t.records for t in timings], dtype=float)
    extra = np.array([t.untraced - t.traced for t in timings], dtype=float)
    if len(set(ops.tolist())) < 2:
        raise ValueError(
            f"the per-op overhead needs chains of at least two lengths, got {ops.astype(int).tolist()}"
        )
    slope, intercept = np.polyfit(ops, extra, 1)
    if intercept < 0:  # no step costs less than its ops
        slope, intercept = float(ops @ extra / (ops @ ops)), 0.0
    return OverheadFit(float(slope), float(intercept))


def pooled_fits(fits: Sequence[OverheadFit]) -> OverheadFit:
    """Several independent :func:`fit_op_overhead` results pooled: the median of each
    coefficient. One fit in a busy time window moves the median by at most one rank, where it
    would move a mean (or a single fit) by all its error."""
    if not fits:
        raise ValueError("pooling per-op overhead fits needs at least one fit")
    return OverheadFit(*(float(np.median(values)) for values in zip(*fits)))


def calibrate_op_overhead(
    *,
    target: str = "",
    config: Any = None,
    device: str = "/device:CPU:0",
    chains: Sequence[ChainShape] = DEFAULT_CHAINS,
    repeats: int = 20,
    fits: int = DEFAULT_FITS,
) -> tuple[OverheadFit, tuple[float, ...]]:
    """The per-op and per-step overhead of real steps on ``device``
    (:class:`CpuProcessModel`), and each fit's per-op overhead, whose spread says how far the
    pooled value can be trusted: ``fits`` times, in fresh sessions one after the other, the small
    training steps of ``chains`` timed traced and untraced (:func:`op_chains`,
    :func:`time_traced_and_untraced`) and fitted by :func:`fit_op_overhead`; the fits pooled by
    :func:`pooled_fits`. Time them with one inter-op thread: the ops then run one at a time, as
    they were traced."""
    if fits < 1:
        raise ValueError(f"fits must be at least 1, got {fits}")
    each = [
        fit_op_overhead(
            time_traced_and_untraced(
                op_chains(chains), target=target, config=config, device=device, repeats=repeats
            )
        )
        for _ in range(fits)
    ]
    return pooled_fits(each), tuple(fit.op_overhead for fit in each)


def calibrate_cpu(
    *,
    workers: int = 2,
    virtual_threads: int = 1,
    repeats: int = 20,
    chains: Sequence[ChainShape] = DEFAULT_CHAINS,
    fits: int = DEFAULT_FITS,
) -> CpuCalibration:
    """Calibrate this machine's CPU device model (:class:`~tfplace.core.device_model.CpuCalibration`).

    ``"virtual"``: two virtual CPUs of this process under :func:`profiled_run_config` with
    ``virtual_threads`` inter-op threads, their per-op and per-step overhead
    (:func:`calibrate_op_overhead` on ``chains``, the median of ``fits`` fits) and the hand-off
    between them
    (:func:`calibrate_transfer` for the bytes, :func:`handoff_per_tensor` for each tensor, work of
    the threads: :func:`handoff_on_threads`). ``"loopback"`` (with ``workers`` >= 1): a
    :class:`~tfplace.tf_graph.cluster.LocalCluster`'s per-op overhead on worker 0, its per-worker
    step overhead and gRPC link (:func:`calibrate_local_cluster`), one inter-op thread per worker.
    Each kind's feed cost on its first device
    (:func:`~tfplace.estimator.feed_calibration.calibrate_feed_cost`; on loopback, the master's).
    The machine's ``MatMul`` row blocks, from each row's median over three timings
    (:func:`~tfplace.estimator.row_blocks.measure_matmul_row_blocks`).

    One thread per process is the default: with two on this 2-core machine, the small NMT's real
    step took 5.3 ms against 3.5 ms with one (ops handed to the other thread wait for it to wake),
    a cost the simulator does not model; it does model the threads' parallelism.
    """
    import socket

    from tfplace.estimator.feed_calibration import calibrate_feed_cost
    from tfplace.estimator.row_blocks import measure_matmul_row_blocks
    from tfplace.tf_graph.cluster import LocalCluster

    cores = os.cpu_count() or 1
    threads = virtual_threads
    sequential = profiled_run_config(2, 1)
    overhead, spread = calibrate_op_overhead(config=sequential, chains=chains, repeats=repeats, fits=fits)
    handoff = profiled_run_config(2, threads)
    link = calibrate_transfer("/device:CPU:0", "/device:CPU:1", config=handoff, repeats=repeats, counts=None)
    per_tensor = handoff_per_tensor("/device:CPU:0", "/device:CPU:1", config=handoff, repeats=repeats)
    link = dataclasses.replace(link, b=per_tensor)
    feed = calibrate_feed_cost("/device:CPU:0", config=sequential, repeats=repeats)
    processes = {
        "virtual": CpuProcessModel(
            overhead.op_overhead,
            overhead.step_overhead,
            threads,
            handoff_on_threads(link),
            spread,
            feed,
        )
    }
    if workers >= 1:
        remote = profiled_run_config()
        remote.ClearField("device_count")
        with LocalCluster(workers) as cluster:
            overhead, spread = calibrate_op_overhead(
                target=cluster.target,
                config=remote,
                device=cluster.device(0),
                chains=chains,
                repeats=repeats,
                fits=fits,
            )
            devices = calibrate_local_cluster(cluster, 1 << 40, repeats=repeats)
            feed = calibrate_feed_cost(
                cluster.device(0), target=cluster.target, config=remote, repeats=repeats
            )
            processes["loopback"] = CpuProcessModel(
                overhead.op_overhead,
                devices.step_overhead,
                cluster.inter_op_threads,
                devices.inter_host,
                spread,
                feed,
            )
    return CpuCalibration(socket.gethostname(), cores, processes, measure_matmul_row_blocks())
