"""Running split plans (issue 15, step 3): piece costs, joins, all-reduces, simulated by the simulator."""

from __future__ import annotations

import pytest

from helpers import small_cnn_graph
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.simulator import simulate, to_chrome_trace
from tfplace.split.costs import PIECE_OVERHEAD, piece_time, scaling_of
from tfplace.split.expand import expand_plan, simulate_plan
from tfplace.split.plan import OpSplit, SplitPlan

LINK = TransferModel(k=1e-4, b=0.0, name="test")
GPUS = DeviceSet.parse("/device:GPU:0-1", "1GB", intra_host=LINK)
NAMES = tuple(GPUS.names)
VARIABLES = ("x", "w", "axes", "update")


def data_parallel(graph):
    splits = {op: OpSplit(NAMES, "batch") for op in ("conv", "relu", "relu_grad", "dw")}
    splits.update({op: OpSplit(NAMES, "replica") for op in VARIABLES})
    splits["loss"] = OpSplit(NAMES, "reduction")
    return SplitPlan(splits, GPUS)


def test_a_plan_without_splits_simulates_like_the_placement():
    graph = small_cnn_graph()
    assignment = {op: NAMES[i % 2] for i, op in enumerate(graph)}
    plan = SplitPlan({op: OpSplit.whole(d) for op, d in assignment.items()}, GPUS)
    result, expanded = simulate_plan(graph, plan)
    assert sorted(expanded.graph) == sorted(graph)
    assert result.makespan == pytest.approx(simulate(graph, assignment, GPUS).makespan)


def test_data_parallelism_halves_compute_and_all_reduces_the_weight_gradient():
    graph = small_cnn_graph(batch=8)
    result, expanded = simulate_plan(graph, data_parallel(graph))
    one = simulate(graph, {op: NAMES[0] for op in graph}, GPUS).makespan
    assert result.makespan < 0.55 * one
    # A ring all-reduce moves 2 (k - 1) / k of the 400-byte gradient per device; the loss (4 bytes,
    # partial) is summed on both devices; the images are fed into the host's memory, which sends
    # each device its half (4000 of 8000 bytes).
    assert result.bytes_moved == 2 * 200 * 2 + 2 * 4 + 2 * 4000
    assert expanded.graph.nodes["conv#p0"]["compute_time"] == pytest.approx(4.0)


def test_consecutive_ops_split_alike_pass_pieces_straight_on():
    graph = small_cnn_graph()
    expanded = expand_plan(graph, data_parallel(graph))
    assert set(expanded.graph.predecessors("relu#p1")) == {"conv#p1"}
    assert expanded.devices["relu#p1"] == expanded.devices["conv#p1"] == NAMES[1]


def test_a_whole_tensor_read_by_slices_is_cut_on_the_senders_device():
    graph = small_cnn_graph()
    plan = SplitPlan({op: OpSplit.whole(NAMES[0]) for op in graph}, GPUS)
    plan.splits["conv"] = OpSplit(NAMES, "height")
    expanded = expand_plan(graph, plan)
    (cut,) = [
        n for n in expanded.graph.predecessors("conv#p1") if expanded.graph.nodes[n]["op_type"] == "Slice"
    ]
    assert expanded.devices[cut] == NAMES[0]
    # half of the 8000-byte images plus one row (of 10) from each neighbouring half
    assert expanded.graph.nodes[cut]["output_sizes"] == (4000 + 2 * 800,)


def test_a_tensor_sliced_along_another_axis_moves_the_overlaps_of_the_slices():
    graph = small_cnn_graph()
    plan = SplitPlan({op: OpSplit.whole(NAMES[0]) for op in graph}, GPUS)
    plan.splits["relu_grad"] = OpSplit(NAMES, "batch")
    plan.splits["dw"] = OpSplit(NAMES, "height")
    expanded = expand_plan(graph, plan)
    # relu_grad is sliced along the batch, dw reads it along the height: every piece reads a quarter
    # of the other piece's slice, joined with its own quarter by a ConcatV2 on its device.
    (join,) = [
        n for n in expanded.graph.predecessors("dw#p1") if expanded.graph.nodes[n]["op_type"] == "ConcatV2"
    ]
    assert expanded.devices[join] == NAMES[1]
    assert expanded.graph.nodes[join]["output_sizes"] == (4000,)
    sizes = sorted(
        expanded.graph.nodes[n]["output_sizes"][0]
        for n in [*expanded.graph.predecessors("dw#p1"), *expanded.graph.predecessors(join)]
        if expanded.graph.nodes[n]["op_type"] == "Slice"
    )
    # a quarter of the other piece's ReluGrad; half the whole images plus a halo row on each side
    assert sizes == [2000, 4000 + 2 * 800]


def test_partial_results_read_whole_are_summed_on_the_readers_device():
    graph = small_cnn_graph()
    plan = SplitPlan({op: OpSplit.whole(NAMES[1]) for op in graph}, GPUS)
    plan.splits["dw"] = OpSplit(NAMES, "batch")
    expanded = expand_plan(graph, plan)
    (total,) = [n for n in expanded.graph.predecessors("update") if n != "w"]
    assert expanded.graph.nodes[total]["op_type"] == "AddN" and expanded.devices[total] == NAMES[1]
    assert set(expanded.graph.predecessors(total)) == {"dw#p0", "dw#p1"}


def test_a_batch_piece_costs_what_the_regression_predicts_at_its_batch():
    attrs = {"compute_time": 2.0, "batch_costs": {"time": ["line", 1.0, 4.0]}}
    # the fitted line gives 4 + 64 = 68 at batch 64 and 4 + 16 = 20 at 16: the piece is 20/68 of 2 s
    assert piece_time(attrs, "batch", 0.25, 64) == pytest.approx(2.0 * 20 / 68)


def test_a_graph_converted_to_another_device_costs_batch_pieces_by_their_share_not_the_profiles_curve():
    # the regression's curve (fitted on the profiling CPU) says nothing of a V100's roofline times
    attrs = {"compute_time": 2.0, "batch_costs": {"time": ["line", 1.0, 4.0]}}
    batch, block = scaling_of({"batch_size": 64, "device_model": "V100-32GB"})
    assert batch is None and block == 1
    assert piece_time(attrs, "batch", 0.25, batch, block) == pytest.approx(
        PIECE_OVERHEAD + 0.25 * (2 - PIECE_OVERHEAD)
    )
    assert scaling_of({"batch_size": 64, "channel_block": 16}) == (64, 16)


def test_other_splits_divide_all_but_the_ops_fixed_overhead():
    attrs = {"compute_time": 1.0, "batch_costs": None}
    assert piece_time(attrs, "channel", 0.5, 64) == pytest.approx(PIECE_OVERHEAD + 0.5 * (1 - PIECE_OVERHEAD))
    assert piece_time({"compute_time": 1e-6}, "batch", 0.5, 64) == pytest.approx(1e-6)


def test_the_chrome_trace_shows_the_pieces(tmp_path):
    graph = small_cnn_graph()
    result, _ = simulate_plan(graph, data_parallel(graph), record=True)
    to_chrome_trace(result, GPUS, tmp_path / "trace.json")
    text = (tmp_path / "trace.json").read_text()
    assert "conv#p0" in text and "conv#p1" in text and "allreduce" in text


def test_a_piece_reads_its_ops_shape_input_as_its_own_constant_and_nothing_moves():
    # dw's input 1 is the filter's shape (Conv2DBackpropFilter's filter_sizes): the rewrite writes a
    # constant on each piece's device, so no piece depends on the op that computed it.
    graph = small_cnn_graph()
    graph.add_op("sizes", op_type="Shape", compute_time=0.0, output_sizes=(16,), output_shapes=((4,),))
    graph.remove_edge("w", "dw")
    graph.add_dependency("sizes", "dw", slots=(0,))
    graph.nodes["dw"]["inputs"] = (("x", 0), ("sizes", 0), ("relu_grad", 0))
    plan = SplitPlan({op: OpSplit.whole(NAMES[0]) for op in graph}, GPUS)
    plan.splits["dw"] = OpSplit(NAMES, "batch")
    expanded = expand_plan(graph, plan)
    assert not any(expanded.graph.has_edge("sizes", piece) for piece in ("dw#p0", "dw#p1"))
    plan.splits["dw"] = OpSplit.whole(NAMES[1])  # run whole, the op reads the tensor itself
    assert expand_plan(graph, plan).graph.has_edge("sizes", "dw")


HOST = "/job:localhost/replica:0/task:0/device:CPU:0"


@pytest.mark.parametrize("dimension", ["batch", "replica"])
def test_a_split_fed_tensor_lives_on_the_host_and_no_gpu_holds_it_whole(dimension):
    # as the TensorFlow rewrite feeds it: whole, under the user's name, in the host's memory, where
    # a Slice per piece cuts it: nothing but the slices leaves the host
    graph = small_cnn_graph()
    plan = data_parallel(graph)
    plan.splits["x"] = OpSplit(NAMES, dimension)
    expanded = expand_plan(graph, plan)
    assert expanded.nodes_of["x"] == ("x",) and expanded.devices["x"] == HOST
    assert {expanded.devices[reader] for reader in expanded.graph.successors("x")} == {HOST}
    for piece, device in (("conv#p0", NAMES[0]), ("conv#p1", NAMES[1])):
        (cut,) = [
            n for n in expanded.graph.predecessors(piece) if expanded.graph.nodes[n]["op_type"] == "Slice"
        ]
        assert expanded.devices[cut] == HOST and expanded.graph.nodes[cut]["output_sizes"] == (4000,)
        assert expanded.devices[piece] == device


def test_each_device_receives_exactly_its_slice_of_the_fed_tensor_from_the_host():
    graph = small_cnn_graph(batch=8)
    plan = data_parallel(graph)
    for op in ("x", "conv", "relu", "relu_grad", "dw"):
        plan.splits[op] = OpSplit(NAMES, "batch", (0.75, 0.25))
    plan.splits["loss"] = OpSplit(NAMES, "reduction", (0.75, 0.25))
    result, _ = simulate_plan(graph, plan)
    host = GPUS.index(HOST)
    assert result.link_bytes[host, : len(NAMES)].tolist() == [6000, 2000]  # of the 8000-byte batch
    gpu_to_gpu = result.link_bytes[: len(NAMES), : len(NAMES)].sum()
    assert gpu_to_gpu == 2 * 200 * 2 + 2 * 4  # the all-reduce and the loss: no slice of the batch
    assert plan.peak_memory[HOST] >= 8000


def test_a_fed_tensor_split_over_cpus_of_its_host_is_fed_on_the_first_piece_itself():
    graph = small_cnn_graph()
    cpus = DeviceSet.parse("/device:CPU:0-1", "1GB", intra_host=LINK)
    plan = SplitPlan({op: OpSplit.whole(cpus.names[0]) for op in graph}, cpus)
    plan.splits["x"] = plan.splits["conv"] = OpSplit(tuple(cpus.names), "batch")
    expanded = expand_plan(graph, plan)
    assert expanded.devices["x"] == cpus.names[0]
    assert expanded.graph.has_edge("x", "conv#p0")  # the first piece reads its slice in place
