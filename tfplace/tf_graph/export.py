"""Write a (placed) ``tf.Graph`` to disk: as a graph file to run, or as a TensorBoard event file to look at.

- :func:`write_graph` picks the format from the suffix: ``.pb`` (binary ``GraphDef``), ``.pbtxt``
  (text ``GraphDef``) or ``.meta`` (binary ``MetaGraphDef`` with the graph's collections, so that
  its variables and ``train_op`` are found again when it is read back). Devices are kept.
- :func:`write_tensorboard_graph` writes an event file whose graph TensorBoard's *Graphs* tab
  shows; with *Color: Device* it colors every op by the device the placement gave it. A graph
  rewritten by a split plan (:func:`~tfplace.tf_graph.split_rewrite.split_graph`) shows each split
  op as a group of its pieces (``conv/piece0``, ``conv/piece1``, ...), each colored by its device.
"""

from __future__ import annotations

import glob
import os
import uuid
from pathlib import Path
from typing import Any

from tfplace.core.costgraph import atomic_write_bytes

__all__ = ["GRAPH_SUFFIXES", "write_graph", "write_tensorboard_graph"]

GRAPH_SUFFIXES = (".pb", ".pbtxt", ".meta")
"""The suffixes :func:`write_graph` writes (and :func:`~tfplace.tf_graph.importer.load_graph` reads)."""


def write_graph(graph: Any, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` (a ``tf.Graph``) to ``path`` in the format its suffix names, atomically.

    Raises
    ------
    ValueError
        When the suffix is not one of :data:`GRAPH_SUFFIXES`.
    """
    import tensorflow as tf
    from google.protobuf import text_format

    suffix = Path(path).suffix
    if suffix not in GRAPH_SUFFIXES:
        raise ValueError(
            f"{path}: a graph is written as {', '.join(GRAPH_SUFFIXES)}, not {suffix or 'no suffix'}"
        )
    if suffix == ".meta":
        with graph.as_default():  # refused in eager mode
            meta = tf.compat.v1.train.export_meta_graph(graph=graph, clear_devices=False)
        data = meta.SerializeToString()
    elif suffix == ".pbtxt":
        data = text_format.MessageToString(graph.as_graph_def()).encode("utf-8")
    else:
        data = graph.as_graph_def().SerializeToString()
    atomic_write_bytes(path, data)


def write_tensorboard_graph(graph: Any, logdir: str | os.PathLike[str]) -> str:
    """Write ``graph`` to a new event file in ``logdir`` for TensorBoard; return the file's path.

    ``tensorboard --logdir LOGDIR`` then shows it under *Graphs*.
    """
    import tensorflow as tf

    suffix = f".tfplace-{uuid.uuid4().hex[:12]}"
    with graph.as_default():  # refused in eager mode
        writer = tf.compat.v1.summary.FileWriter(str(logdir), graph=graph, filename_suffix=suffix)
        writer.close()
    (written,) = glob.glob(os.path.join(glob.escape(str(logdir)), f"events.out.tfevents.*{suffix}"))
    return written
