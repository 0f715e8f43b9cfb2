"""An on-disk cache of profiles, keyed by what determines a profile's content.

Profiling runs TensorFlow for minutes on a large graph; a second request for the same graph,
fetches, batch sizes, feeds and settings reads the stored result instead. The key
(:func:`profile_key`) hashes

- the graph (:func:`graph_fingerprint`: the GraphDef serialized deterministically with every device
  field cleared, so placing a graph does not invalidate its profile but any other change does; the
  profiler passes the part of the graph the step runs, see
  :func:`tfplace.tf_graph.fetches.step_graph_def`),
- and every setting that changes the measurement: fetches, batch sizes, the shapes and dtypes of the
  feeds, warm-up and traced step counts, the session config (threads, optimizer settings), the
  TensorFlow version and the format of the stored document.

Entries are JSON documents written atomically (a temporary file renamed into place), so an
interrupted run leaves either the previous entry or none, never a partial file. This module does
not import TensorFlow: it handles protos through their own methods.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfplace.core.costgraph import atomic_write_text

__all__ = ["CACHE_FORMAT", "ProfileCache", "graph_fingerprint", "profile_key"]

CACHE_FORMAT = 1
"""Version of the stored documents; part of every key, so a new format never reads an old entry."""


def graph_fingerprint(graph_def: Any) -> str:
    """SHA-256 of a ``GraphDef`` with device fields cleared, serialized deterministically.

    Devices are cleared in the graph's nodes and in the nodes of its function library: where the
    graph was placed does not change what its ops cost on the reference device.
    """
    from tfplace.tf_graph.apply import without_devices

    return hashlib.sha256(without_devices(graph_def).SerializeToString(deterministic=True)).hexdigest()


def profile_key(graph_def: Any, settings: Mapping[str, Any]) -> str:
    """The cache key of profiling ``graph_def`` with ``settings`` (a JSON-serializable mapping).

    Examples
    --------
    The key changes with any setting: ``profile_key(g, {"batch_sizes": [1, 2]})`` differs from
    ``profile_key(g, {"batch_sizes": [1, 2, 4]})``.
    """
    document = {"format": CACHE_FORMAT, "graph": graph_fingerprint(graph_def), "settings": settings}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ProfileCache:
    """A directory of JSON documents, one per key.

    Parameters
    ----------
    directory : str or os.PathLike
        Created on the first :meth:`store`.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.directory / f"profile-{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The stored document of ``key``, or ``None`` when there is none.

        An unreadable entry (not JSON, or another format) is reported with a warning naming the
        file and treated as absent, so the caller profiles again and replaces it.
        """
        path = self.path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            warnings.warn(f"ignoring unreadable profile cache entry {path}: {error}", stacklevel=2)
            return None
        if not isinstance(document, dict) or document.get("cache_format") != CACHE_FORMAT:
            warnings.warn(f"ignoring profile cache entry {path}: not format {CACHE_FORMAT}", stacklevel=2)
            return None
        content = document.get("content")
        return content if isinstance(content, dict) else None

    def store(self, key: str, content: Mapping[str, Any]) -> Path:
        """Write ``content`` (JSON-serializable) as the entry of ``key``, atomically."""
        path = self.path(key)
        atomic_write_text(path, json.dumps({"cache_format": CACHE_FORMAT, "content": content}))
        return path
