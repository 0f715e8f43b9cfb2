"""run_experiments.py end to end on a tiny Tensor Holography: every table, plot and cost graph is written."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tfplace.core.costgraph import load_json

pytestmark = [pytest.mark.tensorflow, pytest.mark.profiles]

REPOSITORY = Path(__file__).resolve().parents[1]

KNOBS = {"image_size": 16, "conv_layers": 4, "filters": 4}
BATCH = 8
PLACERS = ["single", "m_topo", "celeritas"]
TARGETS = "/device:GPU:0-3"  # run_experiments.py's default: four V100s on its default link


def target_cost_graph(cache_dir):
    """The step's costs on the targets as run_experiments.py computes them, profiled into
    ``cache_dir``, from which the program then reads the same profile."""
    from models import build_model
    from tfplace.api import estimate_costs
    from tfplace.core.device_model import DEVICE_MODELS, convert_graph
    from tfplace.core.transfer import TransferModel

    spec = build_model("tensor_holography", **KNOBS)
    estimate = estimate_costs(
        spec.graph, spec.train_op, spec.feed_fn, BATCH, profile_batch_sizes=(1, 2, 4),
        init_op=spec.init_op, cache_dir=cache_dir,
    )  # fmt: skip
    graph = convert_graph(estimate.cost_graph, DEVICE_MODELS["V100-32GB"])
    graph.set_transfer_model(TransferModel.default())
    return graph


def memory_where_one_device_runs_out_and_a_split_fits(graph):
    """Bytes per target device, from the measured costs, for which the simulated step on one
    device runs out of memory and another placer's fits: below the one-device peak, checked with
    the same (deterministic) placers and simulator the program runs, never hoped for."""
    from experiments.comparison import compare_placers, fastest_fitting
    from tfplace.core.devices import DeviceSet
    from tfplace.core.transfer import TransferModel

    def runs(memory):
        devices = DeviceSet.parse(TARGETS, memory, intra_host=TransferModel.default())
        return compare_placers(graph, devices, PLACERS, "tensor_holography")[0]

    one_device_peak = max(runs(10**15)[0].peak_memory.values())
    for share in (0.9, 0.75, 0.6, 0.45, 0.3):
        memory = int(one_device_peak * share)
        candidates = runs(memory)
        if candidates[0].oom and fastest_fitting(candidates) is not None:
            return memory
    pytest.fail(f"no memory below the one-device peak ({one_device_peak:,} B) lets a split fit")


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    directory = tmp_path_factory.mktemp("results")
    graph = target_cost_graph(directory / "cache")
    memory = memory_where_one_device_runs_out_and_a_split_fits(graph)
    command = [
        sys.executable,
        "run_experiments.py",
        "--model=tensor_holography",
        "--knobs=" + ",".join(f"{key}={value}" for key, value in KNOBS.items()),
        f"--batch_size={BATCH}",
        f"--device_memory={memory}B",
        "--placers=" + ",".join(PLACERS),
        f"--output_dir={directory}",
        f"--cache_dir={directory / 'cache'}",
        "--real",
        "--real_steps=3",
        "--real_calibration_repeats=5",
        "--tables=paper,split",  # the inference table would profile a ResNet50
        "--unequal_speeds=1,0.5",
    ]
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    placed = load_json(directory / "graphs" / "tensor_holography.json.gz")
    assert dict(placed.nodes(data="compute_time")) == dict(graph.nodes(data="compute_time")), (
        "run_experiments.py measured the model again instead of reading the profile the memory was chosen on"
    )
    return directory


def rows(path):
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_every_table_is_written_as_markdown_and_csv_with_the_command_on_top(output):
    combined = (output / "tables.md").read_text()
    assert combined.startswith("Command: `python run_experiments.py --model=tensor_holography")
    for title in ("Table 2", "Table 3", "Table 4", "Table 5", "Real runs"):
        assert f"### {title}" in combined
    for name in ("table2_graphs", "table3_step_time", "table4_placement_time", "table5_estimation"):
        assert (output / f"{name}.md").exists() and rows(output / f"{name}.csv")


def test_a_tiny_variant_is_not_set_beside_the_papers_numbers(output):
    step_rows = rows(output / "table3_step_time.csv")
    assert [row["source"] for row in step_rows] == ["tfplace (simulated)"]


def test_one_device_below_the_models_memory_runs_out_and_is_marked(output):
    runs = {row["placer"]: row for row in rows(output / "runs.csv")}
    assert set(runs) == {"single", "m_topo", "celeritas"}
    assert runs["single"]["oom"] == "1"
    assert rows(output / "table3_step_time.csv")[0]["one device"].startswith("OOM (")


def test_the_placed_cost_graph_is_saved_with_the_target_devices_costs(output):
    graph = load_json(output / "graphs" / "tensor_holography.json.gz")
    assert graph.graph["device_model"] == "V100-32GB" and graph.graph["batch_size"] == 8
    assert graph.transfer_model.k == pytest.approx(1.754e-10)


def test_plots_of_step_times_and_of_the_best_placement_are_written(output):
    assert any(row["oom"] == "0" for row in rows(output / "runs.csv"))  # a placement fits, so it is drawn
    for name in ("step_times.png", "timeline_tensor_holography.png"):
        assert (output / name).read_bytes()[:4] == b"\x89PNG"


def test_real_runs_measure_each_placement_where_it_was_placed(output):
    real = rows(output / "table_real_runs.csv")
    assert [row["placer"] for row in real] == ["one device", "m-TOPO", "Celeritas"]
    assert all(float(row["measured (median)"]) > 0 and row["ops not where placed"] == "0" for row in real)
    # each worker has 60% of the step's memory, so m-TOPO must use both
    assert real[0]["workers"] == "1" and int(real[1]["workers"]) == 2


def test_the_split_tables_set_data_parallelism_the_layer_wise_plan_and_auto_beside_whole_ops(output):
    plans = rows(output / "split_plans.csv")
    equal = [row for row in plans if row["devices"] == "4 GPUs"]
    assert [row["plan"] for row in equal] == [
        "one device",
        "data parallel, an all-reduce per gradient",
        "data parallel, 25 MB buckets",
        "best whole-op placement",
        "searched plan (Algorithm 1, no selection)",
        "layer-wise",
        "auto",
    ]  # fmt: skip
    fitting = [row["plan"] for row in equal if "OOM" not in row["peak per device"]]
    assert "auto" in fitting and len(fitting) > 1  # auto's candidates include every other row's plan
    assert {row["devices"] for row in plans} == {"4 GPUs", "speeds 1/0.5"}
    assert "### Targets of issue 15" in (output / "split_plans.md").read_text()
