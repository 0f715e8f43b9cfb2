"""Progress of long steps (profiling, calibration, real runs): one log line per step, or one live line.

A :class:`Progress` counts the steps of one long task. Each step is logged through ``absl.logging``
at INFO (``"profiling: traced steps 3/15 (batch 4)"``) and the end of the task with its duration,
so a log file or a CI log shows how far a run got. When INFO records go to a terminal, the steps
are drawn instead as a single line redrawn in place on standard error (and logged at DEBUG), so a
user at a terminal sees one line moving rather than a scrolling list.

Nothing is shown that the absl logging flags would hide: below ``--verbosity=0`` there is neither
log nor live line, and when the log goes to a file the live line is drawn only if
``--stderrthreshold`` (or ``--alsologtostderr``) lets INFO reach standard error. Programs that never
parse absl flags (libraries, tests) log at WARNING, so they stay silent.

>>> with Progress("profiling: traced steps", total=3) as progress:  # doctest: +SKIP
...     for batch in (1, 2, 4):
...         run_step(batch)
...         progress.advance(f"batch {batch}")
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TextIO, TypeVar

from absl import flags, logging
from absl.logging import converter

__all__ = ["Progress", "info_reaches_stderr", "track"]

T = TypeVar("T")

_CLEAR_LINE = "\r\033[K"


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
        How many steps the task has.
    stream : text stream, optional
        Where the live line is drawn; standard error (as it is when the task starts) by default.

    Attributes
    ----------
    done : int
        Steps reported so far.
    live : bool
        Whether the steps are drawn as a live line (a terminal that INFO records reach) rather
        than logged at INFO.
    """

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None) -> None:
        if total < 0:
            raise ValueError(f"a task has at least 0 steps, got {total}")
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self.live = bool(self._stream.isatty()) and info_reaches_stderr()
        self._started = time.perf_counter()
        self._drawn = False

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
        if exc_type is None:
            logging.info("%s: %d/%d done in %.1f s", self.label, self.done, self.total, self.elapsed)

    @property
    def elapsed(self) -> float:
        """Seconds since the task started."""
        return time.perf_counter() - self._started

    def advance(self, detail: str = "") -> None:
        """Report that one more step has finished; ``detail`` says which (``"batch 4"``)."""
        self.done += 1
        message = f"{self.label}: {self.done}/{self.total}" + (f" ({detail})" if detail else "")
        if self.live:
            logging.debug("%s", message)
            self._stream.write(f"{_CLEAR_LINE}{message}  {self.elapsed:.1f} s")
            self._stream.flush()
            self._drawn = True
        else:
            logging.info("%s", message)

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
