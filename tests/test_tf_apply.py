"""Applying placements to TensorFlow graphs and running them on virtual CPUs.

The placements here come from a tiny round-robin placer (whole co-location groups in turn on each
device, in a topological order), which splits every graph over all its devices.
"""

import networkx as nx
import numpy as np
import pytest

from helpers import variable_values
from tfplace.core.devices import DeviceName, DeviceSet
from tfplace.core.placement import Placement, PlacementError
from tfplace.tf_graph.apply import apply_placement, without_devices
from tfplace.tf_graph.constraints import colocation_groups
from tfplace.tf_graph.importer import import_graph
from tfplace.tf_graph.session import (
    device_mismatches,
    executed_devices,
    run_steps,
    virtual_cpu_config,
)

pytestmark = pytest.mark.tensorflow


def round_robin(cost_graph, count):
    """Each co-location group (or ungrouped op) on the next of ``count`` CPUs, in topological order."""
    names = [f"/device:CPU:{i}" for i in range(count)]
    unit_device = {}
    assignment = {}
    for op in nx.topological_sort(cost_graph):
        unit = cost_graph.nodes[op]["colocation_group"] or op
        assignment[op] = unit_device.setdefault(unit, names[len(unit_device) % count])
    return Placement(assignment, DeviceSet.parse(names, "1GB"), placer="round_robin")


def placed_graph(load_saved_graph, name, count):
    graph, entry, feeds = load_saved_graph(name)
    imported = import_graph(graph, [entry["train_op"], entry["loss"]])
    return graph, entry, feeds, imported, round_robin(imported.cost_graph, count)


@pytest.mark.parametrize(("name", "count"), [("cnn", 2), ("lstm_v1", 4), ("lstm_v2", 3), ("colocation", 3)])
def test_a_group_by_group_split_runs_where_placed_and_trains_like_one_device(load_saved_graph, name, count):
    graph, entry, feeds, imported, placement = placed_graph(load_saved_graph, name, count)
    fetches = {"loss": entry["loss"], "train": entry["train_op"]}
    weights = variable_values(graph)
    single = run_steps(graph, fetches, lambda: feeds, 2, virtual_cpu_config(1), final_fetches=weights)

    assert apply_placement(placement, graph) is graph
    placed = run_steps(
        graph, fetches, lambda: feeds, 2, virtual_cpu_config(count), trace_steps=1, final_fetches=weights
    )

    metadata = placed.run_metadata[0]
    assert device_mismatches(metadata, placement) == []
    ran = executed_devices(metadata, set(imported.cost_graph))
    assert {DeviceName.parse(d).index for d in ran.values()} == set(range(count))
    assert set(ran) <= imported.step_ops
    if name == "lstm_v2":
        assert {"rnn", "gradients/rnn_grad/rnn_grad"} <= set(ran)  # lowered While nodes mapped back
    np.testing.assert_allclose(
        [v["loss"] for v in placed.values], [v["loss"] for v in single.values], rtol=1e-5
    )
    assert single.values[0]["loss"] != single.values[1]["loss"]  # the first step trained
    for after_placed, after_single in zip(placed.final_values, single.final_values, strict=True):
        np.testing.assert_allclose(after_placed, after_single, rtol=1e-5, atol=1e-7)


def test_placing_a_graph_def_changes_only_device_fields_of_a_copy(load_saved_graph):
    graph, _, _, _, placement = placed_graph(load_saved_graph, "cnn", 3)
    graph_def = graph.as_graph_def()
    original = graph_def.SerializeToString(deterministic=True)

    placed = apply_placement(placement, graph_def)

    assert graph_def.SerializeToString(deterministic=True) == original
    assert [n.name for n in placed.node] == [n.name for n in graph_def.node]
    for before, after in zip(graph_def.node, placed.node, strict=True):
        assert after.device == placement.assignment[after.name]
        assert (before.op, list(before.input), dict(before.attr)) == (
            after.op,
            list(after.input),
            dict(after.attr),
        )
        assert without_devices(after) == without_devices(before)
    assert placed.library == graph_def.library and placed.versions == graph_def.versions
    assert without_devices(placed) == without_devices(graph_def)


def test_placing_a_meta_graph_keeps_its_collections_and_signatures(load_saved_graph):
    import tensorflow as tf

    graph, _, _, _, placement = placed_graph(load_saved_graph, "colocation", 2)
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph()

    placed = apply_placement(placement, meta)

    assert placed is not meta and not any(node.device for node in meta.graph_def.node)
    assert {node.name: node.device for node in placed.graph_def.node} == placement.assignment
    assert without_devices(placed) == without_devices(meta)


def test_devices_are_written_as_the_placement_spells_them(load_saved_graph):
    graph, _, _, imported, _ = placed_graph(load_saved_graph, "colocation", 2)
    spelled = "/job:localhost/replica:0/task:0/device:CPU:1"
    placement = Placement(dict.fromkeys(imported.cost_graph, spelled), DeviceSet.parse([spelled], "1GB"))
    apply_placement(placement, graph)
    assert {op.device for op in graph.get_operations()} == {spelled}


def test_ops_missing_from_the_placement_are_named_and_nothing_is_placed(load_saved_graph):
    graph, _, _, _, placement = placed_graph(load_saved_graph, "colocation", 2)
    for op in ("second", "weights"):
        del placement.assignment[op]
    with pytest.raises(PlacementError, match=r"2 ops: 'second', 'weights'|2 ops: 'weights', 'second'"):
        apply_placement(placement, graph)
    assert not any(op.device for op in graph.get_operations())


def test_a_split_colocation_group_is_named_and_nothing_is_placed(load_saved_graph):
    graph, _, _, imported, placement = placed_graph(load_saved_graph, "colocation", 2)
    group = imported.cost_graph.nodes["third"]["colocation_group"]
    assert imported.cost_graph.nodes["first"]["colocation_group"] == group
    for op, attrs in imported.cost_graph.nodes(data=True):
        if attrs["colocation_group"] == group:
            placement.assignment[op] = "/device:CPU:1" if op == "third" else "/device:CPU:0"
    with pytest.raises(PlacementError, match=r"splits a co-location group: .*'third' on .*CPU:1"):
        apply_placement(placement, graph)
    assert not any(op.device for op in graph.get_operations())
    with pytest.raises(PlacementError, match="'first'"):
        apply_placement(placement, graph.as_graph_def())


def test_device_names_of_one_device_spelled_differently_do_not_split_a_group(load_saved_graph):
    graph, _, _, _, placement = placed_graph(load_saved_graph, "colocation", 2)
    same = placement.assignment["first"]
    placement.assignment["third"] = DeviceName.parse(same).full_name
    apply_placement(placement, graph)
    assert graph.get_operation_by_name("third").device == DeviceName.parse(same).full_name


def _linear_model():
    """A linear model trained by explicit assignments: variables (whose initializers TensorFlow
    builds with a cleared device scope), a ``colocate_with`` chain, ``tf.gradients``."""
    import tensorflow as tf

    inputs = tf.compat.v1.placeholder(tf.float32, [None, 4], name="inputs")
    weights = tf.compat.v1.get_variable("weights", [4, 3])
    bias = tf.compat.v1.get_variable("bias", [3], initializer=tf.compat.v1.zeros_initializer())
    hidden = tf.square(inputs, name="hidden")
    with tf.compat.v1.colocate_with(hidden):
        scaled = tf.multiply(hidden, 2.0, name="scaled")
    loss = tf.reduce_mean(tf.square(tf.matmul(scaled, weights) + bias), name="loss")
    for variable, gradient in zip((weights, bias), tf.gradients(loss, [weights, bias]), strict=True):
        variable.assign_sub(0.1 * gradient)


def _effective_devices(graph):
    """Each op's device: its own, or else its co-location group's (where TensorFlow will run it)."""
    groups = colocation_groups(graph)
    group_devices = {}
    for op in graph.get_operations():
        if op.device and op.name in groups:
            group_devices.setdefault(groups[op.name], set()).add(DeviceName.parse(op.device))
    assert all(len(devices) == 1 for devices in group_devices.values())
    return {
        op.name: DeviceName.parse(op.device) if op.device else next(iter(group_devices[groups[op.name]]))
        for op in graph.get_operations()
    }


def test_rebuilding_a_model_under_the_device_function_gives_the_devices_apply_writes():
    import tensorflow as tf

    first = tf.Graph()
    with first.as_default():
        _linear_model()
    placement = round_robin(import_graph(first).cost_graph, 3)
    apply_placement(placement, first)

    rebuilt = tf.Graph()
    with rebuilt.as_default(), tf.compat.v1.device(placement.device_fn()):  # tf.device refuses functions
        _linear_model()

    expected = {op: DeviceName.parse(device) for op, device in placement.assignment.items()}
    assert _effective_devices(rebuilt) == expected
    assert len(set(expected.values())) == 3
    assert any(not op.device for op in rebuilt.get_operations())  # initializers: placed via their group


def test_tf_group_overrides_the_device_function_and_changes_the_graph():
    import tensorflow as tf

    def build():
        x = tf.constant([1.0, 2.0], name="x")
        a = tf.compat.v1.get_variable("a", [2])
        b = tf.compat.v1.get_variable("b", [2])
        tf.group(a.assign(x), b.assign(x), name="step")

    first = tf.Graph()
    with first.as_default():
        build()
    placement = round_robin(import_graph(first).cost_graph, 2)
    assert placement.assignment["a"] != placement.assignment["b"]
    rebuilt = tf.Graph()
    with rebuilt.as_default(), tf.compat.v1.device(placement.device_fn()):
        build()
    # one NoOp per device of the grouped ops, on that device: ops the placement has never seen
    unknown = {op.name for op in rebuilt.get_operations()} - set(placement.assignment)
    assert unknown == {"step/NoOp", "step/NoOp_1"}
    with pytest.raises(PlacementError, match="step/NoOp"):
        apply_placement(placement, rebuilt)


def _variable_and_reader():
    import tensorflow as tf
    from tensorflow.python.ops import gen_resource_variable_ops as ops

    graph = tf.Graph()
    with graph.as_default():
        handle = ops.var_handle_op(dtype=tf.float32, shape=[2], shared_name="v", name="v")
        ops.assign_variable_op(handle, tf.constant([1.0, 2.0], name="value"), name="init")
        ops.read_variable_op(handle, tf.float32, name="read")
    return graph


def test_device_mismatches_name_an_op_tensorflow_ran_elsewhere():
    graph = _variable_and_reader()
    assignment = {op.name: "/device:CPU:0" for op in graph.get_operations()}
    assignment["read"] = "/device:CPU:1"  # splits the variable's group: apply_placement refuses it
    for op in graph.get_operations():
        op._set_device(assignment[op.name])
    placement = Placement(assignment, DeviceSet.parse("/device:CPU:0-1", "1GB"))

    result = run_steps(graph, "read:0", None, 1, virtual_cpu_config(2), trace_steps=1, init_op="init")

    assert device_mismatches(result.run_metadata[0], placement) == [
        ("read", "/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:0")
    ]
    np.testing.assert_array_equal(result.values[0], [1.0, 2.0])


def test_grappler_remapping_would_move_a_bias_add_onto_its_matmul_device():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        with tf.device("/device:CPU:0"):
            product = tf.matmul(x, tf.ones([8, 8]), name="matmul")
        with tf.device("/device:CPU:1"):
            tf.nn.bias_add(product, tf.ones([8]), name="bias_add")
    assignment = {op.name: op.device or "/device:CPU:0" for op in graph.get_operations()}
    placement = Placement(assignment, DeviceSet.parse("/device:CPU:0-1", "1GB"))
    feeds = {"x:0": np.ones((4, 8), np.float32)}

    def mismatches(config):
        result = run_steps(graph, "bias_add:0", lambda: feeds, 1, config, trace_steps=1)
        return [op for op, _, _ in device_mismatches(result.run_metadata[0], placement)]

    assert mismatches(virtual_cpu_config(2)) == []
    assert mismatches(virtual_cpu_config(2, remapping=True)) == ["bias_add"]


def test_virtual_cpu_config_gives_n_cpus_and_refuses_soft_placement():
    import tensorflow as tf

    config = virtual_cpu_config(3, inter_op_threads=1, intra_op_threads=2)
    assert dict(config.device_count) == {"CPU": 3}
    assert not config.allow_soft_placement
    assert (config.inter_op_parallelism_threads, config.intra_op_parallelism_threads) == (1, 2)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as session:
        names = sorted(DeviceName.parse(d.name).index for d in session.list_devices())
    assert names == [0, 1, 2]
    with pytest.raises(ValueError, match="at least one"):
        virtual_cpu_config(0)


def test_run_steps_traces_the_last_steps_and_reads_final_values_after_them():
    graph = _variable_and_reader()
    result = run_steps(
        graph, "read:0", None, 3, virtual_cpu_config(1), trace_steps=2, init_op="init", final_fetches="read:0"
    )
    assert len(result.values) == 3 and len(result.run_metadata) == 2
    np.testing.assert_array_equal(result.final_values, [1.0, 2.0])
    assert all(md.step_stats.dev_stats for md in result.run_metadata)
    with pytest.raises(ValueError, match="trace_steps"):
        run_steps(graph, "read:0", None, 1, virtual_cpu_config(1), trace_steps=2)
