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

Peak numbers are vendors' dense FP32 figures for the PCIe cards (TF32 tensor cores off, as
TensorFlow 1.x ran); efficiencies default to what cuDNN convolutions and streaming kernels
typically reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraph

__all__ = ["DEVICE_MODELS", "OPAQUE_OPS", "VIEW_OPS", "DeviceModel", "convert_graph", "op_bytes_accessed"]

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
    return converted


def _is_view(attrs: Mapping[str, Any]) -> bool:
    """Whether an op only re-describes its input's buffer (:data:`VIEW_OPS`, every output aliased)."""
    aliased = {slot for slot, _, _ in attrs.get("aliased_outputs", ())}
    return attrs.get("op_type") in VIEW_OPS and len(aliased) == len(attrs["output_sizes"]) > 0
