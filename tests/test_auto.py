"""auto: the simulator judges a portfolio of placements and local moves; the fastest that fits wins."""

import json
import logging as std_logging
from pathlib import Path

import numpy as np
import pytest
from test_split_layerwise import wide_layer_graph

from helpers import UNIT_LINK, chain_graph, small_cnn_graph
from tfplace.core import progress
from tfplace.core.costgraph import load_json
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import index_graph
from tfplace.core.synthetic import layered_training_graph, random_dag
from tfplace.core.transfer import TransferModel
from tfplace.placer import PLACERS, place_cost_graph
from tfplace.placer.auto import ALWAYS, MIN_SIMULATIONS, SMALL_GRAPH_OPS, whole_op_search
from tfplace.simulator import simulate
from tfplace.split.data_parallel import data_parallel_plan
from tfplace.split.expand import simulate_plan

TEST_DATA = Path(__file__).resolve().parent / "data"


def gpus(count=2, memory=10**9, link=UNIT_LINK):
    return DeviceSet.parse(f"/device:GPU:0-{count - 1}", memory, intra_host=link)


def fits(placement, devices, margin=0.05):
    """The placement's simulated peak leaves ``margin`` of every device free."""
    capacity = {d.name: d.memory for d in devices.all_devices}
    return all(peak <= (1 - margin) * capacity[name] for name, peak in placement.peak_memory.items())


def simulated_candidates(placement):
    return [c for c in placement.details["candidates"] if "step_time" in c]


#: Graphs with parallel branches, groups and ops without a GPU kernel, on devices of either kind.
GRAPHS = [
    (layered_training_graph(380, seed=1), "/device:GPU:0-3", 0.4),
    (random_dag(120, seed=3, group_fraction=0.3), "/device:GPU:0-2", 0.5),
    (random_dag(80, seed=4, group_fraction=0.3, cpu_only_fraction=0.1), "/device:GPU:0-1,/device:CPU:0", 1.0),
    (random_dag(60, seed=5, average_degree=3.0), "/job:worker/task:0-1/device:GPU:0-1", 2.0),
]


def devices_for(graph, spec, fraction):
    """The devices of ``spec``, holding ``fraction`` of the graph's static memory in all."""
    total = int(index_graph(graph).memory.sum())
    count = len(DeviceSet.parse(spec, 1))
    return DeviceSet.parse(spec, max(1, int(fraction * total / count)))


@pytest.mark.parametrize(("graph", "spec", "fraction"), GRAPHS)
def test_it_is_never_slower_in_the_simulator_than_any_candidate_or_registered_placer_that_fits(
    graph, spec, fraction
):
    devices = devices_for(graph, spec, fraction)
    placement = place_cost_graph(graph, devices, "auto")

    rivals = [place_cost_graph(graph, devices, p) for p in PLACERS if p != "auto"]
    fitting = [p.step_time for p in rivals if fits(p, devices)]
    fitting += [c["step_time"] for c in simulated_candidates(placement) if c["tier"] == "fits"]
    assert fitting, "some placement fits, or the comparison proves nothing"
    assert fits(placement, devices)
    assert placement.step_time <= min(fitting)


def test_on_a_graph_too_large_for_every_placer_it_keeps_list_scheduling_where_that_wins():
    # a random DAG is wide and sends little: m-ETF's schedule beats every cut of METIS threefold
    graph = random_dag(SMALL_GRAPH_OPS + 3000, seed=2, average_degree=3.0, locality=200, group_fraction=0.2)
    devices = devices_for(graph, "/device:GPU:0-3", 2.0)
    placement = place_cost_graph(graph, devices, "auto")
    m_etf = place_cost_graph(graph, devices, "m_etf")
    metis = place_cost_graph(graph, devices, "metis")

    assert m_etf.step_time < metis.step_time / 3
    assert placement.step_time <= m_etf.step_time
    assert "order_place" not in {c["name"] for c in placement.details["candidates"]}


def test_it_prefers_a_placement_that_fits_memory_over_a_faster_one_that_does_not():
    # two 60-byte weights: together they exceed a 100-byte device, and splitting them costs a 1 s transfer
    graph = chain_graph([1.0, 1.0, 1.0], [1, 1], memory=[60, 0, 60])
    devices = gpus(2, memory=100)
    placement = place_cost_graph(graph, devices, "auto")

    single = next(c for c in placement.details["candidates"] if c["name"] == "single")
    assert single["tier"] == "out of memory"
    assert single["step_time"] < placement.step_time
    assert fits(placement, devices)
    assert not any("simulator" in warning for warning in placement.warnings)


def test_a_placement_within_memory_but_not_within_the_margin_loses_to_one_within_it():
    graph = chain_graph([1.0, 1.0], [1], memory=[50, 45])
    devices = gpus(2, memory=100)
    single_peak = max(simulate(graph, {"o0": devices.names[0], "o1": devices.names[0]}, devices).peak_memory)
    assert 95 < single_peak <= 100

    without_margin = place_cost_graph(graph, devices, "auto", margin=0.0)
    with_margin = place_cost_graph(graph, devices, "auto", margin=0.05)

    assert set(without_margin.assignment.values()) == {devices.names[0]}
    assert len(set(with_margin.assignment.values())) == 2
    assert with_margin.step_time > without_margin.step_time


def test_it_keeps_a_chain_on_one_device_when_that_fits_and_splitting_only_adds_transfers():
    graph = chain_graph([1.0] * 12, [1000] * 11, memory=[1] * 12)
    placement = place_cost_graph(graph, gpus(4), "auto")

    assert len(set(placement.assignment.values())) == 1
    assert placement.step_time == pytest.approx(12.0)


def test_when_nothing_fits_it_returns_the_least_overcommitted_candidate_and_says_so():
    graph, spec, _ = GRAPHS[0]
    devices = devices_for(graph, spec, 0.02)
    placement = place_cost_graph(graph, devices, "auto")

    capacity = {d.name: d.memory for d in devices.all_devices}

    def excess(peaks):
        return sum(max(0, peak - capacity[name]) for name, peak in peaks.items())

    simulated = simulated_candidates(placement)
    assert all(c["tier"] == "out of memory" for c in simulated)
    assert excess(placement.peak_memory) <= min(excess(c["peak_memory"]) for c in simulated)
    assert any("no candidate placement fits in memory in the simulator" in w for w in placement.warnings)


@pytest.mark.parametrize("fraction", [0.02, 0.4, 2.0])
def test_its_warnings_are_the_simulators_verdict_not_the_static_estimates(fraction):
    graph, spec, _ = GRAPHS[0]
    devices = devices_for(graph, spec, fraction)
    placement = place_cost_graph(graph, devices, "auto")

    capacity = {d.name: d.memory for d in devices.all_devices}
    simulated_over = any(peak > capacity[name] for name, peak in placement.peak_memory.items())
    assert placement.details["memory_model"] == "simulated"
    assert not any("overcommitted" in w or "no placement fits" in w for w in placement.warnings)
    assert bool(placement.warnings) == simulated_over


def test_the_same_input_gives_the_same_placement_and_the_same_details():
    graph, spec, fraction = GRAPHS[2]
    devices = devices_for(graph, spec, fraction)
    first = place_cost_graph(graph, devices, "auto")
    second = place_cost_graph(graph.copy(), devices, "auto")

    assert first.assignment == second.assignment
    assert first.step_time == second.step_time
    assert first.details == second.details


@pytest.mark.parametrize(("graph", "spec", "fraction"), GRAPHS[1:])
def test_local_moves_keep_groups_whole_and_ops_on_device_kinds_that_can_run_them(graph, spec, fraction):
    devices = devices_for(graph, spec, fraction)
    placement = place_cost_graph(graph, devices, "auto")  # place_cost_graph checks the constraints

    groups: dict[str, set[str]] = {}
    for op, group in graph.nodes(data="colocation_group"):
        if group is not None:
            groups.setdefault(group, set()).add(placement.assignment[op])
        kinds = graph.nodes[op]["device_kinds"]
        if kinds is not None:
            assert devices.kind_of(devices.index(placement.assignment[op])) in kinds
    assert all(len(placed) == 1 for placed in groups.values())
    assert placement.details["moves"]["tried"] > 0


def test_local_moves_never_send_an_op_to_a_device_kind_without_its_kernel():
    # the CPU op in the middle of a GPU chain costs two 1000 s transfers, which a move to the GPU would save
    graph = chain_graph([1.0] * 5, [1000] * 4)
    for op in graph:
        graph.nodes[op]["device_kinds"] = ("CPU",) if op == "o2" else ("GPU",)
    devices = DeviceSet.parse("/device:GPU:0,/device:CPU:0", 10**9, intra_host=UNIT_LINK)
    placement = place_cost_graph(graph, devices, "auto")

    assert placement.assignment == {op: "/device:CPU:0" if op == "o2" else "/device:GPU:0" for op in graph}
    assert placement.step_time == pytest.approx(2005.0)


def test_details_name_the_winner_and_each_candidates_simulated_step_and_peak_memory():
    graph, spec, fraction = GRAPHS[0]
    devices = devices_for(graph, spec, fraction)
    placement = place_cost_graph(graph, devices, "auto")
    details = placement.details

    names = [c["name"] for c in details["candidates"]]
    assert names[: len(ALWAYS)] == list(ALWAYS)
    assert details["winner"].split(" + ")[0] in names
    simulated = simulated_candidates(placement)
    assert len(simulated) <= details["simulations"]
    for candidate in simulated:
        assert set(candidate) == {"name", "step_time", "peak_memory", "tier"}
        assert set(candidate["peak_memory"]) <= {d.name for d in devices.all_devices}
    assert details["tier"] == "fits"
    kept = details["moves"]["kept"]
    origin = next(c for c in simulated if c["name"] == details["winner"].split(" + ")[0])
    assert (placement.step_time < origin["step_time"]) == (kept > 0)


def test_the_budget_bounds_the_simulations():
    graph, spec, fraction = GRAPHS[0]
    devices = devices_for(graph, spec, fraction)
    indexed = index_graph(graph, devices.typical_link)
    small = whole_op_search(indexed, devices, budget=1)
    larger = whole_op_search(indexed, devices, budget=10 * len(indexed))

    assert small.details["simulations"] == MIN_SIMULATIONS
    assert larger.details["simulations"] == 10
    assert larger.estimated_makespan <= small.estimated_makespan


@pytest.mark.parametrize(("option", "value"), [("margin", -0.1), ("margin", 1.0), ("budget", 0)])
def test_a_margin_outside_zero_to_one_or_a_budget_below_one_is_rejected(option, value):
    graph = chain_graph([1.0, 1.0], [1])
    with pytest.raises(ValueError, match=option):
        place_cost_graph(graph, gpus(2), "auto", **{option: value})


def test_an_empty_graph_gets_an_empty_placement():
    placement = place_cost_graph(chain_graph([], []), gpus(2), "auto")

    assert placement.assignment == {}
    assert placement.step_time == 0.0
    assert np.isfinite(placement.details["candidates"][0]["step_time"])


# -- split plans (data parallelism and the layer-wise search) compete on graphs that record splits --

FAST_LINK = TransferModel(k=1e-6, b=0.0, name="fast")


def split_case(graph, devices):
    graph.set_transfer_model(devices.typical_link)
    return graph, devices


def split_candidates(placement):
    return {c["name"]: c for c in placement.details["candidates"] if c.get("split")}


def test_auto_picks_data_parallelism_when_it_is_the_fastest_that_fits():
    graph, devices = split_case(small_cnn_graph(8), gpus(memory="1GB", link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto")

    parallel = data_parallel_plan(graph, devices)
    simulate_plan(graph, parallel)
    single = place_cost_graph(graph, devices, "single")
    assert (
        placement.details["winner"] == "data_parallel"
        and placement.placer == "auto (data_parallel split plan)"
    )
    assert placement.step_time == pytest.approx(parallel.step_time) and placement.step_time < single.step_time
    assert placement.pieces == {op: split.devices for op, split in placement.split_plan.split_ops.items()}
    assert split_candidates(placement)["layerwise"]["step_time"] >= placement.step_time  # a tie keeps DP


def test_auto_takes_the_layer_wise_plan_where_it_beats_data_parallelism_and_every_placement():
    graph, devices = split_case(wide_layer_graph(), gpus(memory="1GB", link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto")

    split = split_candidates(placement)
    assert placement.details["winner"] == "layerwise"
    assert placement.step_time < split["data_parallel"]["step_time"]
    whole_ops = placement.details.get("whole_op_step_time", placement.details["whole_op_bound"])
    assert placement.step_time < whole_ops
    assert placement.split_plan.splits["logits"].dimension == "channel"


def test_auto_searches_no_placement_of_whole_ops_when_a_split_plan_beats_the_critical_path():
    graph, devices = split_case(wide_layer_graph(), gpus(memory="1GB", link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto")

    assert placement.details["whole_op_winner"].startswith("not searched")
    assert placement.step_time < placement.details["whole_op_bound"]
    for placer in ALWAYS:  # the placers it would have run: none is faster
        assert place_cost_graph(graph, devices, placer).step_time >= placement.details["whole_op_bound"]


def test_auto_keeps_a_placement_of_whole_ops_when_no_split_plan_is_faster():
    graph, devices = split_case(wide_layer_graph(batch=512), gpus(memory="1GB", link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto")

    assert placement.placer == "auto" and placement.split_plan is None and not placement.pieces
    assert all(c["step_time"] >= placement.step_time for c in split_candidates(placement).values())


def test_auto_prefers_a_split_plan_that_fits_to_faster_placements_that_run_out_of_memory():
    memory = 5_000_000  # one device would be fastest but needs 7.7 MB
    graph, devices = split_case(wide_layer_graph(batch=512), gpus(memory=memory, link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto")

    single = place_cost_graph(graph, devices, "single")
    assert max(single.peak_memory.values()) > memory and single.step_time < placement.step_time
    assert placement.split_plan is not None and fits(placement, devices)


def test_auto_tries_no_split_plan_on_a_graph_without_the_split_fields_or_when_told_not_to():
    committed = load_json(TEST_DATA / "cnn_costs_b64.json.gz")
    graph, devices = split_case(small_cnn_graph(8), gpus(memory="1GB", link=FAST_LINK))

    for placement in (
        place_cost_graph(committed, gpus(memory="1GB", link=FAST_LINK), "auto"),
        place_cost_graph(graph, devices, "auto", splits=False),
    ):
        assert placement.split_plan is None and not split_candidates(placement)


def test_the_progress_lines_name_the_split_plans(capsys, caplog, monkeypatch):
    monkeypatch.delenv("TFPLACE_QUIET", raising=False)
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)  # every simulation on its own line
    caplog.set_level(std_logging.DEBUG, logger="absl")  # or in the log, in an absl program
    graph, devices = split_case(small_cnn_graph(8), gpus(memory="1GB", link=FAST_LINK))

    place_cost_graph(graph, devices, "auto")

    shown = capsys.readouterr().err + caplog.text
    assert "data_parallel (split plan):" in shown and "layerwise (split plan):" in shown


@pytest.mark.tensorflow
def test_auto_s_split_choice_applies_as_a_split_rewrite_that_trains_as_the_unsplit_graph():
    from helpers import feed_function
    from tfplace.tf_graph.importer import load_graph
    from tfplace.tf_graph.session import virtual_cpu_config
    from tfplace.tf_graph.split_attrs import annotate_split_fields
    from tfplace.tf_graph.split_check import compare_split

    tf_graph = load_graph(TEST_DATA / "cnn.meta")
    graph = load_json(TEST_DATA / "cnn_costs_b64.json.gz")
    annotate_split_fields(graph, tf_graph)  # the committed costs with what splitting needs
    devices = DeviceSet.parse(
        "/device:CPU:0-1", "1GB", intra_host=TransferModel(k=1e-10, b=1e-6, name="fast")
    )
    graph.set_transfer_model(devices.typical_link)

    placement = place_cost_graph(graph, devices, "auto")

    assert placement.split_plan is not None and placement.split_plan.batch_size == 64
    rewritten = placement.apply(tf_graph)
    pieces = {op.device for op in rewritten.get_operations() if "/piece" in op.name}
    assert pieces == {"/device:CPU:0", "/device:CPU:1"}
    entry = json.loads((TEST_DATA / "graphs.json").read_text())["cnn"]
    check = compare_split(
        tf_graph, placement.split_plan, ["loss:0", "train_op"], feed_function(entry)(64), steps=2,
        config=virtual_cpu_config(2), batch_size=64,
    )  # fmt: skip
    assert check.max_deviation < 1e-5, check.worst
    assert check.pieces_run > 0 and not check.misplaced


def test_a_split_plan_the_rewrite_refuses_does_not_win_and_its_record_says_why():
    graph, devices = split_case(small_cnn_graph(8), gpus(memory="1GB", link=FAST_LINK))

    placement = place_cost_graph(graph, devices, "auto", runnable=lambda plan: "op 'conv': cannot be cut")

    assert placement.split_plan is None and placement.placer == "auto"
    assert split_candidates(placement)["data_parallel"]["refused"] == "op 'conv': cannot be cut"
