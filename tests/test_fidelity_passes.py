"""``benchmarks/fidelity.py`` reports each row over several passes: the pass of median error, with
the passes' spread beside it (issue 17: one pass catches one phase of this machine's speed), and
times each session's steps in blocks that start with untimed steps."""

from __future__ import annotations

from typing import Any

from absl.testing import flagsaver

from benchmarks.fidelity import FLAGS, Series, interleaved_steps, median_runs


def _row(model: str, error: float, memory_error: float, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "placement": "single",
        "kind": "virtual",
        "error": error,
        "memory_error": memory_error,
        **extra,
    }


def test_a_row_is_its_pass_of_median_error_with_the_spread_of_all_passes() -> None:
    passes = [
        [_row("nmt", 0.023, 0.03, measured_s=3.33)],
        [_row("nmt", -0.155, 0.02, measured_s=4.72)],
        [_row("nmt", -0.088, -0.12, measured_s=4.04)],
    ]

    [row] = median_runs(passes)

    assert row["error"] == -0.088 and row["measured_s"] == 4.04
    assert (row["runs"], row["error_min"], row["error_max"]) == (3, -0.155, 0.023)


def test_the_worst_memory_error_is_the_one_farthest_from_zero_whatever_its_sign() -> None:
    passes = [[_row("nmt", 0.0, 0.08)], [_row("nmt", 0.0, -0.12)], [_row("nmt", 0.0, 0.01)]]

    assert median_runs(passes)[0]["worst_memory_error"] == -0.12


def test_an_even_count_of_passes_takes_the_lower_middle_one() -> None:
    passes = [[_row("nmt", error, 0.0)] for error in (0.04, -0.02, 0.01, 0.09)]

    assert median_runs(passes)[0]["error"] == 0.01


def test_rows_keep_the_first_pass_order_and_stay_apart_per_model() -> None:
    passes = [
        [_row("nmt", 0.01, 0.0), _row("transformer", 0.05, 0.0)],
        [_row("transformer", 0.03, 0.0), _row("nmt", 0.02, 0.0)],
    ]

    rows = median_runs(passes)

    assert [(row["model"], row["error"]) for row in rows] == [("nmt", 0.01), ("transformer", 0.03)]


class _CountingSession:
    """A session whose steps take no time and are only counted."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, fetches: Any, feeds: Any) -> None:
        self.runs += 1


def test_each_block_runs_its_untimed_steps_before_timing_any() -> None:
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    session = _CountingSession()
    series = Series(session, fetches=None, feeds={})
    overrides = {"warmup_steps": 3, "first_traces": 0, "block_untimed_steps": 3, "block_seconds": 1e-9}
    with flagsaver.flagsaver(steps=4, timed_seconds=0.0, max_steps=4, **overrides):
        timed, _ = interleaved_steps([series], workers=[])

    assert timed == len(series.wall) == 4  # four rounds of one timed step
    assert session.runs == 3 + 4 * (3 + 1)  # the warm-up, then per round three untimed and one timed
