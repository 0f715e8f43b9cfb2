"""The ``tfplace`` command line: the commands' table, parsing, help, and running a command."""

from __future__ import annotations

import difflib
import logging as std_logging
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from absl import app, flags, logging

from tfplace._version import __version__
from tfplace.cli.calibrate_command import CALIBRATE
from tfplace.cli.common import Command, UsageError, input_errors, one_line, print_error
from tfplace.cli.options import COMMAND_FLAGS, VERSION
from tfplace.cli.place_command import PLACE
from tfplace.cli.profile_command import PROFILE
from tfplace.cli.run_command import RUN
from tfplace.cli.simulate_command import SIMULATE

COMMANDS: dict[str, Command] = {
    "profile": PROFILE,
    "place": PLACE,
    "simulate": SIMULATE,
    "run": RUN,
    "calibrate": CALIBRATE,
}
"""The commands by name."""

LOGGING_FLAGS = ("verbosity", "stderrthreshold", "logtostderr", "alsologtostderr", "log_dir")
"""absl's logging flags, named in the help of every command."""


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
            f"absl logging flags: {', '.join('--' + f for f in LOGGING_FLAGS)} (tfplace --helpfull).",
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
        print_error(error.command, str(error))
        sys.exit(2)


def execute(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the command in this process; return the exit status.

    What :func:`run` does, without absl's process setup (its log handler, INFO verbosity by
    default): for tests and for calling tfplace from Python.
    """
    try:
        args = parse(argv)
    except UsageError as error:
        print_error(error.command, str(error))
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
        print_error(command, str(error))
        return 2
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] != "tensorflow":
            raise
        print_error(command, "this needs TensorFlow: pip install 'tfplace[cpu]' (or 'tfplace[gpu]')")
        return 1
    except input_errors() as error:
        logging.debug("tfplace %s failed", command, exc_info=True)
        print_error(command, one_line(error))
        return 1
