"""What a user reads: the placement table, its units, and the scores it takes from a simulated step."""

import pytest

from helpers import UNIT_LINK, chain_graph
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.core.tables import format_table
from tfplace.core.units import format_bytes, format_seconds
from tfplace.simulator import simulate


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(0, "0 B"), (999, "999 B"), (6_962_092, "6.96 MB"), (32e9, "32 GB"), (123_456_789_012, "123 GB")],
)
def test_bytes_read_in_the_largest_decimal_unit_with_three_significant_digits(nbytes, text):
    assert format_bytes(nbytes) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0075, "7.5 ms"), (2.5e-7, "0.25 us"), (1.0, "1 s"), (123.4, "123 s"), (0.000134, "134 us")],
)
def test_seconds_read_in_the_unit_that_keeps_a_number_of_at_least_one(seconds, text):
    assert format_seconds(seconds) == text


def test_a_table_aligns_names_left_and_numbers_right_under_a_rule():
    table = format_table([("device", "ops"), ("/device:GPU:0", "7"), ("/device:GPU:10", "1,234")])

    assert table.splitlines() == [
        "device            ops",
        "--------------  -----",
        "/device:GPU:0       7",
        "/device:GPU:10  1,234",
    ]


def test_with_simulation_takes_the_step_time_peaks_and_busy_shares_of_the_simulated_step():
    graph = chain_graph([1.0, 2.0, 1.0], [100, 100], memory=[10, 20, 30])
    devices = DeviceSet.parse("/device:GPU:0-1", 1000, intra_host=UNIT_LINK)
    placement = Placement({"o0": "/device:GPU:0", "o1": "/device:GPU:1", "o2": "/device:GPU:1"}, devices)
    result = simulate(graph, placement.assignment, devices)

    scored = placement.with_simulation(result)

    assert scored.step_time == result.makespan == 1.0 + 100 + 2.0 + 1.0
    assert scored.utilization == pytest.approx({"/device:GPU:0": 1 / 104, "/device:GPU:1": 3 / 104})
    assert scored.peak_memory["/device:GPU:0"] == result.peak_memory[0] > 0
    assert placement.step_time is None  # a copy: the placement itself is unchanged


def test_summary_shows_per_device_ops_capacity_memory_busy_share_and_the_step_time():
    devices = DeviceSet.parse("/device:GPU:0-1", "32GB")
    placement = Placement(
        {"a": "/device:GPU:0", "b": "/device:GPU:0", "c": "/device:GPU:1"},
        devices,
        placer="celeritas",
        memory={"/device:GPU:0": 8_000_000_000, "/device:GPU:1": 16_000_000_000},
        step_time=0.0123,
        peak_memory={"/device:GPU:0": 4_000_000_000},
        utilization={"/device:GPU:0": 0.5},
        warnings=["GPU:1 is overcommitted"],
    )

    lines = placement.summary().splitlines()

    assert lines[0].split() == ["device", "ops", "capacity", "estimate", "sim.", "peak", "busy"]
    assert lines[2].split() == [
        "/device:GPU:0",
        "2",
        "32",
        "GB",
        "8",
        "GB",
        "(25%)",
        "4",
        "GB",
        "(12%)",
        "50%",
    ]
    assert lines[3].split() == ["/device:GPU:1", "1", "32", "GB", "16", "GB", "(50%)", "-", "-"]
    assert "estimated step time: 12.3 ms (simulated)" in lines[4]
    assert lines[5] == "warning: GPU:1 is overcommitted"


@pytest.mark.parametrize(("memory_model", "noted"), [("simulated", True), (None, False)])
def test_an_estimate_above_capacity_is_explained_when_the_placer_judged_memory_by_simulating(
    memory_model, noted
):
    devices = DeviceSet.parse("/device:GPU:0", "8GB")
    placement = Placement(
        {"a": "/device:GPU:0"},
        devices,
        placer="auto" if memory_model else "celeritas",
        memory={"/device:GPU:0": 10_000_000_000},
        peak_memory={"/device:GPU:0": 5_000_000_000},
        details={"memory_model": memory_model} if memory_model else {},
    )

    notes = [line for line in placement.summary().splitlines() if line.startswith("note:")]

    assert notes == (
        [
            "note: placer auto judged memory by the simulated peak; an estimate above capacity is the "
            "static model's bound, which keeps every output for the whole step"
        ]
        if noted
        else []
    )
