"""``tfplace place``: place a saved graph (profiled here) or a cost graph, and write the results."""

from __future__ import annotations

from typing import Any

from tfplace.cli.common import (
    Command,
    InputError,
    UsageError,
    check_suffix,
    checked_fetches,
    device_set,
    feed_fn,
    named,
    on_target,
    placer_options,
    print_report,
    profiling_options,
    read_cost_graph,
    read_graph,
    refuse,
    simulated,
    write_pictures,
)
from tfplace.cli.options import (
    BATCH_SIZE,
    COPLACE_GRADIENTS,
    COST_GRAPH,
    COST_GRAPH_OUT,
    DEVICE_FLAGS,
    DEVICES,
    FEED_FLAGS,
    FETCH,
    GRAPH,
    GRAPH_FLAGS,
    INIT_OP,
    MEMORY,
    OUT,
    PLACEMENT_OUT,
    PLACER,
    PLACER_OPTION,
    PROFILE_FLAGS,
    TARGET_DEVICE,
    TENSORBOARD_DIR,
    TIMELINE_PNG,
    TRACE,
)
from tfplace.core.costgraph import save_json
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.tf_graph.export import GRAPH_SUFFIXES


def _place() -> int:
    """``tfplace place``: place a saved graph (profiled here) or a cost graph, and write the results."""
    if not (GRAPH.value or COST_GRAPH.value):
        raise UsageError("give --graph (profiled here) or --cost_graph (from tfplace profile)")
    if not GRAPH.value:
        refuse([OUT, TENSORBOARD_DIR], "writes the placed graph: give --graph too")
    check_suffix(OUT, GRAPH_SUFFIXES, "a placed graph")
    devices = device_set()
    options = placer_options()
    graph = read_graph() if GRAPH.value else None
    if COST_GRAPH.value:
        refuse(
            FEED_FLAGS[1:] + PROFILE_FLAGS[:-1] + (FETCH, INIT_OP),
            "applies to profiling; with --cost_graph nothing is profiled",
        )
        placement = _place_cost_graph(graph, devices, options)
    else:
        from tfplace.api import place

        if BATCH_SIZE.value is None:
            raise UsageError("give --batch_size, the batch size to place for")
        fetches = checked_fetches(graph)
        placement = place(
            graph,
            fetches,
            feed_fn(graph, fetches),
            devices,
            batch_size=BATCH_SIZE.value,
            placer=PLACER.value,
            placer_options=options,
            target_device=TARGET_DEVICE.value,
            coplace_gradients=COPLACE_GRADIENTS.value,
            **profiling_options(),
        )
    assert placement.cost_graph is not None
    cost_graph = named(placement.cost_graph)
    written = []
    if PLACEMENT_OUT.value:  # a split placement as its plan: tfplace run rewrites the graph from it
        plan = placement.split_plan
        (placement if plan is None else plan).save(PLACEMENT_OUT.value)
        written.append(f"{'placement' if plan is None else 'split plan'}: {PLACEMENT_OUT.value}")
    if COST_GRAPH_OUT.value:
        save_json(cost_graph, COST_GRAPH_OUT.value)
        written.append(f"cost graph: {COST_GRAPH_OUT.value}")
    if graph is not None:
        written += _write_placed_graph(graph, placement)
    if TRACE.value or TIMELINE_PNG.value:
        result, simulated_graph = simulated(cost_graph, placement, record=True)
        written += write_pictures(result, placement, simulated_graph)
    print_report(placement.summary(), written)
    return 0


def _place_cost_graph(graph: Any, devices: DeviceSet, options: dict[str, Any]) -> Placement:
    """Place ``--cost_graph``; with ``graph``, extend the placement to its ops outside the step."""
    from tfplace.api import place_costs, with_split_rewrite_check

    cost_graph = on_target(read_cost_graph())
    batch = cost_graph.graph.get("batch_size")
    if BATCH_SIZE.value is not None and batch is not None and BATCH_SIZE.value != batch:
        raise InputError(
            f"--cost_graph holds the costs at batch {batch}; profile again for --batch_size {BATCH_SIZE.value}"
        )
    structure = None
    if graph is not None:
        from tfplace.tf_graph.importer import import_graph

        structure = import_graph(graph).cost_graph
        foreign = [op for op in cost_graph if op not in structure]
        if foreign:
            raise InputError(
                f"the cost graph has {len(foreign)} ops the graph lacks ({', '.join(foreign[:3])}): "
                "was it profiled from another graph?"
            )
    return place_costs(
        cost_graph,
        devices,
        structure=structure,
        placer=PLACER.value,
        placer_options=options if graph is None else with_split_rewrite_check(PLACER.value, options, graph),
        coplace_gradients=COPLACE_GRADIENTS.value,
    )


def _write_placed_graph(graph: Any, placement: Placement) -> list[str]:
    """``--out`` and ``--tensorboard_dir``: ``graph`` with the placement's devices; what was written."""
    if not (OUT.value or TENSORBOARD_DIR.value):
        return []
    from tfplace.tf_graph.export import write_graph, write_tensorboard_graph

    graph = placement.apply(graph)  # a split plan's rewrite is a new graph
    written = []
    if OUT.value:
        write_graph(graph, OUT.value)
        written.append(f"placed graph: {OUT.value}")
    if TENSORBOARD_DIR.value:
        event_file = write_tensorboard_graph(graph, TENSORBOARD_DIR.value)
        written.append(f"TensorBoard graph: {event_file} (tensorboard --logdir {TENSORBOARD_DIR.value})")
    return written


PLACE = Command(
    "place a saved graph (profiled here) or a cost graph on devices; write the placed graph",
    "tfplace place --graph model.meta --fetch train_op --devices /device:GPU:0-3 --memory 32GB "
    "--batch_size 512 --out placed.pb --placement_out placement.json",
    GRAPH_FLAGS
    + FEED_FLAGS
    + PROFILE_FLAGS
    + DEVICE_FLAGS
    + (
        PLACER,
        PLACER_OPTION,
        COPLACE_GRADIENTS,
        COST_GRAPH,
        OUT,
        PLACEMENT_OUT,
        COST_GRAPH_OUT,
        TENSORBOARD_DIR,
        TRACE,
        TIMELINE_PNG,
    ),
    (DEVICES, MEMORY),
    _place,
)
