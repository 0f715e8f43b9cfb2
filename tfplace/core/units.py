"""Bytes and seconds as people read them in tables, logs and plots: ``6.96 MB``, ``7.5 ms``.

Decimal units throughout (1 MB = 10^6 bytes), as :func:`tfplace.core.devices.parse_memory` reads
``"32GB"``. Each formatter has a companion returning the scale and unit it picked, for drawing a
whole axis in one unit.
"""

from __future__ import annotations

__all__ = ["bytes_unit", "format_bytes", "format_seconds", "seconds_unit"]

_BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"))
_SECOND_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"))


def bytes_unit(nbytes: float) -> tuple[float, str]:
    """``(bytes per unit, unit)`` of the largest unit not above ``nbytes`` (``(1e6, "MB")``)."""
    for scale, unit in _BYTE_UNITS:
        if abs(nbytes) >= scale:
            return scale, unit
    return 1.0, "B"


def format_bytes(nbytes: float) -> str:
    """``6,962,092`` -> ``"6.96 MB"``; three significant digits (all digits from 100 up)."""
    scale, unit = bytes_unit(nbytes)
    return f"{_number(nbytes / scale)} {unit}"


def seconds_unit(seconds: float) -> tuple[float, str]:
    """``(units per second, unit)`` that shows ``seconds`` as a number of at least 1 (``(1e3, "ms")``)."""
    for size, unit in _SECOND_UNITS:
        if abs(seconds) >= size:
            return 1.0 / size, unit
    return 1e6, "us"


def format_seconds(seconds: float) -> str:
    """``0.0075`` -> ``"7.5 ms"``; three significant digits (all digits from 100 up)."""
    scale, unit = seconds_unit(seconds)
    return f"{_number(seconds * scale)} {unit}"


def _number(value: float) -> str:
    """Three significant digits, without an exponent for values of 100 and more."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
