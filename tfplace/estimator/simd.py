"""How many channels this machine's CPU kernels compute together: its float32 SIMD lanes.

oneDNN, which runs TensorFlow's CPU convolutions, pooling and batch norm, lays channels out in blocks
of the vector width (``nChw16c`` with AVX-512, ``nChw8c`` with AVX and AVX2), so a kernel on ``c``
channels does the work of ``ceil(c / lanes)`` blocks: a split into pieces of fewer channels than a
block saves nothing (:func:`tfplace.split.costs.piece_time`). The lanes are read from the CPU's
feature flags (Linux ``/proc/cpuinfo``); where they cannot be read the result is 1, which keeps a
piece's time in proportion to its channels.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LANES_BY_FLAG", "cpu_float_lanes", "float_lanes"]

LANES_BY_FLAG = (("avx512f", 16), ("avx2", 8), ("avx", 8), ("sse2", 4), ("asimd", 4))
"""Feature flag -> float32 lanes of its vector registers, widest first."""


def float_lanes(flags: set[str]) -> int:
    """The float32 lanes of a CPU with feature ``flags``; 1 when none is known."""
    return next((lanes for flag, lanes in LANES_BY_FLAG if flag in flags), 1)


def cpu_float_lanes(cpuinfo: str | Path = "/proc/cpuinfo") -> int:
    """:func:`float_lanes` of this machine's CPU (its first ``flags`` or ``Features`` line); 1 when
    ``cpuinfo`` cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return 1
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return float_lanes(set(value.split()))
    return 1
