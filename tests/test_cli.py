"""The ``tfplace`` command as a user runs it on a saved graph, called in-process (``cli.execute``)."""

import json
import logging as std_logging
import re
import subprocess
import sys

import pytest
from absl import logging
from conftest import TEST_DATA

import tfplace
from helpers import contiguous_split
from tfplace import cli
from tfplace.core.costgraph import graph_memory, load_json, op_memory
from tfplace.core.placement import Placement

CNN = str(TEST_DATA / "cnn.meta")
QUICK_PROFILE = ("--profile_batch_sizes=1,2", "--warmup_steps=0", "--traced_steps=2")


def tfplace_command(*args):
    """Exit status of ``tfplace ARGS`` run in this process."""
    return cli.execute(["tfplace", *map(str, args)])


def error_line(capsys):
    """The one line a failed command printed on standard error."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def verbosity_restored():
    before = logging.get_verbosity()
    yield
    logging.set_verbosity(before)


# --------------------------------------------------------------------------------------------------
# the command line


def test_help_names_every_command_and_each_command_lists_only_its_flags(capsys):
    assert tfplace_command("--help") == 0
    overview = capsys.readouterr().out
    for command in ("profile", "place", "simulate", "run"):
        assert f"\n  {command} " in overview

    assert tfplace_command("place", "--help") == 0
    place = capsys.readouterr().out
    assert "--devices (required)" in place and "--memory (required)" in place
    assert "--placement_out" in place and "--tensorboard_dir" in place and "--timeline_png" in place
    assert "--steps" not in place

    assert tfplace_command("help", "simulate") == 0
    assert "--priority (default: fifo)" in capsys.readouterr().out


def test_version_is_the_packages(capsys):
    assert tfplace_command("--version") == 0
    assert capsys.readouterr().out.strip() == f"tfplace {tfplace.__version__}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "tfplace: error: give a command: profile, place, simulate, run"),
        (("plcae",), "did you mean 'place'?"),
        (
            ("simulate", "--cost_graph=c.json", "--placement=p.json", "--placer=m_etf"),
            "--placer is not a flag of tfplace simulate",
        ),
        (
            ("place", f"--graph={CNN}"),
            "tfplace place: error: give --devices and --memory (tfplace place --help",
        ),
        (("place", "--devices=/device:CPU:0", "--memory=1GB", "--batch_size=0"), "--batch_size=0"),
        (("profile", "--graph=g.meta", "--nonsense=1"), "nonsense"),
        (
            ("place", "--devices=/device:CPU:0", "--memory=1GB"),
            "give --graph (profiled here) or --cost_graph",
        ),
        (
            ("place", f"--graph={CNN}", "--devices=/device:CPU:0", "--memory=1GB", "--out=placed.txt"),
            "a placed graph is written as .pb or .pbtxt or .meta",
        ),
    ],
)
def test_a_misused_command_line_is_one_line_and_exit_status_2(capsys, args, message):
    assert tfplace_command(*args) == 2
    assert message in error_line(capsys)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--graph=missing.meta", "--devices=/device:CPU:0-1", "--memory=1GB"),
            "--graph missing.meta: no such file",
        ),
        (
            ("--graph", CNN, "--devices=/device:GPU:x", "--memory=1GB"),
            "malformed device name '/device:GPU:x'",
        ),
        (("--graph", CNN, "--devices=/device:GPU:0-1", "--memory=lots"), "cannot read memory size 'lots'"),
        (("--cost_graph", CNN, "--devices=/device:GPU:0-1", "--memory=1GB"), "not valid JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_1_before_any_tensorflow_work(capsys, args, message):
    assert tfplace_command("place", "--batch_size=8", *args) == 1
    line = error_line(capsys)
    assert line.startswith("tfplace place: error: ")
    assert message in line


def test_run_names_a_placement_file_that_is_not_json(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{bad")
    args = ("--graph", CNN, "--placement", tmp_path / "bad.json", "--batch_size=4")
    assert tfplace_command("run", *args) == 1
    assert "bad.json: not a readable placement or split plan" in error_line(capsys)


# --------------------------------------------------------------------------------------------------
# profile, place, simulate, run on the cnn test graph


@pytest.fixture(scope="module")
def cnn_costs():
    """The cnn test graph's step at batch 64 as ``tfplace profile`` measured it once, committed: what
    the placers decide on it is the same on every machine."""
    return TEST_DATA / "cnn_costs_b64.json.gz"


def memory_share(cost_graph_path, share):
    """``--memory`` of ``share`` of the step's memory if nothing were freed."""
    graph = load_json(cost_graph_path)
    return f"--memory={int(graph_memory(graph) * share)}B"


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_profile_writes_the_cost_graph_of_the_step_and_logs_progress_per_traced_step(
    tmp_path, capsys, caplog
):
    logging.set_verbosity(logging.INFO)
    caplog.set_level(std_logging.INFO)
    out = tmp_path / "cnn.json"

    status = tfplace_command(
        "profile",
        "--graph",
        CNN,
        "--fetch=train_op",
        "--batch_size=64",
        *QUICK_PROFILE,
        f"--cache_dir={tmp_path}",
        f"--out={out}",
    )

    assert status == 0
    cost_graph = load_json(out)
    assert cost_graph.graph["name"] == "cnn" and cost_graph.graph["batch_size"] == 64
    assert "train_op" in cost_graph and all(
        attrs["compute_time"] > 0 for _, attrs in cost_graph.nodes(data=True)
    )
    assert "the 10 ops taking the most time" in capsys.readouterr().out
    logged = [r.getMessage() for r in caplog.records if r.name == "absl"]
    # rounds of steps go on until the times are precise enough: at most 2 x 2 steps per batch size,
    # shared out over three sessions (2, 1, 1)
    assert any(
        re.fullmatch(r"profiling traced steps, session 1/3: \d+/4 \(batch 2, step 2\).*", m) for m in logged
    )
    assert any(m.startswith("profiling warm-up: 2/2 done in") for m in logged)


@pytest.mark.tensorflow
def test_place_writes_a_graph_whose_ops_carry_the_placement_devices(cnn_costs, tmp_path, capsys):
    import tensorflow as tf

    from tfplace.tf_graph.importer import load_graph

    status = tfplace_command(
        "place",
        "--graph", CNN,
        "--cost_graph", cnn_costs,
        "--devices=/device:CPU:0-2",
        memory_share(cnn_costs, 1 / 3),
        "--placer=m_topo",  # no device holds the step: m-TOPO's fill order moves on to the next one
        "--placer_option=memory_model=static",  # the model memory_share sizes the devices with
        f"--out={tmp_path / 'placed.pb'}",
        f"--placement_out={tmp_path / 'placement.json'}",
        f"--tensorboard_dir={tmp_path / 'tb'}",
    )  # fmt: skip

    assert status == 0
    placement = Placement.load(tmp_path / "placement.json")
    placed = load_graph(tmp_path / "placed.pb")
    assert {op.name: op.device for op in placed.get_operations()} == placement.assignment
    assert len(set(placement.assignment.values())) > 1
    table = capsys.readouterr().out
    for device in ("/device:CPU:0", "/device:CPU:1", "/device:CPU:2"):
        assert device in table
    assert "estimated step time:" in table
    (event_file,) = (tmp_path / "tb").iterdir()
    graph_defs = [e.graph_def for e in tf.compat.v1.train.summary_iterator(str(event_file)) if e.graph_def]
    written = tf.compat.v1.GraphDef.FromString(graph_defs[0])
    assert {node.name: node.device for node in written.node} == placement.assignment


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_place_profiles_a_saved_graph_itself_and_draws_the_simulated_step(tmp_path, capsys):
    status = tfplace_command(
        "place",
        "--graph", CNN,
        "--batch_size=32", *QUICK_PROFILE, f"--cache_dir={tmp_path}",
        "--devices=/device:CPU:0-1", "--memory=1GB", "--placer=m_etf",
        f"--cost_graph_out={tmp_path / 'costs.json'}",
        f"--trace={tmp_path / 'step.json'}",
        f"--timeline_png={tmp_path / 'step.png'}",
    )  # fmt: skip

    assert status == 0
    assert load_json(tmp_path / "costs.json").graph["batch_size"] == 32
    trace = json.loads((tmp_path / "step.json").read_text())
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} >= {
        "/device:CPU:0"
    }
    assert (tmp_path / "step.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert f"wrote timeline of the simulated step: {tmp_path / 'step.png'}" in out


@pytest.mark.tensorflow
def test_simulate_scores_a_placement_and_names_the_devices_that_run_out_of_memory(
    cnn_costs, tmp_path, capsys
):
    from tfplace.simulator import simulate

    largest_op = max(op_memory(attrs) for _, attrs in load_json(cnn_costs).nodes(data=True))
    tight = f"--memory={largest_op - 1}B"  # the simulator holds an op's memory while it runs
    args = ("--graph", CNN, "--cost_graph", cnn_costs, "--devices=/device:CPU:0-1", tight, "--placer=single")
    assert tfplace_command("place", *args, f"--placement_out={tmp_path / 'single.json'}") == 0
    capsys.readouterr()

    status = tfplace_command(
        "simulate",
        "--cost_graph",
        cnn_costs,
        "--placement",
        tmp_path / "single.json",
        f"--trace={tmp_path / 'sim.json'}",
    )

    assert status == 0
    out = capsys.readouterr().out
    placement = Placement.load(tmp_path / "single.json")
    cost_graph = load_json(cnn_costs)
    expected = simulate(cost_graph, {op: placement.assignment[op] for op in cost_graph}, placement.devices)
    assert expected.oom and expected.oom[0].device == "/device:CPU:0"
    assert f"out of memory: {expected.oom[0]}" in out
    assert tfplace.core.units.format_seconds(expected.makespan) in out
    assert (
        json.loads((tmp_path / "sim.json").read_text())["otherData"]["makespan_seconds"] == expected.makespan
    )


@pytest.mark.tensorflow
def test_simulate_refuses_a_placement_of_another_graph(cnn_costs, tmp_path, capsys):
    devices = tfplace.DeviceSet.parse("/device:CPU:0", "1GB")
    Placement({"some_other_op": "/device:CPU:0"}, devices).save(tmp_path / "other.json")

    assert tfplace_command("simulate", "--cost_graph", cnn_costs, "--placement", tmp_path / "other.json") == 1
    assert "the placement has no device for 220 ops of the cost graph" in error_line(capsys)


@pytest.mark.tensorflow
def test_an_unknown_fetch_is_one_line_naming_the_closest_op(capsys, tmp_path):
    status = tfplace_command(
        "profile", "--graph", CNN, "--fetch=trian_op", "--batch_size=8", f"--out={tmp_path / 'c.json'}"
    )

    assert status == 1
    assert (
        "--fetch trian_op: the graph has no op or tensor of that name; did you mean 'train_op'?"
        in error_line(capsys)
    )


def test_python_m_tfplace_runs_the_absl_app_with_one_line_errors(tmp_path):
    version = subprocess.run(
        [sys.executable, "-m", "tfplace", "--version"], capture_output=True, text=True, check=False
    )
    missing = subprocess.run(
        [sys.executable, "-m", "tfplace", "simulate", "--cost_graph=none.json", "--placement=none.json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )

    assert (version.returncode, version.stdout.strip()) == (0, f"tfplace {tfplace.__version__}")
    assert missing.returncode == 1
    assert (
        missing.stderr.strip().splitlines()[-1]
        == "tfplace simulate: error: --cost_graph none.json: no such file"
    )


@pytest.mark.tensorflow
def test_run_runs_the_placed_graph_on_virtual_cpus_where_every_op_runs_on_its_device(
    cnn_costs, saved_graphs, tmp_path, capsys
):
    from tfplace.tf_graph.importer import import_graph, load_graph

    entry = saved_graphs["cnn"]
    structure = import_graph(load_graph(CNN), [entry["train_op"], entry["loss"]]).cost_graph
    placement_path = tmp_path / "placement.json"
    contiguous_split(structure, ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]).save(placement_path)

    status = tfplace_command(
        "run", "--graph", CNN, "--placement", placement_path, "--cost_graph", cnn_costs,
        "--batch_size=64", "--steps=2", "--warmup_steps=1", f"--trace={tmp_path / 'real.json'}",
    )  # fmt: skip

    assert status == 0
    out = capsys.readouterr().out
    assert "every op ran on the device the placement gave it" in out
    assert "estimated" in out and "at batch 64" in out
    timed = next(line for line in out.splitlines() if line.startswith("timed "))
    assert timed.split()[1] == "2"
    real = json.loads((tmp_path / "real.json").read_text())
    devices = {e["args"]["name"] for e in real["traceEvents"] if e.get("name") == "process_name"}
    assert all(any(f"/device:CPU:{i}" in name for name in devices) for i in range(3))
    assert (tmp_path / "real.simulated.json").exists()


@pytest.mark.tensorflow
def test_run_prints_the_fetched_scalars_of_every_step(cnn_costs, tmp_path, capsys):
    placement_path = tmp_path / "placement.json"
    placed = ("--cost_graph", cnn_costs, "--devices=/device:CPU:0-1", "--memory=1GB", "--placer=m_etf")
    assert tfplace_command("place", "--graph", CNN, *placed, f"--placement_out={placement_path}") == 0
    capsys.readouterr()

    status = tfplace_command(
        "run", "--graph", CNN, "--placement", placement_path, "--fetch=train_op,loss:0",
        "--batch_size=8", "--steps=2", "--warmup_steps=1",
    )  # fmt: skip

    assert status == 0
    out = capsys.readouterr().out.split("fetched scalars per step:\n")[1].splitlines()
    assert out[0].split() == ["step", "phase", "loss:0"]
    rows = [line.split() for line in out[2:6]]
    assert [row[:2] for row in rows] == [["1", "warm-up"], ["2", "timed"], ["3", "timed"], ["4", "traced"]]
    assert all(float(row[2]) > 0 for row in rows)  # a cross-entropy loss


@pytest.mark.tensorflow
def test_run_refuses_a_gpu_placement_on_a_machine_without_gpus(tmp_path, capsys):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    devices = tfplace.DeviceSet.parse("/device:GPU:0", "1GB")
    Placement({"train_op": "/device:GPU:0"}, devices).save(tmp_path / "gpu.json")

    assert tfplace_command("run", "--graph", CNN, "--placement", tmp_path / "gpu.json", "--batch_size=8") == 1
    assert "the placement uses GPU devices but this machine has none" in error_line(capsys)


def test_the_cli_reference_describes_every_flag_of_every_command():
    reference = (TEST_DATA.parents[1] / "docs" / "cli.md").read_text()
    for name, command in cli.COMMANDS.items():
        section = reference.split(f"## `tfplace {name}`\n")[1].split("\n## ")[0]
        undocumented = [
            holder.name
            for holder in command.holders
            if f"| `--{holder.name}" not in section and f"| `--[no]{holder.name}" not in section
        ]
        assert undocumented == [], f"tfplace {name}"


def test_without_tensorflow_a_command_that_needs_it_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow fails as when not installed

    assert tfplace_command("profile", "--graph", CNN, "--batch_size=8", f"--out={tmp_path / 'c.json'}") == 1
    assert (
        error_line(capsys)
        == "tfplace profile: error: this needs TensorFlow: pip install 'tfplace[cpu]' (or 'tfplace[gpu]')"
    )


def test_place_and_simulate_say_which_device_runs_out_of_memory_in_the_simulated_step(tmp_path, capsys):
    from tfplace.core.costgraph import save_json
    from tfplace.core.synthetic import layered_training_graph

    graph = layered_training_graph(60, seed=3)
    save_json(graph, tmp_path / "costs.json")
    persistent = sum(attrs["persistent_bytes"] for _, attrs in graph.nodes(data=True))
    place_args = ("--devices=/device:GPU:0-1", f"--memory={persistent // 3}B", "--placer=celeritas")

    assert tfplace_command("place", "--cost_graph", tmp_path / "costs.json", *place_args,
                           f"--placement_out={tmp_path / 'p.json'}") == 0  # fmt: skip
    placed = capsys.readouterr().out
    assert (
        tfplace_command(
            "simulate", "--cost_graph", tmp_path / "costs.json", "--placement", tmp_path / "p.json"
        )
        == 0
    )
    simulated = capsys.readouterr().out

    for out in (placed, simulated):
        assert "runs out of memory in the simulated step" in out and "% OVER)" in out


@pytest.mark.tensorflow
def test_run_runs_a_split_plan_by_rewriting_the_graph_into_pieces(tmp_path, capsys):
    from tfplace.tf_graph.split_rewrite import uniform_plan

    plan_path = tmp_path / "plan.json"
    uniform_plan(CNN, ["/device:CPU:0", "/device:CPU:1"], "batch", batch_size=4).save(plan_path)
    capsys.readouterr()

    status = tfplace_command(
        "run", "--graph", CNN, "--placement", plan_path, "--batch_size=4", "--steps=2", "--warmup_steps=1"
    )

    assert status == 0
    out = capsys.readouterr().out
    assert "of which pieces" in out and "split into pieces" in out
    assert "every op ran on the device the placement gave it" in out


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_place_with_a_split_placer_writes_the_graph_in_pieces_and_run_trains_it_as_unsplit(tmp_path, capsys):
    from helpers import feed_function
    from tfplace.split.plan import SplitPlan
    from tfplace.tf_graph.importer import load_graph
    from tfplace.tf_graph.session import virtual_cpu_config
    from tfplace.tf_graph.split_check import compare_split

    plan_path = tmp_path / "plan.json"
    status = tfplace_command(
        "place", "--graph", CNN, "--batch_size=8", *QUICK_PROFILE, f"--cache_dir={tmp_path}",
        "--devices=/device:CPU:0-1", "--memory=1GB", "--placer=data_parallel",
        f"--out={tmp_path / 'placed.pb'}", f"--placement_out={plan_path}",
    )  # fmt: skip
    assert status == 0
    placed = load_graph(tmp_path / "placed.pb")
    piece_devices = {op.device for op in placed.get_operations() if "/piece" in op.name}
    assert piece_devices == {"/device:CPU:0", "/device:CPU:1"}

    plan = SplitPlan.load(plan_path)  # what --placement_out saved: the plan, which run rewrites
    assert plan.batch_size == 8
    entry = json.loads((TEST_DATA / "graphs.json").read_text())["cnn"]
    check = compare_split(
        load_graph(CNN), plan, ["loss:0", "train_op"], feed_function(entry)(8), steps=5,
        config=virtual_cpu_config(2), batch_size=8,
    )  # fmt: skip
    assert check.max_deviation < 1e-5, check.worst
    assert check.pieces_run > 0 and not check.misplaced
    capsys.readouterr()
    status = tfplace_command(
        "run", "--graph", CNN, "--placement", plan_path, "--fetch=train_op,loss:0",
        "--batch_size=8", "--steps=2", "--warmup_steps=1",
    )  # fmt: skip
    assert status == 0
    assert "fetched scalars per step:" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# split plans from auto, simulated and read by tfplace simulate and run

SPLIT_COSTS = TEST_DATA / "cnn_split_costs_b64.json.gz"
#: Two devices in one process (a cheap link): auto's best is a split plan on the committed costs.
SPLIT_DEVICES = ("--devices=/device:CPU:0-1", "--memory=1GB", "--link=same_process")


def step_line(out):
    return next(line for line in out.splitlines() if line.startswith("estimated step time:"))


def test_place_with_auto_writes_the_split_plan_it_chose_and_simulate_reads_it_with_its_pieces(
    tmp_path, capsys
):
    from tfplace.split.plan import SplitPlan

    plan_path = tmp_path / "plan.json"
    status = tfplace_command(
        "place", "--cost_graph", SPLIT_COSTS, *SPLIT_DEVICES, "--placer=auto", f"--placement_out={plan_path}"
    )
    assert status == 0
    placed = capsys.readouterr().out
    assert f"wrote split plan: {plan_path}" in placed and "placer auto (layerwise split plan)" in placed
    assert SplitPlan.load(plan_path).split_ops

    trace = tmp_path / "trace.json"
    status = tfplace_command(
        "simulate", "--cost_graph", SPLIT_COSTS, "--placement", plan_path, f"--trace={trace}"
    )
    assert status == 0
    simulated = capsys.readouterr().out
    assert "of which pieces" in simulated and "split into pieces" in simulated
    assert step_line(simulated).split(";")[0] == step_line(placed).split(";")[0]
    assert "#p1" in trace.read_text()  # the trace shows the second piece of split ops


def test_simulate_refuses_a_split_plan_made_for_another_graph_in_one_line(tmp_path, capsys):
    plan_path = tmp_path / "plan.json"
    tfplace_command("place", "--cost_graph", SPLIT_COSTS, *SPLIT_DEVICES, f"--placement_out={plan_path}")
    capsys.readouterr()

    status = tfplace_command(
        "simulate", "--cost_graph", TEST_DATA / "lstm_v1_costs_b64.json.gz", "--placement", plan_path
    )

    assert status == 1
    assert "the placement has no device for" in error_line(capsys)


def test_run_reads_a_split_plan_file_once(tmp_path, capsys, monkeypatch):
    import builtins

    plan_path = tmp_path / "plan.json"
    tfplace_command("place", "--cost_graph", SPLIT_COSTS, *SPLIT_DEVICES, f"--placement_out={plan_path}")
    capsys.readouterr()
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(
        builtins, "open", lambda file, *a, **k: opened.append(str(file)) or real_open(file, *a, **k)
    )

    status = tfplace_command("run", "--graph=missing.meta", "--placement", plan_path, "--batch_size=64")

    assert status == 1 and "--graph missing.meta: no such file" in error_line(capsys)  # after the plan
    assert opened.count(str(plan_path)) == 1
