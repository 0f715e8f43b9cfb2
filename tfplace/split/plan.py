"""A split plan: per op, along which dimension it is split, into how many pieces, on which devices.

A :class:`SplitPlan` generalizes a :class:`~tfplace.core.placement.Placement` the way OptCNN's
parallelization strategy generalizes a device assignment (section 4: a configuration per layer): an
op of degree 1 runs whole on one device, as in a placement; an op of degree ``k`` runs as ``k``
pieces along one dimension of its partition rules (:mod:`tfplace.split.rules`), piece ``i`` on
``devices[i]`` doing ``shares[i]`` of the work (equal shares by default; BBGraP gives faster devices
larger ones).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from tfplace.core.costgraph import atomic_write_text
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement, graph_writer
from tfplace.split.rules import BATCH, REPLICA, SplitRule, can_replicate, op_rules

__all__ = ["OpSplit", "SplitPlan", "dimension_size", "inputs_known", "rule_of"]

PLAN_FORMAT = "tfplace.split_plan"


@dataclass(frozen=True)
class OpSplit:
    """How one op runs: ``dimension`` (``None`` when whole), a device per piece, each piece's share."""

    devices: tuple[str, ...]
    dimension: str | None = None
    shares: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.shares:
            object.__setattr__(self, "shares", (1.0 / len(self.devices),) * len(self.devices))

    @property
    def degree(self) -> int:
        return len(self.devices)

    @classmethod
    def whole(cls, device: str) -> OpSplit:
        return cls((device,))


@dataclass
class SplitPlan:
    """Every op's :class:`OpSplit` over ``devices``, with what the plan is expected to cost.

    ``step_time``, ``peak_memory`` and ``bytes_moved`` come from simulating the plan
    (:func:`tfplace.split.expand.simulate_plan`); ``search_seconds`` is the time the search took.
    ``batch_size`` is the batch the plan's pieces cut (the cost graph's), which a graph whose
    placeholders leave the batch unknown takes when the plan is applied. ``bucket_bytes`` fuses the
    all-reduces of weight gradients into buckets of up to that many bytes
    (:mod:`tfplace.split.buckets`); ``None`` all-reduces each tensor on its own.
    """

    splits: dict[str, OpSplit]
    devices: DeviceSet
    placer: str = ""
    step_time: float | None = None
    peak_memory: dict[str, int] = field(default_factory=dict)
    bytes_moved: int = 0
    search_seconds: float = 0.0
    batch_size: int | None = None
    bucket_bytes: int | None = None

    def apply(self, graph: Any) -> Any:
        """Rewrite ``graph`` (``tf.Graph``, ``GraphDef``, ``MetaGraphDef``) into the plan's pieces on their
        devices: a new graph, the user's untouched (:mod:`tfplace.tf_graph.split_rewrite`, through the
        writer registered with :func:`tfplace.core.placement.register_graph_writer`)."""
        return graph_writer()(self, graph)

    @classmethod
    def from_placement(cls, placement: Placement) -> SplitPlan:
        """The plan that runs every op whole where ``placement`` puts it."""
        return cls(
            {op: OpSplit.whole(device) for op, device in placement.assignment.items()},
            placement.devices,
            placer=placement.placer,
        )

    @property
    def split_ops(self) -> dict[str, OpSplit]:
        """The ops that run as more than one piece."""
        return {op: split for op, split in self.splits.items() if split.degree > 1}

    def to_placement(self) -> Placement:
        """The plan as a :class:`Placement`: each op on its first piece's device, the pieces of split
        ops in ``Placement.pieces`` (a plan without splits is exactly a placement)."""
        return Placement(
            assignment={op: split.devices[0] for op, split in self.splits.items()},
            devices=self.devices,
            placer=self.placer,
            step_time=self.step_time,
            peak_memory=dict(self.peak_memory),
            placement_seconds=self.search_seconds,
            pieces={op: split.devices for op, split in self.split_ops.items()},
            split_plan=self,
        )

    def validate(self, graph: nx.DiGraph) -> None:
        """Raise ``ValueError`` naming the first op the plan cannot run as it says.

        Checks that every op of ``graph`` has a split, every device is one of :attr:`devices`, a
        split op's dimension is one its rules allow (given its ``attrs``), its degree does not exceed
        the dimension's size (:func:`dimension_size`, when known) and its shares are positive and sum to 1.
        """
        if self.bucket_bytes is not None and self.bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be positive (or None), got {self.bucket_bytes}")
        known = set(self.devices.names) | {d.name for d in self.devices.all_devices}
        missing = [op for op in graph if op not in self.splits]
        if missing:
            raise ValueError(f"the plan has no split for {len(missing)} ops of the graph, e.g. {missing[:3]}")
        for op, split in self.splits.items():
            if op not in graph:
                raise ValueError(f"op {op!r}: the plan names an op the graph does not have")
            unknown = [d for d in split.devices if d not in known]
            if unknown or not split.devices:
                raise ValueError(
                    f"op {op!r}: unknown devices {unknown or '(none)'}; devices are {sorted(known)}"
                )
            if (
                len(split.shares) != split.degree
                or min(split.shares) <= 0
                or abs(sum(split.shares) - 1) > 1e-6
            ):
                raise ValueError(
                    f"op {op!r}: shares {split.shares} must be {split.degree} positive numbers summing to 1"
                )
            if split.degree == 1 and split.dimension is None:
                continue
            if split.dimension == REPLICA:
                if not can_replicate(graph.nodes[op]["op_type"]):
                    raise ValueError(f"op {op!r} ({graph.nodes[op]['op_type']}) cannot run as replicas")
                continue
            rules = op_rules(graph.nodes[op]["op_type"], graph.nodes[op].get("attrs"))
            if split.dimension not in rules:
                raise ValueError(
                    f"op {op!r} ({graph.nodes[op]['op_type']}) cannot split along {split.dimension!r}; "
                    f"it splits along {sorted(rules) or 'nothing (it stays whole)'}"
                )
            size = dimension_size(graph, op, split.dimension)
            if size is not None and split.degree > size:
                raise ValueError(
                    f"op {op!r}: degree {split.degree} exceeds its {split.dimension} dimension of {size}"
                )

    def to_dict(self) -> dict[str, Any]:
        devices = Placement(assignment={}, devices=self.devices).to_dict()
        return {
            "format": PLAN_FORMAT,
            "version": 1,
            "devices": devices["devices"],
            "links": devices["links"],
            "placer": self.placer,
            "splits": {
                op: {"devices": list(s.devices), "dimension": s.dimension, "shares": list(s.shares)}
                for op, s in self.splits.items()
            },
            "step_time": self.step_time,
            "peak_memory": self.peak_memory,
            "bytes_moved": self.bytes_moved,
            "search_seconds": self.search_seconds,
            "batch_size": self.batch_size,
            "bucket_bytes": self.bucket_bytes,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON (atomically)."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> SplitPlan:
        if document.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a tfplace split plan (expected format {PLAN_FORMAT!r})")
        devices = Placement.from_dict({**document, "format": "tfplace.placement", "assignment": {}}).devices
        splits = {
            op: OpSplit(tuple(s["devices"]), s.get("dimension"), tuple(s.get("shares", ())))
            for op, s in document["splits"].items()
        }
        return cls(
            splits,
            devices,
            placer=document.get("placer", ""),
            step_time=document.get("step_time"),
            peak_memory=dict(document.get("peak_memory", {})),
            bytes_moved=int(document.get("bytes_moved", 0)),
            search_seconds=float(document.get("search_seconds", 0.0)),
            batch_size=document.get("batch_size"),
            bucket_bytes=document.get("bucket_bytes"),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SplitPlan:
        try:
            with open(path, encoding="utf-8") as handle:
                return cls.from_dict(json.load(handle))
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a readable split plan ({error})") from None


def rule_of(graph: nx.DiGraph, op: str, split: OpSplit) -> SplitRule | None:
    """The partition rule ``split`` splits ``op`` by; ``None`` when it runs whole or as replicas."""
    if split.degree == 1 or split.dimension in (None, REPLICA):
        return None
    return op_rules(graph.nodes[op]["op_type"], graph.nodes[op].get("attrs"))[split.dimension]


def inputs_known(graph: nx.DiGraph, op: str, rule: SplitRule) -> bool:
    """Whether the graph tells which input of ``op`` each of ``rule``'s input layouts applies to: it
    records the op's input order (schema version 3), or the rule reads every input alike."""
    return graph.nodes[op].get("inputs") is not None or len(rule.reads) == 1


def dimension_size(graph: nx.DiGraph, op: str, dimension: str) -> int | None:
    """How many slices ``op``'s ``dimension`` has, or ``None`` when the graph does not say.

    The batch is the graph's ``batch_size``; another dimension is read from the shape of the first
    input the dimension's rule slices (``output_shapes`` of its producer, ``inputs`` of the op).
    """
    attrs = graph.nodes[op]
    if dimension == BATCH and graph.graph.get("batch_size"):
        return int(graph.graph["batch_size"])
    rule = op_rules(attrs["op_type"], attrs.get("attrs")).get(dimension)
    for index, (producer, slot) in enumerate(attrs.get("inputs") or ()):
        layout = rule.read(index) if rule else None
        shapes = graph.nodes[producer].get("output_shapes") if producer in graph else None
        if layout is None or layout.axis is None or not shapes or slot >= len(shapes):
            continue
        shape: Sequence[int] = shapes[slot]
        if -len(shape) <= layout.axis < len(shape) and shape[layout.axis] >= 0:
            return int(shape[layout.axis])
    return None
