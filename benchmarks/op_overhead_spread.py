"""How far the per-op overhead calibration repeats, and whether it holds for a model's own ops.

``tfplace calibrate`` stores the seconds a real step spends per op beyond the op's traced time as
the median of ``--fits`` independent fits (:func:`tfplace.estimator.calibration.calibrate_op_overhead`).
This benchmark calibrates ``--rounds`` times in one run, the kinds of CPU device in turns, and
prints each fit and their median per round; at the end, per kind, the range and standard deviation
of the single fits (one fit is what ``tfplace calibrate`` stored before the fits were pooled) and
of the pooled medians, side by side.

``--kinds`` are the kinds calibrated; with ``--models``, each round also times each model's small variant of ``benchmarks/fidelity.py``
(``MODEL_SIZES``) traced and untraced, interleaved as the chains are, on one virtual CPU, and prints
its own per-op overhead: ``(untraced - traced - step_overhead) / records`` with the round's pooled
step overhead. Where it differs from the chains' value, the chains do not stand for the model's op
mix. With ``--committed`` (a ``fidelity.py`` CSV), each round's pooled per-op overheads (and the
virtual step overhead) replace those of ``--calibration`` and the CSV's rows of ``--models`` are
simulated again, on the profiles in ``--cache_dir``, beside their committed measured steps: what
this calibration would have predicted. Run from the repository root, ``nice``d on a shared machine:

    PYTHONPATH=. .venv/bin/python benchmarks/op_overhead_spread.py --models=nmt --committed=results/fidelity.csv
    PYTHONPATH=. .venv/bin/python benchmarks/op_overhead_spread.py --rounds=2 --kinds=virtual --models=
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import statistics
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from benchmarks import fidelity  # and its flags --models, --kinds, --calibration, --cache_dir
from models import build_model
from tfplace.estimator.calibration import (
    DEFAULT_FITS,
    calibrate_op_overhead,
    profiled_run_config,
    time_traced_and_untraced,
)

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 3, "Calibrations per kind, in turns.")
flags.DEFINE_integer(
    "fits", DEFAULT_FITS, "Independent fits per calibration (tfplace calibrate --calibration_fits)."
)
flags.DEFINE_integer(
    "repeats", 20, "Timed steps of each kind per fit (tfplace calibrate --calibration_repeats)."
)
flags.DEFINE_string(
    "committed", "", "A fidelity.py CSV whose rows of --models are simulated again ('' skips)."
)


def model_step(name: str) -> Any:
    """A :data:`~tfplace.estimator.calibration.StepBuilder` of ``name``'s small variant at its
    fidelity batch (the model's ops stay where they are built: CPU 0 of this process)."""
    knobs, batch = fidelity.MODEL_SIZES[name]

    def build(device: str) -> tuple[Any, Any, Any, dict[str, Any]]:
        del device
        spec = build_model(name, **knobs)
        return spec.graph, spec.train_op, spec.init_op, spec.feed_fn(batch)

    return build


def resimulated(calibration: Any, rows: Sequence[dict[str, str]]) -> list[str]:
    """Each committed ``fidelity.py`` row simulated again with ``calibration``: ``model/kind/placement
    simulated vs measured (deviation)``."""
    lines = []
    for name in dict.fromkeys(row["model"] for row in rows):
        _, _, estimate = fidelity.profiled_model(name)
        for kind in dict.fromkeys(row["kind"] for row in rows if row["model"] == name):
            chosen = [row for row in rows if row["model"] == name and row["kind"] == kind]
            devices = calibration.device_set(fidelity.device_names(kind, FLAGS.devices), 1 << 40)
            cost_graph = fidelity.calibrated_costs(calibration, kind, estimate.cost_graph, devices)
            placed = fidelity.placements(
                cost_graph, estimate.imported.cost_graph, devices, [row["placement"] for row in chosen]
            )
            for row in chosen:
                assignment = {op: placed[row["placement"]].assignment[op] for op in cost_graph}
                step = fidelity.simulated(cost_graph, assignment, devices).makespan
                measured = float(row["measured_s"])
                lines.append(
                    f"{name}/{kind}/{row['placement']}: simulated {step * 1e3:.3f} ms, committed measured "
                    f"{measured * 1e3:.3f} ms ({(step - measured) / measured:+.1%})"
                )
    return lines


def with_pooled(calibration: Any, pooled: dict[str, tuple[float, float]]) -> Any:
    """``calibration`` with each kind's per-op overhead, and the virtual step overhead, replaced by
    ``pooled[kind]`` (the loopback step overhead is the workers', calibrated apart)."""
    processes = dict(calibration.processes)
    for kind, (op_overhead, step_overhead) in pooled.items():
        step = step_overhead if kind == "virtual" else processes[kind].step_overhead
        processes[kind] = dataclasses.replace(processes[kind], op_overhead=op_overhead, step_overhead=step)
    return dataclasses.replace(calibration, processes=processes)


def spread(values: Sequence[float]) -> str:
    """``min .. max (range r, sd s)`` in microseconds."""
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return (
        f"{min(values) * 1e6:+.3f} .. {max(values) * 1e6:+.3f} us "
        f"(range {(max(values) - min(values)) * 1e6:.3f}, sd {deviation * 1e6:.3f})"
    )


def main(argv: Sequence[str]) -> None:
    del argv
    import contextlib

    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    unknown = sorted(set(FLAGS.models) - set(fidelity.MODEL_SIZES))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(fidelity.MODEL_SIZES)}")
    if FLAGS.models and "virtual" not in FLAGS.kinds:
        raise app.UsageError("--models needs --kinds with virtual: its step overhead is the model's")
    committed = []
    if FLAGS.committed:
        with open(FLAGS.committed, newline="") as table:
            committed = [row for row in csv.DictReader(table) if row["model"] in FLAGS.models]
    remote = profiled_run_config()
    remote.ClearField("device_count")
    single: dict[str, list[float]] = {kind: [] for kind in FLAGS.kinds}
    pooled: dict[str, list[float]] = {kind: [] for kind in FLAGS.kinds}
    own: dict[str, list[float]] = {name: [] for name in FLAGS.models}
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster(2)) if "loopback" in FLAGS.kinds else None
        settings: dict[str, dict[str, Any]] = {"virtual": {"config": profiled_run_config(2, 1)}}
        if cluster is not None:
            settings["loopback"] = {"target": cluster.target, "config": remote, "device": cluster.device(0)}
        for index in range(FLAGS.rounds):
            step_overhead = 0.0
            this_round: dict[str, tuple[float, float]] = {}
            for kind in FLAGS.kinds:
                overhead, fits = calibrate_op_overhead(
                    **settings[kind], repeats=FLAGS.repeats, fits=FLAGS.fits
                )
                op_overhead, step = overhead.op_overhead, overhead.step_overhead
                step_overhead = step if kind == "virtual" else step_overhead
                single[kind] += fits
                pooled[kind].append(op_overhead)
                this_round[kind] = (op_overhead, step)
                print(json.dumps({
                    "round": index, "kind": kind, "fits_us": [round(f * 1e6, 3) for f in fits],
                    "pooled_us": round(op_overhead * 1e6, 3), "step_overhead_us": round(step * 1e6, 1),
                    "load": os.getloadavg()[0],
                }), flush=True)  # fmt: skip
            for name in FLAGS.models:
                [(records, _, traced, untraced)] = time_traced_and_untraced(
                    [model_step(name)], config=settings["virtual"]["config"], repeats=FLAGS.repeats
                )
                own[name].append((untraced - traced - step_overhead) / records)
                print(json.dumps({
                    "round": index, "model": name, "records": records, "traced_ms": round(traced * 1e3, 3),
                    "untraced_ms": round(untraced * 1e3, 3), "own_op_overhead_us": round(own[name][-1] * 1e6, 3),
                }), flush=True)  # fmt: skip
            if committed:
                base = CpuCalibration.load(FLAGS.calibration)
                print("\n".join(resimulated(with_pooled(base, this_round), committed)), flush=True)
    for kind in FLAGS.kinds:
        print(
            f"{kind}: single fits {spread(single[kind])}; pooled medians of {FLAGS.fits} {spread(pooled[kind])}"
        )
    for name, values in own.items():
        print(f"{name} own per-op overhead (virtual, the round's pooled step overhead): {spread(values)}")


if __name__ == "__main__":
    app.run(main)
