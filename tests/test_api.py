"""tfplace.place: from a user's graph to a placed graph that TensorFlow runs and that trains alike."""

import numpy as np
import pytest

from helpers import feed_function, variable_values
from tfplace.api import as_device_set, place_remaining_ops
from tfplace.core.costgraph import UNTRACED_STEP, CostGraph
from tfplace.core.devices import DeviceError, DeviceName, DeviceSet

pytestmark = [pytest.mark.tensorflow, pytest.mark.profiles]


@pytest.mark.parametrize("name", ["cnn", "lstm_v1", "lstm_v2", "colocation"])
def test_place_gives_every_op_a_device_and_the_placed_graph_runs_where_placed_and_trains_alike(
    load_saved_graph, name, tmp_path
):
    from tfplace import place
    from tfplace.tf_graph import device_mismatches, run_steps, virtual_cpu_config

    graph, entry, _ = load_saved_graph(name)
    feed_fn = feed_function(entry)
    if name.startswith("lstm"):
        # the time dimension is unknown, not the batch: a fixed batch of 4, so profile at it alone
        options = {"profile_batch_sizes": [4], "batch_size": 4}
    else:
        options = {"profile_batch_sizes": [1, 2], "batch_size": 16}
    devices = DeviceSet.parse("/device:CPU:0-2", "1GB")
    placement = place(
        graph,
        entry["train_op"],
        feed_fn,
        devices,
        placer="m_topo",
        cache_dir=tmp_path,
        warmup_steps=1,
        traced_steps=2,
        **options,
    )

    assert set(placement.assignment) == {op.name for op in graph.get_operations()}
    assert placement.step_time is not None and placement.step_time > 0
    assert (
        placement.cost_graph is not None and placement.cost_graph.graph["batch_size"] == options["batch_size"]
    )
    fetches = {"loss": entry["loss"], "train": entry["train_op"]}
    weights = variable_values(graph)
    feeds = feed_fn(4)
    single = run_steps(graph, fetches, lambda: feeds, 2, virtual_cpu_config(1), final_fetches=weights)
    placement.apply(graph)
    placed = run_steps(
        graph, fetches, lambda: feeds, 2, virtual_cpu_config(3), trace_steps=1, final_fetches=weights
    )
    assert device_mismatches(placed.run_metadata[0], placement) == []
    np.testing.assert_allclose(
        [v["loss"] for v in placed.values], [v["loss"] for v in single.values], rtol=1e-5
    )
    for after_placed, after_single in zip(placed.final_values, single.final_values, strict=True):
        np.testing.assert_allclose(after_placed, after_single, rtol=1e-5, atol=1e-7)


def test_a_second_place_reads_the_profile_from_the_cache(load_saved_graph, tmp_path):
    from tfplace import estimate_costs

    graph, entry, _ = load_saved_graph("cnn")
    options = dict(profile_batch_sizes=[1, 2], cache_dir=tmp_path, warmup_steps=1, traced_steps=2)
    first = estimate_costs(graph, entry["train_op"], feed_function(entry), 8, **options)
    second = estimate_costs(graph, entry["train_op"], feed_function(entry), 8, **options)

    assert not first.profile.from_cache and second.profile.from_cache
    assert dict(first.cost_graph.nodes(data="compute_time")) == dict(
        second.cost_graph.nodes(data="compute_time")
    )


@pytest.mark.parametrize("placer", ["auto", "celeritas"])
def test_placing_again_from_the_cached_profile_gives_the_same_placement(load_saved_graph, tmp_path, placer):
    from tfplace import place

    graph, entry, _ = load_saved_graph("cnn")
    options = dict(profile_batch_sizes=[1, 2], cache_dir=tmp_path, warmup_steps=1, traced_steps=2)
    devices = DeviceSet.parse("/device:CPU:0-2", "300KB")  # tight or not, the same call decides alike
    measured, cached = (
        place(
            graph, entry["train_op"], feed_function(entry), devices, batch_size=64, placer=placer, **options
        )
        for _ in range(2)
    )

    assert cached.assignment == measured.assignment


def test_estimated_costs_cover_the_step_with_flops_at_the_target_batch(load_saved_graph, tmp_path):
    from tfplace import estimate_costs

    graph, entry, _ = load_saved_graph("cnn")
    small = estimate_costs(
        graph, entry["train_op"], feed_function(entry), 8, profile_batch_sizes=[1, 2], cache_dir=tmp_path
    )
    large = estimate_costs(
        graph, entry["train_op"], feed_function(entry), 64, profile_batch_sizes=[1, 2], cache_dir=tmp_path
    )

    assert set(small.cost_graph) == small.imported.step_ops
    convolution = next(op for op, t in small.cost_graph.nodes(data="op_type") if t == "Conv2D")
    assert (
        large.cost_graph.nodes[convolution]["flops"] == 8 * small.cost_graph.nodes[convolution]["flops"] > 0
    )
    assert (
        large.cost_graph.nodes[convolution]["output_sizes"][0]
        == 8 * small.cost_graph.nodes[convolution]["output_sizes"][0]
    )
    small.cost_graph.validate()
    untraced = small.cost_graph.graph[UNTRACED_STEP]  # on the profiler's own worker, and here
    assert set(untraced) == {"loopback", "virtual"} and min(untraced.values()) > 0


def test_the_step_keeps_the_graphs_op_order_when_most_ops_are_outside_it(tmp_path):
    import tensorflow as tf

    from tfplace import estimate_costs

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 3), name="x")
        weights = tf.compat.v1.get_variable("w", (3, 2))
        loss = tf.reduce_sum(tf.matmul(x, weights))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        for i in range(100):  # not in the step: the step is less than half of the graph
            tf.constant(float(i), name=f"unused_{i}")

    def feed_fn(batch_size):
        return {"x:0": np.ones((batch_size, 3), np.float32)}

    estimate = estimate_costs(graph, train, feed_fn, 4, profile_batch_sizes=[4], cache_dir=tmp_path)
    step = estimate.imported.step_ops
    assert 2 * len(step) < len(graph.get_operations())
    assert list(estimate.cost_graph) == [op.name for op in graph.get_operations() if op.name in step]


def test_predicting_another_batch_from_one_profiled_batch_size_is_refused(load_saved_graph, tmp_path):
    from tfplace import estimate_costs

    graph, entry, _ = load_saved_graph("cnn")
    with pytest.raises(ValueError, match="two or more profiled batch sizes"):
        estimate_costs(
            graph, entry["train_op"], feed_function(entry), 8, profile_batch_sizes=[2], cache_dir=tmp_path
        )


def test_ops_outside_the_step_follow_their_group_then_their_inputs():
    structure = CostGraph()
    structure.add_op("var", colocation_group="g")
    structure.add_op("read", colocation_group="g")
    structure.add_op("init_value")
    structure.add_op("assign", colocation_group="g")
    structure.add_op("summary", device_kinds=("CPU",))
    structure.add_op("after_summary")
    for src, dst in [
        ("var", "read"),
        ("init_value", "assign"),
        ("var", "assign"),
        ("read", "summary"),
        ("summary", "after_summary"),
    ]:
        structure.add_dependency(src, dst, slots=(0,))
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")

    result = place_remaining_ops(structure, {"var": "/device:GPU:1", "read": "/device:GPU:1"}, devices)

    assert result["assign"] == "/device:GPU:1"  # its group
    assert result["init_value"] == "/device:GPU:0"  # no group, no placed input: the first device
    assert DeviceName.parse(result["summary"]).kind == "CPU"  # no GPU kernel: the host's CPU
    assert result["after_summary"] == result["summary"]  # its input's device


def test_device_names_need_memory_and_a_device_set_needs_none():
    with pytest.raises(DeviceError, match="memory"):
        as_device_set("/device:GPU:0-1", None)
    devices = as_device_set("/device:GPU:0-1", "16GB")
    assert len(devices) == 2 and as_device_set(devices, None) is devices
    with pytest.raises(DeviceError, match="inside the DeviceSet"):
        as_device_set(devices, "16GB")


@pytest.mark.parametrize("fetch", ["trian_op", "loss:1x"])
def test_a_misspelt_fetch_in_python_gets_the_closest_op_like_on_the_command_line(
    load_saved_graph, tmp_path, fetch
):
    from tfplace import place

    graph, entry, _ = load_saved_graph("cnn")
    expected = "train_op" if fetch == "trian_op" else "loss"

    with pytest.raises(ValueError, match=rf"did you mean '{expected}'\?"):
        place(graph, fetch, feed_function(entry), "/device:CPU:0-1", memory="1GB", batch_size=8,
              cache_dir=tmp_path, progress=False)  # fmt: skip


@pytest.mark.tensorflow
def test_gpus_placed_with_unconverted_op_times_warn_in_python_as_on_the_command_line(caplog):
    from tfplace.api import place_costs
    from tfplace.core.synthetic import layered_training_graph

    graph = layered_training_graph(40, seed=1)
    gpus = DeviceSet.parse("/device:GPU:0-1", "1GB")

    measured = place_costs(graph, gpus, placer="m_etf", progress=False)
    converted = place_costs(graph, gpus, placer="m_etf", target_device="V100-32GB", progress=False)
    cpus = place_costs(graph, DeviceSet.parse("/device:CPU:0-1", "1GB"), placer="m_etf", progress=False)

    (warning,) = [w for w in measured.warnings if "target_device" in w]
    assert warning.startswith("the op times are those measured where the graph was profiled")
    assert "V100-32GB" in warning and f"warning: {warning}" in measured.summary()
    assert not [w for w in converted.warnings + cpus.warnings if "target_device" in w]


def test_running_a_gpu_placement_on_a_machine_without_gpus_is_a_value_error_naming_the_devices(
    load_saved_graph,
):
    import tensorflow as tf

    from tfplace.core.placement import Placement
    from tfplace.runner import run_placement

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    graph, entry, _ = load_saved_graph("cnn")
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    ops = [op.name for op in graph.get_operations()]
    placement = Placement(dict.fromkeys(ops, "/device:GPU:1"), devices)

    with pytest.raises(ValueError, match=r"uses GPU devices but this machine has none \(/device:GPU:1\)"):
        run_placement(graph, placement, entry["train_op"], feed_function(entry), batch_size=4, steps=1)
