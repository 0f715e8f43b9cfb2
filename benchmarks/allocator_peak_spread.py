"""How far the allocator's peak of a placed step moves from step to step, against the simulated peak.

``benchmarks/fidelity.py`` compares the simulated peak of each device with the allocator's peak of
one traced step (a session's fourth). A split on loopback workers races: whether a tensor from the
other worker is there when a worker's thread picks its next op decides the order, and so the peak.
This traces ``--traced_steps`` consecutive steps of one session per placement (from the fourth, the
executor's first-steps order, which ``allocator_peak_mb`` is measured in) and prints, per device
used, the simulated peak and every allocator peak seen with how many steps had it (in MB, the
variables resident on the device included, as in ``fidelity.py``). The peaks are bytes, so a busy
machine gives valid ones, though it may shift how often each order wins.

    PYTHONPATH=. .venv/bin/python benchmarks/allocator_peak_spread.py
    PYTHONPATH=. .venv/bin/python benchmarks/allocator_peak_spread.py --models=nmt --kinds=virtual
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence

from absl import app, flags

from benchmarks import fidelity  # and its flags --models, --kinds, --placements, --calibration, --cache_dir

FLAGS = flags.FLAGS
flags.DEFINE_integer("traced_steps", 24, "Consecutive traced steps per placement, from the fourth.")
FLAGS.set_default("models", ["inception_v3"])
FLAGS.set_default("kinds", ["loopback"])
FLAGS.set_default("placements", ["dfs_topo"])


def peak_counts(peaks: Sequence[int]) -> str:
    """``236.78 MB x16, 192.68 MB x2``: each peak seen (to 10 kB), most frequent first."""
    counts = Counter(round(peak / fidelity.MB, 2) for peak in peaks)
    return ", ".join(f"{mb:.2f} MB x{count}" for mb, count in counts.most_common())


def main(argv: Sequence[str]) -> None:
    del argv
    from tfplace.core.device_model import CpuCalibration
    from tfplace.tf_graph.cluster import LocalCluster

    calibration = CpuCalibration.load(FLAGS.calibration)
    for kind in FLAGS.kinds:
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(LocalCluster(FLAGS.devices)) if kind == "loopback" else None
            for name in FLAGS.models:
                spec, batch, estimate = fidelity.profiled_model(name)
                devices = calibration.device_set(fidelity.device_names(kind, FLAGS.devices), 1 << 40)
                cost_graph = fidelity.calibrated_costs(calibration, kind, estimate.cost_graph, devices)
                placed = fidelity.placements(
                    cost_graph, estimate.imported.cost_graph, devices, FLAGS.placements
                )
                for placer, placement in placed.items():
                    assignment = {op: placement.assignment[op] for op in cost_graph}
                    simulated = fidelity.simulated(cost_graph, assignment, devices)
                    with contextlib.ExitStack() as session_stack:
                        series = fidelity.open_series(
                            session_stack, spec, batch, placement, kind, cluster, calibration
                        )
                        for _ in range(3):
                            series.step([])
                        traces = [fidelity.traced_step(series) for _ in range(FLAGS.traced_steps)]
                        runs = [fidelity.allocator_peaks(spec, placement, trace) for trace in traces]
                    for device in sorted(set(assignment.values())):
                        print(
                            f"{name}/{kind}/{placer} {device}: simulated "
                            f"{simulated.peak_memory[devices.index(device)] / fidelity.MB:.2f} MB; "
                            f"allocator, steps 4-{3 + FLAGS.traced_steps} (load {fidelity.load()}): "
                            f"{peak_counts([run[device] for run in runs])}",
                            flush=True,
                        )


if __name__ == "__main__":
    app.run(main)
