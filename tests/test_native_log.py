"""TensorFlow's runtime lines that mean nothing to a user stay off standard error; every other line reaches it."""

import os
import subprocess
import sys

import pytest

from tfplace.tf_graph.native_log import filtered_native_stderr


def test_the_gpu_trace_line_is_dropped_and_every_other_native_line_is_written_back(capfd):
    with filtered_native_stderr():
        os.write(2, b"W0000 00:00:1.2 1 xplane_to_step_stats.cc:84] GPU trace was not collected.\n")
        os.write(2, b"E0000 00:00:1.3 1 some_kernel.cc:12] a real error\n")

    assert capfd.readouterr().err == "E0000 00:00:1.3 1 some_kernel.cc:12] a real error\n"


def test_lines_are_written_back_also_when_the_call_fails(capfd):
    with pytest.raises(RuntimeError), filtered_native_stderr():
        os.write(2, b"E0000 kernel.cc:1] what went wrong\n")
        raise RuntimeError("step failed")

    assert capfd.readouterr().err == "E0000 kernel.cc:1] what went wrong\n"


@pytest.mark.profiles
@pytest.mark.tensorflow
def test_profiling_with_traced_steps_prints_none_of_the_runtime_lines_of_a_traced_step(tmp_path):
    script = """
import numpy as np, tensorflow as tf
from tfplace.estimator.profiler import profile_graph
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    w = tf.compat.v1.get_variable("w", [4, 2])
    loss = tf.reduce_mean(tf.matmul(x, w))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
profile_graph(graph, train, lambda b: {"x": np.ones((b, 4), np.float32)}, [1, 2], warmup_steps=0, traced_steps=2)
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "TFPLACE_QUIET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )

    assert done.returncode == 0, done.stderr
    assert "GPU trace was not collected" not in done.stderr and "Profiler session" not in done.stderr
