"""Every command's --help names its values as a user types them (issue #47): `MODEL`, `[MODEL]...`, `--component NAME`,
never typer's Python types (`<list[str]>`, `<str>`) nor `{model}` / `[model]` for an argument. The commands are read
from zmr's own command group, so a command added later is checked too."""

from __future__ import annotations

import ast
import difflib
import os
import re

import pytest
import typer.main

from conftest import REPO_ROOT, git, make_project, zmr
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


def test_bisect_needs_its_model_and_says_so_in_its_own_words(capsys, tmp_path):
    """Found on the real-history walkthrough of #47: `zmr bisect` printed `[MODEL]` for an argument it cannot do without,
    and without it (or with two -c) answered in rebase's words: "name the model to rebase / e.g. zmr rebase MODEL ...",
    "rebase one component at a time". Its usage says MODEL; a missing one is click's usage error (exit 2)."""
    assert _help(capsys, "bisect").splitlines()[0] == "Usage: zmr bisect [OPTIONS] MODEL"
    project = make_project(tmp_path / "p")
    missing = zmr("bisect", "--good", "a", "--bad", "b", "--test", "true", cwd=project.root)
    assert missing.returncode == 2 and "Missing argument 'MODEL'" in missing.stderr, missing.stderr
    two = zmr("bisect", "toy", "-c", "a", "-c", "b", "--good", "a", "--bad", "b", "--test", "true", cwd=project.root)
    assert two.returncode == 2 and "bisect one component at a time" in two.stderr and "rebase" not in two.stderr, two.stderr


# -- counts: "1 patch", never "1 patches" ---------------------------------------------------------------------------

NOUNS = "patch|commit|component|model|case|file|check|manifest|problem|branch|test|line|character|resolution|skip"
_COUNTED_RE = re.compile(rf"^ (({NOUNS})(e?s)(?![/\w])|(new )?\w+\(s\))")  # "manifests/" is a folder; "commit(s)" says neither
_CONSTANT_RE = re.compile(r"[A-Z][A-Z0-9_]*(\[.*\])?")  # COMMENT_LIMIT, MAX_NAME_BYTES['model']: never 1


def _uncounted(source: str) -> list[tuple[int, str]]:
    """Where an f-string of *source* writes a number and then a plural noun itself ("{n} patches"), not via `counted`.

    "{i} of {n} patches" and "the first {n} files" are left alone: a count after "of", "than" or "first" stays plural;
    so is a constant's, and a word of a conditional ("hold{'s' if ...} commits") is no count."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        for i in range(1, len(parts)):
            before, value, after = (parts[i - 2] if i >= 2 else None), parts[i - 1], parts[i]
            if not (isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant) and isinstance(after.value, str)):
                continue
            if not _COUNTED_RE.match(after.value) or isinstance(value.value, ast.IfExp) or _CONSTANT_RE.fullmatch(ast.unparse(value.value)):
                continue
            if not (isinstance(before, ast.Constant) and str(before.value).rstrip().endswith(("of", "than", "first"))):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_uncounted_finds_the_pattern_of_the_issue():
    assert _uncounted('f"{verb} {p}: {len(r.plan.patches)} patches, {source}"')
    assert not _uncounted('f"{verb} {p}: {counted(len(r.plan.patches), \'patch\')}, {source}"')
    assert not _uncounted('f"{n} of {m} patches"') and not _uncounted('f"{b.patch} conflicts in {files}"')
    assert _uncounted('f"keep your {n} new commit(s) on"') and _uncounted('f"{n} token(s) differ"')


def test_every_count_zmr_prints_agrees_with_its_number():
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {text}"
        for path in sorted((REPO_ROOT / "zmr").rglob("*.py"))
        for line, text in _uncounted(path.read_text())
    ]
    assert offenders == [], "\n".join(offenders)


def test_an_export_of_one_patch_says_one_patch(tmp_path, upstream):
    """issue #47: `exported patches/mymodel/rollout: 1 patches`."""
    project = make_project(tmp_path / "project")
    assert zmr("new", "one", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", cwd=project.root).returncode == 0
    assert zmr("checkout", "one", cwd=project.root).returncode == 0
    work = project.root / "work/one/rollout"
    (work / "NOTES").write_text("notes\n")
    git("add", "NOTES", cwd=work)
    git("commit", "-q", "-m", "Add notes", cwd=work)
    exported = zmr("export", "one", cwd=project.root)
    assert exported.returncode == 0, exported.stderr
    assert "exported patches/one/rollout: 1 patch, from work/one/rollout" in exported.stdout, exported.stdout


# -- the same help at both ends of the typer range ------------------------------------------------------------------

HELP_GOLDEN = REPO_ROOT / "tests" / "data" / "help.txt"


def _every_help(capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # the width click wraps at, whatever the terminal
    monkeypatch.delenv("LINES", raising=False)
    assert main(["--help"]) == 0
    pages = ["$ zmr --help\n" + capsys.readouterr().out]
    pages += [f"$ zmr {command} --help\n" + _help(capsys, command) for command in COMMANDS]
    return "\n".join(pages)


def test_every_help_is_the_committed_one(capsys, monkeypatch):
    """`zmr --help` and every command's, byte for byte as tests/data/help.txt has them. .ci/run runs this at the lowest
    and at the newest typer and rich that pyproject.toml allows, so both ends print the same help (issue #50: typer 0.25
    with click 8.5 printed no help for arguments). After a change to the help: ZMR_WRITE_HELP=1 rewrites the file
    (review its diff; the test still fails that run)."""
    text = _every_help(capsys, monkeypatch)
    if os.environ.get("ZMR_WRITE_HELP") == "1":
        HELP_GOLDEN.write_text(text)
        pytest.fail(f"wrote {HELP_GOLDEN.relative_to(REPO_ROOT)}: review `git diff` and run again without ZMR_WRITE_HELP")
    expected = HELP_GOLDEN.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "tests/data/help.txt", "zmr's help now"))
        pytest.fail(f"the help differs from tests/data/help.txt (intended? ZMR_WRITE_HELP=1 rewrites it):\n{diff}")


def test_the_committed_help_has_every_argument_help():
    """What went missing with typer 0.25 and click 8.5: the help column of arguments (`MODEL...  Model names`)."""
    text = HELP_GOLDEN.read_text()
    assert re.search(r"^\$ zmr build --help\n(.*\n)*?  MODEL\.\.\.  Model names \(manifests/<model>\.yaml\)\.$", text, re.M)
    assert re.search(r"^  ROLLOUT_DUMP  The rollout side's tensor dump", text, re.M)
    assert "<list[str]>" not in text and "<str>" not in text and "\\[" not in text


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_run_alone_has_the_help_the_whole_app_gives_it(capsys, command):
    """`zmr COMMAND` runs on an app that holds that command alone (zmr.cli._app_for: typer builds each command it holds
    at every start); `zmr help COMMAND` asks the whole app. Both print the same help, and the one app runs a command the
    other runs (here: its help)."""
    from zmr.cli import _app_for

    if command != "help":
        assert [name for name in typer.main.get_command(_app_for(["-q", "-C", ".", command])).commands] == [command]  # type: ignore[attr-defined]
    assert _app_for(["--bad", command]) is app and _app_for([]) is app and _app_for(["help", command]) is app
    assert not typer.main.get_command(_app_for(["-q", "-V", command])).commands  # type: ignore[attr-defined]
    alone = _help(capsys, command)
    assert main(["help", command]) == 0
    assert capsys.readouterr().out == alone
