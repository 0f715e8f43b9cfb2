"""The flags of the ``tfplace`` commands, in their own :class:`absl.flags.FlagValues`.

:data:`COMMAND_FLAGS` keeps them apart from ``absl.flags.FLAGS`` so that the CLI can be imported
beside other absl programs; absl's own flags (``--verbosity``, ``--stderrthreshold``, ``--log_dir``,
...) stay there. The tuples at the end group the flags several commands share.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from absl import flags

from tfplace.core.device_model import DEFAULT_CALIBRATION, DEVICE_MODELS
from tfplace.core.transfer import PRESETS
from tfplace.placer import DEFAULT_PLACER, PLACERS

COMMAND_FLAGS = flags.FlagValues()  # type: ignore[no-untyped-call]
"""The flags of the ``tfplace`` commands (see :mod:`tfplace.cli`)."""


def _flag(
    define: Callable[..., flags.FlagHolder[Any]], name: str, default: Any, *args: Any, **kwargs: Any
) -> flags.FlagHolder[Any]:
    """``define(name, default, *args)`` (the help, after an enum's values) into :data:`COMMAND_FLAGS`."""
    return define(name, default, *args, flag_values=COMMAND_FLAGS, **kwargs)


# the graph and what a step runs
GRAPH = _flag(
    flags.DEFINE_string,
    "graph",
    None,
    "Saved graph: MetaGraphDef (.meta) or GraphDef (.pb binary, .pbtxt text).",
)
FETCH = _flag(
    flags.DEFINE_list,
    "fetch",
    None,
    "What one training step runs: op or tensor names, comma-separated. Default: the ops of the "
    "graph's train_op collection (a .meta file keeps collections).",
)
INIT_OP = _flag(
    flags.DEFINE_string,
    "init_op",
    None,
    "Op initializing the variables. Default: every variable's initializer.",
)
# feeds
BATCH_SIZE = _flag(
    flags.DEFINE_integer,
    "batch_size",
    None,
    "profile/place: the (large) batch size to place for; run: the batch size to run at.",
    lower_bound=1,
)
INPUTS = _flag(
    flags.DEFINE_string,
    "inputs",
    None,
    ".npz file of real inputs, one array per placeholder (named like it); a batch takes the first "
    "batch_size rows, cycling. Default: random data shaped like the placeholders.",
)
INPUT_SHAPE = _flag(
    flags.DEFINE_multi_string,
    "input_shape",
    [],
    "NAME=D0,D1,...: shape of placeholder NAME's random data, B standing for the batch size (needed "
    "for placeholders with an unknown dimension besides the first). Repeat for several.",
)
INT_HIGH = _flag(
    flags.DEFINE_integer,
    "int_high",
    2,
    "Random integers are drawn from [0, int_high): class labels, token ids.",
    lower_bound=1,
)
SEED = _flag(flags.DEFINE_integer, "seed", 0, "Seed of the random inputs.")
# profiling (Standard Evaluation)
PROFILE_BATCH_SIZES = _flag(
    flags.DEFINE_list,
    "profile_batch_sizes",
    ["1", "2", "4"],
    "Small batch sizes that fit one device, profiled to predict the costs at --batch_size.",
)
WARMUP_STEPS = _flag(
    flags.DEFINE_integer,
    "warmup_steps",
    2,
    "Untraced steps before measuring (profiling and run).",
    lower_bound=0,
)
TRACED_STEPS = _flag(
    flags.DEFINE_integer,
    "traced_steps",
    5,
    "Traced steps per profiled batch size (per-op median).",
    lower_bound=1,
)
CACHE_DIR = _flag(
    flags.DEFINE_string,
    "cache_dir",
    os.path.join(".tfplace_cache", "profiles"),
    "Profile cache; empty: always measure.",
)
CALIBRATION = _flag(
    flags.DEFINE_string,
    "calibration",
    DEFAULT_CALIBRATION,
    "The machine's CPU device model: calibrate writes it; profiling reads its MatMul row blocks "
    "when the file exists (else every MatMul is regressed on its rows as they are).",
)
TARGET_DEVICE = _flag(
    flags.DEFINE_enum,
    "target_device",
    None,
    sorted(DEVICE_MODELS),
    "Turn the measured (CPU) op times into this GPU's with a roofline model. Default: keep them.",
)
# devices
DEVICES = _flag(
    flags.DEFINE_string,
    "devices",
    None,
    "Devices to place on: TensorFlow names with ranges, comma-separated: /device:GPU:0-3, "
    "/job:worker/task:0-1/device:CPU:0.",
)
MEMORY = _flag(
    flags.DEFINE_list,
    "memory",
    None,
    "Memory of each device: one size for all (32GB, 16GiB) or one per device, comma-separated.",
)
LINK = _flag(
    flags.DEFINE_enum,
    "link",
    "pcie3_x16",
    sorted(PRESETS),
    "Transfer model of the links between devices of one host.",
)
INTER_HOST_LINK = _flag(
    flags.DEFINE_enum,
    "inter_host_link",
    "ethernet_25g",
    sorted(PRESETS),
    "Transfer model of the links between hosts.",
)
SHARED_BUS = _flag(
    flags.DEFINE_boolean, "shared_bus", False, "All transfers inside a host share one bus (one at a time)."
)
# placing
PLACER = _flag(
    flags.DEFINE_enum,
    "placer",
    DEFAULT_PLACER,
    list(PLACERS),
    "Placement algorithm: auto (the fastest simulated placement that fits, among all), celeritas "
    "(the paper's) or a baseline.",
)
PLACER_OPTION = _flag(
    flags.DEFINE_multi_string,
    "placer_option",
    [],
    "KEY=VALUE option of the placer (celeritas: exploration_range=..., cluster_memory=...; every "
    "placer: memory_model=liveness|static). Repeat for several.",
)
COPLACE_GRADIENTS = _flag(
    flags.DEFINE_bool,
    "coplace_gradients",
    True,
    "Keep each gradient op on its forward op's device (--nocoplace_gradients: place them freely).",
)
COST_GRAPH = _flag(
    flags.DEFINE_string,
    "cost_graph",
    None,
    "Cost graph JSON (.json or .json.gz, from tfplace profile). place: place it instead of profiling "
    "--graph; simulate, run: the costs to simulate with.",
)
PLACEMENT = _flag(
    flags.DEFINE_string,
    "placement",
    None,
    "Placement JSON (from tfplace place --placement_out); run: also a split plan JSON (SplitPlan.save).",
)
PRIORITY = _flag(
    flags.DEFINE_enum,
    "priority",
    "fifo",
    ["fifo", "critical_path"],
    "Which ready op a simulated device runs first.",
)
# outputs
OUT = _flag(
    flags.DEFINE_string,
    "out",
    None,
    "profile: the cost graph JSON to write (.json, or .json.gz compressed); place: the placed graph "
    "to write (.pb, .pbtxt or .meta).",
)
PLACEMENT_OUT = _flag(
    flags.DEFINE_string,
    "placement_out",
    None,
    "Write the placement as JSON (for simulate and run); a split placer's as its split plan (for run).",
)
COST_GRAPH_OUT = _flag(
    flags.DEFINE_string, "cost_graph_out", None, "Write the cost graph the placement was made with (JSON)."
)
TENSORBOARD_DIR = _flag(
    flags.DEFINE_string,
    "tensorboard_dir",
    None,
    "Write the placed graph as a TensorBoard event file there (Graphs tab, Color: Device).",
)
TIMELINE_PNG = _flag(
    flags.DEFINE_string,
    "timeline_png",
    None,
    "Draw the simulated step (ops per device, transfers, memory over time) into this image (.png, .svg, .pdf).",
)
TRACE = _flag(
    flags.DEFINE_string,
    "trace",
    None,
    "Chrome trace (chrome://tracing, ui.perfetto.dev) of the step: place, simulate: the simulated step; "
    "run: the real step, with the simulated one beside it as NAME.simulated.json.",
)
# real runs
STEPS = _flag(flags.DEFINE_integer, "steps", 10, "Timed steps (after --warmup_steps).", lower_bound=1)
CLUSTER = _flag(
    flags.DEFINE_string,
    "cluster",
    None,
    "Session target of a running cluster (grpc://host:port) for devices of other jobs or hosts. "
    "Default: virtual CPUs in-process for /device:CPU:i, loopback workers for /job:worker/task:k/device:CPU:0.",
)
VERSION = _flag(flags.DEFINE_boolean, "version", False, "Print the version of tfplace and exit.")


GRAPH_FLAGS = (GRAPH, FETCH, INIT_OP)
FEED_FLAGS = (BATCH_SIZE, INPUTS, INPUT_SHAPE, INT_HIGH, SEED)
PROFILE_FLAGS = (PROFILE_BATCH_SIZES, WARMUP_STEPS, TRACED_STEPS, CACHE_DIR, CALIBRATION, TARGET_DEVICE)
DEVICE_FLAGS = (DEVICES, MEMORY, LINK, INTER_HOST_LINK, SHARED_BUS)
