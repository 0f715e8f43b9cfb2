"""Which ops a FULL_TRACE step makes look slower than they run: chains of one op kind and size.

``tfplace calibrate`` stores one per-op overhead, fitted on chains of tiny dense layers
(:func:`tfplace.estimator.calibration.op_chains`, 256-byte activations). This benchmark asks
whether that number holds for larger tensors. For each op kind and output size, two chains of
``--lengths`` ops each run in a fresh session under the profiler's config and are measured as
``benchmarks/op_overhead_by_model.py`` measures a model (:func:`measure`): traced steps as the
profiler takes them (``--untraced_before_trace``), then untraced steps in the executor's steady
state, the profiler's statistic on both sides, and the process's minor page faults per step of
each kind. The kinds:

- ``forwarding``: ``Mul`` and ``AddV2`` by scalars in turn, each reusing its input's buffer (no
  allocation);
- ``allocating``: ``z = y * 0.5; y = z + y``: the ``Mul`` allocates a new buffer (its input has a
  second consumer), the ``AddV2`` reuses ``z``'s (half the ops allocate);
- ``matmul``: ``y = y @ w`` with a square ``w``: every op allocates its output.

Per op, by the slope between the two lengths: the untraced step's time, the traced ops' node time
(``all_end_rel``) and kernel time (``op_start_rel`` .. ``op_end_rel``, what profiles count), the
overhead a real step needs beyond each (untraced minus traced; ``tfplace calibrate`` stores the
kernel one), and the page faults per traced and untraced step of the longer chain. Run from the
repository root, on a quiet machine:

    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/trace_inflation.py
    PYTHONPATH=. TFPLACE_QUIET=1 .venv/bin/python benchmarks/trace_inflation.py --chain_kinds=allocating --sizes=65536
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from absl import app, flags

from benchmarks.op_overhead_by_model import FLAGS, measure

flags.DEFINE_list("chain_kinds", ["forwarding", "allocating", "matmul"], "Op kinds of the chains.")
flags.DEFINE_list("sizes", ["1024", "16384", "65536", "262144"], "Bytes of each op's output.")
flags.DEFINE_list("lengths", ["200", "400"], "Ops of the two chains of each kind and size.")

Chain = tuple[Any, Any, Any, dict[Any, Any]]


def _chain(kind: str, size_bytes: int, length: int) -> Chain:
    """A graph of ``length`` ops of ``kind`` whose outputs hold ``size_bytes`` each, its fetch,
    initializer and (empty) feeds."""
    import numpy as np
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.device("/device:CPU:0"):
        if kind == "matmul":
            side = max(int(math.sqrt(size_bytes / 4)), 1)
            y = tf.compat.v1.Variable(tf.ones([side, side]) / side, name="chain_input").read_value()
            weight = tf.constant(np.eye(side, dtype=np.float32) * 0.999)
            for _ in range(length):
                y = tf.matmul(y, weight)
        else:
            y = tf.compat.v1.Variable(tf.ones([max(size_bytes // 4, 1)]), name="chain_input").read_value()
            scale, shift, half = tf.constant(0.999), tf.constant(0.001), tf.constant(0.5)
            steps: dict[str, Callable[[Any, int], Any]] = {
                "forwarding": lambda y, i: y * scale if i % 2 == 0 else y + shift,
                "allocating": lambda y, i: y * half + y,
            }
            if kind not in steps:
                raise ValueError(f"unknown chain kind {kind!r}: forwarding, allocating or matmul")
            for index in range(length // 2 if kind == "allocating" else length):
                y = steps[kind](y, index)
        fetch = tf.reduce_sum(y)
        initializer = tf.compat.v1.global_variables_initializer()
    return graph, fetch, initializer, {}


def main(argv: Sequence[str]) -> None:
    del argv
    short, long = (int(length) for length in FLAGS.lengths)
    print(f"load {os.getloadavg()[0]:.2f}; slopes per op between chains of {short} and {long} ops")
    print(
        "kind,output bytes,untraced us,traced node us,traced kernel us,needed by node us,"
        "needed by kernel us,faults per traced step,faults per untraced step"
    )
    for kind in FLAGS.chain_kinds:
        for size in (int(size) for size in FLAGS.sizes):
            first, second = (measure(*_chain(kind, size, length)) for length in (short, long))
            ops = second["ops"] - first["ops"]
            slope = {key: (second[key] - first[key]) / ops * 1e6 for key in ("untraced", "node", "kernel")}
            print(
                f"{kind},{size},{slope['untraced']:.2f},{slope['node']:.2f},{slope['kernel']:.2f},"
                f"{slope['untraced'] - slope['node']:+.2f},{slope['untraced'] - slope['kernel']:+.2f},"
                f"{second['traced_faults']:.0f},{second['untraced_faults']:.0f}"
            )


if __name__ == "__main__":
    app.run(main)
