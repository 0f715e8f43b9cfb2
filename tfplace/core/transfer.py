"""The linear transfer model ``t = k * bytes + b`` (Celeritas section 4.1) and its presets.

The presets are starting points for links nobody has calibrated yet; on a real machine,
:func:`tfplace.estimator.calibration.calibrate_transfer` times transfers between two of its
devices and fits ``k`` and ``b``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PRESETS", "TransferModel"]

_FIT_FLOOR = 1e-6
"""Seconds below which a fitted transfer time weighs like 1 us in :meth:`TransferModel.fit`."""

_FIT_ROUNDS = 4
"""Reweighted fits :meth:`TransferModel.fit` makes (the weights settle in two or three)."""


@dataclass(frozen=True)
class TransferModel:
    """Seconds to move ``n`` bytes over one link: ``k * n + b``.

    Parameters
    ----------
    k : float
        Seconds per byte, the inverse of the link's effective bandwidth.
    b : float
        Seconds of fixed cost per transfer: latency plus the framework's per-tensor overhead.
    name : str
        What the model describes, for reports.
    latency : float
        The part of ``b`` during which the link is free for other transfers (``0 <= latency <= b``):
        a request's round trip before the bytes flow, which transfers sent at the same time
        overlap. A transfer holds the link for :meth:`occupancy` and its tensor arrives
        ``latency`` later. gRPC between TensorFlow workers has such a latency: on loopback,
        16 small tensors sent at once take far less than 16 times one tensor's ``b``.
    copy_k : float
        Seconds per byte that the sender and the receiver *each* spend copying, when the devices'
        own processors copy the bytes, as between TensorFlow processes on CPUs (gRPC serializes on
        the sender and deserializes on the receiver; the fixed cost per tensor takes little CPU).
        A transfer then runs as a task on the sender and one on the receiver (Celeritas section
        6.1 adds such tasks), each holding its device for ``copy_k * bytes``, instead of on link
        channels, and the tensor arrives ``b + (k - copy_k) * bytes`` later (so a transfer alone
        still takes ``k * bytes + b``; ``latency`` is not used). ``0 <= copy_k <= k``;
        :func:`tfplace.estimator.calibration.calibrate_copy_cpu` measures it. ``0`` (the default)
        when a DMA engine or a NIC copies while the devices compute.
    copy_b : float
        Seconds per transfer that the sender and the receiver each spend on it besides the bytes
        (handling the request: about 23 us on the sender and 40 us on the receiver for gRPC on
        loopback here); part of ``b`` (``0 <= copy_b <= b``). With ``copy_k``, a device is held
        ``copy_b + copy_k * bytes`` and the tensor arrives ``b - copy_b + (k - copy_k) * bytes``
        after both copies end.
    """

    k: float
    b: float
    name: str = "custom"
    latency: float = 0.0
    copy_k: float = 0.0
    copy_b: float = 0.0

    def __post_init__(self) -> None:
        if not (self.k >= 0 and self.b >= 0):
            raise ValueError(
                f"transfer model {self.name!r} needs k >= 0 and b >= 0, got k={self.k}, b={self.b}"
            )
        if not 0 <= self.copy_k <= self.k:
            raise ValueError(
                f"transfer model {self.name!r} needs 0 <= copy_k <= k, got copy_k={self.copy_k}, k={self.k}"
            )
        if not 0 <= self.copy_b <= self.b:
            raise ValueError(
                f"transfer model {self.name!r} needs 0 <= copy_b <= b, got copy_b={self.copy_b}, b={self.b}"
            )
        if not 0 <= self.latency <= self.b:
            raise ValueError(
                f"transfer model {self.name!r} needs 0 <= latency <= b, got latency={self.latency}, b={self.b}"
            )

    def time(self, nbytes: float) -> float:
        """Seconds one transfer of ``nbytes`` takes; ``0`` for an empty transfer."""
        return self.k * nbytes + self.b if nbytes > 0 else 0.0

    @property
    def device_copies(self) -> bool:
        """Whether the devices do the transfers' work themselves (``copy_k`` or ``copy_b`` set)."""
        return self.copy_k > 0 or self.copy_b > 0

    def occupancy(self, nbytes: float) -> float:
        """Seconds one transfer of ``nbytes`` holds the link: :meth:`time` minus the latency."""
        return self.k * nbytes + self.b - self.latency if nbytes > 0 else 0.0

    def delay(self, nbytes: float) -> float:
        """Seconds a tensor of ``nbytes`` arrives after its transfer's work ends, holding nothing:
        ``b - copy_b + (k - copy_k) * nbytes`` after the copy tasks with :attr:`device_copies`
        (the request's round trip and the wire), else the :attr:`latency` after the channels."""
        if self.device_copies:
            return self.b - self.copy_b + (self.k - self.copy_k) * nbytes
        return self.latency

    @property
    def bandwidth(self) -> float:
        """Effective bandwidth in bytes per second."""
        return 1.0 / self.k if self.k > 0 else float("inf")

    @classmethod
    def fit(cls, sizes: Sequence[float], seconds: Sequence[float], name: str = "fitted") -> TransferModel:
        """Fit ``k`` and ``b`` to measured transfer times by least squares on relative residuals.

        Each residual is divided by the fitted time (iteratively reweighted, from a plain fit), so
        a few percent of noise on a 64 MiB transfer does not outweigh the small transfers that fix
        ``b`` (most tensors of a training graph are small), and a small transfer measured as 0 by
        a noisy difference does not pin ``b`` to 0. A negative intercept is noise: the fit then
        goes through the origin. ``k`` is clipped at 0.
        """
        x = np.asarray(sizes, dtype=float)
        y = np.asarray(seconds, dtype=float)
        if x.size < 2 or np.ptp(x) == 0:
            raise ValueError("fitting a transfer model needs at least two different sizes")
        weight = np.ones_like(y)
        for _ in range(_FIT_ROUNDS):
            k, b = np.polyfit(x, y, 1, w=weight)
            weight = 1.0 / np.maximum(k * x + b, _FIT_FLOOR)
        if b < 0:
            squared = weight * weight * x
            k, b = float(np.dot(squared, y) / np.dot(squared, x)), 0.0
        return cls(k=max(float(k), 0.0), b=float(b), name=name)

    @classmethod
    def preset(cls, name: str) -> TransferModel:
        """One of :data:`PRESETS` by name; the error lists the known names."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ValueError(f"unknown link preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None

    @classmethod
    def default(cls) -> TransferModel:
        """The link of the paper's testbed: GPUs on PCIe 3 x16."""
        return PRESETS["pcie3_x16"]

    def to_dict(self) -> dict[str, float | str]:
        """``k``, ``b``, ``name``; ``latency``, ``copy_k`` and ``copy_b`` when they are not 0 (a
        stored ``copy_b_shared`` of calibration format 8 is not read back)."""
        spec: dict[str, float | str] = {"k": self.k, "b": self.b, "name": self.name}
        if self.latency:
            spec["latency"] = self.latency
        if self.copy_k:
            spec["copy_k"] = self.copy_k
        if self.copy_b:
            spec["copy_b"] = self.copy_b
        return spec

    @classmethod
    def from_dict(cls, spec: Mapping[str, float | str]) -> TransferModel:
        return cls(
            k=float(spec["k"]),
            b=float(spec["b"]),
            name=str(spec.get("name", "custom")),
            latency=float(spec.get("latency", 0.0)),
            copy_k=float(spec.get("copy_k", 0.0)),
            copy_b=float(spec.get("copy_b", 0.0)),
        )


PRESETS: dict[str, TransferModel] = {
    # Baechi's fit of TensorFlow GPU-to-GPU copies on PCIe 3 (V100s): 5.7 GB/s and 134 us, which
    # includes TensorFlow's per-tensor overhead, not only the wire.
    "pcie3_x16": TransferModel(k=1.754e-10, b=134e-6, name="pcie3_x16"),
    # PCIe 4 x16 (A100 PCIe): about twice PCIe 3's effective bandwidth, the same framework overhead.
    "pcie4_x16": TransferModel(k=0.88e-10, b=100e-6, name="pcie4_x16"),
    # NVLink 2 between two V100s of a DGX-1 (two links, 50 GB/s each way; about 40 GB/s achieved).
    "nvlink2": TransferModel(k=2.5e-11, b=30e-6, name="nvlink2"),
    # NVLink 3/4 through NVSwitch (A100/H100 SXM): about 200 GB/s achieved per direction.
    "nvlink_switch": TransferModel(k=5e-12, b=20e-6, name="nvlink_switch"),
    # A gRPC hop between TensorFlow worker processes on one host's loopback, measured with
    # tfplace.estimator.calibration on a 2-core machine; calibrate on yours.
    "grpc_loopback": TransferModel(k=1.0e-9, b=400e-6, name="grpc_loopback"),
    # 25 Gb/s Ethernet between hosts through gRPC: about 2.5 GB/s achieved.
    "ethernet_25g": TransferModel(k=4.0e-10, b=500e-6, name="ethernet_25g"),
    # Virtual CPU devices of one process: a pointer hand-off.
    "same_process": TransferModel(k=0.0, b=5e-6, name="same_process"),
}
