"""What the ``tfplace`` commands share: their errors, reading what the flags name, and the outputs.

Helpers read the flags of :mod:`tfplace.cli.options` and raise :class:`UsageError` (a wrong command
line) or :class:`InputError` (wrong things named on it); :func:`print_error` reports either as one line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from absl import flags, logging

from tfplace.cli.options import (
    CACHE_DIR,
    CALIBRATION,
    COST_GRAPH,
    DEVICES,
    FETCH,
    GRAPH,
    INIT_OP,
    INPUT_SHAPE,
    INPUTS,
    INT_HIGH,
    INTER_HOST_LINK,
    LINK,
    MEMORY,
    PLACER_OPTION,
    PRIORITY,
    PROFILE_BATCH_SIZES,
    SEED,
    SHARED_BUS,
    TARGET_DEVICE,
    TIMELINE_PNG,
    TRACE,
    TRACED_STEPS,
    WARMUP_STEPS,
)
from tfplace.core.costgraph import CostGraph, load_json
from tfplace.core.device_model import stored_matmul_row_blocks
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement, PlacementError
from tfplace.core.transfer import TransferModel


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


# ---------------------------------------------------------------------------------------------------
# errors


def input_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report bad input, TensorFlow's among them once it is imported."""
    errors: tuple[type[BaseException], ...] = (ValueError, OSError)
    tf = sys.modules.get("tensorflow")
    return (*errors, tf.errors.OpError) if tf is not None else errors


def one_line(error: BaseException) -> str:
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


def print_error(command: str, message: str) -> None:
    prefix = f"tfplace {command}" if command else "tfplace"
    print(f"{prefix}: error: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# inputs


def existing_file(holder: flags.FlagHolder[Any]) -> str:
    """The file a flag names, checked to exist."""
    path = str(holder.value)
    if not os.path.isfile(path):
        raise InputError(f"--{holder.name} {path}: no such file")
    return path


def refuse(given: Sequence[flags.FlagHolder[Any]], reason: str) -> None:
    """Fail when any of ``given`` was passed: ``reason`` says why it does not apply."""
    present = [holder.name for holder in given if holder.present]
    if present:
        raise UsageError(f"--{present[0]} {reason}")


def read_graph() -> Any:
    from tfplace.tf_graph.importer import load_graph

    logging.info("tfplace: reading %s", GRAPH.value)
    return load_graph(existing_file(GRAPH))


def checked_fetches(graph: Any) -> list[str]:
    """``--fetch`` checked against the graph, or the graph's ``train_op`` collection."""
    names = list(FETCH.value or [])
    if not names:
        names = list(dict.fromkeys(op.name for op in graph.get_collection("train_op")))
        if not names:
            raise InputError("the graph has no train_op collection: give --fetch (the train op's name)")
        logging.info("tfplace: fetching %s (the graph's train_op collection)", ", ".join(names))
    from tfplace.tf_graph.importer import did_you_mean

    ops = [op.name for op in graph.get_operations()]
    for name in names:
        try:
            graph.as_graph_element(name)
        except (KeyError, ValueError):
            hint = did_you_mean(name, ops)
            raise InputError(f"--fetch {name}: the graph has no op or tensor of that name{hint}") from None
    return names


def feed_fn(graph: Any, fetches: Sequence[str]) -> Callable[[int], dict[str, Any]]:
    """Real inputs from ``--inputs``, else random data (``--input_shape``, ``--int_high``, ``--seed``)."""
    from tfplace.tf_graph.feeds import BATCH, needed_placeholders, npz_feed_fn, random_feed_fn

    placeholders = needed_placeholders(graph, fetches)
    if INPUTS.value:
        refuse([INPUT_SHAPE, INT_HIGH, SEED], "shapes random inputs; with --inputs the arrays are fed")
        return npz_feed_fn(placeholders, existing_file(INPUTS))
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


def profiling_options() -> dict[str, Any]:
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
        "matmul_row_blocks": stored_matmul_row_blocks(CALIBRATION.value),
    }


def named(cost_graph: CostGraph) -> CostGraph:
    """``cost_graph`` named after the ``--graph`` file (``cnn`` for ``cnn.meta``) unless it has a name."""
    if cost_graph.graph.get("name") in (None, "", "graph") and GRAPH.value:
        cost_graph.graph["name"] = os.path.splitext(os.path.basename(GRAPH.value))[0]
    return cost_graph


def on_target(cost_graph: CostGraph) -> CostGraph:
    """``cost_graph`` with op times of ``--target_device`` when it is given."""
    if not TARGET_DEVICE.value:
        return cost_graph
    converted = cost_graph.graph.get("device_model")
    if converted:
        raise InputError(f"the cost graph already has {converted} op times: leave out --target_device")
    from tfplace.core.device_model import convert_graph, device_model

    return convert_graph(cost_graph, device_model(TARGET_DEVICE.value))


def device_set() -> DeviceSet:
    memory = MEMORY.value
    return DeviceSet.parse(
        DEVICES.value,
        memory[0] if len(memory) == 1 else memory,
        intra_host=TransferModel.preset(LINK.value),
        inter_host=TransferModel.preset(INTER_HOST_LINK.value),
        shared_bus=SHARED_BUS.value,
    )


def placer_options() -> dict[str, Any]:
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


def read_placement(holder: flags.FlagHolder[Any]) -> Placement:
    """The placement JSON a flag names, or a split plan JSON (``tfplace place`` writes one when the
    placer split ops) as the placement that runs it: its ``split_plan`` is simulated with its pieces
    and its ``apply`` rewrites the graph into them. The file is read once."""
    from tfplace.split.plan import PLAN_FORMAT, SplitPlan

    path = existing_file(holder)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
        if isinstance(document, dict) and document.get("format") == PLAN_FORMAT:
            return SplitPlan.from_dict(document).to_placement()
        return Placement.from_dict(document)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, PlacementError) as error:
        raise PlacementError(f"{path}: not a readable placement or split plan ({error})") from None


def read_cost_graph() -> CostGraph:
    graph = load_json(existing_file(COST_GRAPH))
    logging.info("tfplace: read the costs of %d ops from %s", len(graph), COST_GRAPH.value)
    return graph


def check_suffix(holder: flags.FlagHolder[Any], suffixes: tuple[str, ...], what: str) -> None:
    if holder.value and not str(holder.value).endswith(suffixes):
        raise UsageError(f"--{holder.name} {holder.value}: {what} is written as {' or '.join(suffixes)}")


# ---------------------------------------------------------------------------------------------------
# outputs


def simulated(cost_graph: CostGraph, placement: Placement, *, record: bool) -> tuple[Any, CostGraph]:
    """The simulated step of ``placement``'s devices for the ops of ``cost_graph``, and the graph
    simulated: ``cost_graph``, or for a split plan (``placement.split_plan``) the cost graph of its
    pieces, joins and all-reduces (:func:`tfplace.split.expand.simulate_plan`)."""
    from tfplace.simulator import simulate

    missing = [op for op in cost_graph if op not in placement.assignment]
    if missing:
        raise InputError(
            f"the placement has no device for {len(missing)} ops of the cost graph ({', '.join(missing[:3])}): "
            "was it made for another graph?"
        )
    if placement.split_plan is not None:
        from dataclasses import replace

        from tfplace.split.expand import simulate_plan

        plan = placement.split_plan
        plan = replace(plan, splits={op: plan.splits[op] for op in cost_graph if op in plan.splits})
        result, expanded = simulate_plan(cost_graph, plan, priority=PRIORITY.value, record=record)
        return result, expanded.graph
    step = {op: placement.assignment[op] for op in cost_graph}
    return simulate(cost_graph, step, placement.devices, priority=PRIORITY.value, record=record), cost_graph


def write_pictures(result: Any, placement: Placement, cost_graph: CostGraph) -> list[str]:
    """``--trace`` and ``--timeline_png`` of a simulated step of ``cost_graph``; what was written."""
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


def print_report(table: str, written: Sequence[str]) -> None:
    print(table)
    for line in written:
        print(f"wrote {line}")
