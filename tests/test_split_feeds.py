"""A split fed tensor is fed into the memory of its first piece's host: that host's CPU:0."""

from __future__ import annotations

from tfplace.core.devices import DeviceSet
from tfplace.split.feeds import feed_host


def test_gpus_are_fed_from_their_hosts_fallback_cpu():
    gpus = DeviceSet.parse("/device:GPU:0-3", "32GB")
    assert feed_host(gpus, "/device:GPU:2") == "/job:localhost/replica:0/task:0/device:CPU:0"


def test_a_split_starting_on_a_second_task_is_fed_on_that_tasks_cpu():
    gpus = DeviceSet.parse("/job:worker/task:0-1/device:GPU:0-1", "32GB")
    assert feed_host(gpus, "/job:worker/task:1/device:GPU:0") == "/job:worker/replica:0/task:1/device:CPU:0"


def test_a_host_cpu_that_is_a_target_is_named_as_the_set_names_it():
    devices = DeviceSet.parse("/device:CPU:0-2", "1GB")
    assert feed_host(devices, "/device:CPU:1") == "/device:CPU:0"


def test_a_host_whose_cpu_targets_leave_out_cpu_0_feeds_on_its_first_cpu():
    devices = DeviceSet.parse("/device:CPU:1-2", "1GB")
    assert feed_host(devices, "/device:CPU:2") == "/device:CPU:1"
