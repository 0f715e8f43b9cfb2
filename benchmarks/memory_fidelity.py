"""Memory the placers and the simulator count against the memory TensorFlow allocates.

TensorFlow forwards buffers: an ``Identity``, a ``Reshape``, an in-place ``Relu`` or a ``Split`` view
allocates nothing, yet step stats report its output as if it were new. The cost graph's
``aliased_outputs`` (found by :mod:`tfplace.tf_graph.step_stats`) say which outputs are an input's
buffer. This benchmark measures what that changes, with the aliases counted as allocations (the
model before ``aliased_outputs``) and as shared buffers (now):

1. a large model estimated at its paper batch and converted to a GPU (Inception V3 at 299x299,
   batch 512, on a V100 by default, as ``run_experiments.py`` does): the placers' static memory
   estimate (:func:`~tfplace.core.costgraph.graph_memory`) and the simulated peak of the
   whole step on one device, with the bytes of aliased outputs by op type;
2. a small model run for real on one and two virtual CPUs (Inception V3 at 75x75, batch 8): per
   device, the peak the simulator predicts for the step's own allocations (its peak minus the
   persistent bytes of the ops placed there) against the peak the step's allocation records show
   (:func:`~tfplace.tf_graph.step_stats.allocation_peaks`). The cost graph of part 2 is profiled
   at the batch that runs, so regression errors do not enter. The real run attributes a buffer to
   the device that allocated it, also while another virtual CPU reads it (a pointer hand-off);
   the simulator gives a tensor sent to another device a copy there, as on GPUs.

A peak depends on the order ops run in, so every simulated peak is given twice: with the
simulator's own order (each device runs the op that became ready first) and replaying the order of
a real step (each op ranked by when its first record started in the trace; for part 1, a traced
step of the same graph at ``--order_batch`` on one CPU). TensorFlow's executor, one thread per
device, does not run ops in the order they became ready.

Run from the repository root (the profiles are cached under ``--cache_dir``):

    PYTHONPATH=. .venv/bin/python benchmarks/memory_fidelity.py
    PYTHONPATH=. .venv/bin/python benchmarks/memory_fidelity.py --batch=64 --real_devices=1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from tfplace.api import DEFAULT_CACHE_DIR

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "inception_v3", "Model of part 1 (a name of models.MODELS).")
flags.DEFINE_integer("image_size", 299, "Image size of part 1's Inception V3 (other models: ignored).")
flags.DEFINE_integer("batch", 512, "Batch size of part 1.")
flags.DEFINE_list("profile_batches", ["1", "2", "4"], "Batch sizes part 1 profiles and fits.")
flags.DEFINE_string(
    "device", "V100-32GB", "Device model of part 1 (tfplace.core.device_model.DEVICE_MODELS)."
)
flags.DEFINE_integer("order_batch", 2, "Batch of the traced CPU step whose op order part 1 replays.")
flags.DEFINE_integer("real_image_size", 75, "Image size of part 2's Inception V3.")
flags.DEFINE_integer("real_batch", 8, "Batch size of part 2.")
flags.DEFINE_list("real_devices", ["1", "2"], "Virtual CPU counts part 2 runs on (empty: skip part 2).")
flags.DEFINE_string("cache_dir", DEFAULT_CACHE_DIR, "Profile cache directory.")

GIB = 2**30
MIB = 2**20
VARIANTS = ("aliases allocated", "aliases shared")


def as_before(graph: Any) -> Any:
    """A copy of ``graph`` without aliased outputs: every output counted as a new allocation."""
    copy = graph.copy()
    for _, attrs in copy.nodes(data=True):
        attrs["aliased_outputs"] = ()
    return copy


def variants(graph: Any) -> dict[str, Any]:
    """``graph`` by the names of :data:`VARIANTS`: without its aliases, and as it is."""
    return dict(zip(VARIANTS, (as_before(graph), graph)))


def aliased_bytes_by_type(graph: Any) -> Counter[str]:
    """Bytes of the aliased outputs of every op type."""
    totals: Counter[str] = Counter()
    for _, attrs in graph.nodes(data=True):
        sizes = attrs["output_sizes"]
        totals[attrs["op_type"]] += sum(sizes[slot] for slot, _, _ in attrs["aliased_outputs"])
    return totals


def traced_run(spec: Any, estimate: Any, count: int, batch: int) -> tuple[Any, Any, Any]:
    """One traced step of ``spec`` at ``batch`` on ``count`` virtual CPUs, placed by m-TOPO (all on
    one device when ``count`` is 1) and run as profiled: one op at a time per device, no graph
    rewrites. Returns the device set, the placement and the step's RunMetadata."""
    from tfplace.api import place_remaining_ops
    from tfplace.core.devices import DeviceSet
    from tfplace.estimator.profiler import profiling_config
    from tfplace.placer import place_cost_graph
    from tfplace.runner import run_placement

    devices = DeviceSet.parse(f"/device:CPU:0-{count - 1}", "1TB")
    placer = "single" if count == 1 else "m_topo"
    placement = place_cost_graph(estimate.cost_graph, devices, placer, simulate=False)
    placement.assignment = place_remaining_ops(estimate.imported.cost_graph, placement.assignment, devices)
    config = profiling_config()
    config.device_count["CPU"] = count
    config.inter_op_parallelism_threads = count
    report = run_placement(
        spec.graph,
        placement,
        spec.train_op,
        spec.feed_fn,
        batch_size=batch,
        steps=1,
        warmup_steps=2,
        init_op=spec.init_op,
        config=config,
    )
    if report.mismatches:
        print(f"({len(report.mismatches)} ops ran elsewhere than placed, e.g. {report.mismatches[0]})")
    return devices, placement, report.run_metadata[-1]


def trace_ranks(run_metadata: Any, graph: Any) -> list[int]:
    """Each op of ``graph`` ranked by when its first record started (0 for ops without one)."""
    from tfplace.tf_graph.step_stats import op_name_for_node

    ops = set(graph)
    started: dict[str, int] = {}
    for dev_stats in run_metadata.step_stats.dev_stats:
        for node in dev_stats.node_stats:
            op = op_name_for_node(node.node_name, ops)
            if op is not None:
                started[op] = min(started.get(op, node.all_start_micros), node.all_start_micros)
    return [started.get(op, 0) for op in graph]


def estimate(spec: Any, batch: int, profile_batches: Sequence[int]) -> Any:
    """Standard Evaluation step 1 of ``spec`` at ``batch`` (:func:`tfplace.api.estimate_costs`)."""
    from tfplace.api import estimate_costs

    return estimate_costs(
        spec.graph,
        spec.train_op,
        spec.feed_fn,
        batch,
        profile_batch_sizes=profile_batches,
        init_op=spec.init_op,
        cache_dir=FLAGS.cache_dir,
    )


def simulated_peaks(graph: Any, on_device: Any, devices: Any, ranks: list[int]) -> dict[tuple[str, str], Any]:
    """``(variant, order)`` -> each device's simulated peak minus the persistent bytes placed on it."""
    import numpy as np

    from tfplace.simulator import simulate

    index = {name: d for d, name in enumerate(devices.names)}
    placed = np.array([index[on_device[op]] for op in graph], dtype=np.int64)
    peaks = {}
    for name, variant in variants(graph).items():
        persistent = np.bincount(
            placed,
            weights=[a["persistent_bytes"] for _, a in variant.nodes(data=True)],
            minlength=len(devices),
        )
        for order, priority in (("own order", "fifo"), ("traced order", ranks)):
            result = simulate(variant, placed, devices, priority=priority)
            peaks[name, order] = result.peak_memory[: len(devices)] - persistent
    return peaks


def large_model() -> None:
    """Part 1: static estimate and simulated one-device peak of the large model."""
    import models
    from tfplace.core.costgraph import graph_memory
    from tfplace.core.device_model import DEVICE_MODELS, convert_graph
    from tfplace.core.devices import DeviceSet

    knobs = {"image_size": FLAGS.image_size} if FLAGS.model == "inception_v3" else {}
    spec = models.build_model(FLAGS.model, **knobs)
    profile_batches = [int(b) for b in FLAGS.profile_batches]
    target = DEVICE_MODELS[FLAGS.device]
    devices = DeviceSet.parse("/device:GPU:0", target.memory)
    graph = convert_graph(estimate(spec, FLAGS.batch, profile_batches).cost_graph, target)
    graph.set_transfer_model(devices.typical_link)
    small = estimate(spec, FLAGS.order_batch, profile_batches)
    ranks = trace_ranks(traced_run(spec, small, 1, FLAGS.order_batch)[2], graph)
    peaks = simulated_peaks(graph, dict.fromkeys(graph, devices.names[0]), devices, ranks)
    print(f"\n{FLAGS.model} {knobs}, batch {FLAGS.batch}, {len(graph):,} ops, one {FLAGS.device} (GiB)")
    print(f"{'':<20}{'static estimate':>18}{'peak, own order':>18}{'peak, traced order':>20}")
    for name, variant in variants(graph).items():
        static = graph_memory(variant)
        own, traced = peaks[name, "own order"][0], peaks[name, "traced order"][0]
        print(f"{name:<20}{static / GIB:>18.2f}{own / GIB:>18.2f}{traced / GIB:>20.2f}")
    persistent = sum(attrs["persistent_bytes"] for _, attrs in graph.nodes(data=True))
    print(
        f"(peaks without the {persistent / GIB:.2f} GiB of persistent bytes; "
        f"the device has {target.memory / GIB:.0f} GiB)"
    )
    print("aliased output bytes by op type:")
    for op_type, nbytes in aliased_bytes_by_type(graph).most_common(6):
        print(f"  {op_type:<28}{nbytes / GIB:>10.2f} GiB")


def real_and_simulated(spec: Any, count: int) -> None:
    """Part 2 on ``count`` virtual CPUs: simulated and real peak of the step's allocations."""
    from tfplace.core.devices import DeviceName
    from tfplace.tf_graph.step_stats import allocation_peaks

    batch = FLAGS.real_batch
    small = estimate(spec, batch, [batch])
    graph = small.cost_graph
    devices, placement, run_metadata = traced_run(spec, small, count, batch)
    real = {DeviceName.parse(d).index: peak for d, peak in allocation_peaks(run_metadata).items()}
    on_device = {op: placement.assignment[op] for op in graph}
    peaks = simulated_peaks(graph, on_device, devices, trace_ranks(run_metadata, graph))
    print(
        f"\n{count} virtual CPU(s), batch {batch}, {len(graph):,} ops: peak of the step's allocations (MiB)"
    )
    columns = [(name, order) for order in ("own order", "traced order") for name in VARIANTS]
    print(f"{'':<16}{'':>10}" + "".join(f"{order:>20}" for _, order in columns))
    print(f"{'device':<16}{'real':>10}" + "".join(f"{name:>20}" for name, _ in columns))
    for d, device in enumerate(devices.names):
        row = "".join(f"{peaks[column][d] / MIB:>20.1f}" for column in columns)
        print(f"{device:<16}{real.get(d, 0) / MIB:>10.1f}{row}")


def main(argv: Sequence[str]) -> None:
    del argv
    import models

    large_model()
    counts = [int(c) for c in FLAGS.real_devices]
    if counts:
        spec = models.build_model("inception_v3", image_size=FLAGS.real_image_size, classes=10)
        for count in counts:
            real_and_simulated(spec, count)


if __name__ == "__main__":
    app.run(main)
