"""m-ETF: earliest-start list scheduling that places while it schedules, under dynamic memory limits."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import UNIT_LINK, chain_graph, graph_from_edges
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.synthetic import random_dag
from tfplace.placer import place_cost_graph
from tfplace.placer.base import check_constraints
from tfplace.placer.etf import etf_schedule, m_etf
from tfplace.placer.ledger import MemoryLedger


def gpus(count=2, memory=10**9):
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=UNIT_LINK)


def place(graph, devices):
    """Run m-ETF; returns {op name: device index}, the schedule and the ledger."""
    indexed = index_graph(graph, devices.typical_link)
    output = m_etf(indexed, devices)
    check_constraints(indexed, devices, output.op_devices)
    placed = dict(zip(indexed.names, output.op_devices.tolist()))
    return placed, output.details["schedule"], output.ledger


def fork_join(width, edge_bytes):
    """r feeds ``width`` ops of 10 s, which all feed j; r and j take 1 s."""
    edges = [("r", f"x{i}", edge_bytes) for i in range(width)] + [
        (f"x{i}", "j", edge_bytes) for i in range(width)
    ]
    return graph_from_edges(edges, {"r": 1, "j": 1, **{f"x{i}": 10 for i in range(width)}})


def test_a_fork_join_with_cheap_transfers_spreads_over_devices_and_beats_one_device():
    placed, schedule, _ = place(fork_join(4, edge_bytes=1), gpus(4))
    assert len(set(placed.values())) == 4
    # r [0, 1]; x0 on r's device [1, 11], x1..x3 elsewhere [2, 12]; j waits for their sends (+1 s)
    assert schedule.makespan == pytest.approx(14)
    assert schedule.makespan < 1 + 4 * 10 + 1


def test_a_fork_join_with_expensive_transfers_stays_on_one_device():
    placed, schedule, _ = place(fork_join(4, edge_bytes=100), gpus(4))
    assert len(set(placed.values())) == 1
    assert schedule.makespan == pytest.approx(42)
    assert schedule.transfers == []


def test_a_chain_with_expensive_transfers_stays_on_one_device():
    placed, schedule, _ = place(chain_graph([1, 2, 3, 4], [50, 50, 50]), gpus(3))
    assert len(set(placed.values())) == 1
    assert schedule.makespan == pytest.approx(10)


def test_earliest_start_ties_go_to_the_op_first_in_kahn_order_then_the_lower_device():
    graph = graph_from_edges([("a", "c", 0), ("b", "c", 0)], {"a": 3, "b": 3, "c": 1})
    placed, schedule, _ = place(graph, gpus(2))
    assert (placed["a"], placed["b"]) == (0, 1)
    assert [list(graph.nodes)[op] for op in schedule.order] == ["a", "b", "c"]


def test_a_colocation_group_is_never_split_and_its_whole_memory_is_counted_at_its_first_op():
    # x holds 50 of 100 bytes. a (10 bytes) would fit beside it and the expensive edge x -> a wants
    # it there, but a's group partner z (80 bytes) would not: the whole group goes to the other GPU.
    graph = graph_from_edges(
        [("x", "a", 5), ("a", "z", 1)],
        persistent_bytes={"x": 50, "a": 10, "z": 80},
        colocation_group={"a": "g", "z": "g"},
    )
    placed, schedule, ledger = place(graph, gpus(2, memory=100))
    assert placed["a"] == placed["z"] != placed["x"]
    assert schedule.best_effort == []
    assert ledger.overcommits() == []
    assert schedule.peak_memory.max() <= 100


def test_a_colocated_op_runs_on_its_groups_device_even_when_another_would_start_it_earlier():
    # a and z share a group; z's producer y runs on the other GPU, yet z must follow a.
    graph = graph_from_edges(
        [("a", "b", 0), ("y", "z", 1)],
        {"a": 5, "b": 5, "y": 1, "z": 1},
        colocation_group={"a": "g", "z": "g"},
    )
    placed, _, _ = place(graph, gpus(2))
    assert placed["a"] == placed["z"]
    assert placed["y"] != placed["a"]


def test_memory_limits_split_a_chain_that_time_alone_would_keep_on_one_device():
    # each op holds 60 bytes and outputs 1: two ops fit on a 130-byte GPU, three do not.
    graph = chain_graph([1, 1, 1, 1], [1, 1, 1], memory=[60, 60, 60, 60])
    placed, schedule, ledger = place(graph, gpus(2, memory=130))
    assert placed["o0"] == placed["o1"] != placed["o2"] == placed["o3"]
    assert schedule.best_effort == []
    assert ledger.overcommits() == []
    assert schedule.peak_memory[:2].tolist() == [122, 121]  # o0 + o1 + their outputs; o2 + o3 + o2's output


def test_an_aliased_output_holds_its_inputs_bytes_until_its_own_consumers_ran():
    # a (40 bytes) -> ident (a's buffer) -> b (30 bytes) -> c: a's buffer lives while b runs
    graph = chain_graph([1, 1, 1, 1], [40, 40, 30])
    graph.nodes["o1"]["aliased_outputs"] = ((0, "o0", 0),)
    _, schedule, _ = place(graph, gpus(1))
    assert schedule.peak_memory[0] == 40 + 30
    graph.nodes["o1"]["aliased_outputs"] = ()
    assert place(graph, gpus(1))[1].peak_memory[0] == 40 + 40  # while ident runs, its output counted again


def test_outputs_are_freed_once_their_consumers_ran_so_a_long_chain_fits_in_little_memory():
    graph = chain_graph([1] * 50, [40] * 49)
    placed, schedule, _ = place(graph, gpus(2, memory=100))
    assert len(set(placed.values())) == 1  # at most two 40-byte outputs are alive at once
    assert schedule.peak_memory.max() == 80
    assert schedule.best_effort == []


def test_when_no_device_has_room_the_least_used_one_takes_the_op_and_the_ledger_reports_it():
    graph = graph_from_edges([("a", "b", 0), ("c", "b", 0)], persistent_bytes={"a": 90, "b": 50, "c": 70})
    placed, schedule, ledger = place(graph, gpus(2, memory=100))
    assert placed["a"] != placed["c"]
    assert placed["b"] == placed["c"]  # 70 of 100 used beats 90 of 100
    assert [list(graph.nodes)[op] for op in schedule.best_effort] == ["b"]
    assert [str(o) for o in ledger.overcommits()] == [
        "/device:GPU:1 is overcommitted by 20 bytes (120 placed on 100)"
    ]


def two_slot_producer(consumers):
    """r on the CPU only, with two 8-byte output slots; each consumer (name, slot) runs on a GPU only."""
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("r", compute_time=1, output_sizes=(8, 8), device_kinds=("CPU",))
    for name, slot in consumers:
        graph.add_op(name, compute_time=1, device_kinds=("GPU",))
        graph.add_dependency("r", name, slots=(slot,))
    return graph


def cpu_and_gpu():
    return DeviceSet.parse("/device:CPU:0,/device:GPU:0", 10**9, intra_host=UNIT_LINK)


def test_a_tensor_needed_by_two_ops_on_another_device_is_sent_there_once():
    graph = two_slot_producer([("a", 0), ("b", 0)])
    _, schedule, _ = place(graph, cpu_and_gpu())
    assert [(t.producer, t.slot, t.src, t.dst, t.nbytes) for t in schedule.transfers] == [(0, 0, 0, 1, 8)]
    transfer = schedule.transfers[0]
    assert (transfer.start, transfer.end) == (1, 9)
    assert sorted(schedule.start[1:].tolist()) == [9, 10]  # b uses the copy a's transfer brought


def test_each_output_slot_is_a_tensor_of_its_own():
    graph = two_slot_producer([("a", 0), ("b", 1)])
    _, schedule, _ = place(graph, cpu_and_gpu())
    assert sorted((t.slot, t.consumer) for t in schedule.transfers) == [(0, 1), (1, 2)]


def test_ops_no_target_can_run_go_to_the_fallback_cpu():
    graph = graph_from_edges([("a", "b", 4), ("b", "c", 4)], device_kinds={"b": ("CPU",)})
    devices = gpus(2)
    placed, _, _ = place(graph, devices)
    assert devices.all_devices[placed["b"]].name == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert placed["a"] < 2 and placed["c"] < 2


def test_m_etf_is_registered_and_its_placement_passes_the_constraint_checks():
    graph = random_dag(200, seed=4, group_fraction=0.3, cpu_only_fraction=0.05, transfer_model=UNIT_LINK)
    placement = place_cost_graph(graph, gpus(3), placer="m_etf", simulate=False)
    assert set(placement.assignment) == set(graph.nodes)


def tensor_key(producer, slot, consumer, device):
    """A tensor on a device: (producer, slot), or the edge itself when it carries no slots."""
    return producer, ("edge", consumer) if slot is None else slot, device


def assert_valid_schedule(indexed, devices, schedule):
    """Each device runs one op at a time; every op starts after its inputs are on its device; each
    tensor is sent to a device at most once, after its producer finished."""
    device, start, finish = schedule.device, schedule.start, schedule.finish
    assert np.allclose(finish - start, indexed.compute)
    for d in range(len(devices.all_devices)):
        ops = np.flatnonzero(device == d)
        ops = ops[np.argsort(start[ops], kind="stable")]
        assert (start[ops[1:]] >= finish[ops[:-1]] - 1e-9).all()
    keys = [tensor_key(t.producer, t.slot, t.consumer, t.dst) for t in schedule.transfers]
    assert len(set(keys)) == len(keys)
    arrival = dict(zip(keys, (t.end for t in schedule.transfers)))
    for t in schedule.transfers:
        assert t.start >= finish[t.producer] - 1e-9 and t.src == device[t.producer] != t.dst
    for u, succ in enumerate(indexed.succ):
        for position, v in enumerate(succ):
            ready = finish[u]
            if device[u] != device[v] and indexed.succ_bytes[u][position]:
                slots = indexed.succ_slots[u][position] or (None,)
                ready = max(arrival[tensor_key(u, s, v, device[v])] for s in slots)
            assert start[v] >= ready - 1e-9


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    count=st.integers(1, 4),
    memory=st.integers(2 * 10**6, 6 * 10**7),
    groups=st.sampled_from([0.0, 0.3]),
)
def test_random_dags_get_valid_schedules_within_memory_whenever_every_op_found_room(
    seed, count, memory, groups
):
    graph = random_dag(120, seed=seed, group_fraction=groups)
    devices = DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory)
    indexed = index_graph(graph, devices.typical_link)
    ledger = MemoryLedger(indexed, devices)
    schedule = etf_schedule(indexed, ledger)
    check_constraints(indexed, devices, ledger.op_devices())
    assert_valid_schedule(indexed, devices, schedule)
    persistent = np.bincount(schedule.device, weights=indexed.persistent, minlength=count)[:count]
    if not schedule.best_effort:
        assert (schedule.peak_memory[:count] <= memory).all()
        assert (persistent <= memory).all()
    assert schedule.makespan >= indexed.compute.sum() / count - 1e-9


def test_m_etf_lets_a_forward_op_decide_its_group_not_a_gradient_constant_ready_at_the_start():
    """Each layer's gradient scope has a shape constant (ready at time 0, co-placed with the layer):
    if those decided the groups, the idle devices would each take a layer and the activations would
    cross; the forward chain decides, and one device runs it without a transfer."""
    graph = CostGraph(name="shape_constants")
    layers = 4
    for i in range(layers):
        graph.add_op(f"f{i}", compute_time=1e-3, output_sizes=(1 << 30,))
        graph.add_op(f"gradients/f{i}_grad/Shape", compute_time=1e-6, output_sizes=(16,), gradient_of=f"f{i}")
        graph.add_op(
            f"gradients/f{i}_grad/Mul", compute_time=2e-3, output_sizes=(1 << 30,), gradient_of=f"f{i}"
        )
        graph.add_dependency(f"gradients/f{i}_grad/Shape", f"gradients/f{i}_grad/Mul", slots=(0,))
        graph.add_dependency(f"f{i}", f"gradients/f{i}_grad/Mul", slots=(0,))
        if i:
            graph.add_dependency(f"f{i - 1}", f"f{i}", slots=(0,))
            graph.add_dependency(f"gradients/f{i}_grad/Mul", f"gradients/f{i - 1}_grad/Mul", slots=(0,))
    graph.add_dependency(f"f{layers - 1}", f"gradients/f{layers - 1}_grad/Mul", slots=(0,))
    placement = place_cost_graph(graph, DeviceSet.parse("/device:GPU:0-3", 1 << 40), "m_etf", simulate=False)
    assert len(set(placement.assignment.values())) == 1
    assert placement.details["transfers"] == 0
