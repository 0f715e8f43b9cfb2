"""End-to-end demonstration on Inception V3: measure, place on 4 devices, run, and compare.

``make demo`` (or ``python -m experiments.demo`` from a checkout, where ``models/`` is importable) runs
the whole pipeline of the paper on tf_keras' Inception V3 training graph:

1. Standard Evaluation: profile the training step at batch 1, 2 and 4 and predict every op's costs
   at the target batch (``--batch_size``);
2. give 4 virtual CPU devices a memory budget that no single device could meet by the placers'
   static estimate (``--memory_share`` of the model's memory each) and place the graph with
   tfplace's default placer (``auto``: the fastest simulated placement that fits, among Celeritas
   and the baselines), printing the simulated step time of Celeritas and the baselines on the
   same cost graph;
3. write the placement into the graph and run ``--steps`` training steps on the 4 devices, next to
   the same steps on one device from the same initial weights and data;
4. check, from the step stats of a traced step, that every op ran on the device the placement gave
   it, and that the losses and updated weights equal the single-device run's.

With ``--image_size=299`` this is the full-size proof the README reports.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import numpy as np
from absl import app, flags, logging

from tfplace.api import estimate_costs, place_remaining_ops
from tfplace.core.costgraph import graph_memory
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import PRESETS
from tfplace.placer import place_cost_graph

FLAGS = flags.FLAGS
flags.DEFINE_integer("image_size", 75, "Input side of Inception V3 (the paper: 299; 75 is the smallest).")
flags.DEFINE_integer("batch_size", 32, "Target batch size the placement is made for and runs at.")
flags.DEFINE_list("profile_batch_sizes", ["1", "2", "4"], "Batch sizes profiled for the regression.")
flags.DEFINE_integer("num_devices", 4, "Virtual CPU devices to place on.")
flags.DEFINE_float("memory_share", 0.35, "Each device's memory as a share of the model's memory.")
flags.DEFINE_string("placer", "auto", "Placer whose placement is applied and run.")
flags.DEFINE_list(
    "compare", ["celeritas", "order_place", "m_topo", "m_etf", "metis", "single"], "Placers to compare with."
)
flags.DEFINE_integer("steps", 3, "Training steps run on the placed graph and on one device.")
flags.DEFINE_string("cache_dir", ".tfplace_cache/profiles", "Profile cache.")


def _build(image_size: int):  # type: ignore[no-untyped-def]
    try:
        from models import build_model
    except ImportError:
        sys.exit(
            "experiments.demo needs the benchmark models of a tfplace checkout: run it from the repository root"
        )
    return build_model("inception_v3", image_size=image_size)


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.tf_graph import device_mismatches, run_steps, virtual_cpu_config

    started = time.perf_counter()
    spec = _build(FLAGS.image_size)
    graph = spec.graph
    print(
        f"Inception V3 ({FLAGS.image_size}x{FLAGS.image_size}): {len(graph.get_operations()):,} ops in the graph"
    )

    estimate = estimate_costs(
        graph,
        spec.train_op,
        spec.feed_fn,
        FLAGS.batch_size,
        profile_batch_sizes=[int(b) for b in FLAGS.profile_batch_sizes],
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir,
    )
    cost_graph = estimate.cost_graph
    profile = estimate.profile
    source = "cache" if profile.from_cache else f"{profile.profiling_seconds:.1f} s"
    print(
        f"profiled {len(cost_graph):,} step ops at batch {list(profile.batch_sizes)} ({source}); "
        f"{len(profile.estimated_ops)} ops estimated from shapes"
    )

    model_memory = graph_memory(cost_graph)
    device_memory = int(model_memory * FLAGS.memory_share)
    devices = DeviceSet.parse(
        f"/device:CPU:0-{FLAGS.num_devices - 1}", device_memory, intra_host=PRESETS["pcie3_x16"]
    )
    print(
        f"model memory at batch {FLAGS.batch_size}: {model_memory / 1e6:,.0f} MB; "
        f"{FLAGS.num_devices} devices of {device_memory / 1e6:,.0f} MB each (links priced as PCIe 3)"
    )
    cost_graph.set_transfer_model(devices.typical_link)
    placement = place_cost_graph(cost_graph, devices, FLAGS.placer)
    print()
    print(placement.summary())
    print()
    print(f"{'placer':12s} {'simulated step':>15s} {'placed in':>10s}")
    for name in [FLAGS.placer, *FLAGS.compare]:
        other = placement if name == FLAGS.placer else place_cost_graph(cost_graph, devices, name)
        over = [d for d in devices if other.peak_memory.get(d.name, 0) > d.memory]
        oom = f" (simulated out of memory on {', '.join(d.name for d in over)})" if over else ""
        print(f"{name:12s} {other.step_time or 0.0:14.4f}s {other.placement_seconds:9.3f}s{oom}")

    placement.assignment = place_remaining_ops(estimate.imported.cost_graph, placement.assignment, devices)
    fetches = {"loss": spec.loss, "train": spec.train_op}
    weights = [v.name for v in graph.get_collection("trainable_variables")]
    weights = [f"{name.split(':')[0]}/Read/ReadVariableOp:0" for name in weights]
    feeds = spec.feed_fn(FLAGS.batch_size)
    single = run_steps(
        graph, fetches, lambda: feeds, FLAGS.steps, virtual_cpu_config(1), final_fetches=weights
    )
    placement.apply(graph)
    placed = run_steps(
        graph,
        fetches,
        lambda: feeds,
        FLAGS.steps,
        virtual_cpu_config(FLAGS.num_devices),
        trace_steps=1,
        final_fetches=weights,
    )
    moved = device_mismatches(placed.run_metadata[0], placement)
    losses = [float(v["loss"]) for v in placed.values]
    reference = [float(v["loss"]) for v in single.values]
    same_weights = all(
        np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(placed.final_values, single.final_values)
    )
    print()
    print(
        f"ran {FLAGS.steps} steps on {FLAGS.num_devices} devices: losses {', '.join(f'{x:.5f}' for x in losses)}"
    )
    print(f"            on one device:     losses {', '.join(f'{x:.5f}' for x in reference)}")
    print(f"ops that ran elsewhere than placed: {len(moved)}")
    print(f"losses equal: {np.allclose(losses, reference, rtol=1e-4)}; updated weights equal: {same_weights}")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    if moved or not same_weights or not np.allclose(losses, reference, rtol=1e-4):
        logging.error("the placed graph did not run as placed or did not compute what one device does")
        sys.exit(1)


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
