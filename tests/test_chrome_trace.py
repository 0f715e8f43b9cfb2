"""Chrome traces of simulated steps: well-formed Trace Event Format for chrome://tracing and Perfetto."""

import json
from collections import defaultdict
from itertools import pairwise

import numpy as np
import pytest

from helpers import UNIT_LINK, graph_from_edges
from tfplace.core.devices import DeviceSet
from tfplace.simulator import chrome_trace, simulate, to_chrome_trace


@pytest.fixture
def traced(tmp_path):
    """A fork-join graph on two hosts' GPUs (and one host's fallback CPU), traced to a file."""
    devices = DeviceSet.parse(
        "/job:w/task:0-1/device:GPU:0", 10**6, intra_host=UNIT_LINK, inter_host=UNIT_LINK
    )
    graph = graph_from_edges(
        [("r", "x", 4), ("r", "y", 4), ("x", "j", 3), ("y", "j", 3), ("j", "log", 1)],
        {"r": 1, "x": 2, "y": 3, "j": 1, "log": 0.5},
        temporary_bytes={"x": 7, "y": 5},
    )
    cpu = devices.index("/job:w/task:0/device:CPU:0")
    placement = np.array([{"r": 0, "x": 0, "y": 1, "j": 0, "log": cpu}[name] for name in graph.nodes])
    result = simulate(graph, placement, devices, record=True)
    path = tmp_path / "step.json"
    to_chrome_trace(result, devices, path)
    with open(path, encoding="utf-8") as handle:
        return result, json.load(handle)


def test_the_trace_has_the_required_keys_and_non_negative_times(traced):
    _, trace = traced
    assert trace["displayTimeUnit"] in ("ms", "ns")
    for event in trace["traceEvents"]:
        assert {"name", "ph", "pid"} <= set(event)
        assert event["ph"] in ("X", "C", "M")
        if event["ph"] == "X":
            assert {"ts", "dur", "tid", "cat"} <= set(event)
            assert event["ts"] >= 0 and event["dur"] >= 0
        if event["ph"] == "C":
            assert event["ts"] >= 0
            assert all(isinstance(value, int) for value in event["args"].values())


def test_every_event_runs_in_a_named_process_and_thread(traced):
    _, trace = traced
    events = trace["traceEvents"]
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for event in events:
        assert event["pid"] in processes
        if event["ph"] in ("X", "C"):
            assert (event["pid"], event["tid"]) in threads


def test_the_trace_shows_each_op_and_transfer_once_on_rows_that_never_overlap(traced):
    result, trace = traced
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in complete if e["cat"] == "op") == sorted(
        t.op for t in result.schedule.ops
    )
    assert sum(e["cat"] == "transfer" for e in complete) == result.transfers == 3
    rows = defaultdict(list)
    for event in complete:
        rows[event["pid"], event["tid"]].append((event["ts"], event["ts"] + event["dur"]))
    for spans in rows.values():
        spans.sort()
        assert all(end <= start + 1e-6 for (_, end), (start, _) in pairwise(spans))


def test_the_trace_names_devices_and_link_directions(traced):
    _, trace = traced
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and "name" in e["args"]}
    assert {
        "/job:w/task:0/device:GPU:0",
        "/job:w/replica:0/task:0/device:CPU:0",
        "transfers",
    } <= names
    assert "/job:w/task:0/device:GPU:0 -> /job:w/task:1/device:GPU:0" in names


def test_memory_counters_follow_the_simulated_memory(traced):
    result, trace = traced
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert max(e["args"]["bytes"] for e in counters) == result.peak_memory.max()
    assert len(counters) == sum(
        len(m.times) for m in result.schedule.memory[:3]
    )  # fallback CPU of task 1 unused


def test_a_result_without_a_schedule_cannot_be_traced():
    devices = DeviceSet.parse("/device:GPU:0", 10**6)
    result = simulate(graph_from_edges([("a", "b", 1)]), np.array([0, 0]), devices)
    with pytest.raises(ValueError, match="record=True"):
        chrome_trace(result, devices)
