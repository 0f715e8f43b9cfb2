"""Estimation accuracy before and after Standard Evaluation step 2 (Celeritas section 4.2.1, Table 5).

Step 1 profiles a model's training step at small batch sizes and predicts every op's costs at the
target batch by regression; step 2 (:mod:`tfplace.estimator.refine`) runs the target batch on
several devices placed by DFS-TOPO and replaces the predictions with what it traced. Both are
compared, per op, with a direct measurement at the target batch on one device
(:func:`tfplace.estimator.profiler.profile_graph`): the mean relative deviation
``|estimated - measured| / measured`` of compute time and of memory (the outputs an op allocates
plus temporary bytes), as :mod:`tfplace.estimator.accuracy` reports Table 5. A second direct
measurement gives the noise floor: two measurements of the same ops differ by that much. The
devices of step 2 get ``--memory_fraction`` of the step's predicted memory each, so that the
target batch does not fit one of them and DFS-TOPO splits it. Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/refine_accuracy.py
    PYTHONPATH=. .venv/bin/python benchmarks/refine_accuracy.py --model=inception_v3 --target_batch=8
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "tensor_holography", ["tensor_holography", "inception_v3"], "Model to estimate.")
flags.DEFINE_list("profile_batches", ["1", "2", "4"], "Batch sizes of step 1's regression.")
flags.DEFINE_integer("target_batch", 16, "Batch size predicted, refined and measured.")
flags.DEFINE_string("refine_on", "/device:CPU:0-1", "Devices of step 2 (virtual CPUs or loopback workers).")
flags.DEFINE_float("memory_fraction", 0.6, "Memory of each step-2 device, as a fraction of the step's.")
flags.DEFINE_integer("traced_steps", 5, "Traced steps of each measurement (per-op medians).")
flags.DEFINE_string("cache_dir", None, "Profile cache directory (none: always measure).")

#: Size knobs of each model: a step of tens of milliseconds at the target batch on this machine.
MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tensor_holography": {"image_size": 64, "conv_layers": 10, "filters": 16},
    "inception_v3": {"image_size": 75, "classes": 10},
}


def costs_of(cost_graph) -> dict[str, Any]:
    """The :class:`OpCost` of every op of a cost graph."""
    from tfplace.estimator.profiler import OpCost

    return {
        op: OpCost(
            a["compute_time"],
            a["output_sizes"],
            a["temporary_bytes"],
            a["persistent_bytes"],
            a.get("aliased_outputs", ()),
        )
        for op, a in cost_graph.nodes(data=True)
    }


def deviations(
    estimated: Mapping[str, Any], measured: Mapping[str, Any], ops: Sequence[str]
) -> dict[str, Any]:
    """Table 5's summary of time and memory deviations of ``estimated`` against ``measured``, and
    the time-weighted deviation (summed absolute time error over summed measured time)."""
    from tfplace.estimator.accuracy import memory_of, relative_deviations, summarize_deviations
    from tfplace.estimator.profiler import TIME_FLOOR

    times = summarize_deviations(
        *relative_deviations(estimated, measured, ops, lambda cost: cost.compute_time, TIME_FLOOR)
    )
    memory = summarize_deviations(*relative_deviations(estimated, measured, ops, memory_of, 0))
    error = sum(abs(estimated[op].compute_time - measured[op].compute_time) for op in ops)
    weighted = error / sum(measured[op].compute_time for op in ops)
    return {"time": times.__dict__, "memory": memory.__dict__, "time_weighted": weighted}


def main(argv: Sequence[str]) -> None:
    del argv
    from models import build_model
    from tfplace.api import estimate_costs
    from tfplace.core.devices import DeviceSet
    from tfplace.core.indexed import index_graph
    from tfplace.estimator.profiler import profile_graph

    spec = build_model(FLAGS.model, **MODEL_SIZES[FLAGS.model])
    batch = FLAGS.target_batch
    options = {
        "profile_batch_sizes": [int(b) for b in FLAGS.profile_batches],
        "init_op": spec.init_op,
        "traced_steps": FLAGS.traced_steps,
        "cache_dir": FLAGS.cache_dir,
    }
    step1 = estimate_costs(spec.graph, spec.train_op, spec.feed_fn, batch, **options)
    memory = int(
        index_graph(step1.cost_graph, DeviceSet.parse("/device:CPU:0", "1TB").typical_link).memory.sum()
    )
    devices = DeviceSet.parse(FLAGS.refine_on, max(int(FLAGS.memory_fraction * memory), 1))
    step2 = estimate_costs(spec.graph, spec.train_op, spec.feed_fn, batch, refine_on=devices, **options)
    direct, again = (
        profile_graph(
            spec.graph,
            spec.train_op,
            spec.feed_fn,
            [batch],
            traced_steps=FLAGS.traced_steps,
            init_op=spec.init_op,
            cache_dir=cache_dir,
        )
        for cache_dir in (FLAGS.cache_dir, None)
    )
    measured = direct.costs[batch]
    estimated_ops = set(step1.profile.estimated_ops) | set(direct.estimated_ops)
    partial = set(step1.profile.estimated_outputs) | set(direct.estimated_outputs)
    ops = sorted(op for op in measured if op not in estimated_ops | partial and op in step1.cost_graph)
    refinement = step2.refinement
    result = {
        "model": FLAGS.model,
        "knobs": MODEL_SIZES[FLAGS.model],
        "profile_batches": list(step1.profile.batch_sizes),
        "target_batch": batch,
        "refined_on": refinement.placement.devices.names,
        "ops_per_device": {
            d: sum(1 for op in step1.cost_graph if refinement.placement.assignment[op] == d)
            for d in refinement.placement.devices.names
        },
        "measured_ops": len(refinement.measured_ops),
        "ops_compared": len(ops),
        "before_step_2": deviations(costs_of(step1.cost_graph), measured, ops),
        "after_step_2": deviations(costs_of(step2.cost_graph), measured, ops),
        "direct_measured_again": deviations(again.costs[batch], measured, ops),
        "step_2_mismatches": len(refinement.report.mismatches),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    for label in ("before_step_2", "after_step_2", "direct_measured_again"):
        print(
            f"{label}: mean time deviation {result[label]['time']['mean']:.1%} "
            f"(time-weighted {result[label]['time_weighted']:.1%}), "
            f"mean memory deviation {result[label]['memory']['mean']:.1%}"
        )
    print(f"load average {result['load_average']}")


if __name__ == "__main__":
    app.run(main)
