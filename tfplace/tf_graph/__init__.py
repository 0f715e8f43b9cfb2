"""TensorFlow-facing side of tfplace: import a graph, apply a placement, run it on virtual devices.

- :mod:`~tfplace.tf_graph.importer`: :func:`import_graph` reads a ``tf.Graph``, ``GraphDef``,
  ``MetaGraphDef`` or file into the structure of a cost graph;
- :mod:`~tfplace.tf_graph.constraints`: the co-location groups and device kinds TensorFlow's
  placer enforces;
- :mod:`~tfplace.tf_graph.apply`: :func:`apply_placement` writes a placement's devices into a graph;
- :mod:`~tfplace.tf_graph.session`: training steps in a v1 session on virtual CPUs, and where each
  op ran according to step stats;
- :mod:`~tfplace.tf_graph.cluster`: TensorFlow worker processes on loopback ports;
- :mod:`~tfplace.tf_graph.step_stats`: per-op costs from FULL_TRACE step stats.

Importing this package does not import TensorFlow; the functions that need it import it.
"""

from tfplace.tf_graph.apply import apply_placement, check_placement
from tfplace.tf_graph.constraints import ConstraintError, colocation_groups, op_device_kinds
from tfplace.tf_graph.importer import GraphImportError, ImportedGraph, import_graph, load_graph
from tfplace.tf_graph.session import (
    StepResults,
    device_mismatches,
    executed_devices,
    run_steps,
    virtual_cpu_config,
)
from tfplace.tf_graph.step_stats import OpTrace, collect_op_traces, op_name_for_node

__all__ = [
    "ConstraintError",
    "GraphImportError",
    "ImportedGraph",
    "OpTrace",
    "StepResults",
    "apply_placement",
    "check_placement",
    "collect_op_traces",
    "colocation_groups",
    "device_mismatches",
    "executed_devices",
    "import_graph",
    "load_graph",
    "op_device_kinds",
    "op_name_for_node",
    "run_steps",
    "virtual_cpu_config",
]
