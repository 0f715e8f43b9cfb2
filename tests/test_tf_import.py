"""Importing TensorFlow graphs: structure, co-location groups, device kinds, loops, step ops.

Several tests also check the TensorFlow behaviour a rule of :mod:`tfplace.tf_graph.constraints`
models, so that a TensorFlow upgrade that changes it fails here.
"""

import networkx as nx
import pytest

from tfplace.tf_graph import constraints
from tfplace.tf_graph.constraints import ConstraintError, group_device_kinds
from tfplace.tf_graph.importer import GraphImportError, import_graph
from tfplace.tf_graph.session import executed_devices, run_steps, virtual_cpu_config

pytestmark = pytest.mark.tensorflow


def _graph(build):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        build(tf)
    return graph


def _group(imported, op):
    return imported.cost_graph.nodes[op]["colocation_group"]


def _ran_on(graph, fetches, ops):
    """Index of the virtual CPU each op of ``ops`` ran on in one traced step on 4 CPUs."""
    from tfplace.core.devices import DeviceName

    config = virtual_cpu_config(4)
    config.graph_options.rewrite_options.disable_meta_optimizer = True  # no op rewritten away
    initializers = [op for op in graph.get_operations() if op.type == "AssignVariableOp"]
    metadata = run_steps(graph, fetches, None, 1, config, trace_steps=1, init_op=initializers).run_metadata[0]
    devices = executed_devices(metadata, {op.name for op in graph.get_operations()})
    return {op: DeviceName.parse(devices[op]).index for op in ops}


def test_data_edges_carry_the_producer_slots_and_bytes_and_control_edges_are_marked():
    def build(tf):
        x = tf.constant(1.0, shape=[2, 6], name="x")
        left, right = tf.split(x, 2, axis=1, name="split")
        with tf.control_dependencies([left.op]):
            tf.identity(right, name="use_right")
        tf.add(left, right, name="both")

    graph = import_graph(_graph(build)).cost_graph
    assert graph.nodes["split"]["output_sizes"] == (2 * 3 * 4, 2 * 3 * 4)
    assert graph.nodes["split"]["op_type"] == "Split"
    assert graph.edges["split", "use_right"]["slots"] == (1,)
    assert graph.edges["split", "use_right"]["bytes"] == 24
    assert not graph.edges["split", "use_right"]["control"]
    assert graph.edges["split", "both"]["slots"] == (0, 1)
    assert graph.edges["split", "both"]["bytes"] == 48
    assert graph.edges["x", "split"]["slots"] == (0,)
    assert all(t == 0 for _, t in graph.nodes(data="compute_time"))


def test_a_control_dependency_becomes_a_control_edge_without_bytes():
    def build(tf):
        a = tf.constant(1.0, shape=[4], name="a")
        with tf.control_dependencies([a]):
            tf.constant(2.0, name="b")

    edge = import_graph(_graph(build)).cost_graph.edges["a", "b"]
    assert edge["control"] and edge["bytes"] == 0 and edge["slots"] == ()


def test_output_sizes_are_zero_where_the_static_shape_is_not_fully_known():
    def build(tf):
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.reduce_sum(x, axis=0, name="total")

    graph = import_graph(_graph(build)).cost_graph
    assert graph.nodes["x"]["output_sizes"] == (0,)
    assert graph.nodes["total"]["output_sizes"] == (3 * 4,)


def test_class_groups_merge_transitively_and_include_the_named_op():
    def build(tf):
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        with tf.compat.v1.colocate_with(a):
            c = tf.identity(a, name="c")
        with tf.compat.v1.colocate_with(c):
            tf.identity(c, name="d")  # loc:@c only, yet in a's group
        with tf.compat.v1.colocate_with(a), tf.compat.v1.colocate_with(b):
            tf.add(a, b, name="joins_a_and_b")  # in two groups: merges them
        tf.identity(a, name="free")

    imported = import_graph(_graph(build))
    assert {_group(imported, op) for op in ("a", "b", "c", "d", "joins_a_and_b")} == {"a"}
    assert _group(imported, "free") is None


def test_a_class_attribute_naming_a_missing_op_is_an_error_naming_both():
    graph_def = _graph(lambda tf: tf.identity(tf.constant(1.0, name="a"), name="b")).as_graph_def()
    node = next(n for n in graph_def.node if n.name == "b")
    node.attr["_class"].list.s.append(b"loc:@missing")
    with pytest.raises(GraphImportError, match=r"'b'.*'missing'|missing.*\bb\b"):
        import_graph(graph_def)


def test_resource_consumers_join_their_variable_because_tensorflow_runs_them_there():
    def build(tf):
        from tensorflow.python.ops import gen_resource_variable_ops as ops

        with tf.device("/device:CPU:0"):
            handle = ops.var_handle_op(dtype=tf.float32, shape=[2], shared_name="v", name="v")
            ops.assign_variable_op(handle, tf.constant([1.0, 2.0]), name="init")
        with tf.device("/device:CPU:1"):
            ops.read_variable_op(handle, tf.float32, name="read")
            through = tf.identity(handle, name="handle_copy")
        with tf.device("/device:CPU:2"):
            ops.read_variable_op(through, tf.float32, name="read_through_copy")
        with tf.device("/device:CPU:3"):
            tf.identity(tf.constant(1.0), name="unrelated")

    graph = _graph(build)
    imported = import_graph(graph)
    ops = ("v", "init", "read", "handle_copy", "read_through_copy")
    assert {_group(imported, op) for op in ops} == {_group(imported, "v")} != {None}
    assert _group(imported, "unrelated") is None
    assert imported.requested_devices["read"] == "/device:CPU:1"
    # allow_soft_placement=False, and still: every reader ran on the variable's CPU:0
    ran = _ran_on(graph, ["read:0", "read_through_copy:0", "unrelated:0"], (*ops[2:], "unrelated"))
    assert ran == {"read": 0, "handle_copy": 0, "read_through_copy": 0, "unrelated": 3}


def test_reference_variable_edges_colocate_but_reading_a_reference_does_not():
    def build(tf):
        counter = tf.compat.v1.Variable(tf.zeros([3]), use_resource=False, name="counter")
        tf.compat.v1.assign_add(counter, tf.ones([3]), name="bump")
        tf.add(counter, 1.0, name="reads_value")

    imported = import_graph(_graph(build))
    assert _group(imported, "bump") == _group(imported, "counter") is not None
    assert _group(imported, "reads_value") is None


def test_legacy_loop_ops_join_the_op_tensorflow_moves_them_to():
    def build(tf):
        k = tf.constant(2.0, name="k")

        def body(i):
            b = tf.add(i, k, name="B")  # first consumer of k's Enter
            a = tf.multiply(i, k, name="A")
            return a + 0.0 * b

        tf.compat.v1.while_loop(lambda i: i < 20.0, body, [tf.constant(1.0, name="x")], name="w")

    import tensorflow as tf

    tf.compat.v1.disable_control_flow_v2()
    try:
        graph = _graph(build)
    finally:
        tf.compat.v1.enable_control_flow_v2()
    imported = import_graph(graph)
    partners = {
        "w/Enter": "w/Merge",
        "w/NextIteration": "w/Merge",
        "w/Switch": "w/Merge",
        "w/Exit": "w/Merge",
        "w/B/Enter": "w/B",
    }
    for op, partner in partners.items():
        assert _group(imported, op) == _group(imported, partner) is not None, op
    assert _group(imported, "w/A") != _group(imported, "w/B")
    # TensorFlow's side: each op on its own CPU, (Switch, Merge) kept together as their _class says
    devices = {"w/Merge": 1, "w/Switch": 1, "w/Enter": 2, "w/NextIteration": 3, "w/Exit": 0}
    devices |= {"w/B": 2, "w/A": 3, "w/B/Enter": 0}
    for op in graph.get_operations():
        op._set_device(f"/device:CPU:{devices.get(op.name, 0)}")
    ran = _ran_on(graph, "w/Exit:0", partners)
    assert ran == {"w/Enter": 1, "w/NextIteration": 1, "w/Switch": 1, "w/Exit": 1, "w/B/Enter": 2}


def test_string_ops_and_their_groups_run_on_cpus_only():
    def build(tf):
        x = tf.constant([1.0, 2.0], name="x")
        text = tf.strings.as_string(x, name="text")
        tf.identity(text, name="text_copy")
        with tf.compat.v1.colocate_with(x):
            tf.square(x, name="square")
        tf.matmul(tf.ones([2, 2]), tf.ones([2, 2]), name="matmul")

    graph = import_graph(_graph(build)).cost_graph
    assert graph.nodes["text"]["device_kinds"] == ("CPU",)
    assert graph.nodes["text_copy"]["device_kinds"] == ("CPU",)  # string input
    assert graph.nodes["matmul"]["device_kinds"] == ("CPU", "GPU")
    assert graph.nodes["square"]["device_kinds"] == graph.nodes["x"]["device_kinds"]


def test_kernel_registry_decides_by_type_attributes_and_default_kernels_mean_any_device():
    def build(tf):
        tf.matmul(tf.ones([2, 2], tf.int32), tf.ones([2, 2], tf.int32), name="int_matmul")
        tf.raw_ops.NoOp(name="noop")
        tf.random.shuffle(tf.ones([3]), name="shuffle")

    graph = import_graph(_graph(build)).cost_graph
    assert graph.nodes["int_matmul"]["device_kinds"] == ("CPU",)  # no int32 MatMul on GPUs
    assert graph.nodes["noop"]["device_kinds"] is None
    assert graph.nodes["shuffle"]["device_kinds"] == ("CPU",)


def test_without_gpu_kernels_in_the_registry_the_cpu_only_table_decides(monkeypatch):
    monkeypatch.setattr(constraints, "_registry_knows_gpus", lambda: False)

    def build(tf):
        tf.random.shuffle(tf.ones([3]), name="shuffle")
        tf.matmul(tf.ones([2, 2], tf.int32), tf.ones([2, 2], tf.int32), name="int_matmul")

    graph = import_graph(_graph(build)).cost_graph
    assert graph.nodes["shuffle"]["device_kinds"] == ("CPU",)
    assert graph.nodes["int_matmul"]["device_kinds"] is None


def test_cpu_only_table_agrees_with_the_kernel_registry():
    for op_type in constraints.CPU_ONLY_OP_TYPES:
        assert constraints.kernel_device_types(op_type, {}) == {"CPU"}, op_type


def test_a_group_no_device_type_can_run_is_an_error_naming_its_ops():
    kinds = {"a": ("CPU",), "b": ("GPU",), "c": None, "d": ("GPU",)}
    with pytest.raises(ConstraintError, match=r"a \('CPU',\), b \('GPU',\)"):
        group_device_kinds(kinds, {"a": "a", "b": "a", "c": "a"})
    narrowed = group_device_kinds({"a": ("CPU", "GPU"), "b": ("GPU",), "c": None}, {"a": "a", "b": "a"})
    assert narrowed == {"a": ("GPU",), "b": ("GPU",), "c": None}


def test_legacy_while_loop_imports_as_a_dag_with_its_back_edges_recorded(load_saved_graph):
    graph, entry, _ = load_saved_graph("lstm_v1")
    imported = import_graph(graph, [entry["train_op"], entry["loss"]])
    ops = {op.name: op.type for op in graph.get_operations()}
    assert imported.broken_back_edges
    assert all(ops[src] == "NextIteration" and ops[dst] == "Merge" for src, dst in imported.broken_back_edges)
    loops = sum(1 for t in ops.values() if t == "NextIteration")
    assert len(imported.broken_back_edges) == loops
    assert nx.is_directed_acyclic_graph(imported.cost_graph)
    imported.cost_graph.validate()
    assert not any(imported.cost_graph.has_edge(*edge) for edge in imported.broken_back_edges)


def test_functional_while_stays_one_op_without_back_edges(load_saved_graph):
    graph, entry, _ = load_saved_graph("lstm_v2")
    imported = import_graph(graph, entry["train_op"])
    assert imported.cost_graph.nodes["rnn"]["op_type"] == "While"
    assert imported.broken_back_edges == ()
    # it reads the LSTM weights, so it is kept with them (TensorFlow runs those reads there)
    assert _group(imported, "rnn") == _group(imported, "lstm/kernel") == _group(imported, "lstm/bias")


def test_a_cycle_outside_loop_frames_is_an_error_naming_its_ops():
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    graph_def = text_format.Parse(
        """
        node { name: "x" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
               attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }
        node { name: "a" op: "AddV2" input: "x" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
        node { name: "b" op: "Identity" input: "a" attr { key: "T" value { type: DT_FLOAT } } }
        """,
        graph_pb2.GraphDef(),
    )
    with pytest.raises(GraphImportError, match=r"cycle.*(a -> b -> a|b -> a -> b)"):
        import_graph(graph_def)


def test_a_cycle_made_in_a_tf_graph_is_an_error_naming_its_ops():
    def build(tf):
        x = tf.constant(1.0, name="x")
        a = tf.add(x, x, name="a")
        b = tf.identity(a, name="b")
        a.op._update_input(1, b)

    with pytest.raises(GraphImportError, match=r"cycle.*(a -> b -> a|b -> a -> b)"):
        import_graph(_graph(build))


def test_step_ops_are_what_the_fetches_need_and_the_rest_is_still_imported(load_saved_graph):
    graph, entry, _ = load_saved_graph("cnn")
    imported = import_graph(graph, [entry["train_op"], entry["loss"]])
    every_op = {op.name for op in graph.get_operations()}
    assert set(imported.cost_graph) == every_op
    assert {"images", "labels", "loss", "train_op", "conv1/Conv2D", "conv1/kernel"} <= imported.step_ops
    assert "conv1/kernel/Assign" not in imported.step_ops  # initializers are placed, not run
    assert not any("Initializer" in op for op in imported.step_ops)
    assert imported.fetches == ("train_op", "loss")
    assert import_graph(graph).step_ops == every_op


def test_an_unknown_fetch_is_an_error_naming_it(load_saved_graph):
    graph, _, _ = load_saved_graph("colocation")
    with pytest.raises(GraphImportError, match="'nope'"):
        import_graph(graph, ["total_loss:0", "nope:0"])


def test_a_graph_def_a_meta_graph_and_their_files_import_alike(load_saved_graph, tmp_path):
    import tensorflow as tf

    graph, _, _ = load_saved_graph("colocation")
    graph_def = graph.as_graph_def()
    (tmp_path / "g.pb").write_bytes(graph_def.SerializeToString())
    tf.io.write_graph(graph_def, str(tmp_path), "g.pbtxt", as_text=True)
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph()

    def shape(source):
        cost_graph = import_graph(source).cost_graph
        return dict(cost_graph.nodes(data=True)), {(s, d): e for s, d, e in cost_graph.edges(data=True)}

    expected = shape(graph)
    for source in (graph_def, meta, tmp_path / "g.pb", str(tmp_path / "g.pbtxt")):
        assert shape(source) == expected, source
    assert import_graph(graph_def).graph_def is graph_def


def test_an_unreadable_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "broken.pb"
    path.write_bytes(b"\xff\xfenot a graph")
    with pytest.raises(GraphImportError, match=r"broken\.pb"):
        import_graph(path)
    with pytest.raises(GraphImportError, match=r"expected a \.pb"):
        import_graph(tmp_path / "graph.json")
