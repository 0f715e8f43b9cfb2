"""Device models: turn op costs measured on one device into another device's (a roofline).

Profiles are taken where the user can run the graph (here, a CPU); placements target GPUs. A
:class:`DeviceModel` estimates one op's time on a device from its floating-point work and the bytes it
reads and writes::

    t = launch_overhead + max(flops / (peak_flops * compute_efficiency),
                              bytes / (memory_bandwidth * memory_efficiency))

:func:`convert_graph` applies it to every op of a cost graph. Ops whose work is unknown keep their
measured time scaled by the speed ratio of the others (their summed roofline time over their summed
measured time), so nothing is left at zero or at CPU speed. The work is unknown for ops with no
FLOP count and no bytes, and for ops that run a function body (:data:`OPAQUE_OPS`: a functional
``While``, ``If``, a function call), whose FLOPs and bytes describe their interface, not the body's
kernels. Where the target device was measured, :meth:`DeviceModel.calibrate` fits the two
efficiencies to the measurements.

:class:`CpuCalibration` is the other device model: not a roofline but the CPUs of the machine the
profile was taken on, whose real (untraced) steps differ from the profile by a per-op overhead (the
graph's own, where the profiler timed its untraced step beside the traced ones) and a per-step
overhead, run several ops at once per process and pass tensors over calibrated links.

Peak numbers are vendors' dense FP32 figures for the PCIe cards (TF32 tensor cores off, as
TensorFlow 1.x ran); efficiencies default to what cuDNN convolutions and streaming kernels
typically reach.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tfplace.core.costgraph import (
    CHANNEL_BLOCK,
    UNTRACED_STEP,
    CostGraph,
    atomic_write_text,
    untraced_steps,
)
from tfplace.core.devices import Device, DeviceName, DeviceSet
from tfplace.core.transfer import TransferModel

__all__ = [
    "CALIBRATION_FORMAT",
    "CPU_KINDS",
    "DEFAULT_CALIBRATION",
    "DEVICE_MODELS",
    "EXECUTOR_COST_DECAY",
    "EXPENSIVE_KERNEL_CYCLES",
    "FED_OPS",
    "INEXPENSIVE_KERNELS",
    "OPAQUE_OPS",
    "VIEW_OPS",
    "CpuCalibration",
    "CpuProcessModel",
    "DeviceModel",
    "FeedCost",
    "convert_graph",
    "cpu_kind",
    "inline_ops",
    "least_cost_estimate",
    "op_bytes_accessed",
    "stored_matmul_row_blocks",
]

OPAQUE_OPS = frozenset(
    {
        "While",
        "StatelessWhile",
        "If",
        "StatelessIf",
        "Case",
        "StatelessCase",
        "PartitionedCall",
        "StatefulPartitionedCall",
    }
)
"""Op types that run a function body: a roofline of their inputs and outputs misses its work.

A profile attributes the body's kernels to such an op (a lowered ``While`` runs them once per
iteration); only the measured time knows how much work that is.
"""

VIEW_OPS = frozenset(
    {"Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "EnsureShape", "Reshape",
     "Squeeze", "ExpandDims", "ReadVariableOp"}
)  # fmt: skip
"""Op types that only describe a buffer anew when TensorFlow forwards their input: an op of these
types whose every output is an input's buffer (``aliased_outputs``) moves no data and costs its
launch overhead, not a roofline of its bytes."""


@dataclass(frozen=True)
class DeviceModel:
    """The roofline of one device type.

    Parameters
    ----------
    name : str
    peak_flops : float
        FLOP/s at the precision the graph computes in.
    memory_bandwidth : float
        Bytes/s of device memory.
    memory : int
        Bytes of device memory.
    launch_overhead : float
        Seconds every op costs regardless of its size (kernel launch and framework overhead).
    compute_efficiency, memory_efficiency : float
        Fractions of the peaks that real kernels reach.
    """

    name: str
    peak_flops: float
    memory_bandwidth: float
    memory: int
    launch_overhead: float = 8e-6
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.7

    def op_time(self, flops: float, nbytes: float) -> float:
        """Roofline seconds of one op doing ``flops`` and moving ``nbytes``."""
        compute = flops / (self.peak_flops * self.compute_efficiency)
        traffic = nbytes / (self.memory_bandwidth * self.memory_efficiency)
        return self.launch_overhead + max(compute, traffic)

    def calibrate(self, flops: np.ndarray, nbytes: np.ndarray, seconds: np.ndarray) -> DeviceModel:
        """Fit the two efficiencies to ops measured on this device.

        Ops whose roofline is compute-bound give ``compute_efficiency`` (median of achieved over
        peak), the others ``memory_efficiency``; efficiencies stay within ``(0, 1]``.
        """
        busy = np.maximum(np.asarray(seconds, dtype=float) - self.launch_overhead, 1e-9)
        flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
        compute_bound = flops / self.peak_flops > nbytes / self.memory_bandwidth
        compute_efficiency, memory_efficiency = self.compute_efficiency, self.memory_efficiency
        if (compute_bound & (flops > 0)).any():
            achieved = flops[compute_bound] / busy[compute_bound] / self.peak_flops
            compute_efficiency = float(np.clip(np.median(achieved), 1e-3, 1.0))
        if (~compute_bound & (nbytes > 0)).any():
            achieved = nbytes[~compute_bound] / busy[~compute_bound] / self.memory_bandwidth
            memory_efficiency = float(np.clip(np.median(achieved), 1e-3, 1.0))
        return replace(self, compute_efficiency=compute_efficiency, memory_efficiency=memory_efficiency)


#: Presets for common training GPUs (dense FP32 peaks, HBM bandwidth).
DEVICE_MODELS: dict[str, DeviceModel] = {
    "V100-32GB": DeviceModel("V100-32GB", peak_flops=14.0e12, memory_bandwidth=900e9, memory=32 * 2**30),
    "A100-40GB": DeviceModel("A100-40GB", peak_flops=19.5e12, memory_bandwidth=1555e9, memory=40 * 2**30),
    "H100-80GB": DeviceModel("H100-80GB", peak_flops=51.0e12, memory_bandwidth=2000e9, memory=80 * 2**30),
}


def device_model(name: str) -> DeviceModel:
    """A preset by name; the error lists the presets."""
    try:
        return DEVICE_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown device model {name!r}; presets: {', '.join(DEVICE_MODELS)}") from None


def op_bytes_accessed(graph: CostGraph, op: str) -> int:
    """Bytes an op reads (its inputs, each tensor once) and writes (its outputs)."""
    read = 0
    seen: set[tuple[str, int]] = set()
    for producer, _, edge in graph.in_edges(op, data=True):
        if edge["slots"]:
            sizes = graph.nodes[producer]["output_sizes"]
            for slot in edge["slots"]:
                if (producer, slot) not in seen and slot < len(sizes):
                    seen.add((producer, slot))
                    read += sizes[slot]
        else:
            read += edge["bytes"]
    return read + sum(graph.nodes[op]["output_sizes"])


def convert_graph(
    graph: CostGraph, target: DeviceModel, overrides: Mapping[str, float] | None = None
) -> CostGraph:
    """A copy of ``graph`` with every op's ``compute_time`` estimated on ``target``.

    Ops doing known work (FLOPs or bytes, and not in :data:`OPAQUE_OPS`) get the roofline time;
    views of a forwarded buffer (:data:`VIEW_OPS`) get the launch overhead;
    ops that do nothing measurable and were measured near zero keep the launch overhead; ops with
    measured time but unknown work are scaled by the known ops' summed roofline time over their
    summed measured time. That aggregate ratio is the speed-up of the graph's work; the median of
    per-op ratios follows the many tiny ops that launch overhead dominates instead. On the NMT
    with while loops at batch 512 (profiled on a 2-core CPU, V100 target), the median known op is
    5x slower on the V100 than measured while the known ops together are 76x faster; the aggregate
    ratio gives the loops 5.1 s, and the step 5.4 s against 4.9 s for the same network unrolled,
    where every kernel has a roofline. ``overrides`` (op -> seconds) replaces estimates with
    measurements on the target. Memory is unchanged: tensors keep their size.
    """
    converted = graph.copy()
    names = list(graph.nodes)
    measured = np.array([graph.nodes[n]["compute_time"] for n in names])
    flops = np.array([graph.nodes[n]["flops"] for n in names])
    nbytes = np.array([op_bytes_accessed(graph, n) for n in names], dtype=float)
    opaque = np.array([graph.nodes[n].get("op_type") in OPAQUE_OPS for n in names], dtype=bool)
    view = np.array([_is_view(graph.nodes[n]) for n in names], dtype=bool)
    nbytes[view] = 0.0
    known = ((flops > 0) | (nbytes > 0) | view) & ~opaque
    roofline = np.array([target.op_time(f, b) for f, b in zip(flops, nbytes)])
    timed = known & (measured > 0)
    speedup = float(roofline[timed].sum() / measured[timed].sum()) if timed.any() else 1.0
    estimate = np.where(known, roofline, np.where(measured > 0, measured * speedup, 0.0))
    estimate = np.where(
        (estimate > 0) & (estimate < target.launch_overhead), target.launch_overhead, estimate
    )
    for name, seconds in zip(names, estimate.tolist()):
        converted.nodes[name]["compute_time"] = seconds
    for name, seconds in (overrides or {}).items():
        converted.nodes[name]["compute_time"] = float(seconds)
    converted.graph["device_model"] = target.name
    converted.graph.pop(CHANNEL_BLOCK, None)  # the profiling CPU's SIMD blocks, not the target's
    converted.graph.pop(UNTRACED_STEP, None)  # the profiling CPU's step, not the target's
    return converted


def _is_view(attrs: Mapping[str, Any]) -> bool:
    """Whether an op only re-describes its input's buffer (:data:`VIEW_OPS`, every output aliased)."""
    aliased = {slot for slot, _, _ in attrs.get("aliased_outputs", ())}
    return attrs.get("op_type") in VIEW_OPS and len(aliased) == len(attrs["output_sizes"]) > 0


DEFAULT_CALIBRATION = os.path.join(".tfplace_cache", "calibration.json")
"""Where ``tfplace calibrate`` stores the machine's :class:`CpuCalibration` by default."""

CALIBRATION_FORMAT = 10
"""Version of a stored :class:`CpuCalibration`. 10 (session 34): a loopback link's ``copy_k`` is
the CPU per byte and side of split training steps of two tensor sizes
(:func:`tfplace.estimator.calibration.copy_cpu_line`), 0.45-0.6 ns per byte where one 64 MB
tensor cost 0.32, and its ``k`` at least that; the ``MatMul`` row blocks are timed as the
profiler times ops, in a worker process of their own with one intra-op thread (the calibrating
process's pool had two, and every calibration of session 34 found no staircase), and found on
each row's median over three timings, not voted. 9 (session 33): a loopback link's ``copy_b`` is
the CPU per tensor and side of a training step split between two workers
(:func:`tfplace.estimator.calibration.split_probe`), and tensors sent together share none of it
(format 8's ``copy_b_shared`` is ignored): the small models' splits spent 83-96 us per tensor
and side whatever their mix of hops and bursts, where the batch rule charged them 42-63. 8 (session 31): a loopback link's
``copy_b_shared``, the part of a transfer's CPU that tensors sent together share
(:func:`tfplace.estimator.calibration.calibrate_copy_cpu`); an older file charges every transfer
the whole ``copy_b``. Its ``MatMul`` row blocks are timed on the kernels, without the session
call (:func:`tfplace.estimator.row_blocks.time_matmul_rows`), which had voted oneDNN's staircase
away on a VM whose call took twice a product's kernel. 7 (session 26): no per-byte overhead (format 6's
``byte_overhead``, fitted on chains of wide layers, is ignored: it did not carry over to the
models, :data:`tfplace.estimator.calibration.DEFAULT_CHAINS`), and a loopback link's ``copy_b``
is the CPU of a transfer sent alone, about twice what format 6 measured sending 200 at once
(:func:`tfplace.estimator.calibration.calibrate_copy_cpu`). 6 (session 23): the per-byte overhead
of what an op allocates is measured beside the per-op one. 5 (session 19): the per-op overhead is measured
against chains traced as the profiler now traces, on a worker of its own under TensorFlow's BFC
allocator for the CPU (``tfplace.estimator.profiling_process``). 4 (session 16): each kind's :class:`FeedCost` is
measured (an older file feeds for free). 3 (session 12): the per-op overhead is measured
against the traced ops' kernel times, which profiles now count, not their whole node times (about
0.4 us per op less on this machine). 2 (session 11): against traced op times that add up to the
steps' tenth quantile and untraced steps reduced by that quantile; a file without a format (1)
against each op's own quantile and the least untraced step. An older file is read with a warning
to calibrate again."""

CPU_KINDS = ("virtual", "loopback")
"""The kinds of CPU devices :class:`CpuCalibration` models: ``"virtual"``, the CPUs of one
process (``/device:CPU:i``, a session's ``device_count``), and ``"loopback"``, one CPU per worker
process on this machine (``/job:worker/task:k/device:CPU:0``, :class:`~tfplace.tf_graph.cluster.LocalCluster`)."""


FED_OPS = frozenset({"Placeholder"})
"""Op types whose output a step must be fed (``PlaceholderWithDefault`` need not be)."""


@dataclass(frozen=True)
class FeedCost:
    """What a step's fed tensors cost the session beyond an unfed step:
    ``per_step + per_tensor * tensors + per_byte * bytes`` seconds, before any op can use them.

    A ``feed_dict`` is checked and converted tensor by tensor by the client and, on a worker, sent
    to the master in the ``RunStep`` request, all before the step starts. On this VM (session 16)
    an in-process step took 52 us more with feeds and 16 us per fed tensor, a loopback worker's 111
    us, 26 us and 0.83 ns per byte, where the small models' whole steps are 4-150 ms.
    :func:`tfplace.estimator.feed_calibration.calibrate_feed_cost` measures it.
    """

    per_step: float = 0.0
    per_tensor: float = 0.0
    per_byte: float = 0.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if not getattr(self, field.name) >= 0:
                raise ValueError(
                    f"a feed cost's {field.name} must be >= 0 seconds, got {getattr(self, field.name)}"
                )

    def share(self, nbytes: int, tensors: int) -> float:
        """Seconds one fed tensor of ``nbytes`` bytes costs a step that feeds ``tensors`` tensors:
        its own and its bytes' cost and an equal part of the per-step cost."""
        if tensors < 1:
            raise ValueError(f"a fed tensor's step feeds at least one tensor, got {tensors}")
        return self.per_step / tensors + self.per_tensor + self.per_byte * nbytes

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> FeedCost:
        return cls(**{field.name: float(spec[field.name]) for field in dataclasses.fields(cls)})


@dataclass(frozen=True)
class CpuProcessModel:
    """How the real, untraced step of one kind of CPU device differs from its profile.

    Profiles time every op in ``FULL_TRACE`` steps, one op at a time; real steps run untraced, with
    the executor's own per-op work between the ops and the session's per-step work around them.

    Parameters
    ----------
    op_overhead : float
        Seconds a real step spends per op beyond the op's traced kernel time: the executor's
        dispatch of the op minus what tracing adds inside the kernel's span (the tracked
        allocations). Negative where tracing adds more than dispatching costs; only the
        difference can be told from step times, and only it matters.
    step_overhead : float
        Seconds a step costs per process taking part, beyond its ops (the session's run call,
        feeds and fetches; on a worker, the master's call to it).
    threads : int
        Ops a process runs at once: its inter-op thread pool, shared by all its devices.
    link : TransferModel
        Between two devices of this kind (two virtual CPUs: a hand-off inside the process; two
        workers: loopback gRPC, with the CPU each side spends as ``copy_k``/``copy_b``).
    op_overhead_fits : tuple of float
        The independent fits ``op_overhead`` is the median of (``tfplace calibrate``), kept to
        show how far it can be trusted; empty in files written before they were pooled.
    feed : FeedCost
        What the step's fed tensors cost (none in files calibrated before it was measured).
    """

    op_overhead: float
    step_overhead: float
    threads: int
    link: TransferModel
    op_overhead_fits: tuple[float, ...] = ()
    feed: FeedCost = FeedCost()

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"a process runs at least one op at a time, got threads={self.threads}")
        if self.step_overhead < 0:
            raise ValueError(f"step_overhead must be >= 0 seconds, got {self.step_overhead}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_overhead": self.op_overhead,
            "step_overhead": self.step_overhead,
            "threads": self.threads,
            "link": self.link.to_dict(),
            "op_overhead_fits": list(self.op_overhead_fits),
            "feed": self.feed.to_dict(),
        }

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> CpuProcessModel:
        return cls(
            op_overhead=float(spec["op_overhead"]),
            step_overhead=float(spec["step_overhead"]),
            threads=int(spec["threads"]),
            link=TransferModel.from_dict(spec["link"]),
            op_overhead_fits=tuple(float(fit) for fit in spec.get("op_overhead_fits", ())),
            feed=FeedCost.from_dict(spec["feed"]) if "feed" in spec else FeedCost(),
        )


def clamped_shift(times: Sequence[float], total: float) -> float:
    """The shift ``c`` with ``sum(max(t + c, 0) for t in times) == total`` (the largest such ``c``
    when ``total`` is 0 or less): a per-op overhead added to every op's time, no op below 0, that
    makes ``times`` add up to ``total``. Where no op would fall below 0 it is
    ``(total - sum(times)) / len(times)``; where some would, the others take what they cannot."""
    descending = sorted(times, reverse=True)
    if not descending:
        raise ValueError("no op times to shift")
    if total <= 0:
        return -descending[0]
    taken = 0.0
    for count, seconds in enumerate(descending[:-1], start=1):
        taken += seconds
        shift = (total - taken) / count
        if descending[count] + shift <= 0:
            return shift
    return (total - sum(descending)) / len(descending)


@dataclass(frozen=True)
class CpuCalibration:
    """The CPU device model of one machine, calibrated once (``tfplace calibrate``) and stored.

    It turns a profile (per-op ``FULL_TRACE`` times) and CPU device names into what the simulator
    needs to predict a real, untraced step on those devices: :meth:`step_costs` adds the per-op
    overhead to every op's time, :meth:`device_set` gives the devices their link, step overhead,
    inter-op threads and the machine's shared cores. Only CPU devices of this machine are
    modelled; GPU device models (:class:`DeviceModel`) are untouched.

    Parameters
    ----------
    machine : str
        The host name it was measured on.
    cores : int
        Processors of the machine, which all its devices share.
    processes : mapping of str to CpuProcessModel
        By kind of device (:data:`CPU_KINDS`); a kind not calibrated is absent.
    matmul_row_blocks : mapping of str to int
        Rows the machine's CPU ``MatMul`` kernels compute per pass over the weights, by transpose
        variant (:mod:`tfplace.estimator.row_blocks`: oneDNN's ``transpose_b`` products here pass
        once per three rows); a variant absent, as in files calibrated before it was measured, is 1
        (its time grows smoothly with the rows).
    """

    machine: str
    cores: int
    processes: Mapping[str, CpuProcessModel]
    matmul_row_blocks: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.processes) - set(CPU_KINDS))
        if unknown:
            raise ValueError(f"unknown CPU device kinds {unknown}; the kinds are {', '.join(CPU_KINDS)}")
        if self.cores < 1:
            raise ValueError(f"a machine has at least one core, got cores={self.cores}")
        if any(block < 1 for block in self.matmul_row_blocks.values()):
            raise ValueError(f"MatMul row blocks are at least 1, got {dict(self.matmul_row_blocks)}")

    def process(self, kind: str) -> CpuProcessModel:
        """The model of ``kind``; the error says how to calibrate a kind that is missing."""
        if kind not in CPU_KINDS:
            raise ValueError(f"unknown CPU device kind {kind!r}; the kinds are {', '.join(CPU_KINDS)}")
        try:
            return self.processes[kind]
        except KeyError:
            raise ValueError(
                f"this calibration of {self.machine!r} has no {kind!r} CPU devices "
                f"(it has: {', '.join(self.processes) or 'none'}); run tfplace calibrate for them"
            ) from None

    def op_overhead(self, graph: CostGraph, kind: str) -> float:
        """Seconds a real step on ``kind`` devices spends per op of ``graph`` beyond its traced time.

        Where the profiler timed the graph's own untraced step (:func:`untraced_steps`) on a device
        of kind ``kind``, it is what that step took beyond the ops' traced times and the calibrated
        step and feed costs of ``kind``, per op. Where it timed it on a device of another kind
        ``measured`` only, the same plus the calibrated difference of the two kinds' per-op
        overheads::

            (untraced[measured] - sum of compute_time - step_overhead[measured] - feeds[measured]) / ops
                + op_overhead[kind] - op_overhead[measured]

        An untraced step shorter than the traced ops (the traced steps ran in a slower spell:
        Inception V3's large kernels, session 36) would put the smallest ops below 0, where
        :meth:`step_costs` holds them; the share is then the :func:`clamped_shift` that makes the
        ops still add up to the step.

        The calibration's chains cannot stand for every graph: on the Intel VM of sessions 25-29
        their fit gave -0.07 us per op where the small NMT's own steps took +0.21..+0.39, Tensor
        Holography's +0.08..+3.3 and Inception V3's -3.2..+1.7 (its traced convolutions slow in
        some passes), ``docs/experiments.md``; nor can their difference of the kinds: on session
        31's AMD VM it was 0.035 us per op, and the small NMT's one-device step took 0.44 us per op
        more on a worker than in this process. Without any untraced step of the graph, the
        calibration's :attr:`CpuProcessModel.op_overhead`."""
        model = self.process(kind)
        measured = untraced_steps(graph)
        if not measured or graph.number_of_nodes() == 0:
            return model.op_overhead
        timed_on = kind if kind in measured else min(measured)
        where = self.process(timed_on)
        fed = [attrs for _, attrs in graph.nodes(data=True) if attrs.get("op_type") in FED_OPS]
        feeds = sum(where.feed.share(sum(attrs["output_sizes"]), len(fed)) for attrs in fed)
        kernels = [seconds for _, seconds in graph.nodes(data="compute_time")]
        own = clamped_shift(kernels, measured[timed_on] - where.step_overhead - feeds)
        return own + model.op_overhead - where.op_overhead

    def step_costs(self, graph: CostGraph, kind: str) -> CostGraph:
        """A copy of ``graph`` (CPU costs profiled on this machine) with every op's time as in a
        real step on ``kind`` devices: its traced time plus the per-op overhead
        (:meth:`op_overhead`: the graph's own, where its untraced step was timed), at least 0, and
        each ``Placeholder`` (a fed tensor: a step cannot run without its feed) also its share of
        :attr:`CpuProcessModel.feed`, its tensor's and bytes' cost and an equal part of the
        per-step cost. Memory is unchanged."""
        model = self.process(kind)
        per_op = self.op_overhead(graph, kind)
        converted = graph.copy()
        fed = [attrs for _, attrs in converted.nodes(data=True) if attrs.get("op_type") in FED_OPS]
        for _, attrs in converted.nodes(data=True):
            attrs["compute_time"] = max(attrs["compute_time"] + per_op, 0.0)
        for attrs in fed:
            attrs["compute_time"] += model.feed.share(sum(attrs["output_sizes"]), len(fed))
        converted.graph["device_model"] = f"{kind} CPUs of {self.machine}"
        converted.graph.pop(UNTRACED_STEP, None)  # its times are no longer the traced ones
        return converted

    def device_set(self, names: Sequence[str], memory: int | Sequence[int]) -> DeviceSet:
        """The CPU devices ``names`` (all of one kind, which their names tell) of ``memory``
        bytes each (or one size per device), with the calibrated link, step overhead, inter-op
        threads and the machine's cores; virtual CPUs share their process's memory."""
        kind = cpu_kind(names)
        model = self.process(kind)
        sizes = [memory] * len(names) if isinstance(memory, int) else list(memory)
        devices = DeviceSet(tuple(Device(name, size) for name, size in zip(names, sizes, strict=True)))
        link = {"intra_host": model.link} if kind == "virtual" else {"inter_host": model.link}
        return dataclasses.replace(
            devices,
            step_overhead=model.step_overhead,
            cores=self.cores,
            host_threads=model.threads,
            shared_host_memory=kind == "virtual",
            **link,  # type: ignore[arg-type]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": CALIBRATION_FORMAT,
            "machine": self.machine,
            "cores": self.cores,
            "processes": {kind: model.to_dict() for kind, model in self.processes.items()},
            "matmul_row_blocks": dict(self.matmul_row_blocks),
        }

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> CpuCalibration:
        return cls(
            machine=str(spec["machine"]),
            cores=int(spec["cores"]),
            processes={kind: CpuProcessModel.from_dict(p) for kind, p in spec["processes"].items()},
            matmul_row_blocks={
                variant: int(block) for variant, block in spec.get("matmul_row_blocks", {}).items()
            },
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CpuCalibration:
        """Read a calibration :meth:`save` wrote; a missing or malformed file, or one of a newer
        :data:`CALIBRATION_FORMAT`, is a clear error, and one of an older format a warning."""
        try:
            document = json.loads(Path(path).read_text())
            calibration = cls.from_dict(document)
        except FileNotFoundError:
            raise ValueError(f"no CPU calibration at {path}: run tfplace calibrate first") from None
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"malformed CPU calibration {path}: {error}") from None
        stored = document.get("format", 1)
        if not isinstance(stored, int):
            raise ValueError(f"malformed CPU calibration {path}: format {stored!r} is not a number")
        if stored > CALIBRATION_FORMAT:
            raise ValueError(
                f"CPU calibration {path} has format {stored}, made by a newer tfplace than this one "
                f"(format {CALIBRATION_FORMAT}): run tfplace calibrate with this version"
            )
        if stored < CALIBRATION_FORMAT:
            warnings.warn(
                f"CPU calibration {path} has format {stored}: it lacks or mismeasures costs that format "
                f"{CALIBRATION_FORMAT} measures (see CALIBRATION_FORMAT); run tfplace calibrate again",
                stacklevel=2,
            )
        return calibration


def stored_matmul_row_blocks(path: str | os.PathLike[str] | None) -> dict[str, int]:
    """The :attr:`CpuCalibration.matmul_row_blocks` of the calibration at ``path``; none (every
    block 1, the regression as without them) when ``path`` is empty or no file is there."""
    if not path or not os.path.exists(path):
        return {}
    return dict(CpuCalibration.load(path).matmul_row_blocks)


def cpu_kind(names: Sequence[str]) -> str:
    """``"virtual"`` for CPUs of one process (``/device:CPU:i`` of job ``localhost``),
    ``"loopback"`` for one CPU 0 per task of one job; anything else is an error naming it."""
    specs = [DeviceName.parse(name) for name in names]
    if not specs or any(spec.kind != "CPU" for spec in specs):
        raise ValueError(f"the CPU device model needs CPU devices, got {list(names)}")
    if all(spec.job == "localhost" and spec.task == 0 for spec in specs):
        return "virtual"
    one_job = len({spec.job for spec in specs}) == 1
    if (
        one_job
        and all(spec.index == 0 for spec in specs)
        and len({spec.task for spec in specs}) == len(specs)
    ):
        return "loopback"
    raise ValueError(
        f"the CPU device model takes virtual CPUs of one process or CPU 0 of distinct workers, got {list(names)}"
    )


INEXPENSIVE_KERNELS = frozenset(
    {"Const", "HostConst", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault",
     "Shape", "ShapeN", "Size", "Rank", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
     "PreventGradient", "Snapshot", "VarHandleOp", "ReadVariableOp", "Enter", "RefEnter", "Exit",
     "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge", "NextIteration", "RefNextIteration",
     "LoopCond", "ControlTrigger"}
)  # fmt: skip
"""Op types whose CPU kernels declare themselves inexpensive (``OpKernel::IsExpensive`` is false):
TensorFlow's executor runs them inline in the thread that made them ready. Every other CPU kernel
counts as expensive during the first steps of a session (the executor's cost estimate of a kernel
starts at 10^8 cycles and decays by a tenth per run, below its 8,000-cycle threshold only after
about 90 steps), so the others go to the thread pool when more than one is ready."""

EXPENSIVE_KERNEL_CYCLES = 8000
"""TensorFlow's executor's ``kOpIsExpensiveThresholdCycles``: it times each expensive kernel's
``Compute`` on the processor's cycle counter and keeps ``(9 * estimate + cycles) / 10`` (from
10^8); once the estimate is at most this, the kernel runs inline in every later step (the estimate
is no longer updated). After about 90 steps it is the kernel's own time."""

EXECUTOR_COST_DECAY = 10
"""TensorFlow's executor's ``kCostDecay``: each run of an expensive kernel moves its cost estimate
a tenth of the way to the cycles that run took."""


def least_cost_estimate(kernel_times: Sequence[float]) -> float:
    """The least TensorFlow's executor's running estimate of a kernel's time gets to, over a long
    run whose kernel times repeat ``kernel_times`` in order: the kernel's ``kernel_time``.

    The estimate moves by ``e <- e + (t - e) / EXECUTOR_COST_DECAY`` per run (from 10^8 cycles,
    :data:`EXPENSIVE_KERNEL_CYCLES`) and the kernel runs inline from the first step it is below
    the threshold on; so whether a kernel whose times straddle the threshold ends up inline is
    decided by the estimate's dips, not by a typical time. Once the cycle has repeated often
    enough to forget the start, the estimate after run ``i`` is the cyclic exponentially weighted
    mean ``sum_j w_j t[(i - j) mod n]`` with ``w_j = (1 - q) q^j / (1 - q^n)``, ``q = 1 - 1 /
    EXECUTOR_COST_DECAY``; this is its least value over ``i``.

    On the small NMT (batch 8) the steady peak the simulator gives depends on a few kernels near the
    threshold (``gradients/AddN_27`` among them): by the median of the traced kernel times it was
    3.95 MB in session 9's ``results/fidelity.csv`` against the allocator's 4.87 MB, and on one
    profile it fell from 4.87 to 3.99 MB when every kernel time was taken 1/0.85 times longer; by
    this estimate it stays 4.87 MB up to 1/0.8 times longer, and in five fidelity runs every NMT
    one-device row was within 0.1% (session 10)."""
    times = np.asarray(kernel_times, dtype=float)
    if times.ndim != 1 or times.size == 0 or not np.all(np.isfinite(times)):
        raise ValueError(f"kernel_times must be a non-empty sequence of finite seconds, got {kernel_times!r}")
    keep = 1.0 - 1.0 / EXECUTOR_COST_DECAY
    count = times.size
    weights = (1.0 - keep) * keep ** np.arange(count) / (1.0 - keep**count)
    lagged = (np.arange(count)[:, None] - np.arange(count)[None, :]) % count
    return float(np.min(times[lagged] @ weights))


def inline_ops(graph: CostGraph, cycles_per_second: float | None = None) -> np.ndarray:
    """Per op of ``graph`` (node order), whether TensorFlow's CPU executor runs it inline: the
    ``inline_ops`` of :func:`tfplace.simulator.simulate`.

    Without ``cycles_per_second``, as in a session's first steps: the kernels declared inexpensive
    (:data:`INEXPENSIVE_KERNELS`). With the rate of the executor's cycle counter (the processor's
    time-stamp counter), as in the steady state of a training job: also every kernel that runs in
    less than :data:`EXPENSIVE_KERNEL_CYCLES` cycles, by its ``kernel_time`` (``compute_time``
    where that was not measured, which counts the node's handling too)."""
    declared = np.array([attrs.get("op_type") in INEXPENSIVE_KERNELS for _, attrs in graph.nodes(data=True)])
    if cycles_per_second is None:
        return declared
    if not cycles_per_second > 0:
        raise ValueError(f"cycles_per_second must be positive, got {cycles_per_second!r}")
    kernels = np.array(
        [
            attrs["compute_time"] if attrs.get("kernel_time") is None else attrs["kernel_time"]
            for _, attrs in graph.nodes(data=True)
        ],
        dtype=float,
    )
    return declared | (kernels * cycles_per_second < EXPENSIVE_KERNEL_CYCLES)
