"""The step-time simulator's execution model (tfplace.simulator.engine, rules 1-5)."""

from collections import Counter
from itertools import combinations, pairwise

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import UNIT_LINK, chain_graph, graph_from_edges
from tfplace.core.costgraph import CostGraph, CostGraphError, allocated_output_bytes, ccr
from tfplace.core.devices import Device, DeviceError, DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.transfer import TransferModel
from tfplace.simulator import simulate
from tfplace.simulator.plan import route_channels

#: Intra-host link with a latency: 1 s per byte plus 2 s per transfer.
SLOW_START = TransferModel(k=1.0, b=2.0, name="slow_start")


def gpus(count=2, memory=10**9, **links):
    links.setdefault("intra_host", UNIT_LINK)
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, **links)


def two_hosts(**links):
    """GPU:0 and GPU:1 on task 0, GPU:0 and GPU:1 on task 1 (and a fallback CPU per task)."""
    return DeviceSet.parse("/job:w/task:0-1/device:GPU:0-1", 10**9, **links)


def independent(compute):
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    for name, seconds in compute.items():
        graph.add_op(name, compute_time=seconds)
    return graph


def placed(graph, assignment):
    """Op name -> device index as the array ``simulate`` takes, in the graph's op order."""
    return np.array([assignment[name] for name in graph.nodes])


def transfer_starts(result):
    return sorted(task.start for task in result.schedule.transfers)


# Rule 1: one op at a time per device; rule 2: a transfer per hop.


def test_a_chain_on_one_device_takes_the_sum_of_its_compute():
    graph = chain_graph([1, 2, 3], [5, 7])
    result = simulate(graph, np.zeros(3, dtype=int), gpus())
    assert result.makespan == pytest.approx(6)
    assert result.transfers == 0 and result.bytes_moved == 0
    assert result.busy_time.tolist() == pytest.approx([6, 0, 0])


def test_a_chain_across_devices_adds_one_transfer_per_hop():
    graph = chain_graph([1, 2, 3], [5, 7])
    result = simulate(graph, np.array([0, 1, 0]), gpus())
    assert result.makespan == pytest.approx(6 + 5 + 7)
    assert result.transfers == 2 and result.bytes_moved == 12
    assert result.link_bytes[0, 1] == 5 and result.link_bytes[1, 0] == 7
    assert result.placed_ccr == pytest.approx(12 / 6)


def test_two_independent_ops_on_one_device_run_one_after_the_other():
    result = simulate(independent({"a": 1, "b": 2}), np.array([0, 0]), gpus())
    assert result.makespan == pytest.approx(3)


def test_two_independent_ops_on_two_devices_run_at_the_same_time():
    result = simulate(independent({"a": 1, "b": 2}), np.array([0, 1]), gpus())
    assert result.makespan == pytest.approx(2)


# Rule 2: channels.


def test_transfers_in_opposite_directions_overlap():
    graph = graph_from_edges([("a", "x", 5), ("b", "y", 5)])
    result = simulate(graph, placed(graph, {"a": 0, "x": 1, "b": 1, "y": 0}), gpus(), record=True)
    assert transfer_starts(result) == [1, 1]
    assert result.makespan == pytest.approx(1 + 5 + 1)


def test_two_transfers_out_of_one_device_run_one_after_the_other():
    graph = graph_from_edges([("a", "x", 5), ("a", "y", 5)])
    result = simulate(graph, placed(graph, {"a": 0, "x": 1, "y": 2}), gpus(3), record=True)
    assert transfer_starts(result) == [1, 6]
    assert result.makespan == pytest.approx(1 + 5 + 5 + 1)


def test_two_transfers_into_one_device_run_one_after_the_other():
    graph = graph_from_edges([("a", "x", 5), ("b", "x", 5)])
    result = simulate(graph, placed(graph, {"a": 0, "b": 1, "x": 2}), gpus(3), record=True)
    assert transfer_starts(result) == [1, 6]


def test_a_shared_bus_runs_one_transfer_at_a_time_in_a_host():
    graph = graph_from_edges([("a", "x", 5), ("b", "y", 5)])
    placement = placed(graph, {"a": 0, "x": 1, "b": 2, "y": 3})
    separate = simulate(graph, placement, gpus(4), record=True)
    shared = simulate(graph, placement, gpus(4, shared_bus=True), record=True)
    assert transfer_starts(separate) == [1, 1]
    assert transfer_starts(shared) == [1, 6]
    assert shared.makespan == pytest.approx(separate.makespan + 5)


def test_the_host_sends_to_each_gpu_over_that_gpus_own_link_at_the_same_time():
    # host memory feeds every GPU's link at once (a fed batch's slices); a shared bus still serializes
    graph = graph_from_edges([("a", "x", 5), ("a", "y", 5)])
    host = gpus(2).index("/job:localhost/replica:0/task:0/device:CPU:0")
    placement = placed(graph, {"a": host, "x": 0, "y": 1})
    separate = simulate(graph, placement, gpus(2), record=True)
    shared = simulate(graph, placement, gpus(2, shared_bus=True), record=True)
    assert transfer_starts(separate) == [1, 1]
    assert transfer_starts(shared) == [1, 6]


def test_a_gpus_link_to_the_host_carries_one_transfer_at_a_time():
    graph = graph_from_edges([("a", "x", 5), ("b", "x", 5)])
    host = gpus(2).index("/job:localhost/replica:0/task:0/device:CPU:0")
    result = simulate(graph, placed(graph, {"a": host, "b": 1, "x": 0}), gpus(2), record=True)
    assert transfer_starts(result) == [1, 6]


def test_a_waiting_transfer_does_not_hold_back_one_whose_channels_are_free():
    # a -> x (GPU:1) is produced first but GPU:1's incoming channel is busy with b's tensor;
    # c's tensor from GPU:0 to GPU:2 goes ahead on GPU:0's free outgoing channel.
    graph = graph_from_edges(
        [("b", "x", 10), ("a", "x", 5), ("c", "y", 5)], {"b": 1, "a": 2, "c": 3, "x": 1, "y": 1}
    )
    result = simulate(graph, placed(graph, {"b": 3, "a": 0, "c": 0, "x": 1, "y": 2}), gpus(4), record=True)
    start = {task.producer: task.start for task in result.schedule.transfers}
    assert start == {"b": 1, "a": 11, "c": 5}


def test_a_tensor_needed_by_two_ops_of_one_device_is_sent_there_once():
    graph = graph_from_edges([("a", "x", 5), ("a", "y", 5)])
    result = simulate(graph, placed(graph, {"a": 0, "x": 1, "y": 1}), gpus())
    assert result.transfers == 1 and result.bytes_moved == 5
    assert result.makespan == pytest.approx(1 + 5 + 1 + 1)


def test_each_output_slot_is_a_tensor_of_its_own():
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, output_sizes=(3, 4))
    graph.add_op("x", compute_time=1)
    graph.add_op("y", compute_time=1)
    graph.add_dependency("a", "x", slots=(0, 1))
    graph.add_dependency("a", "y", slots=(1,))
    result = simulate(graph, np.array([0, 1, 1]), gpus(), record=True)
    sent = sorted((task.slot, task.bytes) for task in result.schedule.transfers)
    assert sent == [(0, 3), (1, 4)]


def test_transfers_between_hosts_use_the_inter_host_link():
    devices = two_hosts(intra_host=UNIT_LINK, inter_host=TransferModel(k=10.0, b=3.0))
    graph = chain_graph([1, 1], [2])
    same_host = simulate(graph, np.array([0, 1]), devices)
    other_host = simulate(graph, np.array([0, devices.index("/job:w/task:1/device:GPU:0")]), devices)
    assert same_host.makespan == pytest.approx(1 + 2 + 1)
    assert other_host.makespan == pytest.approx(1 + (10 * 2 + 3) + 1)


def test_transfers_between_two_hosts_share_the_network_channels():
    devices = two_hosts(intra_host=UNIT_LINK, inter_host=UNIT_LINK)
    graph = graph_from_edges([("a", "x", 5), ("b", "y", 5)])
    task = "/job:w/task:{}/device:GPU:{}".format
    assignment = {"a": task(0, 0), "b": task(0, 1), "x": task(1, 0), "y": task(1, 1)}
    result = simulate(graph, assignment, devices, record=True)
    assert transfer_starts(result) == [1, 6]


def test_a_coarse_edge_pays_the_latency_of_each_tensor_it_merges():
    graph = CostGraph(transfer_model=SLOW_START.to_dict())
    graph.add_op("cluster0", compute_time=1, output_sizes=(9,))
    graph.add_op("cluster1", compute_time=1)
    graph.add_edge("cluster0", "cluster1", bytes=9, slots=(), transfers=3, control=False, transfer_time=15.0)
    result = simulate(graph, np.array([0, 1]), gpus(intra_host=SLOW_START))
    assert result.transfers == 1
    assert result.makespan == pytest.approx(1 + (9 + 3 * 2) + 1)


def test_transfers_sent_together_overlap_their_latency():
    # a's two outputs (4 bytes each) go to GPU:1; each transfer takes 4 + 3 s, 2 s of it latency
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, output_sizes=(4, 4))
    graph.add_op("x", compute_time=1)
    graph.add_op("y", compute_time=1)
    graph.add_dependency("a", "x", slots=(0,))
    graph.add_dependency("a", "y", slots=(1,))
    assignment = {"a": 0, "x": 1, "y": 1}
    pipelined = gpus(intra_host=TransferModel(k=1.0, b=3.0, latency=2.0))
    result = simulate(graph, placed(graph, assignment), pipelined, record=True)
    start = {task.op: task.start for task in result.schedule.ops}
    assert transfer_starts(result) == [1, 6]  # the link is free after 4 + 1 s
    assert sorted(start[op] for op in "xy") == [1 + 5 + 2, 6 + 5 + 2]
    assert result.transfer_seconds == pytest.approx(2 * 7)
    serial = simulate(graph, placed(graph, assignment), gpus(intra_host=TransferModel(k=1.0, b=3.0)))
    assert serial.makespan == pytest.approx(1 + 7 + 7 + 1)
    assert result.makespan == pytest.approx(1 + 5 + 5 + 2 + 1)


def test_a_copy_by_the_devices_holds_the_sender_and_the_receiver_when_they_have_no_op_ready():
    # a (GPU:0) sends 4 bytes to x (GPU:1); z follows a on GPU:0, y keeps GPU:1 busy until 3
    graph = graph_from_edges(
        [("a", "x", 4), ("a", "z", 0), ("y", "x", 0)], compute={"a": 1, "z": 1, "x": 1, "y": 3}
    )
    assignment = {"a": 0, "z": 0, "x": 1, "y": 1}
    copies = gpus(intra_host=TransferModel(k=1.0, b=2.0, copy_k=1.0))
    result = simulate(graph, placed(graph, assignment), copies, record=True)
    start = {task.op: task.start for task in result.schedule.ops}
    assert start["z"] == pytest.approx(1)  # ready ops first: GPU:0 copies from 2 to 6
    assert start["x"] == pytest.approx(3 + 4 + 2)  # GPU:1 copies from 3, after y; then b
    [sent] = result.schedule.transfers
    assert (sent.start, sent.end) == (pytest.approx(2), pytest.approx(7))
    on_channels = simulate(
        graph, placed(graph, assignment), gpus(intra_host=TransferModel(k=1.0, b=2.0)), record=True
    )
    assert {task.op: task.start for task in on_channels.schedule.ops}["x"] == pytest.approx(1 + 4 + 2)


def test_a_transfer_done_by_the_devices_alone_takes_k_bytes_plus_b_and_holds_them_for_their_share():
    graph = chain_graph([1, 1], [4])
    copies = gpus(intra_host=TransferModel(k=1.0, b=2.0, copy_k=0.5, copy_b=0.5))
    result = simulate(graph, np.array([0, 1]), copies, record=True)
    assert result.makespan == pytest.approx(1 + (4 * 1.0 + 2) + 1)
    [sent] = result.schedule.transfers
    assert (sent.start, sent.end) == (pytest.approx(1), pytest.approx(1 + 0.5 + 4 * 0.5))


#: The devices copy: each side holds 4 s per tensor; 1 s more until it arrives.
COPYING = TransferModel(k=0.0, b=5.0, copy_b=4.0)


#: p0..p3 compute 1 s each; their consumers q0..q3 none, so that no op holds a receiving device.
RECEIVERS_IDLE = {**{f"p{i}": 1.0 for i in range(4)}, **{f"q{i}": 0.0 for i in range(4)}}


def copy_durations(result):
    return [task.end - task.start for task in sorted(result.schedule.transfers, key=lambda task: task.start)]


def test_tensors_queued_together_each_hold_both_sides_the_whole_copy_b():
    # p0..p3 (GPU:0) each send a tensor to q0..q3 (GPU:1, no compute); the sends queue behind the
    # ops and then run one after another on the sender, 4 s each
    graph = graph_from_edges([(f"p{i}", f"q{i}", 4) for i in range(4)], compute=RECEIVERS_IDLE)
    assignment = {**{f"p{i}": 0 for i in range(4)}, **{f"q{i}": 1 for i in range(4)}}
    result = simulate(graph, placed(graph, assignment), gpus(intra_host=COPYING), record=True)
    assert transfer_starts(result) == pytest.approx([4, 8, 12, 16])
    assert copy_durations(result) == pytest.approx([4.0] * 4)
    assert result.makespan == pytest.approx(16 + 4 + 1)


def test_a_relayed_tensor_holds_each_side_copy_b_and_arrives_the_rest_of_b_later():
    # a relay: o0 (GPU:0) -> o1 (GPU:1) -> o2 (GPU:0)
    graph = chain_graph([1, 1, 1], [4, 4])
    result = simulate(graph, np.array([0, 1, 0]), gpus(intra_host=COPYING), record=True)
    assert copy_durations(result) == pytest.approx([4.0, 4.0])
    assert result.makespan == pytest.approx(3 + 2 * (4.0 + 1.0))


def test_devices_sharing_one_core_run_one_op_at_a_time():
    result = simulate(independent({"a": 1, "b": 2}), np.array([0, 1]), gpus(cores=1))
    assert result.makespan == pytest.approx(3)
    assert simulate(independent({"a": 1, "b": 2}), np.array([0, 1]), gpus(cores=2)).makespan == pytest.approx(
        2
    )


def test_with_shared_cores_a_receive_takes_an_idle_core_while_its_device_computes():
    # a (GPU:0, 1 s) sends 4 bytes to x (GPU:1); y keeps GPU:1 busy until 6; 3 cores: y, send, receive
    graph = graph_from_edges([("a", "x", 4), ("y", "x", 0)], compute={"a": 1, "x": 1, "y": 6})
    assignment = {"a": 0, "x": 1, "y": 1}
    link = TransferModel(k=1.0, b=0.0, copy_k=1.0)
    shared = simulate(graph, placed(graph, assignment), gpus(intra_host=link, cores=3), record=True)
    own = simulate(graph, placed(graph, assignment), gpus(intra_host=link), record=True)
    assert [(t.start, t.end) for t in shared.schedule.transfers] == [(1, 5)]  # received while y runs
    assert [(t.start, t.end) for t in own.schedule.transfers] == [(1, 10)]  # received after y
    assert shared.makespan == pytest.approx(7) and own.makespan == pytest.approx(11)


# Rule 3: control dependencies.


def test_a_control_dependency_across_devices_costs_the_latency_and_no_channel():
    graph = graph_from_edges([("a", "y", 5), ("a", "x", 0)])
    result = simulate(
        graph, placed(graph, {"a": 0, "x": 1, "y": 1}), gpus(intra_host=SLOW_START), record=True
    )
    start = {task.op: task.start for task in result.schedule.ops}
    assert start["x"] == pytest.approx(1 + 2)  # while a's tensor is still on the way (1 .. 8)
    assert start["y"] == pytest.approx(1 + 5 + 2)
    assert result.transfers == 1


def test_on_a_link_the_devices_copy_over_control_dependencies_are_one_empty_tensor_per_receiving_device():
    # a (GPU:0) orders x and y (GPU:1): TensorFlow sends one empty tensor, whose send and receive
    # hold both devices copy_b = 1 s, then b - copy_b = 2 s on the way
    graph = graph_from_edges([("a", "x", 0), ("a", "y", 0)])
    link = TransferModel(k=1.0, b=3.0, copy_b=1.0)
    result = simulate(graph, placed(graph, {"a": 0, "x": 1, "y": 1}), gpus(intra_host=link), record=True)
    [message] = result.schedule.transfers
    assert (message.bytes, message.start, message.end) == (0, pytest.approx(1), pytest.approx(2))
    start = {task.op: task.start for task in result.schedule.ops}
    assert sorted([start["x"], start["y"]]) == pytest.approx([1 + 3, 1 + 3 + 1])
    assert result.transfers == 1 and result.bytes_moved == 0


def test_a_control_dependency_on_one_device_costs_nothing():
    graph = graph_from_edges([("a", "x", 0)])
    result = simulate(graph, np.array([0, 0]), gpus(intra_host=SLOW_START))
    assert result.makespan == pytest.approx(2)


# Rule 3: TensorFlow's ReplicateConstantsPass copies small CPU constants to their consumers' devices.

#: Loopback gRPC between workers: the devices send and receive every tensor and control message.
GRPC = TransferModel(k=1.0, b=3.0, copy_b=1.0)


def workers(count=2):
    return DeviceSet.parse(f"/job:worker/task:0-{count - 1}/device:CPU:0", 10**9, inter_host=GRPC)


def optimizer_constant(updates, consumers, shape=(), control_successor=None):
    """A constant ``lr`` of ``shape`` that waits on the ``updates`` (control edges) and feeds the
    ``consumers``, as an optimizer's learning rate waits on batch-norm updates; the op names map to
    their devices in the placement the tests pass."""
    graph = CostGraph(transfer_model=GRPC.to_dict())
    graph.add_op("lr", compute_time=1.0, op_type="Const", output_sizes=(4,), output_shapes=(shape,))
    for name in [*updates, *consumers, *([control_successor] if control_successor else [])]:
        graph.add_op(name, compute_time=1.0, output_sizes=(4,))
    for update in updates:
        graph.add_dependency(update, "lr", control=True)
    for consumer in consumers:
        graph.add_dependency("lr", consumer, slots=(0,))
    if control_successor:
        graph.add_dependency("lr", control_successor, control=True)
    return graph


def senders(result):
    return Counter(task.producer for task in result.schedule.transfers)


def test_a_small_constant_consumed_on_two_workers_is_copied_to_each_and_waits_there_for_every_control_input():
    graph = optimizer_constant(["u0", "u1", "u2"], ["apply0", "apply1"])
    where = {"lr": 0, "u0": 0, "u1": 0, "apply0": 0, "u2": 1, "apply1": 1}
    result = simulate(graph, placed(graph, where), workers(), record=True)
    # the copy on task 1 waits for u0 and u1 of task 0, the original for u2 of task 1; no tensor of lr
    assert senders(result) == {"u0": 1, "u1": 1, "u2": 1}
    start = {task.op: task.start for task in result.schedule.ops}
    end = {task.op: task.end for task in result.schedule.ops}
    assert start["apply1"] >= max(end["u0"], end["u1"])


def test_a_constant_of_more_than_16_elements_is_sent_to_the_other_worker():
    graph = optimizer_constant(["u0", "u2"], ["apply0", "apply1"], shape=(17,))
    where = {"lr": 0, "u0": 0, "apply0": 0, "u2": 1, "apply1": 1}
    result = simulate(graph, placed(graph, where), workers(), record=True)
    assert senders(result) == {"u2": 1, "lr": 1}


def test_a_constant_with_a_control_successor_is_sent_to_the_other_worker():
    graph = optimizer_constant(["u0", "u2"], ["apply0", "apply1"], control_successor="after")
    where = {"lr": 0, "u0": 0, "apply0": 0, "u2": 1, "apply1": 1, "after": 0}
    result = simulate(graph, placed(graph, where), workers(), record=True)
    assert senders(result) == {"u2": 1, "lr": 1}


def test_a_replicated_constant_without_a_consumer_on_its_own_worker_is_removed_with_its_control_inputs():
    # lr on task 0 feeds tasks 1 and 2 only: copies there, and u (task 1) signals task 2, not task 0
    graph = optimizer_constant(["u"], ["apply1", "apply2"])
    where = {"lr": 0, "u": 1, "apply1": 1, "apply2": 2}
    result = simulate(graph, placed(graph, where), workers(3), record=True)
    assert [(task.producer, task.src, task.dst) for task in result.schedule.transfers] == [("u", 1, 2)]


# Rule 4: memory.


def memory_chain():
    # a (persistent 100, output 10, temporary 5) -> b (output 20, temporary 7) -> c (temporary 1)
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, persistent_bytes=100, output_sizes=(10,), temporary_bytes=5)
    graph.add_op("b", compute_time=1, output_sizes=(20,), temporary_bytes=7)
    graph.add_op("c", compute_time=1, temporary_bytes=1)
    graph.add_dependency("a", "b", slots=(0,))
    graph.add_dependency("b", "c", slots=(0,))
    return graph


def test_peak_memory_counts_persistent_live_outputs_and_temporary_bytes():
    result = simulate(memory_chain(), np.zeros(3, dtype=int), gpus(), record=True)
    assert result.peak_memory[0] == 100 + 10 + 20 + 7  # b runs: a's output still read, b's allocated
    trace = result.schedule.memory[0]
    assert trace.bytes.tolist() == [100, 115, 110, 137, 130, 120, 121, 120, 100]
    assert trace.times.tolist() == [0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert result.oom == []


def test_on_shared_cores_a_devices_peak_covers_a_receive_taken_in_only_once_its_device_is_idle():
    # a (GPU:0) sends x 100 bytes (1 .. 5, received on a free core while y runs); at 6 x runs
    # first and frees them, then q allocates 100. Had the receive waited for GPU:1 (the race's
    # other end), q would run at 6 with the 100 received bytes still held: 200.
    graph = graph_from_edges(
        [("a", "x", 100), ("y", "q", 0), ("q", "fin", 100), ("x", "fin", 0)],
        compute={"a": 1, "x": 1, "y": 6, "q": 1, "fin": 1},
    )
    assignment = placed(graph, {"a": 0, "x": 1, "y": 1, "q": 1, "fin": 1})
    link = TransferModel(k=0.04, b=0.0, copy_k=0.04)
    result = simulate(graph, assignment, gpus(intra_host=link, cores=3), record=True)
    assert [task.op for task in result.schedule.ops] == ["a", "y", "x", "q", "fin"]
    assert result.schedule.memory[1].bytes.max() == 100
    assert result.peak_memory[1] == 200
    assert result.makespan == pytest.approx(9)  # the time is this order's


def test_a_received_tensor_is_held_until_its_last_consumer_there_ends():
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, output_sizes=(10,))
    graph.add_op("b", compute_time=1, temporary_bytes=3)
    graph.add_op("c", compute_time=1, temporary_bytes=4)
    graph.add_dependency("a", "b", slots=(0,))
    graph.add_dependency("a", "c", slots=(0,))
    result = simulate(graph, np.array([0, 1, 1]), gpus(), record=True)
    assert result.peak_memory.tolist()[:2] == [10, 14]
    sender, receiver = result.schedule.memory[:2]
    assert list(zip(sender.times.tolist(), sender.bytes.tolist())) == [(0, 0), (0, 10), (11, 0)]
    assert receiver.bytes.tolist() == [0, 10, 13, 10, 14, 10, 0]


def test_an_output_nobody_reads_is_freed_when_its_op_ends():
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, output_sizes=(10, 50))
    graph.add_op("b", compute_time=1, output_sizes=(1,))
    graph.add_dependency("a", "b", slots=(0,))
    result = simulate(graph, np.zeros(2, dtype=int), gpus(), record=True)
    assert result.schedule.memory[0].bytes.tolist() == [0, 60, 10, 11, 10, 0]


def forwarding_graph():
    """a (output 10) -> ident (its output is a's buffer) -> use (output 1); a -> grad (later, like
    the backward pass reading an activation); use -> grad."""
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1, output_sizes=(10,))
    graph.add_op("ident", compute_time=1, output_sizes=(10,), aliased_outputs=[(0, "a", 0)])
    graph.add_op("use", compute_time=1, output_sizes=(1,))
    graph.add_op("grad", compute_time=1)
    graph.add_dependency("a", "ident", slots=(0,))
    graph.add_dependency("ident", "use", slots=(0,))
    graph.add_dependency("a", "grad", slots=(0,))
    graph.add_dependency("use", "grad", slots=(0,))
    return graph


def test_an_aliased_output_allocates_nothing_while_its_input_is_held_too():
    graph = forwarding_graph()
    result = simulate(graph, np.zeros(4, dtype=int), gpus(), record=True)
    assert result.peak_memory[0] == 10 + 1  # a's buffer once, then use's output
    graph.nodes["ident"]["aliased_outputs"] = ()
    assert simulate(graph, np.zeros(4, dtype=int), gpus()).peak_memory[0] == 10 + 10 + 1


def test_an_aliased_output_keeps_its_input_buffer_until_its_own_last_consumer_ends():
    # a -> ident -> use: a's only consumer is ident, yet a's buffer lives until use has read it
    graph = forwarding_graph()
    graph.remove_node("grad")
    result = simulate(graph, np.zeros(3, dtype=int), gpus(), record=True)
    trace = result.schedule.memory[0]
    assert list(zip(trace.times.tolist(), trace.bytes.tolist())) == [
        (0, 0),
        (0, 10),  # a starts
        (2, 11),  # use starts; ident (1 .. 2) allocated nothing
        (3, 10),  # use ends: nobody reads its output
        (3, 0),  # nor ident's, so a's buffer goes
    ]


def test_an_aliased_output_of_a_received_tensor_holds_the_copy_on_its_device():
    graph = forwarding_graph()
    graph.remove_node("grad")
    result = simulate(graph, placed(graph, {"a": 0, "ident": 1, "use": 1}), gpus(), record=True)
    receiver = result.schedule.memory[1]
    # received 1 .. 11; ident 11 .. 12 allocates nothing; use 12 .. 13 reads the copy
    assert list(zip(receiver.times.tolist(), receiver.bytes.tolist())) == [
        (0, 0),
        (1, 10),
        (12, 11),
        (13, 10),
        (13, 0),
    ]
    assert result.schedule.memory[0].bytes.tolist() == [0, 10, 0]


def test_an_aliased_output_sent_to_another_device_moves_its_bytes_into_a_new_buffer_there():
    graph = forwarding_graph()
    graph.remove_node("grad")
    result = simulate(graph, placed(graph, {"a": 0, "ident": 0, "use": 1}), gpus(), record=True)
    assert [(t.producer, t.bytes) for t in result.schedule.transfers] == [("ident", 10)]
    assert result.peak_memory.tolist()[:2] == [10, 11]
    sender = result.schedule.memory[0]
    assert sender.bytes.tolist() == [0, 10, 0]  # a's buffer is read by the transfer of ident's output
    assert sender.times.tolist() == [0, 0, 12]


def test_running_out_of_memory_names_the_op_and_device_and_the_simulation_goes_on():
    result = simulate(memory_chain(), np.zeros(3, dtype=int), gpus(memory=120))
    assert len(result.oom) == 1
    event = result.oom[0]
    assert (event.device, event.op, event.cause) == ("/device:GPU:0", "b", "start")
    assert (event.time, event.bytes_in_use, event.capacity) == (1, 137, 120)
    assert result.makespan == pytest.approx(3)


def test_persistent_state_beyond_the_memory_is_an_oom_at_time_zero():
    result = simulate(memory_chain(), np.zeros(3, dtype=int), gpus(memory=50))
    assert [(e.op, e.cause, e.time) for e in result.oom] == [("a", "persistent", 0)]


def test_a_received_tensor_can_cause_the_oom():
    graph = chain_graph([1, 1], [80])
    result = simulate(
        graph,
        np.array([0, 1]),
        DeviceSet((Device("/device:GPU:0", 100), Device("/device:GPU:1", 50)), intra_host=UNIT_LINK),
    )
    assert [(e.device, e.op, e.cause, e.time) for e in result.oom] == [("/device:GPU:1", "o0", "receive", 1)]


# Rule 5: step overhead.


def test_a_step_pays_the_step_overhead_of_each_host_that_runs_ops():
    devices = two_hosts(intra_host=UNIT_LINK, inter_host=UNIT_LINK, step_overhead=0.5)
    graph = chain_graph([1, 2], [0])
    one_host = simulate(graph, np.array([0, 1]), devices)
    other = devices.index("/job:w/task:1/device:GPU:0")
    across = simulate(graph, np.array([0, other]), devices)
    assert one_host.step_overhead == pytest.approx(0.5)
    assert one_host.makespan == pytest.approx(3 + 0.5)
    assert across.step_overhead == pytest.approx(1.0)
    assert across.makespan == pytest.approx(1 + 2 + 1.0)  # the control edge costs b = 0 s


# Rule 1: priorities.


def crafted_priorities():
    """GPU:0 holds a (a sink) and b (which feeds c, a long op on GPU:1); both are ready at time 0
    and a comes first in topological order."""
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("a", compute_time=1)
    graph.add_op("b", compute_time=1, output_sizes=(1,))
    graph.add_op("c", compute_time=10)
    graph.add_dependency("b", "c", slots=(0,))
    return graph, np.array([0, 0, 1])


def ran_on_gpu0(result):
    return [task.op for task in result.schedule.ops if task.device == 0]


def test_fifo_breaks_ties_by_topological_order():
    graph, placement = crafted_priorities()
    result = simulate(graph, placement, gpus(), record=True)
    assert ran_on_gpu0(result) == ["a", "b"]
    assert result.makespan == pytest.approx(1 + 1 + 1 + 10)


def test_critical_path_priority_runs_the_op_with_the_largest_bottom_level_first():
    graph, placement = crafted_priorities()
    result = simulate(graph, placement, gpus(), priority="critical_path", record=True)
    assert ran_on_gpu0(result) == ["b", "a"]
    assert result.makespan == pytest.approx(1 + 1 + 10)


def test_an_explicit_rank_per_op_replays_a_given_order():
    graph, placement = crafted_priorities()
    result = simulate(graph, placement, gpus(), priority=[5.0, 1.0, 0.0], record=True)
    assert ran_on_gpu0(result) == ["b", "a"]


def test_fifo_runs_the_op_that_became_ready_first():
    # GPU:0 runs s until 5. y (after z in topological order) gets a's tensor from GPU:1 at 3;
    # z is ready at 5 when s ends. FIFO runs y first.
    graph = graph_from_edges([("s", "z", 0), ("a", "y", 2)], {"s": 5, "a": 1, "y": 1, "z": 1})
    result = simulate(graph, placed(graph, {"s": 0, "z": 0, "a": 1, "y": 0}), gpus(), record=True)
    assert ran_on_gpu0(result) == ["s", "y", "z"]


# Inputs.


def test_a_mapping_of_names_gives_the_same_result_as_device_indices():
    graph = chain_graph([1, 2, 3], [5, 7])
    devices = gpus()
    by_index = simulate(index_graph(graph, devices.typical_link), np.array([0, 1, 0]), devices)
    by_name = simulate(graph, {"o0": "/device:GPU:0", "o1": "GPU:1", "o2": "/gpu:0"}, devices)
    assert by_name.makespan == by_index.makespan
    assert by_name.link_bytes.tolist() == by_index.link_bytes.tolist()


def test_ccr_is_equation_1_on_the_graph():
    graph = chain_graph([1, 2, 3], [5, 7])
    assert simulate(graph, np.zeros(3, dtype=int), gpus()).ccr == pytest.approx(ccr(graph))


def test_ops_on_a_fallback_cpu_are_simulated_like_any_device():
    devices = gpus()
    cpu = devices.index("/device:CPU:0")
    result = simulate(chain_graph([1, 2], [4]), np.array([0, cpu]), devices)
    assert result.makespan == pytest.approx(1 + 4 + 2)
    assert result.busy_time[cpu] == pytest.approx(2)


@pytest.mark.parametrize(
    ("op_devices", "message"),
    [
        ({"o0": "/device:GPU:0"}, "no device for 1 ops \\(o1\\)"),
        ({"o0": "/device:GPU:0", "o1": "/device:GPU:0", "zz": "/device:GPU:0"}, "1 unknown ops \\(zz\\)"),
        (np.array([0]), "shape \\(1,\\)"),
        (np.array([0, 7]), "op 'o1' is on device 7"),
        (np.array([0.0, 1.0]), "integer device indices"),
    ],
)
def test_a_placement_that_does_not_fit_the_graph_is_refused(op_devices, message):
    with pytest.raises(ValueError, match=message):
        simulate(chain_graph([1, 1], [1]), op_devices, gpus())


def test_an_unknown_device_name_is_refused():
    with pytest.raises(DeviceError, match="GPU:9"):
        simulate(chain_graph([1, 1], [1]), {"o0": "/device:GPU:0", "o1": "/device:GPU:9"}, gpus())


@pytest.mark.parametrize(
    ("priority", "message"),
    [("lifo", "unknown priority 'lifo'"), ([1.0], "ranks have shape"), ([0, np.nan], "'o1'")],
)
def test_a_bad_priority_is_refused(priority, message):
    with pytest.raises(ValueError, match=message):
        simulate(chain_graph([1, 1], [1]), np.array([0, 0]), gpus(), priority=priority)


def test_an_edge_naming_a_slot_its_producer_lacks_is_refused():
    graph = chain_graph([1, 1], [1])
    graph.edges["o0", "o1"]["slots"] = (3,)
    with pytest.raises(CostGraphError, match="'o0' -> 'o1' carries output slots \\[3\\]"):
        simulate(graph, np.array([0, 1]), gpus())


# Properties on random DAGs.


@st.composite
def placed_dags(draw):
    """A random cost graph, a device set (one or two hosts, maybe a shared bus), a placement over
    every device including fallback CPUs, and a priority."""
    n = draw(st.integers(1, 10))
    graph = CostGraph()
    for i in range(n):
        graph.add_op(
            f"v{i}",
            compute_time=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5])),
            persistent_bytes=draw(st.integers(0, 3)),
            output_sizes=draw(st.lists(st.integers(0, 6), min_size=0, max_size=2)),
            temporary_bytes=draw(st.integers(0, 3)),
        )
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=3)):
            slots = len(graph.nodes[f"v{i}"]["output_sizes"])
            kind = draw(
                st.sampled_from(["control", "slots", "slotless"] if slots else ["control", "slotless"])
            )
            if kind == "slots":
                chosen = draw(st.sets(st.integers(0, slots - 1), min_size=1))
                graph.add_dependency(f"v{i}", f"v{j}", slots=sorted(chosen))
            elif kind == "slotless":
                graph.add_dependency(f"v{i}", f"v{j}", nbytes=draw(st.integers(1, 6)))
            else:
                graph.add_dependency(f"v{i}", f"v{j}", control=True)
        inputs = [(p, t) for p, _, slots in graph.in_edges(f"v{j}", data="slots") for t in slots]
        outputs = len(graph.nodes[f"v{j}"]["output_sizes"])
        if inputs and outputs:  # some outputs are an input's buffer
            chosen = draw(st.sets(st.integers(0, outputs - 1)))
            graph.nodes[f"v{j}"]["aliased_outputs"] = tuple(
                (slot, *draw(st.sampled_from(inputs))) for slot in sorted(chosen)
            )
    link = TransferModel(k=draw(st.sampled_from([0.25, 1.0])), b=draw(st.sampled_from([0.0, 0.5])))
    spec = draw(st.sampled_from(["/device:GPU:0-2", "/job:w/task:0-1/device:GPU:0"]))
    devices = DeviceSet.parse(
        spec, 10**6, intra_host=link, inter_host=SLOW_START, shared_bus=draw(st.booleans())
    )
    placement = np.array(draw(st.lists(st.integers(0, len(devices.all_devices) - 1), min_size=n, max_size=n)))
    priority = draw(st.sampled_from(["fifo", "critical_path", "ranks"]))
    if priority == "ranks":
        priority = draw(st.lists(st.floats(0, 10), min_size=n, max_size=n))
    return graph, devices, placement, priority


def compute_critical_path(graph):
    longest = {}
    for op in nx.topological_sort(graph):
        before = max((longest[p] for p in graph.predecessors(op)), default=0.0)
        longest[op] = before + graph.nodes[op]["compute_time"]
    return max(longest.values(), default=0.0)


@settings(max_examples=150, deadline=None)
@given(placed_dags())
def test_every_op_runs_once_after_its_inputs_arrive_within_the_bounds(case):
    graph, devices, placement, priority = case
    result = simulate(graph, placement, devices, priority=priority, record=True)
    device_of = dict(zip(graph.nodes, placement.tolist()))
    ops = {task.op: task for task in result.schedule.ops}
    assert len(result.schedule.ops) == len(ops) == graph.number_of_nodes()
    assert all(ops[name].device == device_of[name] for name in ops)
    sent = Counter((t.producer, t.slot, t.dst) for t in result.schedule.transfers if t.slot is not None)
    assert max(sent.values(), default=1) == 1  # a tensor goes to a device once
    for src, dst, attrs in graph.edges(data=True):
        end, start = ops[src].end, ops[dst].start
        assert start >= end
        if device_of[src] == device_of[dst]:
            continue
        sizes = graph.nodes[src]["output_sizes"]
        tensors = (
            [s for s in attrs["slots"] if sizes[s]] if attrs["slots"] else [None] if attrs["bytes"] else []
        )
        link = devices.link(device_of[src], device_of[dst])
        for slot in tensors:
            assert any(
                (t.producer, t.slot, t.dst) == (src, slot, device_of[dst])
                and end <= t.start
                and t.end <= start
                and t.end - t.start == pytest.approx(link.k * t.bytes + link.b)
                for t in result.schedule.transfers
            )
        if not tensors:  # a message of the link's latency
            assert start >= end + link.b - 1e-9
    compute = graph.nodes(data="compute_time")
    used = len(set(placement.tolist()))
    bound = max(compute_critical_path(graph), sum(t for _, t in compute) / used)
    assert result.makespan >= bound - 1e-9


@settings(max_examples=150, deadline=None)
@given(placed_dags())
def test_devices_and_channels_never_run_two_tasks_at_once_and_memory_returns_to_persistent(case):
    graph, devices, placement, priority = case
    result = simulate(graph, placement, devices, priority=priority, record=True)
    for d in range(len(devices.all_devices)):
        runs = sorted((t.start, t.end) for t in result.schedule.ops if t.device == d)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(runs))
    for a, b in combinations(result.schedule.transfers, 2):
        if set(route_channels(devices, a.src, a.dst)) & set(route_channels(devices, b.src, b.dst)):
            assert a.end <= b.start or b.end <= a.start
    persistent = np.bincount(
        placement,
        weights=[graph.nodes[n]["persistent_bytes"] for n in graph.nodes],
        minlength=len(devices.all_devices),
    )
    assert [trace.bytes[-1] for trace in result.schedule.memory] == persistent.tolist()
    assert [trace.bytes.min() for trace in result.schedule.memory] == persistent.tolist()
    for name, d in zip(graph.nodes, placement.tolist()):
        attrs = graph.nodes[name]
        assert (
            result.peak_memory[d]
            >= persistent[d]
            + allocated_output_bytes(attrs["output_sizes"], attrs["aliased_outputs"])
            + attrs["temporary_bytes"]
        )
