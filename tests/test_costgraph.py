"""The cost graph schema: building, merging edges, validation and the JSON form."""

import json
import os

import pytest

from tfplace.core.costgraph import (
    UNTRACED_STEP,
    CostGraph,
    CostGraphError,
    ccr,
    load_json,
    op_memory,
    save_json,
    untraced_steps,
)
from tfplace.core.indexed import index_graph
from tfplace.core.transfer import TransferModel


def two_op_graph() -> CostGraph:
    graph = CostGraph(name="pair")
    graph.add_op("a", compute_time=1e-3, output_sizes=(100, 300), op_type="Split")
    graph.add_op("b", compute_time=2e-3, temporary_bytes=50, persistent_bytes=7)
    return graph


def test_edge_bytes_are_the_sizes_of_the_slots_it_carries():
    graph = two_op_graph()
    graph.add_dependency("a", "b", slots=(1,))
    assert graph.edges["a", "b"]["bytes"] == 300


def test_a_second_dependency_on_the_same_pair_merges_and_counts_each_tensor_once():
    graph = two_op_graph()
    graph.add_dependency("a", "b", slots=(0,))
    graph.add_dependency("a", "b", slots=(0, 1))
    graph.add_dependency("a", "b", slots=(1,))
    edge = graph.edges["a", "b"]
    assert edge["slots"] == (0, 1)
    assert edge["bytes"] == 400
    assert graph.number_of_edges() == 1


def test_a_control_dependency_carries_zero_bytes_and_costs_no_transfer():
    graph = two_op_graph()
    graph.add_dependency("a", "b", control=True)
    edge = graph.edges["a", "b"]
    assert (edge["bytes"], edge["control"], edge["transfer_time"]) == (0, True, 0.0)


def test_a_data_edge_merged_with_a_control_edge_is_a_data_edge():
    graph = two_op_graph()
    graph.add_dependency("a", "b", control=True)
    graph.add_dependency("a", "b", slots=(0,))
    assert graph.edges["a", "b"]["control"] is False
    assert graph.edges["a", "b"]["bytes"] == 100


def test_transfer_time_is_k_bytes_plus_b_per_tensor():
    graph = two_op_graph()
    graph.set_transfer_model(TransferModel(k=1e-9, b=1e-5))
    graph.add_dependency("a", "b", slots=(0, 1))
    assert graph.edges["a", "b"]["transfer_time"] == pytest.approx(400e-9 + 2e-5)


def test_dependency_on_an_unknown_op_names_it():
    graph = two_op_graph()
    with pytest.raises(CostGraphError, match="'c'"):
        graph.add_dependency("a", "c")


def test_op_memory_counts_persistent_outputs_and_temporary():
    graph = two_op_graph()
    assert op_memory(graph.nodes["a"]) == 400
    assert op_memory(graph.nodes["b"]) == 57


def aliasing_graph() -> CostGraph:
    """a -> b, whose output 1 is a's output 1 (a view or a forwarded buffer)."""
    graph = two_op_graph()
    graph.add_op("b", output_sizes=(20, 300), temporary_bytes=50, aliased_outputs=[(1, "a", 1)])
    graph.add_dependency("a", "b", slots=(0, 1))
    return graph


def test_op_memory_leaves_out_outputs_that_are_an_inputs_buffer():
    graph = aliasing_graph()
    assert op_memory(graph.nodes["b"]) == 20 + 50
    assert index_graph(graph).memory.tolist() == [400, 20 + 50]
    assert index_graph(graph).aliases == [(), ((1, 0, 1),)]
    assert graph.edges["a", "b"]["bytes"] == 400  # a transfer still moves every tensor


def test_json_round_trip_keeps_aliased_outputs(tmp_path):
    graph = aliasing_graph()
    save_json(graph, tmp_path / "g.json")
    loaded = load_json(tmp_path / "g.json")
    assert loaded.nodes["b"]["aliased_outputs"] == ((1, "a", 1),)
    assert dict(loaded.nodes(data=True)) == dict(graph.nodes(data=True))


def test_a_file_written_before_aliased_outputs_existed_loads_with_none(tmp_path):
    graph = aliasing_graph()
    path = tmp_path / "old.json"
    save_json(graph, path)
    document = json.loads(path.read_text())
    for op in document["ops"]:
        del op["aliased_outputs"]
    path.write_text(json.dumps(document))
    loaded = load_json(path)
    assert loaded.nodes["b"]["aliased_outputs"] == ()
    assert op_memory(loaded.nodes["b"]) == 320 + 50


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        ([[1, "a"]], "triples"),
        ([[1, 1, 1]], "triples"),
        ([[2, "a", 1]], r"slots \[2\]; each must be one of its 2 output slots"),
        ([[1, "a", 1], [1, "a", 0]], "once"),
        ([[1, "a", 2]], "input a:2, but no edge into the op carries that tensor"),
        ([[1, "c", 0]], "input c:0, but no edge"),
    ],
)
def test_aliased_outputs_that_name_no_output_or_no_input_of_the_op_are_refused(tmp_path, aliases, message):
    graph = aliasing_graph()
    graph.add_op("c", output_sizes=(8,))
    path = tmp_path / "bad.json"
    save_json(graph, path)
    document = json.loads(path.read_text())
    next(op for op in document["ops"] if op["name"] == "b")["aliased_outputs"] = aliases
    path.write_text(json.dumps(document))
    with pytest.raises(CostGraphError, match=f"'b'.*{message}"):
        load_json(path)


def test_ccr_is_total_transfer_time_over_total_compute():
    graph = two_op_graph()
    graph.set_transfer_model(TransferModel(k=0.0, b=3e-3))
    graph.add_dependency("a", "b", slots=(0,))
    assert ccr(graph) == pytest.approx(3e-3 / 3e-3)


def test_json_round_trip_keeps_every_attribute(tmp_path):
    graph = two_op_graph()
    graph.nodes["a"]["colocation_group"] = "g"
    graph.nodes["b"]["device_kinds"] = ("CPU",)
    graph.add_dependency("a", "b", slots=(1,))
    graph.add_op("c")
    graph.add_dependency("b", "c", control=True)
    path = tmp_path / "g.json"
    save_json(graph, path)
    loaded = load_json(path)
    assert dict(loaded.nodes(data=True)) == dict(graph.nodes(data=True))
    assert {(u, v): d for u, v, d in loaded.edges(data=True)} == {
        (u, v): d for u, v, d in graph.edges(data=True)
    }
    assert loaded.graph == graph.graph


def test_a_gz_path_is_compressed_and_reads_back(tmp_path):
    graph = two_op_graph()
    graph.add_dependency("a", "b", slots=(0,))
    path = tmp_path / "g.json.gz"
    save_json(graph, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert dict(load_json(path).nodes(data=True)) == dict(graph.nodes(data=True))


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_a_truncated_file_raises_a_clear_error(tmp_path, name):
    graph = two_op_graph()
    path = tmp_path / name
    save_json(graph, path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CostGraphError, match="truncated or corrupted"):
        load_json(path)


def test_a_truncated_json_file_raises_a_clear_error(tmp_path):
    graph = two_op_graph()
    path = tmp_path / "g.json"
    save_json(graph, path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(CostGraphError, match="truncated or corrupted"):
        load_json(path)


def test_json_that_is_not_a_cost_graph_is_rejected(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"nodes": []}))
    with pytest.raises(CostGraphError, match="not a cost graph"):
        load_json(path)


def test_json_edge_to_an_unknown_op_is_rejected(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {
                "format": "tfplace.costgraph",
                "version": 1,
                "ops": [{"name": "a"}],
                "edges": [{"src": "a", "dst": "zz"}],
            }
        )
    )
    with pytest.raises(CostGraphError, match="'zz'"):
        load_json(path)


def test_json_with_a_negative_compute_time_names_the_op(tmp_path):
    path = tmp_path / "neg.json"
    path.write_text(
        json.dumps(
            {
                "format": "tfplace.costgraph",
                "version": 1,
                "ops": [{"name": "slow", "compute_time": -1}],
                "edges": [],
            }
        )
    )
    with pytest.raises(CostGraphError, match=r"'slow'.*compute_time"):
        load_json(path)


def test_validate_names_the_ops_of_a_cycle():
    graph = CostGraph()
    for name in ("x", "y", "z"):
        graph.add_op(name)
    graph.add_dependency("x", "y", control=True)
    graph.add_dependency("y", "z", control=True)
    graph.add_dependency("z", "x", control=True)
    with pytest.raises(CostGraphError, match=r"cycle.*x.*y.*z|cycle.*y.*z.*x|cycle.*z.*x.*y"):
        graph.validate()


def test_an_interrupted_save_leaves_neither_a_partial_file_nor_a_temporary(tmp_path, monkeypatch):
    graph = two_op_graph()
    path = tmp_path / "g.json"

    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        save_json(graph, path)
    assert list(tmp_path.iterdir()) == []


def test_json_round_trip_keeps_the_split_fields_of_version_3(tmp_path):
    graph = CostGraph(batch_size=8)
    graph.add_op("x", output_sizes=(256,), output_shapes=[(-1, 8)])
    graph.add_op(
        "mm",
        op_type="MatMul",
        output_sizes=(128,),
        output_shapes=[(-1, 4)],
        attrs={"transpose_a": False, "transpose_b": False},
        inputs=[("x", 0)],
        batch_costs={"time": ["line", 1e-6, 2e-6], "outputs": [[16.0, 0.0]], "temporary": [0.0, 0.0]},
    )
    graph.add_dependency("x", "mm", slots=(0,))
    save_json(graph, tmp_path / "g.json")
    document = json.loads((tmp_path / "g.json").read_text())
    assert document["version"] >= 3 and "attrs" not in document["ops"][0]
    assert dict(load_json(tmp_path / "g.json").nodes(data=True)) == dict(graph.nodes(data=True))


def test_json_round_trip_keeps_the_kernel_time_of_version_4_written_only_where_measured(tmp_path):
    graph = CostGraph()
    graph.add_op("measured", compute_time=3e-6, kernel_time=2e-6)
    graph.add_op("unmeasured", compute_time=3e-6)
    save_json(graph, tmp_path / "g.json")
    document = json.loads((tmp_path / "g.json").read_text())
    assert document["version"] == 4
    assert [op.get("kernel_time") for op in document["ops"]] == [2e-6, None]
    loaded = load_json(tmp_path / "g.json")
    assert (
        loaded.nodes["measured"]["kernel_time"] == 2e-6 and loaded.nodes["unmeasured"]["kernel_time"] is None
    )


def test_a_negative_kernel_time_names_the_op():
    graph = CostGraph()
    graph.add_op("x", compute_time=1e-6, kernel_time=-1e-6)
    with pytest.raises(CostGraphError, match="op 'x': kernel_time must be None or a finite number >= 0"):
        graph.validate()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_files_of_older_versions_load_without_split_fields(tmp_path, version):
    path = tmp_path / "old.json"
    save_json(aliasing_graph(), path)
    document = json.loads(path.read_text())
    document["version"] = version
    if version == 1:  # version 2 added gradient_of
        for op in document["ops"]:
            del op["gradient_of"]
    path.write_text(json.dumps(document))
    loaded = load_json(path)
    assert loaded.nodes["b"]["attrs"] is None and loaded.nodes["b"]["kernel_time"] is None


def test_output_shapes_must_give_every_output_a_shape():
    graph = CostGraph()
    graph.add_op("x", output_sizes=(256, 4), output_shapes=[(-1, 8)])
    with pytest.raises(CostGraphError, match="output_shapes must give each of its 2 outputs"):
        graph.validate()


def test_the_untraced_step_is_read_per_device_kind_and_from_the_single_kind_form_saved_before():
    graph = CostGraph()
    assert untraced_steps(graph) == {}
    graph.graph[UNTRACED_STEP] = {"loopback": 5e-3, "virtual": 4e-3}
    assert untraced_steps(graph) == {"loopback": 5e-3, "virtual": 4e-3}
    graph.graph[UNTRACED_STEP] = {"seconds": 5e-3, "kind": "loopback"}  # fidelity inputs of session 31
    assert untraced_steps(graph) == {"loopback": 5e-3}
