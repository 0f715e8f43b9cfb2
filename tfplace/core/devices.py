"""Devices a placement targets, how they are named, and the links between them.

A :class:`DeviceSet` is the ``D = {d_1, ..., d_m}`` of Celeritas section 4.1 plus what the paper
leaves implicit: each device's memory, which host it sits on, and the transfer model of the links
inside a host and between hosts. Names follow TensorFlow's device specs (``/device:GPU:0``,
``/job:worker/replica:0/task:1/device:CPU:0``) and are parsed here without TensorFlow.

Ops that no device of the set can run (``device_kinds`` excludes them all: strings, summaries,
dataset iterators on a GPU-only set) go to the CPU of a host, the set's *fallback CPU*, which has
no memory limit and is never chosen for anything else.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from tfplace.core.transfer import PRESETS, TransferModel

__all__ = ["Device", "DeviceError", "DeviceName", "DeviceSet", "parse_memory"]


class DeviceError(ValueError):
    """A device name or memory size is malformed or unknown: the message lists the valid ones."""


_FIELD = re.compile(r"^(job|replica|task|device):(.+)$")
_LEGACY = re.compile(r"^(cpu|gpu|tpu):(\d+)$", re.IGNORECASE)
_TYPE_INDEX = re.compile(r"^([A-Za-z_]+):(\d+)$")
_FORMS = "write /device:GPU:0, /gpu:0, GPU:0 or /job:worker/replica:0/task:1/device:GPU:0"


@dataclass(frozen=True, order=True)
class DeviceName:
    """A parsed TensorFlow device name; absent job, replica or task default to a local process."""

    job: str = "localhost"
    replica: int = 0
    task: int = 0
    kind: str = "CPU"
    index: int = 0

    @classmethod
    def parse(cls, name: str) -> DeviceName:
        """Parse ``/job:j/replica:r/task:t/device:KIND:i``, ``/device:KIND:i``, ``/gpu:0`` or ``GPU:0``."""
        parts = [p for p in name.strip().split("/") if p]
        if not parts:
            raise DeviceError(f"empty device name {name!r}; {_FORMS}")
        fields: dict[str, str] = {}
        for part in parts:
            legacy = _LEGACY.match(part)
            if legacy:
                fields["device"] = f"{legacy.group(1).upper()}:{legacy.group(2)}"
                continue
            match = _FIELD.match(part)
            if match:
                fields[match.group(1)] = match.group(2)
            elif _TYPE_INDEX.match(part) and len(parts) == 1:
                fields["device"] = part
            else:
                raise DeviceError(f"malformed device name {name!r}: cannot read {part!r}; {_FORMS}")
        if "device" not in fields:
            raise DeviceError(f"device name {name!r} has no device type and index; {_FORMS}")
        kind_index = _TYPE_INDEX.match(fields["device"])
        if not kind_index:
            raise DeviceError(
                f"malformed device name {name!r}: expected TYPE:index, got {fields['device']!r}; {_FORMS}"
            )
        try:
            return cls(
                job=fields.get("job", "localhost"),
                replica=int(fields.get("replica", 0)),
                task=int(fields.get("task", 0)),
                kind=kind_index.group(1).upper(),
                index=int(kind_index.group(2)),
            )
        except ValueError:
            raise DeviceError(
                f"malformed device name {name!r}: replica and task must be integers; {_FORMS}"
            ) from None

    @property
    def host(self) -> str:
        """The process the device belongs to, ``/job:j/replica:r/task:t``."""
        return f"/job:{self.job}/replica:{self.replica}/task:{self.task}"

    @property
    def full_name(self) -> str:
        return f"{self.host}/device:{self.kind}:{self.index}"


@dataclass(frozen=True)
class Device:
    """One device: its TensorFlow name and the bytes of memory the model may use on it."""

    name: str
    memory: int

    def __post_init__(self) -> None:
        DeviceName.parse(self.name)  # raises DeviceError for a malformed name
        if self.memory <= 0:
            raise DeviceError(f"device {self.name!r} needs memory > 0 bytes, got {self.memory}")

    @property
    def spec(self) -> DeviceName:
        return DeviceName.parse(self.name)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def host(self) -> str:
        return self.spec.host


_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class DeviceSet:
    """The devices of a placement and the links between them.

    Parameters
    ----------
    devices : sequence of Device
        The placement targets, in the order placers fill them.
    intra_host : TransferModel
        Link between two devices of one host (PCIe, NVLink, a process's virtual devices).
    inter_host : TransferModel
        Link between devices of two hosts (the network).
    shared_bus : bool
        ``True`` when all transfers inside a host share one bus (GPUs behind one PCIe switch), so
        that only one runs at a time; ``False`` gives each device its own full-duplex link.
    step_overhead : float
        Seconds the framework adds to a training step for each host that runs ops: the session
        starting and collecting the host's part of the step (a TensorFlow master's ``RunGraph``
        call to each worker, about 0.35 ms per worker on loopback gRPC here). ``0`` by default.
    cores : int
        Processors that all the devices share, when they are processes or virtual devices of one
        machine (two loopback workers on a 2-core machine): at most this many ops and copies run
        at once (:mod:`tfplace.simulator.engine`). ``0`` (the default) gives every device its own.
    host_threads : int
        Ops that each host (a process) runs at once, shared by its devices: TensorFlow's inter-op
        thread pool, which the virtual CPUs of one process share and which lets one CPU device run
        several ops at once. ``0`` (the default) runs one op at a time on each device (a GPU's
        compute stream).
    shared_host_memory : bool
        ``True`` when the devices of a host share its memory (the virtual CPUs of one process): a
        tensor sent between two of them is handed over, not copied, so it stays in the sender's
        memory until its consumers on both devices are done. ``False`` (the default) gives the
        receiver a copy (GPUs, processes).
    """

    devices: tuple[Device, ...]
    intra_host: TransferModel = PRESETS["pcie3_x16"]
    inter_host: TransferModel = PRESETS["ethernet_25g"]
    shared_bus: bool = False
    step_overhead: float = 0.0
    cores: int = 0
    host_threads: int = 0
    shared_host_memory: bool = False
    fallback_cpus: tuple[Device, ...] = field(init=False, repr=False, compare=False)
    _specs: tuple[DeviceName, ...] = field(init=False, repr=False, compare=False)
    _index: dict[DeviceName, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        devices = tuple(self.devices)
        if not devices:
            raise DeviceError("a placement needs at least one device")
        if not self.step_overhead >= 0:
            raise DeviceError(f"step_overhead must be >= 0 seconds, got {self.step_overhead}")
        if self.cores < 0:
            raise DeviceError(f"cores must be >= 0 (0: a processor per device), got {self.cores}")
        if self.host_threads < 0:
            raise DeviceError(
                f"host_threads must be >= 0 (0: one op at a time per device), got {self.host_threads}"
            )
        names = [DeviceName.parse(d.name) for d in devices]
        if len(set(names)) != len(names):
            raise DeviceError(f"device names repeat: {[d.name for d in devices]}")
        hosts = list(dict.fromkeys(n.host for n in names))
        cpu_hosts = {n.host for n in names if n.kind == "CPU"}
        fallbacks = tuple(Device(f"{h}/device:CPU:0", _UNLIMITED) for h in hosts if h not in cpu_hosts)
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "fallback_cpus", fallbacks)
        specs = tuple(names) + tuple(d.spec for d in fallbacks)
        object.__setattr__(self, "_specs", specs)
        object.__setattr__(self, "_index", {spec: i for i, spec in enumerate(specs)})

    @classmethod
    def parse(
        cls,
        spec: str | Sequence[str],
        memory: str | int | Sequence[str | int],
        **links: TransferModel | bool | float | int,
    ) -> DeviceSet:
        """Build a set from names with ranges: ``"/device:GPU:0-3"``, ``"/job:worker/task:0-1/device:CPU:0"``.

        ``spec`` may also be a comma-separated string or a list. ``memory`` is one size for all
        devices or one per device: bytes, or a string such as ``"32GB"`` (10^9) or ``"32GiB"`` (2^30).
        """
        items = spec.split(",") if isinstance(spec, str) else list(spec)
        names = [name for item in items if item.strip() for name in _expand_ranges(item.strip())]
        if isinstance(memory, (str, int)):
            sizes = [parse_memory(memory)] * len(names)
        else:
            sizes = [parse_memory(m) for m in memory]
            if len(sizes) != len(names):
                raise DeviceError(f"{len(names)} devices but {len(sizes)} memory sizes")
        return cls(tuple(Device(n, s) for n, s in zip(names, sizes)), **links)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices)

    @property
    def names(self) -> list[str]:
        """Names of the placement targets."""
        return [d.name for d in self.devices]

    @property
    def all_devices(self) -> tuple[Device, ...]:
        """Placement targets followed by the fallback CPUs."""
        return self.devices + self.fallback_cpus

    def index(self, name: str) -> int:
        """Position of a device (target or fallback CPU) in :attr:`all_devices`, by any spelling of its name."""
        try:
            return self._index[DeviceName.parse(name)]
        except KeyError:
            known = ", ".join(d.name for d in self.all_devices)
            raise DeviceError(f"unknown device {name!r}; this placement has: {known}") from None

    def host_of(self, device: int) -> str:
        return self._specs[device].host

    def kind_of(self, device: int) -> str:
        return self._specs[device].kind

    def memory_of(self, device: int) -> int:
        return self.all_devices[device].memory

    def fallback_for(self, host: str) -> int:
        """Index of the CPU that runs ops no target device can run, on ``host``."""
        for i in range(len(self.all_devices)):
            if self.kind_of(i) == "CPU" and self.host_of(i) == host:
                return i
        return self.index(f"{self.host_of(0)}/device:CPU:0")

    def link(self, src: int, dst: int) -> TransferModel | None:
        """The transfer model between two devices, ``None`` for the same device."""
        if src == dst:
            return None
        return self.intra_host if self.host_of(src) == self.host_of(dst) else self.inter_host

    def transfer_time(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (``0`` on the same device)."""
        model = self.link(src, dst)
        return model.time(nbytes) if model is not None else 0.0

    @property
    def typical_link(self) -> TransferModel:
        """The link most pairs of target devices use: the one placers without topology awareness
        assume (edge times of the cost graph, critical paths, fusion). Inside a host when at least
        half of the pairs are, so eight GPUs of one host beside one of another still get PCIe."""
        count = len(self.devices)
        per_host = Counter(self.host_of(i) for i in range(count))
        intra_pairs = sum(n * (n - 1) for n in per_host.values()) // 2
        return self.intra_host if 4 * intra_pairs >= count * (count - 1) else self.inter_host


def parse_memory(value: str | int | float) -> int:
    """Bytes from ``"32GB"`` (decimal units), ``"32GiB"`` (binary units), ``"16e9"`` or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise DeviceError(f"memory must be > 0 bytes, got {value}")
        return int(value)
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([KMGT]?i?B?)\s*", str(value))
    if not match:
        raise DeviceError(f"cannot read memory size {value!r}; write it like 32GB, 16GiB or 1e9")
    number, unit = match.groups()
    scale = {"": 1, "B": 1}
    for power, prefix in enumerate("KMGT", start=1):
        scale[f"{prefix}B"] = scale[prefix] = 1000**power
        scale[f"{prefix}iB"] = scale[f"{prefix}i"] = 1024**power
    if unit not in scale:
        raise DeviceError(f"unknown memory unit in {value!r}; use B, KB, MB, GB, TB or KiB .. TiB")
    try:
        size = int(float(number) * scale[unit])
    except ValueError:
        raise DeviceError(f"cannot read memory size {value!r}") from None
    return parse_memory(size)


def _expand_ranges(spec: str) -> Iterable[str]:
    """``/job:w/task:0-1/device:GPU:0-1`` -> the four names, task-major."""
    match = re.search(r"(\d+)-(\d+)", spec)
    if not match:
        yield spec
        return
    low, high = int(match.group(1)), int(match.group(2))
    if high < low:
        raise DeviceError(f"empty range {match.group(0)!r} in {spec!r}")
    for i in range(low, high + 1):
        yield from _expand_ranges(spec[: match.start()] + str(i) + spec[match.end() :])
