"""Where a split plan feeds a fed tensor: in host memory, sliced there for each piece.

A fed tensor (an op type of :data:`~tfplace.split.rules.FED_WHOLE`) that a plan splits is fed once,
whole, under its name, as the user feeds it. MirroredStrategy and any input pipeline put it in the
host's memory and copy to each GPU only its own slice, over that GPU's own link to the host, all
GPUs at once: no GPU holds the whole batch or forwards slices to the others. The plan's expansion
(:mod:`tfplace.split.expand`) and the TensorFlow rewrite (:mod:`tfplace.tf_graph.split_rewrite`)
both put the tensor and the slices cut from it on :func:`feed_host`.
"""

from __future__ import annotations

from tfplace.core.devices import DeviceError, DeviceName, DeviceSet

__all__ = ["feed_host"]


def feed_host(devices: DeviceSet, first: str) -> str:
    """The CPU whose memory holds a fed tensor split over pieces whose first device is ``first``.

    Parameters
    ----------
    devices : DeviceSet
        The plan's devices.
    first : str
        The device of the split's first piece.

    Returns
    -------
    str
        The name, as ``devices`` spells it, of ``CPU:0`` of ``first``'s host (its task): a target
        when the set has it, else the set's fallback CPU of that host (a GPU-only set has one per
        host, :class:`~tfplace.core.devices.DeviceSet`). A host whose CPU targets leave out
        ``CPU:0`` (virtual CPUs ``1`` and ``2``) feeds on the first of them. When ``first`` is
        that CPU itself, the tensor is fed whole on the first piece's device.
    """
    host = DeviceName.parse(first).host
    try:
        index = devices.index(f"{host}/device:CPU:0")
    except DeviceError:
        index = devices.fallback_for(host)
    return devices.all_devices[index].name
