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

The parts: :mod:`~tfplace.cli.options` (the flags, in their own ``absl.flags.FlagValues``),
:mod:`~tfplace.cli.common` (errors, reading what the flags name, shared outputs), a module per
command (:mod:`~tfplace.cli.profile_command`, ``place_command``, ``simulate_command``,
``run_command``) and :mod:`~tfplace.cli.command_line` (parsing, help, running a command).
"""

from tfplace.cli.command_line import COMMANDS, execute, help_text, main, parse, run
from tfplace.cli.common import InputError, UsageError
from tfplace.cli.options import COMMAND_FLAGS

__all__ = [
    "COMMANDS",
    "COMMAND_FLAGS",
    "InputError",
    "UsageError",
    "execute",
    "help_text",
    "main",
    "parse",
    "run",
]
