"""Gradient bucketing: fuse the all-reduces of small weight gradients into buckets of a few MB.

Every all-reduce pays the links' per-message latency ``2 (k - 1)`` times (a ring's reduce-scatter
and all-gather); a model with hundreds of weights pays it hundreds of times. Horovod's tensor fusion
and PyTorch DDP's gradient buckets (25 MB by default) all-reduce several gradients as one tensor
instead. :func:`fuse` decides which: the all-reduced tensors in the order they are ready (their
producers' earliest finish with unbounded devices: the backward pass makes the last layer's gradient
first), consecutive ones over the same devices filling
a bucket up to ``bucket_bytes`` (a larger tensor gets a bucket of its own). A bucket waits for its
last member, so a tensor that depends on the all-reduced result of an earlier member of the open
bucket (a gradient clipped by an all-reduced norm) starts the next bucket instead: buckets never
wait for themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

__all__ = ["DEFAULT_BUCKET_BYTES", "AllReduce", "fuse"]

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""PyTorch DDP's ``bucket_cap_mb=25``."""


@dataclass(frozen=True)
class AllReduce:
    """One tensor to all-reduce: ``op``'s output ``slot`` of ``nbytes`` over ``devices``, read
    (summed) by the ops ``readers``."""

    op: str
    slot: int
    nbytes: int
    devices: tuple[str, ...]
    readers: frozenset[str]


def fuse(graph: nx.DiGraph, requests: Sequence[AllReduce], bucket_bytes: int | None) -> list[list[AllReduce]]:
    """The buckets of ``requests`` on ``graph`` (module docstring); each request alone when
    ``bucket_bytes`` is ``None``."""
    order = list(nx.topological_sort(graph))
    position = {op: i for i, op in enumerate(order)}
    ready: dict[str, float] = {}
    for op in order:
        start = max((ready[p] for p in graph.predecessors(op)), default=0.0)
        ready[op] = start + float(graph.nodes[op].get("compute_time", 0.0))
    ordered = sorted(requests, key=lambda r: (ready[r.op], position[r.op], r.slot))
    if bucket_bytes is None:
        return [[request] for request in ordered]
    needs = _latest_result_needed(graph, order, ordered)
    buckets: list[list[AllReduce]] = []
    start, total = 0, 0
    for index, request in enumerate(ordered):
        open_bucket = buckets[-1] if buckets and index > start else None
        if (
            open_bucket is None
            or request.devices != open_bucket[0].devices
            or total + request.nbytes > bucket_bytes
            or needs.get(request.op, -1) >= start
        ):
            buckets.append([request])
            start, total = index, request.nbytes
        else:
            open_bucket.append(request)
            total += request.nbytes
    return buckets


def _latest_result_needed(
    graph: nx.DiGraph, order: Sequence[str], ordered: Sequence[AllReduce]
) -> Mapping[str, int]:
    """Per op, the largest index in ``ordered`` of an all-reduced tensor it depends on (absent: none);
    ``order`` is a topological order of ``graph``."""
    needs: dict[str, int] = {}
    read_by: dict[str, int] = {}
    for index, request in enumerate(ordered):
        for reader in request.readers:
            read_by[reader] = max(read_by.get(reader, -1), index)
    for op in order:
        latest = max((needs[p] for p in graph.predecessors(op) if p in needs), default=-1)
        latest = max(latest, read_by.get(op, -1))
        if latest >= 0:
            needs[op] = latest
    return needs
