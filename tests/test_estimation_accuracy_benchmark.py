"""The Table 5 benchmark keeps its measurements, so that the regression can be refitted on them
(benchmarks/estimation_accuracy.py, --profiles_dir and --refit_from)."""

import pytest

from benchmarks.estimation_accuracy import load_profiles, save_profiles
from tfplace.estimator.accuracy import AccuracyProfiles
from tfplace.estimator.profiler import OpCost, ProfileSet


def measured(batches, seconds):
    costs = {b: {"conv": OpCost(seconds * b, (1000 * b,), 10, 64, (), seconds * b / 2)} for b in batches}
    return ProfileSet(
        batch_sizes=batches,
        costs=costs,
        time_errors={b: {"conv": 1e-6} for b in batches},
        steps={b: (9, 10) for b in batches},
    )


def test_saved_measurements_load_back_with_their_load_averages_and_seconds(tmp_path):
    profiles = AccuracyProfiles(measured((2, 4, 6), 1e-4), measured((8,), 1e-4), measured((8,), 1.1e-4))
    path = tmp_path / "nmt_idle.json.gz"
    save_profiles(profiles, (1.02, 1.05), 157.0, path)
    assert load_profiles(path) == (profiles, (1.02, 1.05), 157.0)


def test_refitting_a_model_that_was_not_saved_names_the_file(tmp_path):
    from absl import app

    with pytest.raises(app.UsageError, match=r"nmt_busy\.json\.gz"):
        load_profiles(tmp_path / "nmt_busy.json.gz")
