"""The per-op cost regression on the batch size and filling a cost graph with its predictions."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfplace.core.costgraph import CostGraph, CostGraphError
from tfplace.core.transfer import TransferModel
from tfplace.estimator.profiler import OpCost, ProfileSet
from tfplace.estimator.regression import OpCostRegression, fill_cost_graph, regime_starts
from tfplace.estimator.row_blocks import RowBlocking, matmul_row_blockings

BATCHES = (1, 2, 4)


def profile(costs_at, sizes=BATCHES):
    """A ProfileSet from ``costs_at(batch) -> {op: OpCost}`` at ``sizes``."""
    return ProfileSet(batch_sizes=sizes, costs={b: costs_at(b) for b in sizes})


def timed(times, sizes=BATCHES):
    """A profile of one op ``a`` with the given compute time per batch size of ``sizes``."""
    return profile(lambda b: {"a": OpCost(times[sizes.index(b)], (4 * b,), 0, 0)}, sizes)


def test_memory_that_is_linear_in_the_batch_is_recovered_exactly():
    def costs_at(b):
        return {
            "conv": OpCost(1e-3 * b, (1000 * b + 24, 8), 512 * b + 64, 4096),
            "shape": OpCost(1e-6, (16,), 0, 0),
        }

    model = OpCostRegression().fit(profile(costs_at))
    for batch in (3, 8, 512):
        predicted = model.predict(batch)
        assert predicted["conv"].output_sizes == (1000 * batch + 24, 8)
        assert predicted["conv"].temporary_bytes == 512 * batch + 64
        assert predicted["conv"].persistent_bytes == 4096
        assert predicted["shape"].output_sizes == (16,)


def test_a_time_line_with_overhead_is_recovered():
    model = OpCostRegression().fit(timed([3e-3, 5e-3, 9e-3]))
    assert model.time_fit_ == ["line"]
    assert model.predict(8)["a"].compute_time == pytest.approx(17e-3)
    np.testing.assert_allclose(model.time_line_[0], [2e-3, 1e-3])


def test_one_batch_size_measured_low_does_not_bend_the_line():
    # t = 1e-4 * batch + 1e-5, but batch 2 measured at 1.0e-4 instead of 2.1e-4
    model = OpCostRegression().fit(timed([1.1e-4, 1.0e-4, 4.1e-4]))
    assert model.time_fit_ == ["line"]
    np.testing.assert_allclose(model.time_line_[0], [1e-4, 1e-5])
    assert model.predict(8)["a"].compute_time == pytest.approx(8.1e-4)


def test_a_kernel_switch_past_the_smallest_batch_is_left_out_of_the_line():
    # Inception V3's conv2d_81: 95 us at batch 1 (another algorithm), then 1.174 ms + 22 us per example
    model = OpCostRegression().fit(timed([95e-6, 1174e-6, 1218e-6]))
    assert model.time_regime_.tolist() == [1]
    assert model.time_fit_ == ["line"]
    np.testing.assert_allclose(model.time_line_[0], [22e-6, 1130e-6])
    assert model.predict(8)["a"].compute_time == pytest.approx(1306e-6)


def test_an_op_whose_added_examples_cost_less_past_the_smallest_batch_extrapolates_the_larger_ones():
    # 450 us at batch 1, then 700 us and 280 us per added example: the regime is batches 2 and 4
    model = OpCostRegression().fit(timed([450e-6, 1150e-6, 1430e-6]))
    assert model.time_regime_.tolist() == [1]
    assert model.predict(8)["a"].compute_time == pytest.approx(1990e-6)


def test_slopes_within_the_tolerance_keep_every_batch_size_in_the_regime():
    # per added example 105 us from 1 to 2, 97.5 us from 2 to 4: one regime, Theil-Sen over all three
    model = OpCostRegression(regime_tolerance=0.5).fit(timed([110e-6, 215e-6, 410e-6]))
    assert model.time_regime_.tolist() == [0]
    assert model.predict(8)["a"].compute_time == pytest.approx(4.1e-4 + 4 * 1e-4, rel=0.05)


def test_a_tolerance_of_one_fits_every_batch_size_as_without_regimes():
    model = OpCostRegression(regime_tolerance=1.0).fit(timed([95e-6, 1174e-6, 1218e-6]))
    assert model.time_regime_.tolist() == [0]
    assert model.predict(8)["a"].compute_time > 1.9e-3


def test_the_regime_ends_at_the_first_batch_size_below_a_steeper_rise():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    times = np.array(
        [
            [100.0, 1000.0, 1100.0, 1300.0],  # steep from 1 to 2, steady (50 per example) from 2 on
            [100.0, 200.0, 1000.0, 1100.0],  # steep from 2 to 4: batches 1 and 2 are both left out
            [100.0, 200.0, 400.0, 800.0],  # proportional: one regime
            [500.0, 400.0, 700.0, 1300.0],  # falls from 1 to 2 (noise): does not end the regime
            [300.0, 305.0, 340.0, 420.0],  # ramps up: 5, 17.5, then 20 per example from 4 on
        ]
    )
    assert regime_starts(x, times, tolerance=0.5).tolist() == [1, 2, 0, 0, 1]
    assert regime_starts(x, times, tolerance=1.0).tolist() == [0, 0, 0, 0, 0]


def test_a_change_of_slope_within_the_measurements_noise_keeps_the_smaller_batch_in_the_regime():
    x = np.array([2.0, 4.0, 6.0])
    times = np.array([[290.0, 305.0, 345.0]])  # 7.5 then 20 us per example: flatter by the ratio
    noisy = np.array([[8.0, 7.0, 5.0]])  # the change, 12.5, is 1.5 standard errors (8.4)
    precise = np.array([[1.0, 1.0, 1.0]])
    assert regime_starts(x, times, 0.5).tolist() == [1]
    assert regime_starts(x, times, 0.5, noisy, significance=2.0).tolist() == [0]
    assert regime_starts(x, times, 0.5, noisy, significance=1.0).tolist() == [1]
    assert regime_starts(x, times, 0.5, precise, significance=2.0).tolist() == [1]


def test_the_regression_reads_the_regimes_noise_from_the_profiles_standard_errors():
    noisy = timed([290e-6, 305e-6, 345e-6], sizes=(2, 4, 6))
    noisy.time_errors = {b: {"a": e} for b, e in zip((2, 4, 6), (8e-6, 7e-6, 5e-6))}
    assert OpCostRegression().fit(noisy).time_regime_.tolist() == [0]
    assert OpCostRegression(regime_significance=0.0).fit(noisy).time_regime_.tolist() == [1]


def test_an_op_whose_added_examples_cost_more_towards_the_target_extrapolates_the_larger_batches():
    # the NMT's forward product [m, 768] x [768, 1024] as a bare kernel at m = 2, 4, 6 (then 163 us at 8)
    model = OpCostRegression().fit(timed([110e-6, 110e-6, 133e-6], sizes=(2, 4, 6)))
    assert model.time_regime_.tolist() == [1]
    assert model.predict(8)["a"].compute_time == pytest.approx(156e-6)


def test_a_time_that_barely_grows_with_the_batch_is_predicted_constant_at_its_mean():
    model = OpCostRegression(flat_growth=0.3).fit(timed([1.0e-6, 1.25e-6, 1.2e-6]))
    assert model.time_fit_ == ["line"]
    assert model.predict(64)["a"].compute_time == pytest.approx(1.15e-6)
    grows = OpCostRegression(flat_growth=0.1).fit(timed([1.0e-6, 1.25e-6, 1.2e-6]))
    assert grows.predict(64)["a"].compute_time > 1.2e-6


def test_a_long_op_that_grows_little_with_the_batch_keeps_its_line():
    model = OpCostRegression(flat_growth=0.3, flat_below=20e-6).fit(timed([262e-6, 267e-6, 279e-6]))
    assert model.time_fit_ == ["line"]
    assert model.predict(8)["a"].compute_time > 290e-6


def test_times_growing_faster_than_the_batch_follow_their_line_past_the_profiled_batches():
    # (1, 1), (2, 2), (4, 9) us: an added example costs 1 us from 1 to 2, 3.5 us from 2 to 4, so the
    # regime is batches 2 and 4: slope 3.5 us per example, intercept -5 us
    model = OpCostRegression().fit(timed([1e-6, 2e-6, 9e-6]))
    assert model.time_fit_ == ["convex"]
    assert model.time_regime_.tolist() == [1]
    assert model.predict(8)["a"].compute_time == pytest.approx((8 * 3.5 - 5) * 1e-6)
    assert model.predict(8)["a"].compute_time > 9e-6 * 8 / 4  # above the proportional power law


def test_times_growing_faster_than_the_batch_follow_a_proportional_power_law_where_the_line_is_negative():
    model = OpCostRegression().fit(timed([1e-6, 2e-6, 9e-6]))
    assert model.time_power_[0, 1] == 1.0
    scale = model.time_power_[0, 0]
    assert model.predict(1)["a"].compute_time == pytest.approx(scale)
    assert model.predict(1)["a"].compute_time > 0


def test_a_convex_prediction_past_the_profiled_batches_is_never_below_the_largest_measurement():
    # Tensor Holography's Relu of a 2 MB output at batch 8: 19, 55, 109 us at 2, 4, 6, 167 us at 8
    profile_set = ProfileSet(
        batch_sizes=(2, 4, 6),
        costs={
            b: {"relu": OpCost(t, (262144 * b,), 0, 0)}
            for b, t in zip((2, 4, 6), (18.9e-6, 54.5e-6, 109.3e-6))
        },
    )
    model = OpCostRegression().fit(profile_set)
    assert model.time_fit_ == ["convex"]
    assert model.predict(8)["relu"].compute_time > 109.3e-6
    assert model.predict(8)["relu"].compute_time == pytest.approx(154.5e-6, rel=0.01)


def test_times_falling_with_the_batch_are_predicted_constant():
    model = OpCostRegression().fit(timed([8e-6, 4e-6, 2e-6]))
    assert model.time_fit_ == ["line"]
    assert model.predict(1)["a"].compute_time == pytest.approx(14e-6 / 3)
    assert model.predict(64)["a"].compute_time == pytest.approx(14e-6 / 3)


@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.floats(min_value=1e-7, max_value=10.0), min_size=3, max_size=3),
    batch=st.integers(min_value=1, max_value=100_000),
)
def test_predicted_time_is_never_negative_and_never_falls_as_the_batch_grows(times, batch):
    model = OpCostRegression().fit(timed(times))
    now = model.predict(batch)["a"].compute_time
    assert now >= model.time_floor
    assert model.predict(batch + 1)["a"].compute_time >= now
    assert (model.time_line_[:, 0] >= 0).all()  # slopes
    line = np.array(model.time_fit_) == "line"
    assert (model.time_line_[line, 1] >= 0).all()  # a convex op's line crosses zero, by definition
    assert (model.time_power_ >= 0).all()


def test_memory_falling_with_the_batch_is_predicted_as_its_largest_measurement_not_extrapolated():
    # a loop's temporary peak of 208, 212 and 204 MB at batches 1, 2, 4 (the order its nodes ran
    # in moves it) extrapolated as a line predicts nothing at batch 512
    noisy = [208_000_000, 212_000_000, 204_000_000]
    shrinking = profile(lambda b: {"a": OpCost(1e-6, (100 - 20 * b,), noisy[BATCHES.index(b)], 0)})
    model = OpCostRegression().fit(shrinking)
    for batch in (8, 512):
        predicted = model.predict(batch)["a"]
        assert predicted.output_sizes == (80,)
        assert predicted.temporary_bytes == 212_000_000


def test_the_predicted_kernel_time_is_the_kernels_measured_share_of_the_predicted_time():
    shares = (0.5, 0.6, 0.7)
    measured = profile(lambda b: {"a": OpCost(1e-5 * b, (), 0, 0, (), shares[BATCHES.index(b)] * 1e-5 * b)})
    predicted = OpCostRegression().fit(measured).predict(8)["a"]
    assert predicted.kernel_time == pytest.approx(0.6 * predicted.compute_time)
    unmeasured = OpCostRegression().fit(timed([1e-5, 2e-5, 4e-5])).predict(8)["a"]
    assert unmeasured.kernel_time is None


def test_fitting_needs_two_batch_sizes():
    single = ProfileSet(batch_sizes=(2,), costs={2: {"a": OpCost(1e-6, (8,), 0, 0)}})
    with pytest.raises(ValueError, match="two batch sizes"):
        OpCostRegression().fit(single)


def test_an_op_missing_at_one_batch_size_is_named():
    uneven = profile(
        lambda b: {"a": OpCost(1e-6, (), 0, 0), **({"b": OpCost(1e-6, (), 0, 0)} if b > 1 else {})}
    )
    with pytest.raises(ValueError, match="'b'"):
        OpCostRegression().fit(uneven)


def test_predict_before_fit_is_an_error():
    with pytest.raises(RuntimeError, match="before fit"):
        OpCostRegression().predict(8)


def structure():
    """a -(slot 1)-> b, a -(slots 0, 1)-> c, b -(control)-> c, with no costs yet."""
    graph = CostGraph(name="structure")
    for op in "abc":
        graph.add_op(op, op_type="Op")
    graph.add_dependency("a", "b", slots=(1,), nbytes=0)
    graph.add_dependency("a", "c", slots=(0, 1), nbytes=0)
    graph.add_dependency("b", "c", control=True)
    return graph


COSTS = {
    "a": OpCost(2e-3, (100, 300), 16, 64),
    "b": OpCost(1e-3, (40,), 0, 0),
    "c": OpCost(5e-4, (), 8, 0),
}


def test_fill_cost_graph_sets_op_costs_and_recomputes_edge_bytes_from_slots():
    filled = fill_cost_graph(structure(), COSTS)
    assert filled.nodes["a"]["output_sizes"] == (100, 300)
    assert filled.nodes["a"]["compute_time"] == 2e-3
    assert filled.nodes["a"]["persistent_bytes"] == 64
    assert filled.nodes["c"]["temporary_bytes"] == 8
    assert filled.edges["a", "b"]["bytes"] == 300
    assert filled.edges["a", "c"]["bytes"] == 400
    assert filled.edges["b", "c"]["bytes"] == 0
    filled.validate()


def test_fill_cost_graph_prices_edges_with_the_transfer_model_and_leaves_the_input_alone():
    original = structure()
    link = TransferModel(k=1e-9, b=1e-4, name="test")
    filled = fill_cost_graph(original, COSTS, link)
    assert filled.edges["a", "b"]["transfer_time"] == pytest.approx(1e-9 * 300 + 1e-4)
    assert filled.edges["a", "c"]["transfer_time"] == pytest.approx(1e-9 * 400 + 2 * 1e-4)
    assert filled.edges["b", "c"]["transfer_time"] == 0.0
    assert filled.transfer_model == link
    assert original.nodes["a"]["output_sizes"] == ()
    assert original.edges["a", "c"]["bytes"] == 0


def test_fill_cost_graph_names_ops_without_costs():
    with pytest.raises(CostGraphError, match="'c'"):
        fill_cost_graph(structure(), {op: COSTS[op] for op in "ab"})


def test_fill_cost_graph_rejects_an_edge_carrying_a_slot_the_producer_lacks():
    short = {**COSTS, "a": OpCost(2e-3, (100,), 16, 64)}
    with pytest.raises(CostGraphError, match="slots \\[1\\]"):
        fill_cost_graph(structure(), short)


def test_predictions_fill_a_cost_graph_at_the_target_batch():
    def costs_at(b):
        return {"a": OpCost(1e-3 * b, (10 * b, 20 * b), 0, 0), "b": OpCost(1e-4, (4,), 0, 0), "c": COSTS["c"]}

    predicted = OpCostRegression().fit(profile(costs_at)).predict(16)
    filled = fill_cost_graph(structure(), predicted)
    assert filled.edges["a", "c"]["bytes"] == 30 * 16


def test_an_output_stays_aliased_only_if_it_was_an_inputs_buffer_at_every_profiled_batch():
    def costs_at(b):
        always, at_two = (0, "x", 0), (1, "x", 1)
        aliases = (always, at_two) if b == 2 else (always,)
        return {"x": OpCost(1e-6, (4 * b, 4 * b), 0, 0), "op": OpCost(1e-6, (4 * b, 4 * b), 0, 0, aliases)}

    predicted = OpCostRegression().fit(profile(costs_at)).predict(8)
    assert predicted["op"].aliased_outputs == ((0, "x", 0),)
    assert predicted["x"].aliased_outputs == ()


def test_fill_cost_graph_keeps_the_aliases_of_tensors_an_edge_brings_to_the_op():
    aliased = {**COSTS, "c": OpCost(5e-4, (400, 5), 8, 0, ((0, "a", 1), (1, "b", 0)))}
    filled = fill_cost_graph(structure(), aliased)
    assert filled.nodes["c"]["aliased_outputs"] == ((0, "a", 1),)  # b -> c is a control edge
    assert filled.nodes["a"]["aliased_outputs"] == ()
    filled.validate()


@pytest.mark.parametrize("times", [[3e-3, 5e-3, 9e-3], [1e-6, 2e-6, 9e-6], [2e-6, 2e-6, 2.1e-6]])
def test_the_batch_coefficients_a_cost_graph_keeps_predict_what_the_regression_predicts(times):
    from tfplace.split.costs import time_at_batch

    model = OpCostRegression().fit(timed(times))
    coefficients = model.batch_costs()["a"]
    for batch in (1, 3, 64):
        assert time_at_batch(coefficients, batch) == pytest.approx(model.predict(batch)["a"].compute_time)
    np.testing.assert_allclose(coefficients["outputs"], [[4.0, 0.0]], atol=1e-9)


def test_a_cost_graph_written_with_the_earlier_power_model_is_still_evaluated():
    from tfplace.split.costs import time_at_batch

    assert time_at_batch({"time": ["power", 2e-6, 1.0]}, 8) == pytest.approx(16e-6)


def test_an_unknown_time_model_in_batch_costs_is_refused_by_name():
    from tfplace.split.costs import time_at_batch

    with pytest.raises(ValueError, match="'cubic'"):
        time_at_batch({"time": ["cubic", 1.0, 2.0]}, 8)


STAIRCASE_BATCHES = (2, 4, 6)


def staircase_profile(passes_at=lambda b: -(-b // 3)):
    """The NMT's transpose_b gradient matmul at batches 2, 4, 6 (one row per example, three rows per
    pass: 10 + 45 us per pass) beside a smooth op ``b``."""
    return ProfileSet(
        batch_sizes=STAIRCASE_BATCHES,
        costs={
            b: {
                "mm": OpCost(10e-6 + 45e-6 * passes_at(b), (4 * 768 * b,), 0, 0),
                "b": OpCost(3e-5 + 2e-5 * b, (4 * b,), 0, 0),
            }
            for b in STAIRCASE_BATCHES
        },
    )


def test_a_staircase_matmul_fitted_on_its_row_passes_predicts_the_third_pass_at_batch_8():
    profile = staircase_profile()
    plain = OpCostRegression().fit(profile).predict(8)["mm"].compute_time
    model = OpCostRegression().fit(profile, {"mm": RowBlocking(Fraction(1), 3)})
    assert plain < 120e-6  # the line through one, two and two passes falls short of three
    assert model.predict(8)["mm"].compute_time == pytest.approx(145e-6)
    assert model.predict(9)["mm"].compute_time == pytest.approx(145e-6)
    assert model.predict(10)["mm"].compute_time == pytest.approx(190e-6)
    assert model.predict(8)["b"].compute_time == pytest.approx(19e-5)


def test_without_blocked_matmuls_the_predictions_are_exactly_those_of_the_plain_fit():
    graph = CostGraph()
    graph.add_op("mm", op_type="MatMul", attrs={"transpose_b": True}, output_shapes=((-1, 768),))
    graph.add_op("b", op_type="Relu")
    profile = staircase_profile()
    plain = OpCostRegression().fit(profile)
    blockings = matmul_row_blockings(graph, profile, {"MatMul/transpose_b": 1})
    assert blockings == {}
    blocked = OpCostRegression().fit(profile, blockings)
    assert blocked.predict(8) == plain.predict(8)
    assert blocked.batch_costs() == plain.batch_costs()


def test_a_blocked_matmul_whose_line_would_cross_zero_gets_a_convex_model_of_its_passes():
    # one, two, two passes at 2, 4, 6 taking 10, 100, 100 us: the line's intercept is negative
    model = OpCostRegression().fit(
        staircase_profile(lambda b: 0 if b == 2 else 2), {"mm": RowBlocking(Fraction(1), 3)}
    )
    assert model.time_fit_[model.ops_.index("mm")] == "convex"
    times = [model.predict(b)["mm"].compute_time for b in (6, 7, 8, 9, 10)]
    assert times[0] < times[1] == times[2] == times[3] < times[4]


def test_a_blocked_matmul_ignores_the_regime_and_its_batch_costs_are_the_staircases_upper_envelope():
    from tfplace.split.costs import time_at_batch

    # steeper from batch 2 to 4 than from 4 to 6: the plain fit would leave batch 2 off its regime
    plain = OpCostRegression().fit(staircase_profile())
    model = OpCostRegression().fit(staircase_profile(), {"mm": RowBlocking(Fraction(1), 3)})
    assert plain.time_regime_[plain.ops_.index("mm")] == 1
    assert model.time_regime_[model.ops_.index("mm")] == 0
    coefficients = model.batch_costs()["mm"]
    for batch in (3, 6, 9):  # whole passes
        assert time_at_batch(coefficients, batch) == pytest.approx(model.predict(batch)["mm"].compute_time)
