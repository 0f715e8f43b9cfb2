"""``benchmarks/untraced_excess.py`` compares a step's untraced time with its profiled kernels, per op,
less the step's calibrated fixed costs, and never times two variants of one model on one worker."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.untraced_excess import excess_per_op, fixed_costs, worker_groups
from tfplace.core.device_model import CpuProcessModel, FeedCost
from tfplace.core.transfer import TransferModel
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


def test_fixed_costs_are_the_step_overhead_and_what_the_feeds_cost() -> None:
    process = CpuProcessModel(
        op_overhead=0.0,
        step_overhead=100e-6,
        threads=1,
        link=TransferModel(k=0.0, b=0.0),
        feed=FeedCost(per_step=50e-6, per_tensor=10e-6, per_byte=1e-9),
    )
    feeds = {"a:0": np.zeros(250, dtype=np.float32), "b:0": np.zeros(250, dtype=np.float32)}

    assert fixed_costs(process, {}) == pytest.approx(100e-6)
    assert fixed_costs(process, feeds) == pytest.approx(100e-6 + 50e-6 + 2 * 10e-6 + 2000e-9)
