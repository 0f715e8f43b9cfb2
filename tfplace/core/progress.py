"""Progress of long steps (profiling, ``auto``'s search, calibration, real runs) on standard error.

A :class:`Progress` counts the steps of one long task; :func:`note` says which stage a long call
has reached (``"tfplace: profiling 3,079 ops at batch sizes [1, 2, 4]"``). Both are shown by
default, so that a user of the Python API or of the CLI sees what a call is doing:

* in a program that logs through absl at INFO (the ``tfplace`` command; any program that set
  ``--verbosity=0`` or more), steps are absl log records at INFO, so a log file or a CI log shows
  how far a run got; when INFO records go to a terminal, the steps are drawn instead as a single
  line redrawn in place on standard error (and logged at DEBUG);
* otherwise (a Python program that never configured absl), they are written to standard error
  directly: one line redrawn in place on a terminal, else a line for the first step, then at
  most one a second (:data:`LINE_INTERVAL`), and one when the task is done.

One switch silences them: the environment variable ``TFPLACE_QUIET=1``, ``progress=False`` of
:func:`tfplace.place` and the other long calls (:func:`quiet` in a ``with`` block), or, in an absl
program, a verbosity below INFO (``tfplace ... --verbosity=-1``). Warnings are not progress: they
are still logged.

>>> with Progress("profiling: traced steps", total=3) as progress:  # doctest: +SKIP
...     for batch in (1, 2, 4):
...         run_step(batch)
...         progress.advance(f"batch {batch}")
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import TextIO, TypeVar

from absl import flags, logging
from absl.logging import converter

__all__ = ["QUIET_ENV", "Progress", "info_reaches_stderr", "is_quiet", "note", "quiet", "track"]

T = TypeVar("T")

QUIET_ENV = "TFPLACE_QUIET"
"""Environment variable that silences progress when set to anything but ``""``, ``0`` or ``false``."""

LINE_INTERVAL = 1.0
"""Seconds between two step lines written to a stream that is not a terminal."""

_CLEAR_LINE = "\r\033[K"
_PREFIX = "tfplace: "
_quiet_here: ContextVar[bool] = ContextVar("tfplace_quiet", default=False)


@contextmanager
def quiet(silent: bool = True) -> Iterator[None]:
    """Silence progress in the ``with`` block (when ``silent``); what ``progress=False`` does."""
    token = _quiet_here.set(silent or _quiet_here.get())
    try:
        yield
    finally:
        _quiet_here.reset(token)


def is_quiet() -> bool:
    """Whether progress is silenced: :data:`QUIET_ENV`, :func:`quiet`, or an absl program whose
    verbosity is below INFO (``--verbosity=-1``)."""
    if os.environ.get(QUIET_ENV, "").strip().lower() not in ("", "0", "false", "no"):
        return True
    return _quiet_here.get() or (flags.FLAGS.is_parsed() and not logging.level_info())


def _through_absl() -> bool:
    """Whether progress goes through absl's log (INFO records reach a handler) rather than
    straight to standard error."""
    return bool(logging.level_info())


def note(message: str, *args: object) -> None:
    """Say which stage a long call has reached: ``message % args`` on standard error, or an INFO
    record in an absl program (see the module docstring); nothing when :func:`is_quiet`."""
    if is_quiet():
        logging.debug(message, *args)
    elif _through_absl():
        logging.info(message, *args)
    else:
        text = message % args if args else message
        print(text if text.startswith(_PREFIX) else _PREFIX + text, file=sys.stderr, flush=True)


def info_reaches_stderr() -> bool:
    """Whether an INFO record logged through ``absl.logging`` now would be written to standard error.

    True when the verbosity is INFO or more and the record goes to standard error: no log file is
    in use, or ``--logtostderr``, ``--alsologtostderr`` or ``--stderrthreshold=info`` sends it there too.
    """
    if not logging.level_info():
        return False
    values = flags.FLAGS
    if not values.is_parsed() or values["logtostderr"].value or values["alsologtostderr"].value:
        return True
    stream = getattr(logging.get_absl_handler().python_handler, "stream", None)
    if stream in (sys.stderr, sys.__stderr__):
        return True
    threshold: int = converter.string_to_standard(values["stderrthreshold"].value)  # type: ignore[no-untyped-call]
    return threshold <= converter.STANDARD_INFO


class Progress:
    """Count the steps of a long task and report each one (see the module docstring).

    Parameters
    ----------
    label : str
        What the task is, the start of every message (``"profiling: traced steps"``).
    total : int
        How many steps the task has (at most: a task may end early).
    stream : text stream, optional
        Where lines are drawn or written; standard error (as it is when the task starts) by default.

    Attributes
    ----------
    done : int
        Steps reported so far.
    mode : str
        ``"quiet"`` (DEBUG records only), ``"log"`` (INFO records), ``"live"`` (one line redrawn
        on a terminal) or ``"lines"`` (lines written to a stream that is not a terminal).
    """

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None) -> None:
        if total < 0:
            raise ValueError(f"a task has at least 0 steps, got {total}")
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self.mode = self._choose_mode()
        self._started = time.perf_counter()
        self._last_line = -float("inf")
        self._drawn = False

    def _choose_mode(self) -> str:
        terminal = bool(self._stream.isatty())
        if is_quiet():
            return "quiet"
        if _through_absl():
            return "live" if terminal and info_reaches_stderr() else "log"
        return "live" if terminal else "lines"

    @property
    def live(self) -> bool:
        """Whether the steps are drawn as one line redrawn in place."""
        return self.mode == "live"

    def __enter__(self) -> Progress:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._clear()
        if exc_type is not None:
            return
        message = f"{self.label}: {self.done}/{self.total} done in {self.elapsed:.1f} s"
        if self.mode == "quiet":
            logging.debug("%s", message)
        elif _through_absl():
            logging.info("%s", message)
        else:
            self._write_line(message)

    @property
    def elapsed(self) -> float:
        """Seconds since the task started."""
        return time.perf_counter() - self._started

    def advance(self, detail: str = "") -> None:
        """Report that one more step has finished; ``detail`` says which (``"batch 4"``)."""
        self.done += 1
        message = f"{self.label}: {self.done}/{self.total}" + (f" ({detail})" if detail else "")
        if self.mode == "live":
            logging.debug("%s", message)
            prefix = "" if _through_absl() else _PREFIX
            self._stream.write(f"{_CLEAR_LINE}{prefix}{message}  {self.elapsed:.1f} s")
            self._stream.flush()
            self._drawn = True
        elif self.mode == "log":
            logging.info("%s", message)
        elif self.mode == "lines" and (self.done == 1 or self.elapsed - self._last_line >= LINE_INTERVAL):
            self._write_line(f"{message}  {self.elapsed:.1f} s")
        else:
            logging.debug("%s", message)

    def _write_line(self, message: str) -> None:
        self._stream.write(f"{_PREFIX}{message}\n")
        self._stream.flush()
        self._last_line = self.elapsed

    def _clear(self) -> None:
        if self._drawn:
            self._stream.write(_CLEAR_LINE)
            self._stream.flush()
            self._drawn = False


def track(
    items: Iterable[T],
    label: str,
    *,
    total: int | None = None,
    detail: Callable[[T], str] | None = None,
    stream: TextIO | None = None,
) -> Iterator[T]:
    """Yield ``items`` and report a step of :class:`Progress` after each one has been processed.

    Parameters
    ----------
    items : iterable
    label : str
        See :class:`Progress`.
    total : int, optional
        Number of items; ``len(items)`` by default.
    detail : callable, optional
        ``detail(item)`` names the step (``lambda size: f"{size} bytes"``).
    stream : text stream, optional
        See :class:`Progress`.
    """
    if total is None:
        listed = list(items)
        items, total = listed, len(listed)
    with Progress(label, total, stream=stream) as progress:
        for item in items:
            yield item
            progress.advance(detail(item) if detail is not None else "")
