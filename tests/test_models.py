"""The benchmark model builders build trainable graph-mode training graphs that any batch size can feed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tf_keras.src import backend as keras_backend

import models.nmt
from helpers import SMALL_MODELS
from models import MODELS, build_model
from models.common import ModelSpec, parameter_count, train_step_ops

pytestmark = pytest.mark.tensorflow

REPOSITORY = Path(__file__).resolve().parents[1]

SMALL = SMALL_MODELS

#: Variables whose first gradients are below float32 resolution of their values under the NMT models'
#: plain SGD (the attention sees nearly uniform encoder states at initialization), so a step may
#: leave them unchanged. Adam and RMSProp scale every nonzero gradient to a visible step.
SGD_STARVED = {
    "nmt": {"gnmt/attention/key_kernel", "gnmt/attention/query_kernel"},
    "nmt_while": {"gnmt/attention/key_kernel", "gnmt/attention/query_kernel"},
}

CONTROL_FLOW_V1_OPS = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}
WHILE_OPS = {"While", "StatelessWhile"}


@pytest.fixture(scope="module", params=sorted(SMALL))
def small_spec(request: pytest.FixtureRequest) -> ModelSpec:
    return build_model(request.param, **SMALL[request.param])


def _variables(spec: ModelSpec) -> list[tf.Variable]:
    with spec.graph.as_default():
        return tf.compat.v1.trainable_variables()


def _op_types(spec: ModelSpec) -> set[str]:
    return {op.type for op in spec.graph.get_operations()}


@pytest.fixture
def restore_control_flow_v2() -> Iterator[None]:
    """Fail a test that leaves TensorFlow's global control-flow switch changed (and repair it)."""
    before = tf.compat.v1.control_flow_v2_enabled()
    yield
    after = tf.compat.v1.control_flow_v2_enabled()
    if after != before:
        (tf.compat.v1.enable_control_flow_v2 if before else tf.compat.v1.disable_control_flow_v2)()
    assert after == before, "the control-flow v2 switch was not restored"


def test_every_registered_model_has_a_small_variant_under_test() -> None:
    assert set(SMALL) == set(MODELS)


def test_a_training_step_lowers_the_loss_and_changes_every_variable(small_spec: ModelSpec) -> None:
    """One step, not more: Inception's RMSProp (learning rate 0.045, momentum 0.9) with batch norm
    over a batch of 2 makes the loss after the second step depend on float rounding (0.001 or 4.8
    depending on the process's thread pools), while the first step lowers it in every setting."""
    spec = small_spec
    variables = _variables(spec)
    feed = spec.feed_fn(2)
    with tf.compat.v1.Session(graph=spec.graph) as session:
        session.run(spec.init_op)
        before_values = session.run(variables)
        loss_before = session.run(spec.loss, feed)
        session.run(spec.train_op, feed)
        loss_after = session.run(spec.loss, feed)
        after_values = session.run(variables)
        loss_other_batch = session.run(spec.loss, spec.feed_fn(3))
    assert np.isfinite([loss_before, loss_after, loss_other_batch]).all()
    assert loss_after < loss_before
    unchanged = {
        var.op.name
        for var, old, new in zip(variables, before_values, after_values)
        if np.array_equal(old, new)
    }
    assert unchanged <= SGD_STARVED.get(spec.name, set())


@pytest.mark.parametrize("batch_size", [2, 5])
def test_feed_fn_feeds_every_placeholder_with_its_shape_and_dtype(
    small_spec: ModelSpec, batch_size: int
) -> None:
    spec = small_spec
    placeholders = [op.outputs[0] for op in spec.graph.get_operations() if op.type == "Placeholder"]
    feed = spec.feed_fn(batch_size)
    assert set(feed) == {tensor.name for tensor in placeholders}
    for tensor in placeholders:
        assert tensor.shape[0] is None
        assert feed[tensor.name].shape == (batch_size, *tensor.shape[1:])
        assert feed[tensor.name].dtype == tensor.dtype.as_numpy_dtype


def test_feed_fn_is_deterministic_per_batch_size(small_spec: ModelSpec) -> None:
    first, again = small_spec.feed_fn(3), small_spec.feed_fn(3)
    assert all(np.array_equal(first[name], again[name]) for name in first)


def test_integer_inputs_are_valid_class_and_token_ids() -> None:
    spec = build_model("nmt", **SMALL["nmt"])
    feed = spec.feed_fn(64)
    for name in ("source:0", "target_in:0", "target_out:0"):
        assert feed[name].min() >= 0
        assert feed[name].max() < SMALL["nmt"]["vocab_size"]


def test_train_step_closure_holds_the_step_and_not_the_initializer(small_spec: ModelSpec) -> None:
    step = train_step_ops(small_spec)
    placeholders = {op.name for op in small_spec.graph.get_operations() if op.type == "Placeholder"}
    assert small_spec.train_op in step
    assert placeholders <= step
    assert small_spec.init_op not in step
    assert len(step) < len(small_spec.graph.get_operations())


def test_knobs_record_the_sizes_the_graph_was_built_with(small_spec: ModelSpec) -> None:
    for knob, value in SMALL[small_spec.name].items():
        assert small_spec.knobs[knob] == value


def test_rebuilding_gives_the_same_op_names() -> None:
    first = build_model("tensor_holography", **SMALL["tensor_holography"])
    second = build_model("tensor_holography", **SMALL["tensor_holography"])
    assert [op.name for op in first.graph.get_operations()] == [
        op.name for op in second.graph.get_operations()
    ]


def test_rebuilding_inception_gives_the_same_initial_weights_and_leaves_keras_seeding_alone() -> None:
    def first_kernel(spec: ModelSpec) -> np.ndarray:
        with tf.compat.v1.Session(graph=spec.graph) as session:
            session.run(spec.init_op)
            return session.run(_variables(spec)[0])

    seeds_before = getattr(keras_backend._SEED_GENERATOR, "generator", None)
    first = build_model("inception_v3", **SMALL["inception_v3"])
    assert getattr(keras_backend._SEED_GENERATOR, "generator", None) is seeds_before
    second = build_model("inception_v3", **SMALL["inception_v3"])
    np.testing.assert_array_equal(first_kernel(first), first_kernel(second))


def test_holography_parameter_count_matches_its_layers() -> None:
    spec = build_model("tensor_holography", image_size=8, conv_layers=4, filters=3)
    conv_0 = 3 * 3 * 4 * 3 + 2 * 3  # RGB-D to 3 filters, no bias, batch-norm gain and offset
    block = 2 * (3 * 3 * 3 * 3 + 2 * 3)  # two 3-to-3 convolutions with batch norm
    output = 3 * 3 * 3 * 6 + 6  # 3 filters to amplitude and phase, with bias
    assert parameter_count(spec) == conv_0 + block + output


@pytest.mark.parametrize("layers", [1, 2])
def test_nmt_with_fewer_layers_than_the_residual_ones_trains(layers: int) -> None:
    spec = build_model("nmt", **{**SMALL["nmt"], "layers": layers})
    feed = spec.feed_fn(2)
    with tf.compat.v1.Session(graph=spec.graph) as session:
        session.run(spec.init_op)
        loss_before, _ = session.run([spec.loss, spec.train_op], feed)
        loss_after = session.run(spec.loss, feed)
    assert np.isfinite(loss_after) and loss_after < loss_before


BUILD_SMALL_NMT_WHILE = (
    "import models; "
    "spec = models.build_model('nmt_while', units=4, layers=1, source_length=2, target_length=2, vocab_size=5); "
    "print(spec.train_op)"
)


def _run_python(code: str, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter at the repository root (the import order matters here)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


def test_nmt_while_builds_when_tensorflow_was_imported_before_models() -> None:
    environment = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
    result = _run_python("import tensorflow; " + BUILD_SMALL_NMT_WHILE, environment)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("train_op")


def test_nmt_explains_that_it_needs_legacy_keras_when_it_is_switched_off() -> None:
    result = _run_python(BUILD_SMALL_NMT_WHILE, {**os.environ, "TF_USE_LEGACY_KERAS": "0"})
    assert result.returncode != 0
    assert "TF_USE_LEGACY_KERAS=1" in result.stderr


def test_unrolled_nmt_has_ops_per_time_step_and_no_loop() -> None:
    short = build_model("nmt", **{**SMALL["nmt"], "target_length": 3})
    long = build_model("nmt", **{**SMALL["nmt"], "target_length": 4})
    assert len(long.graph.get_operations()) > len(short.graph.get_operations())
    assert not _op_types(long) & (WHILE_OPS | CONTROL_FLOW_V1_OPS)


def test_nmt_while_builds_functional_while_ops_by_default(restore_control_flow_v2: None) -> None:
    spec = build_model("nmt_while", **SMALL["nmt_while"])
    assert _op_types(spec) & WHILE_OPS
    assert not _op_types(spec) & CONTROL_FLOW_V1_OPS


def test_nmt_while_can_build_legacy_frames_and_trains(restore_control_flow_v2: None) -> None:
    spec = build_model("nmt_while", control_flow_v1=True, **SMALL["nmt_while"])
    assert _op_types(spec) >= CONTROL_FLOW_V1_OPS
    assert not _op_types(spec) & WHILE_OPS
    assert spec.knobs["control_flow_v1"] is True
    feed = spec.feed_fn(2)
    with tf.compat.v1.Session(graph=spec.graph) as session:
        session.run(spec.init_op)
        loss_before, _ = session.run([spec.loss, spec.train_op], feed)
        loss_after = session.run(spec.loss, feed)
    assert np.isfinite(loss_after) and loss_after < loss_before


def test_control_flow_switch_is_restored_when_building_fails(
    monkeypatch: pytest.MonkeyPatch, restore_control_flow_v2: None
) -> None:
    def failing_build(*args: Any, **kwargs: Any) -> ModelSpec:
        raise RuntimeError("build failed")

    monkeypatch.setattr(models.nmt, "_build_gnmt", failing_build)
    with pytest.raises(RuntimeError, match="build failed"):
        build_model("nmt_while", control_flow_v1=True, **SMALL["nmt_while"])


def test_unrolled_and_while_nmt_train_identically(restore_control_flow_v2: None) -> None:
    """The three NMT graphs are one network: same weights and data give the same losses."""
    reference = build_model("nmt", **SMALL["nmt"])
    feed = reference.feed_fn(2)
    with tf.compat.v1.Session(graph=reference.graph) as session:
        session.run(reference.init_op)
        weights = {var.op.name: session.run(var) for var in _variables(reference)}
        expected = [session.run([reference.loss, reference.train_op], feed)[0] for _ in range(2)]
    for spec in (
        build_model("nmt_while", **SMALL["nmt_while"]),
        build_model("nmt_while", control_flow_v1=True, **SMALL["nmt_while"]),
    ):
        with tf.compat.v1.Session(graph=spec.graph) as session:
            session.run(spec.init_op)
            variables = _variables(spec)
            assert sorted(var.op.name for var in variables) == sorted(weights)
            for var in variables:
                var.load(weights[var.op.name], session)
            losses = [session.run([spec.loss, spec.train_op], feed)[0] for _ in range(2)]
        np.testing.assert_allclose(losses, expected, rtol=1e-5)


def test_transformer_dropout_adds_random_ops_to_the_step_only_when_enabled() -> None:
    def step_op_types(spec: ModelSpec) -> set[str]:
        return {spec.graph.get_operation_by_name(name).type for name in train_step_ops(spec)}

    with_dropout = build_model("transformer", **{**SMALL["transformer"], "dropout": 0.1})
    assert "RandomUniform" in step_op_types(with_dropout)
    assert "RandomUniform" not in step_op_types(build_model("transformer", **SMALL["transformer"]))


@pytest.mark.parametrize(
    ("name", "knobs", "message"),
    [
        ("nmt", {"units": 0}, "units=0"),
        ("transformer", {"heads": 3, "d_model": 8}, "heads .3. must divide d_model .8."),
        ("transformer", {"dropout": 1.0}, "dropout"),
        ("tensor_holography", {"conv_layers": 5}, "conv_layers must be even"),
        ("inception_v3", {"image_size": 32}, "at least 75"),
    ],
)
def test_invalid_size_knobs_are_rejected_by_name(name: str, knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(name, **knobs)


def test_unknown_model_error_lists_the_known_models() -> None:
    with pytest.raises(ValueError, match=r"inception_v3.*tensor_holography"):
        build_model("resnet")


def test_unknown_knob_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="colour"):
        build_model("tensor_holography", colour=3)


def test_feed_fn_rejects_a_non_positive_batch_size() -> None:
    spec = build_model("tensor_holography", **SMALL["tensor_holography"])
    with pytest.raises(ValueError, match="batch_size=0"):
        spec.feed_fn(0)
