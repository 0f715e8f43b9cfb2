"""Kernel twins: which ops of a profiled step run one kernel on one shape, and how the regression
pools their growth with the batch (tfplace.estimator.twins)."""

import numpy as np
import pytest

from tfplace.core.costgraph import CostGraph
from tfplace.estimator.profiler import OpCost, ProfileSet
from tfplace.estimator.regression import OpCostRegression
from tfplace.estimator.twins import kernel_twins, pooled_twin_times, twin_key

SIZES = (2, 4, 6)


def cell_step(times=None, estimated=()):
    """An unrolled cell: ``x`` feeds four ``MatMul`` s of one weight, ``step0..step2`` reading the
    same rows and ``wide`` twice the rows; ``relu`` of ``step0`` has the product's shape but another
    type. ``times`` maps an op to its seconds per batch size (default 1e-4 at every batch)."""
    graph = CostGraph()
    graph.add_op("x", op_type="Placeholder", output_shapes=((-1, 768),))
    graph.add_op("wx", op_type="Placeholder", output_shapes=((-1, 768),))
    graph.add_op("w", op_type="VariableV2", output_shapes=((768, 1024),))
    rows = {"x": 1, "wx": 2, "w": 0}
    for name, source in (("step0", "x"), ("step1", "x"), ("step2", "x"), ("wide", "wx")):
        graph.add_op(
            name,
            op_type="MatMul",
            attrs={"transpose_a": False, "transpose_b": False},
            output_shapes=((-1, 1024),),
            inputs=((source, 0), ("w", 0)),
        )
        graph.add_dependency(source, name, slots=(0,))
        graph.add_dependency("w", name, slots=(0,))
        rows[name] = rows[source]
    graph.add_op("relu", op_type="Relu", output_shapes=((-1, 1024),), inputs=(("step0", 0),))
    graph.add_dependency("step0", "relu", slots=(0,))
    rows["relu"] = 1
    times = times or {}

    def costs(i, b):
        def size(op):
            columns = 1024 if op in ("step0", "step1", "step2", "wide", "relu") else 768
            return 4 * columns * (rows[op] * b if op != "w" else 1024)

        return {op: OpCost(times.get(op, [1e-4] * len(SIZES))[i], (size(op),), 0, 0) for op in rows}

    return graph, ProfileSet(
        batch_sizes=SIZES, costs={b: costs(i, b) for i, b in enumerate(SIZES)}, estimated_ops=estimated
    )


def test_ops_of_one_type_attributes_and_operand_shapes_are_twins():
    graph, profile = cell_step()
    assert kernel_twins(graph, profile) == [["step0", "step1", "step2"]]


def test_an_op_fed_other_bytes_or_of_another_type_is_no_twin():
    graph, profile = cell_step()
    keys = {op: twin_key(graph, profile, op) for op in ("step0", "wide", "relu")}
    assert len(set(keys.values())) == 3


def test_an_op_whose_costs_are_estimates_is_no_twin():
    graph, profile = cell_step(estimated=("step2",))
    assert twin_key(graph, profile, "step2") is None
    assert kernel_twins(graph, profile) == [["step0", "step1"]]


def test_an_op_without_recorded_inputs_is_no_twin():
    graph, profile = cell_step()
    graph.nodes["step1"]["inputs"] = None
    assert kernel_twins(graph, profile) == [["step0", "step2"]]


def test_pooled_twins_share_their_groups_growth_and_keep_their_own_level():
    times = np.array([[10.0, 14.0, 18.0], [20.0, 22.0, 30.0], [5.0, 6.0, 7.0]])
    pooled = pooled_twin_times(times, [[0, 1]])
    growth = times[:2].mean(axis=0)
    np.testing.assert_allclose(pooled[0], growth - growth.mean() + times[0].mean())
    np.testing.assert_allclose(pooled[1], growth - growth.mean() + times[1].mean())
    np.testing.assert_array_equal(pooled[2], times[2])
    np.testing.assert_allclose(pooled[:2].sum(axis=0), times[:2].sum(axis=0))  # nothing lost or added


@pytest.mark.parametrize("groups", [[], [[0]]])
def test_no_group_or_a_group_of_one_changes_nothing(groups):
    times = np.array([[10.0, 14.0, 19.0], [20.0, 22.0, 30.0]])
    np.testing.assert_array_equal(pooled_twin_times(times, groups), times)


def test_a_twin_measured_low_at_one_batch_is_predicted_on_its_groups_growth():
    slope = 20e-6
    exact = {op: [1e-4 + slope * b for b in SIZES] for op in ("step0", "step1", "step2")}
    disturbed = {**exact, "step2": [1e-4 + slope * 2, 1e-4 + slope * 4, 1e-4 + slope * 6 - 60e-6]}
    graph, profile = cell_step(disturbed)
    alone = OpCostRegression().fit(profile).predict(8)["step2"].compute_time
    pooled = OpCostRegression().fit(profile, twins=kernel_twins(graph, profile)).predict(8)
    truth = 1e-4 + slope * 8
    assert abs(pooled["step2"].compute_time - truth) < abs(alone - truth) / 2
    assert pooled["step0"].compute_time == pytest.approx(pooled["step1"].compute_time)


def test_twins_of_ops_not_profiled_are_left_out_of_their_group():
    _, profile = cell_step()
    model = OpCostRegression().fit(profile, twins=[["step0", "step1", "gone"]])
    assert model.twins_ == [["step0", "step1"]]


def test_twins_shorter_than_the_flat_bound_are_fitted_op_by_op():
    short = {op: [2e-6, 3e-6 + 1e-6 * (op == "step2"), 4e-6] for op in ("step0", "step1", "step2")}
    graph, profile = cell_step(short)
    model = OpCostRegression(flat_below=20e-6).fit(profile, twins=kernel_twins(graph, profile))
    assert model.twins_ == []
    assert model.predict(8) == OpCostRegression(flat_below=20e-6).fit(profile).predict(8)
