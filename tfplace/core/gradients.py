"""Which forward op a gradient op differentiates, from TensorFlow's op names.

``tf.gradients`` (and ``Optimizer.compute_gradients``) builds the backward pass inside a name scope
``gradients`` (``gradients_1``, ``gradients_2``, ... for later calls; under the caller's own scope,
when there is one), and each op's gradient function inside ``<forward op name>_grad``. So
``gradients/a/b/conv_grad/Conv2DBackpropInput`` differentiates ``a/b/conv``, also when the ``_grad``
op is further nested (``.../conv_grad/tuple/control_dependency``), belongs to a while loop's
gradient (``gradients/rnn/while/MatMul_grad/MatMul`` differentiates ``rnn/while/MatMul``) or to a
second derivative (``gradients_1/gradients/x_grad/Mul_grad/Mul`` differentiates
``gradients/x_grad/Mul``). Ops directly in the gradient scope (``gradients/AddN``,
``gradients/Fill``, ``gradients/Shape``, ``gradients/grad_ys_0``) sum or seed gradients of
several ops and differentiate none.

A name is ambiguous when several of its ``_grad`` components name an op of the graph (the forward
op ``x`` and the forward op ``x_grad/y``); the deepest one wins, as TensorFlow opens a gradient
function's scope directly under the op's name. The functions here are pure and need no TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping

__all__ = ["GRADIENT_SCOPE", "forward_op_of", "gradient_relation", "is_gradient_scope"]

#: A name scope ``tf.gradients`` opens: ``gradients`` or ``gradients_<N>``.
GRADIENT_SCOPE = re.compile(r"gradients(_\d+)?")

_GRAD_SUFFIX = "_grad"


def is_gradient_scope(component: str) -> bool:
    """Whether one component of an op name is a scope ``tf.gradients`` opened."""
    return GRADIENT_SCOPE.fullmatch(component) is not None


def forward_op_of(name: str, is_op: Callable[[str], bool]) -> str | None:
    """The forward op that the op ``name`` belongs to the gradient of, or ``None``.

    ``is_op`` tells whether a name is an op of the graph. The first component that is a gradient
    scope starts the backward pass; after it, a component ``<c>_grad`` at depth ``k`` names the
    candidate ``<scope>/<components before it>/<c>`` (``<scope>`` being what precedes the gradient
    scope, which ``tf.gradients`` inherits from its caller). The deepest candidate that is an op
    wins; ``None`` when the op is outside a gradient scope or no candidate is an op.

    >>> ops = {"a/b/conv", "x_grad/y", "x"}
    >>> forward_op_of("gradients/a/b/conv_grad/Conv2DBackpropInput", ops.__contains__)
    'a/b/conv'
    >>> forward_op_of("gradients_3/x_grad/y_grad/Mul", ops.__contains__)
    'x_grad/y'
    >>> forward_op_of("gradients/AddN", ops.__contains__) is None
    True
    """
    components = name.split("/")
    start = next((i for i, c in enumerate(components[:-1]) if is_gradient_scope(c)), None)
    if start is None:
        return None
    outer = components[:start]
    inner = components[start + 1 : -1]  # the op's own last component opens no scope
    for depth in range(len(inner) - 1, -1, -1):
        component = inner[depth]
        if component.endswith(_GRAD_SUFFIX) and len(component) > len(_GRAD_SUFFIX):
            candidate = "/".join([*outer, *inner[:depth], component[: -len(_GRAD_SUFFIX)]])
            if candidate != name and is_op(candidate):
                return candidate
    return None


def gradient_relation(
    names: Iterable[str], colocated_with: Mapping[str, Collection[str]] | None = None
) -> dict[str, str]:
    """Gradient op -> the forward op it differentiates, for every gradient op of a graph.

    ``names`` are all op names of the graph. The relation comes from the name scopes
    (:func:`forward_op_of`); ``colocated_with`` (op -> the ops its ``_class`` names, as TensorFlow
    writes them when gradients were built with ``colocate_gradients_with_ops=True``) settles the
    ops the names leave open: an op in a gradient scope whose ``_class`` names exactly one op outside
    every gradient scope differentiates that op (``gradients/AddN_3`` summing the gradients of a
    layer's output, colocated with the layer). An op never differentiates itself.
    """
    all_names = list(names)
    known = set(all_names)
    relation: dict[str, str] = {}
    for name in all_names:
        forward = forward_op_of(name, known.__contains__)
        if forward is None and colocated_with and _in_gradient_scope(name):
            forward = _forward_by_class(name, colocated_with.get(name, ()), known)
        if forward is not None:
            relation[name] = forward
    return relation


def _in_gradient_scope(name: str) -> bool:
    return any(is_gradient_scope(component) for component in name.split("/")[:-1])


def _forward_by_class(name: str, targets: Collection[str], known: set[str]) -> str | None:
    forward = {t for t in targets if t != name and t in known and not _in_gradient_scope(t)}
    return forward.pop() if len(forward) == 1 else None
