"""Feeds for a saved graph: random data shaped like its placeholders, or real inputs from an ``.npz``.

A saved graph comes without the input pipeline that fed it. To profile or run it, tfplace feeds
every ``Placeholder`` the fetches need (:func:`needed_placeholders`) with a feed function
``feed_fn(batch_size) -> {"name:0": array}``:

- :func:`random_feed_fn`: data of each placeholder's dtype and static shape, its **batch
  dimension** (the first one, when it is unknown) set to the batch size. Floats are standard
  normal, integers uniform in ``[0, int_high)`` (valid class labels and token ids for any model
  with at least ``int_high`` classes or tokens), booleans ``False``. Other unknown dimensions (a
  sequence length) are given explicitly: ``shapes={"inputs": ("B", 20, 5)}``, ``B`` standing for
  the batch size. The data depend only on the seed and the batch size, so a step at one batch size
  always sees the same inputs.
- :func:`npz_feed_fn`: arrays of an ``.npz`` file named after the placeholders (``images`` or
  ``images:0``). A placeholder whose first dimension is unknown gets the first ``batch_size`` rows
  of its array, cycling through them when the file has fewer; any other gets its array whole.

Both check the data against the placeholders when they are made, and raise :class:`FeedError`
naming the placeholder and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfplace.tf_graph.importer import fetch_op_names, step_closure

__all__ = [
    "BATCH",
    "FeedError",
    "PlaceholderSpec",
    "needed_placeholders",
    "npz_feed_fn",
    "random_feed_fn",
]

BATCH = "B"
"""The dimension of an explicit shape that stands for the batch size."""

FeedFunction = Callable[[int], dict[str, np.ndarray]]


class FeedError(ValueError):
    """Inputs cannot be made for, or do not fit, a graph's placeholders: the message names them."""


@dataclass(frozen=True)
class PlaceholderSpec:
    """A placeholder of the graph: its op name, numpy dtype and static shape (``None`` for an
    unknown dimension; ``shape`` itself ``None`` for an unknown rank)."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int | None, ...] | None

    @property
    def batched(self) -> bool:
        """Whether the first dimension is unknown, and so is the batch dimension."""
        return self.shape is not None and len(self.shape) > 0 and self.shape[0] is None


def needed_placeholders(graph: Any, fetches: Any) -> list[PlaceholderSpec]:
    """The placeholders a step running ``fetches`` needs fed, in the graph's order.

    Raises
    ------
    GraphImportError
        When the graph has no op of a fetch's name.
    """
    needed = step_closure(graph, fetch_op_names(graph, fetches))
    specs = []
    for op in graph.get_operations():
        if op.type == "Placeholder" and op.name in needed:
            tensor = op.outputs[0]
            shape = tuple(tensor.shape.as_list()) if tensor.shape.rank is not None else None
            specs.append(PlaceholderSpec(op.name, np.dtype(tensor.dtype.as_numpy_dtype), shape))
    return specs


def random_feed_fn(
    placeholders: Sequence[PlaceholderSpec],
    *,
    shapes: Mapping[str, Sequence[int | str]] | None = None,
    int_high: int = 2,
    seed: int = 0,
) -> FeedFunction:
    """A feed function of random data for ``placeholders`` (see the module docstring).

    Parameters
    ----------
    placeholders : sequence of PlaceholderSpec
    shapes : mapping of str to sequence, optional
        Explicit shapes by placeholder name, each dimension an int or :data:`BATCH`.
    int_high : int
        Integers are drawn from ``[0, int_high)``.
    seed : int

    Raises
    ------
    FeedError
        A placeholder of unknown rank or with an unknown dimension besides the first and no
        explicit shape, an explicit shape for no needed placeholder or incompatible with the
        static shape, or a dtype random data cannot be made of (strings).
    """
    if int_high < 1:
        raise FeedError(f"integers are drawn from [0, int_high): int_high must be at least 1, got {int_high}")
    given = dict(shapes or {})
    unknown = sorted(set(given) - {p.name for p in placeholders})
    if unknown:
        names = ", ".join(p.name for p in placeholders) or "none"
        raise FeedError(f"shapes given for {unknown}, which the step does not feed; it feeds: {names}")
    layouts = {p.name: _layout(p, given.get(p.name)) for p in placeholders}

    def feed_fn(batch_size: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([seed, batch_size])
        feeds = {}
        for spec in placeholders:
            shape = tuple(batch_size if d == BATCH else int(d) for d in layouts[spec.name])
            feeds[f"{spec.name}:0"] = _random_array(rng, spec.dtype, shape, int_high)
        return feeds

    return feed_fn


def _layout(spec: PlaceholderSpec, explicit: Sequence[int | str] | None) -> tuple[int | str, ...]:
    """The shape of ``spec``'s data, :data:`BATCH` where the batch size goes."""
    if spec.dtype.kind not in "biuf":
        raise FeedError(
            f"placeholder {spec.name!r} has dtype {spec.dtype}, of which no random data can be made: "
            "give its values in an .npz file"
        )
    if explicit is not None:
        layout = tuple(d if d == BATCH else int(d) for d in explicit)
        static = spec.shape
        if static is not None and (
            len(static) != len(layout)
            or any(s is not None and d != BATCH and s != d for s, d in zip(static, layout))
        ):
            raise FeedError(
                f"shape {_shown(layout)} for {spec.name!r} does not fit its static shape {_shown(static)}"
            )
        return layout
    if spec.shape is None:
        raise FeedError(
            f"placeholder {spec.name!r} has an unknown rank: give its shape (like {spec.name}=B,20,5)"
        )
    if not spec.shape:
        return ()
    first, rest = spec.shape[0], spec.shape[1:]
    known = tuple(d for d in rest if d is not None)
    if len(known) < len(rest):
        example = ",".join([BATCH if first is None else str(first)] + [str(d or 20) for d in rest])
        raise FeedError(
            f"placeholder {spec.name!r} has shape {_shown(spec.shape)}, with an unknown dimension besides "
            f"the first: give its shape (like {spec.name}={example}, {BATCH} for the batch size)"
        )
    return (BATCH if first is None else first, *known)


def _shown(shape: Sequence[int | str | None]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _random_array(
    rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...], int_high: int
) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, int_high, shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def npz_feed_fn(placeholders: Sequence[PlaceholderSpec], path: str | os.PathLike[str]) -> FeedFunction:
    """A feed function taking each placeholder's data from the ``.npz`` file ``path``.

    Raises
    ------
    FeedError
        The file cannot be read, lacks a needed placeholder, has an array of another dtype kind
        (floats for an integer placeholder) or a shape the placeholder does not accept, or has an
        empty array for a batched placeholder.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key.removesuffix(":0"): archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise FeedError(f"{path}: not a readable .npz file ({error})") from None
    missing = [p.name for p in placeholders if p.name not in arrays]
    if missing:
        raise FeedError(f"{path} has no array for placeholders {missing}; it has {sorted(arrays)}")
    for spec in placeholders:
        _check_array(spec, arrays[spec.name], path)

    def feed_fn(batch_size: int) -> dict[str, np.ndarray]:
        feeds = {}
        for spec in placeholders:
            array = arrays[spec.name]
            if spec.batched:
                rows = np.arange(batch_size) % len(array)
                array = array[rows]
            feeds[f"{spec.name}:0"] = array.astype(spec.dtype, copy=False)
        return feeds

    return feed_fn


def _check_array(spec: PlaceholderSpec, array: np.ndarray, path: str | os.PathLike[str]) -> None:
    if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
        raise FeedError(
            f"{path}: array {spec.name!r} has dtype {array.dtype}; the placeholder takes {spec.dtype}"
        )
    if spec.shape is None:
        return
    if array.ndim != len(spec.shape) or any(
        s is not None and s != a for s, a in zip(spec.shape, array.shape)
    ):
        raise FeedError(
            f"{path}: array {spec.name!r} has shape {_shown(array.shape)}; the placeholder takes {_shown(spec.shape)}"
        )
    if spec.batched and len(array) == 0:
        raise FeedError(f"{path}: array {spec.name!r} has no rows to make a batch of")
