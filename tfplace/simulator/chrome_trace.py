"""A simulated schedule as a Chrome trace (catapult Trace Event Format), for chrome://tracing or Perfetto.

Layout: one process per device, named by the device, whose ``ops`` thread shows each op as a
complete (``"X"``) event and whose ``memory`` counter (``"C"``) shows the bytes in use; one process
``transfers`` with a thread per link direction (``GPU:0 -> GPU:1``) showing each tensor sent.
Times are microseconds from the start of the step.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfplace.core.costgraph import atomic_write_text
from tfplace.core.devices import DeviceSet
from tfplace.core.simulated_step import SimulationResult

__all__ = ["chrome_trace", "to_chrome_trace"]

_OPS_THREAD = 1


def to_chrome_trace(result: SimulationResult, devices: DeviceSet, path: str | os.PathLike[str]) -> None:
    """Write :func:`chrome_trace` of ``result`` as JSON to ``path`` (atomically)."""
    atomic_write_text(path, json.dumps(chrome_trace(result, devices), separators=(",", ":")))


def chrome_trace(result: SimulationResult, devices: DeviceSet) -> dict[str, Any]:
    """The trace of a result simulated with ``record=True`` on ``devices``, as a JSON-ready dict.

    Raises
    ------
    ValueError
        When ``result`` holds no schedule (simulated without ``record=True``) or was simulated on
        another number of devices.
    """
    schedule = result.schedule
    if schedule is None:
        raise ValueError("the result has no schedule to trace: simulate it with record=True")
    count = len(devices.all_devices)
    if len(result.busy_time) != count:
        raise ValueError(f"the result covers {len(result.busy_time)} devices but the device set has {count}")
    labels = _labels(devices)
    used = {task.device for task in schedule.ops}
    shown = [d for d in range(count) if d < len(devices) or d in used or schedule.memory[d].bytes.any()]
    events: list[dict[str, Any]] = []
    for rank, d in enumerate(shown):
        events += _metadata(d + 1, devices.all_devices[d].name, rank, {_OPS_THREAD: "ops"})
        trace = schedule.memory[d]
        events += [
            {
                "name": "memory",
                "ph": "C",
                "ts": _us(t),
                "pid": d + 1,
                "tid": _OPS_THREAD,
                "args": {"bytes": int(b)},
            }
            for t, b in zip(trace.times.tolist(), trace.bytes.tolist())
        ]
    events += [
        _complete(task.op, "op", task.start, task.end, task.device + 1, _OPS_THREAD, {})
        for task in schedule.ops
    ]
    routes = {
        route: tid for tid, route in enumerate(dict.fromkeys((t.src, t.dst) for t in schedule.transfers), 1)
    }
    transfers_pid = count + 1
    threads = {tid: f"{labels[src]} -> {labels[dst]}" for (src, dst), tid in routes.items()}
    events += _metadata(transfers_pid, "transfers", len(shown), threads)
    events += [
        _complete(
            task.producer if task.slot is None else f"{task.producer}:{task.slot}",
            "transfer",
            task.start,
            task.end,
            transfers_pid,
            routes[task.src, task.dst],
            {
                "bytes": task.bytes,
                "from": devices.all_devices[task.src].name,
                "to": devices.all_devices[task.dst].name,
            },
        )
        for task in schedule.transfers
    ]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "tfplace.simulator", "makespan_seconds": result.makespan},
    }


def _labels(devices: DeviceSet) -> list[str]:
    """Short device names (``GPU:0``) on one host, the devices' own names across hosts."""
    specs = [d.spec for d in devices.all_devices]
    if len({spec.host for spec in specs}) == 1:
        return [f"{spec.kind}:{spec.index}" for spec in specs]
    return [d.name for d in devices.all_devices]


def _us(seconds: float) -> float:
    return seconds * 1e6


def _complete(
    name: str, category: str, start: float, end: float, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": _us(start),
        "dur": _us(end - start),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _metadata(pid: int, name: str, rank: int, threads: dict[int, str]) -> list[dict[str, Any]]:
    """Events naming a process and its threads and fixing their order on screen."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": rank}},
    ]
    for tid, thread in threads.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": thread}})
        events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )
    return events
