"""Estimation accuracy (Table 5): per-op relative deviations of predicted against measured costs."""

import math
from fractions import Fraction

import pytest

from tfplace.estimator.accuracy import (
    AccuracyProfiles,
    compare_profiles,
    estimation_accuracy,
    load_accuracy_profiles,
    mean_over_rounds,
    memory_of,
    save_accuracy_profiles,
)
from tfplace.estimator.profiler import TIME_FLOOR, OpCost, ProfileSet
from tfplace.estimator.row_blocks import RowBlocking

SMALL = (1, 2, 4)


def small_profile(**extra):
    """Two ops whose memory and time are exact lines in the batch size."""

    def costs(b):
        return {
            "conv": OpCost(1e-3 * b + 1e-4, (1000 * b,), 100 * b, 64),
            "add": OpCost(2e-6 * b, (10 * b,), 0, 0),
        }

    return ProfileSet(batch_sizes=SMALL, costs={b: costs(b) for b in SMALL}, **extra)


def measured_at_8(conv_time, add_time=16e-6, add_bytes=80, **extra):
    costs = {"conv": OpCost(conv_time, (8000,), 800, 64), "add": OpCost(add_time, (add_bytes,), 0, 0)}
    return ProfileSet(batch_sizes=(8,), costs={8: costs}, step_times={8: 0.5}, **extra)


def test_costs_that_follow_the_regression_have_no_deviation():
    report = compare_profiles(small_profile(), measured_at_8(8.1e-3), 8)
    assert report.memory.mean == pytest.approx(0.0, abs=1e-12)
    assert report.time.mean == pytest.approx(0.0, abs=1e-9)
    assert report.memory.exact == 1.0 and report.time.ops == 2
    assert report.measured_step_seconds == 0.5


def test_the_row_blockings_given_reach_the_regression():
    # conv in passes of 3 examples at 1, 2, 4 (1, 1, 2 passes): 1 ms per pass; 3 passes at 8
    profile = ProfileSet(
        batch_sizes=SMALL, costs={b: {"conv": OpCost(1e-3 * -(-b // 3), (1000 * b,), 0, 0)} for b in SMALL}
    )
    measured = ProfileSet(batch_sizes=(8,), costs={8: {"conv": OpCost(3e-3, (8000,), 0, 0)}})
    assert compare_profiles(profile, measured, 8).time.mean > 0.1
    blocked = compare_profiles(profile, measured, 8, row_blockings={"conv": RowBlocking(Fraction(1), 3)})
    assert blocked.time.mean == pytest.approx(0.0, abs=1e-9)


def test_deviation_is_relative_to_the_measured_value():
    # predicted 8.1 ms, measured 16.2 ms: |8.1 - 16.2| / 16.2 = 0.5; add is exact
    report = compare_profiles(small_profile(), measured_at_8(16.2e-3), 8)
    assert report.time.mean == pytest.approx(0.25)
    assert report.time.median == pytest.approx(0.25)
    assert report.time.within_20 == 0.5 and report.time.within_30 == 0.5
    assert report.time_weighted_deviation == pytest.approx(8.1e-3 / (16.2e-3 + 16e-6))
    assert report.worst[0][0] == "conv"


def test_a_second_measurement_gives_the_noise_floor_and_the_prediction_is_pooled_over_both():
    # conv predicted 8.1 ms, measured 8.1 and 16.2 ms; add exact in both
    report = compare_profiles(small_profile(), measured_at_8(8.1e-3), 8, second=measured_at_8(16.2e-3))
    assert report.time.ops == 2  # each op counted once, its deviations pooled over both measurements
    assert report.time.mean == pytest.approx((0.0 + 0.5) / 4)
    # floor: |8.1 - 16.2| / 16.2 = 0.5 and |16.2 - 8.1| / 8.1 = 1.0 for conv, 0 for add
    assert report.floor_time is not None and report.floor_time.mean == pytest.approx(1.5 / 4)
    assert report.floor_ratio == pytest.approx(0.125 / 0.375)
    total = 8.1e-3 + 16.2e-3 + 2 * 16e-6
    assert report.time_weighted_deviation == pytest.approx(8.1e-3 / total)
    assert report.floor_time_weighted == pytest.approx(2 * 8.1e-3 / total)


def test_without_a_second_measurement_there_is_no_floor():
    report = compare_profiles(small_profile(), measured_at_8(8.1e-3), 8)
    assert report.floor_time is None
    assert math.isnan(report.floor_time_weighted) and math.isnan(report.floor_ratio)


def test_memory_deviation_counts_outputs_and_temporary_bytes():
    assert memory_of(OpCost(1.0, (3, 4), 5, 1000)) == 12
    assert memory_of(OpCost(1.0, (3, 4), 5, 1000, ((1, "x", 0),))) == 3 + 5  # slot 1 is x's buffer
    report = compare_profiles(small_profile(), measured_at_8(8.1e-3, add_bytes=40), 8)
    assert report.memory.mean == pytest.approx((80 - 40) / 40 / 2)


def test_ops_measured_at_zero_or_only_estimated_are_left_out_and_counted():
    report = compare_profiles(small_profile(), measured_at_8(8.1e-3, add_time=TIME_FLOOR, add_bytes=0), 8)
    assert (report.time.ops, report.time.excluded_zero) == (1, 1)
    assert (report.memory.ops, report.memory.excluded_zero) == (1, 1)
    estimated = compare_profiles(small_profile(estimated_ops=("add",)), measured_at_8(8.1e-3), 8)
    assert estimated.time.ops == 1 and estimated.estimated_ops == 1


def test_no_comparable_op_gives_nan_not_an_error():
    report = compare_profiles(small_profile(estimated_ops=("add", "conv")), measured_at_8(8.1e-3), 8)
    assert report.time.ops == 0 and math.isnan(report.time.mean)


@pytest.mark.parametrize("batches", [[1], [2, 8], [4, 16]])
def test_accuracy_needs_two_profile_batches_below_the_target(batches):
    with pytest.raises(ValueError, match="below the target 8"):
        estimation_accuracy(None, None, None, profile_batch_sizes=batches, target_batch=8)


def test_rounds_of_one_measurement_give_each_ops_mean_time_and_its_error_between_them():
    errors = {8: {"conv": 1e-5, "add": 1e-7}}
    first = measured_at_8(8e-3, steps={8: (10, 10)}, profiling_seconds=5.0, time_errors=errors)
    second = measured_at_8(10e-3, steps={8: (9, 10)}, profiling_seconds=6.0, time_errors=errors)
    mean = mean_over_rounds([first, second])
    assert mean.costs[8]["conv"].compute_time == pytest.approx(9e-3)
    assert mean.costs[8]["add"].compute_time == pytest.approx(16e-6)
    assert mean.time_errors[8]["conv"] == pytest.approx(1e-3)  # sample deviation 1.41e-3 over sqrt(2)
    assert mean.costs[8]["conv"].output_sizes == (8000,)  # the memory of the first
    assert mean.steps == {8: (19, 20)}
    assert mean.profiling_seconds == pytest.approx(11.0)
    assert mean.step_times == {8: 0.5}


def test_an_op_estimated_in_one_round_is_estimated_in_their_mean():
    mean = mean_over_rounds([measured_at_8(8e-3), measured_at_8(8e-3, estimated_ops=("add",))])
    assert mean.estimated_ops == ("add",)


def test_rounds_of_different_batch_sizes_are_refused():
    with pytest.raises(ValueError, match="different batch sizes"):
        mean_over_rounds([measured_at_8(8e-3), small_profile()])


def test_saved_measurements_load_back_with_their_load_averages_and_seconds(tmp_path):
    profiles = AccuracyProfiles(small_profile(), measured_at_8(8e-3), measured_at_8(8.2e-3))
    path = tmp_path / "nmt_idle.json.gz"
    save_accuracy_profiles(profiles, (1.02, 1.05), 157.0, path)
    assert load_accuracy_profiles(path) == (profiles, (1.02, 1.05), 157.0)
    without_floor = profiles._replace(second=None)
    save_accuracy_profiles(without_floor, (0.5, 0.5), 1.0, path)
    assert load_accuracy_profiles(path)[0] == without_floor


def test_loading_measurements_that_were_not_saved_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nmt_busy\.json\.gz"):
        load_accuracy_profiles(tmp_path / "nmt_busy.json.gz")
