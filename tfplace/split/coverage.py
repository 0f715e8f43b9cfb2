"""How much of a step's compute the partition rules can split: :func:`split_coverage`."""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from tfplace.split.rules import RULES, op_rules

__all__ = ["SplitCoverage", "split_coverage"]


@dataclass(frozen=True)
class SplitCoverage:
    """Compute time of a graph by what the rules make of its ops.

    ``splittable`` seconds are in ops with at least one rule that applies; ``needs_attrs`` in ops
    whose type has rules that apply only to attributes the graph does not record (an older cost
    graph without ``attrs``: their split waits for a re-import); ``by_type`` the seconds of every
    op type that cannot be split, the largest first.
    """

    total: float
    splittable: float
    needs_attrs: float
    by_type: tuple[tuple[str, float], ...]

    @property
    def share(self) -> float:
        return self.splittable / self.total if self.total > 0 else 0.0


def split_coverage(graph: nx.DiGraph) -> SplitCoverage:
    """The share of ``graph``'s summed ``compute_time`` that :data:`~tfplace.split.rules.RULES` can split."""
    total = splittable = needs_attrs = 0.0
    whole: dict[str, float] = {}
    for _, attrs in graph.nodes(data=True):
        seconds, op_type = float(attrs["compute_time"]), attrs["op_type"]
        total += seconds
        if op_rules(op_type, attrs.get("attrs")):
            splittable += seconds
            continue
        if op_type in RULES and attrs.get("attrs") is None:
            needs_attrs += seconds
        whole[op_type] = whole.get(op_type, 0.0) + seconds
    return SplitCoverage(
        total, splittable, needs_attrs, tuple(sorted(whole.items(), key=lambda item: -item[1]))
    )
