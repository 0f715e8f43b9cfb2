"""Calibrate what a step's fed tensors cost (:class:`~tfplace.core.device_model.FeedCost`).

A training step run with a ``feed_dict`` pays for its feeds before any op runs: the client checks
and converts each fed array, and a remote session sends them to the master in its ``RunStep``
request. A profile cannot see this (its traced ops start after it), nor can the per-step overhead,
timed on steps that feed nothing. :func:`time_feeds` times steps that feed ``1, 3, 6`` small
tensors or one tensor of each of :data:`FEED_SIZES` against the same steps unfed (each fed tensor
is a ``PlaceholderWithDefault`` whose default is a variable of the same size, so that both steps
run the same kernels), and :func:`fit_feed_cost` fits ``per_step + per_tensor * tensors + per_byte
* bytes`` to the differences.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tfplace.core.device_model import FeedCost
from tfplace.estimator.step_timing import back_to_back_seconds, step_statistic

__all__ = [
    "DEFAULT_FEED_FITS",
    "FEED_COUNTS",
    "FEED_SIZES",
    "FeedSample",
    "calibrate_feed_cost",
    "fit_feed_cost",
    "time_feeds",
]

FEED_COUNTS: tuple[int, ...] = (1, 3, 6)
"""Small tensors (one float each) fed in one step, for the per-step and per-tensor costs."""

DEFAULT_FEED_FITS = 3
"""Independent fits :func:`calibrate_feed_cost` pools. In this VM's process one MiB fed cost either
about 190 or about 350 us from one fit to the next (whether the array is copied into a tensor, it
seems), a 0.15 or 0.29 ns per byte fit."""

FEED_SIZES: tuple[int, ...] = (2**16, 2**18, 2**20)
"""Bytes of the one tensor fed in a step, for the per-byte cost: 64 KiB to 1 MiB, the inputs of
a small batch. Over gRPC a 4 MiB feed cost 1.46 ns per byte against 0.8 up to 1 MiB (session 16);
larger feeds are extrapolated from these."""


class FeedSample(NamedTuple):
    """Seconds a step feeding ``tensors`` tensors of ``nbytes`` bytes in all took beyond the same
    step unfed."""

    tensors: int
    nbytes: int
    seconds: float


def fit_feed_cost(samples: Sequence[FeedSample]) -> FeedCost:
    """The least-squares :class:`~tfplace.core.device_model.FeedCost` of ``samples``, each
    coefficient at least 0 (a negative one is dropped and the others fitted again): the samples
    need at least two tensor counts and two byte counts."""
    if len({sample.tensors for sample in samples}) < 2 or len({sample.nbytes for sample in samples}) < 2:
        raise ValueError(
            f"a feed cost needs samples of two tensor counts and two sizes at least, got {list(samples)}"
        )
    design = np.array([[1.0, sample.tensors, sample.nbytes] for sample in samples])
    seconds = np.array([sample.seconds for sample in samples])
    kept = [0, 1, 2]
    while True:
        coefficients, *_ = np.linalg.lstsq(design[:, kept], seconds, rcond=None)
        if (coefficients >= 0).all() or len(kept) == 1:
            break
        kept.pop(int(np.argmin(coefficients)))
    fitted = dict.fromkeys(range(3), 0.0) | {
        column: max(float(c), 0.0) for column, c in zip(kept, coefficients)
    }
    return FeedCost(per_step=fitted[0], per_tensor=fitted[1], per_byte=fitted[2])


def time_feeds(
    device: str,
    *,
    target: str = "",
    config: Any = None,
    counts: Sequence[int] = FEED_COUNTS,
    sizes: Sequence[int] = FEED_SIZES,
    repeats: int = 20,
) -> list[FeedSample]:
    """What feeding costs a step on ``device`` of a session at ``target`` under ``config``: one
    :class:`FeedSample` per count of small tensors and per size of one tensor, the profiler's
    statistic (:func:`~tfplace.estimator.step_timing.step_statistic`) of the fed steps minus that of
    the same steps unfed, all of them timed in ``repeats`` interleaved rounds of back-to-back steps
    (:func:`~tfplace.estimator.step_timing.back_to_back_seconds`)."""
    import tensorflow as tf

    if repeats < 1 or not counts or not sizes or min(counts) < 1 or min(sizes) < 4:
        raise ValueError(
            f"need repeats >= 1, tensor counts >= 1 and sizes >= 4 bytes, got {repeats}, {list(counts)}, {list(sizes)}"
        )
    container = f"tfplace_feeds_{uuid.uuid4().hex}"
    graph = tf.Graph()
    with graph.as_default(), tf.device(device), tf.compat.v1.container(container):
        small = [_fed_tensor(tf, 1, f"small_{i}") for i in range(max(counts))]
        small_fetch = tf.add_n([tf.reduce_sum(tensor) for tensor in small])
        large = [_fed_tensor(tf, size // 4, f"large_{size}") for size in sizes]
        large_fetches = [tf.reduce_sum(tensor) for tensor in large]
        initializer = tf.compat.v1.global_variables_initializer()
    one = np.ones(1, np.float32)
    cases = [(count, 4 * count, small_fetch, {t: one for t in small[:count]}) for count in counts]
    cases += [
        (1, size, fetch, {tensor: np.ones(size // 4, np.float32)})
        for size, tensor, fetch in zip(sizes, large, large_fetches)
    ]
    fed: list[list[float]] = [[] for _ in cases]
    unfed: list[list[float]] = [[] for _ in cases]
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as session:
            session.run(initializer)
            for _ in range(repeats):
                for (_, _, fetch, feeds), fed_times, unfed_times in zip(cases, fed, unfed):
                    fed_times += back_to_back_seconds(session, fetch, feeds)
                    unfed_times += back_to_back_seconds(session, fetch)
    finally:
        if target:
            tf.compat.v1.Session.reset(target, [container])
    return [
        FeedSample(count, nbytes, step_statistic(fed_times) - step_statistic(unfed_times))
        for (count, nbytes, _, _), fed_times, unfed_times in zip(cases, fed, unfed)
    ]


def _fed_tensor(tf: Any, elements: int, name: str) -> Any:
    """A ``PlaceholderWithDefault`` of ``elements`` floats whose default reads a variable."""
    variable = tf.compat.v1.Variable(tf.zeros([elements]), name=f"{name}_default")
    return tf.compat.v1.placeholder_with_default(variable.read_value(), [elements], name=name)


def calibrate_feed_cost(
    device: str, *, target: str = "", config: Any = None, repeats: int = 20, fits: int = DEFAULT_FEED_FITS
) -> FeedCost:
    """What the step's feeds cost a session on ``device``: each coefficient the median of ``fits``
    :func:`fit_feed_cost` of :func:`time_feeds`."""
    if fits < 1:
        raise ValueError(f"fits must be at least 1, got {fits}")
    each = [
        fit_feed_cost(time_feeds(device, target=target, config=config, repeats=repeats)) for _ in range(fits)
    ]
    return FeedCost(
        **{
            field.name: float(np.median([getattr(fit, field.name) for fit in each]))
            for field in dataclasses.fields(FeedCost)
        }
    )
