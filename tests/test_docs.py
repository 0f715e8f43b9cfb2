"""Every example of the documentation runs verbatim and prints what the text says it prints.

The ``python`` blocks of a page run in order in one fresh Python process (in an empty folder), as a
reader pasting them one after another would. A plain block that follows a code block is what the
text says it prints: lines starting with ``tfplace:`` on standard error, the others on standard
output. Numbers depend on the machine, so the output is compared by its skeleton: the words of each
line without digits (device names kept), units left out; ``note:`` lines (which depend on the
numbers) are left out too. Every ``tfplace`` command line of the
documentation parses; the quick start's command session runs in full on what its Python made.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tfplace import cli

DOCS = Path(__file__).parents[1] / "docs"
README = Path(__file__).parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
_UNITS = {"B", "KB", "MB", "GB", "TB", "s", "ms", "us"}
_DEVICE = re.compile(r"^/(job|device):")
_MARK = "@@tfplace-doc-block"


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    before: str  # the prose between the previous block and this one


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found, end = [], 0
    for match in _FENCE.finditer(text):
        found.append(Block(match.group(1), match.group(2), text[end : match.start()]))
        end = match.end()
    return found


def skeleton(line: str) -> list[str]:
    """The words of ``line`` that do not depend on the machine: no numbers, units or rules; device names kept."""
    words = [word.strip(",") for word in line.split() if word.strip("-")]  # table rules vary in width
    return [w for w in words if _DEVICE.match(w) or not (any(c.isdigit() for c in w) or w in _UNITS)]


def assert_prints(expected: str, actual: str, *, tail: bool = False) -> None:
    """``actual`` has the lines of ``expected`` (its last ones with ``tail``), word for word but numbers."""
    want = [skeleton(line) for line in expected.strip().splitlines() if not line.startswith("note:")]
    got = [skeleton(line) for line in actual.strip().splitlines() if not line.startswith("note:")]
    got = got[-len(want) :] if tail else got
    assert got == want, f"expected lines shaped like\n{expected}\ngot\n{actual}"


def run_python_examples(page: Path, folder: Path) -> tuple[list[tuple[Block, list[Block], str]], str]:
    """Run the python blocks of ``page`` in one process in ``folder``: each block with its plain
    blocks and what it printed on standard output, and the process's standard error."""
    examples = _examples_with_output(page)
    script = "\n".join(f"print({_MARK!r}, flush=True)\n{code.text}" for code, _ in examples)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("TFPLACE_QUIET", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, f"{page.name}: the examples failed:\n{done.stderr[-3000:]}"
    outputs = done.stdout.split(f"{_MARK}\n")[1:]
    return [(code, printed, out) for (code, printed), out in zip(examples, outputs)], done.stderr


def _examples_with_output(page: Path) -> list[tuple[Block, list[Block]]]:
    """Each python block with the plain blocks that follow it before any other code block."""
    result: list[tuple[Block, list[Block]]] = []
    following: list[Block] | None = None
    for block in blocks(page):
        if block.language == "python":
            following = []
            result.append((block, following))
        elif block.language == "" and following is not None:
            following.append(block)
        else:
            following = None
    return result


PAGES_WITH_PYTHON = sorted(page.name for page in DOCS.glob("*.md") if "```python" in page.read_text())


@pytest.mark.profiles
@pytest.mark.tensorflow
@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES_WITH_PYTHON if p != "quickstart.md"])
def test_the_python_examples_of_a_page_run_verbatim_and_print_what_it_says(page, tmp_path):
    results, _ = run_python_examples(DOCS / page, tmp_path)
    for _, printed, out in results:
        for block in printed:
            assert_prints(block.text, out)


@pytest.mark.profiles
@pytest.mark.tensorflow
@pytest.mark.slow
def test_the_quickstart_runs_verbatim_python_then_commands_and_prints_what_it_says(tmp_path):
    page = DOCS / "quickstart.md"
    results, stderr = run_python_examples(page, tmp_path)
    for _, printed, out in results:
        for block in printed:
            if block.text.startswith("tfplace:"):  # progress on standard error
                stages = {tuple(skeleton(line)) for line in stderr.splitlines()}
                for line in block.text.strip().splitlines():
                    assert tuple(skeleton(line)) in stages, line
            else:
                assert_prints(block.text, out)
    first, *_ = [out for _, printed, out in results if printed]
    table = first.splitlines()[3:5]
    assert all(int(row.split()[1]) > 0 for row in table), "the first example spreads over both devices"
    assert (
        "\n0 ops ran elsewhere than placed; devices used: /device:CPU:0, /device:CPU:1\n"
        in "\n" + "".join(out for _, _, out in results)
    )

    outputs = {}
    for command in _commands(_command_session(page)):
        done = subprocess.run(
            [sys.executable, "-m", "tfplace", *command[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"{shlex.join(command)}\n{done.stderr[-3000:]}"
        outputs[command[1]] = done.stdout
    for block in blocks(page):
        said = re.search(
            r"`(place|run|simulate|profile)` (prints|ends with)\s*$", block.before.strip() + "\n", re.M
        )
        if block.language == "" and said:
            assert_prints(block.text, outputs[said.group(1)], tail=said.group(2) == "ends with")
    assert len(list((tmp_path / "tb").iterdir())) == 1 and (tmp_path / "step.png").stat().st_size > 0


def _command_session(page: Path) -> str:
    """The quick start's session of ``tfplace`` commands (the bash block that profiles and runs)."""
    (session,) = [b.text for b in blocks(page) if b.language == "bash" and "tfplace profile" in b.text]
    return session


def _commands(text: str) -> list[list[str]]:
    """The ``tfplace`` command lines of a shell block: continuations joined, comments left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line.split("#")[0].strip() for line in joined.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("tfplace ")]


@pytest.mark.parametrize("page", [*sorted(DOCS.glob("*.md")), README], ids=lambda p: p.name)
def test_every_tfplace_command_line_of_the_documentation_parses(page):
    for block in blocks(page):
        if block.language != "bash":
            continue
        for command in _commands(block.text):
            assert cli.parse(command)[1] == command[1], shlex.join(command)
