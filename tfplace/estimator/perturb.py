"""Seeded perturbation of measured op costs, to prove that results do not hang on one machine.

Measured costs belong to one CPU, one kernel library and one load: another machine runs each op
faster or slower and may pick a kernel with more, less or no scratch memory. With the environment
variable ``TFPLACE_PERTURB_PROFILES=SEED`` (an integer) every op's measured costs are changed as
such a machine would change them: its compute time is multiplied by a factor drawn uniformly from
:data:`TIME_FACTORS` and its temporary bytes by one from :data:`TEMPORARY_FACTORS`. The factors are
drawn per op from the seed and the op's name (SHA-256, not Python's salted ``hash``), so an op gets
the same factors at every batch size, in every traced step and in every process. Unset or empty:
costs are as measured.

:func:`tfplace.estimator.profiler.profile_graph` applies it to every profile it measures (not to
one read from the cache; the seed is part of the cache key). A test suite that passes with several
seeds asserts nothing that holds on one machine's measurements only.
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["PERTURB_VARIABLE", "TEMPORARY_FACTORS", "TIME_FACTORS", "cost_factors", "perturbation_seed"]

PERTURB_VARIABLE = "TFPLACE_PERTURB_PROFILES"
"""The environment variable holding the perturbation seed."""

TIME_FACTORS = (0.6, 1.6)
"""Range of the factor on an op's compute time."""

TEMPORARY_FACTORS = (0.0, 2.0)
"""Range of the factor on an op's temporary bytes (0: a kernel without scratch memory)."""


def perturbation_seed() -> int | None:
    """The seed in ``TFPLACE_PERTURB_PROFILES``, or ``None`` when it is unset or empty.

    Raises
    ------
    ValueError
        The variable holds something other than an integer.
    """
    value = os.environ.get(PERTURB_VARIABLE, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{PERTURB_VARIABLE} must be an integer seed, got {value!r}") from None


def _uniform(digest: bytes, low: float, high: float) -> float:
    return low + (high - low) * int.from_bytes(digest, "big") / 2 ** (8 * len(digest))


def cost_factors(seed: int, op: str) -> tuple[float, float]:
    """``(time factor, temporary bytes factor)`` of ``op`` under ``seed``: the same in every process."""
    digest = hashlib.sha256(f"{seed}\0{op}".encode()).digest()
    return _uniform(digest[:8], *TIME_FACTORS), _uniform(digest[8:16], *TEMPORARY_FACTORS)
