"""The calibrated CPU device model: per-op overhead, inter-op threads, TensorFlow's executor order,
tensors handed over in a process's memory (tfplace.core.device_model, tfplace.simulator.engine)."""

import dataclasses
import json

import numpy as np
import pytest

from helpers import UNIT_LINK, chain_graph, graph_from_edges
from tfplace.core.costgraph import UNTRACED_STEP, CostGraph
from tfplace.core.device_model import (
    CALIBRATION_FORMAT,
    EXECUTOR_COST_DECAY,
    EXPENSIVE_KERNEL_CYCLES,
    CpuCalibration,
    CpuProcessModel,
    FeedCost,
    clamped_shift,
    cpu_kind,
    inline_ops,
    least_cost_estimate,
    stored_matmul_row_blocks,
)
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.estimator.calibration import (
    OverheadFit,
    StepTiming,
    fit_op_overhead,
    handoff_on_threads,
    pooled_fits,
    pooled_links,
    profiled_sum,
)
from tfplace.simulator import simulate

HAND_OFF = TransferModel(k=0.0, b=5e-6, name="hand-off")
GRPC = TransferModel(k=1e-9, b=1e-4, name="grpc", copy_k=5e-10, copy_b=4e-5)
CALIBRATION = CpuCalibration(
    machine="test",
    cores=2,
    processes={
        "virtual": CpuProcessModel(op_overhead=-0.5e-6, step_overhead=1e-4, threads=2, link=HAND_OFF),
        "loopback": CpuProcessModel(
            op_overhead=1e-6,
            step_overhead=3e-4,
            threads=1,
            link=GRPC,
            op_overhead_fits=(0.8e-6, 1e-6, 1.1e-6),
            feed=FeedCost(per_step=80e-6, per_tensor=30e-6, per_byte=1e-9),
        ),
    },
    matmul_row_blocks={"MatMul": 1, "MatMul/transpose_b": 3},
)
VIRTUAL = ["/device:CPU:0", "/device:CPU:1"]
WORKERS = ["/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"]


def independent(*names, seconds=1.0):
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    for name in names:
        graph.add_op(name, compute_time=seconds)
    return graph


def cpus(count, **options):
    return DeviceSet.parse(f"/device:CPU:0-{count - 1}", 10**9, intra_host=UNIT_LINK, **options)


def started(result):
    return [task.op for task in sorted(result.schedule.ops, key=lambda task: task.start)]


# The inter-op thread pool: ops at once per process


def test_a_process_with_two_threads_runs_two_ready_ops_of_one_device_at_once():
    graph = independent("a", "b")
    assert simulate(graph, [0, 0], cpus(1, host_threads=2, cores=2)).makespan == pytest.approx(1)
    assert simulate(graph, [0, 0], cpus(1, host_threads=1, cores=2)).makespan == pytest.approx(2)


def test_threads_beyond_the_machines_cores_run_nothing_more_at_once():
    assert simulate(
        independent("a", "b"), [0, 0], cpus(1, host_threads=2, cores=1)
    ).makespan == pytest.approx(2)


def test_virtual_cpus_of_one_process_share_its_threads_while_workers_have_their_own():
    graph = independent("a", "b")
    assert simulate(graph, [0, 1], cpus(2, host_threads=1, cores=2)).makespan == pytest.approx(2)
    workers = DeviceSet.parse("/job:worker/task:0-1/device:CPU:0", 10**9, host_threads=1, cores=2)
    assert simulate(graph, [0, 1], workers).makespan == pytest.approx(1)


# TensorFlow's executor order on CPUs


def test_inexpensive_ops_run_inline_first_then_the_pool_last_in_first_out():
    graph = graph_from_edges([("r", "a", 0), ("r", "b", 0), ("r", "c", 0)], op_type={"c": "Identity"})
    every_op_on_cpu0 = np.zeros(4, dtype=int)
    executor = simulate(graph, every_op_on_cpu0, cpus(1), inline_ops=inline_ops(graph), record=True)
    assert started(executor) == ["r", "c", "b", "a"]
    assert started(simulate(graph, every_op_on_cpu0, cpus(1), record=True)) == ["r", "a", "b", "c"]


def test_the_last_expensive_op_made_ready_runs_inline_when_nothing_else_does():
    graph = graph_from_edges([("r", "a", 0), ("r", "b", 0), ("a", "x", 0), ("b", "y", 0)])
    result = simulate(graph, np.zeros(5, dtype=int), cpus(1), inline_ops=inline_ops(graph), record=True)
    assert started(result) == ["r", "b", "y", "a", "x"]  # depth first: b inline, a from the pool


def test_the_steps_first_ops_follow_the_same_rule_from_each_devices_source():
    graph = independent("x", "y", "z")
    result = simulate(graph, np.zeros(3, dtype=int), cpus(1), inline_ops=inline_ops(graph), record=True)
    assert started(result) == ["z", "y", "x"]


def test_inline_ops_must_match_the_graph_and_replace_any_priority():
    graph = independent("a", "b")
    with pytest.raises(ValueError, match="inline_ops has 1 entries"):
        simulate(graph, [0, 0], cpus(1), inline_ops=[True])
    with pytest.raises(ValueError, match="priority='fifo'"):
        simulate(graph, [0, 0], cpus(1), inline_ops=[True, False], priority="critical_path")


def test_inline_ops_are_the_kernels_that_declare_themselves_inexpensive():
    graph = graph_from_edges(
        [("c", "m", 8), ("m", "r", 8)], op_type={"c": "Const", "m": "MatMul", "r": "Reshape"}
    )
    assert inline_ops(graph).tolist() == [True, False, True]


def test_in_the_steady_state_kernels_timed_below_8000_cycles_run_inline_too():
    kernels = {"c": 0.1e-6, "fast": 3.9e-6, "slow": 4.1e-6}
    graph = graph_from_edges(
        [("c", "fast", 8), ("fast", "slow", 8)],
        op_type={"c": "Const", "fast": "MatMul", "slow": "MatMul"},
        kernel_time=kernels,
    )
    two_ghz = 2e9  # 8,000 cycles: 4 us
    assert inline_ops(graph).tolist() == [True, False, False]
    assert inline_ops(graph, two_ghz).tolist() == [True, True, False]


def test_the_kernels_own_time_decides_not_the_nodes_whole_time():
    graph = graph_from_edges(
        [("measured", "unmeasured", 8)],
        compute={"measured": 6e-6, "unmeasured": 6e-6},
        kernel_time={"measured": 2e-6},
    )
    assert inline_ops(graph, 2e9).tolist() == [True, False]  # without a kernel time, the whole time
    with pytest.raises(ValueError, match="cycles_per_second must be positive"):
        inline_ops(graph, 0.0)


def test_a_kernel_found_cheap_runs_before_the_expensive_op_made_ready_with_it():
    # r makes s (a sum) and then a ready; as long as both count as expensive, s goes to the pool
    # and a, the last, runs inline; once s is timed cheap, s runs inline and a waits in the pool
    graph = graph_from_edges(
        [("r", "s", 0), ("r", "a", 0), ("s", "t", 0)],
        op_type={"s": "AddN", "a": "MatMul", "t": "Identity"},
        kernel_time={"r": 1e-5, "s": 1e-6, "a": 1e-5, "t": 1e-6},
    )
    on_cpu0 = np.zeros(4, dtype=int)
    first_steps = simulate(graph, on_cpu0, cpus(1), inline_ops=inline_ops(graph), record=True)
    steady = simulate(graph, on_cpu0, cpus(1), inline_ops=inline_ops(graph, 2e9), record=True)
    assert started(first_steps) == ["r", "a", "s", "t"]
    assert started(steady) == ["r", "s", "t", "a"]


def executor_estimates(kernel_times: list[float], runs: int) -> np.ndarray:
    """TensorFlow's executor's cost estimate after each of ``runs`` runs cycling through
    ``kernel_times`` (seconds, the counter at 1 GHz), from its initial 10^8 cycles."""
    estimate, estimates = 0.1, []
    for run in range(runs):
        estimate += (kernel_times[run % len(kernel_times)] - estimate) / EXECUTOR_COST_DECAY
        estimates.append(estimate)
    return np.array(estimates)


def test_a_kernels_least_cost_estimate_is_the_least_the_executors_running_estimate_reaches():
    kernel_times = [3.4e-6, 2.6e-6, 3.3e-6, 3.0e-6, 4.5e-6, 2.9e-6, 3.2e-6]
    assert least_cost_estimate(kernel_times) == pytest.approx(
        executor_estimates(kernel_times, 3000).min(), rel=1e-9
    )


def test_a_kernel_timed_above_the_threshold_by_its_median_runs_inline_once_its_estimate_dips_below():
    # three fast runs in a row (a quiet moment) pull the estimate under 3,100 cycles (1 GHz)
    kernel_times = [2.8e-6] * 3 + [3.3e-6] * 4
    least = least_cost_estimate(kernel_times)
    assert 2.8e-6 < least < 3.1e-6 < float(np.median(kernel_times))
    graph = graph_from_edges(
        [("a", "b", 8)], op_type={"a": "AddN", "b": "AddN"}, kernel_time={"a": least, "b": 3.3e-6}
    )
    assert inline_ops(graph, EXPENSIVE_KERNEL_CYCLES / 3.1e-6).tolist() == [True, False]


def test_a_kernel_timed_once_or_always_the_same_has_that_time_as_its_least_estimate():
    assert least_cost_estimate([2.5e-6]) == pytest.approx(2.5e-6)
    assert least_cost_estimate([4e-6] * 30) == pytest.approx(4e-6)
    with pytest.raises(ValueError, match="kernel_times must be a non-empty sequence of finite seconds"):
        least_cost_estimate([])


# Tensors handed over between the virtual CPUs of one process


def test_a_tensor_handed_over_in_shared_memory_stays_on_the_sender_until_its_consumer_ends():
    graph = chain_graph([1, 1, 1], [100, 0])
    copied = simulate(graph, [0, 1, 1], cpus(2))
    shared = simulate(graph, [0, 1, 1], cpus(2, shared_host_memory=True), record=True)
    assert copied.peak_memory[:2].tolist() == [100, 100]
    assert shared.peak_memory[:2].tolist() == [100, 0]
    sender = shared.schedule.memory[0]
    consumer_end = next(task.end for task in shared.schedule.ops if task.op == "o1")
    assert sender.bytes[-1] == 0 and sender.times[-1] == pytest.approx(consumer_end)


def handed_over(link):
    """a (1 s) on CPU:0 hands 100 bytes to b (1 s) on CPU:1; c (1 s) on CPU:0 is ready at once;
    one thread for the process, two cores, memory shared."""
    graph = graph_from_edges([("a", "b", 100)], compute={"a": 1.0, "b": 1.0})
    graph.add_op("c", compute_time=1.0)
    devices = DeviceSet.parse(
        "/device:CPU:0-1", 10**9, intra_host=link, host_threads=1, cores=2, shared_host_memory=True
    )
    return simulate(graph, {"a": VIRTUAL[0], "b": VIRTUAL[1], "c": VIRTUAL[0]}, devices)


def test_a_hand_off_done_by_the_threads_holds_the_process_thread_while_a_link_runs_beside_it():
    on_link = handed_over(TransferModel(k=0.0, b=0.5, name="link"))
    on_threads = handed_over(handoff_on_threads(TransferModel(k=0.0, b=0.5, name="link")))
    assert on_link.makespan == pytest.approx(3.0)  # the tensor arrives while c runs
    assert on_threads.makespan == pytest.approx(3.5)  # a, c, the hand-off, then b: one thread
    assert on_threads.peak_memory[:2].tolist() == on_link.peak_memory[:2].tolist() == [100, 0]


def test_the_threads_do_all_of_a_hand_off_and_nothing_of_it_overlaps():
    link = TransferModel(k=2e-9, b=5e-6, latency=1e-6, name="hand-off")
    threads = handoff_on_threads(link)
    assert (threads.copy_b, threads.copy_k, threads.latency) == pytest.approx((5e-6, 2e-9, 0.0))
    assert threads.time(1000) == pytest.approx(link.time(1000))  # alone, a transfer takes as long


def test_devices_of_different_hosts_copy_tensors_even_with_shared_host_memory():
    graph = chain_graph([1, 1], [100])
    workers = DeviceSet.parse("/job:worker/task:0-1/device:CPU:0", 10**9, shared_host_memory=True)
    assert simulate(graph, [0, 1], workers).peak_memory[:2].tolist() == [100, 100]


# The calibration: costs and devices of a real step


def test_step_costs_add_the_per_op_overhead_at_least_to_zero_and_keep_memory():
    graph = chain_graph([3e-6, 0.2e-6], [100], memory=[64, 0])
    virtual = CALIBRATION.step_costs(graph, "virtual")
    assert [virtual.nodes[op]["compute_time"] for op in virtual] == pytest.approx([2.5e-6, 0.0])
    assert [virtual.nodes[op]["persistent_bytes"] for op in virtual] == [64, 0]
    assert graph.nodes["o0"]["compute_time"] == 3e-6  # the profile itself is unchanged
    loopback = CALIBRATION.step_costs(graph, "loopback")
    assert [loopback.nodes[op]["compute_time"] for op in loopback] == pytest.approx([4e-6, 1.2e-6])


def fed_graph():
    """Two fed inputs (400 and 1,200 bytes), an input with a default, and the op that sums them."""
    graph = CostGraph(transfer_model=UNIT_LINK.to_dict())
    graph.add_op("images", op_type="Placeholder", compute_time=1e-6, output_sizes=(400,))
    graph.add_op("labels", op_type="Placeholder", compute_time=1e-6, output_sizes=(1200,))
    graph.add_op("rate", op_type="PlaceholderWithDefault", compute_time=1e-6, output_sizes=(4,))
    graph.add_op("loss", op_type="AddN", compute_time=10e-6, output_sizes=(4,))
    for source in ("images", "labels", "rate"):
        graph.add_dependency(source, "loss", slots=[0])
    return graph


def test_each_fed_placeholder_carries_its_tensor_and_bytes_and_an_equal_share_of_the_step_feed_cost():
    costs = CALIBRATION.step_costs(fed_graph(), "loopback")
    times = {op: costs.nodes[op]["compute_time"] for op in costs}
    assert times["images"] == pytest.approx(1e-6 + 1e-6 + 40e-6 + 30e-6 + 400e-9)
    assert times["labels"] == pytest.approx(1e-6 + 1e-6 + 40e-6 + 30e-6 + 1200e-9)
    assert times["rate"] == pytest.approx(2e-6) and times["loss"] == pytest.approx(11e-6)


def test_a_one_device_step_takes_its_feeds_cost_longer_than_the_same_step_fed_for_free():
    free = dataclasses.replace(
        CALIBRATION,
        processes={
            **CALIBRATION.processes,
            "loopback": dataclasses.replace(CALIBRATION.processes["loopback"], feed=FeedCost()),
        },
    )
    devices = CALIBRATION.device_set(WORKERS[:1], 2**30)
    fed = simulate(CALIBRATION.step_costs(fed_graph(), "loopback"), [0] * 4, devices).makespan
    unfed = simulate(free.step_costs(fed_graph(), "loopback"), [0] * 4, devices).makespan
    assert fed - unfed == pytest.approx(80e-6 + 2 * 30e-6 + 1600e-9)


def timed_untraced(graph, seconds, kind):
    graph.graph[UNTRACED_STEP] = {kind: seconds}
    return graph


def test_a_graph_simulated_where_its_untraced_step_was_timed_takes_that_step():
    graph = timed_untraced(fed_graph(), 500e-6, "loopback")
    costs = CALIBRATION.step_costs(graph, "loopback")
    one_worker = CALIBRATION.device_set(WORKERS[:1], 2**30)
    assert simulate(costs, [0] * 4, one_worker).makespan == pytest.approx(500e-6)
    # 500 us less 13 us of kernels, the 300 us step and 141.6 us of feeds, over four ops
    assert CALIBRATION.op_overhead(graph, "loopback") == pytest.approx(45.4e-6 / 4)
    assert UNTRACED_STEP not in costs.graph  # its times are no longer the traced ones


def test_an_untraced_step_shorter_than_its_traced_ops_is_still_the_step_simulated_no_op_below_0():
    graph = timed_untraced(fed_graph(), 450e-6, "loopback")  # 8.4 us beyond the step and feeds
    costs = CALIBRATION.step_costs(graph, "loopback")
    one_worker = CALIBRATION.device_set(WORKERS[:1], 2**30)
    assert simulate(costs, [0] * 4, one_worker).makespan == pytest.approx(450e-6)
    # an even share (-1.15 us each) would put the three 1 us inputs below 0: the sum takes it all
    assert CALIBRATION.op_overhead(graph, "loopback") == pytest.approx(-1.6e-6)
    assert costs.nodes["loss"]["compute_time"] == pytest.approx(8.4e-6)


@pytest.mark.parametrize(
    ("times", "total", "shift"),
    [
        ([3.0, 2.0, 1.0], 9.0, 1.0),  # nothing clamped: an even share
        ([3.0, 2.0, 1.0], 3.0, -1.0),  # 2 + 1 + 0: the 1 lands exactly on 0
        ([10.0, 1.0, 1.0], 4.0, -6.0),  # the two small ops clamped, the large one takes the rest
        ([3.0, 2.0], 0.0, -3.0),  # nothing left: every op at 0
    ],
)
def test_the_clamped_shift_makes_the_ops_add_up_to_the_total(times, total, shift):
    assert clamped_shift(times, total) == pytest.approx(shift)
    assert sum(max(t + clamped_shift(times, total), 0.0) for t in times) == pytest.approx(max(total, 0.0))


def test_on_another_kind_the_graphs_own_overhead_moves_by_the_calibrated_difference_of_the_kinds():
    graph = timed_untraced(fed_graph(), 500e-6, "loopback")
    own = CALIBRATION.op_overhead(graph, "loopback")
    assert CALIBRATION.op_overhead(graph, "virtual") == pytest.approx(own - 0.5e-6 - 1e-6)


def test_a_graph_timed_on_both_kinds_takes_each_kinds_own_step_not_the_calibrated_difference():
    graph = timed_untraced(fed_graph(), 500e-6, "loopback")
    graph.graph[UNTRACED_STEP]["virtual"] = 200e-6
    # 200 us less 13 us of kernels and the 100 us step (a virtual CPU's feeds are free), over four ops
    assert CALIBRATION.op_overhead(graph, "virtual") == pytest.approx(87e-6 / 4)
    assert CALIBRATION.op_overhead(graph, "loopback") == pytest.approx(45.4e-6 / 4)


def test_without_an_untraced_step_a_graph_pays_the_calibrated_per_op_overhead():
    assert CALIBRATION.op_overhead(fed_graph(), "virtual") == -0.5e-6
    assert CALIBRATION.op_overhead(fed_graph(), "loopback") == 1e-6


def test_an_untraced_step_timed_on_an_unknown_kind_of_device_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match=r"unknown CPU device kind 'gpu'.*virtual"):
        CALIBRATION.op_overhead(timed_untraced(fed_graph(), 500e-6, "gpu"), "virtual")


def test_a_fed_tensor_costs_its_own_and_its_bytes_share_and_an_equal_part_of_the_step():
    feed = FeedCost(per_step=80e-6, per_tensor=30e-6, per_byte=1e-9)
    assert feed.share(1000, 4) == pytest.approx(20e-6 + 30e-6 + 1e-6)
    with pytest.raises(ValueError, match="at least one tensor"):
        feed.share(1000, 0)


def test_a_negative_feed_cost_is_refused_naming_the_coefficient():
    with pytest.raises(ValueError, match="per_byte must be >= 0"):
        FeedCost(per_byte=-1e-9)


def test_virtual_cpus_get_the_process_link_threads_and_shared_memory():
    devices = CALIBRATION.device_set(VIRTUAL, 2**30)
    assert (devices.intra_host, devices.host_threads, devices.cores) == (HAND_OFF, 2, 2)
    assert devices.shared_host_memory and devices.step_overhead == 1e-4


def test_loopback_workers_get_the_grpc_link_one_thread_each_and_their_own_memory():
    devices = CALIBRATION.device_set(WORKERS, [2**30, 2**31])
    assert (devices.inter_host, devices.host_threads, devices.cores) == (GRPC, 1, 2)
    assert not devices.shared_host_memory and devices.step_overhead == 3e-4
    assert [device.memory for device in devices] == [2**30, 2**31]


@pytest.mark.parametrize(
    "names",
    [
        ["/device:GPU:0"],
        ["/device:CPU:0", "/job:worker/task:1/device:CPU:0"],
        ["/job:worker/task:0/device:CPU:1"],
    ],
)
def test_the_cpu_model_refuses_devices_that_are_not_one_kind_of_cpu(names):
    with pytest.raises(ValueError, match="CPU"):
        cpu_kind(names)


def test_a_kind_not_calibrated_names_the_command_that_calibrates_it():
    only_virtual = dataclasses.replace(CALIBRATION, processes={"virtual": CALIBRATION.processes["virtual"]})
    with pytest.raises(ValueError, match="tfplace calibrate"):
        only_virtual.device_set(WORKERS, 2**30)


def test_a_calibration_is_stored_and_read_back_unchanged(tmp_path):
    path = tmp_path / "nested" / "calibration.json"
    CALIBRATION.save(path)
    assert CpuCalibration.load(path) == CALIBRATION


def test_a_calibration_written_before_feeds_were_measured_reads_with_feeds_for_free():
    spec = CALIBRATION.to_dict()
    del spec["processes"]["loopback"]["feed"]
    assert CpuCalibration.from_dict(spec).process("loopback").feed == FeedCost()


def test_a_format_6_calibration_reads_with_its_per_byte_overhead_ignored_and_a_warning(tmp_path):
    spec = CALIBRATION.to_dict()
    spec["format"] = 6
    spec["processes"]["loopback"]["byte_overhead"] = 65e-12
    path = tmp_path / "format6.json"
    path.write_text(json.dumps(spec))
    with pytest.warns(UserWarning, match="format 6"):
        calibration = CpuCalibration.load(path)
    assert calibration.process("loopback") == CALIBRATION.process("loopback")


def test_a_calibration_written_before_the_fits_were_pooled_still_reads_with_no_fits():
    spec = CALIBRATION.to_dict()
    del spec["processes"]["loopback"]["op_overhead_fits"]
    loopback = CpuCalibration.from_dict(spec).process("loopback")
    assert loopback.op_overhead_fits == () and loopback.op_overhead == 1e-6


def test_a_calibration_written_before_the_matmul_row_blocks_were_measured_reads_as_smooth(tmp_path):
    spec = CALIBRATION.to_dict()
    del spec["matmul_row_blocks"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(spec))
    assert CpuCalibration.load(path) == dataclasses.replace(CALIBRATION, matmul_row_blocks={})


def test_the_stored_matmul_row_blocks_are_the_calibrations_or_none_without_a_file(tmp_path):
    CALIBRATION.save(tmp_path / "calibration.json")
    assert stored_matmul_row_blocks(tmp_path / "calibration.json") == {"MatMul": 1, "MatMul/transpose_b": 3}
    assert stored_matmul_row_blocks(tmp_path / "absent.json") == {}
    assert stored_matmul_row_blocks("") == {}


def test_a_matmul_row_block_below_one_is_refused():
    with pytest.raises(ValueError, match="row blocks are at least 1"):
        dataclasses.replace(CALIBRATION, matmul_row_blocks={"MatMul": 0})


@pytest.mark.parametrize("stored", [1, 2, 3])  # 1: no format (before session 11); 2: node times; 3: no feeds
def test_a_calibration_of_an_older_format_reads_with_a_warning_to_calibrate_again(tmp_path, stored):
    spec = CALIBRATION.to_dict()
    if stored == 1:
        del spec["format"]
    else:
        spec["format"] = stored
    path = tmp_path / "old.json"
    path.write_text(json.dumps(spec))
    with pytest.warns(UserWarning, match=f"format {stored}: .* run tfplace calibrate again"):
        assert CpuCalibration.load(path) == CALIBRATION


def test_a_calibration_of_a_newer_format_is_refused_naming_both_formats(tmp_path):
    path = tmp_path / "new.json"
    path.write_text(json.dumps({**CALIBRATION.to_dict(), "format": CALIBRATION_FORMAT + 1}))
    with pytest.raises(ValueError, match=f"format {CALIBRATION_FORMAT + 1}.*format {CALIBRATION_FORMAT}"):
        CpuCalibration.load(path)


def test_reading_a_missing_or_malformed_calibration_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="run tfplace calibrate"):
        CpuCalibration.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text('{"machine": "m"}')
    with pytest.raises(ValueError, match="malformed CPU calibration"):
        CpuCalibration.load(tmp_path / "bad.json")


def timed_chains(chains, op_overhead=0.0, step_overhead=0.0):
    """StepTimings of chains of ``chains`` records whose untraced steps take exactly the given
    overheads beyond their traced ops (0.8 us each)."""
    return [StepTiming(ops, 0.8e-6 * ops, 0.8e-6 * ops + op_overhead * ops + step_overhead) for ops in chains]


CHAINS = [110, 460, 900]


def test_the_per_op_overhead_is_the_slope_of_untraced_minus_traced_steps():
    fit = fit_op_overhead(timed_chains(CHAINS, op_overhead=-0.3e-6, step_overhead=80e-6))
    assert fit == pytest.approx(OverheadFit(-0.3e-6, 80e-6))


def test_the_traced_time_of_a_chain_is_its_quietest_steps_as_the_profiler_reduces_a_profile():
    """The per-op overhead is measured against op times reduced as a profile's are: they add up to
    the tenth quantile of the traced steps, not to each op's own fastest runs (every step had one
    op preempted, +9 us; each op's own lower quantile would sum to 3 us, a step no run had)."""
    times = {op: [10e-6 if step % 3 == i else 1e-6 for step in range(30)] for i, op in enumerate("abc")}
    assert min(map(sum, zip(*times.values()))) == pytest.approx(12e-6)
    assert profiled_sum(times) == pytest.approx(12e-6)


def test_pooled_fits_take_each_coefficients_median_so_one_fit_in_a_busy_window_does_not_move_them():
    quiet = [
        OverheadFit(-0.21e-6, 100e-6),
        OverheadFit(-0.20e-6, 110e-6),
        OverheadFit(-0.19e-6, 90e-6),
        OverheadFit(-0.22e-6, 105e-6),
    ]
    busy = OverheadFit(+0.7e-6, 0.0)  # a preempted short chain tilts one fit: slope up, intercept down
    pooled = pooled_fits([*quiet[:2], busy, *quiet[2:]])
    assert pooled == pytest.approx(OverheadFit(-0.20e-6, 100e-6))
    assert pooled_fits([busy]) == busy


def test_the_calibrate_printout_gives_the_range_of_the_pooled_fits_where_the_file_has_them():
    from tfplace.cli.calibrate_command import calibration_table

    lines = calibration_table(CALIBRATION).splitlines()
    assert "+1.000 us per op (fits +0.800 .. +1.100)" in lines[2]
    assert "-0.500 us per op," in lines[1] and "fits" not in lines[1]
    assert "feeds 80.0 us per step + 30.0 us per tensor + 1.000 ns/B" in lines[2]
    assert lines[3] == "  MatMul rows per pass over the weights: MatMul 1, MatMul/transpose_b 3"


def test_pooling_no_fit_is_an_error():
    with pytest.raises(ValueError, match="at least one fit"):
        pooled_fits([])


def test_a_step_never_costs_less_than_its_ops_so_a_negative_intercept_goes_through_zero():
    fit = fit_op_overhead([StepTiming(100, 1e-4, 0.5e-4), StepTiming(200, 2e-4, 1.6e-4)])
    assert fit.step_overhead == 0.0
    assert fit.op_overhead == pytest.approx((-0.5e-4 * 100 - 0.4e-4 * 200) / (100**2 + 200**2))


def test_the_per_op_overhead_needs_chains_of_two_lengths():
    with pytest.raises(ValueError, match="at least two lengths, got \\[460, 460\\]"):
        fit_op_overhead(timed_chains([460, 460]))


def test_pooled_links_take_each_parameters_median_so_one_fit_in_a_busy_moment_does_not_set_them():
    quiet = [
        TransferModel(k=0.5e-9, b=250e-6, name="loopback", copy_k=0.3e-9, copy_b=85e-6),
        TransferModel(k=0.6e-9, b=260e-6, name="other", copy_k=0.3e-9, copy_b=90e-6),
    ]
    busy = TransferModel(k=0.5e-9, b=413e-6, name="busy", copy_k=0.4e-9, copy_b=164e-6)
    pooled = pooled_links([quiet[0], busy, quiet[1]])
    assert (pooled.b, pooled.copy_b, pooled.k, pooled.copy_k) == pytest.approx(
        (260e-6, 90e-6, 0.5e-9, 0.3e-9)
    )
    assert pooled.name == "loopback"
    with pytest.raises(ValueError, match="at least one"):
        pooled_links([])
