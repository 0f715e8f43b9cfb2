"""A read-only, integer-indexed view of a cost graph for algorithms that loop over every op.

Placers and the simulator visit each op and edge a few times; doing that through networkx's
dictionaries costs more than the algorithms themselves on graphs of 100k ops. :func:`index_graph`
walks the :class:`~tfplace.costgraph.CostGraph` once and returns flat lists and arrays indexed by
op position. It is derived from the cost graph, never edited, and never kept between calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from tfplace.costgraph import edge_transfers
from tfplace.devices import DeviceSet
from tfplace.transfer import TransferModel

__all__ = ["IndexedGraph", "index_graph"]


@dataclass(frozen=True)
class IndexedGraph:
    """Flat per-op and per-edge data of a cost graph; op ``i`` is ``names[i]``.

    ``succ[i]`` lists the successors of op ``i`` and ``succ_time[i]``, ``succ_bytes[i]`` and
    ``succ_transfers[i]`` and ``succ_slots[i]`` the matching edges' attributes (likewise ``pred*``);
    ``pred_position[v][k]`` is the position of ``v`` in ``succ[pred[v][k]]``, so both ends reach the
    same edge. ``link`` is the transfer model the ``*_time`` lists were computed with.
    ``output_sizes[i]`` gives the bytes of each output slot, so that a tensor (an op and a slot)
    needed by several consumers on one device is sent there once. ``group[i]`` is the
    co-location group id of op ``i``: ops without a group get a group of their own, so every op
    belongs to exactly one group and ``group_members[g]`` lists the ops of group ``g``.
    """

    names: list[str]
    index: dict[str, int]
    compute: np.ndarray
    persistent: np.ndarray
    outputs: np.ndarray
    temporary: np.ndarray
    kinds: list[tuple[str, ...] | None]
    output_sizes: list[tuple[int, ...]]
    succ: list[list[int]]
    succ_time: list[list[float]]
    succ_bytes: list[list[int]]
    succ_transfers: list[list[int]]
    succ_slots: list[list[tuple[int, ...]]]
    pred: list[list[int]]
    pred_time: list[list[float]]
    pred_position: list[list[int]]
    group: np.ndarray
    group_members: list[list[int]]
    link: TransferModel

    def __len__(self) -> int:
        return len(self.names)

    @property
    def memory(self) -> np.ndarray:
        """``Memory[v_i]`` of every op (:func:`tfplace.costgraph.op_memory`)."""
        return self.persistent + self.outputs + self.temporary

    @property
    def resident(self) -> np.ndarray:
        """Memory an op holds for the whole step: persistent state and outputs."""
        return self.persistent + self.outputs

    def edge_time(self, u: int, position: int, link: TransferModel) -> float:
        """Seconds edge ``u -> succ[u][position]`` takes on ``link``."""
        nbytes = self.succ_bytes[u][position]
        return link.k * nbytes + link.b * self.succ_transfers[u][position] if nbytes else 0.0

    def transfer_time(self, u: int, position: int, devices: DeviceSet, src: int, dst: int) -> float:
        """Seconds edge ``u -> succ[u][position]`` takes from device ``src`` to device ``dst``."""
        link = devices.link(src, dst)
        return 0.0 if link is None else self.edge_time(u, position, link)


def index_graph(graph: nx.DiGraph, link: TransferModel | None = None) -> IndexedGraph:
    """Index the ops of a cost graph by position, in the graph's node order.

    Edge times are the graph's ``transfer_time``; with ``link`` they are recomputed from each edge's
    bytes on that link (placers pass their device set's typical link, so that every time they use
    agrees with the simulator's).
    """
    names = list(graph.nodes)
    index = {name: i for i, name in enumerate(names)}
    n = len(names)
    compute = np.zeros(n)
    persistent = np.zeros(n, dtype=np.int64)
    outputs = np.zeros(n, dtype=np.int64)
    temporary = np.zeros(n, dtype=np.int64)
    kinds: list[tuple[str, ...] | None] = [None] * n
    output_sizes: list[tuple[int, ...]] = [()] * n
    group = np.empty(n, dtype=np.int64)
    group_ids: dict[str, int] = {}
    group_members: list[list[int]] = []
    for i, (_, attrs) in enumerate(graph.nodes(data=True)):
        compute[i] = attrs["compute_time"]
        persistent[i] = attrs["persistent_bytes"]
        output_sizes[i] = attrs["output_sizes"]
        outputs[i] = sum(attrs["output_sizes"])
        temporary[i] = attrs["temporary_bytes"]
        kinds[i] = attrs["device_kinds"]
        key = attrs["colocation_group"]
        if key is None:
            group[i] = len(group_members)
            group_members.append([i])
        else:
            if key not in group_ids:
                group_ids[key] = len(group_members)
                group_members.append([])
            group[i] = group_ids[key]
            group_members[group_ids[key]].append(i)
    succ: list[list[int]] = [[] for _ in range(n)]
    succ_time: list[list[float]] = [[] for _ in range(n)]
    succ_bytes: list[list[int]] = [[] for _ in range(n)]
    succ_transfers: list[list[int]] = [[] for _ in range(n)]
    succ_slots: list[list[tuple[int, ...]]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    pred_time: list[list[float]] = [[] for _ in range(n)]
    pred_position: list[list[int]] = [[] for _ in range(n)]
    for src, dst, attrs in graph.edges(data=True):
        u, v = index[src], index[dst]
        nbytes = attrs["bytes"]
        transfers = edge_transfers(attrs) if nbytes else 0
        if link is None:
            time = attrs["transfer_time"]
        else:
            time = link.k * nbytes + link.b * transfers if nbytes else 0.0
        pred_position[v].append(len(succ[u]))
        succ[u].append(v)
        succ_time[u].append(time)
        succ_bytes[u].append(nbytes)
        succ_transfers[u].append(transfers)
        succ_slots[u].append(attrs["slots"])
        pred[v].append(u)
        pred_time[v].append(time)
    return IndexedGraph(
        names=names,
        index=index,
        compute=compute,
        persistent=persistent,
        outputs=outputs,
        temporary=temporary,
        kinds=kinds,
        output_sizes=output_sizes,
        succ=succ,
        succ_time=succ_time,
        succ_bytes=succ_bytes,
        succ_transfers=succ_transfers,
        succ_slots=succ_slots,
        pred=pred,
        pred_time=pred_time,
        pred_position=pred_position,
        group=group,
        group_members=group_members,
        link=link if link is not None else _graph_link(graph),
    )


def _graph_link(graph: nx.DiGraph) -> TransferModel:
    spec = graph.graph.get("transfer_model")
    return TransferModel.from_dict(spec) if spec else TransferModel.default()
