"""The scheduler's accounting of TensorFlow's threads: read from /proc, differences between readings."""

from pathlib import Path

import numpy as np
import pytest

from tfplace.estimator.thread_accounting import (
    ThreadTimes,
    named_threads,
    preemptions_between,
    tensorflow_threads,
)


def fake_task(tasks: Path, tid: int, name: str, schedstat: str, preemptions: int) -> None:
    task = tasks / str(tid)
    task.mkdir(parents=True)
    (task / "comm").write_text(name + "\n")
    (task / "schedstat").write_text(schedstat + "\n")
    (task / "status").write_text(
        f"Name:\t{name}\nvoluntary_ctxt_switches:\t40\nnonvoluntary_ctxt_switches:\t{preemptions}\n"
    )


def test_only_tensorflows_threads_are_read_with_their_nanoseconds_and_preemptions(tmp_path):
    fake_task(tmp_path, 11, "python", "5 6 7", 1)
    fake_task(tmp_path, 12, "tf_Compute", "166360000 303440000 56", 53)
    assert tensorflow_threads(tmp_path) == {12: ThreadTimes(166360000, 53)}


def test_every_thread_is_read_with_its_name_where_all_threads_are_asked_for(tmp_path):
    fake_task(tmp_path, 11, "python", "5 6 7", 1)
    fake_task(tmp_path, 12, "event_engine", "900 0 3", 2)
    assert named_threads(tmp_path) == {
        11: ("python", ThreadTimes(5, 1)),
        12: ("event_engine", ThreadTimes(900, 2)),
    }


def test_without_proc_no_thread_is_read(tmp_path):
    assert tensorflow_threads(tmp_path / "missing") == {}


def test_a_step_counts_the_preemptions_of_the_threads_that_ran_in_it():
    before = {1: ThreadTimes(100, 3), 2: ThreadTimes(50, 0), 3: ThreadTimes(10, 1)}
    after = {
        1: ThreadTimes(4_000_100, 5),  # ran, preempted twice
        2: ThreadTimes(50, 1),  # did not run
        4: ThreadTimes(9, 9),  # started in between
    }
    assert preemptions_between(before, after) == 2


@pytest.mark.tensorflow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_the_ops_of_a_one_thread_session_run_on_a_tensorflow_thread_the_accounting_sees():
    import tensorflow as tf

    from tfplace.estimator.profiler import profiling_config

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [64, 64])
        y = tf.reduce_sum(tf.matmul(x, x))
    with tf.compat.v1.Session(graph=graph, config=profiling_config()) as session:
        feed = {x: np.ones((64, 64), np.float32)}
        session.run(y, feed_dict=feed)
        before = tensorflow_threads()
        session.run(y, feed_dict=feed)
        after = tensorflow_threads()
    ran = [tid for tid in after if tid in before and after[tid].running_ns > before[tid].running_ns]
    assert ran
    assert all(after[tid].preemptions >= before[tid].preemptions for tid in ran)
