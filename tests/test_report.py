"""Experiment tables and plots: placers compared on one graph, rendered beside the paper's numbers."""

import csv
import io
import math

import pytest

from experiments.comparison import FusionStats, PlacerRun, compare_placers, fastest_fitting, record_step
from experiments.report import (
    RealRun,
    accuracy_table,
    graph_table,
    placement_time_table,
    plot_step_times,
    real_run_table,
    step_time_table,
    write_tables,
)
from tfplace.core.costgraph import ccr
from tfplace.core.devices import DeviceSet
from tfplace.core.synthetic import layered_training_graph
from tfplace.estimator.accuracy import AccuracyReport, DeviationSummary


def run(placer, step_time, oom=False, model="inception_v3", seconds=0.5):
    return PlacerRun(model, placer, step_time, seconds, oom_devices=("/device:GPU:0",) if oom else ())


@pytest.fixture(scope="module")
def training_graph():
    return layered_training_graph(282, seed=3)


def total_memory(graph):
    return sum(
        a["persistent_bytes"] + sum(a["output_sizes"]) + a["temporary_bytes"]
        for _, a in graph.nodes(data=True)
    )


def test_a_device_whose_simulated_peak_exceeds_its_memory_is_out_of_memory(training_graph):
    small = DeviceSet.parse("/device:GPU:0-1", total_memory(training_graph) // 8)
    large = DeviceSet.parse("/device:GPU:0-1", total_memory(training_graph) * 4)
    (tight,), _, _ = compare_placers(training_graph, small, ["single"], "synthetic")
    (roomy,), _, _ = compare_placers(training_graph, large, ["single"], "synthetic")
    assert tight.oom and tight.oom_devices == ("/device:GPU:0",)
    assert tight.peak_memory["/device:GPU:0"] > small.memory_of(0)
    assert not roomy.oom and roomy.overcommitted_devices == 0 and roomy.bytes_moved == 0


def test_fusion_statistics_come_from_the_celeritas_placement(training_graph):
    devices = DeviceSet.parse("/device:GPU:0-3", "1TB")
    runs, placements, fusion = compare_placers(training_graph, devices, ["m_topo", "celeritas"], "synthetic")
    assert [r.placer for r in runs] == ["m_topo", "celeritas"] and set(placements) == {"m_topo", "celeritas"}
    assert fusion.ops == len(training_graph) and fusion.ccr_before == pytest.approx(ccr(training_graph))
    assert fusion.memory_bytes == total_memory(training_graph)
    assert fusion.compute_seconds == pytest.approx(
        sum(t for _, t in training_graph.nodes(data="compute_time"))
    )
    assert fusion.clusters == placements["celeritas"].details["clusters"] < len(training_graph)
    assert fusion.ccr_after == placements["celeritas"].details["ccr_after"]


def test_without_a_fusing_placer_there_are_no_cluster_statistics(training_graph):
    devices = DeviceSet.parse("/device:GPU:0-1", "1TB")
    _, _, fusion = compare_placers(training_graph, devices, ["m_topo"], "synthetic")
    assert fusion.clusters is None and fusion.ccr_after is None


def test_a_placement_over_two_devices_moves_the_bytes_of_the_tensors_it_cuts(training_graph):
    devices = DeviceSet.parse("/device:GPU:0-1", total_memory(training_graph) * 4)
    (split,), placements, _ = compare_placers(training_graph, devices, ["metis"], "synthetic")
    placed = placements["metis"].assignment
    cut = {
        (src, slot, placed[dst])
        for src, dst, attrs in training_graph.edges(data=True)
        if placed[src] != placed[dst]
        for slot in attrs["slots"]
    }
    assert cut and split.bytes_moved == sum(
        training_graph.nodes[src]["output_sizes"][slot] for src, slot, _ in cut
    )


def test_recording_the_step_again_gives_the_placements_step_time(training_graph):
    devices = DeviceSet.parse("/device:GPU:0-1", "1TB")
    _, placements, _ = compare_placers(training_graph, devices, ["m_etf"], "synthetic")
    result = record_step(training_graph, placements["m_etf"], devices)
    assert result.makespan == pytest.approx(placements["m_etf"].step_time)
    assert result.schedule is not None and len(result.schedule.ops) == len(training_graph)


def test_the_fastest_placement_that_fits_ignores_faster_ones_out_of_memory():
    runs = [run("single", 1.0, oom=True), run("m_topo", 3.0), run("celeritas", 2.0)]
    assert fastest_fitting(runs).placer == "celeritas"
    assert fastest_fitting([run("single", 1.0, oom=True)]) is None


def test_step_time_table_marks_oom_bolds_the_fastest_fit_and_puts_the_papers_row_under():
    runs = [run("single", 1.0, oom=True), run("m_topo", 3.0), run("celeritas", 2.4)]
    table = step_time_table(runs)
    assert table.columns[2:5] == ("one device", "m-TOPO", "Celeritas")
    ours, paper = table.rows
    assert ours[2:5] == ("OOM (1.000)", "3.000", "**2.400**")
    assert ours[-1] == "+20.0% vs m-TOPO"
    assert paper[1] == "paper (measured)" and paper[2:] == (
        "-",
        "3.100",
        "2.859",
        "8.565",
        "+7.8% vs m-TOPO",
    )


def test_auto_has_a_tfplace_auto_column_and_is_no_baseline_of_the_speed_up_column():
    runs = [run("m_topo", 3.0), run("celeritas", 2.4), run("auto", 2.0)]
    table = step_time_table(runs)
    assert table.columns[2:5] == ("m-TOPO", "Celeritas", "tfplace auto")
    ours = table.rows[0]
    assert ours[2:5] == ("3.000", "2.400", "**2.000**")
    assert ours[-1] == "+20.0% vs m-TOPO"


def test_auto_among_whole_ops_is_labelled_so_and_points_to_the_split_plans_table():
    runs = [run("m_topo", 3.0), run("celeritas", 2.4), run("auto_whole_ops", 2.2)]
    table = step_time_table(runs)
    assert table.columns[4] == "tfplace auto (whole ops)"
    assert table.rows[0][-1] == "+20.0% vs m-TOPO"
    assert "results/split_plans.md" in table.notes
    assert "split_plans.md" not in step_time_table(runs[:2]).notes


def test_nmt_while_is_compared_with_the_papers_nmt():
    table = step_time_table([run("metis", 1.0, model="nmt_while")])
    assert table.rows[1][:3] == ("nmt_while", "paper (measured)", "OOM")


def test_a_model_outside_the_paper_has_no_paper_row():
    table = placement_time_table([run("celeritas", 1.0, model="tiny", seconds=0.25)])
    assert table.rows == (("tiny", "tfplace", "0.250", "n/a"),)


def test_graph_table_sets_ops_and_ccr_beside_the_papers():
    stats = [
        FusionStats("transformer", 22822, 95.5, 4.25, 360_700_000_000, clusters=180, ccr_after=9.25),
        FusionStats("tiny", 12, 1.0),
    ]
    table = graph_table(stats, {"transformer": 33350})
    assert table.rows[0] == (
        "transformer",
        "33,350",
        "22,822",
        "36,352",
        "180",
        "220",
        "95.500",
        "111.957",
        "9.250",
        "11.100",
        "4.250",
        "360.7",
    )
    assert table.rows[1] == ("tiny", "-", "12", "-", "-", "-", "1.000", "-", "-", "-", "-", "0.0")


def summary(mean):
    return DeviationSummary(mean, mean, 0.5, 0.9, 0.95, 100, 2)


def test_accuracy_table_gives_percentages_beside_the_papers():
    report = AccuracyReport(
        (1, 2, 4),
        8,
        120,
        3,
        1,
        summary(0.02),
        summary(0.3),
        0.1,
        1.0,
        1.1,
        0.9,
        {"line": 70},
        [],
        10.0,
        5.0,
        False,
    )
    (row,) = accuracy_table({"tensor_holography": report}).rows
    assert row[:6] == ("tensor_holography", "1,2,4 -> 8", "2.00%", "2.92%", "30.00%", "11.32%")
    assert row[-3:] == ("100 / 100", "10", "5")


def test_markdown_and_csv_hold_the_same_cells_without_emphasis(tmp_path):
    table = step_time_table([run("m_topo", 3.0), run("celeritas", 2.4)])
    markdown = table.markdown().splitlines()
    assert markdown[0].startswith("### Table 3")
    assert markdown[4].startswith("| inception_v3 | tfplace (simulated) | 3.000 | **2.400** |")
    rows = list(csv.reader(io.StringIO(table.csv())))
    assert rows[0] == list(table.columns)
    assert rows[1][2:4] == ["3.000", "2.400"]
    combined = write_tables([table, real_run_table([])], tmp_path, preamble="command: x\n")
    assert combined.read_text().startswith("command: x\n")
    assert (tmp_path / "table3_step_time.csv").read_text() == table.csv()
    assert (tmp_path / "table_real_runs.md").exists()


def test_real_run_table_gives_the_ratio_of_measured_to_simulated():
    (row,) = real_run_table([RealRun("tiny", "celeritas", 8, 2, 0.01, 0.015, 10, 0)]).rows
    assert row[4:7] == ("0.0100", "0.0150", "1.50")


def test_step_time_plot_is_written_with_oom_and_paper_marks(tmp_path):
    runs = [run("metis", 2.0, oom=True), run("celeritas", 1.5), run("m_topo", 1.8, model="transformer")]
    plot_step_times(runs, tmp_path / "steps.png")
    assert (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_values_render_as_dashes():
    table = step_time_table([run("celeritas", math.nan)])
    assert table.rows[0][2] == "-"
