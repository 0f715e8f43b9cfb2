"""Writing a placed graph: graph files that keep the devices, and a TensorBoard event file that shows them."""

import pytest

from tfplace.tf_graph.export import write_graph, write_tensorboard_graph
from tfplace.tf_graph.importer import load_graph

pytestmark = pytest.mark.tensorflow


def placed_cnn(load_saved_graph):
    """The cnn test graph with every op on /device:CPU:0 or /device:CPU:1 (by op name, groups kept)."""
    from tfplace.tf_graph.constraints import colocation_groups

    graph, _, _ = load_saved_graph("cnn")
    groups = colocation_groups(graph)
    for op in graph.get_operations():
        op._set_device(f"/device:CPU:{len(groups.get(op.name, op.name)) % 2}")
    return graph


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt", ".meta"])
def test_a_written_graph_reads_back_with_every_op_on_its_device(load_saved_graph, tmp_path, suffix):
    graph = placed_cnn(load_saved_graph)
    path = tmp_path / f"placed{suffix}"

    write_graph(graph, path)

    again = load_graph(path)
    assert {op.name: op.device for op in again.get_operations()} == {
        op.name: op.device for op in graph.get_operations()
    }
    if suffix == ".meta":  # collections come along: the train op is found again
        assert [op.name for op in again.get_collection("train_op")] == [
            op.name for op in graph.get_collection("train_op")
        ]


def test_a_graph_is_written_only_as_pb_pbtxt_or_meta(load_saved_graph, tmp_path):
    graph = placed_cnn(load_saved_graph)
    with pytest.raises(ValueError, match=r"\.pb, \.pbtxt, \.meta, not \.json"):
        write_graph(graph, tmp_path / "placed.json")


def test_the_tensorboard_event_file_holds_the_graph_with_its_devices(load_saved_graph, tmp_path):
    import tensorflow as tf

    graph = placed_cnn(load_saved_graph)

    first = write_tensorboard_graph(graph, tmp_path / "tb")
    second = write_tensorboard_graph(graph, tmp_path / "tb")  # a second one does not overwrite the first

    assert first != second
    graphs = []
    for event in tf.compat.v1.train.summary_iterator(first):
        if event.graph_def:
            graph_def = tf.compat.v1.GraphDef()
            graph_def.ParseFromString(event.graph_def)
            graphs.append(graph_def)
    (written,) = graphs
    assert {node.name: node.device for node in written.node} == {
        op.name: op.device for op in graph.get_operations()
    }
    assert {node.device for node in written.node} == {"/device:CPU:0", "/device:CPU:1"}
