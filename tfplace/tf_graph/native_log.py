"""Keep TensorFlow's C++ lines that say nothing to a tfplace user off standard error.

A ``FULL_TRACE`` step on a machine without a GPU makes TensorFlow's runtime write
``W... xplane_to_step_stats.cc:84] GPU trace was not collected.`` once per traced step (and, at
TensorFlow's default C++ log level, four ``Profiler session ...`` lines): profiling traces dozens
of steps. The C++ log level (``TF_CPP_MIN_LOG_LEVEL``) is read once, when TensorFlow
is loaded, and would hide every warning besides; so :func:`filtered_native_stderr` instead lends
the runtime a temporary file as its standard error (file descriptor 2) around one call, then writes
back every line but those of :data:`NOISE`. Errors and other warnings reach standard error as
before, after the call returns.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["NOISE", "filtered_native_stderr"]

NOISE = (
    re.compile(r"\] GPU trace was not collected\.$"),
    re.compile(
        r"profiler_session\.cc:\d+\] Profiler session (initializing|started|collecting data|tear down)\.$"
    ),
)
"""Lines of TensorFlow's runtime that are dropped: what every traced step logs (at INFO, and the
GPU line at WARNING on a machine without a GPU)."""


@contextmanager
def filtered_native_stderr(noise: Sequence[re.Pattern[str]] = NOISE) -> Iterator[None]:
    """Run the block with file descriptor 2 sent to a temporary file, then write its lines back to
    standard error, except those matching any of ``noise``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not any(p.search(line.rstrip("\n")) for p in noise))
            if kept:
                os.write(2, kept.encode("utf-8"))
