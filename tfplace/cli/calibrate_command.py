"""``tfplace calibrate``: measure this machine's CPU device model once and store it."""

from __future__ import annotations

from absl import flags

from tfplace.cli.common import Command, print_report
from tfplace.cli.options import CALIBRATION, COMMAND_FLAGS
from tfplace.core.device_model import CpuCalibration, CpuProcessModel
from tfplace.core.units import format_seconds
from tfplace.estimator.calibration import DEFAULT_FITS

LOOPBACK_WORKERS = flags.DEFINE_integer(
    "loopback_workers",
    2,
    "calibrate: worker processes on the loopback interface to calibrate (0: virtual CPUs only).",
    lower_bound=0,
    flag_values=COMMAND_FLAGS,
)
VIRTUAL_THREADS = flags.DEFINE_integer(
    "virtual_threads",
    1,
    "calibrate: inter-op threads of a process of virtual CPUs, which its real runs must use too.",
    lower_bound=1,
    flag_values=COMMAND_FLAGS,
)
CALIBRATION_REPEATS = flags.DEFINE_integer(
    "calibration_repeats",
    20,
    "calibrate: timed steps of each kind; the smallest counts (other processes only add time).",
    lower_bound=1,
    flag_values=COMMAND_FLAGS,
)
CALIBRATION_FITS = flags.DEFINE_integer(
    "calibration_fits",
    DEFAULT_FITS,
    "calibrate: independent fits of the per-op overhead per kind of CPU device; their median is stored.",
    lower_bound=1,
    flag_values=COMMAND_FLAGS,
)


def _fits_range(model: CpuProcessModel) -> str:
    """`` (fits -0.25 .. -0.18)``: the spread of the fits the per-op overhead pools, if known."""
    if not model.op_overhead_fits:
        return ""
    return f" (fits {min(model.op_overhead_fits) * 1e6:+.3f} .. {max(model.op_overhead_fits) * 1e6:+.3f})"


def calibration_table(calibration: CpuCalibration) -> str:
    """One line per kind of CPU device: what a real step costs beyond its profile."""
    lines = [f"CPU device model of {calibration.machine} ({calibration.cores} cores):"]
    for kind, model in calibration.processes.items():
        link, feed = model.link, model.feed
        lines.append(
            f"  {kind}: {model.op_overhead * 1e6:+.3f} us per op{_fits_range(model)}, "
            f"{format_seconds(model.step_overhead)} per "
            f"step and process, {model.threads} ops at once per process; link {link.b * 1e6:.1f} us + "
            f"{link.k * 1e9:.3f} ns/B (CPU on each side {link.copy_b * 1e6:.1f} us + {link.copy_k * 1e9:.3f} ns/B); "
            f"feeds {feed.per_step * 1e6:.1f} us per step + {feed.per_tensor * 1e6:.1f} us per tensor + "
            f"{feed.per_byte * 1e9:.3f} ns/B"
        )
    blocks = ", ".join(f"{variant} {block}" for variant, block in calibration.matmul_row_blocks.items())
    lines.append(f"  MatMul rows per pass over the weights: {blocks or 'not measured (1)'}")
    return "\n".join(lines)


def _calibrate() -> int:
    """``tfplace calibrate``: measure this machine's CPU device model and store it."""
    from tfplace.estimator.calibration import calibrate_cpu

    calibration = calibrate_cpu(
        workers=LOOPBACK_WORKERS.value,
        virtual_threads=VIRTUAL_THREADS.value,
        repeats=CALIBRATION_REPEATS.value,
        fits=CALIBRATION_FITS.value,
    )
    calibration.save(CALIBRATION.value)
    print_report(calibration_table(calibration), [f"CPU device model: {CALIBRATION.value}"])
    return 0


CALIBRATE = Command(
    "measure once what real steps on this machine's CPUs cost beyond their profile (per-op and "
    "per-step overhead, threads, links), for the simulator's CPU device model",
    "tfplace calibrate --calibration .tfplace_cache/calibration.json",
    (CALIBRATION, LOOPBACK_WORKERS, VIRTUAL_THREADS, CALIBRATION_REPEATS, CALIBRATION_FITS),
    (),
    _calibrate,
)
