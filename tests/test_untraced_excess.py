"""``benchmarks/untraced_excess.py`` compares a step's untraced time with its profiled kernels, per op,
less the step's calibrated fixed costs, and never times two variants of one model on one worker."""

from __future__ import annotations

import pytest

from benchmarks.untraced_excess import excess_per_op, worker_groups
from tfplace.estimator.calibration import StepTiming


def test_variants_of_one_model_go_to_different_workers() -> None:
    labels = ["nmt", "transformer", "nmt units=16", "nmt units=128", "chain 1200x16x8", "chain 1200x256x8"]

    groups = worker_groups(labels)

    assert sorted(label for group in groups for label in group) == sorted(labels)
    for group in groups:
        families = [label.split(" units=")[0] for label in group]
        assert len(families) == len(set(families)), group


def test_models_without_variants_share_one_worker() -> None:
    assert worker_groups(["nmt", "transformer", "chain 2400x16x4"]) == [
        ["nmt", "transformer", "chain 2400x16x4"]
    ]


def test_excess_is_what_the_untraced_step_takes_beyond_kernels_and_fixed_costs_per_record() -> None:
    timing = StepTiming(records=1000, traced=4e-3, untraced=5.2e-3)

    assert excess_per_op(timing, fixed=200e-6) == pytest.approx(1e-6)
