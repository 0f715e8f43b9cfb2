"""The picture of a simulated step: device rows, ops colored by type, sends, memory against capacity."""

import matplotlib.colors as mcolors
import pytest

from helpers import UNIT_LINK, graph_from_edges
from tfplace.core.devices import DeviceSet
from tfplace.plots import plot_timeline, timeline_figure
from tfplace.simulator import simulate

OP_TYPES = {"read": "ReadVariableOp", "conv": "Conv2D", "relu": "Relu", "loss": "Sum"}


def step(memory=10**6):
    """``read -> conv -> relu -> loss`` with conv and relu on GPU:1: two sends, GPU:1 holds 400 bytes."""
    graph = graph_from_edges([("read", "conv", 100), ("conv", "relu", 400), ("relu", "loss", 50)])
    devices = DeviceSet.parse("/device:GPU:0-1", memory, intra_host=UNIT_LINK)
    placed = {
        "read": "/device:GPU:0",
        "conv": "/device:GPU:1",
        "relu": "/device:GPU:1",
        "loss": "/device:GPU:0",
    }
    return simulate(graph, placed, devices, record=True), devices


def legend_labels(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_each_device_has_a_labelled_row_of_ops_and_a_row_of_what_it_sends():
    result, devices = step()

    timeline, _ = timeline_figure(result, devices, op_types=OP_TYPES).axes

    labels = [tick.get_text() for tick in timeline.get_yticklabels()]
    assert labels == ["GPU:0", "sends", "GPU:1", "sends"]
    bars = [c for c in timeline.collections if c.get_hatch() is None]
    sends = [c for c in timeline.collections if c.get_hatch()]
    assert sum(len(c.get_paths()) for c in bars) == 4  # one bar per op
    assert sum(len(c.get_paths()) for c in sends) == 2  # read -> GPU:1, relu -> GPU:0
    assert {"sent to GPU:0", "sent to GPU:1"} <= set(legend_labels(timeline))


def test_ops_are_colored_by_op_type_with_a_legend_entry_per_type():
    result, devices = step()

    timeline, _ = timeline_figure(result, devices, op_types=OP_TYPES).axes

    colors = {mcolors.to_hex(c.get_facecolor()[0]) for c in timeline.collections if c.get_hatch() is None}
    assert len(colors) == 4
    assert set(OP_TYPES.values()) <= set(legend_labels(timeline))


def test_memory_is_drawn_per_device_with_the_capacity_and_the_first_out_of_memory_moment():
    result, devices = step(memory=300)  # GPU:1 receives 100 bytes, then conv's 400: out of memory
    assert [event.device for event in result.oom] == ["/device:GPU:1"]

    _, memory = timeline_figure(result, devices, op_types=OP_TYPES).axes

    assert legend_labels(memory) == ["GPU:0", "GPU:1", "capacity"]
    (capacity,) = [line for line in memory.get_lines() if line.get_linestyle() == "--"]
    assert capacity.get_ydata()[0] == 300
    crosses = [line for line in memory.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1
    assert crosses[0].get_xdata()[0] == pytest.approx(result.oom[0].time)  # a step of seconds, drawn in s
    assert "out of memory" in memory.get_title(loc="left")


def test_a_capacity_far_above_the_peak_is_named_instead_of_flattening_the_curves():
    result, devices = step(memory="32GB")

    _, memory = timeline_figure(result, devices).axes

    assert not [line for line in memory.get_lines() if line.get_linestyle() == "--"]
    assert "capacity 32 GB per device" in memory.get_title(loc="left")
    assert memory.get_ylim()[1] < 1000  # bytes, not gigabytes


def test_plot_timeline_writes_a_png(tmp_path):
    result, devices = step()
    path = tmp_path / "step.png"

    plot_timeline(result, devices, path, op_types=OP_TYPES, title="toy")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_result_without_schedule_cannot_be_drawn():
    graph = graph_from_edges([("a", "b", 1)])
    devices = DeviceSet.parse("/device:GPU:0", 100, intra_host=UNIT_LINK)
    with pytest.raises(ValueError, match="record=True"):
        timeline_figure(simulate(graph, {"a": "/device:GPU:0", "b": "/device:GPU:0"}, devices), devices)
