"""The roofline device model that turns CPU-measured costs into a target GPU's."""

import numpy as np
import pytest

from helpers import graph_from_edges
from tfplace.core.costgraph import UNTRACED_STEP
from tfplace.core.device_model import (
    DEVICE_MODELS,
    DeviceModel,
    convert_graph,
    device_model,
    op_bytes_accessed,
)

GPU = DeviceModel("test-gpu", peak_flops=1e12, memory_bandwidth=1e11, memory=2**30, launch_overhead=1e-5)


def test_compute_bound_ops_take_flops_over_effective_peak():
    assert GPU.op_time(6e11, 1e3) == pytest.approx(1e-5 + 6e11 / (1e12 * 0.6))


def test_memory_bound_ops_take_bytes_over_effective_bandwidth():
    assert GPU.op_time(1e3, 7e9) == pytest.approx(1e-5 + 7e9 / (1e11 * 0.7))


def test_bytes_accessed_count_each_input_tensor_once_plus_outputs():
    graph = graph_from_edges([("a", "b", 100), ("a", "c", 100), ("b", "c", 40)])
    assert op_bytes_accessed(graph, "c") == 140
    assert op_bytes_accessed(graph, "a") == 100


def test_converting_gives_roofline_times_and_scales_ops_of_unknown_work():
    graph = graph_from_edges([("conv", "loop", 4_000_000)], {"conv": 0.5, "loop": 2.0})
    graph.nodes["conv"]["flops"] = 3e11
    graph.nodes["loop"]["op_type"] = "While"
    graph.nodes["loop"]["output_sizes"] = ()
    graph.edges["conv", "loop"]["slots"] = ()
    graph.edges["conv", "loop"]["bytes"] = 0
    converted = convert_graph(graph, GPU)
    conv = GPU.op_time(3e11, 4_000_000)
    assert converted.nodes["conv"]["compute_time"] == pytest.approx(conv)
    assert converted.nodes["loop"]["compute_time"] == pytest.approx(2.0 * conv / 0.5)
    assert graph.nodes["conv"]["compute_time"] == 0.5  # the input graph is not modified


def test_a_graph_converted_to_another_device_keeps_no_untraced_step_of_the_profiling_cpu():
    graph = graph_from_edges([("conv", "relu", 100)], {"conv": 0.5, "relu": 0.1})
    graph.graph[UNTRACED_STEP] = {"loopback": 0.7}
    assert UNTRACED_STEP not in convert_graph(graph, GPU).graph
    assert graph.graph[UNTRACED_STEP] == {"loopback": 0.7}


def test_a_while_op_is_scaled_by_its_measured_time_although_its_inputs_and_outputs_have_bytes():
    graph = graph_from_edges([("conv", "loop", 4_000_000)], {"conv": 0.5, "loop": 2.0})
    graph.nodes["conv"]["flops"] = 3e11
    graph.nodes["loop"]["op_type"] = "StatelessWhile"
    converted = convert_graph(graph, GPU)
    conv = converted.nodes["conv"]["compute_time"]
    assert converted.nodes["loop"]["compute_time"] == pytest.approx(2.0 * conv / 0.5)
    assert converted.nodes["loop"]["compute_time"] > GPU.op_time(0, op_bytes_accessed(graph, "loop")) * 100


def test_ops_of_unknown_work_follow_the_speed_up_of_the_work_not_of_the_median_op():
    # one heavy op 100x faster on the target, four tiny ops slower there (launch overhead)
    edges = [("conv", f"tiny{i}", 0) for i in range(4)] + [("tiny0", "loop", 0)]
    times = {"conv": 1.0, "loop": 3.0, **{f"tiny{i}": 1e-6 for i in range(4)}}
    graph = graph_from_edges(edges, times)
    graph.nodes["conv"]["flops"] = 0.01 * 1e12 * 0.6  # 10 ms of compute on GPU, plus launch
    for i in range(4):
        graph.nodes[f"tiny{i}"]["flops"] = 1.0
    graph.nodes["loop"]["op_type"] = "While"
    converted = convert_graph(graph, GPU)
    known = ["conv", *(f"tiny{i}" for i in range(4))]
    ratio = sum(converted.nodes[op]["compute_time"] for op in known) / sum(times[op] for op in known)
    assert ratio < 0.02
    assert converted.nodes["loop"]["compute_time"] == pytest.approx(3.0 * ratio)


def test_measured_overrides_replace_estimates():
    graph = graph_from_edges([("a", "b", 10)])
    assert convert_graph(graph, GPU, overrides={"b": 0.25}).nodes["b"]["compute_time"] == 0.25


def test_calibration_recovers_the_efficiencies_of_measured_ops():
    truth = DeviceModel(
        "t", 1e12, 1e11, 2**30, launch_overhead=1e-5, compute_efficiency=0.4, memory_efficiency=0.9
    )
    flops = np.array([1e12, 2e12, 1e3, 1e3])
    nbytes = np.array([1e6, 1e6, 5e9, 9e9])
    seconds = np.array([truth.op_time(f, b) for f, b in zip(flops, nbytes)])
    fitted = GPU.calibrate(flops, nbytes, seconds)
    assert fitted.compute_efficiency == pytest.approx(0.4)
    assert fitted.memory_efficiency == pytest.approx(0.9)


def test_presets_cover_the_papers_and_newer_gpus():
    assert set(DEVICE_MODELS) >= {"V100-32GB", "A100-40GB", "H100-80GB"}
    assert device_model("V100-32GB").memory == 32 * 2**30
    with pytest.raises(ValueError, match="A100-40GB"):
        device_model("K80")


def test_a_view_of_a_forwarded_buffer_costs_the_launch_overhead_but_an_in_place_op_its_bytes():
    from tfplace.core.costgraph import CostGraph

    graph = CostGraph()
    graph.add_op("conv", compute_time=0.5, output_sizes=(8_000_000,), op_type="Conv2D", flops=1e11)
    graph.add_op("view", compute_time=1e-3, output_sizes=(8_000_000,), op_type="Identity",
                 aliased_outputs=[(0, "conv", 0)])  # fmt: skip
    graph.add_op("relu", compute_time=4e-3, output_sizes=(8_000_000,), op_type="Relu",
                 aliased_outputs=[(0, "view", 0)])  # fmt: skip
    graph.add_op("copy", compute_time=1e-3, output_sizes=(8_000_000,), op_type="Identity")
    for src, dst in [("conv", "view"), ("view", "relu"), ("relu", "copy")]:
        graph.add_dependency(src, dst, slots=(0,))

    converted = convert_graph(graph, GPU)

    assert converted.nodes["view"]["compute_time"] == pytest.approx(GPU.launch_overhead)
    assert converted.nodes["relu"]["compute_time"] == pytest.approx(GPU.op_time(0, 16_000_000))
    assert converted.nodes["copy"]["compute_time"] == pytest.approx(GPU.op_time(0, 16_000_000))
