"""Which forward op a gradient op differentiates, read from TensorFlow's op names (no TensorFlow)."""

from __future__ import annotations

import pytest

from tfplace.core.gradients import forward_op_of, gradient_relation, is_gradient_scope

FORWARD_OPS = {
    "conv",
    "a/b/conv",
    "x",
    "x_grad",
    "x_grad/y",
    "rnn/while/MatMul",
    "gradients/x_grad/Mul",
    "train/dense/MatMul",
    "Mean",
}


@pytest.mark.parametrize(
    ("name", "forward"),
    [
        ("gradients/conv_grad/Conv2DBackpropInput", "conv"),
        ("gradients/a/b/conv_grad/Conv2DBackpropInput", "a/b/conv"),
        ("gradients/a/b/conv_grad/tuple/control_dependency", "a/b/conv"),
        ("gradients/a/b/conv_grad/tuple/group_deps", "a/b/conv"),
        ("gradients_1/a/b/conv_grad/Conv2DBackpropFilter", "a/b/conv"),
        ("gradients_12/conv_grad/Shape", "conv"),
        ("gradients/x_grad_grad/Neg", "x_grad"),
        ("gradients/x_grad/Neg", "x"),
        ("gradients/x_grad/y_grad/Mul", "x_grad/y"),
        ("gradients/rnn/while/MatMul_grad/MatMul_1", "rnn/while/MatMul"),
        ("gradients_1/gradients/x_grad/Mul_grad/Mul", "gradients/x_grad/Mul"),
        ("train/gradients/dense/MatMul_grad/MatMul", "train/dense/MatMul"),
        ("gradients/Mean_grad/Tile", "Mean"),
    ],
)
def test_a_gradient_op_differentiates_the_forward_op_its_grad_scope_names(name, forward):
    assert forward_op_of(name, FORWARD_OPS.__contains__) == forward


@pytest.mark.parametrize(
    "name",
    [
        "gradients/AddN",
        "gradients/AddN_3",
        "gradients/Fill",
        "gradients/Shape",
        "gradients/grad_ys_0",
        "gradients/grad_ys_0/Const",
        "gradients/missing_grad/Mul",  # names no op of the graph
        "gradients/_grad/Mul",  # an empty op name is no op
        "conv_grad/Mul",  # outside any gradient scope
        "a/b/conv",
        "gradients",
        "gradients_x/conv_grad/Mul",  # not a scope tf.gradients opens
    ],
)
def test_ops_that_differentiate_no_single_op_have_no_forward_op(name):
    assert forward_op_of(name, FORWARD_OPS.__contains__) is None


def test_only_the_scopes_tf_gradients_opens_are_gradient_scopes():
    assert [
        is_gradient_scope(c) for c in ("gradients", "gradients_3", "gradients_", "grads", "my_gradients")
    ] == [
        True,
        True,
        False,
        False,
        False,
    ]


def test_the_relation_covers_every_gradient_op_and_no_forward_op():
    names = [
        "a/conv",
        "a/relu",
        "gradients/a/relu_grad/ReluGrad",
        "gradients/a/conv_grad/Conv2DBackpropFilter",
    ]
    names += ["gradients/AddN", "train/update_a/kernel/ResourceApplyAdam"]
    assert gradient_relation(names) == {
        "gradients/a/relu_grad/ReluGrad": "a/relu",
        "gradients/a/conv_grad/Conv2DBackpropFilter": "a/conv",
    }


def test_the_class_written_by_colocate_gradients_with_ops_settles_ops_the_names_leave_open():
    names = [
        "a/relu",
        "b/relu",
        "gradients/AddN",
        "gradients/AddN_1",
        "gradients/Fill",
        "gradients/a/relu_grad/g",
    ]
    colocated = {
        "gradients/AddN": ["a/relu"],  # sums gradients of a/relu's output, colocated with it
        "gradients/AddN_1": ["a/relu", "b/relu"],  # two candidates: undecided
        "gradients/Fill": ["gradients/a/relu_grad/g"],  # another gradient op: no forward op
        "gradients/a/relu_grad/g": ["b/relu"],  # the name decides first
    }
    assert gradient_relation(names, colocated) == {
        "gradients/AddN": "a/relu",
        "gradients/a/relu_grad/g": "a/relu",
    }


def test_graphs_without_gradient_scopes_have_an_empty_relation():
    assert gradient_relation(["input", "conv", "conv_grad", "x_grad/y", "softmax"]) == {}
