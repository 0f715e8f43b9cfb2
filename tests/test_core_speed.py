"""``benchmarks/core_speed.py`` reads each core's speed against its own median and the cores' speeds
against each other at the same moment."""

from __future__ import annotations

import pytest

from benchmarks.core_speed import speed_summary, speeds


def test_a_core_is_as_fast_as_its_median_time_over_the_rounds_time() -> None:
    rounds = [[1.0, 2.0], [2.0, 2.0], [4.0, 1.0]]

    assert speeds(rounds) == [[2.0, 1.0], [1.0, 1.0], [0.5, 2.0]]


def test_the_summary_spreads_each_core_and_the_first_over_each_other_core() -> None:
    rounds = [[1.0, 1.0]] * 8 + [[2.0, 1.0], [1.0, 2.0]]

    summary = speed_summary(rounds)

    assert set(summary) == {"core 0", "core 1", "core 0 / core 1"}
    assert summary["core 0"] == pytest.approx((0.95, 1.0))
    assert summary["core 0 / core 1"] == pytest.approx((0.95, 1.1))


def test_one_round_is_refused_as_no_spread() -> None:
    with pytest.raises(ValueError, match="at least two rounds"):
        speed_summary([[1.0, 1.0]])
