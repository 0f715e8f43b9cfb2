"""tfplace.runner: running a placed graph on virtual CPUs and on loopback worker processes."""

import json
import os

import numpy as np
import pytest

from helpers import contiguous_split
from tfplace.core.devices import DeviceName, DeviceSet
from tfplace.core.placement import Placement
from tfplace.runner import run_placement, session_target_kind, simulated_trace_path


def fixed_feed(feeds):
    def feed_fn(batch_size):
        assert batch_size == 4
        return feeds

    return feed_fn


def single_device_losses(graph, entry, feeds, steps):
    from tfplace.tf_graph.session import run_steps, virtual_cpu_config

    fetches = {"loss": entry["loss"], "train": entry["train_op"]}
    single = run_steps(graph, fetches, lambda: feeds, steps, virtual_cpu_config(1))
    return [v["loss"] for v in single.values]


def cluster_children():
    """Process ids of this process' children running a loopback worker."""
    children = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        if parent == os.getpid() and b"tfplace.tf_graph.cluster" in command:
            children.append(int(pid))
    return children


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        (["/device:CPU:0", "/device:CPU:1"], "in_process"),
        (["/device:GPU:0", "/device:CPU:0"], "in_process"),
        (["/job:worker/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"], "local_cluster"),
    ],
)
def test_local_devices_run_in_process_and_worker_cpus_on_loopback_workers(names, kind):
    placement = Placement({f"op{i}": name for i, name in enumerate(names)}, DeviceSet.parse(names, "1GB"))
    assert session_target_kind(placement) == kind


def test_devices_tfplace_cannot_start_need_a_cluster_and_the_error_names_them():
    names = ["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"]
    placement = Placement({"a": names[0], "b": names[1]}, DeviceSet.parse(names, "1GB"))
    with pytest.raises(ValueError, match=r"task:1/device:GPU:0.*pass cluster="):
        session_target_kind(placement)


def test_the_simulated_trace_goes_beside_the_real_one():
    assert simulated_trace_path("out/step.json").as_posix() == "out/step.simulated.json"
    assert simulated_trace_path("trace").as_posix() == "trace.simulated.json"


@pytest.mark.tensorflow
def test_a_run_on_virtual_cpus_drops_the_warm_up_traces_a_step_and_trains_like_one_device(
    load_saved_graph, tmp_path
):
    from tfplace.core.costgraph import CostGraph
    from tfplace.tf_graph.importer import import_graph

    graph, entry, feeds = load_saved_graph("cnn")
    imported = import_graph(graph, [entry["train_op"], entry["loss"]])
    placement = contiguous_split(imported.cost_graph, ["/device:CPU:0", "/device:CPU:1"])
    placement.cost_graph = CostGraph(imported.cost_graph.subgraph(imported.step_ops))
    devices_before = {op.name: op.device for op in graph.get_operations()}

    report = run_placement(
        graph,
        placement,
        {"loss": entry["loss"], "train": entry["train_op"]},
        fixed_feed(feeds),
        batch_size=4,
        steps=3,
        warmup_steps=2,
        trace_path=tmp_path / "step.json",
    )

    assert len(report.warmup_seconds) == 2 and len(report.step_seconds) == 3
    assert len(report.traced_step_seconds) == len(report.run_metadata) == 1
    assert report.mean_step_time == pytest.approx(sum(report.step_seconds) / 3)
    assert report.mismatches == [] and report.target == ""
    assert {op.name: op.device for op in graph.get_operations()} == devices_before  # a copy was placed
    real = json.loads((tmp_path / "step.json").read_text())
    ran_on = {event["args"]["name"] for event in real["traceEvents"] if event.get("name") == "process_name"}
    assert any("CPU:1" in name for name in ran_on) and any("CPU:0" in name for name in ran_on)
    simulated = json.loads((tmp_path / "step.simulated.json").read_text())
    assert simulated["otherData"]["generator"] == "tfplace.simulator"
    assert report.simulated_trace_path == str(tmp_path / "step.simulated.json")
    np.testing.assert_allclose(
        [v["loss"] for v in report.values], single_device_losses(graph, entry, feeds, 6), rtol=1e-5
    )


@pytest.mark.tensorflow
@pytest.mark.slow
def test_a_placement_over_two_loopback_workers_runs_where_placed_trains_like_one_device_and_stops_them(
    load_saved_graph,
):
    from tfplace.tf_graph.importer import import_graph
    from tfplace.tf_graph.session import executed_devices

    graph, entry, feeds = load_saved_graph("cnn")
    workers = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
    placement = contiguous_split(import_graph(graph, [entry["train_op"], entry["loss"]]).cost_graph, workers)

    report = run_placement(
        graph,
        placement,
        {"loss": entry["loss"], "train": entry["train_op"]},
        fixed_feed(feeds),
        batch_size=4,
        steps=2,
        warmup_steps=1,
    )

    assert report.target.startswith("grpc://localhost:")
    assert report.mismatches == []
    ran = executed_devices(report.run_metadata[0], set(placement.assignment))
    assert {DeviceName.parse(device).task for device in ran.values()} == {0, 1}
    np.testing.assert_allclose(
        [v["loss"] for v in report.values], single_device_losses(graph, entry, feeds, 4), rtol=1e-5
    )
    assert cluster_children() == []


@pytest.mark.tensorflow
@pytest.mark.slow
def test_a_step_that_fails_on_loopback_workers_leaves_no_worker_behind():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        with tf.device("/job:worker/task:1/device:CPU:0"):
            checked = tf.debugging.check_numerics(tf.math.log(x), "log of a negative number")
    workers = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
    placement = Placement(
        {op.name: workers[0] if op.name == "x" else workers[1] for op in graph.get_operations()},
        DeviceSet.parse(workers, "1GB"),
    )

    with pytest.raises(tf.errors.InvalidArgumentError, match="log of a negative number"):
        run_placement(graph, placement, checked, lambda b: {"x:0": -np.ones(b, np.float32)}, batch_size=2)
    assert cluster_children() == []
