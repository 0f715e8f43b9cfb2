"""Forward/backward co-placement: every gradient op joins the co-location group of its forward op.

TensorFlow's ``colocate_gradients_with_ops=True`` puts each gradient op on its forward op's device;
Baechi and Tofu's coarsening do the same, and a training step split in topological order without it
ships a layer's activations to the device of its backward pass. The cost graph's ``gradient_of``
relation (:mod:`tfplace.core.gradients`) says which ops belong together; here it becomes hard
co-location groups, merged transitively with TensorFlow's own. A merge that would leave a group
without a device kind able to run all of its ops (a CPU-only op and a GPU-only op) is skipped: the
relation is a preference, TensorFlow's constraints are not.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["coplaced_group_keys"]


def coplaced_group_keys(
    keys: Sequence[str | None],
    gradient_of: Sequence[int | None],
    kinds: Sequence[tuple[str, ...] | None],
) -> list[str | None]:
    """Co-location group keys of ops ``0..n-1`` after joining each gradient op to its forward op.

    ``keys[i]`` is op ``i``'s group (``None``: unconstrained), ``gradient_of[i]`` the position of
    the forward op it differentiates (``None``: none), ``kinds[i]`` the device kinds it can run on
    (``None``: any). Ops keep their group when no relation touches it; a merged group is keyed
    ``"coplaced:<smallest member position>"``. Pure: a graph without relations gets ``keys`` back.
    """
    n = len(keys)
    if all(forward is None for forward in gradient_of):
        return list(keys)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    allowed = [None if k is None else frozenset(k) for k in kinds]
    first_of_key: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key is not None:
            j = first_of_key.setdefault(key, i)
            if j != i:
                _union(parent, allowed, root(j), root(i))
    for gradient, forward in enumerate(gradient_of):
        if forward is None:
            continue
        a, b = root(gradient), root(forward)
        if a != b and _compatible(allowed[a], allowed[b]):
            _union(parent, allowed, a, b)
    roots = [root(i) for i in range(n)]
    touched = {roots[g] for g, f in enumerate(gradient_of) if f is not None}
    smallest: dict[int, int] = {}
    for i, r in enumerate(roots):
        smallest.setdefault(r, i)
    return [f"coplaced:{smallest[r]}" if r in touched else key for r, key in zip(roots, keys)]


def _compatible(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    return a is None or b is None or bool(a & b)


def _union(parent: list[int], allowed: list[frozenset[str] | None], a: int, b: int) -> None:
    """Join the sets rooted at ``a`` and ``b`` under ``a``; their allowed kinds intersect."""
    parent[b] = a
    kinds_a, kinds_b = allowed[a], allowed[b]
    allowed[a] = kinds_b if kinds_a is None else kinds_a if kinds_b is None else kinds_a & kinds_b
