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


def _simulated_peaks(graph, devices, placer):
    from tfplace.placer import place_cost_graph

    placement = place_cost_graph(graph, devices, placer)
    over = {d.name for d in devices.devices if placement.peak_memory.get(d.name, 0) > d.memory}
    return placement, over


@pytest.mark.parametrize(
    "placer", ["celeritas", "order_place", "dfs_topo", "m_topo", "single", "m_etf", "m_sct", "metis", "auto"]
)
def test_every_placer_warns_about_each_device_whose_simulated_peak_exceeds_its_memory(placer):
    from tfplace.core.synthetic import layered_training_graph

    graph = layered_training_graph(60, seed=3)
    persistent = sum(attrs["persistent_bytes"] for _, attrs in graph.nodes(data=True))
    devices = DeviceSet.parse("/device:GPU:0-1", persistent // 3)  # the variables alone do not fit

    placement, over = _simulated_peaks(graph, devices, placer)

    assert over  # no placement fits: a device overflows in the simulated step
    for device in over:
        (warning,) = [w for w in placement.warnings if w.startswith(f"{device} runs out of memory")]
        assert f"peak {placement.peak_memory[device]:,} bytes of its {devices.devices[0].memory:,}" in warning
        assert f"warning: {warning}" in placement.summary()


def test_a_peak_just_above_capacity_is_marked_over_and_never_shown_as_100_percent():
    devices = DeviceSet.parse("/device:GPU:0-1", 272_000_000)
    placement = Placement(
        {"a": "/device:GPU:0", "b": "/device:GPU:1"},
        devices,
        peak_memory={"/device:GPU:0": 272_343_789, "/device:GPU:1": 272_000_001},
    )

    lines = placement.summary().splitlines()

    assert "(100.1% OVER)" in lines[2] and "(>100% OVER)" in lines[3]
    assert "(100%)" not in placement.summary()
    assert [line.split(":")[1].strip() for line in lines if line.startswith("warning:")] == [
        "/device",
        "/device",
    ]
    assert (
        "warning: /device:GPU:0 runs out of memory in the simulated step: peak 272,343,789 bytes" in lines[-2]
    )


def test_resimulating_a_placement_replaces_its_out_of_memory_warnings_instead_of_repeating_them():
    graph = chain_graph([1.0, 1.0], [10], memory=[600, 600])
    devices = DeviceSet.parse("/device:GPU:0", 1000, intra_host=UNIT_LINK)
    placement = Placement({"o0": "/device:GPU:0", "o1": "/device:GPU:0"}, devices, warnings=["placer note"])

    once = placement.with_simulation(simulate(graph, placement.assignment, devices))
    twice = once.with_simulation(simulate(graph, placement.assignment, devices))

    assert twice.warnings == once.warnings
    assert (
        twice.warnings[0] == "placer note" and "runs out of memory in the simulated step" in twice.warnings[1]
    )


def test_the_op_count_says_whether_it_counts_the_whole_graph_or_the_step():
    graph = chain_graph([1.0, 1.0], [10])
    devices = DeviceSet.parse("/device:GPU:0", "1GB")
    whole = Placement({"o0": "/device:GPU:0", "o1": "/device:GPU:0", "init": "/device:GPU:0"}, devices)
    whole.cost_graph = graph
    step = Placement({"o0": "/device:GPU:0", "o1": "/device:GPU:0"}, devices, cost_graph=graph)

    assert "placed 3 ops of the graph (2 in the step) in" in whole.summary()
    assert "placed 2 ops of the step in" in step.summary()
    assert "placed 2 ops in" in Placement(dict(step.assignment), devices).summary()


def test_a_fallback_cpu_holding_ops_is_among_the_placements_device_names_as_in_its_summary():
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    (fallback,) = devices.fallback_cpus  # where a tf.data iterator goes on a GPU-only set
    placement = Placement({"matmul": "/device:GPU:0", "next_batch": fallback.name}, devices)

    assert placement.device_names == ["/device:GPU:0", "/device:GPU:1", fallback.name]
    assert [line.split()[0] for line in placement.summary().splitlines()[2:5]] == placement.device_names
    assert fallback in placement.devices.all_devices
