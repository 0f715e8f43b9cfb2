"""The ``tfplace`` command: profile, place, simulate and run a saved TensorFlow graph.

::

    tfplace profile  --graph model.meta --batch_size 512 --out graph.json.gz
    tfplace place    --graph model.meta --devices /device:GPU:0-3 --memory 32GB --batch_size 512 \\
                     --out placed.pb --placement_out placement.json
    tfplace simulate --cost_graph graph.json.gz --placement placement.json --timeline_png step.png
    tfplace run      --graph model.meta --placement placement.json --batch_size 512 --trace step.json

``tfplace COMMAND --help`` lists a command's flags; ``docs/cli.md`` describes them all. A saved graph
is fed random data shaped like its placeholders, or real inputs from ``--inputs data.npz``
(:mod:`tfplace.tf_graph.feeds`). Results are printed as tables on standard output; progress and
notes are absl log records on standard error (INFO by default; ``--verbosity=-1`` keeps only
warnings). Bad input ends the command with a one-line message and exit status 1 (2 for a misused
flag); ``--verbosity=1`` adds the traceback.

The commands' flags live in their own :class:`absl.flags.FlagValues`, :data:`COMMAND_FLAGS`, so that
this module can be imported beside other absl programs; absl's own flags (``--verbosity``,
``--stderrthreshold``, ``--log_dir``, ...) stay in ``absl.flags.FLAGS``.
"""

from __future__ import annotations

import difflib
import json
import logging as std_logging
import os
import re
import statistics
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from absl import app, flags, logging

from tfplace._version import __version__
from tfplace.core.costgraph import CostGraph, load_json, save_json
from tfplace.core.device_model import DEVICE_MODELS
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.core.transfer import PRESETS, TransferModel
from tfplace.core.units import format_bytes, format_seconds
from tfplace.placer import DEFAULT_PLACER, PLACERS
from tfplace.tf_graph.export import GRAPH_SUFFIXES

__all__ = ["COMMANDS", "COMMAND_FLAGS", "InputError", "UsageError", "execute", "main", "parse", "run"]

COMMAND_FLAGS = flags.FlagValues()  # type: ignore[no-untyped-call]
"""The flags of the ``tfplace`` commands (see the module docstring)."""


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
    "KEY=VALUE option of the placer (celeritas: exploration_range=..., cluster_memory=...). Repeat for several.",
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
    flags.DEFINE_string, "placement_out", None, "Write the placement as JSON (for simulate and run)."
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


class UsageError(Exception):
    """The command line is wrong (unknown command or flag, missing or conflicting flags): exit status 2."""

    def __init__(self, message: str, command: str = "") -> None:
        super().__init__(message)
        self.command = command


class InputError(ValueError):
    """What the command line names is wrong (a missing file, a fetch the graph lacks): exit status 1."""


@dataclass(frozen=True)
class Command:
    """A ``tfplace`` command: what it does, an example, its flags and which of them it needs."""

    summary: str
    example: str
    holders: tuple[flags.FlagHolder[Any], ...]
    required: tuple[flags.FlagHolder[Any], ...]
    handler: Callable[[], int]

    @property
    def names(self) -> set[str]:
        """Names of the command's flags."""
        return {holder.name for holder in self.holders}


_GRAPH_FLAGS = (GRAPH, FETCH, INIT_OP)
_FEED_FLAGS = (BATCH_SIZE, INPUTS, INPUT_SHAPE, INT_HIGH, SEED)
_PROFILE_FLAGS = (PROFILE_BATCH_SIZES, WARMUP_STEPS, TRACED_STEPS, CACHE_DIR, TARGET_DEVICE)
_DEVICE_FLAGS = (DEVICES, MEMORY, LINK, INTER_HOST_LINK, SHARED_BUS)
_LOGGING_FLAGS = ("verbosity", "stderrthreshold", "logtostderr", "alsologtostderr", "log_dir")


# ---------------------------------------------------------------------------------------------------
# command line


def parse(argv: Sequence[str]) -> list[str]:
    """Parse ``argv`` (program name first) into the flags; return ``[program, command, ...]``.

    ``command`` is one of :data:`COMMANDS`, ``"help"`` (followed by the command asked about, or
    ``""``), ``"helpfull"`` or ``"version"``.

    Raises
    ------
    UsageError
        An unknown command or flag, a bad flag value, a flag the command does not take, a missing
        required flag, or a stray argument.
    """
    argv = list(argv)
    program, words = argv[0], argv[1:]
    named = [w for w in words if not w.startswith("-")]
    topic = next((w for w in named if w in COMMANDS), "")
    if "--helpfull" in words:
        flags.FLAGS.mark_as_parsed()  # absl's app expects it; help needs no flag values
        return [program, "helpfull"]
    if any(w in ("-h", "-help", "--help", "--helpshort") for w in words) or named[:1] == ["help"]:
        asked = named[1] if named[:1] == ["help"] and len(named) > 1 else topic
        if asked and asked not in COMMANDS:
            raise UsageError(f"no help on {asked!r}: the commands are {', '.join(COMMANDS)}")
        flags.FLAGS.mark_as_parsed()
        return [program, "help", asked]
    COMMAND_FLAGS.unparse_flags()
    try:
        rest = COMMAND_FLAGS(argv, known_only=True)
        positional = flags.FLAGS(rest)[1:]
    except flags.Error as error:
        raise UsageError(str(error), topic) from None
    if VERSION.value:
        return [program, "version"]
    if not positional:
        raise UsageError(f"give a command: {', '.join(COMMANDS)} (tfplace --help describes them)")
    name, extra = positional[0], positional[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; the commands are {', '.join(COMMANDS)}"
        raise UsageError(f"unknown command {name!r}{hint}")
    command = COMMANDS[name]
    if extra:
        raise UsageError(f"unexpected argument {extra[0]!r} (flags are written --name=value)", name)
    taken = command.names | {VERSION.name}
    stray = [name for name in COMMAND_FLAGS if COMMAND_FLAGS[name].present and name not in taken]
    if stray:
        raise UsageError(f"--{stray[0]} is not a flag of tfplace {name}", name)
    missing = [holder.name for holder in command.required if holder.value in (None, [])]
    if missing:
        raise UsageError(f"give --{' and --'.join(missing)} (tfplace {name} --help lists the flags)", name)
    return [program, name]


def help_text(command: str = "", *, full: bool = False) -> str:
    """The help of ``command``, or the overview of all commands."""
    if command:
        spec = COMMANDS[command]
        lines = [f"tfplace {command}: {spec.summary}", "", "example:", f"  {spec.example}", "", "flags:"]
        for holder in spec.holders:
            lines += _flag_help(holder, required=holder.name in {r.name for r in spec.required})
        lines += [
            "",
            f"absl logging flags: {', '.join('--' + f for f in _LOGGING_FLAGS)} (tfplace --helpfull).",
        ]
        return "\n".join(lines)
    lines = [
        f"tfplace {__version__}: device placement (Celeritas) for TensorFlow graphs too large for one device.",
        "",
        "usage: tfplace COMMAND --flag=value ...",
        "",
        "commands:",
        *(f"  {name:9s} {spec.summary}" for name, spec in COMMANDS.items()),
        "",
        "tfplace COMMAND --help lists the flags of a command; tfplace --version prints the version.",
        "Progress and notes are logged on standard error: --verbosity=-1 keeps only warnings.",
    ]
    if full:
        for name in COMMANDS:
            lines += ["", help_text(name)]
        lines += ["", "absl flags:", flags.FLAGS.get_help()]
    return "\n".join(lines)


def _flag_help(holder: flags.FlagHolder[Any], *, required: bool) -> list[str]:
    flag = COMMAND_FLAGS[holder.name]
    default = flag.default
    if required:
        heading = f"  --{holder.name} (required)"
    elif default in (None, []):
        heading = f"  --{holder.name}"
    else:
        shown = (
            ",".join(default)
            if isinstance(default, list)
            else str(default).lower()
            if isinstance(default, bool)
            else default
        )
        heading = f"  --{holder.name} (default: {shown})"
    text = re.sub(r";\s+repeat this option to specify a list of values$", "", flag.help)
    return [heading, *textwrap.wrap(text, width=96, initial_indent="      ", subsequent_indent="      ")]


def run() -> None:
    """The ``tfplace`` console script (``python -m tfplace`` too): absl's app around :func:`main`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO and WARNING lines
    app.run(main, flags_parser=_parse_or_exit)


def _parse_or_exit(argv: list[str]) -> list[str]:
    try:
        return parse(argv)
    except UsageError as error:
        _print_error(error.command, str(error))
        sys.exit(2)


def execute(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the command in this process; return the exit status.

    What :func:`run` does, without absl's process setup (its log handler, INFO verbosity by
    default): for tests and for calling tfplace from Python.
    """
    try:
        args = parse(argv)
    except UsageError as error:
        _print_error(error.command, str(error))
        return 2
    return main(args)


def main(argv: Sequence[str]) -> int:
    """Run the command ``argv[1]`` with the parsed flags; the exit status.

    Errors of the input (missing files, unknown fetches, malformed devices, graphs TensorFlow
    rejects) are printed as one line; the traceback is logged at DEBUG (``--verbosity=1``).
    """
    command = argv[1]
    if command in ("help", "helpfull"):
        print(help_text(argv[2] if len(argv) > 2 else "", full=command == "helpfull"))
        return 0
    if command == "version":
        print(f"tfplace {__version__}")
        return 0
    std_logging.getLogger("tensorflow").setLevel(
        std_logging.DEBUG if logging.get_verbosity() >= logging.DEBUG else std_logging.ERROR
    )
    try:
        return COMMANDS[command].handler()
    except UsageError as error:
        _print_error(command, str(error))
        return 2
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] != "tensorflow":
            raise
        _print_error(command, "this needs TensorFlow: pip install 'tfplace[cpu]' (or 'tfplace[gpu]')")
        return 1
    except _input_errors() as error:
        logging.debug("tfplace %s failed", command, exc_info=True)
        _print_error(command, _one_line(error))
        return 1


def _input_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report bad input, TensorFlow's among them once it is imported."""
    errors: tuple[type[BaseException], ...] = (ValueError, OSError)
    tf = sys.modules.get("tensorflow")
    return (*errors, tf.errors.OpError) if tf is not None else errors


def _one_line(error: BaseException) -> str:
    """The line of an error message that says what went wrong.

    TensorFlow's run errors start with ``Graph execution error:`` and a stack of where the node
    was defined, and end with the cause and ``[[node]]``: their last line that is not ``[[...]]``.
    """
    if isinstance(error, FileNotFoundError) and error.filename:
        return f"{error.filename}: no such file"
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    causes = [line for line in lines if not line.startswith("[[")]
    return causes[-1] if hasattr(error, "node_def") and causes else lines[0]


def _print_error(command: str, message: str) -> None:
    prefix = f"tfplace {command}" if command else "tfplace"
    print(f"{prefix}: error: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# inputs


def _existing(holder: flags.FlagHolder[Any]) -> str:
    """The file a flag names, checked to exist."""
    path = str(holder.value)
    if not os.path.isfile(path):
        raise InputError(f"--{holder.name} {path}: no such file")
    return path


def _refuse(given: Sequence[flags.FlagHolder[Any]], reason: str) -> None:
    """Fail when any of ``given`` was passed: ``reason`` says why it does not apply."""
    present = [holder.name for holder in given if holder.present]
    if present:
        raise UsageError(f"--{present[0]} {reason}")


def _load_graph() -> Any:
    from tfplace.tf_graph.importer import load_graph

    logging.info("tfplace: reading %s", GRAPH.value)
    return load_graph(_existing(GRAPH))


def _fetches(graph: Any) -> list[str]:
    """``--fetch`` checked against the graph, or the graph's ``train_op`` collection."""
    names = list(FETCH.value or [])
    if not names:
        names = list(dict.fromkeys(op.name for op in graph.get_collection("train_op")))
        if not names:
            raise InputError("the graph has no train_op collection: give --fetch (the train op's name)")
        logging.info("tfplace: fetching %s (the graph's train_op collection)", ", ".join(names))
    ops = [op.name for op in graph.get_operations()]
    for name in names:
        try:
            graph.as_graph_element(name)
        except (KeyError, ValueError):
            close = difflib.get_close_matches(name.split(":")[0], ops, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"--fetch {name}: the graph has no op or tensor of that name{hint}") from None
    return names


def _feed_fn(graph: Any, fetches: Sequence[str]) -> Callable[[int], dict[str, Any]]:
    """Real inputs from ``--inputs``, else random data (``--input_shape``, ``--int_high``, ``--seed``)."""
    from tfplace.tf_graph.feeds import BATCH, needed_placeholders, npz_feed_fn, random_feed_fn

    placeholders = needed_placeholders(graph, fetches)
    if INPUTS.value:
        _refuse([INPUT_SHAPE, INT_HIGH, SEED], "shapes random inputs; with --inputs the arrays are fed")
        return npz_feed_fn(placeholders, _existing(INPUTS))
    shapes: dict[str, list[int | str]] = {}
    for item in INPUT_SHAPE.value:
        name, _, dims = item.partition("=")
        try:
            shapes[name.strip()] = [BATCH if d.strip() == BATCH else int(d) for d in dims.split(",")]
        except ValueError:
            raise UsageError(f"--input_shape {item}: write NAME=D0,D1,... with integers or {BATCH}") from None
    fed = ", ".join(f"{p.name} ({p.dtype})" for p in placeholders) or "nothing"
    logging.info("tfplace: feeding random data to %s", fed)
    return random_feed_fn(placeholders, shapes=shapes, int_high=INT_HIGH.value, seed=SEED.value)


def _profiling_options() -> dict[str, Any]:
    """Keyword options of :func:`tfplace.api.estimate_costs` from the flags."""
    try:
        sizes = [int(b) for b in PROFILE_BATCH_SIZES.value]
    except ValueError:
        raise UsageError("--profile_batch_sizes: write integers like 1,2,4") from None
    return {
        "profile_batch_sizes": sizes,
        "init_op": INIT_OP.value,
        "warmup_steps": WARMUP_STEPS.value,
        "traced_steps": TRACED_STEPS.value,
        "cache_dir": CACHE_DIR.value or None,
    }


def _named(cost_graph: CostGraph) -> CostGraph:
    """``cost_graph`` named after the ``--graph`` file (``cnn`` for ``cnn.meta``) unless it has a name."""
    if cost_graph.graph.get("name") in (None, "", "graph") and GRAPH.value:
        cost_graph.graph["name"] = os.path.splitext(os.path.basename(GRAPH.value))[0]
    return cost_graph


def _on_target(cost_graph: CostGraph) -> CostGraph:
    """``cost_graph`` with op times of ``--target_device`` when it is given."""
    if not TARGET_DEVICE.value:
        return cost_graph
    converted = cost_graph.graph.get("device_model")
    if converted:
        raise InputError(f"the cost graph already has {converted} op times: leave out --target_device")
    from tfplace.core.device_model import convert_graph, device_model

    return convert_graph(cost_graph, device_model(TARGET_DEVICE.value))


def _device_set() -> DeviceSet:
    memory = MEMORY.value
    return DeviceSet.parse(
        DEVICES.value,
        memory[0] if len(memory) == 1 else memory,
        intra_host=TransferModel.preset(LINK.value),
        inter_host=TransferModel.preset(INTER_HOST_LINK.value),
        shared_bus=SHARED_BUS.value,
    )


def _placer_options() -> dict[str, Any]:
    """``--placer_option KEY=VALUE`` as keyword options; values read as JSON (numbers, booleans) or text."""
    options: dict[str, Any] = {}
    for item in PLACER_OPTION.value:
        key, equals, text = item.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--placer_option {item}: write KEY=VALUE")
        try:
            options[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            options[key.strip()] = text
    return options


def _read_cost_graph() -> CostGraph:
    graph = load_json(_existing(COST_GRAPH))
    logging.info("tfplace: read the costs of %d ops from %s", len(graph), COST_GRAPH.value)
    return graph


def _check_suffix(holder: flags.FlagHolder[Any], suffixes: tuple[str, ...], what: str) -> None:
    if holder.value and not str(holder.value).endswith(suffixes):
        raise UsageError(f"--{holder.name} {holder.value}: {what} is written as {' or '.join(suffixes)}")


# ---------------------------------------------------------------------------------------------------
# outputs


def _simulated(cost_graph: CostGraph, placement: Placement, *, record: bool) -> Any:
    """The simulated step of ``placement``'s devices for the ops of ``cost_graph``."""
    from tfplace.simulator import simulate

    missing = [op for op in cost_graph if op not in placement.assignment]
    if missing:
        raise InputError(
            f"the placement has no device for {len(missing)} ops of the cost graph ({', '.join(missing[:3])}): "
            "was it made for another graph?"
        )
    step = {op: placement.assignment[op] for op in cost_graph}
    return simulate(cost_graph, step, placement.devices, priority=PRIORITY.value, record=record)


def _write_pictures(result: Any, placement: Placement, cost_graph: CostGraph) -> list[str]:
    """``--trace`` and ``--timeline_png`` of a simulated step; what was written."""
    written = []
    if TRACE.value:
        from tfplace.simulator import to_chrome_trace

        to_chrome_trace(result, placement.devices, TRACE.value)
        written.append(f"Chrome trace of the simulated step: {TRACE.value}")
    if TIMELINE_PNG.value:
        from tfplace.plots import plot_timeline

        name = cost_graph.graph.get("name") or "graph"
        batch = cost_graph.graph.get("batch_size")
        title = f"{name}{f' at batch {batch}' if batch else ''}, {placement.placer or 'placement'} on {len(placement.devices)} devices"
        op_types = {op: str(attrs.get("op_type") or "?") for op, attrs in cost_graph.nodes(data=True)}
        plot_timeline(result, placement.devices, TIMELINE_PNG.value, op_types=op_types, title=title)
        written.append(f"timeline of the simulated step: {TIMELINE_PNG.value}")
    return written


def _write_placed_graph(graph: Any, placement: Placement) -> list[str]:
    """``--out`` and ``--tensorboard_dir``: ``graph`` with the placement's devices; what was written."""
    if not (OUT.value or TENSORBOARD_DIR.value):
        return []
    from tfplace.tf_graph.export import write_graph, write_tensorboard_graph

    placement.apply(graph)
    written = []
    if OUT.value:
        write_graph(graph, OUT.value)
        written.append(f"placed graph: {OUT.value}")
    if TENSORBOARD_DIR.value:
        event_file = write_tensorboard_graph(graph, TENSORBOARD_DIR.value)
        written.append(f"TensorBoard graph: {event_file} (tensorboard --logdir {TENSORBOARD_DIR.value})")
    return written


def _report(table: str, written: Sequence[str]) -> None:
    print(table)
    for line in written:
        print(f"wrote {line}")


def _cost_graph_table(cost_graph: CostGraph, source: str, top: int = 10) -> str:
    """The cost graph in a few lines: totals, then its most expensive ops."""
    from tfplace.core.costgraph import graph_memory
    from tfplace.core.tables import format_table

    attrs = dict(cost_graph.nodes(data=True))
    compute = sum(a["compute_time"] for a in attrs.values())
    memory = graph_memory(cost_graph)
    meta = cost_graph.graph
    ranked = sorted(attrs, key=lambda op: -attrs[op]["compute_time"])[:top]
    rows = [("op", "type", "time", "share", "outputs", "persistent")]
    rows += [
        (
            op,
            str(attrs[op].get("op_type") or "?"),
            format_seconds(attrs[op]["compute_time"]),
            f"{attrs[op]['compute_time'] / compute:.0%}" if compute else "-",
            format_bytes(sum(attrs[op]["output_sizes"])),
            format_bytes(attrs[op]["persistent_bytes"]),
        )
        for op in ranked
    ]
    times = f" ({meta['device_model']} times)" if meta.get("device_model") else ""
    heading = (
        f"{meta.get('name') or 'graph'} at batch {meta.get('batch_size', '?')}: {len(cost_graph):,} ops, "
        f"{format_seconds(compute)} of compute{times}, {format_bytes(memory)} of memory if nothing were freed; "
        f"profiled at batch {', '.join(map(str, meta.get('profile_batch_sizes', [])))} ({source})"
    )
    return f"{heading}\n\nthe {len(ranked)} ops taking the most time:\n{format_table(rows, left=2)}"


# ---------------------------------------------------------------------------------------------------
# commands


def _profile() -> int:
    """``tfplace profile``: Standard Evaluation of a saved graph, written as a cost graph."""
    from tfplace.api import estimate_costs

    _check_suffix(OUT, (".json", ".json.gz"), "a cost graph")
    graph = _load_graph()
    fetches = _fetches(graph)
    estimate = estimate_costs(
        graph, fetches, _feed_fn(graph, fetches), BATCH_SIZE.value, **_profiling_options()
    )
    cost_graph = _on_target(_named(estimate.cost_graph))
    save_json(cost_graph, OUT.value)
    source = (
        "read from the cache"
        if estimate.profile.from_cache
        else f"measured in {format_seconds(estimate.profile.profiling_seconds)}"
    )
    _report(_cost_graph_table(cost_graph, source), [f"cost graph: {OUT.value}"])
    return 0


def _place() -> int:
    """``tfplace place``: place a saved graph (profiled here) or a cost graph, and write the results."""
    if not (GRAPH.value or COST_GRAPH.value):
        raise UsageError("give --graph (profiled here) or --cost_graph (from tfplace profile)")
    if not GRAPH.value:
        _refuse([OUT, TENSORBOARD_DIR], "writes the placed graph: give --graph too")
    _check_suffix(OUT, GRAPH_SUFFIXES, "a placed graph")
    devices = _device_set()
    options = _placer_options()
    graph = _load_graph() if GRAPH.value else None
    if COST_GRAPH.value:
        _refuse(
            _FEED_FLAGS[1:] + _PROFILE_FLAGS[:-1] + (FETCH, INIT_OP),
            "applies to profiling; with --cost_graph nothing is profiled",
        )
        placement = _place_cost_graph(graph, devices, options)
    else:
        from tfplace.api import place

        if BATCH_SIZE.value is None:
            raise UsageError("give --batch_size, the batch size to place for")
        fetches = _fetches(graph)
        placement = place(
            graph,
            fetches,
            _feed_fn(graph, fetches),
            devices,
            batch_size=BATCH_SIZE.value,
            placer=PLACER.value,
            placer_options=options,
            target_device=TARGET_DEVICE.value,
            **_profiling_options(),
        )
    assert placement.cost_graph is not None
    cost_graph = _named(placement.cost_graph)
    if "GPU" in {device.kind for device in devices} and not cost_graph.graph.get("device_model"):
        logging.warning(
            "tfplace: the op times are those measured where the graph was profiled; if that was not "
            "the target GPU, give --target_device (%s)",
            ", ".join(DEVICE_MODELS),
        )
    written = []
    if PLACEMENT_OUT.value:
        placement.save(PLACEMENT_OUT.value)
        written.append(f"placement: {PLACEMENT_OUT.value}")
    if COST_GRAPH_OUT.value:
        save_json(cost_graph, COST_GRAPH_OUT.value)
        written.append(f"cost graph: {COST_GRAPH_OUT.value}")
    if graph is not None:
        written += _write_placed_graph(graph, placement)
    if TRACE.value or TIMELINE_PNG.value:
        written += _write_pictures(_simulated(cost_graph, placement, record=True), placement, cost_graph)
    _report(placement.summary(), written)
    return 0


def _place_cost_graph(graph: Any, devices: DeviceSet, options: dict[str, Any]) -> Placement:
    """Place ``--cost_graph``; with ``graph``, extend the placement to its ops outside the step."""
    from tfplace.api import place_costs

    cost_graph = _on_target(_read_cost_graph())
    batch = cost_graph.graph.get("batch_size")
    if BATCH_SIZE.value is not None and batch is not None and BATCH_SIZE.value != batch:
        raise InputError(
            f"--cost_graph holds the costs at batch {batch}; profile again for --batch_size {BATCH_SIZE.value}"
        )
    structure = None
    if graph is not None:
        from tfplace.tf_graph.importer import import_graph

        structure = import_graph(graph).cost_graph
        foreign = [op for op in cost_graph if op not in structure]
        if foreign:
            raise InputError(
                f"the cost graph has {len(foreign)} ops the graph lacks ({', '.join(foreign[:3])}): "
                "was it profiled from another graph?"
            )
    return place_costs(cost_graph, devices, structure=structure, placer=PLACER.value, placer_options=options)


def _simulate() -> int:
    """``tfplace simulate``: score a placement on a cost graph."""
    from dataclasses import replace

    cost_graph = _read_cost_graph()
    placement = Placement.load(_existing(PLACEMENT))
    result = _simulated(cost_graph, placement, record=bool(TRACE.value or TIMELINE_PNG.value))
    step = {op: placement.assignment[op] for op in cost_graph}
    scored = replace(placement.with_simulation(result), assignment=step)
    lines = [
        scored.summary(),
        f"transfers: {result.transfers:,} tensors, {format_bytes(result.bytes_moved)}, "
        f"{format_seconds(result.transfer_seconds)} on the links (priority {PRIORITY.value})",
    ]
    lines += [f"out of memory: {event}" for event in result.oom] or ["out of memory: no device"]
    _report("\n".join(lines), _write_pictures(result, placement, cost_graph))
    return 0


def _run() -> int:
    """``tfplace run``: run a placed graph for real and compare its step time with the estimate."""
    from tfplace.core.tables import format_table
    from tfplace.runner import run_placement

    placement = _load_placement_or_plan(_existing(PLACEMENT))
    if COST_GRAPH.value:
        placement.cost_graph = _read_cost_graph()
    if not CLUSTER.value:
        _check_local_devices(placement)
    graph = _load_graph()
    fetches = _fetches(graph)
    report = run_placement(
        graph,
        placement,
        fetches,
        _feed_fn(graph, fetches),
        batch_size=BATCH_SIZE.value,
        steps=STEPS.value,
        warmup_steps=WARMUP_STEPS.value,
        cluster=CLUSTER.value,
        init_op=INIT_OP.value,
        trace_path=TRACE.value,
    )
    rows: list[tuple[str, ...]] = [("steps", "count", "mean", "median", "min", "max")]
    for label, seconds in (
        ("warm-up (dropped)", report.warmup_seconds),
        ("timed", report.step_seconds),
        ("traced (FULL_TRACE)", report.traced_step_seconds),
    ):
        if seconds:
            stats = (statistics.mean(seconds), statistics.median(seconds), min(seconds), max(seconds))
            rows.append((label, str(len(seconds)), *(format_seconds(s) for s in stats)))
    placed_for = placement.cost_graph.graph.get("batch_size") if placement.cost_graph is not None else None
    estimate = (
        f"{format_seconds(placement.step_time)} at {f'batch {placed_for}' if placed_for else 'the batch size placed for'}"
        if placement.step_time is not None
        else "not estimated"
    )
    where = report.target or "in-process virtual devices"
    lines = [
        placement.summary(),
        "",
        f"real steps on {where} at batch {BATCH_SIZE.value}:",
        format_table(rows),
        f"mean step time {format_seconds(report.mean_step_time)}, estimated {estimate}; "
        f"load average {report.load_average[0]:.2f}",
    ]
    if report.mismatches:
        lines.append(f"warning: {len(report.mismatches)} ops ran elsewhere than placed, for example:")
        lines += [f"  {op}: placed on {placed}, ran on {ran}" for op, placed, ran in report.mismatches[:5]]
    else:
        lines.append("every op ran on the device the placement gave it")
    written = [f"Chrome trace of a real step: {report.trace_path}"] if report.trace_path else []
    if report.simulated_trace_path:
        written.append(f"Chrome trace of the simulated step: {report.simulated_trace_path}")
    _report("\n".join(lines), written)
    return 0


def _load_placement_or_plan(path: str) -> Placement:
    """A placement JSON, or a split plan JSON as the placement that runs it (its ``apply`` rewrites
    the graph into the plan's pieces)."""
    import json

    from tfplace.split.plan import PLAN_FORMAT, SplitPlan

    with open(path, encoding="utf-8") as handle:
        is_plan = json.load(handle).get("format") == PLAN_FORMAT
    return SplitPlan.load(path).to_placement() if is_plan else Placement.load(path)


def _check_local_devices(placement: Placement) -> None:
    """Fail early when a placement for this process names device kinds this machine lacks."""
    from tfplace.core.devices import DeviceName
    from tfplace.runner import session_target_kind

    if session_target_kind(placement) != "in_process":
        return
    import tensorflow as tf

    kinds = {DeviceName.parse(device).kind for device in placement.assignment.values()} - {"CPU"}
    for kind in sorted(kinds):
        if not tf.config.list_physical_devices(kind):
            raise InputError(
                f"the placement uses {kind} devices but this machine has none: to try it here, place on "
                "virtual CPUs (--devices /device:CPU:0-3) or give --cluster"
            )


COMMANDS: dict[str, Command] = {
    "profile": Command(
        "measure a saved graph's training step at small batches and predict its costs at --batch_size",
        "tfplace profile --graph model.meta --fetch train_op --batch_size 512 --out graph.json.gz",
        _GRAPH_FLAGS + _FEED_FLAGS + _PROFILE_FLAGS + (OUT,),
        (GRAPH, BATCH_SIZE, OUT),
        _profile,
    ),
    "place": Command(
        "place a saved graph (profiled here) or a cost graph on devices; write the placed graph",
        "tfplace place --graph model.meta --fetch train_op --devices /device:GPU:0-3 --memory 32GB "
        "--batch_size 512 --out placed.pb --placement_out placement.json",
        _GRAPH_FLAGS
        + _FEED_FLAGS
        + _PROFILE_FLAGS
        + _DEVICE_FLAGS
        + (
            PLACER,
            PLACER_OPTION,
            COST_GRAPH,
            OUT,
            PLACEMENT_OUT,
            COST_GRAPH_OUT,
            TENSORBOARD_DIR,
            TRACE,
            TIMELINE_PNG,
        ),
        (DEVICES, MEMORY),
        _place,
    ),
    "simulate": Command(
        "score a placement on a cost graph: step time, peak memory, out-of-memory; draw the step",
        "tfplace simulate --cost_graph graph.json.gz --placement placement.json --timeline_png step.png",
        (COST_GRAPH, PLACEMENT, PRIORITY, TRACE, TIMELINE_PNG),
        (COST_GRAPH, PLACEMENT),
        _simulate,
    ),
    "run": Command(
        "run a placed graph for real (virtual CPUs or a loopback cluster) and time its steps",
        "tfplace run --graph model.meta --placement placement.json --batch_size 64 --trace step.json",
        _GRAPH_FLAGS + _FEED_FLAGS + (PLACEMENT, COST_GRAPH, STEPS, WARMUP_STEPS, CLUSTER, TRACE),
        (GRAPH, PLACEMENT, BATCH_SIZE),
        _run,
    ),
}
"""The commands by name."""
