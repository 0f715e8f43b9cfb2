"""Busy intervals of one device, for list scheduling with insertion into idle slots."""

from __future__ import annotations

from bisect import bisect_right

__all__ = ["Timeline"]


class Timeline:
    """The non-overlapping intervals a device is busy, sorted by start.

    :meth:`earliest_start` is ``d_ava`` of Celeritas Eq. 7 / Algorithm 2 line 32: the start of the
    first idle slot at or after ``ready`` long enough for the op, so a short op can fill a gap
    left between earlier ones (insertion scheduling, as HEFT).
    """

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []

    @property
    def end(self) -> float:
        """When the device's last reserved interval ends (``0`` when idle)."""
        return self._ends[-1] if self._ends else 0.0

    def earliest_start(self, ready: float, duration: float) -> float:
        """The earliest ``t >= ready`` with ``[t, t + duration)`` free."""
        starts, ends = self._starts, self._ends
        position = bisect_right(ends, ready)
        start = ready
        while position < len(starts):
            if start + duration <= starts[position]:
                return start
            start = max(start, ends[position])
            position += 1
        return start

    def reserve(self, start: float, duration: float) -> None:
        """Mark ``[start, start + duration)`` busy; it must be free (see :meth:`earliest_start`)."""
        position = bisect_right(self._starts, start)
        self._starts.insert(position, start)
        self._ends.insert(position, start + duration)
