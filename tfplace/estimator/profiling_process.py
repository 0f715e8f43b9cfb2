"""Where the profiler's sessions run: by default a worker process of their own, under TensorFlow's
BFC allocator for the CPU.

Under the default CPU allocator a traced step's own records take the holes its freed tensors
leave, so its allocating kernels write to memory a real step keeps in the caches: the small
Transformer's traced kernels summed 0.47-1.1 us per op above its untraced step, and
``benchmarks/fidelity.py`` simulated its one-device steps 12-24% over (sessions 13-19,
``docs/experiments.md``, "The heap under a traced step"). Under ``TF_CPU_ALLOCATOR_USE_BFC=true``
tensors come from a pool of their own and the traced kernels add up to the untraced step, but
TensorFlow reads that variable once per process, and the user's own steps ran up to 13% slower
under it. So the profile is taken in a worker process started with it
(:class:`~tfplace.tf_graph.cluster.LocalCluster`, one worker, fresh for each session), while the
user's process and the steps the plan is for keep their allocator: in session 19 the
Transformer's one-device fidelity rows went from +12..+24% to -8..+4% (three runs,
``results/README.md``).

A graph with ops that run Python of the client process (``tf.py_function``, ``tf.numpy_function``,
in the step or its initializer) cannot run on a worker; it is profiled in this process
(:func:`profiling_process_for`). So is a graph on a machine with GPUs: their allocator is BFC
already, and a second process would compete for their memory with this one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from tfplace.estimator.thread_accounting import OWN_TASKS

__all__ = [
    "CLIENT_OP_TYPES",
    "PROFILED_KIND",
    "PROFILING_PROCESSES",
    "WORKER_ENVIRONMENT",
    "ProfilingProcess",
    "profiling_process_for",
    "profiling_session",
]

ProfilingProcess = Literal["worker", "this"]
"""``"worker"``: a one-worker cluster of its own per session, under :data:`WORKER_ENVIRONMENT`;
``"this"``: this process, as it is."""

PROFILING_PROCESSES: tuple[ProfilingProcess, ...] = ("worker", "this")

PROFILED_KIND: dict[ProfilingProcess, str] = {"worker": "loopback", "this": "virtual"}
"""The CPU device kind (:data:`tfplace.core.device_model.CPU_KINDS`) a profile's steps ran as: the
profiling worker is a loopback worker of its own, this process's CPU a virtual CPU. Its calibrated
step and feed costs are what a profiled untraced step paid beyond its ops
(:meth:`tfplace.core.device_model.CpuCalibration.op_overhead`)."""

WORKER_ENVIRONMENT = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
"""Set in the profiling worker's environment: TensorFlow's BFC allocator for the CPU."""

CLIENT_OP_TYPES = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
"""Op types whose kernel calls back into the Python of the process that built the graph."""


def profiling_process_for(
    op_types: Iterable[str], requested: ProfilingProcess, *, gpus: bool = False
) -> ProfilingProcess:
    """``requested``, except ``"this"`` for a step with an op of :data:`CLIENT_OP_TYPES` (it cannot
    run on a worker) and on a machine with ``gpus``."""
    if requested not in PROFILING_PROCESSES:
        raise ValueError(
            f"process must be one of {', '.join(map(repr, PROFILING_PROCESSES))}, got {requested!r}"
        )
    return "this" if gpus or CLIENT_OP_TYPES.intersection(op_types) else requested


@contextlib.contextmanager
def profiling_session(graph: Any, config: Any, process: ProfilingProcess) -> Iterator[tuple[Any, Path]]:
    """A ``tf.compat.v1.Session`` of ``graph`` under ``config`` in ``process``, and the
    ``/proc/<pid>/task`` directory of the process that runs its ops (whose threads'
    preemptions :mod:`tfplace.estimator.thread_accounting` counts). A worker gets the config's
    thread counts, and is terminated when the block ends."""
    import tensorflow as tf

    from tfplace.tf_graph.cluster import LocalCluster

    if process == "this":
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            yield session, OWN_TASKS
        return
    worker = LocalCluster(
        1,
        inter_op_threads=config.inter_op_parallelism_threads,
        intra_op_threads=config.intra_op_parallelism_threads,
        environment=WORKER_ENVIRONMENT,
    )
    with worker, tf.compat.v1.Session(worker.target, graph=graph, config=config) as session:
        yield session, Path(f"/proc/{worker.pids[0]}/task")
