"""Synthetic cost graphs for tests and benchmarks, shaped like real training graphs or random.

:func:`layered_training_graph` mimics a training step: a forward pass of layers with parallel
branches, each layer reading a variable; a backward pass in reverse that needs the forward
activations (long edges that hold memory); and an update op per variable, co-located with it, as
TensorFlow's optimizers build them. :func:`random_dag` gives unstructured DAGs for property tests.
"""

from __future__ import annotations

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.core.transfer import TransferModel

__all__ = ["layered_training_graph", "random_dag"]


def layered_training_graph(
    num_ops: int,
    *,
    branches: int = 2,
    seed: int = 0,
    compute_time: float = 200e-6,
    activation_bytes: float = 4e6,
    parameter_bytes: float = 2e6,
    transfer_model: TransferModel | None = None,
) -> CostGraph:
    """A forward/backward/update graph of about ``num_ops`` ops (``6 + 4 * branches`` per layer, plus
    the input and the loss).

    Costs are log-normal around the given means, drawn from ``seed``. Each layer's variable, its
    read and its update op form one co-location group.
    """
    if num_ops < 1 or branches < 1:
        raise ValueError("layered_training_graph needs num_ops >= 1 and branches >= 1")
    rng = np.random.default_rng(seed)
    # forward: variable, read, 2 per branch, join; backward: 2 per branch, join, wgrad, apply
    per_layer = 6 + 4 * branches
    layers = max(1, round((num_ops - 2) / per_layer))
    graph = CostGraph(name=f"layered_training_{num_ops}", batch_size=1, source="tfplace.synthetic")
    if transfer_model is not None:
        graph.graph["transfer_model"] = transfer_model.to_dict()

    def draw(mean: float) -> float:
        return float(mean * rng.lognormal(0.0, 0.6) / np.exp(0.18))

    def op(name: str, op_type: str, *, out: float = 0.0, time: float = 0.0, **extra: object) -> str:
        graph.add_op(
            name,
            compute_time=draw(time) if time else 0.0,
            output_sizes=(int(draw(out)),) if out else (),
            op_type=op_type,
            **extra,  # type: ignore[arg-type]
        )
        return name

    def edge(src: str, dst: str) -> None:
        graph.add_dependency(src, dst, slots=(0,) if graph.nodes[src]["output_sizes"] else ())

    previous = op("input", "Placeholder", out=activation_bytes)
    forward_inputs: list[str] = []
    joins: list[str] = []
    for layer in range(layers):
        group = f"layer{layer}/kernel"
        var = f"layer{layer}/kernel"
        param = int(draw(parameter_bytes))
        graph.add_op(var, op_type="VarHandleOp", persistent_bytes=param, colocation_group=group)
        read = op(f"layer{layer}/read", "ReadVariableOp", out=param / 20, colocation_group=group)
        edge(var, read)
        ends = []
        for branch in range(branches):
            conv = op(f"layer{layer}/b{branch}/conv", "Conv2D", out=activation_bytes, time=compute_time)
            relu = op(f"layer{layer}/b{branch}/relu", "Relu", out=activation_bytes, time=compute_time / 8)
            edge(previous, conv)
            edge(read, conv)
            edge(conv, relu)
            ends.append(relu)
        join = op(f"layer{layer}/concat", "ConcatV2", out=activation_bytes, time=compute_time / 8)
        for end in ends:
            edge(end, join)
        forward_inputs.append(previous)
        joins.append(join)
        previous = join
    gradient = op("loss", "SoftmaxCrossEntropy", out=activation_bytes, time=compute_time)
    edge(previous, gradient)
    for layer in reversed(range(layers)):
        group = f"layer{layer}/kernel"
        grads = []
        for branch in range(branches):
            back = op(
                f"grad/layer{layer}/b{branch}/relu", "ReluGrad", out=activation_bytes, time=compute_time / 8
            )
            conv = op(
                f"grad/layer{layer}/b{branch}/conv",
                "Conv2DBackpropInput",
                out=activation_bytes,
                time=compute_time,
            )
            edge(gradient, back)
            edge(f"layer{layer}/b{branch}/relu", back)
            edge(back, conv)
            edge(f"layer{layer}/read", conv)
            grads.append(conv)
        join = op(f"grad/layer{layer}/addn", "AddN", out=activation_bytes, time=compute_time / 8)
        for grad in grads:
            edge(grad, join)
        wgrad = op(
            f"grad/layer{layer}/kernel", "Conv2DBackpropFilter", out=parameter_bytes / 20, time=compute_time
        )
        edge(forward_inputs[layer], wgrad)
        edge(grads[0], wgrad)
        apply = op(
            f"update/layer{layer}",
            "ResourceApplyGradientDescent",
            time=compute_time / 20,
            colocation_group=group,
        )
        edge(wgrad, apply)
        graph.add_dependency(f"layer{layer}/kernel", apply, control=True)
        gradient = join
    return graph


def random_dag(
    num_ops: int,
    *,
    average_degree: float = 2.0,
    locality: int = 20,
    seed: int = 0,
    group_fraction: float = 0.0,
    cpu_only_fraction: float = 0.0,
    max_compute: float = 1e-3,
    max_bytes: int = 1 << 20,
    transfer_model: TransferModel | None = None,
) -> CostGraph:
    """A random DAG: op ``i`` feeds ops up to ``locality`` positions later, ``average_degree`` edges per op.

    ``group_fraction`` of the ops join random co-location groups of 2-4 ops; ``cpu_only_fraction``
    of the ops have ``device_kinds=("CPU",)``. Names are shuffled so that graph order is not a
    topological order.
    """
    rng = np.random.default_rng(seed)
    names = [f"op{i}" for i in rng.permutation(num_ops)]
    graph = CostGraph(name=f"random_{num_ops}_{seed}", source="tfplace.synthetic")
    if transfer_model is not None:
        graph.graph["transfer_model"] = transfer_model.to_dict()
    groups: dict[int, str] = {}
    grouped = rng.random(num_ops) < group_fraction
    index = 0
    while index < num_ops:
        size = int(rng.integers(2, 5))
        members = [i for i in range(index, min(num_ops, index + 3 * size), 3) if grouped[i]]
        for i in members if len(members) > 1 else []:
            groups[i] = f"group{index}"
        index += 3 * size
    for i, name in enumerate(names):
        graph.add_op(
            name,
            compute_time=float(rng.uniform(0.0, max_compute)),
            persistent_bytes=int(rng.integers(0, max_bytes)) if rng.random() < 0.1 else 0,
            output_sizes=tuple(int(rng.integers(0, max_bytes)) for _ in range(int(rng.integers(1, 3)))),
            temporary_bytes=int(rng.integers(0, max_bytes // 4)),
            op_type="Synthetic",
            colocation_group=groups.get(i),
            device_kinds=("CPU",) if rng.random() < cpu_only_fraction else None,
        )
    edges_per_op = rng.poisson(average_degree, num_ops)
    for i in range(num_ops - 1):
        for _ in range(int(edges_per_op[i])):
            j = int(rng.integers(i + 1, min(num_ops, i + 1 + locality)))
            if rng.random() < 0.1:
                graph.add_dependency(names[i], names[j], control=True)
            else:
                slot = int(rng.integers(0, len(graph.nodes[names[i]]["output_sizes"])))
                graph.add_dependency(names[i], names[j], slots=(slot,))
    return graph
