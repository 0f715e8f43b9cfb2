"""A fidelity pass saves what it simulated its rows from, so that they can be simulated again under
another CPU device model without running anything (``benchmarks/resimulate_fidelity.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.fidelity import calibrated_costs, load_inputs, save_inputs, simulated, with_copy_b
from benchmarks.resimulate_fidelity import by_pass, changed, resimulated, summary
from tfplace.core.device_model import CpuCalibration, CpuProcessModel
from tfplace.core.synthetic import layered_training_graph
from tfplace.core.transfer import TransferModel

CPUS = ["/device:CPU:0", "/device:CPU:1"]
CALIBRATION = CpuCalibration(
    machine="test",
    cores=2,
    processes={
        "virtual": CpuProcessModel(
            op_overhead=1e-6,
            step_overhead=1e-4,
            threads=1,
            link=TransferModel(k=0.0, b=5e-6, name="hand-off", copy_k=0.0, copy_b=5e-6),
        )
    },
)


def saved_pass(
    directory: Path, run: int = 1, copy_b: float | None = None
) -> tuple[dict[str, dict[str, str]], dict[str, float]]:
    """One pass of a synthetic model on two virtual CPUs saved as fidelity.py saves it (with the
    link's ``copy_b`` probed side by side, if given): its assignments and the step each was
    simulated at."""
    profile = layered_training_graph(60, seed=run)
    ops = list(profile)
    assignments = {
        "single": dict.fromkeys(ops, CPUS[0]),
        "split": {op: CPUS[index * 2 // len(ops)] for index, op in enumerate(ops)},
    }
    rows = [
        {
            "model": "toy",
            "kind": "virtual",
            "placement": placer,
            "profile": profile,
            "assignment": assignment,
            "link_copy_b": copy_b,
        }
        for placer, assignment in assignments.items()
    ]
    save_inputs(directory, run, CPUS, rows)
    probed = CALIBRATION if copy_b is None else with_copy_b(CALIBRATION, "virtual", copy_b)
    devices = probed.device_set(CPUS, 1 << 40)
    costs = calibrated_costs(probed, "virtual", profile, devices)
    steps = {
        placer: simulated(costs, assignment, devices).makespan for placer, assignment in assignments.items()
    }
    return assignments, steps


def runs_rows(steps: dict[str, float], run: int = 1, measured_over: float = 1.1) -> list[dict[str, str]]:
    return [
        {
            "model": "toy",
            "kind": "virtual",
            "placement": placer,
            "run": str(run),
            "simulated_s": str(step),
            "measured_s": str(step * measured_over),
            "memory_error": "0.0",
        }
        for placer, step in steps.items()
    ]


def test_saved_inputs_read_back_as_the_profile_devices_and_assignments_written(tmp_path: Path) -> None:
    assignments, _ = saved_pass(tmp_path)

    profile, devices, loaded, copy_b = load_inputs(tmp_path, "toy", "virtual", 1)

    assert devices == CPUS and loaded == assignments and copy_b is None
    assert sorted(profile) == sorted(layered_training_graph(60, seed=1))


def test_resimulating_a_pass_on_the_model_it_ran_under_gives_back_its_simulated_steps(tmp_path: Path) -> None:
    _, steps = saved_pass(tmp_path)

    rows = resimulated(runs_rows(steps), tmp_path, CALIBRATION)

    assert [row["simulated_s"] for row in rows] == pytest.approx(
        [row["recorded_s"] for row in rows], rel=1e-12
    )
    assert [row["error"] for row in rows] == pytest.approx([1 / 1.1 - 1] * 2)


def test_a_pass_with_a_side_by_side_link_is_simulated_again_with_it_unless_told_not_to(
    tmp_path: Path,
) -> None:
    _, steps = saved_pass(tmp_path, copy_b=4e-6)
    assert load_inputs(tmp_path, "toy", "virtual", 1)[3] == 4e-6

    again = resimulated(runs_rows(steps), tmp_path, CALIBRATION)
    calibrated = resimulated(runs_rows(steps), tmp_path, CALIBRATION, side_by_side_link=False)

    assert [row["simulated_s"] for row in again] == pytest.approx([row["recorded_s"] for row in again])
    single, split = calibrated
    assert single["simulated_s"] == pytest.approx(single["recorded_s"])  # no transfer, no copy
    assert split["simulated_s"] != pytest.approx(split["recorded_s"])


def test_a_pass_saved_before_profiles_carried_their_untraced_step_takes_it_from_its_row_unless_told_not_to(
    tmp_path: Path,
) -> None:
    _, steps = saved_pass(tmp_path)
    profile = load_inputs(tmp_path, "toy", "virtual", 1)[0]
    worker = CpuProcessModel(op_overhead=1e-6, step_overhead=3e-4, threads=1, link=TransferModel(0.0, 1e-4))
    both = dataclasses.replace(CALIBRATION, processes={**CALIBRATION.processes, "loopback": worker})
    kernels = sum(seconds for _, seconds in profile.nodes(data="compute_time"))
    rows = runs_rows(steps)
    for row in rows:  # the profiling worker's step paid 5 us per op beyond its kernels and its step cost
        row["profile_untraced_s"] = str(kernels + 3e-4 + 5e-6 * len(profile))

    own = resimulated(rows, tmp_path, both)
    calibrated = resimulated(rows, tmp_path, both, own_op_overhead=False)

    assert [row["simulated_s"] for row in calibrated] == pytest.approx(
        [row["recorded_s"] for row in calibrated]
    )
    single = own[0]
    assert single["simulated_s"] == pytest.approx(single["recorded_s"] + (5e-6 - 1e-6) * len(profile))


def test_a_side_by_side_copy_b_is_at_most_the_links_whole_cost_of_a_transfer() -> None:
    link = with_copy_b(CALIBRATION, "virtual", 1.0).process("virtual").link
    assert link.copy_b == link.b == 5e-6
    assert with_copy_b(CALIBRATION, "virtual", 1e-6).process("virtual").link.copy_b == 1e-6


def test_a_what_if_changes_the_simulated_steps_and_only_the_kind_it_names(tmp_path: Path) -> None:
    _, steps = saved_pass(tmp_path)
    costlier = changed(
        CALIBRATION, ["virtual.op_overhead=2e-6", "virtual.link.b=5e-5", "virtual.link.copy_b=5e-5"]
    )

    rows = resimulated(runs_rows(steps), tmp_path, costlier)

    assert costlier.process("virtual").op_overhead == 2e-6
    assert costlier.process("virtual").link.copy_b == 5e-5
    assert costlier.process("virtual").step_overhead == CALIBRATION.process("virtual").step_overhead
    assert all(row["simulated_s"] > row["recorded_s"] for row in rows)


def test_the_summary_counts_rows_within_five_percent_per_pass_and_in_the_median_pass(tmp_path: Path) -> None:
    rows = []
    for run, over in ((1, 1.02), (2, 1.2), (3, 1.03)):
        _, steps = saved_pass(tmp_path, run)
        rows += runs_rows(steps, run, over)

    passes = by_pass(resimulated(rows, tmp_path, CALIBRATION))

    assert [len(rows) for rows in passes] == [2, 2, 2]
    assert summary(passes) == (
        "step within 5%: passes 2 / 0 / 2 of 2; the median pass 2/2, within 10% 2; every pass 0/2"
    )


@pytest.mark.parametrize(
    ("setting", "names"),
    [
        ("virtual.op_overhead", "kind.field=value"),
        ("op_overhead=1", "kind.field=value"),
        ("virtual.threads.x=1", "kind.field=value"),
        ("virtual.op_overhed=1", "op_overhead, step_overhead, threads"),
        ("virtual.link.speed=1", "b, copy_b, copy_k, k, latency"),
        ("gpu.op_overhead=1", "the kinds are virtual, loopback"),
        ("virtual.op_overhead=abc", "'virtual.op_overhead': 'abc' is not a number"),
        ("virtual.step_overhead=nan", "'virtual.step_overhead': 'nan' is not a number"),
        ("virtual.threads=1.5", "'virtual.threads': '1.5' is not a whole number"),
    ],
)
def test_a_what_if_of_another_form_or_field_is_an_error_naming_what_there_is(
    setting: str, names: str
) -> None:
    with pytest.raises(ValueError, match=names):
        changed(CALIBRATION, [setting])
