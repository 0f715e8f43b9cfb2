"""Is a split's training deviation float reordering or a rewrite bug? Measure it against a control.

The control is the unsplit graph fed the same batch in another example order (images, labels and
every fed tensor permuted alike along the batch): mathematically the same loss, gradients and
batch-norm statistics, but the batch reductions sum in another order. Its deviation from the
unsplit run is the noise floor of summation order; a rewrite bug would show as a deviation well
above that floor at step 1, where no optimizer has amplified anything yet.

Per model: at step 1 (before any update) the largest deviation over every float gradient tensor
(every output of an op under ``gradients/``), split and control side by side; then, per step of
training, the loss deviation of split and control, and after the last step the largest deviation
of any weight (and where). With ``--orders``, each weight's split deviation against its own floor:
its largest deviation when the unsplit graph is fed its batch in that many other orders.

With ``--layers``, per training batch norm at step 1 (forward): how far the split's and the
control's normalized output is from the unsplit graph's, and each run's *local* error, its output
against float64 truth computed from that run's own input to the layer (Ioffe and Szegedy 2015,
Algorithm 1): a rewrite error shows as a local error above the fused kernel's, rounding
amplified through the network as a deviation growing layer by layer with local errors alike.

    .venv/bin/python benchmarks/split_noise_floor.py [--models inception_v3 transformer] [--steps 20]
        [--orders 23] [--layers]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tensorflow as tf

from tfplace.split.rules import BATCH
from tfplace.tf_graph.session import default_initializers, virtual_cpu_config
from tfplace.tf_graph.split_check import deviation, reordering_floor
from tfplace.tf_graph.split_rewrite import split_graph, uniform_plan

BATCH_SIZE = 4


def gradient_tensors(graph: Any) -> list[str]:
    """Every float output of an op under ``gradients/`` (the backward pass, not only weight grads)."""
    return [
        t.name
        for op in graph.get_operations()
        if op.name.startswith("gradients/") and op.type not in ("Const", "Shape", "Identity")
        for t in op.outputs
        if t.dtype == tf.float32 and t.shape.rank is not None
    ]


def weight_gradients(graph: Any) -> list[str]:
    """The gradient each dense optimizer update (``Apply*``) reads: its last input."""
    return [
        op.inputs[-1].name for op in graph.get_operations() if "Apply" in op.type and "Sparse" not in op.type
    ]


def permuted(feeds: dict[str, np.ndarray], order: np.ndarray) -> dict[str, np.ndarray]:
    """``feeds`` with every tensor whose leading dimension is the batch reordered by ``order``."""
    return {
        name: value[order] if np.ndim(value) and len(value) == BATCH_SIZE else value
        for name, value in feeds.items()
    }


def variables(graph: Any) -> list[Any]:
    return list(graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES))


def train(
    graph: Any, loss: str, train_op: str, feeds: dict, steps: int, probes: list[str], initial: list | None
) -> tuple[list, dict[str, np.ndarray], list[float], list]:
    """Initial weights, step-1 values of ``probes``, per-step losses and final weights."""
    config = virtual_cpu_config(2)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(default_initializers(graph))
        weights = variables(graph)
        if initial is not None:
            session.run(
                [v.initializer for v in weights],
                {v.initializer.inputs[1]: x for v, x in zip(weights, initial)},
            )
        start = session.run(weights)
        names = set(t.name for op in graph.get_operations() for t in op.outputs)
        present = [p for p in probes if p in names]
        probed = dict(zip(present, session.run(present, feeds)))
        losses = []
        for _ in range(steps):
            losses.append(float(session.run([loss, train_op], feeds)[0]))
        final = session.run(weights)
    return start, probed, losses, final


def investigate(model: str, steps: int, orders: int) -> None:
    from helpers import SMALL_MODELS
    from models import build_model

    spec = build_model(model, **SMALL_MODELS[model])
    feeds = spec.feed_fn(BATCH_SIZE)
    order = np.array([2, 0, 3, 1])
    weight_grads = set(weight_gradients(spec.graph))
    probes = gradient_tensors(spec.graph) + sorted(weight_grads)
    start, base_grads, base_losses, base_final = train(
        spec.graph, spec.loss, spec.train_op, feeds, steps, probes, None
    )
    _, ctrl_grads, ctrl_losses, ctrl_final = train(
        spec.graph, spec.loss, spec.train_op, permuted(feeds, order), steps, probes, start
    )
    plan = uniform_plan(spec.graph, ["/device:CPU:0", "/device:CPU:1"], BATCH, batch_size=BATCH_SIZE)
    rewritten, _ = split_graph(plan, spec.graph, BATCH_SIZE)
    _, split_grads, split_losses, split_final = train(
        rewritten, spec.loss, spec.train_op, feeds, steps, probes, start
    )

    def step1(other: dict[str, np.ndarray], names: set[str] | None) -> tuple[float, str, int]:
        worst, where, compared = 0.0, "", 0
        for name, value in base_grads.items():
            if name not in other or np.shape(other[name]) != np.shape(value):
                continue
            if names is not None and name not in names:
                continue
            compared += 1
            d = deviation(value, other[name])
            if d > worst:
                worst, where = d, name
        return worst, where, compared

    print(f"== {model}: step 1, before any update: largest deviation over gradient tensors")
    for label, values, names in (
        ("split, every gradient tensor", split_grads, None),
        ("split, weight gradients", split_grads, weight_grads),
        ("control, weight gradients", ctrl_grads, weight_grads),
    ):
        worst, where, count = step1(values, names)
        print(f"   {label:<30} {worst:9.2e} over {count:5d} tensors (worst {where})")
    print(f"== {model}: loss per step: unsplit, |split - unsplit|, |control - unsplit|")
    for step, (b, s, c) in enumerate(zip(base_losses, split_losses, ctrl_losses), 1):
        print(f"   step {step:2d}  loss {b:12.6g}  split {abs(s - b):9.2e}  control {abs(c - b):9.2e}")
    for label, final in (("split", split_final), ("control", ctrl_final)):
        worst, where = max(
            (deviation(a, b), v.name) for v, a, b in zip(variables(spec.graph), base_final, final)
        )
        print(f"   after step {steps}: {label:<8} largest weight deviation {worst:9.2e} ({where})")
    if orders:
        weight_floors(spec, feeds, steps, orders, base_final, split_final)


def weight_floors(spec: Any, feeds: dict, steps: int, orders: int, base: list, split: list) -> None:
    """Per weight, the split's deviation against that weight's floor: its largest deviation when
    the unsplit graph is fed its batch in each of ``orders`` other orders (all 23 at batch 4)."""
    floor = reordering_floor(
        spec.graph,
        [spec.loss, spec.train_op],
        feeds,
        steps=steps,
        batch_size=BATCH_SIZE,
        config=virtual_cpu_config(2),
        orders=orders,
    )
    rows = []
    for v, a, b in zip(variables(spec.graph), base, split):
        rows.append((deviation(a, b), floor.per_value[f"{v.name} after step {steps}"], v.name))
    beyond = [row for row in rows if row[0] > row[1]]
    print(
        f"== floor per weight over the {floor.orders} other orders of the batch: largest {floor.max_deviation:.2e} "
        f"({floor.worst}); weights beyond their own floor {len(beyond)} of {len(rows)}"
        + (f", the largest {max(beyond)[0]:.2e} ({max(beyond)[2]})" if beyond else "")
    )
    for split_deviation, own_floor, name in sorted(rows, reverse=True)[:8]:
        print(f"   {name:<60} split {split_deviation:9.2e}  floor {own_floor:9.2e}")


def batch_norm_layers(model: str) -> None:
    """The ``--layers`` table (module docstring) of every ``FusedBatchNormV3`` of ``model``."""
    from helpers import SMALL_MODELS
    from models import build_model
    from tfplace.split.plan import OpSplit

    spec = build_model(model, **SMALL_MODELS[model])
    layers = [op for op in spec.graph.get_operations() if op.type == "FusedBatchNormV3"]
    with spec.graph.as_default():  # identities the plan keeps whole: the split's pieces joined
        probes = [
            [tf.identity(t, name=f"probe/{op.name}/{i}").name for i, t in enumerate(op.inputs[:3])]
            + [tf.identity(op.outputs[0], name=f"probe/{op.name}/y").name]
            for op in layers
        ]
    devices = ["/device:CPU:0", "/device:CPU:1"]
    plan = uniform_plan(spec.graph, devices, BATCH, batch_size=BATCH_SIZE)
    plan.splits.update({name.split(":")[0]: OpSplit.whole(devices[0]) for group in probes for name in group})
    rewritten, _ = split_graph(plan, spec.graph, BATCH_SIZE)
    feeds, order = spec.feed_fn(BATCH_SIZE), np.array([1, 0, 3, 2])  # an order that is its own inverse
    loss = spec.loss if isinstance(spec.loss, str) else spec.loss.name
    flat = [loss] + [name for group in probes for name in group]
    start, base, _, _ = train(spec.graph, spec.loss, spec.train_op, feeds, 0, flat, None)
    _, split, _, _ = train(rewritten, spec.loss, spec.train_op, feeds, 0, flat, start)
    _, control, _, _ = train(spec.graph, spec.loss, spec.train_op, permuted(feeds, order), 0, flat, start)
    control |= {name: value[order] for name, value in control.items() if np.ndim(value) == 4}
    print(
        f"== {model}: step 1 per training batch norm: input shape, smallest variance of a channel; "
        "deviation from the unsplit output of the split and the control; local error of unsplit, split, control"
        f" (loss: split {deviation(base[loss], split[loss]):.2e}, control {deviation(base[loss], control[loss]):.2e})"
    )
    for op, (x, scale, offset, y) in zip(layers, probes):
        epsilon = op.get_attr("epsilon")
        local = [
            deviation(batch_norm_truth(run[x], run[scale], run[offset], epsilon), run[y])
            for run in (base, split, control)
        ]
        variance = float(np.asarray(base[x], np.float64).var((0, 1, 2)).min())
        print(
            f"   {op.name:<40} {np.shape(base[x])!s:<15} {variance:9.2e}  {deviation(base[y], split[y]):9.2e} "
            f"{deviation(base[y], control[y]):9.2e} {local[0]:9.2e} {local[1]:9.2e} {local[2]:9.2e}"
        )


def batch_norm_truth(x: np.ndarray, scale: np.ndarray, offset: np.ndarray, epsilon: float) -> np.ndarray:
    """A training batch norm's output (NHWC) in float64."""
    x = np.asarray(x, np.float64)
    mean = x.mean((0, 1, 2))
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean((0, 1, 2)) + epsilon) * scale + offset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v3", "transformer"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--orders", type=int, default=0, help="also each weight's floor over this many orders"
    )
    parser.add_argument("--layers", action="store_true", help="per batch norm at step 1, not training")
    args = parser.parse_args(argv)
    tf.compat.v1.disable_eager_execution()
    for model in args.models:
        if args.layers:
            batch_norm_layers(model)
        else:
            investigate(model, args.steps, args.orders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
