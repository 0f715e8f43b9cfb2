"""The METIS baseline (Celeritas section 6.2.1): a k-way partition of the op graph, one part per device.

METIS (Karypis and Kumar, 1997) cuts the undirected op graph into as many parts as there are target
devices, balancing the parts' vertex weights and minimizing the weight of the edges cut. Here:

* co-location groups are contracted to single vertices first (their edges united, edges inside a
  group dropped), so a group can never be split;
* a vertex weighs its group's compute time, scaled to integers (about 1000 per vertex on average);
* an edge weighs the bytes between its two groups (edges in both directions summed), scaled to
  integers of at most ``2**20`` and at least 1, so that control dependencies count too;
* part ``k`` goes to target device ``k``; the :class:`~tfplace.placer.ledger.MemoryLedger` sends a
  group that cannot run there to a device that can (or to a fallback CPU).

Memory is not balanced: pymetis (checked with 2025.2.2) always passes one balance constraint to
METIS (``ncon = 1``; a weight array of ``2 n`` entries is silently read as ``n`` weights), so memory
cannot be the second constraint BASELINES.md mentions. METIS ignores device capacity as well; the
ledger's overcommits report the devices that hold too much, as the paper reports METIS OOM.
"""

from __future__ import annotations

import numpy as np
import pymetis

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.placer.base import PlacerOutput
from tfplace.placer.ledger import MemoryLedger

__all__ = ["contracted_graph", "group_weights", "metis", "partition"]

_MAX_EDGE_WEIGHT = 1 << 20
_MEAN_VERTEX_WEIGHT = 1000


def metis(graph: IndexedGraph, devices: DeviceSet, *, imbalance: float = 0.03, seed: int = 0) -> PlacerOutput:
    """Partition ``graph`` with METIS's k-way method and place part ``k`` on target ``k``.

    Parameters
    ----------
    graph : IndexedGraph
        The ops.
    devices : DeviceSet
        One part per target device.
    imbalance : float
        Allowed load imbalance: each part's compute stays below ``(1 + imbalance)`` times the mean
        (METIS's ``ufactor``, in thousandths; METIS's own default for k-way is 0.03).
    seed : int
        METIS's random seed, fixed so that placements are reproducible.

    Returns
    -------
    PlacerOutput
        ``details``: ``edge_cut_bytes`` (bytes of op edges between devices), ``part_compute``
        (seconds per device) and ``memory_balance`` (why memory is not a constraint).
    """
    if not imbalance > 0:
        raise ValueError(f"METIS imbalance must be > 0, got {imbalance}")
    vertex_weights, adjacency, edge_weights = contracted_graph(graph)
    parts = len(devices)
    part = partition(vertex_weights, adjacency, edge_weights, parts, imbalance=imbalance, seed=seed)
    ledger = MemoryLedger(graph, devices)
    for group, device in enumerate(part.tolist()):
        ledger.commit([group], device)
    op_devices = ledger.op_devices()
    names = [d.name for d in devices.all_devices]
    compute = np.bincount(op_devices, weights=graph.compute, minlength=len(names))
    return PlacerOutput(
        op_devices=op_devices,
        ledger=ledger,
        details={
            "edge_cut_bytes": _cut_bytes(graph, op_devices),
            "part_compute": {names[d]: float(t) for d, t in enumerate(compute) if t or d < parts},
            "memory_balance": "not a constraint: pymetis passes METIS a single balance constraint",
        },
    )


def contracted_graph(graph: IndexedGraph) -> tuple[np.ndarray, pymetis.CSRAdjacency, np.ndarray]:
    """The undirected graph METIS partitions: one vertex per co-location group.

    Returns
    -------
    vertex_weights : numpy.ndarray
        Integer compute weight of each group (``graph.group_members`` order).
    adjacency : pymetis.CSRAdjacency
        Symmetric adjacency of the groups, without self-loops or repeated neighbors.
    edge_weights : numpy.ndarray
        Integer bytes of each adjacency entry, ``>= 1``.
    """
    groups = len(graph.group_members)
    vertex_weights = group_weights(graph, graph.compute)
    outdegree = [len(s) for s in graph.succ]
    src = graph.group[np.repeat(np.arange(len(graph)), outdegree)]
    dst = graph.group[np.fromiter((v for s in graph.succ for v in s), dtype=np.int64, count=len(src))]
    nbytes = np.fromiter((b for s in graph.succ_bytes for b in s), dtype=float, count=len(src))
    between = src != dst
    low = np.minimum(src, dst)[between]
    high = np.maximum(src, dst)[between]
    pairs, inverse = np.unique(low * groups + high, return_inverse=True)
    pair_bytes = np.bincount(inverse, weights=nbytes[between], minlength=len(pairs))
    largest = float(pair_bytes.max()) if len(pairs) else 0.0
    unit = largest / _MAX_EDGE_WEIGHT if largest > _MAX_EDGE_WEIGHT else 1.0
    weights = np.maximum(1, np.rint(pair_bytes / unit)).astype(np.int64)
    rows = np.concatenate([pairs // groups, pairs % groups])
    cols = np.concatenate([pairs % groups, pairs // groups])
    both = np.concatenate([weights, weights])
    order = np.argsort(rows, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=groups))])
    adjacency = pymetis.CSRAdjacency(starts.astype(np.int64), cols[order].astype(np.int64))
    return vertex_weights, adjacency, both[order]


def partition(
    vertex_weights: np.ndarray,
    adjacency: pymetis.CSRAdjacency,
    edge_weights: np.ndarray,
    parts: int,
    *,
    imbalance: float,
    seed: int,
) -> np.ndarray:
    """METIS's k-way partition of a :func:`contracted_graph` into ``parts`` parts: the part of each
    vertex (all ``0`` for one part or no vertex).

    ``imbalance`` bounds each part's vertex weight to ``(1 + imbalance)`` times the mean (METIS's
    ``ufactor``, in thousandths); ``seed`` is METIS's random seed.
    """
    if parts == 1 or len(vertex_weights) == 0:
        return np.zeros(len(vertex_weights), dtype=np.int64)
    result = pymetis.part_graph(
        parts,
        adjacency,
        vweights=vertex_weights,
        eweights=edge_weights,
        recursive=False,
        options=pymetis.Options(seed=int(seed), ufactor=max(1, round(imbalance * 1000))),
    )
    return np.asarray(result.vertex_part, dtype=np.int64)


def group_weights(graph: IndexedGraph, values: np.ndarray) -> np.ndarray:
    """Integer METIS vertex weights of the co-location groups from a per-op quantity (compute
    seconds, bytes): each group's sum, scaled to about 1000 per vertex on average (all ``0`` when
    the quantity is)."""
    groups = len(graph.group_members)
    sums = np.zeros(groups)
    np.add.at(sums, graph.group, values)
    total = float(sums.sum())
    scale = _MEAN_VERTEX_WEIGHT * groups / total if total > 0 else 0.0
    return np.rint(sums * scale).astype(np.int64)


def _cut_bytes(graph: IndexedGraph, op_devices: np.ndarray) -> int:
    """Bytes on edges whose two ops are on different devices."""
    devices = op_devices.tolist()
    return sum(
        b
        for u, (succ, sizes) in enumerate(zip(graph.succ, graph.succ_bytes))
        for v, b in zip(succ, sizes)
        if devices[u] != devices[v]
    )
