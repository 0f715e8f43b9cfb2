"""Split plans (issue 15, step 2): per op a degree, a dimension and devices, checked against the rules."""

from __future__ import annotations

import pytest

from helpers import small_cnn_graph
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.split.plan import OpSplit, SplitPlan, dimension_size

GPUS = DeviceSet.parse("/device:GPU:0-3", "1GB")
NAMES = tuple(GPUS.names)


def whole_plan(graph, device=NAMES[0]):
    return SplitPlan({op: OpSplit.whole(device) for op in graph}, GPUS)


def test_a_plan_without_splits_is_the_placement_it_came_from():
    graph = small_cnn_graph()
    placement = Placement({op: NAMES[i % 2] for i, op in enumerate(graph)}, GPUS, placer="m_topo")
    plan = SplitPlan.from_placement(placement)
    plan.validate(graph)
    back = plan.to_placement()
    assert back.assignment == placement.assignment and back.pieces == {}


def test_a_split_op_reports_its_pieces_in_the_placement_summary():
    graph = small_cnn_graph()
    plan = whole_plan(graph)
    plan.splits["conv"] = OpSplit(NAMES, "batch")
    placement = plan.to_placement()
    assert placement.pieces == {"conv": NAMES}
    summary = placement.summary()
    assert "of which pieces" in summary and "1 of them split into pieces" in summary


def test_plan_round_trips_through_json(tmp_path):
    graph = small_cnn_graph()
    plan = whole_plan(graph)
    plan.splits["conv"] = OpSplit(NAMES[:2], "height", (0.75, 0.25))
    plan.save(tmp_path / "plan.json")
    loaded = SplitPlan.load(tmp_path / "plan.json")
    assert loaded.splits == plan.splits and loaded.devices == plan.devices


@pytest.mark.parametrize(
    ("op", "split", "message"),
    [
        ("relu", OpSplit(NAMES[:2], "channel"), r"op 'relu' \(Relu\) cannot split along 'channel'"),
        ("x", OpSplit(NAMES[:2], "batch"), "op 'x' .* it splits along nothing"),
        ("conv", OpSplit(NAMES[:2], "batch", (0.5, 0.6)), "op 'conv': shares"),
        ("conv", OpSplit(("/device:GPU:9",), None), r"op 'conv': unknown devices \['/device:GPU:9'\]"),
        ("conv", OpSplit(NAMES * 3, "batch"), "op 'conv': degree 12 exceeds its batch dimension of 8"),
        ("conv", OpSplit(NAMES * 3, "height"), "op 'conv': degree 12 exceeds its height dimension of 10"),
    ],
)
def test_validation_names_the_op_that_cannot_run_as_planned(op, split, message):
    graph = small_cnn_graph()
    plan = whole_plan(graph)
    plan.splits[op] = split
    with pytest.raises(ValueError, match=message):
        plan.validate(graph)


def test_the_size_of_a_dimension_comes_from_the_batch_or_the_inputs_shape():
    graph = small_cnn_graph(batch=16)
    assert dimension_size(graph, "conv", "batch") == 16
    assert dimension_size(graph, "conv", "channel") is None  # the filter's shape is not recorded
    assert dimension_size(graph, "conv", "width") == 10
