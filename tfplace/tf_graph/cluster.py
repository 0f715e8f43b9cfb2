"""TensorFlow worker processes on the loopback interface: real gRPC transfers on one machine.

:class:`LocalCluster` starts ``num_workers`` processes, each running one ``tf.distribute.Server``
of the job ``worker`` on a free port of ``localhost``; a v1 ``Session`` on :attr:`LocalCluster.target`
then places ops on ``/job:worker/task:<i>`` and tensors crossing tasks go through gRPC.

Every process is terminated and reaped when the ``with`` block ends, also on an exception or
``KeyboardInterrupt``. A worker also exits by itself when its parent process dies (it watches its
parent), so even a killed parent leaves no server behind.

Run as ``python -m tfplace.tf_graph.cluster --spec JSON --task I`` to start one worker (that is what
:class:`LocalCluster` does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO

__all__ = ["JOB", "LocalCluster", "serve"]

JOB = "worker"
"""The job name of every worker."""

_PARENT_POLL_SECONDS = 0.5


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("localhost", port)) == 0


class LocalCluster:
    """A context manager running ``num_workers`` TensorFlow servers on loopback ports.

    Parameters
    ----------
    num_workers : int
    inter_op_threads, intra_op_threads : int
        Thread counts of each worker's sessions (0 lets TensorFlow choose). Workers share the
        machine's cores, so the default gives each worker one of each.
    start_timeout : float
        Seconds to wait for every worker to accept connections (importing TensorFlow takes a few).
    environment : mapping of str to str, optional
        Variables set in the workers' environment on top of this process's (say, a CPU allocator
        that TensorFlow reads once per process).

    Attributes
    ----------
    ports : list of int
        The port of each worker, by task index.

    Examples
    --------
    >>> with LocalCluster(2) as cluster:  # doctest: +SKIP
    ...     with tf.device(cluster.device(1)):
    ...         y = x * 2.0
    ...     with tf.compat.v1.Session(cluster.target, graph=graph) as session:
    ...         session.run(y)
    """

    def __init__(
        self,
        num_workers: int,
        *,
        inter_op_threads: int = 1,
        intra_op_threads: int = 1,
        start_timeout: float = 120.0,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"a cluster needs at least one worker, got {num_workers}")
        self.num_workers = num_workers
        self.inter_op_threads = inter_op_threads
        self.intra_op_threads = intra_op_threads
        self.start_timeout = start_timeout
        self.environment = dict(environment or {})
        self.ports: list[int] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self._files = contextlib.ExitStack()

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """``{"worker": ["localhost:P0", ...]}``, the argument of ``tf.train.ClusterSpec``."""
        return {JOB: [f"localhost:{port}" for port in self.ports]}

    @property
    def target(self) -> str:
        """The session target of task 0: ``grpc://localhost:P0``."""
        if not self.ports:
            raise RuntimeError("the cluster is not running: use it in a with block")
        return f"grpc://localhost:{self.ports[0]}"

    def device(self, task: int, kind: str = "CPU", index: int = 0) -> str:
        """The full name of a device of worker ``task``: ``/job:worker/replica:0/task:1/device:CPU:0``."""
        if not 0 <= task < self.num_workers:
            raise ValueError(f"task {task} is not a worker of this cluster (0 .. {self.num_workers - 1})")
        return f"/job:{JOB}/replica:0/task:{task}/device:{kind}:{index}"

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [process.pid for process in self._processes]

    def __enter__(self) -> LocalCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        self.ports = [_free_port() for _ in range(self.num_workers)]
        spec = json.dumps(self.cluster_spec)
        for task in range(self.num_workers):
            log = self._files.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed by close())
            self._logs.append(log)
            command = [
                sys.executable,
                "-m",
                "tfplace.tf_graph.cluster",
                "--spec",
                spec,
                "--task",
                str(task),
                "--inter-op-threads",
                str(self.inter_op_threads),
                "--intra-op-threads",
                str(self.intra_op_threads),
            ]
            env = {
                **os.environ,
                "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                **self.environment,
            }
            self._processes.append(
                subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
            )
        deadline = time.monotonic() + self.start_timeout
        waiting = set(range(self.num_workers))
        while waiting:
            for task in sorted(waiting):
                if self._processes[task].poll() is not None:
                    raise RuntimeError(
                        f"worker {task} exited with {self._processes[task].returncode}:\n{self._log(task)}"
                    )
                if _accepts(self.ports[task]):
                    waiting.discard(task)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(
                    f"workers {sorted(waiting)} did not accept connections within {self.start_timeout} s"
                )
            if waiting:
                time.sleep(0.2)

    def _log(self, task: int) -> str:
        log = self._logs[task]
        log.seek(0)
        return log.read().decode("utf-8", "replace")[-4000:]

    def close(self) -> None:
        """Terminate and reap every worker (idempotent)."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._files.close()
        self._processes = []
        self._logs = []
        self.ports = []


def serve(spec: dict[str, list[str]], task: int, inter_op_threads: int, intra_op_threads: int) -> None:
    """Run the server of ``task`` until terminated or orphaned (the body of one worker process).

    The server runs in TensorFlow's own threads; this thread only watches the parent process and
    exits the process when the parent has died, so that no worker outlives the cluster that started it.
    """
    import tensorflow as tf

    parent = os.getppid()
    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=inter_op_threads, intra_op_parallelism_threads=intra_op_threads
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(spec), job_name=JOB, task_index=task, config=config, start=True
    )
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    del server
    os._exit(0)  # skip interpreter teardown, which can wait on the server's threads


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one TensorFlow worker of a LocalCluster.")
    parser.add_argument(
        "--spec", required=True, help='cluster spec as JSON: {"worker": ["localhost:P", ...]}'
    )
    parser.add_argument("--task", type=int, required=True)
    parser.add_argument("--inter-op-threads", type=int, default=1)
    parser.add_argument("--intra-op-threads", type=int, default=1)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        serve(json.loads(args.spec), args.task, args.inter_op_threads, args.intra_op_threads)


if __name__ == "__main__":
    main()
