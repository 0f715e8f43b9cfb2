"""Robust per-op statistics over repeated steps: interleaving, outlier steps, trimmed means, stopping."""

import math

import numpy as np
import pytest

from tfplace.estimator.statistics import (
    RepeatPolicy,
    across_sessions,
    interleaved_rounds,
    kept_steps,
    location,
    preempted_observations,
    split_half_error,
    weighted_relative_error,
    without_preemption,
)


def schedule(batch_sizes, steps_needed):
    """The batch sizes in the order the profiler's rounds measure them, each until it has its steps."""
    taken = dict.fromkeys(batch_sizes, 0)
    order = []
    while any(taken[b] < steps_needed[b] for b in batch_sizes):
        done = {b: taken[b] >= steps_needed[b] for b in batch_sizes}
        for b in interleaved_rounds(batch_sizes, done):
            order.append(b)
            taken[b] += 1
    return order


def test_interleaved_repeats_visit_every_batch_before_repeating_one():
    assert schedule([1, 2, 4], {1: 3, 2: 3, 4: 3}) == [1, 2, 4, 1, 2, 4, 1, 2, 4]


def test_a_batch_size_that_has_enough_steps_leaves_the_rounds_and_the_others_go_on():
    assert schedule([1, 2, 4], {1: 1, 2: 3, 4: 2}) == [1, 2, 4, 2, 4, 2]


def test_a_step_far_slower_than_the_others_median_is_dropped():
    assert kept_steps([0.10, 0.11, 0.35, 0.09, 0.10], outlier_factor=1.5) == [True, True, False, True, True]


def test_steps_within_the_factor_are_all_kept():
    assert kept_steps([0.10, 0.14, 0.12, 0.09], outlier_factor=1.5) == [True] * 4


def test_with_fewer_than_three_steps_every_step_is_kept():
    assert kept_steps([0.1, 5.0], outlier_factor=1.5) == [True, True]


def test_the_trimmed_mean_ignores_a_preempted_repeat_of_an_op():
    values = np.array([[10.0, 11.0, 9.0, 10.0, 400.0, 10.0, 11.0, 9.0]])
    assert location(values, "trimmed_mean", 0.25)[0] == pytest.approx(10.25)
    assert location(values, "median", 0.25)[0] == pytest.approx(10.0)
    assert location(values, "trimmed_mean", 0.0)[0] > 50  # the plain mean does not


def test_the_lower_mean_averages_the_lowest_tenth_and_at_least_two_values():
    values = np.array(
        [
            [
                12.0,
                10.0,
                30.0,
                11.0,
                10.5,
                55.0,
                13.0,
                10.2,
                14.0,
                12.5,
                11.5,
                10.1,
                16.0,
                20.0,
                15.0,
                10.3,
                17,
                18,
                19,
                21,
            ]
        ]
    )
    assert location(values, "lower_mean", lower_fraction=0.1)[0] == pytest.approx((10.0 + 10.1) / 2)
    assert location(values[:, :5], "lower_mean", lower_fraction=0.1)[0] == pytest.approx((10.0 + 10.5) / 2)
    assert location(values, "lower_mean", lower_fraction=1.0)[0] == pytest.approx(values.mean())


def test_preemption_that_delays_most_repeats_of_an_op_moves_the_median_but_not_the_lower_mean():
    generator = np.random.default_rng(3)
    own = 1e-3 * (1 + generator.uniform(0, 0.02, size=(1, 30)))
    preempted = own + (generator.uniform(size=own.shape) < 0.75) * 4e-3
    assert location(preempted, "median")[0] > 4e-3
    assert location(preempted, "lower_mean")[0] == pytest.approx(1e-3, rel=0.02)


def test_identical_repeats_have_no_error_and_one_repeat_none_either():
    for statistic in ("median", "trimmed_mean", "lower_mean", "lower_quantile", "step_quantile"):
        assert split_half_error(np.full((2, 6), 3e-6), statistic, 0.25).tolist() == [0.0, 0.0]
        assert split_half_error(np.array([[1.0]]), statistic, 0.25).tolist() == [0.0]


@pytest.mark.parametrize(
    "statistic, fraction",
    [
        ("median", 0.1),
        ("trimmed_mean", 0.1),
        ("lower_mean", 0.3),
        ("lower_quantile", 0.1),
        ("step_quantile", 0.1),
    ],
)
def test_the_split_half_error_matches_the_spread_of_the_statistic_over_samples(statistic, fraction):
    generator = np.random.default_rng(7)
    samples = generator.normal(1.0, 0.1, size=(4000, 20))
    estimated = split_half_error(samples, statistic, 0.25, fraction).mean()
    actual = location(samples, statistic, 0.25, fraction).std()
    assert estimated == pytest.approx(actual, rel=0.25)


def test_an_op_whose_fast_runs_are_rare_shows_its_imprecision_in_the_split_half_error():
    """One run in six is fast (1 ms), the others 1.5 ms: the mean of the lowest two of twelve
    repeats mixes the modes differently from one measurement to the next (the Transformer's
    softmax cross-entropy at batch 8). Tukey-McLaughlin's standard error, which winsorizes the
    slow mode away, put it at 0.38 of the actual spread."""
    generator = np.random.default_rng(11)
    fast = generator.uniform(size=(4000, 12)) < 1 / 6
    samples = np.where(fast, 1e-3, 1.5e-3) * generator.uniform(1.0, 1.01, size=fast.shape)
    actual = location(samples, "lower_mean").std()
    assert actual > 0.1 * location(samples, "lower_mean").mean()
    assert split_half_error(samples, "lower_mean").mean() > 0.6 * actual


def test_the_relative_error_weights_each_op_by_its_time():
    times = np.array([1.0, 1e-3])
    errors = np.array([0.01, 1e-3])  # 1% on the long op, 100% on the short one
    assert weighted_relative_error(times, errors) == pytest.approx(0.011 / 1.001)
    assert weighted_relative_error(np.zeros(2), np.zeros(2)) == 0.0


def test_repeats_stop_at_the_target_error_after_the_fewest_steps_or_at_the_most():
    policy = RepeatPolicy(max_steps=10, target_error=0.01)
    assert not policy.done(kept=3, taken=3, min_steps=5, relative_error=0.001)
    assert policy.done(kept=5, taken=5, min_steps=5, relative_error=0.009)
    assert not policy.done(kept=7, taken=8, min_steps=5, relative_error=0.02)
    assert policy.done(kept=7, taken=10, min_steps=5, relative_error=0.02)
    assert RepeatPolicy(max_steps=1).done(kept=3, taken=5, min_steps=5, relative_error=1.0)
    assert RepeatPolicy().most_steps(5) == 10 and RepeatPolicy(max_steps=8).most_steps(5) == 8


def test_the_steps_are_shared_out_over_the_sessions_as_evenly_as_they_go():
    shares = RepeatPolicy(max_steps=30, sessions=3).per_session(min_steps=5)
    assert [(each.max_steps, each.sessions, fewest) for each, fewest in shares] == [(10, 1, 2)] * 3
    shares = RepeatPolicy(max_steps=5, sessions=3).per_session(min_steps=5)
    assert [(each.max_steps, fewest) for each, fewest in shares] == [(2, 2), (2, 2), (1, 1)]
    # two steps measure a session's own error where one does not
    shares = RepeatPolicy(max_steps=6, sessions=4).per_session(min_steps=3)
    assert [(each.max_steps, fewest) for each, fewest in shares] == [(2, 2), (2, 2), (1, 1), (1, 1)]
    assert len(RepeatPolicy(max_steps=2, sessions=3).per_session(min_steps=1)) == 2  # a step each
    assert RepeatPolicy(sessions=1).per_session(min_steps=5) == [(RepeatPolicy(sessions=1), 5)]


def test_an_ops_time_over_sessions_is_their_mean_with_the_standard_error_measured_between_them():
    combined = across_sessions([{"a": (1e-5, 0.0), "b": (2e-6, 1e-7)}, {"a": (3e-5, 0.0)}])
    assert combined["a"] == pytest.approx((2e-5, 1e-5))  # sample deviation 1.41e-5 over sqrt(2)
    assert combined["b"] == (2e-6, 1e-7)  # one session ran it: its own statistic
    assert across_sessions([{"a": (1e-5, 2e-7)}]) == {"a": (1e-5, 2e-7)}


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"statistic": "mean"}, "statistic"),
        ({"trim": 0.5}, "trim"),
        ({"lower_fraction": 0.0}, "lower_fraction"),
        ({"outlier_factor": 1.0}, "outlier_factor"),
        ({"max_steps": 0}, "max_steps"),
        ({"target_error": -0.1}, "target_error"),
        ({"sessions": 0}, "sessions"),
    ],
)
def test_a_bad_repeat_policy_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        RepeatPolicy(**fields)


def test_the_policy_settings_are_json_ready_also_with_no_outlier_dropping():
    assert RepeatPolicy(outlier_factor=math.inf).settings()["outlier_factor"] == "inf"


def test_the_lower_quantile_weighs_the_sorted_values_by_harrell_and_daviss_beta_probabilities():
    from scipy.special import betainc

    three = location(np.array([[3.0, 1.0, 2.0]]), "lower_quantile", lower_fraction=0.1)[0]
    weights = np.diff(betainc(0.1 * 4, 0.9 * 4, np.array([0, 1, 2, 3]) / 3))
    assert three == pytest.approx(weights @ [1.0, 2.0, 3.0])
    thousand = location(np.arange(1.0, 1001.0)[None, :], "lower_quantile", lower_fraction=0.1)[0]
    assert thousand == pytest.approx(100.5)


def test_the_lower_quantile_moves_less_with_the_number_of_repeats_than_the_lower_mean():
    """An op of 1 ms that noise only slows (exponential, mean 0.1 ms): profiles stop after a number of
    steps that varies, and a statistic whose value depends on it biases the short ones."""
    generator = np.random.default_rng(5)
    true_quantile = 1.0 + 0.1 * -np.log(0.9)

    def mean_over_profiles(statistic: str, steps: int) -> float:
        samples = 1.0 + generator.exponential(0.1, size=(4000, steps))
        return float(location(samples, statistic, lower_fraction=0.1).mean())

    quantile_drift = mean_over_profiles("lower_quantile", 8) - mean_over_profiles("lower_quantile", 48)
    mean_drift = mean_over_profiles("lower_mean", 8) - mean_over_profiles("lower_mean", 48)
    assert 0 < quantile_drift < 0.6 * mean_drift
    assert mean_over_profiles("lower_quantile", 48) == pytest.approx(true_quantile, abs=0.002)


def test_a_missing_observation_is_left_out_of_every_statistic():
    values = np.array([[10.0, np.nan, 12.0, 11.0], [np.nan, np.nan, np.nan, np.nan]])
    assert location(values, "median")[0] == pytest.approx(11.0)
    assert location(values, "trimmed_mean", 0.0)[0] == pytest.approx(11.0)
    assert location(values, "lower_mean", lower_fraction=0.1)[0] == pytest.approx(10.5)
    assert location(values, "lower_quantile")[0] == pytest.approx(
        location(np.array([[10.0, 12.0, 11.0]]), "lower_quantile")[0]
    )
    assert all(
        np.isnan(location(values, statistic)[1])
        for statistic in ("median", "lower_mean", "lower_quantile", "step_quantile")
    )
    assert split_half_error(values, "lower_mean")[1] == 0.0


def test_in_a_step_with_one_preemption_only_the_op_that_took_the_wait_is_marked():
    """Two ops of 1 ms and 10 us, three steps; in the second the short op waited 3 ms."""
    times = np.array([[1.0e-3, 1.02e-3, 1.0e-3], [1e-5, 3.01e-3, 1e-5]])
    assert preempted_observations(times, [0, 1, 0]).tolist() == [[False, False, False], [False, True, False]]


def test_a_step_with_n_preemptions_marks_the_n_ops_furthest_over_their_fastest_run():
    """The 4 ms op's excess over its fastest run (4 ms) beats the 9 ms op's (1 ms)."""
    times = np.array([[4e-3, 8e-3], [9e-3, 10e-3], [1e-5, 3e-3], [1e-5, 1.1e-5]])
    marked = preempted_observations(times, [0, 2])
    assert marked[:, 1].tolist() == [True, False, True, False]
    assert not marked[:, 0].any()


def test_an_op_never_slower_than_its_fastest_run_is_never_marked():
    times = np.array([[2e-3, 2e-3], [1e-5, np.nan]])
    assert not preempted_observations(times, [3, 3]).any()


def test_without_preemption_the_lower_mean_of_a_rarely_clean_op_is_its_own_time():
    """An op of 2 ms preempted in 28 of 30 steps by waits of 2-4 ms: the lowest tenth of its times
    (three) mixes in a preempted run; the steps' accounting takes them out."""
    generator = np.random.default_rng(5)
    steps = 30
    hit = np.arange(steps) >= 2
    own = 2e-3 * generator.uniform(1.0, 1.01, size=steps)
    times = np.array([own + generator.uniform(2e-3, 4e-3, size=steps) * hit, np.full(steps, 1e-5)])
    cleaned = without_preemption(times, hit.astype(int).tolist())
    assert location(cleaned, "lower_mean")[0] == pytest.approx(2e-3, rel=0.01)
    assert location(times, "lower_mean")[0] > 2.4e-3
    assert np.array_equal(cleaned[1], times[1])


def test_an_op_preempted_in_every_step_keeps_its_fastest_run():
    """An op longer than the thread's slice has no clean run: its least preempted one stays."""
    times = np.array([[9e-3, 10e-3, 9.5e-3], [1e-5, 1e-5, 1e-5]])
    cleaned = without_preemption(times, [1, 1, 1])
    assert cleaned[0, 0] == 9e-3 and np.isnan(cleaned[0, 1:]).all()
    assert np.array_equal(cleaned[1], times[1])


def test_the_step_quantile_op_times_add_up_to_the_tenth_quantile_of_the_steps_totals():
    generator = np.random.default_rng(3)
    steps = 1.0 + generator.exponential(0.2, size=(50, 17))  # 50 ops, 17 steps, one-sided noise
    totals = steps.sum(axis=0)[None, :]
    tenth_of_totals = location(totals, "lower_quantile", lower_fraction=0.1)[0]
    assert location(steps, "step_quantile", lower_fraction=0.1).sum() == pytest.approx(tenth_of_totals)


def test_each_ops_own_tenth_quantile_adds_up_to_less_than_the_quietest_steps():
    """Jensen: the ops' fast runs fall in different steps, so the sum of their own low quantiles is
    a step no run had (the NMT's 13% below its steps in session 10)."""
    generator = np.random.default_rng(4)
    steps = 1.0 + generator.exponential(0.2, size=(50, 17))
    own = location(steps, "lower_quantile", lower_fraction=0.1).sum()
    assert own < 0.9 * steps.sum(axis=0).min()
    assert location(steps, "step_quantile", lower_fraction=0.1).sum() > steps.sum(axis=0).min()


def test_a_step_in_which_every_op_was_slow_barely_weighs_in_the_step_quantile():
    steps = np.tile([1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09], (3, 1))
    steps[:, 0] = 5.0  # the first step was slowed as a whole
    assert location(steps, "step_quantile", lower_fraction=0.1) == pytest.approx([1.02] * 3, abs=0.02)


def test_the_step_quantile_of_one_op_is_its_own_harrell_davis_quantile():
    values = np.array([[3.0, 1.0, 2.0, 7.0, 4.0]])
    assert location(values, "step_quantile")[0] == pytest.approx(location(values, "lower_quantile")[0])
    assert location(values[0], "step_quantile") == pytest.approx(location(values, "lower_quantile")[0])


def test_the_step_quantile_counts_an_op_missing_from_a_step_at_its_own_quantile():
    """Op b's run in the third step was preempted (NaN): that step's total counts b at its own
    quantile, 2.0, so the steps' totals are a's times plus 2 and the scale is exactly 1."""
    values = np.array([[1.5, 1.6, 1.0, 1.7], [2.0, 2.0, np.nan, 2.0]])
    a, b = location(values, "step_quantile", lower_fraction=0.1)
    assert a == pytest.approx(location(values[:1], "lower_quantile", lower_fraction=0.1)[0])
    assert b == pytest.approx(2.0)


def test_the_step_quantile_keeps_each_ops_own_quantile_up_to_one_common_factor():
    generator = np.random.default_rng(6)
    steps = np.linspace(1.0, 50.0, 50)[:, None] * (1.0 + generator.exponential(0.2, size=(50, 17)))
    ratio = location(steps, "step_quantile") / location(steps, "lower_quantile")
    assert ratio == pytest.approx(np.full(50, ratio[0])) and ratio[0] > 1.0
