"""Split plans run in TensorFlow compute what the unsplit graph computes: inference and training.

Inference: tf_keras ResNet50, MobileNetV2 and InceptionV3 (``weights=None``, small images) in graph
mode, forward only, split by forced plans (every op the rewrite can split along the batch; every
convolution on its output channels, every depthwise one on its channels; every convolution
(depthwise ones too), pooling and padding along the height, with halos, SAME average pooling
included) on
virtual CPUs. Training: the benchmark models (small variants) and the saved test graphs, split
along the batch (weight gradients summed by AddN before the update), 20 steps, on virtual CPUs and
on two loopback workers. Each row prints the largest deviation (relative to the value's scale) of
any fetched value or weight, and how many pieces ran on their planned device.

Criterion: every value within :data:`TOLERANCE`. A training run that amplifies float rounding
(Inception V3 at batch 4: batch norm over 4 examples in the last blocks; the Transformer's Adam on
gradients that are zero up to rounding) cannot meet it after 20 steps even unsplit: fed its batch
in another order, the same graph moves by up to 1e2. Such a row passes only when

1. its first step's fetched values are within the tolerance;
2. *every* step taken from the unsplit graph's weights before it (teacher forcing along the
   unsplit trajectory, :func:`~tfplace.tf_graph.split_check.compare_steps`) is within the
   tolerance, or within that step's reordering floor (the unsplit step fed its batch in every
   other order, from the same weights): a rewrite error shows at every step, rounding only where
   the step itself is ill-conditioned;
3. the 20-step trajectory is as noisy as a reordering: the values beyond the tolerance and beyond
   their own floor (their largest deviation over the other orders of the batch,
   :func:`~tfplace.tf_graph.split_check.reordering_floor`) are no more than the most any one
   reordering has beyond the floor of the remaining orders (each of the values in that tail leaves
   the range of its samples about once in ``orders`` draws, the split's draw included).

With ``--float64`` the Keras models (Inception V3) build with floatx float64, so that their batch
norms run unfused (``Mean``, ``SquaredDifference``: split as partial sums) and rounding starts
near 1e-16: how many steps a chaotic run tracks the unsplit one when rounding cannot explain
a deviation (Inception V3: 5 steps within the tolerance, ``results/split_equivalence.txt``).

    .venv/bin/python benchmarks/split_equivalence.py [--inference] [--training] [--cluster] [--steps 20]
        [--cases transformer inception_v3] [--floor_orders 23] [--float64]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tensorflow as tf

from tfplace.split.rules import BATCH, CHANNEL, HEIGHT
from tfplace.tf_graph.cluster import LocalCluster
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import compare_split, compare_steps, reordering_floor
from tfplace.tf_graph.split_rewrite import uniform_plan

TOLERANCE = 1e-4
"""Largest deviation accepted, relative to the larger of 1 and the value's largest magnitude."""

FLOOR_ORDERS = 23
"""Orders of the batch the reordering floor samples by default: every order of a batch of 4 but
the given one (``--floor_orders``)."""

APPLICATIONS = {"ResNet50": 32, "MobileNetV2": 32, "InceptionV3": 75}
"""tf_keras application -> the smallest image side it accepts."""

FORCED = {
    "batch": lambda graph: None,
    "channel": lambda graph: {
        op.name: CHANNEL for op in graph.get_operations() if op.type in ("Conv2D", "DepthwiseConv2dNative")
    },
    "height": lambda graph: {
        op.name: HEIGHT
        for op in graph.get_operations()
        if op.type in ("Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", "Pad")
    },
}
"""Forced plan -> the ops it splits (``None``: every op that splits along the batch)."""


def keras_inference(name: str, batch: int) -> tuple[Any, str, dict[str, np.ndarray]]:
    """A forward-only graph of a tf_keras application, its output's name and a feed."""
    import tf_keras

    tf.compat.v1.disable_eager_execution()
    side = APPLICATIONS[name]
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        images = tf.compat.v1.placeholder(tf.float32, [batch, side, side, 3], name="images")
        model = getattr(tf_keras.applications, name)(weights=None, input_shape=(side, side, 3), classes=10)
        output = model(images, training=False)
    feeds = {"images:0": np.random.default_rng(0).uniform(-1, 1, (batch, side, side, 3)).astype(np.float32)}
    return graph, output.name, feeds


def forced_plan(graph: Any, devices: list[str], kind: str, batch_size: int | None = None) -> Any:
    ops = FORCED[kind](graph)
    return uniform_plan(graph, devices, BATCH if kind == "batch" else "", ops=ops, batch_size=batch_size)


def report(label: str, check: Any, seconds: float, floor: Any = None, steps: Any = None) -> bool:
    """Print the row. A training row with values beyond :data:`TOLERANCE` passes only when its first
    step is within it and both criteria of a chaotic run hold (module docstring): every step taken
    from the unsplit state is within the tolerance or its step's reordering floor, and no more of
    the trajectory's values leave their own floor than a reordering of the batch leaves the others'."""
    beyond = floor.beyond(check.deviations, TOLERANCE) if floor is not None else []
    others = sorted(floor.beyond_the_others(TOLERANCE)) if floor is not None else [0]
    noise = others[-1]
    stepwise = steps is not None and all(s.deviation <= max(TOLERANCE, s.floor or 0.0) for s in steps)
    first_step = check.step_deviations[0] <= TOLERANCE
    chaotic_ok = floor is not None and first_step and stepwise and len(beyond) <= noise
    within = check.max_deviation <= TOLERANCE or chaotic_ok
    ok = within and not check.misplaced and check.pieces_run > 0
    verdict = "ok" if ok else "FAIL"
    if ok and check.max_deviation > TOLERANCE:
        verdict = "ok (each step within the tolerance or its floor; trajectory as noisy as a reordering)"
    print(
        f"{label:<40} max deviation {check.max_deviation:9.2e} ({check.worst}); fetched values at step 1 "
        f"{check.step_deviations[0]:8.1e}, at step {len(check.step_deviations)} {check.step_deviations[-1]:8.1e}"
        f"  pieces in step stats on "
        f"their device {check.pieces_run - len(check.misplaced)}, elsewhere {len(check.misplaced)}, absent "
        f"(fused or pruned by TF) {check.pieces_in_step - check.pieces_run}  kept whole {len(check.kept_whole)}"
        f"  {seconds:5.1f}s  {verdict}",
        flush=True,
    )
    if floor is not None:
        over = sum(d > TOLERANCE for d in check.deviations.values())
        print(
            f"{'':<40} reordering floor (unsplit, the {floor.orders} other orders of the batch) "
            f"{floor.max_deviation:9.2e} ({floor.worst}); values beyond the tolerance {over}, "
            f"beyond their own floor {len(beyond)} (a reordering beyond the other orders' floor: at most {noise}, "
            f"median {others[len(others) // 2]})"
            + "".join(f"; {name} {d:.2e} > floor {f:.2e}" for name, d, f in beyond[:3]),
            flush=True,
        )
    if steps is not None:
        worst = max(steps, key=lambda s: s.deviation)
        beyond_steps = [s.step for s in steps if s.deviation > TOLERANCE]
        print(
            f"{'':<40} each step from the unsplit state: max deviation {worst.deviation:9.2e} "
            f"({worst.worst} at step {worst.step}); steps beyond the tolerance {beyond_steps or 'none'}"
            + "".join(
                f"; step {s.step} {s.deviation:.2e} ({s.worst}), its floor {s.floor:.2e} ({s.floor_worst})"
                for s in steps
                if s.floor is not None
            ),
            flush=True,
        )
    return ok


def inference(devices: int) -> bool:
    names = [f"/device:CPU:{i}" for i in range(devices)]
    ok = True
    for name in APPLICATIONS:
        graph, output, feeds = keras_inference(name, batch=4)
        for kind in FORCED:
            started = time.perf_counter()
            plan = forced_plan(graph, names, kind)
            check = compare_split(graph, plan, [output], feeds, steps=1, config=virtual_cpu_config(devices))
            ok &= report(f"{name} forward, {kind} split x{devices}", check, time.perf_counter() - started)
    return ok


def training_cases(
    cases: list[str] | None,
) -> list[tuple[str, Any, list[str], dict[str, np.ndarray], int]]:
    """(label, graph, fetches, feeds, batch) of the training graphs named in ``cases`` (all when
    ``None``): the models and the test graphs."""
    import json

    from helpers import SMALL_MODELS, feed_function
    from models import build_model
    from tfplace.tf_graph.importer import load_graph

    tf.compat.v1.disable_eager_execution()
    built: list[tuple[str, Any, list[str], dict[str, np.ndarray], int]] = []
    batch = 4
    for model, knobs in sorted(SMALL_MODELS.items()):
        if cases and model not in cases:
            continue
        spec = build_model(model, **knobs)
        precision = spec.graph.get_tensor_by_name(spec.loss).dtype  # float64 with --float64 (Keras models)
        label = model if precision == tf.float32 else f"{model} {precision.name}"
        built.append((label, spec.graph, [spec.loss, spec.train_op], spec.feed_fn(batch), batch))
    data = Path(__file__).resolve().parents[1] / "tests" / "data"
    entries = json.loads((data / "graphs.json").read_text())
    for key, entry in sorted(entries.items()):
        if cases and key not in cases:
            continue
        graph = load_graph(data / entry["file"])
        fetches = [entry["loss"], entry["train_op"]] if "loss" in entry else [entry["train_op"]]
        built.append((key, graph, fetches, feed_function(entry)(batch), batch))
    return built


def training(steps: int, cluster: bool, cases: list[str] | None, floor_orders: int) -> bool:
    ok = True
    for label, graph, fetches, feeds, batch in training_cases(cases):
        try:
            ok &= train_case(label, graph, fetches, feeds, batch, steps, cluster, floor_orders)
        except Exception as error:  # one failing graph does not hide the others' rows
            print(f"{label} training: FAIL {type(error).__name__}: {str(error).splitlines()[0]}", flush=True)
            ok = False
    return ok


def train_case(
    label: str,
    graph: Any,
    fetches: list[str],
    feeds: Any,
    batch: int,
    steps: int,
    cluster: bool,
    floor_orders: int,
) -> bool:
    """Train ``graph`` and its batch split over two devices ``steps`` steps; print the row."""
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if cluster:
            workers = stack.enter_context(LocalCluster(2))
            devices, config, target = [workers.device(0), workers.device(1)], None, workers.target
        else:
            devices, config, target = ["/device:CPU:0", "/device:CPU:1"], virtual_cpu_config(2), ""
        plan = uniform_plan(graph, devices, BATCH, batch_size=batch)
        run = {"config": config, "target": target, "batch_size": batch}
        check = compare_split(graph, plan, fetches, feeds, steps=steps, **run)
        floor = per_step = None
        if check.max_deviation > TOLERANCE:
            floor = reordering_floor(graph, fetches, feeds, steps=steps, orders=floor_orders, **run)
            per_step = compare_steps(
                graph, plan, fetches, feeds, steps=steps, floor_above=TOLERANCE, orders=floor_orders, **run
            )
    where = "workers" if cluster else "CPUs"
    return report(
        f"{label} training, batch x2 {where}", check, time.perf_counter() - started, floor, per_step
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inference", action="store_true")
    parser.add_argument("--training", action="store_true")
    parser.add_argument("--cluster", action="store_true", help="train on two loopback workers too")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--cases", nargs="+", help="train only these graphs (e.g. transformer)")
    parser.add_argument(
        "--floor_orders", type=int, default=FLOOR_ORDERS, help="orders of the batch per floor"
    )
    parser.add_argument(
        "--float64",
        action="store_true",
        help="build the Keras models (Inception V3) in float64: batch norm unfused, rounding near 1e-16",
    )
    args = parser.parse_args(argv)
    if args.float64:
        import tf_keras

        tf_keras.backend.set_floatx("float64")
    everything = not (args.inference or args.training)
    ok = True
    if args.inference or everything:
        ok &= inference(args.devices)
    if args.training or everything:
        ok &= training(args.steps, cluster=False, cases=args.cases, floor_orders=args.floor_orders)
        if args.cluster or everything:
            ok &= training(args.steps, cluster=True, cases=args.cases, floor_orders=args.floor_orders)
    print(
        f"tolerance {TOLERANCE:g} (relative to max(1, |value|)): {'all within' if ok else 'SOME ROWS FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
