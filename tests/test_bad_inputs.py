"""Bad inputs get a clear error naming the problem, or a documented fallback with a warning.

``docs/bad_inputs.md`` lists every bad input tried, what tfplace does and the test that proves it
(here or in the module that already covered it).
"""

from __future__ import annotations

import itertools
import json
import re
import time

import numpy as np
import pytest

from helpers import reported_overcommits
from tfplace.core.costgraph import CostGraph, CostGraphError, find_cycle_ops, load_json, save_json
from tfplace.core.devices import DeviceError, DeviceName, DeviceSet
from tfplace.core.synthetic import layered_training_graph, random_dag
from tfplace.placer import PLACERS, place_cost_graph, placer_function
from tfplace.simulator import simulate


def gpus(count: int, memory: int) -> DeviceSet:
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory)


def cyclic_graph() -> CostGraph:
    """``a -> b -> c -> b -> ... -> d``: b and c form a cycle."""
    graph = CostGraph()
    for name in "abcd":
        graph.add_op(name, compute_time=1e-3, output_sizes=(10,))
    for src, dst in ["ab", "bc", "cb", "cd"]:
        graph.add_dependency(src, dst, slots=(0,))
    return graph


# -- cycles --------------------------------------------------------------------------------------


@pytest.mark.parametrize("placer", sorted(PLACERS))
def test_every_placer_refuses_a_cyclic_cost_graph_naming_the_ops_on_the_cycle(placer):
    with pytest.raises(CostGraphError, match=r"cycle.*(b -> c -> b|c -> b -> c)"):
        place_cost_graph(cyclic_graph(), gpus(2, 1000), placer, simulate=False)


def test_the_simulator_refuses_a_cyclic_cost_graph_naming_the_ops_on_the_cycle():
    with pytest.raises(CostGraphError, match=r"cycle.*(b -> c -> b|c -> b -> c)"):
        simulate(cyclic_graph(), np.zeros(4, dtype=np.int64), gpus(2, 1000))


def test_a_cycle_deep_in_a_large_graph_is_named_and_the_acyclic_graph_validates_in_linear_time():
    graph = layered_training_graph(20_000)
    start = time.perf_counter()
    graph.validate()
    assert time.perf_counter() - start < 10  # networkx's find_cycle alone took 160 s here
    graph.add_dependency("grad/layer0/addn", "layer300/read", control=True)
    cycle = find_cycle_ops(graph)
    assert cycle[0] == cycle[-1] and all(graph.has_edge(a, b) for a, b in itertools.pairwise(cycle))
    assert ("grad/layer0/addn", "layer300/read") in set(itertools.pairwise(cycle))
    with pytest.raises(CostGraphError, match=rf"cycle through {len(cycle)} ops: {re.escape(cycle[0])} -> "):
        graph.validate()


def test_an_op_depending_on_itself_is_a_cycle_of_one_op():
    graph = CostGraph()
    graph.add_op("a")
    graph.add_dependency("a", "a", control=True)
    with pytest.raises(CostGraphError, match="cycle through 2 ops: a -> a"):
        graph.validate()


# -- memory --------------------------------------------------------------------------------------


def graph_with_a_big_group() -> CostGraph:
    """A group of ``var`` (150 bytes) and ``read`` (10 bytes) beside a small op ``x``."""
    graph = CostGraph()
    graph.add_op("var", persistent_bytes=150, colocation_group="var")
    graph.add_op("read", compute_time=1e-3, persistent_bytes=10, colocation_group="var")
    graph.add_op("x", compute_time=1e-3, persistent_bytes=10)
    graph.add_dependency("var", "read", control=True)
    graph.add_dependency("read", "x", control=True)
    return graph


#: Placers whose memory warnings come from the static estimate; auto's and data parallelism's come
#: from the simulator.
STATIC_MEMORY_PLACERS = sorted(set(PLACERS) - {"auto", "data_parallel", "layerwise"})


@pytest.mark.parametrize("placer", STATIC_MEMORY_PLACERS)
def test_a_group_larger_than_every_device_is_placed_whole_with_a_warning_giving_its_bytes(placer):
    devices = DeviceSet.parse("/device:GPU:0,/device:GPU:1", [100, 120])
    placement = place_cost_graph(graph_with_a_big_group(), devices, placer, simulate=False)
    assert placement.assignment["var"] == placement.assignment["read"]
    expected = (
        "co-location group 'read' (2 ops: read, var) needs 160 bytes, more than the largest device "
        "that can run it (/device:GPU:1, 120 bytes): placed by best effort"
    )
    assert expected in placement.warnings


def test_an_op_larger_than_every_device_is_named_with_its_bytes():
    graph = CostGraph()
    graph.add_op("embedding", persistent_bytes=500, temporary_bytes=20)
    placement = place_cost_graph(graph, gpus(2, 100), "celeritas")
    assert placement.warnings[:2] == [
        "the graph needs at least 520 bytes on the target devices (every op's resident bytes plus the "
        "largest temporary bytes), the 2 devices hold 200: no placement fits, ops were placed by best effort",
        "op 'embedding' needs 520 bytes, more than the largest device that can run it "
        "(/device:GPU:0, 100 bytes): placed by best effort",
    ]


def test_a_group_only_a_fallback_cpu_can_run_is_not_reported_however_large():
    graph = graph_with_a_big_group()
    for op in ("var", "read"):
        graph.nodes[op]["device_kinds"] = ("CPU",)
    placement = place_cost_graph(graph, gpus(2, 100), "celeritas")
    assert placement.warnings == []
    assert DeviceName.parse(placement.assignment["var"]).kind == "CPU"


@pytest.mark.parametrize("placer", STATIC_MEMORY_PLACERS)
def test_too_little_total_memory_places_every_op_and_warns_with_each_overcommitted_device(placer):
    graph = random_dag(60, seed=3, group_fraction=0.3)
    devices = gpus(3, 2_000_000)
    placement = place_cost_graph(graph, devices, placer, simulate=False)

    assert set(placement.assignment) == set(graph.nodes)
    assert placement.warnings[0].startswith("the graph needs at least")
    over = {name: used for name, used in placement.memory.items() if used > 2_000_000}
    assert over
    assert reported_overcommits(placement.warnings) == {
        name: (used - 2_000_000, used, 2_000_000) for name, used in over.items()
    }


@pytest.mark.parametrize(
    ("graph", "devices"),
    [
        (graph_with_a_big_group(), DeviceSet.parse("/device:GPU:0,/device:GPU:1", [100, 120])),
        (random_dag(60, seed=3, group_fraction=0.3), gpus(3, 2_000_000)),
    ],
    ids=["group larger than every device", "too little total memory"],
)
def test_auto_places_every_op_and_warns_that_nothing_fits_in_the_simulator(graph, devices):
    placement = place_cost_graph(graph, devices, "auto", simulate=False)

    assert set(placement.assignment) == set(graph.nodes)
    [warning] = placement.warnings
    assert warning.startswith("no candidate placement fits in memory in the simulator")


# -- device names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("/device:GPU", r"malformed device name '/device:GPU': expected TYPE:index, got 'GPU'"),
        ("/job:w/task:x/device:GPU:0", r"'/job:w/task:x/device:GPU:0': replica and task must be integers"),
        ("/job:worker", r"'/job:worker' has no device type and index"),
        ("/device:GPU:x", r"malformed device name '/device:GPU:x': expected TYPE:index"),
        ("/jobs:x/device:GPU:0", r"malformed device name '/jobs:x/device:GPU:0': cannot read 'jobs:x'"),
        ("GPU0", r"malformed device name 'GPU0': cannot read 'GPU0'"),
    ],
)
def test_a_malformed_device_name_is_refused_naming_it_and_the_accepted_forms(name, message):
    with pytest.raises(DeviceError, match=message + r".*; write /device:GPU:0, /gpu:0, GPU:0 or /job:"):
        DeviceSet.parse(name, "1GB")


def test_an_unknown_device_in_a_placement_is_refused_listing_the_available_ones():
    graph = random_dag(3, seed=0)
    assignment = {op: "/device:GPU:7" for op in graph}
    with pytest.raises(
        DeviceError, match=r"unknown device '/device:GPU:7'; this placement has: /device:GPU:0, /device:GPU:1"
    ):
        simulate(graph, assignment, gpus(2, 10**9))


def test_an_unknown_placer_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown placer 'metiss'; choose one of: celeritas, order_place, "):
        placer_function("metiss")


# -- corrupted cost-graph JSON -------------------------------------------------------------------


def saved_document(tmp_path):
    graph = random_dag(4, seed=1, group_fraction=1.0)
    path = tmp_path / "graph.json"
    save_json(graph, path)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda d: d.update(ops="op0"), r"'ops' must be a list"),
        (lambda d: d.pop("edges"), r"'edges' must be a list, got None"),
        (lambda d: d.update(graph=[1]), r"'graph' must be an object of metadata"),
        (lambda d: d.update(version=5), r"cost graph version 5, this tfplace reads versions 1, 2, 3, 4"),
        (lambda d: d["ops"][0].update(gradient_of=3), r"gradient_of must name another op, got 3"),
        (lambda d: d["ops"].append(dict(d["ops"][0])), r"op '\w+' appears twice \(ops\[4\]\)"),
        (lambda d: d["ops"][0].update(name=["x"]), r"ops\[0\] has no name"),
        (lambda d: d["ops"][0].update(output_sizes=12), r"op '\w+': output_sizes must be a list, got 12"),
        (lambda d: d["ops"][0].update(output_sizes=[1, -2]), r"op '\w+': output_sizes must be integers >= 0"),
        (
            lambda d: d["ops"][0].update(compute_time="fast"),
            r"op '\w+': compute_time must be a finite number",
        ),
        (lambda d: d["ops"][0].update(compute_time=True), r"op '\w+': compute_time must be a finite number"),
        (
            lambda d: d["ops"][0].update(persistent_bytes=1.5),
            r"op '\w+': persistent_bytes must be an integer",
        ),
        (lambda d: d["ops"][0].update(device_kinds="GPU"), r"op '\w+': device_kinds must be a list"),
        (
            lambda d: d["ops"][0].update(device_kinds=[]),
            r"op '\w+': device_kinds must be None or device types",
        ),
        (
            lambda d: d["ops"][0].update(colocation_group=3),
            r"op '\w+': colocation_group must be None or a string",
        ),
        (lambda d: d["ops"][0].update(op_type=None), r"op '\w+': op_type must be a string"),
        (lambda d: d["ops"][0].update(colour="red"), r"op '\w+' has unknown fields \['colour'\]"),
        (lambda d: d["edges"].append(dict(d["edges"][0])), r"edges\[\d+\] repeats '\w+' -> '\w+'"),
        (lambda d: d["edges"][0].update(slots=None), r"edge '\w+' -> '\w+': slots must be a list"),
        (lambda d: d["edges"][0].update(slots=["0"]), r"edge '\w+' -> '\w+': slots must be output slots"),
        (lambda d: d["edges"][0].update(bytes=True), r"edge '\w+' -> '\w+': bytes must be an integer"),
        (lambda d: d["edges"][0].update(control="no"), r"edge '\w+' -> '\w+': control must be true or false"),
        (lambda d: d["edges"][0].update(dst=7), r"edges\[0\] names unknown op 7"),
    ],
)
def test_a_cost_graph_json_with_a_malformed_field_is_refused_naming_the_op_and_field(
    tmp_path, corrupt, message
):
    path, document = saved_document(tmp_path)
    corrupt(document)
    path.write_text(json.dumps(document))
    with pytest.raises(CostGraphError, match=message):
        load_json(path)


def test_a_cost_graph_json_cut_anywhere_is_refused_as_truncated(tmp_path):
    path, _ = saved_document(tmp_path)
    text = path.read_bytes()
    for cut in range(0, len(text), max(1, len(text) // 50)):
        path.write_bytes(text[:cut])
        with pytest.raises(CostGraphError, match="truncated or corrupted"):
            load_json(path)


# -- empty graphs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("placer", sorted(PLACERS))
def test_an_empty_cost_graph_gets_an_empty_placement_with_a_zero_step_time(placer):
    placement = place_cost_graph(CostGraph(), gpus(2, 100), placer)
    assert placement.assignment == {}
    assert placement.step_time == 0.0
    assert placement.warnings == []


def test_simulating_an_empty_graph_takes_no_time_and_no_memory():
    result = simulate(CostGraph(), np.zeros(0, dtype=np.int64), gpus(2, 100))
    assert result.makespan == 0.0
    assert not result.peak_memory.any()
    assert result.oom == []


# -- TensorFlow graphs ----------------------------------------------------------------------------


def dense_training_graph():
    """x[None, 4] @ w[4, 2] -> mean square -> one gradient-descent step: (graph, train op name)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        weights = tf.compat.v1.get_variable("w", [4, 2])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, weights)), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op")
    return graph, "train_op"


def dense_feeds(batch_size):
    return {"x:0": np.ones((batch_size, 4), np.float32)}


FAST = {"warmup_steps": 1, "traced_steps": 2}


@pytest.mark.tensorflow
def test_a_graph_def_file_cut_after_any_op_or_inside_one_is_refused_as_truncated(tmp_path):
    from tfplace.tf_graph.importer import GraphImportError, import_graph

    graph, _ = dense_training_graph()
    graph_def = graph.as_graph_def()
    whole = graph_def.SerializeToString(deterministic=True)
    path = tmp_path / "graph.pb"
    prefixes = []
    for count in range(len(graph_def.node)):
        cut = type(graph_def)()
        cut.node.extend(graph_def.node[:count])
        prefixes.append(cut.SerializeToString(deterministic=True))
    assert all(whole.startswith(prefix) for prefix in prefixes)  # cuts at op boundaries
    for prefix in prefixes:
        path.write_bytes(prefix)
        with pytest.raises(GraphImportError, match=r"graph\.pb: not a readable GraphDef: truncated: its"):
            import_graph(path)
    for cut in range(1, len(whole), max(1, len(whole) // 40)):
        path.write_bytes(whole[:cut])
        with pytest.raises(GraphImportError, match=r"graph\.pb: not a readable GraphDef: truncated"):
            import_graph(path)
    path.write_bytes(whole)
    assert len(import_graph(path).cost_graph) == len(graph_def.node)


@pytest.mark.tensorflow
def test_a_corrupted_meta_graph_file_is_refused_naming_the_file(tmp_path):
    import tensorflow as tf

    from tfplace.tf_graph.importer import GraphImportError, import_graph

    graph, _ = dense_training_graph()
    with graph.as_default():
        data = bytearray(tf.compat.v1.train.export_meta_graph().SerializeToString())
    data[len(data) // 3 : len(data) // 3 + 8] = b"\xff" * 8
    path = tmp_path / "model.meta"
    path.write_bytes(bytes(data))
    with pytest.raises(
        GraphImportError, match=r"model\.meta: not a readable MetaGraphDef: truncated or corrupted"
    ):
        import_graph(path)


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    ("fetches", "message"),
    [
        ("train_op", r"no op 'train_op' to fetch \(the graph is empty\)"),
        ([], "the graph is empty"),
        (None, "the graph is empty"),
    ],
)
def test_placing_an_empty_tf_graph_is_refused_saying_it_is_empty(fetches, message):
    import tensorflow as tf

    from tfplace import place

    with pytest.raises(ValueError, match=message):
        place(tf.Graph(), fetches, dense_feeds, "/device:GPU:0-1", memory="1GB", batch_size=4, cache_dir=None)


@pytest.mark.tensorflow
@pytest.mark.parametrize(("fetches", "message"), [(None, "cannot fetch None"), ([], "at least one fetch")])
def test_placing_without_a_fetch_is_refused_naming_what_was_given(fetches, message):
    from tfplace import place

    graph, _ = dense_training_graph()
    with pytest.raises(ValueError, match=message):
        place(graph, fetches, dense_feeds, "/device:GPU:0-1", memory="1GB", batch_size=4, cache_dir=None)


@pytest.mark.tensorflow
def test_feeds_that_do_not_match_the_placeholders_are_refused_before_tensorflow_runs(monkeypatch):
    import tensorflow as tf

    from tfplace import place

    def refuse(*args, **kwargs):
        raise AssertionError("a session was started")

    graph, train = dense_training_graph()
    monkeypatch.setattr(tf.compat.v1, "Session", refuse)
    with pytest.raises(ValueError, match=r"feed 'x:0': shape \(1, 3\) is incompatible .* \(None, 4\)"):
        place(
            graph,
            train,
            lambda b: {"x:0": np.ones((b, 3), np.float32)},
            "/device:CPU:0-1",
            memory="1GB",
            batch_size=8,
        )


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_profiling_interrupted_mid_step_leaves_no_cache_file_and_the_next_run_measures_again(
    tmp_path, monkeypatch
):
    from tfplace.estimator import profiler

    graph, train = dense_training_graph()
    real = profiler.collect_op_traces
    calls = []

    def interrupted(metadata, names, inputs=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(metadata, names, inputs)

    monkeypatch.setattr(profiler, "collect_op_traces", interrupted)
    with pytest.raises(KeyboardInterrupt):
        profiler.profile_graph(graph, train, dense_feeds, (1, 2), cache_dir=tmp_path, **FAST)
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setattr(profiler, "collect_op_traces", real)
    again = profiler.profile_graph(graph, train, dense_feeds, (1, 2), cache_dir=tmp_path, **FAST)
    assert not again.from_cache
    assert [p.name for p in tmp_path.iterdir()] == [f"profile-{again.key}.json"]


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_negative_measured_times_are_raised_to_the_floor_like_zero_ones(monkeypatch, unperturbed):
    from tfplace.estimator import profiler
    from tfplace.tf_graph.step_stats import OpTrace

    def negative(metadata, names, inputs=None):
        return {name: OpTrace(-3e-6, (), 0, 0, "/device:CPU:0", 1) for name in names}

    monkeypatch.setattr(profiler, "collect_op_traces", negative)
    graph, train = dense_training_graph()
    one_session = profiler.RepeatPolicy(sessions=1)  # the traces are fixed: one session here suffices
    result = profiler.profile_graph(
        graph, train, dense_feeds, (1, 2), **FAST, repeats=one_session, process="this"
    )
    assert {cost.compute_time for per_op in result.costs.values() for cost in per_op.values()} == {
        profiler.TIME_FLOOR
    }


def graph_with_cpu_only_ops():
    """A training step reading a tf.data iterator, with a summary and a string of the loss:
    ``(graph, fetches)``."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        rows = np.arange(64, dtype=np.float32).reshape(16, 4)
        dataset = tf.data.Dataset.from_tensor_slices(rows).repeat().batch(4)
        batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next(name="next_batch")
        weights = tf.compat.v1.get_variable("w", [4, 2])
        loss = tf.reduce_mean(tf.square(tf.matmul(batch, weights, name="matmul")), name="loss")
        summary = tf.compat.v1.summary.scalar("loss_summary", loss)
        histogram = tf.compat.v1.summary.histogram("weights", weights)
        text = tf.strings.as_string(loss, name="loss_text")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train_op")
    return graph, [train, summary, histogram, text]


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_ops_without_a_gpu_kernel_stay_on_the_cpu_when_placing_on_four_gpus(tmp_path):
    from tfplace import place
    from tfplace.tf_graph.constraints import op_device_kinds

    graph, fetches = graph_with_cpu_only_ops()
    placement = place(
        graph,
        fetches,
        lambda b: {},
        "/device:GPU:0-3",
        memory="1GB",
        batch_size=4,
        profile_batch_sizes=[4],
        cache_dir=tmp_path,
        **FAST,
    )
    placement.apply(graph)

    kind = {op.name: DeviceName.parse(op.device).kind for op in graph.get_operations()}
    for name in (
        "TensorSliceDataset",
        "OneShotIterator",
        "next_batch",
        "loss_summary",
        "weights",
        "loss_text",
    ):
        assert kind[name] == "CPU", name
    assert kind["matmul"] == kind["loss"] == "GPU"
    for op in graph.get_operations():
        kinds = op_device_kinds(op)
        if kinds is not None and "GPU" not in kinds:
            assert kind[op.name] == "CPU", op.name
    assert {
        DeviceName.parse(op.device).full_name for op in graph.get_operations() if kind[op.name] == "CPU"
    } == {"/job:localhost/replica:0/task:0/device:CPU:0"}


@pytest.mark.tensorflow
def test_a_feed_function_that_ignores_the_batch_size_is_refused_before_profiling(load_saved_graph, tmp_path):
    from tfplace.estimator.profiler import profile_graph

    graph, entry, feeds = load_saved_graph("cnn")
    with pytest.raises(ValueError, match=r"same shapes for batch sizes \[1, 2\]"):
        profile_graph(graph, entry["train_op"], lambda batch_size: feeds, [1, 2], cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def one_shot_iterator_graph(iterator_batch: int):
    """A TF1 training step whose inputs come from a one-shot ``tf.data`` iterator of fixed batches."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        rows = np.arange(4 * 64, dtype=np.float32).reshape(64, 4)
        dataset = tf.data.Dataset.from_tensor_slices(rows).repeat().batch(iterator_batch)
        batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next(name="next_batch")
        weights = tf.compat.v1.get_variable("w", [4, 2])
        loss = tf.reduce_mean(tf.square(tf.matmul(batch, weights)), name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train_op")
    return graph, train


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_an_iterator_that_ignores_the_batch_asked_for_is_refused_naming_the_batch_it_ran(tmp_path):
    from tfplace import place

    graph, train = one_shot_iterator_graph(iterator_batch=8)

    message = (
        r"iterator 'next_batch', which ran batches of 8 when batch 1 was asked for.*profile_batch_sizes=\[8\]"
    )
    with pytest.raises(ValueError, match=message):
        place(graph, train, lambda b: {}, "/device:CPU:0-1", memory="1GB", batch_size=64,
              profile_batch_sizes=[1, 2], cache_dir=tmp_path, **FAST)  # fmt: skip
    assert not list(tmp_path.iterdir())  # nothing cached


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_an_iterator_profiled_at_its_own_batch_is_accepted(tmp_path):
    from tfplace.estimator.profiler import profile_graph

    graph, train = one_shot_iterator_graph(iterator_batch=8)

    profile = profile_graph(graph, train, lambda b: {}, [8], cache_dir=None, **FAST)

    assert profile.batch_sizes == (8,)
