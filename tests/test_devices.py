"""Device names, memory sizes, device sets and their links."""

import pytest

from tfplace.core.devices import Device, DeviceError, DeviceName, DeviceSet, parse_memory
from tfplace.core.transfer import PRESETS, TransferModel


def test_ranges_expand_to_one_device_each():
    devices = DeviceSet.parse("/device:GPU:0-3", "32GB")
    assert devices.names == [f"/device:GPU:{i}" for i in range(4)]
    assert all(d.memory == 32_000_000_000 for d in devices)


def test_ranges_over_tasks_and_devices_expand_task_major():
    devices = DeviceSet.parse("/job:worker/task:0-1/device:GPU:0-1", "16GiB")
    assert devices.names[1] == "/job:worker/task:0/device:GPU:1"
    assert devices.names[2] == "/job:worker/task:1/device:GPU:0"
    assert devices.memory_of(0) == 16 * 2**30


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/gpu:1", DeviceName(kind="GPU", index=1)),
        ("GPU:2", DeviceName(kind="GPU", index=2)),
        ("/device:CPU:0", DeviceName()),
        ("/job:worker/replica:0/task:3/device:GPU:1", DeviceName("worker", 0, 3, "GPU", 1)),
    ],
)
def test_every_spelling_of_a_tensorflow_device_name_parses(name, expected):
    assert DeviceName.parse(name) == expected


def test_the_short_and_the_full_name_find_the_same_device():
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    assert devices.index("/job:localhost/replica:0/task:0/device:GPU:1") == 1


def test_an_unknown_device_error_lists_the_available_ones():
    devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    with pytest.raises(DeviceError, match=r"'/gpu:5'.*/device:GPU:0, /device:GPU:1"):
        devices.index("/gpu:5")


@pytest.mark.parametrize("bad", ["/device:GPU", "/jobs:x/device:GPU:0", "/device:GPU:x", ""])
def test_malformed_device_names_are_rejected_with_the_name(bad):
    with pytest.raises(DeviceError):
        DeviceName.parse(bad)


def test_repeated_devices_are_rejected():
    with pytest.raises(DeviceError, match="repeat"):
        DeviceSet.parse("/gpu:0,/device:GPU:0", "1GB")


@pytest.mark.parametrize(
    ("text", "size"),
    [("32GB", 32 * 10**9), ("1.5GiB", 3 * 2**29), ("16e9", 16 * 10**9), ("512MiB", 2**29), (4096, 4096)],
)
def test_memory_sizes_read_decimal_and_binary_units(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize("bad", ["lots", "32XB", "-1GB", 0])
def test_unreadable_memory_sizes_are_rejected(bad):
    with pytest.raises(DeviceError):
        parse_memory(bad)


def test_a_gpu_only_set_gets_a_fallback_cpu_per_host():
    devices = DeviceSet.parse("/job:worker/task:0-1/device:GPU:0", "1GB")
    assert [d.name for d in devices.fallback_cpus] == [
        "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:worker/replica:0/task:1/device:CPU:0",
    ]
    assert devices.fallback_for(devices.host_of(1)) == 3


def test_a_set_with_a_cpu_needs_no_fallback():
    devices = DeviceSet.parse("/device:CPU:0-1", "1GB")
    assert devices.fallback_cpus == ()


def test_links_inside_a_host_and_between_hosts_differ():
    intra, inter = TransferModel(1e-10, 1e-5, "intra"), TransferModel(1e-9, 1e-4, "inter")
    devices = DeviceSet.parse("/job:w/task:0-1/device:GPU:0-1", "1GB", intra_host=intra, inter_host=inter)
    assert devices.link(0, 1) is intra
    assert devices.link(1, 2) is inter
    assert devices.link(2, 2) is None
    assert devices.transfer_time(1000, 0, 2) == pytest.approx(1e-6 + 1e-4)
    assert devices.typical_link is inter


def test_a_device_needs_positive_memory():
    with pytest.raises(DeviceError, match="memory"):
        Device("/device:GPU:0", 0)


def test_transfer_fit_recovers_slope_and_intercept():
    sizes = [2**i for i in range(10, 24)]
    model = TransferModel.fit(sizes, [2e-10 * s + 3e-5 for s in sizes])
    assert model.k == pytest.approx(2e-10)
    assert model.b == pytest.approx(3e-5)


def test_transfer_fit_with_negative_intercept_goes_through_the_origin():
    model = TransferModel.fit([1, 2, 3], [0.5, 1.9, 3.1])
    assert model.b == 0.0 and model.k > 0


def test_unknown_link_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="nvlink2"):
        TransferModel.preset("token-ring")
    assert TransferModel.preset("pcie3_x16") is PRESETS["pcie3_x16"]


def test_the_typical_link_is_the_one_most_device_pairs_use():
    intra, inter = TransferModel(1e-10, 1e-5, "intra"), TransferModel(1e-9, 1e-4, "inter")
    links = {"intra_host": intra, "inter_host": inter}
    big_and_small = ["/job:w/task:0/device:GPU:0-7", "/job:w/task:1/device:GPU:0"]
    assert DeviceSet.parse(big_and_small, "1GB", **links).typical_link is intra  # 28 of 36 pairs
    assert DeviceSet.parse("/job:w/task:0-2/device:CPU:0", "1GB", **links).typical_link is inter
    assert DeviceSet.parse("/device:GPU:0-3", "1GB", **links).typical_link is intra


def test_a_link_latency_and_copy_cost_are_kept_when_saved():
    link = TransferModel(k=1e-9, b=2e-4, name="grpc", latency=1.5e-4, copy_k=0.7e-9, copy_b=3e-5)
    assert link.time(1000) == pytest.approx(1e-6 + 2e-4)
    assert link.occupancy(1000) == pytest.approx(1e-6 + 0.5e-4)
    assert TransferModel.from_dict(link.to_dict()) == link
    assert TransferModel(k=1e-9, b=2e-4).to_dict() == {"k": 1e-9, "b": 2e-4, "name": "custom"}
    with pytest.raises(ValueError, match="latency <= b"):
        TransferModel(k=1e-9, b=1e-4, latency=2e-4)
    with pytest.raises(ValueError, match="copy_k <= k"):
        TransferModel(k=1e-9, b=1e-4, copy_k=2e-9)
    with pytest.raises(ValueError, match="copy_b <= b"):
        TransferModel(k=1e-9, b=1e-4, copy_b=2e-4)
    copying = TransferModel(k=1e-9, b=2e-4, copy_b=1.2e-4)
    assert TransferModel.from_dict(copying.to_dict()) == copying
    # calibration format 8 stored the part of copy_b that tensors sent together shared; it is not read
    assert TransferModel.from_dict({**copying.to_dict(), "copy_b_shared": 0.7e-4}) == copying


def test_a_tensor_arrives_after_the_links_latency_or_after_the_rest_of_b_once_the_devices_copied_it():
    channel = TransferModel(k=1e-9, b=2e-4, latency=1.5e-4)
    copied = TransferModel(k=1e-9, b=2e-4, copy_k=0.7e-9, copy_b=3e-5)
    assert channel.delay(1000) == pytest.approx(1.5e-4)
    assert copied.delay(1000) == pytest.approx(2e-4 - 3e-5 + 0.3e-9 * 1000)
    # with the copies on both devices at once, a transfer alone still takes k * bytes + b
    assert copied.copy_k * 1000 + copied.copy_b + copied.delay(1000) == pytest.approx(copied.time(1000))


def test_a_negative_step_overhead_or_core_count_is_refused():
    with pytest.raises(DeviceError, match="step_overhead"):
        DeviceSet.parse("/device:CPU:0", "1GB", step_overhead=-1.0)
    with pytest.raises(DeviceError, match="cores"):
        DeviceSet.parse("/device:CPU:0", "1GB", cores=-2)


def test_a_saved_placement_keeps_its_links_step_overhead_and_shared_cores(tmp_path):
    from tfplace.core.placement import Placement

    grpc = TransferModel(k=4e-10, b=2e-4, name="grpc", latency=1.4e-4)
    devices = DeviceSet.parse(
        "/job:worker/task:0-1/device:CPU:0", "1GB", inter_host=grpc, step_overhead=3.5e-4
    )
    Placement({"a": devices.names[0], "b": devices.names[1]}, devices).save(tmp_path / "p.json")
    assert Placement.load(tmp_path / "p.json").devices == devices


def test_transfer_fit_weighs_relative_error_so_noise_on_a_large_transfer_does_not_hide_b():
    sizes = [2**i for i in range(10, 27, 2)]
    seconds = [4e-10 * s + 2e-4 for s in sizes]
    seconds[-1] *= 1.15  # 64 MiB measured 15% slow
    model = TransferModel.fit(sizes, seconds)
    assert model.b == pytest.approx(2e-4, rel=0.1)
    assert model.k == pytest.approx(4e-10, rel=0.2)


def test_transfer_fit_is_not_pinned_to_zero_by_a_small_transfer_measured_as_zero():
    sizes = [2**i for i in range(10, 27, 2)]
    seconds = [4e-10 * s + 2e-4 for s in sizes]
    seconds[0] = 0.0  # a noisy difference of two medians
    assert TransferModel.fit(sizes, seconds).b > 1e-4  # more than half the true 200 us
