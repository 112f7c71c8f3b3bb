"""Every command's --help names its values as a user types them (issue #47): `MODEL`, `[MODEL]...`, `--component NAME`,
never typer's Python types (`<list[str]>`, `<str>`) nor `{model}` / `[model]` for an argument. The commands are read
from zmr's own command group, so a command added later is checked too."""

from __future__ import annotations

import re

import pytest
import typer.main

from zmr.cli import app, main

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
# A value's name in the left column: capitals, digits and the punctuation of a spec (NAME=URL@REV, [NAME=]REF), or a
# list of the literal words it takes (manifest|settings).
VALUE_RE = re.compile(r"\[?[A-Z][A-Z0-9_=@\[\].|-]*(\.\.\.)?|[a-z]+(\|[a-z]+)+")


def _help(capsys, command: str) -> str:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    return re.sub(rf"^Usage: .*? {re.escape(command)} ", f"Usage: zmr {command} ", text, count=1)  # click names the program after how it was started


def test_every_command_is_checked():
    assert len(COMMANDS) > 20 and {"build", "checkout", "new", "diff", "help"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_every_value_in_capitals_without_python_types(capsys, command):
    text = _help(capsys, command)
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: zmr {command} [OPTIONS]"), usage
    assert "{" not in usage and "<" not in usage, usage
    for piece in re.findall(r"\[?([^\s\[\]]+)\]?(?:\.\.\.)?", usage.split("[OPTIONS]", 1)[1]):
        assert VALUE_RE.fullmatch(piece.rstrip(".")), (piece, usage)
    section = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][a-z]+:", line):
            section = line
            continue
        if section not in ("Arguments:", "Options:") or not line.startswith("  ") or line.startswith("   "):
            continue
        left = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        assert "<" not in left and "{" not in left, (command, line)
        if section == "Arguments:":
            assert VALUE_RE.fullmatch(left) or left.startswith("[BASE"), (command, line)
        else:
            value = left.split(" ")[-1]  # "-c, --component NAME", "--onto, --to REV", "--all"
            value = "" if value.startswith("-") else value
            assert not value or VALUE_RE.fullmatch(value), (command, line)


def test_the_argument_of_a_command_that_needs_one_reads_as_click_prints_it(capsys):
    """The shapes of the issue: `{model}` for a required argument, `[model]` and `<list[str]>` for the optional ones."""
    assert _help(capsys, "checkout").splitlines()[0] == "Usage: zmr checkout [OPTIONS] MODEL"
    build = _help(capsys, "build")
    assert build.splitlines()[0] == "Usage: zmr build [OPTIONS] [MODEL]..."
    assert re.search(r"^  MODEL\.\.\.  Model names", build, re.M) and re.search(r"^  -c, --component NAME  ", build, re.M), build
    assert _help(capsys, "rebase").splitlines()[0] == "Usage: zmr rebase [OPTIONS] [MODEL]"
