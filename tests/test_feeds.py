"""Feeds for a saved graph: random data from the placeholders with the batch set, or an .npz of real inputs."""

import numpy as np
import pytest

from tfplace.tf_graph.feeds import FeedError, needed_placeholders, npz_feed_fn, random_feed_fn

pytestmark = pytest.mark.tensorflow


def test_the_step_needs_the_placeholders_its_fetches_depend_on(load_saved_graph):
    graph, entry, _ = load_saved_graph("cnn")

    specs = needed_placeholders(graph, entry["train_op"])

    assert [(p.name, str(p.dtype), p.shape) for p in specs] == [
        ("images", "float32", (None, 8, 8, 3)),
        ("labels", "int32", (None,)),
    ]


def test_random_data_has_the_placeholders_dtypes_and_shapes_with_the_batch_dimension_set(load_saved_graph):
    graph, entry, _ = load_saved_graph("cnn")
    feed_fn = random_feed_fn(needed_placeholders(graph, entry["train_op"]), int_high=3, seed=7)

    feeds = feed_fn(16)

    assert feeds["images:0"].shape == (16, 8, 8, 3) and feeds["images:0"].dtype == np.float32
    assert feeds["labels:0"].shape == (16,) and feeds["labels:0"].dtype == np.int32
    assert set(np.unique(feeds["labels:0"])) <= {0, 1, 2}
    np.testing.assert_array_equal(feed_fn(16)["images:0"], feeds["images:0"])  # same batch, same data
    assert not np.array_equal(
        random_feed_fn(needed_placeholders(graph, entry["train_op"]), seed=8)(16)["images:0"],
        feeds["images:0"],
    )


def test_an_unknown_dimension_besides_the_first_needs_an_explicit_shape(load_saved_graph):
    graph, entry, _ = load_saved_graph("lstm_v2")  # inputs (4, ?, 5): a fixed batch, an unknown time
    placeholders = needed_placeholders(graph, entry["train_op"])

    with pytest.raises(FeedError, match=r"'inputs' has shape \(4, \?, 5\).*inputs=4,20,5"):
        random_feed_fn(placeholders)
    feeds = random_feed_fn(placeholders, shapes={"inputs": (4, 7, 5)})(4)

    assert feeds["inputs:0"].shape == (4, 7, 5)
    assert feeds["labels:0"].shape == (4,)


def test_an_explicit_shape_must_fit_the_static_shape_and_name_a_fed_placeholder(load_saved_graph):
    graph, entry, _ = load_saved_graph("cnn")
    placeholders = needed_placeholders(graph, entry["train_op"])

    with pytest.raises(FeedError, match="does not fit its static shape"):
        random_feed_fn(placeholders, shapes={"images": ("B", 9, 8, 3)})
    with pytest.raises(FeedError, match="which the step does not feed; it feeds: images, labels"):
        random_feed_fn(placeholders, shapes={"pixels": ("B", 8, 8, 3)})


def test_real_inputs_give_each_batch_its_first_rows_cycling_when_the_file_has_fewer(
    load_saved_graph, tmp_path
):
    graph, entry, _ = load_saved_graph("cnn")
    images = np.arange(3 * 8 * 8 * 3, dtype=np.float64).reshape(3, 8, 8, 3)
    np.savez(tmp_path / "inputs.npz", images=images, **{"labels:0": np.array([0, 1, 2])})

    feed_fn = npz_feed_fn(needed_placeholders(graph, entry["train_op"]), tmp_path / "inputs.npz")

    feeds = feed_fn(5)
    assert feeds["images:0"].dtype == np.float32
    np.testing.assert_array_equal(feeds["images:0"], images[[0, 1, 2, 0, 1]])
    np.testing.assert_array_equal(feeds["labels:0"], [0, 1, 2, 0, 1])


def test_real_inputs_must_cover_every_placeholder_with_fitting_arrays(load_saved_graph, tmp_path):
    graph, entry, _ = load_saved_graph("cnn")
    placeholders = needed_placeholders(graph, entry["train_op"])
    np.savez(tmp_path / "partial.npz", images=np.zeros((2, 8, 8, 3)))
    np.savez(tmp_path / "floats.npz", images=np.zeros((2, 8, 8, 3)), labels=np.zeros(2))
    np.savez(tmp_path / "shape.npz", images=np.zeros((2, 8, 8)), labels=np.zeros(2, dtype=np.int32))
    (tmp_path / "broken.npz").write_text("not a zip")

    with pytest.raises(FeedError, match=r"no array for placeholders \['labels'\]"):
        npz_feed_fn(placeholders, tmp_path / "partial.npz")
    with pytest.raises(FeedError, match="'labels' has dtype float64; the placeholder takes int32"):
        npz_feed_fn(placeholders, tmp_path / "floats.npz")
    with pytest.raises(
        FeedError, match=r"'images' has shape \(2, 8, 8\); the placeholder takes \(\?, 8, 8, 3\)"
    ):
        npz_feed_fn(placeholders, tmp_path / "shape.npz")
    with pytest.raises(FeedError, match=r"not a readable \.npz file"):
        npz_feed_fn(placeholders, tmp_path / "broken.npz")
