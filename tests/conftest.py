"""Fixtures shared by several test modules."""

import json
import types
from pathlib import Path

import pytest
from absl import flags, logging
from hypothesis import settings

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
def python_program(monkeypatch):
    """What a Python program that never configured absl sees: absl's flags not parsed (whatever
    other tests of this process parsed), absl's default WARNING verbosity, no ``TFPLACE_QUIET``."""
    from tfplace.core import progress

    monkeypatch.setattr(progress, "flags", types.SimpleNamespace(FLAGS=flags.FlagValues()))
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    before = logging.get_verbosity()
    logging.set_verbosity(logging.WARNING)
    yield
    logging.set_verbosity(before)


@pytest.fixture(autouse=True)
def profiling_is_marked(request, monkeypatch):
    """A test that profiles a graph in this process carries the ``profiles`` marker, and fails
    without it: CI's second run of the suite, under ``TFPLACE_PERTURB_PROFILES``, runs only the
    tests marked so (``.ci/run``), since a profile's perturbation changes nothing else. (A test that
    profiles in a subprocess it starts is marked by hand.)"""
    if request.node.get_closest_marker("profiles") is not None:
        yield
        return
    from tfplace.estimator import profiler

    profiled = []
    seed = profiler.perturbation_seed

    def recorded_seed():
        profiled.append(True)
        return seed()

    monkeypatch.setattr(profiler, "perturbation_seed", recorded_seed)
    yield
    if profiled:
        pytest.fail(
            "this test profiles a graph: mark it @pytest.mark.profiles so the perturbed CI run covers it"
        )


@pytest.fixture
def unperturbed(monkeypatch):
    """Profiles exactly as traced, also when the suite runs under ``TFPLACE_PERTURB_PROFILES``: for
    tests that feed the profiler fixed traces and check its arithmetic."""
    monkeypatch.delenv(PERTURB_VARIABLE, raising=False)


settings.register_profile("reproducible", derandomize=True, database=None)
settings.load_profile("reproducible")
"""Property tests draw the same examples in every run and on every machine: a red run is
reproducible, and a green one does not depend on which examples chance picked."""
