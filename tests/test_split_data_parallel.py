"""Data parallelism as a split plan (issue 15, step 4's baseline)."""

from __future__ import annotations

import pytest

from helpers import small_cnn_graph
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan

GPUS = DeviceSet.parse("/device:GPU:0-1", "1GB", intra_host=TransferModel(k=1e-4, b=0.0, name="test"))


def test_ops_on_examples_split_on_the_batch_and_weights_run_as_replicas():
    graph = small_cnn_graph()
    plan = data_parallel_plan(graph, GPUS)
    dims = {op: split.dimension for op, split in plan.splits.items()}
    assert dims == {
        "x": "batch",
        "w": "replica",
        "axes": "replica",
        "conv": "batch",
        "relu": "batch",
        "loss": "reduction",
        "relu_grad": "batch",
        "dw": "batch",
        "update": "replica",
    }
    plan.validate(graph)


def test_an_op_on_examples_without_a_batch_rule_runs_whole_and_its_readers_still_split():
    graph = small_cnn_graph()
    graph.nodes["relu"]["op_type"] = "SomeCustomOp"
    plan = data_parallel_plan(graph, GPUS)
    assert plan.splits["relu"].degree == 1 and plan.splits["relu_grad"].dimension == "batch"


def test_an_op_whose_inputs_the_graph_does_not_order_runs_whole_when_its_rule_reads_them_differently():
    graph = small_cnn_graph()
    for op in ("conv", "relu"):
        graph.nodes[op]["inputs"] = None  # a cost graph of schema version 1 or 2
    plan = data_parallel_plan(graph, GPUS)
    assert plan.splits["conv"].degree == 1  # input, filter: sharded and replicated
    assert plan.splits["relu"].dimension == "batch"  # one input: read alike whatever its position
    simulate_plan(graph, plan)


def test_devices_of_different_speeds_get_proportional_pieces():
    graph = small_cnn_graph()
    plan = data_parallel_plan(graph, GPUS, speeds=[3.0, 1.0])
    assert plan.splits["conv"].shares == pytest.approx((0.75, 0.25))
    with pytest.raises(ValueError, match="speeds must give each of the 2 devices"):
        data_parallel_plan(graph, GPUS, speeds=[1.0])


def test_the_data_parallel_step_moves_the_fed_slice_the_all_reduced_gradient_and_the_loss():
    graph = small_cnn_graph()
    plan = data_parallel_plan(graph, GPUS)
    simulate_plan(graph, plan)
    # the images are fed into host memory (as the rewrite feeds them), each device receives its
    # half (4000 bytes); a ring all-reduce of the 400-byte gradient; the 4-byte loss summed on both
    assert plan.bytes_moved == 2 * 4000 + 2 * 200 * 2 + 2 * 4


def test_a_sum_of_weight_gradients_stays_partial_and_is_all_reduced_once():
    graph = small_cnn_graph()
    graph.add_op("dw_total", op_type="AddN", compute_time=0.001, output_sizes=(400,), inputs=[("dw", 0)])
    graph.remove_edge("dw", "update")
    graph.add_dependency("dw", "dw_total", slots=(0,))
    graph.add_dependency("dw_total", "update", slots=(0,))
    graph.nodes["update"]["inputs"] = (("w", 0), ("dw_total", 0))
    plan = data_parallel_plan(graph, GPUS)
    assert plan.splits["dw_total"].dimension == "reduction"
    simulate_plan(graph, plan)
    assert plan.bytes_moved == 2 * 4000 + 2 * 200 * 2 + 2 * 4  # fed halves, one all-reduce, the loss


def test_on_devices_of_unequal_speed_proportional_pieces_beat_equal_ones():
    graph = small_cnn_graph(batch=8)
    speeds = {GPUS.names[0]: 3.0, GPUS.names[1]: 1.0}
    equal = data_parallel_plan(graph, GPUS)
    proportional = data_parallel_plan(graph, GPUS, speeds=[3.0, 1.0])
    simulate_plan(graph, equal, speeds=speeds)
    simulate_plan(graph, proportional, speeds=speeds)
    assert proportional.step_time < 0.75 * equal.step_time


def test_the_data_parallel_placer_is_reached_by_name_and_reports_its_pieces():
    from tfplace.placer import place_cost_graph

    graph = small_cnn_graph()
    placement = place_cost_graph(graph, GPUS, placer="data_parallel")
    assert placement.pieces["conv"] == tuple(GPUS.names)
    assert placement.step_time == placement.split_plan.step_time > 0
    assert "split into pieces" in placement.summary()
