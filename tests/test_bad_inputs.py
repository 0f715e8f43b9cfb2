"""Bad inputs get a clear error naming the problem, or a documented fallback with a warning.

``docs/bad_inputs.md`` lists every bad input tried, what tfplace does and the test that proves it
(here or in the module that already covered it).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tfplace.costgraph import CostGraph, CostGraphError, load_json, save_json
from tfplace.devices import DeviceError, DeviceName, DeviceSet
from tfplace.placer import PLACERS, place_cost_graph, placer_function
from tfplace.simulator import simulate
from tfplace.synthetic import random_dag


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


@pytest.mark.parametrize("placer", sorted(PLACERS))
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


@pytest.mark.parametrize("placer", sorted(PLACERS))
def test_too_little_total_memory_places_every_op_and_warns_with_each_overcommitted_device(placer):
    graph = random_dag(60, seed=3, group_fraction=0.3)
    devices = gpus(3, 2_000_000)
    placement = place_cost_graph(graph, devices, placer, simulate=False)

    assert set(placement.assignment) == set(graph.nodes)
    assert placement.warnings[0].startswith("the graph needs at least")
    reported = {}
    for warning in placement.warnings:
        match = re.fullmatch(
            r"(\S+) is overcommitted by ([\d,]+) bytes \(([\d,]+) placed on ([\d,]+)\)", warning
        )
        if match:
            reported[match.group(1)] = [int(match.group(i).replace(",", "")) for i in (2, 3, 4)]
    over = {name: used for name, used in placement.memory.items() if used > 2_000_000}
    assert over and reported == {name: [used - 2_000_000, used, 2_000_000] for name, used in over.items()}


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
        (lambda d: d.update(version=2), r"cost graph version 2, this tfplace reads 1"),
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
