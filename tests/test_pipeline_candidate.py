"""Celeritas' pipeline candidate: fusion along the heavy-input order, cut into compute-balanced runs."""

from collections import Counter

import pytest

from helpers import UNIT_LINK, chain_graph, graph_from_edges
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.orders import average_parallelism, cpd_topo_order, heavy_input_order
from tfplace.placer.adjusting import balanced_fill
from tfplace.placer.celeritas import celeritas, order_place
from tfplace.placer.fusion import fuse
from tfplace.placer.ledger import MemoryLedger
from tfplace.simulator import simulate

LAYERS, STEPS = 3, 12


def unrolled_rnn(layers: int = LAYERS, steps: int = STEPS, weight_reads: bool = False) -> CostGraph:
    """An unrolled recurrent network: cell ``c{l}_{t}`` reads its layer's weights ``w{l}`` (a heavy
    tensor, 50 bytes), the state of step ``t - 1`` and the output of layer ``l - 1`` (1 byte each);
    cells compute 10 s, weights nothing. With ``weight_reads`` the cells take the weights through
    a read op ``r{l}`` (as TensorFlow's ``kernel/Read/Identity``, 1 s)."""
    edges = [(f"w{layer}", f"r{layer}", 50) for layer in range(layers) if weight_reads]
    for layer in range(layers):
        for step in range(steps):
            cell = f"c{layer}_{step}"
            edges.append((f"r{layer}" if weight_reads else f"w{layer}", cell, 50))
            edges.append((f"x{step}" if layer == 0 else f"c{layer - 1}_{step}", cell, 1))
            if step:
                edges.append((f"c{layer}_{step - 1}", cell, 1))
    compute = {f"c{layer}_{step}": 10.0 for layer in range(layers) for step in range(steps)}
    compute |= {f"w{layer}": 0.0 for layer in range(layers)} | {f"x{step}": 0.0 for step in range(steps)}
    compute |= {f"r{layer}": 1.0 for layer in range(layers) if weight_reads}
    return graph_from_edges(edges, compute)


def layer_of(name: str) -> int:
    return int(name[1:].split("_")[0])


def cells(indexed, order):
    return [indexed.names[op] for op in order if indexed.names[op].startswith("c")]


def test_heavy_input_order_runs_each_layer_through_every_time_step_before_the_next_layer():
    indexed = index_graph(unrolled_rnn())
    layers = [layer_of(name) for name in cells(indexed, heavy_input_order(indexed, cpd_topo_order(indexed)))]
    assert layers == sorted(layers)


def test_heavy_input_order_reads_a_layers_weights_just_before_its_first_time_step():
    indexed = index_graph(unrolled_rnn(weight_reads=True))
    names = [indexed.names[op] for op in heavy_input_order(indexed, cpd_topo_order(indexed))]
    for layer in range(LAYERS):
        first_step = names.index(f"c{layer}_0")
        assert names[first_step - 2 : first_step] == [f"w{layer}", f"r{layer}"]


def test_cpd_topo_order_alone_mixes_the_layers_of_the_unrolled_network():
    indexed = index_graph(unrolled_rnn())
    layers = [layer_of(name) for name in cells(indexed, cpd_topo_order(indexed))]
    assert layers != sorted(layers)


@pytest.mark.parametrize("weight_reads", [False, True])
def test_heavy_input_order_is_a_topological_order_of_every_op(weight_reads):
    indexed = index_graph(unrolled_rnn(weight_reads=weight_reads))
    order = heavy_input_order(indexed, cpd_topo_order(indexed))
    position = {op: i for i, op in enumerate(order)}
    assert sorted(order) == list(range(len(indexed)))
    assert all(position[u] < position[v] for u in range(len(indexed)) for v in indexed.succ[u])


@pytest.mark.parametrize("weight_reads", [False, True])
def test_balanced_fill_cuts_the_layer_ordered_clusters_into_one_layer_per_device(weight_reads):
    indexed = index_graph(unrolled_rnn(weight_reads=weight_reads))
    devices = DeviceSet.parse(f"/device:GPU:0-{LAYERS - 1}", 10**9, intra_host=UNIT_LINK)
    fusion = fuse(indexed, heavy_input_order(indexed, cpd_topo_order(indexed)), exploration_range=4)
    assert len(fusion.members) > LAYERS  # clusters smaller than a layer: the cut chooses among them
    ledger = MemoryLedger(indexed, devices, memory_model="liveness")
    balanced_fill(LAYERS)(index_graph(fusion.coarse), fusion.members, ledger)
    placed = dict(zip(indexed.names, ledger.op_devices().tolist()))
    assert {name: device for name, device in placed.items() if name.startswith("c")} == {
        f"c{layer}_{step}": layer for layer in range(LAYERS) for step in range(STEPS)
    }
    if weight_reads:  # each layer's weight read on the device of the time steps reading it
        assert [placed[f"r{layer}"] for layer in range(LAYERS)] == list(range(LAYERS))


def test_balanced_fill_rejects_fewer_than_one_part():
    with pytest.raises(ValueError, match="parts must be >= 1"):
        balanced_fill(0)


def test_celeritas_places_the_unrolled_network_as_a_layer_pipeline_faster_than_one_device():
    graph = unrolled_rnn()
    devices = DeviceSet.parse(f"/device:GPU:0-{LAYERS - 1}", 10**9, intra_host=UNIT_LINK)
    indexed = index_graph(graph)
    output = celeritas(indexed, devices)
    placed = dict(zip(indexed.names, output.op_devices.tolist()))
    layer_devices = {layer: Counter(placed[f"c{layer}_{t}"] for t in range(STEPS)) for layer in range(LAYERS)}
    assert all(len(devices_used) == 1 for devices_used in layer_devices.values())
    assert len({next(iter(c)) for c in layer_devices.values()}) == LAYERS
    assert output.details["fusion_order"] == "_heavy_input_cpd_order"
    one_device = simulate(indexed, [0] * len(indexed), devices).makespan
    assert simulate(indexed, output.op_devices, devices).makespan < 0.6 * one_device


def test_average_parallelism_is_one_for_a_chain_and_the_count_of_equal_independent_chains():
    assert average_parallelism(index_graph(chain_graph([1, 2, 3], [1, 1]))) == pytest.approx(1)
    two = graph_from_edges([("a", "a1", 1), ("b", "b1", 1)], {"a": 2, "a1": 2, "b": 2, "b1": 2})
    assert average_parallelism(index_graph(two)) == pytest.approx(2)


def test_average_parallelism_of_the_unrolled_network_is_its_cells_over_the_longest_wavefront():
    indexed = index_graph(unrolled_rnn())
    assert average_parallelism(indexed) == pytest.approx(LAYERS * STEPS / (LAYERS + STEPS - 1))


def test_order_place_candidate_reused_from_adjusting_placement_on_one_device_is_order_place_itself():
    graph = chain_graph([1, 2, 3, 4], [1, 1, 1])
    devices = DeviceSet.parse("/device:GPU:0-1", 10**9, intra_host=UNIT_LINK)
    indexed = index_graph(graph)
    output = celeritas(indexed, devices)
    candidates = {c[:2]: c[2] for c in output.details["candidates"]}
    alone = order_place(indexed, devices)
    assert set(alone.op_devices.tolist()) == {0}
    assert candidates["cpd_topo_order", "order_place_clusters"] == pytest.approx(
        simulate(indexed, alone.op_devices, devices).makespan
    )
