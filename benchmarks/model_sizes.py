"""Sizes of the benchmark models at the paper's sizes, next to Celeritas Table 2's op counts.

Builds every model of :data:`models.MODELS` with its default (paper) knobs, runs nothing, and prints
one table row per model: ops in the graph, ops in the training step's closure
(:func:`models.common.train_step_ops`: what a step can run, without initializers), trainable
parameters, the paper's op count, and the seconds the build took. ``nmt_while`` is built twice, with
functional ``While`` ops and with legacy control-flow frames (``control_flow_v1``); ops inside a
functional ``While``'s body are not graph ops and are not counted. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/model_sizes.py
    PYTHONPATH=. .venv/bin/python benchmarks/model_sizes.py --models=nmt,transformer
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from models import MODELS, build_model
from models.common import parameter_count, train_step_ops

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(MODELS), "Models to build, by registry name.")

#: Extra builds beyond the defaults: (row label, model name, knobs).
VARIANTS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "nmt_while": (("nmt_while", {}), ("nmt_while (control_flow_v1)", {"control_flow_v1": True})),
}

COLUMNS = ("model", "ops", "step ops", "paper ops", "ops/paper", "parameters", "build s")


def measure(name: str, knobs: dict[str, Any]) -> tuple[int, int, int, int, float]:
    """(ops, step ops, parameters, paper op count, build seconds) of one build of ``name``."""
    start = time.perf_counter()
    spec = build_model(name, **knobs)
    seconds = time.perf_counter() - start
    return (
        len(spec.graph.get_operations()),
        len(train_step_ops(spec)),
        parameter_count(spec),
        spec.paper_op_count,
        seconds,
    )


def main(argv: Sequence[str]) -> None:
    del argv
    unknown = sorted(set(FLAGS.models) - set(MODELS))
    if unknown:
        raise app.UsageError(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    rows = [COLUMNS]
    for name in FLAGS.models:
        for label, knobs in VARIANTS.get(name, ((name, {}),)):
            ops, step_ops, parameters, paper_ops, seconds = measure(name, knobs)
            rows.append(
                (
                    label,
                    f"{ops:,}",
                    f"{step_ops:,}",
                    f"{paper_ops:,}",
                    f"{ops / paper_ops:.2f}",
                    f"{parameters:,}",
                    f"{seconds:.1f}",
                )
            )
            gc.collect()
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths))
            )
        )


if __name__ == "__main__":
    app.run(main)
