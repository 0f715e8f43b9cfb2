"""Mapping step-stats records to GraphDef ops and summing their costs."""

import numpy as np
import pytest

from tfplace.tf_graph.step_stats import (
    allocation_peaks,
    collect_op_traces,
    op_name_for_node,
    output_shapes,
    recv_tensor_records,
)

# Op names of a graph with a while loop, its gradient loop, a cond, a dynamic_rnn and feeds.
GRAPH_OPS = {
    "x",
    "seq",
    "while",
    "cond",
    "rnn",
    "rnn/while",
    "gradients/while_grad/while_grad",
    "gradients/rnn/while_grad/rnn/while_grad",
    "Reshape",
    "Relu",
    "mul/y",
    "gradients/Mean_grad/Reshape",
}


@pytest.mark.parametrize(
    ("runtime_name", "op"),
    [
        ("while/body/_1/add_0", "while"),
        ("while/body/_261/MatMul/ReadVariableOp", "while"),
        ("while/cond/_260/Less", "while"),
        ("while/enter/_264", "while"),
        ("while/merge/_269", "while"),
        ("while/next_iteration/_36", "while"),
        ("while/LoopCond/_275", "while"),
        ("while/exit/_283", "while"),
        ("while/x_switch/_279", "while"),
        ("while/gradients/while_grad/Placeholder_1_0/accumulator_switch/_281", "while"),
        ("gradients/while_grad/while_grad/merge/_51", "gradients/while_grad/while_grad"),
        ("gradients/while_grad/while_grad/body/_131/gradients/AddN", "gradients/while_grad/while_grad"),
        ("cond/then/_0/mul_0", "cond"),
        ("cond/switch_pred/_298", "cond"),
        ("cond/output/_302", "cond"),
        ("cond/while/Identity_3/_301", "cond"),
    ],
)
def test_runtime_names_of_lowered_control_flow_map_to_the_functional_op(runtime_name, op):
    assert op_name_for_node(runtime_name, GRAPH_OPS) == op


def test_the_longest_op_prefix_wins_so_nested_scopes_map_to_the_inner_loop():
    assert op_name_for_node("rnn/while/body/_1/lstm_cell/MatMul", GRAPH_OPS) == "rnn/while"
    assert (
        op_name_for_node("gradients/rnn/while_grad/rnn/while_grad/enter/_132", GRAPH_OPS)
        == "gradients/rnn/while_grad/rnn/while_grad"
    )


def test_inlined_function_argument_identities_map_to_the_calling_op():
    assert op_name_for_node("Func/rnn/while/body/_1/input/_384", GRAPH_OPS) == "rnn/while"


def test_exact_names_map_to_themselves():
    assert op_name_for_node("Relu", GRAPH_OPS) == "Relu"
    assert op_name_for_node("rnn", GRAPH_OPS) == "rnn"


def test_a_fed_tensor_record_maps_to_the_placeholder():
    assert op_name_for_node("_arg_x_0_1", GRAPH_OPS) == "x"
    assert op_name_for_node("_arg_seq_0_0", GRAPH_OPS) == "seq"


def test_optimizer_copies_of_an_op_map_to_it():
    assert op_name_for_node("mul/y/replicate/_1", GRAPH_OPS) == "mul/y"
    assert (
        op_name_for_node("gradients/Mean_grad/Reshape/_0__cf__0", GRAPH_OPS) == "gradients/Mean_grad/Reshape"
    )


@pytest.mark.parametrize(
    "runtime_name",
    [
        "_SOURCE",
        "_SINK",
        "Reshape/_0",
        "Reshape/_1",
        "_retval_loss_0_0",
        "ConstantFolding/Shape-1",
        "other/op",
    ],
)
def test_runtime_internals_and_partitioner_transfers_map_to_none(runtime_name):
    assert op_name_for_node(runtime_name, GRAPH_OPS) is None


def _node(stats, name, op_type, *, nanos, outputs=(), temp=0, persistent=0, addresses=(), tracked=0):
    """Add a NodeExecStats record; ``outputs`` are (slot, requested, allocated) triples,
    ``addresses`` the buffer addresses of the first outputs and ``tracked`` the bytes the
    allocator saw the node allocate."""
    node = stats.node_stats.add(node_name=name, timeline_label=f"{name} = {op_type}()")
    node.all_end_rel_nanos = nanos
    node.op_start_rel_nanos = 1
    node.op_end_rel_nanos = max(nanos - 1, 1)
    for slot, requested, allocated in outputs:
        output = node.output.add(slot=slot)
        output.tensor_description.allocation_description.requested_bytes = requested
        output.tensor_description.allocation_description.allocated_bytes = allocated
    for output, address in zip(node.output, addresses):
        output.tensor_description.allocation_description.ptr = address
    node.memory_stats.temp_memory_size = temp
    node.memory_stats.persistent_memory_size = persistent
    if tracked:
        node.memory.add(allocator_name="cpu", total_bytes=tracked)
    return node


@pytest.fixture
def run_metadata():
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    return RunMetadata()


@pytest.mark.tensorflow
def test_collect_op_traces_counts_each_records_kernel_and_sums_every_record_of_an_op(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    _node(cpu, "_SOURCE", "NoOp", nanos=500)
    _node(cpu, "while/enter/_1", "Enter", nanos=1000, outputs=[(0, 16, 16)])  # forwards its input
    _node(cpu, "while/body/_2/MatMul", "MatMul", nanos=4000, outputs=[(0, 64, 64)], temp=32, tracked=96)
    _node(cpu, "while/body/_2/MatMul", "MatMul", nanos=5000, outputs=[(0, 64, 64)], temp=32, tracked=96)
    _node(cpu, "Relu", "Relu", nanos=3000, outputs=[(0, 100, 128), (1, 8, 8)], temp=10)
    traces = collect_op_traces(run_metadata, GRAPH_OPS)
    assert set(traces) == {"while", "Relu"}
    loop = traces["while"]
    assert loop.compute_time == pytest.approx(10e-6 - 3 * 2e-9)  # each record's op_start_rel .. op_end_rel
    assert loop.kernel_time == loop.compute_time
    assert loop.node_time == pytest.approx(10e-6)  # each record's all_end_rel
    assert loop.executions == 3
    assert loop.output_sizes == ()
    assert loop.temporary_bytes == 2 * (64 + 32)  # what the allocator saw, not the forwarded input
    relu = traces["Relu"]
    assert relu.output_sizes == (100, 8)  # requested: a BFC allocator's 256-byte rounding is its own
    assert relu.temporary_bytes == 10
    assert relu.device.endswith("device:CPU:0")


@pytest.mark.tensorflow
def test_a_lowered_loops_temporary_memory_is_the_most_its_iterations_held_at_once(run_metadata):
    # two iterations each allocate 96 bytes and free them before the next; a 40-byte buffer the
    # first allocates lives until after the loop (an accumulator read by the gradient loop)
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    first = _node(cpu, "while/body/_2/MatMul", "MatMul", nanos=4000).memory.add(allocator_name="cpu")
    second = _node(cpu, "while/body/_2/MatMul", "MatMul", nanos=5000).memory.add(allocator_name="cpu")
    for memory, changes in (
        (first, [(10, 96), (12, 40), (20, -96), (90, -40)]),
        (second, [(30, 96), (40, -96)]),
    ):
        for micros, nbytes in changes:
            memory.allocation_records.add(alloc_micros=micros, alloc_bytes=nbytes)
            memory.total_bytes += max(nbytes, 0)

    loop = collect_op_traces(run_metadata, GRAPH_OPS)["while"]

    assert loop.temporary_bytes == 96 + 40  # not every iteration's 96 bytes summed (232)


@pytest.mark.tensorflow
def test_a_fed_tensor_is_recorded_as_the_output_slot_it_replaces(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "_arg_Reshape_1_0", "_Arg", nanos=300, outputs=[(0, 48, 0)])
    assert collect_op_traces(run_metadata, GRAPH_OPS)["Reshape"].output_sizes == (0, 48)


@pytest.mark.tensorflow
def test_send_and_recv_records_are_transfers_not_costs_of_an_op(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:1")
    _node(cpu, "Reshape/_1", "_Recv", nanos=9000, outputs=[(0, 400, 0)])
    _node(cpu, "Relu", "_Recv", nanos=9000, outputs=[(0, 400, 0)])
    assert collect_op_traces(run_metadata, GRAPH_OPS) == {}


@pytest.mark.tensorflow
def test_a_constant_value_is_counted_once_not_as_output_and_persistent_memory(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "mul/y", "Const", nanos=300, outputs=[(0, 40, 0)], persistent=40 + 24)
    trace = collect_op_traces(run_metadata, GRAPH_OPS)["mul/y"]
    assert trace.output_sizes == (40,)
    assert trace.persistent_bytes == 24


@pytest.mark.tensorflow
def test_gpu_kernel_time_from_stream_all_replaces_the_launch_time(run_metadata):
    gpu = "/job:localhost/replica:0/task:0/device:GPU:0"
    host = run_metadata.step_stats.dev_stats.add(device=gpu)
    _node(host, "Relu", "Relu", nanos=2000, outputs=[(0, 100, 128)])
    _node(host, "Reshape", "Reshape", nanos=1500, outputs=[(0, 100, 128)])
    _node(run_metadata.step_stats.dev_stats.add(device=f"{gpu}/stream:all"), "Relu", "Relu", nanos=7000)
    _node(run_metadata.step_stats.dev_stats.add(device=f"{gpu}/stream:12"), "Relu", "Relu", nanos=7000)
    traces = collect_op_traces(run_metadata, GRAPH_OPS)
    assert traces["Relu"].compute_time == pytest.approx(7e-6)
    assert traces["Relu"].executions == 1
    assert traces["Relu"].output_sizes == (100,)
    assert traces["Reshape"].compute_time == pytest.approx(1.5e-6 - 2e-9)  # no stream record: its host kernel
    assert traces["Relu"].device == gpu


@pytest.mark.tensorflow
def test_a_real_trace_of_a_while_loop_and_cond_maps_every_record_but_internals():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        weights = tf.compat.v1.get_variable("w", [4, 4])
        _, out = tf.compat.v1.while_loop(
            lambda i, a: i < 3, lambda i, a: (i + 1, tf.matmul(a, weights)), [tf.constant(0), x]
        )
        result = tf.cond(tf.reduce_sum(out) > 0, lambda: out * 2.0, lambda: out - 1.0)
        loss = tf.reduce_sum(result)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    ops = {op.name for op in graph.get_operations()}
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(
            train,
            {x: np.ones((2, 4), np.float32)},
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=metadata,
        )
    records = [node.node_name for dev in metadata.step_stats.dev_stats for node in dev.node_stats]
    unmapped = {name for name in records if op_name_for_node(name, ops) is None}
    assert unmapped <= {"_SOURCE", "_SINK"}
    traces = collect_op_traces(metadata, ops)
    loops = [op.name for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]
    assert len(loops) == 2  # the forward loop and its gradient
    for loop in loops:
        assert traces[loop].executions > 3  # lowered: many records, once per iteration
        assert traces[loop].compute_time > 0
    assert traces["x"].output_sizes == (2 * 4 * 4,)


# Forwarded buffers: outputs that are an input's buffer.

FORWARDING_OPS = {"x", "y", "mm", "ident", "other", "loop/ident", "v", "read"}
FORWARDING_INPUTS = {
    "mm": [("x", 0)],
    "ident": [("mm", 0)],
    "other": [("y", 0)],
    "loop/ident": [("mm", 0)],
    "read": [("v", 0)],
}


@pytest.mark.tensorflow
def test_an_output_at_the_address_of_one_of_its_inputs_is_that_inputs_buffer(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "_arg_x_0_0", "_Arg", nanos=10, outputs=[(0, 400, 0)], addresses=[0])
    _node(cpu, "mm", "MatMul", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    _node(cpu, "ident", "Identity", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    traces = collect_op_traces(run_metadata, FORWARDING_OPS, FORWARDING_INPUTS)
    assert traces["ident"].aliased_outputs == ((0, "mm", 0),)
    assert traces["ident"].output_sizes == (400,)  # still the tensor's bytes, for transfers
    assert traces["mm"].aliased_outputs == ()  # a fed array has no address: nothing to match
    assert collect_op_traces(run_metadata, FORWARDING_OPS)["ident"].aliased_outputs == ()  # no inputs


@pytest.mark.tensorflow
def test_an_address_equal_to_a_tensor_that_is_not_an_input_is_a_reused_address(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "mm", "MatMul", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    _node(cpu, "y", "Const", nanos=10, outputs=[(0, 400, 0)], addresses=[0xB000])
    _node(cpu, "other", "Relu", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    assert collect_op_traces(run_metadata, FORWARDING_OPS, FORWARDING_INPUTS)["other"].aliased_outputs == ()


@pytest.mark.tensorflow
def test_an_op_run_several_times_aliases_an_output_only_if_every_run_did(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "mm", "MatMul", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    _node(cpu, "loop/ident", "Identity", nanos=10, outputs=[(0, 400, 400)], addresses=[0xA000])
    _node(cpu, "loop/ident", "Identity", nanos=10, outputs=[(0, 400, 400)], addresses=[0xC000])
    traces = collect_op_traces(run_metadata, FORWARDING_OPS, FORWARDING_INPUTS)
    assert traces["loop/ident"].aliased_outputs == ()


@pytest.mark.tensorflow
def test_a_variable_read_that_allocates_nothing_is_the_buffer_of_the_handle_it_reads(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    _node(cpu, "v", "VarHandleOp", nanos=10, outputs=[(0, 200, 0)], addresses=[0xA000])
    _node(cpu, "read", "ReadVariableOp", nanos=10, outputs=[(0, 4000, 4096)], addresses=[0xB000])
    assert collect_op_traces(run_metadata, FORWARDING_OPS, FORWARDING_INPUTS)["read"].aliased_outputs == (
        (0, "v", 0),
    )
    cpu.node_stats[-1].memory.add(allocator_name="cpu", total_bytes=4096)  # a copy on read
    assert collect_op_traces(run_metadata, FORWARDING_OPS, FORWARDING_INPUTS)["read"].aliased_outputs == ()


@pytest.mark.tensorflow
def test_a_view_into_a_larger_buffer_has_the_bytes_of_its_own_elements(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    node = _node(cpu, "Reshape", "Split", nanos=10, outputs=[(0, 65536, 65536), (1, 400, 512)])
    for output, dims in zip(node.output, ([16, 256], [100])):
        output.tensor_description.dtype = 1  # DT_FLOAT
        for size in dims:
            output.tensor_description.shape.dim.add(size=size)
    assert collect_op_traces(run_metadata, GRAPH_OPS)["Reshape"].output_sizes == (16 * 256 * 4, 400)


def _traced_step(graph, fetch, feeds):
    """One FULL_TRACE step of ``graph`` under the profiler's settings (after an untraced one)."""
    import tensorflow as tf

    from tfplace.estimator.profiler import profiling_config

    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=profiling_config()) as session:
        with graph.as_default():
            session.run(tf.compat.v1.global_variables_initializer())
        session.run(fetch, feeds)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        session.run(fetch, feeds, options=options, run_metadata=metadata)
    return metadata


def _inputs(graph):
    return {op.name: [(t.op.name, t.value_index) for t in op.inputs] for op in graph.get_operations()}


@pytest.mark.tensorflow
def test_identity_reshape_and_views_are_their_inputs_buffers_in_a_real_trace():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [64, 256], name="x")
        mm = tf.matmul(x, tf.ones([256, 256]), name="mm")
        tf.identity(mm, name="ident")
        tf.reshape(mm, [64, 16, 16, 1], name="reshape")
        parts = tf.split(mm, 4, name="split")
        conv = tf.nn.conv2d(tf.reshape(mm, [64, 16, 16, 1]), tf.ones([3, 3, 1, 8]), 1, "SAME", name="conv")
        fetch = [tf.reduce_sum(t) for t in (graph.get_tensor_by_name("ident:0"), *parts, conv)]
        fetch.append(graph.get_tensor_by_name("reshape:0"))
    metadata = _traced_step(graph, fetch, {"x:0": np.ones((64, 256), np.float32)})
    traces = collect_op_traces(metadata, set(_inputs(graph)), _inputs(graph))
    assert traces["ident"].aliased_outputs == ((0, "mm", 0),)
    assert traces["reshape"].aliased_outputs == ((0, "mm", 0),)
    assert traces["split"].aliased_outputs == tuple((slot, "mm", 0) for slot in range(4))
    assert traces["split"].output_sizes == (16 * 256 * 4,) * 4
    assert traces["conv"].aliased_outputs == ()
    assert traces["conv"].output_sizes == (64 * 16 * 16 * 8 * 4,)  # its scratch memory is the kernel's choice


@pytest.mark.tensorflow
def test_outputs_not_aliased_are_exactly_the_bytes_each_node_allocated_in_a_training_step(load_saved_graph):
    graph, entry, feeds = load_saved_graph("cnn")
    metadata = _traced_step(graph, entry["train_op"], feeds)
    traces = collect_op_traces(metadata, set(_inputs(graph)), _inputs(graph))
    records = [node for dev in metadata.step_stats.dev_stats for node in dev.node_stats]
    checked = 0
    for node in (node for node in records if node.node_name in traces):
        aliased = {slot for slot, _, _ in traces[node.node_name].aliased_outputs}
        new = sum(
            o.tensor_description.allocation_description.allocated_bytes
            for o in node.output
            if o.slot not in aliased
        )
        allocated = sum(memory.total_bytes for memory in node.memory) - node.memory_stats.temp_memory_size
        assert (node.node_name, new) == (node.node_name, allocated)
        checked += 1
    kinds = {graph.get_operation_by_name(op).type for op, trace in traces.items() if trace.aliased_outputs}
    assert checked > 200
    assert {"Identity", "Reshape", "Relu", "ReluGrad", "ReadVariableOp"} <= kinds  # shared, in place


@pytest.mark.tensorflow
def test_allocation_peaks_sum_each_devices_allocation_records_in_time_order(run_metadata):
    for device, records in (
        ("/device:CPU:0", [(10, 100), (5, 40), (20, -100), (20, 60)]),
        ("/device:CPU:1", [(1, 8)]),
    ):
        node = _node(run_metadata.step_stats.dev_stats.add(device=device), "a", "Op", nanos=10)
        for micros, nbytes in records:
            node.memory.add(allocator_name="cpu").allocation_records.add(
                alloc_micros=micros, alloc_bytes=nbytes
            )
    # CPU:0 holds 40, then 140; at 20 the free comes before the allocation: 40, then 100
    assert allocation_peaks(run_metadata) == {"/device:CPU:0": 140, "/device:CPU:1": 8}


class _SetFieldsOnly:
    """A step-stats message that fails the test when a sub-message or repeated field it has not
    set is read: protobuf's upb runtime answers such a read with a stub, and the stubs' freed
    arenas make it trim the whole heap (``tfplace.tf_graph.step_stats``'s docstring)."""

    def __init__(self, message):
        self._message = message

    def HasField(self, name):
        return self._message.HasField(name)

    def ListFields(self):
        return [(field, _strict(value, field)) for field, value in self._message.ListFields()]

    def __getattr__(self, name):
        field = self._message.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated or field.message_type is not None:
            assert name in {f.name for f, _ in self._message.ListFields()}, f"read unset field {name!r}"
        return _strict(getattr(self._message, name), field)


def _strict(value, field):
    if field.message_type is None:
        return value
    return [_SetFieldsOnly(item) for item in value] if field.is_repeated else _SetFieldsOnly(value)


@pytest.mark.tensorflow
def test_reading_step_stats_never_touches_a_field_the_record_left_unset(run_metadata):
    cpu = run_metadata.step_stats.dev_stats.add(device="/device:CPU:0")
    cpu.node_stats.add(node_name="_SOURCE", timeline_label="_SOURCE = NoOp()")  # nothing but a name
    cpu.node_stats.add(node_name="Reshape", timeline_label="Reshape = Reshape()").output.add(slot=0)
    _node(cpu, "Relu", "Relu", nanos=3000, outputs=[(0, 100, 128)], addresses=[64], tracked=128)
    _node(cpu, "while/body/_2/MatMul", "MatMul", nanos=4000, tracked=96)
    loop = cpu.node_stats[-1]
    loop.memory.add(allocator_name="cpu").allocation_records.add(alloc_micros=1, alloc_bytes=32)
    inputs = {"Relu": [("Reshape", 0)], "Reshape": [("x", 0)]}

    strict = _SetFieldsOnly(run_metadata)

    assert collect_op_traces(strict, GRAPH_OPS, inputs) == collect_op_traces(run_metadata, GRAPH_OPS, inputs)
    assert allocation_peaks(strict) == allocation_peaks(run_metadata)
    assert output_shapes(strict, GRAPH_OPS) == output_shapes(run_metadata, GRAPH_OPS)


@pytest.mark.tensorflow
def test_a_real_traced_training_step_is_read_from_its_set_fields_alone():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
        w = tf.compat.v1.get_variable("w", [8, 4])
        loss = tf.reduce_sum(tf.nn.relu(tf.reshape(x, [-1, 8]) @ w))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    metadata = _traced_step(graph, train, {x: np.ones((2, 8), np.float32)})
    ops, inputs = {op.name for op in graph.get_operations()}, _inputs(graph)

    traces = collect_op_traces(_SetFieldsOnly(metadata), ops, inputs)

    assert traces == collect_op_traces(metadata, ops, inputs)
    assert {"matmul", "Relu", "Reshape"} <= set(traces)


@pytest.mark.tensorflow
def test_recv_tensor_records_name_the_producer_both_devices_and_when_the_tensor_crossed(run_metadata):
    worker = "/job:worker/replica:0/task:{}/device:CPU:0"
    device = run_metadata.step_stats.dev_stats.add(device=worker.format(1))
    for label, start, duration in [
        (f"[0.4MB] [3.9Gb/s] edge_158_net/Relu_2 from {worker.format(0)} to {worker.format(1)}", 6_725, 912),
        (
            f"[0.1MB] [1.1Gb/s] edge_2323__recv_amplitude_0 from {worker.format(0)} to {worker.format(1)}",
            6_714,
            834,
        ),
        ("a label of another form", 1, 1),
    ]:
        device.node_stats.add(
            node_name="RecvTensor", timeline_label=label, all_start_micros=start, all_end_rel_micros=duration
        )
    device.node_stats.add(node_name="net/Relu_3", timeline_label="edge_1_x from a to b", all_start_micros=9)

    relu, fed = recv_tensor_records(run_metadata)

    assert (relu.producer, relu.src_device, relu.dst_device) == (
        "net/Relu_2",
        worker.format(0),
        worker.format(1),
    )
    assert (relu.start, relu.end) == (pytest.approx(6.725e-3), pytest.approx(7.637e-3))
    assert fed.producer == "amplitude"  # a tensor the client fed, forwarded by the master's worker
