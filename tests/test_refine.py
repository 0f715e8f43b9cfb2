"""Standard Evaluation step 2: costs measured at the target batch replace the regression's."""

import dataclasses

import pytest

from helpers import feed_function
from tfplace.core.costgraph import UNTRACED_STEP, graph_memory
from tfplace.core.device_model import least_cost_estimate
from tfplace.core.devices import DeviceName, DeviceSet
from tfplace.estimator.profiler import OpCost

pytestmark = [pytest.mark.tensorflow, pytest.mark.profiles]


def traced_step(records):
    """A RunMetadata with one record per ``(op, nanoseconds, output bytes per slot, temporary bytes)``;
    each record's kernel runs for its nanoseconds, its whole node for twice as long."""
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    metadata = RunMetadata()
    device = metadata.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")
    for op, nanos, outputs, temporary in records:
        node = device.node_stats.add(node_name=op, timeline_label=f"{op} = Op()", all_end_rel_nanos=2 * nanos)
        node.op_end_rel_nanos = nanos
        for slot, nbytes in enumerate(outputs):
            node.output.add(slot=slot).tensor_description.allocation_description.allocated_bytes = nbytes
        node.memory_stats.temp_memory_size = temporary
    return metadata


def test_measured_ops_take_the_median_of_the_traced_steps_their_kernels_least_cost_estimate_and_keep_predicted_persistent_memory():
    from tfplace.estimator.refine import measured_costs

    predicted = {
        "conv": OpCost(1e-3, (100, 7), 50, 4000),
        "lowered_while": OpCost(2e-3, (30, 40), 0, 0),
        "not_traced": OpCost(3e-3, (10,), 5, 0),
    }
    steps = [
        traced_step([("conv", 4000, (800,), 60), ("lowered_while/body/_1/add", 1000, (16,), 0)]),
        traced_step([("conv", 5000, (800,), 60), ("lowered_while/body/_1/add", 3000, (16,), 0)]),
        traced_step([("conv", 9000, (800,), 60), ("lowered_while/body/_1/add", 2000, (16,), 0)]),
    ]

    costs, measured = measured_costs(steps, predicted)

    assert measured == {"conv", "lowered_while"}
    conv = dataclasses.replace(costs["conv"], kernel_time=None)
    assert conv == OpCost(5e-6, (800, 7), 60, 4000)  # slot 1 not reported: predicted
    assert costs["conv"].kernel_time == pytest.approx(least_cost_estimate([4e-6, 5e-6, 9e-6]))
    assert costs["lowered_while"].compute_time == pytest.approx(2e-6)
    assert costs["lowered_while"].output_sizes == (30, 40)  # only generated nodes ran: predicted slots
    assert costs["not_traced"] == predicted["not_traced"]


@pytest.mark.slow
def test_refining_on_two_devices_runs_the_target_batch_and_puts_its_costs_in_the_cost_graph(
    load_saved_graph, tmp_path
):
    from tfplace import estimate_costs
    from tfplace.tf_graph.step_stats import collect_op_traces

    graph, entry, _ = load_saved_graph("cnn")
    options = dict(profile_batch_sizes=[1, 2], cache_dir=tmp_path, warmup_steps=1, traced_steps=2)
    predicted = estimate_costs(graph, entry["train_op"], feed_function(entry), 16, **options).cost_graph
    # the predicted step does not fit one device, so DFS-TOPO fills the first and goes on to the second
    devices = DeviceSet.parse("/device:CPU:0-1", int(0.6 * graph_memory(predicted)))

    estimate = estimate_costs(
        graph, entry["train_op"], feed_function(entry), 16, refine_on=devices, **options
    )  # the profile comes from the cache: the same predictions

    refinement = estimate.refinement
    assert estimate.cost_graph is refinement.cost_graph
    assert refinement.measured_ops == set(estimate.cost_graph)
    assert {DeviceName.parse(d).index for d in refinement.placement.assignment.values()} == {0, 1}
    assert refinement.report.mismatches == []
    ops = set(estimate.cost_graph)
    traces = [collect_op_traces(m, ops) for m in refinement.report.run_metadata]
    assert all(trace["images"].output_sizes == (16 * 8 * 8 * 3 * 4,) for trace in traces)  # the target batch
    conv_times = sorted(trace["conv1/Conv2D"].compute_time for trace in traces)
    assert estimate.cost_graph.nodes["conv1/Conv2D"]["compute_time"] == conv_times[len(conv_times) // 2]
    assert estimate.cost_graph.nodes["conv1/Conv2D"]["persistent_bytes"] == (
        estimate.regression.predict(16)["conv1/Conv2D"].persistent_bytes
    )
    assert UNTRACED_STEP in predicted.graph  # step 1's untraced step, timed beside its op times
    assert UNTRACED_STEP not in estimate.cost_graph.graph  # not beside the measured ones


def test_measured_ops_keep_the_aliased_outputs_step_one_found():
    from tfplace.estimator.refine import measured_costs

    predicted = {"x": OpCost(1e-3, (100,), 0, 0), "ident": OpCost(1e-6, (100,), 0, 0, ((0, "x", 0),))}
    costs, _ = measured_costs([traced_step([("ident", 2000, (800,), 0)])], predicted)
    assert costs["ident"].output_sizes == (800,)
    assert costs["ident"].aliased_outputs == ((0, "x", 0),)
