"""Fixtures shared by several test modules."""

import json
from pathlib import Path

import pytest

from helpers import feed_function
from tfplace.estimator.perturb import PERTURB_VARIABLE

TEST_DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def saved_graphs():
    """``tests/data/graphs.json``: for each saved test graph its file, loss, train op and placeholders."""
    return json.loads((TEST_DATA / "graphs.json").read_text())


@pytest.fixture
def load_saved_graph(saved_graphs):
    """``load_saved_graph(name, batch_size=4) -> (tf.Graph, entry, feeds)``: a fresh graph read from
    ``tests/data/<name>.meta``, its ``graphs.json`` entry, and a feed dict of fixed random data
    (integer placeholders get labels in ``0..2``)."""
    from tfplace.tf_graph.importer import load_graph

    def load(name, batch_size=4):
        entry = saved_graphs[name]
        feeds = feed_function(entry)(batch_size)
        return load_graph(TEST_DATA / entry["file"]), entry, feeds

    return load


@pytest.fixture
def unperturbed(monkeypatch):
    """Profiles exactly as traced, also when the suite runs under ``TFPLACE_PERTURB_PROFILES``: for
    tests that feed the profiler fixed traces and check its arithmetic."""
    monkeypatch.delenv(PERTURB_VARIABLE, raising=False)
