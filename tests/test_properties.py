"""Properties every placer of ``PLACERS`` has on random DAGs with co-location groups and memory limits.

Memory is a soft constraint (best effort when nothing fits), so "memory limits are honored" is
proved under a sufficient condition per placer, in the static model every placer shares (a device
holds its ops' resident bytes plus the largest temporary bytes among them). With ``m`` target
devices of ``C`` bytes each, ``S`` the resident bytes of the ops the targets can run, ``R`` the
largest resident bytes of one co-location group (an op outside any group is a group of its own)
and ``T`` the largest temporary bytes:

* ``dfs_topo`` fills devices in order and moves on when a group does not fit: a device left behind
  holds more than ``C - R - T``, so with ``C >= S/m + R + T`` it never runs out of devices;
* ``m_topo`` fills to its uniform cap (which may be below what a group needs); a group that fits
  under no cap goes to the least used device, which holds at most ``S/m + T`` before it: with
  ``C >= S/m + R + 2T`` it still fits;
* ``order_place`` and ``celeritas`` place whole clusters, each with the groups it pulls in (``U``
  bytes at most, from the fusion): the device holding the least always has room when
  ``C >= S/m + U + T``;
* ``single`` fits when ``C >= S + T`` on its one device;
* ``m_etf`` and ``m_sct`` track memory over time (outputs freed, tensors received): at no time can
  a device hold more than every op's persistent bytes and outputs plus one temporary, so they
  never need best effort when that fits; and where they report no best-effort op, the memory
  they tracked stayed within every device;
* ``metis`` ignores memory by design: it reports every overcommitted device instead, as every
  placer does.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import reported_overcommits
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceName, DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import cpd_topo_order
from tfplace.core.synthetic import random_dag
from tfplace.placer import PLACERS, place_cost_graph, placer_function
from tfplace.placer.celeritas import DEFAULT_EXPLORATION_RANGE
from tfplace.placer.fusion import fuse

#: Placers of whole ops (``data_parallel`` splits ops into pieces: tests/test_split_*.py).
ALL_PLACERS = sorted(set(PLACERS) - {"data_parallel", "layerwise"})
#: Placers whose memory warnings come from the static estimate (auto judges memory by simulating).
STATIC_MEMORY_PLACERS = [p for p in ALL_PLACERS if p != "auto"]
FUSING = ("celeritas", "order_place")
REPOSITORY = Path(__file__).resolve().parents[1]

#: Device sets: one host of GPUs, GPUs with a CPU, and two hosts (one fallback CPU each).
DEVICE_SPECS = (
    "/device:GPU:0",
    "/device:GPU:0-2",
    "/device:GPU:0-3",
    "/device:GPU:0-1,/device:CPU:0",
    "/job:worker/task:0-1/device:GPU:0-1",
)
GPU_ONLY_SPECS = tuple(spec for spec in DEVICE_SPECS if "CPU" not in spec)


@st.composite
def random_graphs(draw) -> CostGraph:
    """A random DAG of up to 48 ops (zero compute times and empty graphs included), a third of
    them in co-location groups at most, a tenth without a GPU kernel at most; temporary bytes are
    scaled up to 40 times, so that they matter as much as outputs."""
    graph = random_dag(
        draw(st.integers(0, 48)),
        seed=draw(st.integers(0, 2**32 - 1)),
        average_degree=draw(st.sampled_from([1.0, 2.0, 3.0])),
        locality=draw(st.sampled_from([3, 20])),
        group_fraction=draw(st.sampled_from([0.0, 0.3, 0.6])),
        cpu_only_fraction=draw(st.sampled_from([0.0, 0.1])),
    )
    scale = draw(st.sampled_from([1, 10, 40]))
    for op in graph:
        graph.nodes[op]["temporary_bytes"] *= scale
    return graph


def devices_for(spec: str, graph: CostGraph, fraction: float) -> DeviceSet:
    """The devices of ``spec``, each with ``fraction`` of an even share of the graph's static bytes
    (at least 1 byte)."""
    count = len(DeviceSet.parse(spec, 1))
    total = sum(
        attrs["persistent_bytes"] + sum(attrs["output_sizes"]) + attrs["temporary_bytes"]
        for _, attrs in graph.nodes(data=True)
    )
    return DeviceSet.parse(spec, max(1, int(fraction * total / count)))


# -- what the ops need, computed from the cost graph alone ------------------------------------------


@dataclass(frozen=True)
class Demand:
    """Static memory the target devices must hold: ``S``, ``R`` and ``T`` of the module docstring,
    and each op's group (key) with the group's resident bytes, ``None`` for groups no target runs."""

    total: int
    largest_group: int
    largest_temporary: int
    group_of: dict[str, str]
    group_bytes: dict[str, int | None]


def demand(graph: CostGraph, devices: DeviceSet) -> Demand:
    """What the target devices of ``devices`` must hold of ``graph`` (memory sizes unused)."""
    members = defaultdict(list)
    for op, group in graph.nodes(data="colocation_group"):
        members[f"group:{group}" if group is not None else f"op:{op}"].append(op)
    targets = {device.kind for device in devices}
    group_of, group_bytes, temporary = {}, {}, [0]
    for key, ops in members.items():
        kinds = [set(graph.nodes[op]["device_kinds"]) for op in ops if graph.nodes[op]["device_kinds"]]
        runnable = not kinds or bool(set.intersection(*kinds) & targets)
        group_of.update(dict.fromkeys(ops, key))
        group_bytes[key] = (
            sum(graph.nodes[op]["persistent_bytes"] + sum(graph.nodes[op]["output_sizes"]) for op in ops)
            if runnable
            else None
        )
        if runnable:
            temporary.extend(graph.nodes[op]["temporary_bytes"] for op in ops)
    resident = [b for b in group_bytes.values() if b is not None]
    return Demand(sum(resident), max(resident, default=0), max(temporary), group_of, group_bytes)


def static_memory(graph: CostGraph, assignment: dict[str, str]) -> dict[str, int]:
    """Bytes each device holds in the static model: its ops' resident bytes plus their largest
    temporary bytes, by device name."""
    resident: dict[str, int] = defaultdict(int)
    temporary: dict[str, int] = defaultdict(int)
    for op, attrs in graph.nodes(data=True):
        device = assignment[op]
        resident[device] += attrs["persistent_bytes"] + sum(attrs["output_sizes"])
        temporary[device] = max(temporary[device], attrs["temporary_bytes"])
    return {device: resident[device] + temporary[device] for device in resident}


def largest_cluster(graph: CostGraph, devices: DeviceSet, cluster_memory: float, need: Demand) -> int:
    """``U``: the most resident bytes one cluster of the fusion commits, with every group it touches."""
    indexed = index_graph(graph, devices.typical_link)
    fusion = fuse(indexed, cpd_topo_order(indexed), DEFAULT_EXPLORATION_RANGE, cluster_memory)
    largest = 0
    for members in fusion.members:
        touched = {need.group_of[indexed.names[op]] for op in members}
        largest = max(largest, sum(need.group_bytes[g] or 0 for g in touched))
    return largest


def sufficient_memory(placer: str, graph: CostGraph, devices: DeviceSet, cluster_memory: float) -> int:
    """Bytes per device under which ``placer`` must honor every device's memory on a set of
    targets of one kind (module docstring); the memory of ``devices`` is not used."""
    need = demand(graph, devices)
    share = need.total / len(devices)
    if placer == "dfs_topo":
        bound = share + need.largest_group + need.largest_temporary
    elif placer == "m_topo":
        bound = share + need.largest_group + 2 * need.largest_temporary
    elif placer in FUSING:
        bound = share + largest_cluster(graph, devices, cluster_memory, need) + need.largest_temporary
    elif placer == "single":
        bound = need.total + need.largest_temporary
    else:  # m_etf, m_sct: everything any device could hold at once
        bound = sum(
            attrs["persistent_bytes"] + sum(attrs["output_sizes"]) for _, attrs in graph.nodes(data=True)
        ) + max((t for _, t in graph.nodes(data="temporary_bytes")), default=0)
    return max(1, math.ceil(bound))


# -- properties ----------------------------------------------------------------------------------


@pytest.mark.parametrize("placer", ALL_PLACERS)
@settings(max_examples=50, deadline=None)
@given(
    graph=random_graphs(),
    spec=st.sampled_from(DEVICE_SPECS),
    fraction=st.sampled_from([0.3, 1.0, 3.0, 100.0]),
)
def test_every_op_is_placed_whole_with_its_group_on_a_device_kind_that_can_run_it(
    placer, graph, spec, fraction
):
    devices = devices_for(spec, graph, fraction)
    placement = place_cost_graph(graph, devices, placer, simulate=False)

    assert set(placement.assignment) == set(graph.nodes)
    names = {d.name for d in devices.all_devices}
    assert set(placement.assignment.values()) <= names
    by_group = defaultdict(set)
    for op, attrs in graph.nodes(data=True):
        device = placement.assignment[op]
        if attrs["colocation_group"] is not None:
            by_group[attrs["colocation_group"]].add(device)
        if attrs["device_kinds"] is not None:
            assert DeviceName.parse(device).kind in attrs["device_kinds"], op
    assert all(len(devices_of_group) == 1 for devices_of_group in by_group.values())


@pytest.mark.parametrize("placer", STATIC_MEMORY_PLACERS)
@settings(max_examples=40, deadline=None)
@given(graph=random_graphs(), spec=st.sampled_from(DEVICE_SPECS), fraction=st.sampled_from([0.2, 0.6, 2.0]))
def test_every_overcommitted_device_and_only_those_are_reported_with_their_bytes(
    placer, graph, spec, fraction
):
    devices = devices_for(spec, graph, fraction)
    placement = place_cost_graph(graph, devices, placer, simulate=False, memory_model="static")

    capacity = {d.name: d.memory for d in devices.devices}
    held = static_memory(graph, placement.assignment)
    assert {name: used for name, used in placement.memory.items() if used} == {
        n: b for n, b in held.items() if b
    }
    over = {name: used for name, used in held.items() if name in capacity and used > capacity[name]}
    reported = reported_overcommits(placement.warnings)
    assert reported == {name: (used - capacity[name], used, capacity[name]) for name, used in over.items()}


@pytest.mark.parametrize("placer", [p for p in ALL_PLACERS if p != "metis"])
@settings(max_examples=50, deadline=None)
@given(
    graph=random_graphs(),
    spec=st.sampled_from(GPU_ONLY_SPECS),
    cluster_fraction=st.sampled_from([0.05, 0.25, 1.0]),
    slack=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_memory_limits_are_honored_when_every_device_holds_the_placers_sufficient_bytes(
    placer, graph, spec, cluster_fraction, slack
):
    shape = DeviceSet.parse(spec, 1)
    cluster_memory = max(1.0, cluster_fraction * demand(graph, shape).total / len(shape))
    options = {"cluster_memory": cluster_memory} if placer in FUSING else {}
    options["memory_model"] = "static"
    bound = sufficient_memory(placer, graph, shape, cluster_memory)
    devices = DeviceSet.parse(spec, bound + int(slack * bound))
    placement = place_cost_graph(graph, devices, placer, simulate=False, **options)

    assert placement.warnings == []
    held = static_memory(graph, placement.assignment)
    assert all(held.get(d.name, 0) <= d.memory for d in devices)


@pytest.mark.parametrize("placer", ["m_etf", "m_sct"])
@settings(max_examples=40, deadline=None)
@given(graph=random_graphs(), spec=st.sampled_from(GPU_ONLY_SPECS), fraction=st.sampled_from([0.3, 0.7, 1.5]))
def test_list_schedulers_keep_their_tracked_memory_within_each_device_unless_they_report_best_effort(
    placer, graph, spec, fraction
):
    devices = devices_for(spec, graph, fraction)
    output = placer_function(placer)(index_graph(graph, devices.typical_link), devices)
    if not output.details["best_effort_ops"]:
        assert all(output.details["peak_memory"].get(d.name, 0) <= d.memory for d in devices)


@pytest.mark.parametrize("placer", FUSING)
@settings(max_examples=40, deadline=None)
@given(graph=random_graphs(), spec=st.sampled_from(DEVICE_SPECS), fraction=st.sampled_from([0.3, 3.0]))
def test_the_coarse_graph_of_fused_clusters_is_acyclic_and_covers_every_op_once(
    placer, graph, spec, fraction
):
    devices = devices_for(spec, graph, fraction)
    output = placer_function(placer)(index_graph(graph, devices.typical_link), devices)
    coarse = output.details["coarse_graph"]
    assert nx.is_directed_acyclic_graph(coarse)
    members = [op for _, ops in coarse.nodes(data="members") for op in ops]
    assert sorted(members) == sorted(graph.nodes)


@pytest.mark.parametrize("placer", ALL_PLACERS)
@settings(max_examples=15, deadline=None)
@given(graph=random_graphs(), spec=st.sampled_from(DEVICE_SPECS), fraction=st.sampled_from([0.3, 3.0]))
def test_the_same_input_gives_the_same_placement(placer, graph, spec, fraction):
    devices = devices_for(spec, graph, fraction)
    first = place_cost_graph(graph, devices, placer)
    second = place_cost_graph(graph.copy(), devices, placer)
    assert first.assignment == second.assignment
    assert first.step_time == second.step_time
    assert first.warnings == second.warnings


def critical_path(graph: CostGraph) -> float:
    """The longest chain of compute times, transfers left out."""
    finish: dict[str, float] = {}
    for op in nx.topological_sort(graph):
        start = max((finish[p] for p in graph.predecessors(op)), default=0.0)
        finish[op] = start + graph.nodes[op]["compute_time"]
    return max(finish.values(), default=0.0)


@pytest.mark.parametrize("placer", ALL_PLACERS)
@settings(max_examples=30, deadline=None)
@given(graph=random_graphs(), spec=st.sampled_from(DEVICE_SPECS), fraction=st.sampled_from([0.3, 3.0]))
def test_the_simulated_step_is_no_shorter_than_the_critical_path_or_an_even_split_of_compute(
    placer, graph, spec, fraction
):
    devices = devices_for(spec, graph, fraction)
    placement = place_cost_graph(graph, devices, placer)
    compute = sum(t for _, t in graph.nodes(data="compute_time"))
    bound = max(critical_path(graph), compute / len(devices.all_devices))
    assert placement.step_time is not None
    assert placement.step_time >= bound * (1 - 1e-12)


#: Graphs and devices placed in-process and in fresh processes with other hash seeds.
_SEEDED_CASES = [(40, 11, "/device:GPU:0-2"), (30, 12, "/device:GPU:0-1,/device:CPU:0")]

_PLACE_IN_SUBPROCESS = """
import json, sys
from tfplace.core.devices import DeviceSet
from tfplace.placer import PLACERS, place_cost_graph
from tfplace.core.synthetic import random_dag
cases = json.loads(sys.argv[1])
print(json.dumps([
    {p: place_cost_graph(random_dag(n, seed=s, group_fraction=0.3, cpu_only_fraction=0.1),
                         DeviceSet.parse(spec, 4_000_000), p).assignment for p in sorted(PLACERS) if p not in ("data_parallel", "layerwise")}
    for n, s, spec in cases
]))
"""


def test_placements_do_not_depend_on_the_processs_hash_seed():
    expected = [
        {
            p: place_cost_graph(
                random_dag(n, seed=s, group_fraction=0.3, cpu_only_fraction=0.1),
                DeviceSet.parse(spec, 4_000_000),
                p,
            ).assignment
            for p in ALL_PLACERS
        }
        for n, s, spec in _SEEDED_CASES
    ]
    for hash_seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", _PLACE_IN_SUBPROCESS, json.dumps(_SEEDED_CASES)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert json.loads(result.stdout) == expected, f"PYTHONHASHSEED={hash_seed}"


@pytest.mark.parametrize("placer", ["dfs_topo", "m_topo", *FUSING])
def test_at_its_sufficient_bytes_a_placer_splits_a_graph_no_device_could_hold_alone(placer):
    graph = random_dag(200, seed=5, group_fraction=0.3)
    devices = DeviceSet.parse("/device:GPU:0-3", 1)
    need = demand(graph, devices)
    cluster_memory = need.total / 16
    bound = sufficient_memory(placer, graph, devices, cluster_memory)
    options = {"cluster_memory": cluster_memory} if placer in FUSING else {}
    placement = place_cost_graph(
        graph,
        DeviceSet.parse("/device:GPU:0-3", bound),
        placer,
        simulate=False,
        memory_model="static",
        **options,
    )

    assert bound < need.total / 2
    assert placement.warnings == []
    assert len(set(placement.assignment.values())) >= 3
