"""Progress of long steps: a log record per step, or one redrawn line on a terminal, as absl's flags allow."""

import io
import logging as std_logging
import types

import pytest
from absl import flags, logging

from tfplace.core import progress
from tfplace.core.progress import Progress, info_reaches_stderr, track


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self):
        return True


@pytest.fixture
def verbosity():
    """``verbosity(level)`` sets absl's verbosity for the test; the previous one comes back after it."""
    before = logging.get_verbosity()
    yield logging.set_verbosity
    logging.set_verbosity(before)


def messages(caplog, level=std_logging.INFO):
    return [r.getMessage() for r in caplog.records if r.name == "absl" and r.levelno == level]


def test_each_step_is_logged_at_info_with_its_count_and_what_it_was(verbosity, caplog):
    verbosity(logging.INFO)
    caplog.set_level(std_logging.DEBUG)
    stream = io.StringIO()
    with Progress("profiling traced steps", total=2, stream=stream) as steps:
        steps.advance("batch 1")
        steps.advance("batch 2")

    logged = messages(caplog)
    assert logged[:2] == ["profiling traced steps: 1/2 (batch 1)", "profiling traced steps: 2/2 (batch 2)"]
    assert logged[2].startswith("profiling traced steps: 2/2 done in ")
    assert stream.getvalue() == ""  # not a terminal: no live line


def test_on_a_terminal_the_steps_redraw_one_line_that_is_cleared_at_the_end(verbosity, caplog):
    verbosity(logging.INFO)
    caplog.set_level(std_logging.DEBUG)
    terminal = Terminal()
    with Progress("calibrating", total=3, stream=terminal) as steps:
        for size in (1024, 4096, 16384):
            steps.advance(f"{size} bytes")

    drawn = terminal.getvalue()
    assert "\n" not in drawn
    assert drawn.count("\r\033[K") == 4  # three redraws and the final clear
    assert "calibrating: 3/3 (16384 bytes)" in drawn
    assert drawn.endswith("\r\033[K")
    assert [m for m in messages(caplog) if "bytes" in m] == []  # steps went to the line, not the log
    assert messages(caplog)[-1].startswith("calibrating: 3/3 done in ")


def test_below_info_verbosity_there_is_neither_a_line_nor_a_record(verbosity, caplog):
    verbosity(logging.WARNING)
    caplog.set_level(std_logging.DEBUG)
    terminal = Terminal()
    with Progress("running", total=2, stream=terminal) as steps:
        steps.advance()
        steps.advance()

    assert terminal.getvalue() == ""
    assert messages(caplog) == []


def test_a_failed_task_clears_its_line_and_logs_no_completion(verbosity, caplog):
    verbosity(logging.INFO)
    caplog.set_level(std_logging.DEBUG)
    terminal = Terminal()
    with pytest.raises(RuntimeError), Progress("running", total=3, stream=terminal) as steps:
        steps.advance()
        raise RuntimeError("step 2 failed")

    assert terminal.getvalue().endswith("\r\033[K")
    assert not any("done" in m for m in messages(caplog))


@pytest.mark.parametrize(("threshold", "shown"), [("info", True), ("warning", False)])
def test_with_a_log_file_the_live_line_is_drawn_only_if_stderrthreshold_lets_info_through(
    verbosity, monkeypatch, threshold, shown
):
    verbosity(logging.INFO)
    values = flags.FlagValues()
    flags.DEFINE_boolean("logtostderr", False, "", flag_values=values)
    flags.DEFINE_boolean("alsologtostderr", False, "", flag_values=values)
    flags.DEFINE_string("stderrthreshold", "fatal", "", flag_values=values)
    values(["program", f"--stderrthreshold={threshold}"])
    monkeypatch.setattr(progress, "flags", types.SimpleNamespace(FLAGS=values))
    monkeypatch.setattr(logging.get_absl_handler().python_handler, "stream", io.StringIO())  # a log file

    assert info_reaches_stderr() is shown
    assert Progress("running", total=1, stream=Terminal()).live is shown


def test_track_yields_every_item_and_reports_a_step_after_each(verbosity, caplog):
    verbosity(logging.INFO)
    caplog.set_level(std_logging.INFO)
    seen = []
    for size in track([10, 20, 30], "sizes", detail=lambda size: f"{size} bytes", stream=io.StringIO()):
        seen.append(size)
        assert len([m for m in messages(caplog) if "bytes" in m]) == len(seen) - 1

    assert seen == [10, 20, 30]
    assert messages(caplog)[:3] == ["sizes: 1/3 (10 bytes)", "sizes: 2/3 (20 bytes)", "sizes: 3/3 (30 bytes)"]
