"""The layer-wise split search (issue 15, step 4): coarsening, configurations, selection."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import small_cnn_graph
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.split.coarsen import weight_groups
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan
from tfplace.split.layerwise import Held, device_blocks, edge_seconds, layerwise_plan, search_plan
from tfplace.split.plan import OpSplit, SplitPlan

LINK = TransferModel(k=1e-6, b=0.0, name="test")


def gpus(count: int = 2, memory: str | int = "1GB") -> DeviceSet:
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=LINK)


def wide_layer_graph(batch: int = 8, hidden: int = 256, features: int = 1000) -> CostGraph:
    """A softmax-like dense layer's training step: a [hidden, features] weight (1 MB) far larger
    than the [batch, features] activations it makes, and 1 s of compute for its forward and its
    weight gradient each, so that data parallelism's all-reduce of the weight's gradient dominates."""
    rows = {"transpose_a": False, "transpose_b": False}
    weight, out, x = hidden * features * 4, batch * features * 4, batch * hidden * 4
    ops: list[tuple[str, str, float, int, tuple[int, ...], dict[str, Any] | None, list[tuple[str, int]], str | None]] = [
        ("x", "Placeholder", 0.0, x, (batch, hidden), None, [], None),
        ("w", "VarHandleOp", 0.0, 8, (), None, [], None),
        ("read", "ReadVariableOp", 1e-5, weight, (hidden, features), None, [("w", 0)], None),
        ("logits", "MatMul", 1.0, out, (batch, features), rows, [("x", 0), ("read", 0)], None),
        ("loss", "Relu", 0.01, out, (batch, features), None, [("logits", 0)], None),
        ("dlogits", "ReluGrad", 0.01, out, (batch, features), None, [("loss", 0), ("logits", 0)], "loss"),
        ("dw", "MatMul", 1.0, weight, (hidden, features), {"transpose_a": True, "transpose_b": False},
         [("x", 0), ("dlogits", 0)], "logits"),
        ("update", "AssignSubVariableOp", 1e-5, 0, (), None, [("w", 0), ("dw", 0)], None),
    ]  # fmt: skip
    graph = CostGraph(batch_size=batch, transfer_model=LINK.to_dict())
    for name, op_type, seconds, size, shape, attrs, inputs, forward in ops:
        graph.add_op(
            name,
            op_type=op_type,
            compute_time=seconds,
            output_sizes=(size,),
            output_shapes=(shape,),
            attrs=attrs,
            inputs=tuple(inputs),
            gradient_of=forward,
            persistent_bytes=weight if op_type == "VarHandleOp" else 0,
        )
    for name, *_, inputs, _ in ops:
        for producer, slot in inputs:
            graph.add_dependency(producer, name, slots=(slot,))
    return graph


def simulated(graph: CostGraph, plan: SplitPlan) -> float:
    simulate_plan(graph, plan)
    assert plan.step_time is not None
    return plan.step_time


def test_coarsening_groups_a_weight_with_its_reads_its_layer_its_gradient_and_its_update():
    assert weight_groups(wide_layer_graph()) == [["w", "read", "logits", "dw", "update"]]


def test_a_small_variable_every_update_reads_does_not_join_all_layers_into_one_group():
    graph = small_cnn_graph()
    graph.add_op("lr", op_type="VarHandleOp", output_sizes=(4,))
    graph.add_dependency("lr", "update", slots=(0,))
    groups = weight_groups(graph)
    assert len(groups) == 1 and "lr" not in groups[0]


def test_the_weight_of_a_weight_heavy_layer_is_split_on_output_features_instead_of_all_reduced():
    graph = wide_layer_graph()
    plan = search_plan(graph, gpus())
    assert plan.splits["logits"].dimension == "channel" and plan.splits["dw"].dimension == "channel"
    assert simulated(graph, plan) < simulated(graph, data_parallel_plan(graph, gpus()))


def test_the_search_beats_data_parallelism_where_the_all_reduce_dominates_and_keeps_it_where_it_does_not():
    heavy, light = wide_layer_graph(), small_cnn_graph()
    assert simulated(heavy, layerwise_plan(heavy, gpus())) < simulated(
        heavy, data_parallel_plan(heavy, gpus())
    )
    light_plan = search_plan(light, gpus())
    assert light_plan.splits["conv"].dimension == "batch" and light_plan.splits["dw"].dimension == "batch"


@pytest.mark.parametrize("graph", [wide_layer_graph(), small_cnn_graph(), wide_layer_graph(batch=512)])
def test_the_chosen_plan_is_never_slower_than_data_parallelism_one_device_or_a_given_placement(graph):
    devices = gpus(4 if graph.graph["batch_size"] > 4 else 2)
    placement = SplitPlan({op: OpSplit.whole(devices.names[i % 2]) for i, op in enumerate(graph)}, devices)
    chosen = layerwise_plan(graph, devices, placements=[placement.to_placement()])
    one = SplitPlan({op: OpSplit.whole(devices.names[0]) for op in graph}, devices)
    rivals = [data_parallel_plan(graph, devices), one, placement]
    assert chosen.step_time is not None
    assert all(chosen.step_time <= simulated(graph, rival) + 1e-12 for rival in rivals)


def test_a_plan_whose_simulated_peak_exceeds_a_device_is_rejected_for_the_next_best():
    graph = wide_layer_graph(batch=512)  # one device is fastest (no all-reduce) and needs 7.7 MB
    memory = 5_000_000
    one = SplitPlan({op: OpSplit.whole("/device:GPU:0") for op in graph}, gpus(memory=memory))
    simulate_plan(graph, one)
    assert max(one.peak_memory.values()) > memory  # the test's premise
    chosen = layerwise_plan(graph, gpus(memory=memory))
    assert chosen.placer == "layerwise (layerwise)" and max(chosen.peak_memory.values()) <= memory
    assert chosen.step_time is not None and one.step_time is not None and chosen.step_time > one.step_time
    assert layerwise_plan(graph, gpus()).placer == "layerwise (single)"


def test_devices_of_different_speeds_get_pieces_proportional_to_their_speeds():
    plan = search_plan(small_cnn_graph(), gpus(), speeds=[3.0, 1.0])
    assert plan.splits["conv"].shares == pytest.approx((0.75, 0.25))


def test_an_all_reduce_costs_twice_a_reduce_scatter_and_a_tensor_already_where_it_is_read_costs_nothing():
    four, two = ("a", "b", "c", "d"), ("c", "d")
    scatter = edge_seconds(4000, Held("partial", None, four), Held("split", 0, four), 1e-6, 1e-3)
    assert edge_seconds(
        4000, Held("partial", None, four), Held("replica", None, four), 1e-6, 1e-3
    ) == pytest.approx(2 * scatter)
    assert edge_seconds(4000, Held("whole", None, ("a",)), Held("whole", None, ("a",)), 1e-6, 1e-3) == 0.0
    assert edge_seconds(4000, Held("split", 0, four), Held("split", 0, four), 1e-6, 1e-3) == 0.0
    assert edge_seconds(4000, Held("replica", None, four), Held("split", 1, two), 1e-6, 1e-3) == 0.0
    assert edge_seconds(4000, Held("replica", None, ("a", "b")), Held("split", 1, two), 1e-6, 1e-3) > 0.0


def test_recursive_two_way_blocks_halve_the_devices_level_by_level_and_flat_blocks_take_every_divisor():
    eight = tuple("abcdefgh")
    assert [len(b) for b in device_blocks(eight)] == [8, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    assert device_blocks(eight, "flat") == device_blocks(eight)
    six = tuple("abcdef")
    assert ("a", "b", "c") in device_blocks(six) and ("a", "b") in device_blocks(six)
    assert ("a", "b") in device_blocks(six, "flat") and ("a", "b", "c") in device_blocks(six, "flat")
    assert ("c",) in device_blocks(six) and ("a", "b", "c", "d") not in device_blocks(six)
    with pytest.raises(ValueError, match="spread"):
        device_blocks(six, "random")


def test_whichever_candidate_is_chosen_the_plan_records_the_batch_its_rewrite_feeds():
    graph = wide_layer_graph(batch=512)  # one device wins: a whole-op candidate
    chosen = layerwise_plan(graph, gpus())
    assert chosen.placer == "layerwise (single)" and chosen.batch_size == 512


@pytest.mark.parametrize("memory", [2_200_000, 3_200_000, 5_000_000, 8_000_000])
@pytest.mark.parametrize("batch", [8, 512])
def test_the_plan_never_exceeds_a_devices_memory_when_data_parallelism_or_one_device_fits(batch, memory):
    graph = wide_layer_graph(batch=batch)
    devices = gpus(4, memory)
    chosen = layerwise_plan(graph, devices)
    rivals = [
        data_parallel_plan(graph, devices),
        SplitPlan({op: OpSplit.whole(devices.names[0]) for op in graph}, devices),
    ]
    for rival in rivals:
        simulate_plan(graph, rival)
    if any(max(rival.peak_memory.values()) <= memory for rival in rivals):
        assert max(chosen.peak_memory.values()) <= memory


def test_the_memory_fallback_search_offers_no_layer_a_block_of_fewer_devices_than_all():
    graph = wide_layer_graph(batch=8)
    everywhere = search_plan(graph, gpus(4), all_devices_only=True)
    assert all(split.degree in (1, 4) for split in everywhere.splits.values())
    assert {split.degree for op, split in everywhere.splits.items() if op in ("logits", "dw")} == {4}
