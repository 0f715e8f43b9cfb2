"""``tfplace profile``: Standard Evaluation of a saved graph, written as a cost graph."""

from __future__ import annotations

from tfplace.cli.common import (
    Command,
    check_suffix,
    checked_fetches,
    feed_fn,
    named,
    on_target,
    print_report,
    profiling_options,
    read_graph,
)
from tfplace.cli.options import BATCH_SIZE, FEED_FLAGS, GRAPH, GRAPH_FLAGS, OUT, PROFILE_FLAGS
from tfplace.core.costgraph import CostGraph, save_json
from tfplace.core.units import format_bytes, format_seconds


def _cost_graph_table(cost_graph: CostGraph, source: str, top: int = 10) -> str:
    """The cost graph in a few lines: totals, then its most expensive ops."""
    from tfplace.core.costgraph import graph_memory
    from tfplace.core.tables import format_table

    attrs = dict(cost_graph.nodes(data=True))
    compute = sum(a["compute_time"] for a in attrs.values())
    memory = graph_memory(cost_graph)
    meta = cost_graph.graph
    ranked = sorted(attrs, key=lambda op: -attrs[op]["compute_time"])[:top]
    rows = [("op", "type", "time", "share", "outputs", "persistent")]
    rows += [
        (
            op,
            str(attrs[op].get("op_type") or "?"),
            format_seconds(attrs[op]["compute_time"]),
            f"{attrs[op]['compute_time'] / compute:.0%}" if compute else "-",
            format_bytes(sum(attrs[op]["output_sizes"])),
            format_bytes(attrs[op]["persistent_bytes"]),
        )
        for op in ranked
    ]
    times = f" ({meta['device_model']} times)" if meta.get("device_model") else ""
    heading = (
        f"{meta.get('name') or 'graph'} at batch {meta.get('batch_size', '?')}: {len(cost_graph):,} ops, "
        f"{format_seconds(compute)} of compute{times}, {format_bytes(memory)} of memory if nothing were freed; "
        f"profiled at batch {', '.join(map(str, meta.get('profile_batch_sizes', [])))} ({source})"
    )
    return f"{heading}\n\nthe {len(ranked)} ops taking the most time:\n{format_table(rows, left=2)}"


def _profile() -> int:
    """``tfplace profile``: Standard Evaluation of a saved graph, written as a cost graph."""
    from tfplace.api import estimate_costs

    check_suffix(OUT, (".json", ".json.gz"), "a cost graph")
    graph = read_graph()
    fetches = checked_fetches(graph)
    estimate = estimate_costs(
        graph, fetches, feed_fn(graph, fetches), BATCH_SIZE.value, **profiling_options()
    )
    cost_graph = on_target(named(estimate.cost_graph))
    save_json(cost_graph, OUT.value)
    source = (
        "read from the cache"
        if estimate.profile.from_cache
        else f"measured in {format_seconds(estimate.profile.profiling_seconds)}"
    )
    print_report(_cost_graph_table(cost_graph, source), [f"cost graph: {OUT.value}"])
    return 0


PROFILE = Command(
    "measure a saved graph's training step at small batches and predict its costs at --batch_size",
    "tfplace profile --graph model.meta --fetch train_op --batch_size 512 --out graph.json.gz",
    GRAPH_FLAGS + FEED_FLAGS + PROFILE_FLAGS + (OUT,),
    (GRAPH, BATCH_SIZE, OUT),
    _profile,
)
