"""The cost graph schema: building, merging edges, validation and the JSON form."""

import json
import os

import pytest

from tfplace.costgraph import CostGraph, CostGraphError, ccr, load_json, op_memory, save_json
from tfplace.transfer import TransferModel


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
