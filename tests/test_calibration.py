"""Transfer calibration between TensorFlow devices and the loopback worker cluster."""

import math
import os
import socket

import pytest

from tfplace.core.device_model import FeedCost
from tfplace.estimator.calibration import (
    DEFAULT_SPLIT,
    WIDE_SPLIT,
    CopyCpu,
    SplitShape,
    calibrate_copy_cpu,
    calibrate_transfer,
    copy_cpu_line,
    split_probe,
)
from tfplace.estimator.feed_calibration import FeedSample, fit_feed_cost, time_feeds
from tfplace.tf_graph.cluster import LocalCluster

SMALL_SIZES = (2**10, 2**16, 2**20)


def is_running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def accepts(port):
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("localhost", port)) == 0


def assert_usable(model):
    assert math.isfinite(model.k) and model.k >= 0
    assert math.isfinite(model.b) and model.b >= 0


@pytest.mark.tensorflow
def test_calibration_between_two_virtual_cpus_gives_a_finite_non_negative_model():
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    model = calibrate_transfer("/device:CPU:0", "/device:CPU:1", config=config, sizes=SMALL_SIZES, repeats=3)
    assert_usable(model)
    assert model.name == "/device:CPU:0 -> /device:CPU:1"


@pytest.mark.tensorflow
def test_calibration_rejects_transfers_smaller_than_one_float():
    with pytest.raises(ValueError, match=r"at least 4 bytes.*\[2\]"):
        calibrate_transfer("/device:CPU:0", "/device:CPU:0", sizes=(2, 1024))


@pytest.mark.tensorflow
def test_the_split_training_step_computes_its_gradients_on_the_other_device_and_nothing_else_moves():
    import tensorflow as tf

    from tfplace.estimator.calibration import _split_training_steps

    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:CPU:1"):
            anchor = tf.constant(0.0)
        [(same, crossing), (wide_same, wide_crossing)] = _split_training_steps(
            "/device:CPU:0", "/device:CPU:1", [SplitShape(2, 8, 4), SplitShape(2, 16, 4)]
        )(anchor)

    def placed(op):
        """An op's device, or where TensorFlow places one without (an initializer or an update
        with the variable it is colocated with, a variable's read with the variable)."""
        if op.device:
            return op.device
        [group] = op.colocation_groups()
        if group != f"loc:@{op.name}".encode():
            return placed(graph.get_operation_by_name(group[len(b"loc:@") :].decode()))
        return placed(op.inputs[0].op)

    def devices(scope, gradients):
        return {
            placed(op)
            for op in graph.get_operations()
            if op.name.startswith(scope + "/") and ("/gradients/" in op.name) == gradients
        }

    for index in (0, 1):  # each shape's step of its own
        assert (
            devices(f"one_device_{index}", True) == devices(f"one_device_{index}", False) == {"/device:CPU:0"}
        )
        assert devices(f"split_{index}", True) == {"/device:CPU:1"}
        assert devices(f"split_{index}", False) == {"/device:CPU:0"}  # the forward pass and the updates
    assert same[1] is crossing[1] is wide_same[1] is wide_crossing[1] is anchor
    assert same[0] is not wide_same[0] and crossing[0] is not wide_crossing[0]


@pytest.mark.parametrize("shape", [SplitShape(layers=0), SplitShape(width=0), SplitShape(rows=0)])
def test_a_split_training_step_needs_a_layer_a_unit_and_a_row(shape):
    from tfplace.estimator.calibration import _split_training_steps

    with pytest.raises(ValueError, match="at least one layer, unit and row"):
        _split_training_steps("/device:CPU:0", "/device:CPU:1", [DEFAULT_SPLIT, shape])


def test_a_tensors_cpu_per_byte_and_fixed_part_are_the_line_through_two_split_steps():
    # session 34: 66 us per tensor at 16.5 KB on average, 266 us at 397 KB
    copy = copy_cpu_line((16.5e3, 66e-6), (397e3, 266e-6))
    assert copy.copy_k == pytest.approx(200e-6 / 380.5e3)
    assert copy.copy_b == pytest.approx(66e-6 - copy.copy_k * 16.5e3)


def test_a_wide_split_that_reads_less_costs_nothing_per_byte_and_no_part_is_negative():
    assert copy_cpu_line((16.5e3, 66e-6), (397e3, 60e-6)) == CopyCpu(0.0, 66e-6)
    assert copy_cpu_line((16.5e3, 1e-6), (397e3, 266e-6)).copy_b == 0.0


def test_the_line_needs_the_wide_splits_tensors_larger():
    with pytest.raises(ValueError, match="must be larger"):
        copy_cpu_line((397e3, 266e-6), (16.5e3, 66e-6))


@pytest.mark.tensorflow
def test_a_split_probe_between_devices_of_one_process_names_why_no_tensor_crossed():
    from tfplace.estimator.calibration import profiled_run_config

    probe = split_probe(
        "/device:CPU:0", "/device:CPU:1", [os.getpid()], config=profiled_run_config(2), warmup_steps=1
    )
    with pytest.raises(RuntimeError, match="no tensor crossed from /device:CPU:0 to /device:CPU:1"), probe:
        pass


@pytest.mark.tensorflow
@pytest.mark.slow
def test_loopback_workers_carry_a_calibrated_transfer_and_leave_no_process_or_port_behind():
    with LocalCluster(2) as cluster:
        pids, ports = cluster.pids, list(cluster.ports)
        assert cluster.target == f"grpc://localhost:{ports[0]}"
        assert cluster.cluster_spec == {"worker": [f"localhost:{port}" for port in ports]}
        model = calibrate_transfer(
            cluster.device(0), cluster.device(1), target=cluster.target, sizes=SMALL_SIZES, repeats=2
        )
        assert_usable(model)
        copy = calibrate_copy_cpu(
            cluster.device(0), cluster.device(1), pids, target=cluster.target, repeats=3, rounds=2
        )
        # gRPC costs the workers CPU (about 0.5 ns per byte, and 55-110 us per tensor of a split
        # training step each, measured on idle machines of this kind); what a busy or another
        # machine measures only has to be usable
        assert all(math.isfinite(c) and c >= 0 for c in copy)
        shape = SplitShape(layers=2, width=8, rows=4)
        with split_probe(
            cluster.device(0),
            cluster.device(1),
            pids,
            target=cluster.target,
            shapes=[shape, DEFAULT_SPLIT, WIDE_SPLIT],
        ) as (probe, small, wide):
            # each layer's weight and bias gradients cross back to their updates, and activations
            # go over to the gradients; at most a weight gradient (8 x 8 floats) each
            assert probe.transfers >= 2 * shape.layers
            assert 0 < probe.mean_bytes <= shape.width * shape.width * 4
            assert math.isfinite(probe(2)) and probe(2) >= 0
            # copy_cpu_line's two steps: as many tensors, the wide one's of many times the bytes
            assert wide.transfers == small.transfers and wide.mean_bytes > 10 * small.mean_bytes
    assert not any(is_running(pid) for pid in pids)
    assert not any(accepts(port) for port in ports)


@pytest.mark.tensorflow
@pytest.mark.slow
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_cluster_leaves_no_process_behind_when_its_body_raises(error):
    with pytest.raises(error), LocalCluster(1) as cluster:
        pids = cluster.pids
        assert all(is_running(pid) for pid in pids)
        raise error("stop")
    assert not any(is_running(pid) for pid in pids)


def test_cluster_device_names_follow_tensorflow_and_unknown_tasks_are_rejected():
    cluster = LocalCluster(2)
    assert cluster.device(1) == "/job:worker/replica:0/task:1/device:CPU:0"
    assert cluster.device(0, "GPU", 1) == "/job:worker/replica:0/task:0/device:GPU:1"
    with pytest.raises(ValueError, match="task 2"):
        cluster.device(2)
    with pytest.raises(RuntimeError, match="not running"):
        _ = cluster.target


def test_the_latency_is_the_intercept_of_time_against_tensors_sent_together():
    from tfplace.estimator.calibration import latency_from_counts

    seconds = [1.5e-4 + n * 7e-5 for n in (1, 4, 16)]
    assert latency_from_counts((1, 4, 16), seconds, b=2.2e-4) == pytest.approx(1.5e-4)
    assert latency_from_counts((1, 4, 16), seconds, b=1e-4) == pytest.approx(1e-4)  # never above b
    assert latency_from_counts((1, 4), [3e-4, 12e-4], b=3e-4) == 0.0  # no overlap: all of b holds the link


def test_a_virtual_handoff_costs_the_slope_of_time_against_tensors_handed_over_together():
    from tfplace.estimator.calibration import slope_per_count

    seconds = [8e-6 + n * 2.35e-6 for n in (16, 64, 128)]
    assert slope_per_count((16, 64, 128), seconds) == pytest.approx(2.35e-6)  # not one tensor's 10.35 us
    assert slope_per_count((16, 64), [5e-5, 4e-5]) == 0.0  # noise that falls with the count costs nothing
    with pytest.raises(ValueError, match="two different counts"):
        slope_per_count((16, 16), [4e-5, 5e-5])


def test_a_virtual_handoff_is_the_median_of_its_fits(monkeypatch):
    from tfplace.estimator import calibration

    per_tensor = iter([2.5e-6, 4.7e-6, 4.1e-6])

    def timed(*args, counts, **kwargs):
        slope = next(per_tensor)
        return [8e-6 + n * slope for n in counts]

    monkeypatch.setattr(calibration, "time_concurrent_transfers", timed)
    assert calibration.handoff_per_tensor("/device:CPU:0", "/device:CPU:1", fits=3) == pytest.approx(4.1e-6)
    with pytest.raises(ValueError, match="fits must be at least 1"):
        calibration.handoff_per_tensor("/device:CPU:0", "/device:CPU:1", fits=0)


def test_the_step_overhead_is_the_time_per_host_of_steps_on_more_and_more_hosts():
    from tfplace.estimator.calibration import overhead_per_host

    assert overhead_per_host([3.5e-4, 7e-4, 10.5e-4]) == pytest.approx(3.5e-4)
    assert overhead_per_host([2e-4]) == pytest.approx(2e-4)


@pytest.mark.tensorflow
def test_step_overheads_are_timed_for_one_then_more_devices_of_a_process():
    import tensorflow as tf

    from tfplace.estimator.calibration import time_step_overheads

    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    seconds = time_step_overheads(["/device:CPU:0", "/device:CPU:1"], config=config, repeats=3)
    assert len(seconds) == 2 and all(0 < s < 1 for s in seconds)


@pytest.mark.tensorflow
def test_the_per_op_overhead_is_the_median_of_fits_in_fresh_sessions_and_returns_each_fit():
    import statistics

    from tfplace.estimator.calibration import ChainShape, calibrate_op_overhead, profiled_run_config

    chains = (ChainShape(30), ChainShape(60), ChainShape(90))
    overhead, fits = calibrate_op_overhead(config=profiled_run_config(2, 1), chains=chains, repeats=2, fits=3)
    assert len(fits) == 3 and all(math.isfinite(fit) for fit in fits)
    assert overhead.op_overhead == statistics.median(fits) and overhead.step_overhead >= 0
    with pytest.raises(ValueError, match="fits must be at least 1"):
        calibrate_op_overhead(chains=chains, repeats=2, fits=0)


class ClockedSession:
    """A session whose steps take the seconds given, one after the other, on its own clock."""

    def __init__(self, seconds):
        self.seconds = list(seconds)
        self.runs = 0
        self.clock = 0.0

    def now(self):
        return self.clock

    def run(self, fetch, feeds=None):
        self.clock += self.seconds[self.runs]
        self.runs += 1


def test_untraced_steps_are_timed_back_to_back_after_untimed_steps_of_their_own_graph(monkeypatch):
    from tfplace.estimator import step_timing

    # the first steps follow another graph's: slow, each less than the one before
    session = ClockedSession([5.0, 3.0, 2.0, 1.0, 1.0])
    monkeypatch.setattr(step_timing.time, "perf_counter", session.now)
    assert step_timing.back_to_back_seconds(session, "train", steps=2, untimed=3) == [1.0, 1.0]
    assert session.runs == 5
    with pytest.raises(ValueError, match="steps must be at least 1"):
        step_timing.back_to_back_seconds(session, "train", steps=0)
    with pytest.raises(ValueError, match="untimed steps must be at least 0"):
        step_timing.back_to_back_seconds(session, "train", untimed=-1)


def test_the_feed_cost_fit_recovers_the_per_step_per_tensor_and_per_byte_costs():
    truth = FeedCost(per_step=20e-6, per_tensor=25e-6, per_byte=0.7e-9)
    samples = [
        FeedSample(tensors, nbytes, truth.per_step + truth.per_tensor * tensors + truth.per_byte * nbytes)
        for tensors, nbytes in [(1, 4), (3, 12), (6, 24), (1, 2**16), (1, 2**20)]
    ]
    fitted = fit_feed_cost(samples)
    assert (fitted.per_step, fitted.per_tensor, fitted.per_byte) == pytest.approx(
        (truth.per_step, truth.per_tensor, truth.per_byte), rel=1e-6
    )


def test_a_feed_cost_coefficient_the_noise_makes_negative_is_dropped_and_the_rest_refitted():
    samples = [
        FeedSample(1, 4, 30e-6),
        FeedSample(3, 12, 100e-6),
        FeedSample(6, 24, 205e-6),
        FeedSample(1, 2**20, 30e-6),
    ]
    fitted = fit_feed_cost(samples)  # 35 us per tensor, -5 us per step: no per-step cost
    assert fitted.per_step == 0.0 and fitted.per_tensor > 0 and fitted.per_byte >= 0


def test_a_feed_cost_needs_two_tensor_counts_and_two_sizes():
    with pytest.raises(ValueError, match="two tensor counts and two sizes"):
        fit_feed_cost([FeedSample(1, 4, 1e-5), FeedSample(1, 2**16, 2e-5)])


@pytest.mark.tensorflow
def test_feeds_are_timed_once_per_tensor_count_and_per_size_against_the_same_step_unfed():
    from tfplace.estimator.calibration import profiled_run_config

    samples = time_feeds(
        "/device:CPU:0", config=profiled_run_config(), counts=(1, 2), sizes=(2**12, 2**14), repeats=2
    )
    assert [(sample.tensors, sample.nbytes) for sample in samples] == [(1, 4), (2, 8), (1, 2**12), (1, 2**14)]
    assert all(math.isfinite(sample.seconds) for sample in samples)
    with pytest.raises(ValueError, match="sizes >= 4 bytes"):
        time_feeds("/device:CPU:0", sizes=(2,))
