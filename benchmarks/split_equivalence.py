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

    .venv/bin/python benchmarks/split_equivalence.py [--inference] [--training] [--cluster] [--steps 20]
        [--cases transformer inception_v3]
"""

from __future__ import annotations

import argparse
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
from tfplace.tf_graph.split_check import compare_split, reordering_floor
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


def beyond_floor(check: Any, floor: Any) -> list[tuple[str, float, float]]:
    """``(value, deviation, its floor)`` of every value beyond :data:`TOLERANCE` and beyond the
    largest deviation of the same value over the other orders of the batch."""
    per_value = floor.per_value if floor is not None else {}
    return sorted(
        (
            (name, d, per_value.get(name, 0.0))
            for name, d in check.deviations.items()
            if d > TOLERANCE and d > per_value.get(name, 0.0)
        ),
        key=lambda row: -row[1],
    )


def report(label: str, check: Any, seconds: float, floor: Any = None) -> bool:
    """Print the row. A training row with values beyond :data:`TOLERANCE` passes only when its first
    step is within it and each such value stays within its own reordering floor: the largest
    deviation of that value when the unsplit graph is fed its batch in every other order
    (:func:`~tfplace.tf_graph.split_check.reordering_floor`; summation order alone, which training
    amplifies)."""
    beyond = beyond_floor(check, floor)
    first_step = check.step_deviations[0] <= TOLERANCE
    within = check.max_deviation <= TOLERANCE or (floor is not None and first_step and not beyond)
    ok = within and not check.misplaced and check.pieces_run > 0
    verdict = "ok" if ok else "FAIL"
    if ok and check.max_deviation > TOLERANCE:
        verdict = "ok (each value beyond the tolerance within its own reordering floor)"
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
            f"beyond their own floor {len(beyond)}"
            + "".join(f"; {name} {d:.2e} > floor {f:.2e}" for name, d, f in beyond[:3]),
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


def training_cases() -> list[tuple[str, Any, list[str], dict[str, np.ndarray], int]]:
    """(label, graph, fetches, feeds, batch) of every training graph: the models and the test graphs."""
    import json

    from helpers import SMALL_MODELS, feed_function
    from models import build_model
    from tfplace.tf_graph.importer import load_graph

    tf.compat.v1.disable_eager_execution()
    cases = []
    batch = 4
    for model, knobs in sorted(SMALL_MODELS.items()):
        spec = build_model(model, **knobs)
        cases.append((model, spec.graph, [spec.loss, spec.train_op], spec.feed_fn(batch), batch))
    data = Path(__file__).resolve().parents[1] / "tests" / "data"
    entries = json.loads((data / "graphs.json").read_text())
    for key, entry in sorted(entries.items()):
        graph = load_graph(data / entry["file"])
        fetches = [entry["loss"], entry["train_op"]] if "loss" in entry else [entry["train_op"]]
        cases.append((key, graph, fetches, feed_function(entry)(batch), batch))
    return cases


def training(steps: int, cluster: bool, cases: list[str] | None, floor_orders: int) -> bool:
    ok = True
    for label, graph, fetches, feeds, batch in training_cases():
        if cases and label not in cases:
            continue
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
    if not cluster:
        plan = uniform_plan(graph, ["/device:CPU:0", "/device:CPU:1"], BATCH, batch_size=batch)
        config = virtual_cpu_config(2)
        check = compare_split(graph, plan, fetches, feeds, steps=steps, config=config, batch_size=batch)
        floor = None
        if check.max_deviation > TOLERANCE:
            floor = reordering_floor(
                graph, fetches, feeds, steps=steps, batch_size=batch, config=config, orders=floor_orders
            )
        return report(f"{label} training, batch x2 CPUs", check, time.perf_counter() - started, floor)
    with LocalCluster(2) as workers:
        plan = uniform_plan(graph, [workers.device(0), workers.device(1)], BATCH, batch_size=batch)
        check = compare_split(
            graph, plan, fetches, feeds, steps=steps, config=None, target=workers.target, batch_size=batch
        )
        floor = None
        if check.max_deviation > TOLERANCE:
            floor = reordering_floor(
                graph,
                fetches,
                feeds,
                steps=steps,
                batch_size=batch,
                config=None,
                target=workers.target,
                orders=floor_orders,
            )
    return report(f"{label} training, batch x2 workers", check, time.perf_counter() - started, floor)


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
    args = parser.parse_args(argv)
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
