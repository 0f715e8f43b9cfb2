"""The profile cache: hits skip TensorFlow, any change to the graph misses, writes are atomic."""

import os
import re

import numpy as np
import pytest

from tfplace.estimator.cache import ProfileCache, graph_fingerprint, profile_key
from tfplace.estimator.profiler import RepeatPolicy, profile_graph

FAST = {
    "batch_sizes": (1, 2),
    "warmup_steps": 0,
    "traced_steps": 1,
    "repeats": RepeatPolicy(sessions=1),
    "process": "this",
}
"""The least profiling that exercises the cache: one session, in this process (a worker's start
takes seconds), of one traced step per batch size."""


def small_graph(units=3):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        weights = tf.compat.v1.get_variable("w", [4, units])
        loss = tf.reduce_sum(tf.matmul(x, weights), name="loss")
    return graph, loss


def feeds(batch_size):
    return {"x": np.ones((batch_size, 4), np.float32)}


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_a_second_profiling_run_reads_the_cache_without_running_tensorflow(tmp_path, monkeypatch):
    graph, loss = small_graph()
    first = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST)
    assert not first.from_cache
    assert len(list(tmp_path.iterdir())) == 1

    import tensorflow as tf

    def refuse(*args, **kwargs):
        raise AssertionError("TensorFlow was run although the profile is cached")

    monkeypatch.setattr(tf.compat.v1, "Session", refuse)
    second = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST)
    assert second.from_cache
    assert second.costs == first.costs
    assert second.key == first.key


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_a_changed_graph_misses_the_cache_and_is_profiled_again(tmp_path):
    graph, loss = small_graph(units=3)
    first = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST)
    changed, changed_loss = small_graph(units=5)
    second = profile_graph(changed, changed_loss, feeds, cache_dir=tmp_path, **FAST)
    assert not second.from_cache
    assert second.key != first.key
    assert second.costs[2]["MatMul"].output_sizes == (2 * 5 * 4,)
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_ops_the_step_does_not_run_do_not_change_the_key(tmp_path):
    import tensorflow as tf

    graph, loss = small_graph()
    first = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST)
    with graph.as_default():
        tf.compat.v1.summary.scalar("loss", loss)
    assert profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST).key == first.key


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_other_batch_sizes_step_counts_or_statistics_miss_the_cache(tmp_path):
    graph, loss = small_graph()
    first = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **FAST)
    other_batches = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **{**FAST, "batch_sizes": (1, 3)})
    other_steps = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **{**FAST, "traced_steps": 2})
    median = RepeatPolicy(statistic="median", sessions=1)
    other_statistic = profile_graph(graph, loss, feeds, cache_dir=tmp_path, **{**FAST, "repeats": median})
    assert len({first.key, other_batches.key, other_steps.key, other_statistic.key}) == 4
    assert not other_batches.from_cache and not other_steps.from_cache and not other_statistic.from_cache


@pytest.mark.tensorflow
def test_the_fingerprint_ignores_devices_but_not_the_graph():
    graph, _ = small_graph()
    placed = graph.as_graph_def()
    for node in placed.node:
        node.device = "/device:CPU:1"
    assert graph_fingerprint(placed) == graph_fingerprint(graph.as_graph_def())
    assert graph_fingerprint(small_graph(units=4)[0].as_graph_def()) != graph_fingerprint(
        graph.as_graph_def()
    )


def test_an_interrupted_write_leaves_no_cache_file(tmp_path, monkeypatch):
    cache = ProfileCache(tmp_path)

    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        cache.store("abc", {"costs": list(range(1000))})
    assert list(tmp_path.iterdir()) == []
    assert cache.load("abc") is None


def test_a_stored_document_is_read_back_under_its_key(tmp_path):
    cache = ProfileCache(tmp_path / "profiles")
    cache.store("abc", {"batch_sizes": [1, 2]})
    assert cache.load("abc") == {"batch_sizes": [1, 2]}
    assert cache.load("other") is None


def test_an_unreadable_entry_is_reported_and_treated_as_absent(tmp_path):
    cache = ProfileCache(tmp_path)
    cache.path("abc").write_text('{"cache_format": 1, "content": {"trunc')
    with pytest.warns(UserWarning, match="unreadable"):
        assert cache.load("abc") is None


class _FakeGraphDef:
    """Enough of a GraphDef for the key: serializes to fixed bytes."""

    def __init__(self, data=b"graph"):
        self.data = data
        self.node = []
        self.library = type("Library", (), {"function": []})()

    def CopyFrom(self, other):
        self.data = other.data

    def SerializeToString(self, deterministic=False):
        return self.data


def test_the_key_changes_with_any_setting():
    graph_def = _FakeGraphDef()
    base = profile_key(graph_def, {"batch_sizes": [1, 2], "traced_steps": 5})
    assert base == profile_key(_FakeGraphDef(), {"traced_steps": 5, "batch_sizes": [1, 2]})
    assert base != profile_key(graph_def, {"batch_sizes": [1, 2, 4], "traced_steps": 5})
    assert base != profile_key(_FakeGraphDef(b"other"), {"batch_sizes": [1, 2], "traced_steps": 5})


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_an_empty_cache_dir_means_no_cache_in_python_as_on_the_command_line(tmp_path, monkeypatch):
    from tfplace.api import estimate_costs

    monkeypatch.chdir(tmp_path)
    graph, loss = small_graph()

    estimate = estimate_costs(graph, loss, feeds, 4, profile_batch_sizes=(1, 2), cache_dir="", progress=False)

    assert not estimate.profile.from_cache
    assert list(tmp_path.iterdir()) == []  # nothing written into the working directory


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_a_cached_profile_says_how_long_reading_it_took_and_that_measuring_took_longer_then(
    tmp_path, capsys, python_program
):
    from tfplace.api import estimate_costs

    graph, loss = small_graph()
    options = {"profile_batch_sizes": (1, 2), "warmup_steps": 0, "traced_steps": 1, "cache_dir": tmp_path}
    estimate_costs(graph, loss, feeds, 4, **options)
    measured = capsys.readouterr().err
    estimate_costs(graph, loss, feeds, 4, **options)
    read = capsys.readouterr().err

    assert re.search(r"tfplace: profile measured in [\d.]+ s\n", measured)
    assert re.search(
        r"tfplace: profile read from the cache in [\d.]+ s \(measured in [\d.]+ s when it was stored\)\n",
        read,
    )
