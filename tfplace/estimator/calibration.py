"""Calibrate the transfer model ``t = k * bytes + b`` of one link by timing real transfers.

Celeritas (section 4.2.1, after Pesto) takes the communication cost between two devices as a
linear function of the bytes sent, with ``k`` and ``b`` fitted off-line. :func:`calibrate_transfer`
fits them for a pair of TensorFlow devices: two virtual CPUs of one process, two workers of a
:class:`~tfplace.tf_graph.cluster.LocalCluster`, or two GPUs.

For each size, a variable of that many bytes lives on the source device, and a step reads it and
takes one element of it on the destination device (a tensor the consumer reads, so it crosses the
link; the graph's constant folding cannot remove it since a variable's value is unknown). The same
step with the consumer on the source device is timed alternately with it, and the difference of
the two medians is the transfer's time: session overhead and the read cancel out.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

from tfplace.progress import track
from tfplace.transfer import TransferModel

__all__ = ["DEFAULT_SIZES", "calibrate_transfer", "time_transfers"]

DEFAULT_SIZES: tuple[int, ...] = tuple(2**p for p in range(10, 27, 2))
"""Bytes timed by default: 1 KiB to 64 MiB in powers of 4."""


def time_transfers(
    src_device: str,
    dst_device: str,
    *,
    target: str = "",
    config: Any = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 10,
) -> list[float]:
    """Seconds one transfer of each of ``sizes`` bytes takes from ``src_device`` to ``dst_device``.

    Each value is the median of ``repeats`` timed steps that send the tensor minus the median of as
    many steps doing the same work on ``src_device`` alone (at least 0). See
    :func:`calibrate_transfer` for the parameters.
    """
    import tensorflow as tf

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    bad = [size for size in sizes if size < 4]
    if bad:
        raise ValueError(f"transfer sizes must be at least 4 bytes (one float32), got {bad}")
    container = f"tfplace_calibration_{uuid.uuid4().hex}"
    graph = tf.Graph()
    steps = []
    with graph.as_default(), tf.compat.v1.container(container):
        for size in sizes:
            with tf.device(src_device):
                variable = tf.compat.v1.Variable(tf.zeros([size // 4]), name=f"payload_{size}")
                value = variable.read_value()
                local = value[0]
            with tf.device(dst_device):
                remote = value[0]
            steps.append((local, remote))
        initializer = tf.compat.v1.global_variables_initializer()
    seconds = []
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as session:
            session.run(initializer)
            label = f"calibrating {src_device} -> {dst_device}"
            for _, (local, remote) in track(zip(sizes, steps), label, detail=_bytes):
                session.run([local, remote])  # warm up both paths
                same, crossing = [], []
                for _ in range(repeats):
                    same.append(_timed(session, local))
                    crossing.append(_timed(session, remote))
                seconds.append(max(statistics.median(crossing) - statistics.median(same), 0.0))
    finally:
        if target:  # a remote server keeps the variables until their container is reset
            tf.compat.v1.Session.reset(target, [container])
    return seconds


def _bytes(item: tuple[int, Any]) -> str:
    return f"{item[0]:,} bytes"


def _timed(session: Any, fetch: Any) -> float:
    start = time.perf_counter()
    session.run(fetch)
    return time.perf_counter() - start


def calibrate_transfer(
    src_device: str,
    dst_device: str,
    *,
    target: str = "",
    config: Any = None,
    sizes: Sequence[int] | None = None,
    repeats: int = 10,
) -> TransferModel:
    """Fit the transfer model of the link ``src_device -> dst_device`` to timed transfers.

    Parameters
    ----------
    src_device, dst_device : str
        TensorFlow device names, e.g. ``/device:CPU:0`` and ``/device:CPU:1`` (with
        ``config=ConfigProto(device_count={"CPU": 2})``), or two tasks of a cluster
        (``LocalCluster.device(0)``, ``LocalCluster.device(1)`` with ``target=cluster.target``).
    target : str
        Session target; ``""`` for an in-process session.
    config : tf.compat.v1.ConfigProto, optional
        Session config (it must create both devices).
    sizes : sequence of int, optional
        Bytes per transfer; :data:`DEFAULT_SIZES` (2^10 .. 2^26) by default.
    repeats : int
        Timed steps per size and path.

    Returns
    -------
    TransferModel
        ``k`` seconds per byte and ``b`` seconds per transfer, both >= 0, named
        ``"<src> -> <dst>"``.
    """
    chosen = tuple(sizes) if sizes is not None else DEFAULT_SIZES
    seconds = time_transfers(
        src_device, dst_device, target=target, config=config, sizes=chosen, repeats=repeats
    )
    return TransferModel.fit(chosen, seconds, name=f"{src_device} -> {dst_device}")
