"""The step-time simulator: scores a placement, and draws what it predicts.

:func:`simulate` runs one training step of a placed cost graph under the execution model spelled
out in :mod:`tfplace.simulator.engine` (one op at a time per device, transfers as tasks on
full-duplex channels, dynamic memory); :func:`to_chrome_trace` writes a recorded schedule for
chrome://tracing or Perfetto. No TensorFlow is needed.

>>> from tfplace.simulator import simulate, to_chrome_trace  # doctest: +SKIP
>>> result = simulate(graph, op_devices, devices, priority="fifo", record=True)  # doctest: +SKIP
>>> to_chrome_trace(result, devices, "step.json")  # doctest: +SKIP
"""

from tfplace.core.simulated_step import (
    MemoryTrace,
    OomEvent,
    OpTask,
    Schedule,
    SimulationResult,
    TransferTask,
)
from tfplace.simulator.chrome_trace import chrome_trace, to_chrome_trace
from tfplace.simulator.engine import PRIORITIES, simulate

__all__ = [
    "PRIORITIES",
    "MemoryTrace",
    "OomEvent",
    "OpTask",
    "Schedule",
    "SimulationResult",
    "TransferTask",
    "chrome_trace",
    "simulate",
    "to_chrome_trace",
]
