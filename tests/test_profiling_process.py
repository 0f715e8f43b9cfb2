"""Where the profiler's sessions run: a worker of their own under the BFC allocator, or this process."""

import numpy as np
import pytest

from tfplace.estimator.profiler import profile_graph, profiling_config
from tfplace.estimator.profiling_process import (
    WORKER_ENVIRONMENT,
    profiling_process_for,
    profiling_session,
)
from tfplace.estimator.thread_accounting import OWN_TASKS


def test_a_step_that_calls_back_into_python_is_profiled_in_this_process():
    assert profiling_process_for(["MatMul", "PyFunc", "NoOp"], "worker") == "this"
    assert profiling_process_for(["MatMul", "EagerPyFunc"], "worker") == "this"
    assert profiling_process_for(["MatMul", "Relu"], "worker") == "worker"
    assert profiling_process_for(["MatMul"], "this") == "this"


def test_a_machine_with_gpus_profiles_in_this_process_whose_gpu_allocator_is_bfc_already():
    assert profiling_process_for(["MatMul", "Relu"], "worker", gpus=True) == "this"


def test_an_unknown_profiling_process_is_refused_by_name():
    with pytest.raises(ValueError, match="'elsewhere'"):
        profiling_process_for(["MatMul"], "elsewhere")  # type: ignore[arg-type]


def _dense_step():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        weights = tf.compat.v1.get_variable("w", [4, 3])
        loss = tf.reduce_sum(tf.matmul(x, weights), name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    return graph, train


@pytest.mark.tensorflow
def test_the_worker_session_runs_the_graph_in_another_process_under_the_bfc_allocator():
    import tensorflow as tf

    graph, train = _dense_step()
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    with profiling_session(graph, profiling_config(), "worker") as (session, tasks):
        session.run(init)
        session.run(train, {"x:0": np.ones((2, 4), np.float32)})
        assert tasks != OWN_TASKS and tasks.is_dir()
        environment = (tasks.parent / "environ").read_bytes().split(b"\0")
        for name, value in WORKER_ENVIRONMENT.items():
            assert f"{name}={value}".encode() in environment
    assert not tasks.exists()  # the worker is gone with the block


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_a_worker_profile_counts_fed_placeholders_as_the_fed_arrays_not_as_estimates():
    graph, train = _dense_step()

    def feeds(batch: int):
        return {"x:0": np.ones((batch, 4), np.float32)}

    profile = profile_graph(graph, train, feeds, batch_sizes=(1, 2), warmup_steps=1, traced_steps=3)
    assert profile.estimated_ops == ()
    assert profile.costs[2]["x"].output_sizes == (2 * 4 * 4,)
    assert profile.costs[1]["x"].output_sizes == (1 * 4 * 4,)
    assert profile.costs[2]["MatMul"].output_sizes == (2 * 3 * 4,)  # requested, not BFC's 256
    assert all(device.startswith("/job:worker") for device in profile.devices.values())
