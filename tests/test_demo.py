"""The demo is the end-to-end proof on a real model: Inception V3 placed, run and compared."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow, pytest.mark.profiles]

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_places_inception_runs_it_where_placed_and_matches_one_device(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.demo",
            "--steps=2",
            "--batch_size=8",
            "--profile_batch_sizes=1,2",  # a line through two batches: the demo's third takes 20 s
            f"--cache_dir={tmp_path}",
            "--compare=celeritas",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    assert "ops that ran elsewhere than placed: 0" in out
    assert "losses equal: True; updated weights equal: True" in out
    assert "placer auto placed" in out and "celeritas" in out
