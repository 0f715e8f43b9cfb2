"""What the slices and joins a split plan adds cost on the graph's own device: fitted on its copies.

A split plan's expansion (:mod:`tfplace.split.expand`) adds nodes no profile measured: slices of a
tensor a piece reads (``StridedSlice``), joins of pieces (``ConcatV2``) and sums of partial results
(``AddN``). They are memory-bound copies, whose time on a device is a fixed cost per op (the
executor's dispatch and the kernel's setup) plus a cost per byte written (Celeritas section 4.2.1
models an op's time from its sizes the same way). :func:`copy_cost` fits both on the ops of those
kinds the profile did measure, on the device it measured them on: the median time of the small ones
is the fixed cost, the median of ``(time - fixed) / bytes`` of the large ones the cost per byte. A
graph without such ops (or without large ones) takes the V100 constants for what it lacks
(:data:`GPU_COPY`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import networkx as nx

__all__ = ["COPY_TYPES", "GPU_COPY", "CopyCost", "copy_cost"]

COPY_TYPES = frozenset({"ConcatV2", "StridedSlice", "Slice", "AddN", "Pad", "PadV2", "Split", "SplitV"})
"""Op types that copy their inputs' bytes, as the expansion's slices and joins do."""

SMALL_BYTES = 4096
"""Outputs up to this size measure the fixed cost: their bytes take a negligible time."""
LARGE_BYTES = 65536
"""Outputs of at least this size measure the cost per byte."""


@dataclass(frozen=True)
class CopyCost:
    """Seconds a copy of ``nbytes`` takes: ``fixed + per_byte * nbytes``."""

    fixed: float
    per_byte: float

    def seconds(self, nbytes: int) -> float:
        return self.fixed + self.per_byte * nbytes


GPU_COPY = CopyCost(fixed=8e-6, per_byte=2 / 900e9)
"""A kernel's launch on a V100 and a read and a write at its 900 GB/s."""


def copy_cost(graph: nx.DiGraph) -> CopyCost:
    """The :class:`CopyCost` of ``graph``'s device, fitted on its ops of :data:`COPY_TYPES`."""
    measured = [
        (sum(attrs["output_sizes"]), float(attrs["compute_time"]))
        for _, attrs in graph.nodes(data=True)
        if attrs.get("op_type") in COPY_TYPES and attrs.get("compute_time", 0) > 0
    ]
    small = [seconds for nbytes, seconds in measured if nbytes <= SMALL_BYTES]
    fixed = statistics.median(small) if small else GPU_COPY.fixed
    rates = [max(seconds - fixed, 0.0) / nbytes for nbytes, seconds in measured if nbytes >= LARGE_BYTES]
    per_byte = statistics.median(rates) if rates else GPU_COPY.per_byte
    return CopyCost(fixed, per_byte)
