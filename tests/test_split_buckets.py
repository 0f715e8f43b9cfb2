"""Gradient bucketing (issue 15, step 4): all-reduces of weight gradients fused as DDP's buckets are."""

from __future__ import annotations

import networkx as nx

from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.transfer import TransferModel
from tfplace.split.buckets import AllReduce, fuse
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import expand_plan, simulate_plan

SLOW_MESSAGES = TransferModel(k=1e-9, b=1e-3, name="latency-bound")


def many_weights_graph(layers: int = 8, batch: int = 8, width: int = 16) -> CostGraph:
    """A chain of ``layers`` dense layers whose weight gradients all come at the end of the step:
    many small all-reduces, each paying the link's latency."""
    graph = CostGraph(batch_size=batch, transfer_model=SLOW_MESSAGES.to_dict())
    act, weight = batch * width * 4, width * width * 4
    rows = {"transpose_a": False, "transpose_b": False}

    def op(
        name: str, op_type: str, size: int, shape: tuple[int, ...], inputs: list[str], **attrs: object
    ) -> None:
        graph.add_op(
            name,
            op_type=op_type,
            compute_time=1e-3,
            output_sizes=(size,),
            output_shapes=(shape,),
            inputs=tuple((i, 0) for i in inputs),
            attrs=dict(attrs) or None,
            persistent_bytes=weight if op_type == "VarHandleOp" else 0,
        )
        for producer in inputs:
            graph.add_dependency(producer, name, slots=(0,))

    op("h0", "Placeholder", act, (batch, width), [])
    for i in range(1, layers + 1):
        op(f"w{i}", "VarHandleOp", 8, (), [])
        op(f"read{i}", "ReadVariableOp", weight, (width, width), [f"w{i}"])
        op(f"h{i}", "MatMul", act, (batch, width), [f"h{i - 1}", f"read{i}"], **rows)
    op("g", "Relu", act, (batch, width), [f"h{layers}"])
    for i in range(1, layers + 1):
        op(
            f"dw{i}",
            "MatMul",
            weight,
            (width, width),
            [f"h{i - 1}", "g"],
            transpose_a=True,
            transpose_b=False,
        )
        op(f"update{i}", "AssignSubVariableOp", 0, (), [f"w{i}", f"dw{i}"])
    return graph


def test_bucketed_all_reduces_pay_less_latency_than_one_all_reduce_per_weight():
    graph = many_weights_graph()
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB", intra_host=SLOW_MESSAGES)
    apart = data_parallel_plan(graph, devices, bucket_bytes=None)
    fused = data_parallel_plan(graph, devices)
    simulate_plan(graph, apart)
    simulate_plan(graph, fused)
    assert fused.step_time is not None and apart.step_time is not None
    assert fused.step_time < apart.step_time - 5e-3  # at least five of the eight latencies saved
    assert fused.bytes_moved == apart.bytes_moved  # the same bytes, fewer messages

    def messages(plan):
        expanded = expand_plan(graph, plan)
        return sum(expanded.devices[u] != expanded.devices[v] for u, v in expanded.graph.edges)

    assert messages(fused) < messages(apart)


def request(op: str, nbytes: int = 10, readers: tuple[str, ...] = ()) -> AllReduce:
    return AllReduce(op, 0, nbytes, ("a", "b"), frozenset(readers))


def test_buckets_fill_up_to_their_size_in_the_order_gradients_are_ready_and_a_larger_tensor_goes_alone():
    graph = nx.DiGraph([("t1", "t2"), ("t2", "t3"), ("t3", "big")])
    for op in graph:
        graph.nodes[op]["compute_time"] = 1.0
    buckets = fuse(graph, [request("t3"), request("big", 100), request("t1"), request("t2")], 25)
    assert [[r.op for r in bucket] for bucket in buckets] == [["t1", "t2"], ["t3"], ["big"]]
    assert [[r.op for r in b] for b in fuse(graph, [request("t1"), request("t2")], None)] == [["t1"], ["t2"]]


def test_a_gradient_that_needs_an_earlier_all_reduced_result_starts_a_new_bucket():
    # g2 is computed from the all-reduced g1 (read by "clip"): one bucket would wait for itself.
    graph = nx.DiGraph([("g1", "clip"), ("clip", "g2"), ("g1", "g3")])
    buckets = fuse(graph, [request("g1", readers=("clip",)), request("g2"), request("g3")], 1000)
    assert [[r.op for r in bucket] for bucket in buckets] in (
        [["g1", "g3"], ["g2"]],
        [["g1"], ["g3", "g2"]],
        [["g1"], ["g2", "g3"]],
    )
    assert all({"g1", "g2"} - {r.op for r in bucket} for bucket in buckets)
