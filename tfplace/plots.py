"""A picture of one simulated step: what each device runs when, what it sends, and its memory over time.

:func:`plot_timeline` draws a :class:`~tfplace.simulator.SimulationResult` recorded with
``record=True`` into a PNG (or any format matplotlib writes, by the file's suffix);
:func:`timeline_figure` returns the figure instead:

- **top, the timeline**: one row per device, labelled with its name, showing its ops as bars
  colored by op type (the op types that take the most time get their own color, the rest share
  a grey); under each device a thinner row of the tensors it *sends*, hatched and colored by the
  receiving device;
- **bottom, the memory**: the bytes each device holds over the step, in the device's color, with
  its capacity as a dashed line of the same color (or noted above the plot when far beyond it),
  and a red cross where a device first runs out of memory.

Rendering uses matplotlib's Agg canvas directly (no ``pyplot``, no display, no global state), and
no TensorFlow.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tfplace.core.devices import DeviceSet
from tfplace.core.simulated_step import Schedule, SimulationResult
from tfplace.core.units import bytes_unit, format_bytes, seconds_unit

__all__ = ["plot_timeline", "timeline_figure"]

#: Op types with their own color; the others are drawn in :data:`_OTHER_COLOR`.
MAX_OP_TYPES = 12

_OTHER_COLOR = "#b0b0b0"
_OP_COLORS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a",
]  # fmt: skip
_DEVICE_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
_CAPACITY_IN_RANGE = 4.0  # a capacity up to this many times the largest peak is drawn as a line


def plot_timeline(
    result: SimulationResult,
    devices: DeviceSet,
    path: str | os.PathLike[str],
    *,
    op_types: Mapping[str, str] | None = None,
    title: str = "",
) -> None:
    """Draw ``result``'s schedule on ``devices`` (:func:`timeline_figure`) into the image file ``path``.

    The suffix of ``path`` picks the format (``.png``, ``.svg``, ``.pdf``).
    """
    timeline_figure(result, devices, op_types=op_types, title=title).savefig(os.fspath(path), dpi=110)


def timeline_figure(
    result: SimulationResult,
    devices: DeviceSet,
    *,
    op_types: Mapping[str, str] | None = None,
    title: str = "",
) -> Figure:
    """The figure of ``result``'s schedule on ``devices``: timeline above, memory below.

    Parameters
    ----------
    result : SimulationResult
        Simulated with ``record=True`` on ``devices``.
    devices : DeviceSet
    op_types : mapping of str to str, optional
        Op name -> op type (a cost graph's ``op_type``), to color ops by type; without it every
        op has its device's color.
    title : str
        Shown above the timeline; the simulated step time is appended.

    Returns
    -------
    matplotlib.figure.Figure
        Its axes are the timeline and the memory plot, in that order.

    Raises
    ------
    ValueError
        When ``result`` has no schedule or covers another number of devices.
    """
    schedule = result.schedule
    if schedule is None:
        raise ValueError("the result has no schedule to plot: simulate it with record=True")
    count = len(devices.all_devices)
    if len(result.busy_time) != count:
        raise ValueError(f"the result covers {len(result.busy_time)} devices but the device set has {count}")
    shown = _shown_devices(schedule, len(devices), count)
    labels = _labels(devices)
    scale, unit = seconds_unit(result.makespan)

    colors = _op_colors(schedule, op_types)
    legend_rows = len(colors) + 1 + len(shown)  # op types, other types, receivers (at most)
    timeline_height = max(0.2 + 0.75 * len(shown), 0.19 * legend_rows)  # inches: rows, or the legend
    figure = Figure(figsize=(13, 1.6 + timeline_height + 3.2), layout="constrained")
    FigureCanvasAgg(figure)
    timeline, memory = figure.subplots(2, 1, sharex=True, height_ratios=[timeline_height, 3.2])
    legend = _draw_timeline(timeline, schedule, shown, labels, colors, op_types, scale)
    _draw_memory(memory, result, devices, shown, labels, scale)
    memory.set_xlabel(f"time since the start of the step [{unit}]")
    memory.set_xlim(0, max(result.makespan * scale, 1e-9) * 1.01)
    heading = f"{title}: " if title else ""
    timeline.set_title(f"{heading}simulated step {result.makespan * scale:.3g} {unit}", loc="left")
    timeline.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    return figure


def _shown_devices(schedule: Schedule, targets: int, count: int) -> list[int]:
    """The placement targets, and the fallback CPUs that ran something or held memory."""
    used = {task.device for task in schedule.ops}
    return [d for d in range(count) if d < targets or d in used or schedule.memory[d].bytes.any()]


def _labels(devices: DeviceSet) -> list[str]:
    """``GPU:0`` on one host, the full names across hosts."""
    specs = [d.spec for d in devices.all_devices]
    if len({spec.host for spec in specs}) == 1:
        return [f"{spec.kind}:{spec.index}" for spec in specs]
    return [d.name for d in devices.all_devices]


def _op_colors(schedule: Schedule, op_types: Mapping[str, str] | None) -> dict[str, str]:
    """Color of each op type that gets one: the types taking the most time in the step."""
    if op_types is None:
        return {}
    seconds: dict[str, float] = defaultdict(float)
    for task in schedule.ops:
        seconds[op_types.get(task.op, "?")] += task.end - task.start
    ranked = sorted(seconds, key=lambda kind: (-seconds[kind], kind))[:MAX_OP_TYPES]
    return dict(zip(ranked, _OP_COLORS))


def _device_color(device: int) -> str:
    return _DEVICE_COLORS[device % len(_DEVICE_COLORS)]


def _draw_timeline(
    axes: Axes,
    schedule: Schedule,
    shown: Sequence[int],
    labels: Sequence[str],
    colors: Mapping[str, str],
    op_types: Mapping[str, str] | None,
    scale: float,
) -> list[Patch]:
    """Ops and sends per device row (device 0 on top); the legend handles."""
    row = {d: rank for rank, d in enumerate(shown)}
    ops: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for task in schedule.ops:
        if task.device in row:
            if op_types is None:
                color = _device_color(task.device)
            else:
                color = colors.get(op_types.get(task.op, "?"), _OTHER_COLOR)
            ops[task.device, color].append((task.start * scale, (task.end - task.start) * scale))
    for (device, color), spans in ops.items():
        axes.broken_barh(spans, (row[device] - 0.42, 0.56), facecolors=color, linewidth=0)
    sends: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for transfer in schedule.transfers:
        if transfer.src in row:
            sends[transfer.src, transfer.dst].append(
                (transfer.start * scale, (transfer.end - transfer.start) * scale)
            )
    for (src, dst), spans in sends.items():
        axes.broken_barh(
            spans,
            (row[src] + 0.18, 0.22),
            facecolors="white",
            edgecolors=_device_color(dst),
            hatch="////",
            linewidth=0.6,
        )
    ticks = [r for d in shown for r in (row[d] - 0.14, row[d] + 0.29)]
    names = [name for d in shown for name in (labels[d], "sends")]
    axes.set_yticks(ticks, names)
    for tick, name in zip(axes.get_yticklabels(), names):
        if name == "sends":
            tick.set_fontsize(7)
            tick.set_color("#555555")
        else:
            tick.set_fontweight("bold")
    axes.set_ylim(len(shown) - 0.5, -0.55)
    axes.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    axes.set_axisbelow(True)

    legend = [Patch(facecolor=color, label=kind) for kind, color in colors.items()]
    if op_types is not None and any(
        op_types.get(task.op, "?") not in colors for task in schedule.ops if task.device in row
    ):
        legend.append(Patch(facecolor=_OTHER_COLOR, label="other op types"))
    receivers = sorted({dst for src, dst in sends})
    legend += [
        Patch(facecolor="white", edgecolor=_device_color(d), hatch="////", label=f"sent to {labels[d]}")
        for d in receivers
    ]
    return legend


def _draw_memory(
    axes: Axes,
    result: SimulationResult,
    devices: DeviceSet,
    shown: Sequence[int],
    labels: Sequence[str],
    scale: float,
) -> None:
    """Bytes in use per device over the step, capacities, and out-of-memory moments."""
    assert result.schedule is not None
    peak = max((int(result.peak_memory[d]) for d in shown), default=0)
    capacities = {d: devices.memory_of(d) for d in shown if d < len(devices)}
    in_range = [c for c in capacities.values() if c <= peak * _CAPACITY_IN_RANGE]
    top = max([peak, *in_range]) or 1
    byte_scale, byte_unit = bytes_unit(top)
    end = result.makespan * scale
    for d in shown:
        trace = result.schedule.memory[d]
        times = np.append(trace.times * scale, end)
        values = np.append(trace.bytes, trace.bytes[-1] if len(trace.bytes) else 0) / byte_scale
        axes.step(times, values, where="post", color=_device_color(d), linewidth=1.3, label=labels[d])
    drawn = {d: c for d, c in capacities.items() if c <= peak * _CAPACITY_IN_RANGE}
    if len(set(drawn.values())) == 1:  # one line for devices of equal memory
        (capacity,) = set(drawn.values())
        axes.axhline(capacity / byte_scale, color="black", linestyle="--", linewidth=1.0, label="capacity")
    else:
        for d, capacity in drawn.items():
            axes.axhline(capacity / byte_scale, color=_device_color(d), linestyle="--", linewidth=1.0)
    index = {device.name: d for d, device in enumerate(devices.all_devices)}
    for event in result.oom:
        point = (event.time * scale, event.bytes_in_use / byte_scale)
        axes.plot(*point, "x", color="red", markersize=9, mew=2)
        label = labels[index[event.device]]
        axes.annotate(label, point, textcoords="offset points", xytext=(5, 5), color="red", fontsize=8)
    above = sorted({c for c in capacities.values() if c > peak * _CAPACITY_IN_RANGE})
    title = "memory in use"
    if above:
        note = ", ".join(format_bytes(c) for c in above)
        title += f"; capacity {note} per device, far above the peak, is not drawn"
    else:
        title += "; dashed: capacity"
    if result.oom:
        title += "; red x: where a device first runs out of memory"
    axes.set_title(title, loc="left", fontsize=9)
    axes.set_ylabel(f"memory [{byte_unit}]")
    axes.set_ylim(0, top / byte_scale * 1.12)
    axes.grid(color="#e0e0e0", linewidth=0.6)
    axes.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
