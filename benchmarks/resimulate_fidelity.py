"""The fidelity rows simulated again under another CPU device model, from what their passes saved.

``benchmarks/fidelity.py`` saves, per pass, model and kind, the side-by-side profile its rows were
simulated on, the devices and each placement's device per op, and the CPU device model it ran
under (``--inputs_output``: :func:`benchmarks.fidelity.save_inputs`); its ``--runs_output`` has
each pass's measured step. This program simulates every row of ``--runs_csv`` again from those
inputs, on the saved device model (or ``--calibration``) changed by ``--set``: each a
``kind.field=value`` of :class:`tfplace.core.device_model.CpuProcessModel` (or
``kind.link.field=value`` of its link), a what-if such as ``--set=loopback.link.copy_b=5.5e-5``. It
prints each row's error against the step its pass measured, each row's pass of median error
(:func:`benchmarks.fidelity.median_runs`) and how many rows are within 5%.

Nothing runs on TensorFlow: a change to the simulator or the device model is tried on a committed
run in seconds, where a new run takes 40 minutes on a quiet machine. A what-if chosen for its fit
to one run is fitted to that run; what counts for issue 17 is a run measured after the change.

    PYTHONPATH=. .venv/bin/python benchmarks/resimulate_fidelity.py
    PYTHONPATH=. .venv/bin/python benchmarks/resimulate_fidelity.py --set=loopback.link.copy_b=5.5e-5
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from absl import app, flags

from benchmarks import fidelity
from tfplace.core.costgraph import UNTRACED_STEP
from tfplace.core.device_model import CpuCalibration
from tfplace.estimator.profiling_process import PROFILED_KIND

FLAGS = flags.FLAGS
flags.DEFINE_string("runs_csv", "results/fidelity_runs.csv", "Every pass's rows (fidelity.py --runs_output).")
flags.DEFINE_string(
    "inputs", "results/fidelity_inputs", "What the passes saved (fidelity.py --inputs_output)."
)
flags.DEFINE_list(
    "set",
    [],
    "Changes to the device model: kind.field=value (a number of a CPU process model) or "
    "kind.link.field=value (of its link), e.g. virtual.op_overhead=0,loopback.link.copy_b=9e-5.",
)
flags.DEFINE_bool(
    "own_op_overhead",
    True,
    "Simulate each pass with the per-op overhead its side-by-side profile's own untraced step gives "
    "(CpuCalibration.op_overhead; for a pass saved before session 30, the step its row records as "
    "profile_untraced_s); false: the calibration's per-op overhead, as before session 30.",
)
flags.DEFINE_bool(
    "side_by_side_link",
    True,
    "Simulate each pass with the link's copy_b it probed beside its runs, where it saved one "
    "(fidelity.py --link_probe_steps); false: the device model's own, --set included.",
)
FLAGS.set_default("calibration", "")
FLAGS["calibration"].help = "The CPU device model to start from ('': the one the passes ran under)."


def _numbers(record: Any) -> dict[str, type]:
    return {
        field.name: type(getattr(record, field.name))
        for field in dataclasses.fields(record)
        if type(getattr(record, field.name)) in (int, float)
    }


def changed(calibration: CpuCalibration, settings: Sequence[str]) -> CpuCalibration:
    """``calibration`` with each ``kind.field=value`` (or ``kind.link.field=value``) of
    ``settings`` set; a setting of another form, an unknown kind, a field that is no number of
    the model or a value that is no number is an error that names what there is."""
    processes = dict(calibration.processes)
    for setting in settings:
        key, equals, value = setting.partition("=")
        kind, *path = key.split(".")
        if not equals or len(path) not in (1, 2) or (len(path) == 2 and path[0] != "link"):
            raise ValueError(f"a change is kind.field=value or kind.link.field=value, got {setting!r}")
        calibration.process(kind)  # names the kinds there are
        model = processes[kind]
        record = model.link if len(path) == 2 else model
        numbers = _numbers(record)
        if path[-1] not in numbers:
            raise ValueError(f"{key!r}: {path[-1]!r} is none of {', '.join(sorted(numbers))}")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(f"{key!r}: {value!r} is not a number")
        if numbers[path[-1]] is int and not number.is_integer():
            raise ValueError(f"{key!r}: {value!r} is not a whole number")
        record = dataclasses.replace(record, **{path[-1]: numbers[path[-1]](number)})
        processes[kind] = dataclasses.replace(model, link=record) if len(path) == 2 else record
    return dataclasses.replace(calibration, processes=processes)


def resimulated(
    rows: Sequence[Mapping[str, str]],
    inputs: str | os.PathLike[str],
    calibration: CpuCalibration,
    side_by_side_link: bool = True,
    own_op_overhead: bool = True,
) -> list[dict[str, Any]]:
    """Each pass's row of ``rows`` (as ``fidelity.py --runs_output`` writes them) simulated again
    from its saved ``inputs`` on ``calibration``, as the pass simulated it
    (:func:`benchmarks.fidelity.calibrated_costs`, :func:`benchmarks.fidelity.simulated`; with
    the link's ``copy_b`` the pass probed side by side, where it saved one and
    ``side_by_side_link``; with the per-op overhead of the profile's own untraced step where
    ``own_op_overhead``, read from the row's ``profile_untraced_s`` where the saved profile has
    none, else the calibration's): with the step the pass simulated (``recorded_s``), the new one
    (``simulated_s``) and its ``error`` against the measured step."""
    loaded: dict[tuple[str, str, int], Any] = {}
    result = []
    for row in rows:
        key = (row["model"], row["kind"], int(row["run"]))
        if key not in loaded:
            profile, names, assignments, copy_b = fidelity.load_inputs(inputs, *key)
            untraced = float(row.get("profile_untraced_s") or math.nan)
            if not own_op_overhead:
                profile.graph.pop(UNTRACED_STEP, None)
            elif UNTRACED_STEP not in profile.graph and math.isfinite(untraced):
                profile.graph[UNTRACED_STEP] = {PROFILED_KIND["worker"]: untraced}
            probed = calibration
            if copy_b is not None and side_by_side_link:
                probed = fidelity.with_copy_b(calibration, row["kind"], copy_b)
            devices = probed.device_set(names, 1 << 40)
            loaded[key] = (
                fidelity.calibrated_costs(probed, row["kind"], profile, devices),
                devices,
                assignments,
            )
        costs, devices, assignments = loaded[key]
        simulated_s = fidelity.simulated(costs, assignments[row["placement"]], devices).makespan
        measured_s = float(row["measured_s"])
        result.append(
            {
                **row,
                "run": int(row["run"]),
                "measured_s": measured_s,
                "recorded_s": float(row["simulated_s"]),
                "simulated_s": simulated_s,
                "error": simulated_s / measured_s - 1,
                "memory_error": float(row["memory_error"]),
            }
        )
    return result


def by_pass(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``rows`` grouped by their pass, in the order of the passes."""
    passes: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        passes.setdefault(row["run"], []).append(row)
    return [passes[run] for run in sorted(passes)]


def summary(passes: Sequence[Sequence[dict[str, Any]]]) -> str:
    """How many rows are within 5% in each pass, in the pass of median error and on every pass."""
    median = fidelity.median_runs(passes)
    each = " / ".join(str(sum(abs(row["error"]) <= 0.05 for row in rows)) for rows in passes)
    every = sum(max(abs(row["error_min"]), abs(row["error_max"])) <= 0.05 for row in median)
    within = sum(abs(row["error"]) <= 0.05 for row in median)
    return (
        f"step within 5%: passes {each} of {len(median)}; the median pass {within}/{len(median)}, "
        f"within 10% {sum(abs(row['error']) <= 0.10 for row in median)}; every pass {every}/{len(median)}"
    )


def main(argv: Sequence[str]) -> None:
    del argv
    start = FLAGS.calibration or str(Path(FLAGS.inputs) / fidelity.INPUTS_CALIBRATION)
    try:
        calibration = changed(CpuCalibration.load(start), FLAGS.set)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    with open(FLAGS.runs_csv, newline="") as handle:
        rows = resimulated(
            list(csv.DictReader(handle)),
            FLAGS.inputs,
            calibration,
            FLAGS.side_by_side_link,
            FLAGS.own_op_overhead,
        )
    print(f"CPU device model {start}" + (f" with {', '.join(FLAGS.set)}" if FLAGS.set else ""))
    print("per-op overhead: " + ("each profile's own" if FLAGS.own_op_overhead else "the calibration's"))
    print("model,kind,placement,run,measured_s,simulated_s as run,simulated_s,error")
    for row in rows:
        print(
            f"{row['model']},{row['kind']},{row['placement']},{row['run']},{row['measured_s']:.6f},"
            f"{row['recorded_s']:.6f},{row['simulated_s']:.6f},{row['error']:+.4f}"
        )
    passes = by_pass(rows)
    print("the pass of median error per row: model,kind,placement,error [least, largest over the passes]")
    for row in fidelity.median_runs(passes):
        print(
            f"{row['model']},{row['kind']},{row['placement']},{row['error']:+.4f} "
            f"[{row['error_min']:+.4f}, {row['error_max']:+.4f}]"
        )
    print(summary(passes))


if __name__ == "__main__":
    app.run(main)
