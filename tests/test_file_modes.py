"""Files tfplace writes honour the umask, as files other tools write do (not the 0600 of a temporary file)."""

import os
import stat

import pytest

from helpers import chain_graph
from tfplace.core.costgraph import save_json
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.estimator.cache import ProfileCache
from tfplace.simulator import simulate, to_chrome_trace


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def test_placements_cost_graphs_traces_and_cached_profiles_get_the_mode_the_umask_allows(tmp_path, umask):
    graph = chain_graph([1.0, 2.0], [10])
    devices = DeviceSet.parse("/device:GPU:0", "1GB")
    placement = Placement({"o0": "/device:GPU:0", "o1": "/device:GPU:0"}, devices)

    placement.save(tmp_path / "placement.json")
    save_json(graph, tmp_path / "costs.json.gz")
    to_chrome_trace(
        simulate(graph, placement.assignment, devices, record=True), devices, tmp_path / "step.json"
    )
    cached = ProfileCache(tmp_path / "cache").store("key", {"costs": {}})

    for path in (tmp_path / "placement.json", tmp_path / "costs.json.gz", tmp_path / "step.json", cached):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
