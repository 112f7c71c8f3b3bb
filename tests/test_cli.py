"""The command line itself: every command line the docs show parses, -q/-v after the command, `zmr help`, NO_COLOR."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, simple_model, two_models, zmr

DOCS = ("README.md", "docs/reference.md")
GLOBAL_OPTIONS = {"-q", "--quiet", "-v", "--verbose", "--version", "-V", "--no-pager", "-h", "--help", "-C", "--install-completion", "--show-completion"}


def _commands() -> dict[str, set[str]]:
    """Each command's name → the option names it accepts, as click parses them."""
    import typer

    from zmr.cli import app

    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    options = {
        name: {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")} for name, cmd in group.commands.items()
    }
    return {name: known | {"-h", "--help"} for name, known in options.items()}


def _fenced_lines(rel: str) -> list[str]:
    text = (REPO_ROOT / rel).read_text()
    blocks = re.findall(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)
    return [line for info, block in blocks if info.strip() in ("", "sh", "bash", "console", "shell") for line in block.splitlines()]


def _zmr_invocations(line: str) -> list[list[str]]:
    """The argument lists of the `zmr` (or `.venv/bin/zmr`) commands of one shell line: split at `&&`, `|`, `;`, up to `#` or `>`."""
    words = shlex.split(line, comments=True)
    runs: list[list[str]] = []
    current: list[str] | None = None
    for word in [*words, "&&"]:
        if word in ("&&", "||", "|", ";") or word.startswith(">"):
            if current is not None:
                runs.append(current)
            current = None
        elif current is not None:
            current.append(word)
        elif word == "zmr" or word.endswith("/zmr"):
            current = []
    return runs


def _doc_command_lines() -> list[tuple[str, list[str]]]:
    found = []
    for rel in DOCS:
        for line in _fenced_lines(rel):
            if not re.search(r"(^|[\s/])zmr\s", line):
                continue
            found += [(f"{rel}: {line.strip()}", args) for args in _zmr_invocations(line)]
    return found


def _inline_mentions() -> list[tuple[str, str]]:
    """`zmr CMD ...` in inline code and section headings (outside fenced blocks): synopses such as `zmr build [MODEL...] | --all`."""
    found = []
    for rel in DOCS:
        text = re.sub(r"^```[^\n]*\n.*?^```", "", (REPO_ROOT / rel).read_text(), flags=re.M | re.S)
        for span in re.findall(r"`([^`\n]+)`", text):
            span = span.strip().replace("\\|", "|")
            if re.match(r"zmr\s", span):
                found.append((rel, span))
    return found


def test_the_docs_show_command_lines_and_the_collection_finds_them():
    lines = _doc_command_lines()
    assert len(lines) >= 15
    assert any(args[:2] == ["update", "--all"] for _, args in lines)  # README's daily loop
    assert any(args[:2] == ["build", "--all"] for _, args in lines)
    assert len(_inline_mentions()) >= 40


@pytest.mark.parametrize("where,args", _doc_command_lines(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_command_line_of_the_docs_parses(where, args, capsys):
    """Each command and each option a code block shows exists: click parses the whole line before --help answers."""
    from zmr.cli import main

    code = main([*args, "--help"])
    out = capsys.readouterr()
    assert code == 0, f"{where}\n{out.err}"
    assert out.out.startswith("Usage:"), where


def test_every_option_named_in_the_docs_exists():
    """Synopses and inline mentions: each option they name after a command is an option of that command."""
    commands = _commands()
    wrong = []
    for rel, span in _inline_mentions():
        words = [w.strip("[]().,") for w in span.split()[1:]]
        words = [w for i, w in enumerate(words) if i == 0 or words[i - 1] != "-C"]  # -C DIR: DIR is no command
        command = next((w for w in words if w and not w.startswith("-")), None)
        known = commands.get(command or "")
        if known is None:
            if any(w.startswith("-") and w not in GLOBAL_OPTIONS for w in words):
                wrong.append(f"{rel}: `{span}`: no command {command!r}")
            continue  # `zmr release`, `zmr <version>`: a name, not a command line
        seen_command = False
        for word in words:
            seen_command = seen_command or word == command
            option = word.split("=", 1)[0]
            if re.fullmatch(r"--?[A-Za-z][\w-]*", option) and option not in (known if seen_command else GLOBAL_OPTIONS):
                wrong.append(f"{rel}: `{span}`: {command} has no option {option}")
    assert wrong == []


def test_update_all_acts_on_every_model(project, upstream):
    """README's `zmr update --all` (it exited 2 with "Did you mean '--apply'?")."""
    simple_model(project, upstream)
    result = zmr("update", "--all", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    components = json.loads(result.stdout)["components"]
    assert [(c["model"], c["component"], c["status"]) for c in components] == [("toy", "rollout", "clean")]
    assert zmr("update", "toy", "--all", "--json", cwd=project.root).stdout == result.stdout


def test_quiet_and_verbose_work_after_every_command(capsys):
    from zmr.cli import main

    assert len(_commands()) >= 20
    for name, known in _commands().items():
        assert {"-q", "--quiet", "-v", "--verbose"} <= known, name
        for flag in ("-q", "--verbose"):
            assert main([name, flag, "--help"]) == 0, f"zmr {name} {flag}: {capsys.readouterr().err}"
    assert "-q, --quiet" in zmr("verify", "--help", cwd=REPO_ROOT).stdout


def test_verbose_after_the_command_logs_git_and_quiet_conflicts_with_it(project, upstream):
    simple_model(project, upstream)
    before = zmr("-v", "verify", "toy", cwd=project.root)
    after = zmr("verify", "toy", "-v", cwd=project.root)
    assert before.returncode == after.returncode == 1  # nothing built: drift
    assert "zmr: git " in after.stderr and "zmr: git " in before.stderr
    assert "zmr: git " not in zmr("verify", "toy", cwd=project.root).stderr
    both = zmr("-q", "verify", "toy", "-v", cwd=project.root)
    assert both.returncode == 2 and "give -q/--quiet or -v/--verbose, not both" in both.stderr
    assert zmr("verify", "-q", "toy", cwd=project.root).returncode == 1


def test_help_command_is_the_same_as_help_option():
    for name in ("verify", "rebase", "update"):
        via_command = zmr("help", name, cwd=REPO_ROOT)
        assert via_command.returncode == 0, via_command.stderr
        assert via_command.stdout == zmr(name, "--help", cwd=REPO_ROOT).stdout
    assert zmr("help", cwd=REPO_ROOT).stdout == zmr("--help", cwd=REPO_ROOT).stdout
    unknown = zmr("help", "nope", cwd=REPO_ROOT)
    assert unknown.returncode == 2 and "no command 'nope'" in unknown.stderr


def _on_terminal(args: list[str], cwd, env: dict[str, str]) -> tuple[int, bytes]:
    """Run zmr with stdout and stderr on a pseudo-terminal: where rich draws."""
    leader, follower = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "ZMR_REPO")}
    full_env.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "zmr", *args], cwd=cwd, stdout=follower, stderr=follower, env=full_env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return proc.wait(timeout=60), out


def test_no_color_means_no_escape_sequence_at_all(project, upstream):
    simple_model(project, upstream)
    code, plain = _on_terminal(["list"], project.root, {"NO_COLOR": "1", "TERM": "xterm-256color"})
    assert code == 0 and b"rollout" in plain
    assert b"\x1b" not in plain
    code, styled = _on_terminal(["list"], project.root, {"TERM": "xterm-256color"})
    assert code == 0 and b"\x1b[1m" in styled  # the control: bold headers without NO_COLOR


@pytest.mark.parametrize("command", ["rebase", "upstreamed", "update"])
def test_the_upstream_revision_option_is_onto_for_every_command(command):
    """One name for the upstream revision (`--onto`, git's); upstreamed's `--rev` and update's `--to` stay as aliases."""
    options = _commands()[command]
    assert "--onto" in options
    old = {"upstreamed": "--rev", "update": "--to"}.get(command)
    if old:
        assert old in options


# A real SIGINT while `zmr.cli` is being imported (typer and rich take a tenth of a second and more on a busy machine):
# the process sends it to itself from an import hook, then goes on importing.
_INTERRUPTED_IMPORT = """
import os, signal, sys, time
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == "zmr.cli":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the signal lands here, during the import
        return None
sys.meta_path.insert(0, Hook())
from zmr.__main__ import run
sys.exit(run())
"""


@pytest.mark.parametrize("how", ["console script", "python -m zmr"])
def test_a_ctrl_c_while_the_cli_is_imported_ends_as_an_interrupted_command(tmp_path, how):
    """Issue #36: a Ctrl-C in zmr's first tenth of a second printed a traceback and exited 1."""
    if how == "console script":  # the `zmr` script pip writes calls zmr.__main__:run (pyproject.toml)
        assert re.search(r'^zmr = "zmr\.__main__:run"$', (REPO_ROOT / "pyproject.toml").read_text(), re.M)
        command = [sys.executable, "-c", _INTERRUPTED_IMPORT, "list"]
    else:
        command = [sys.executable, "-c", _INTERRUPTED_IMPORT.replace("from zmr.__main__ import run\nsys.exit(run())", "import runpy; runpy.run_module('zmr', run_name='__main__')"), "list"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 130, result.stderr
    assert result.stderr == "zmr: interrupted\n"


# A SIGHUP (or SIGTERM) while the interpreter shuts down, after the command returned: the process sends it to itself
# from an atexit hook, the last Python code that runs.
_SIGNAL_AT_SHUTDOWN = """
import atexit, os, signal, sys, time
def late():
    os.kill(os.getpid(), signal.{name})
    time.sleep(5)  # the signal lands here
atexit.register(late)
from zmr.__main__ import run
sys.exit(run())
"""


@pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM"])
def test_a_hang_up_while_python_shuts_down_ends_zmr_as_that_signal(tmp_path, name):
    """zmr's handler raised an interrupt wherever the signal landed, also after the command: in an atexit hook Python printed
    the traceback and exited 0 (a hang-up reported as success); outside any handler it ended by SIGINT. The handlers hold
    for the command only, so a later signal ends the process as that signal, as a shell reports it."""
    import signal

    from killing import hang_up_by_default

    command = [sys.executable, "-c", _SIGNAL_AT_SHUTDOWN.format(name=name), "--version"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60, preexec_fn=hang_up_by_default)
    assert result.returncode == -getattr(signal, name), (result.returncode, result.stderr)
    assert result.stdout.startswith("zmr ") and result.stderr == ""


def test_main_leaves_the_signal_handlers_as_it_found_them(tmp_path, capsys):
    """In-process (a library caller, the tests): SIGTERM and SIGHUP are zmr's during main, the caller's again after it."""
    import signal

    from zmr.cli import main

    def mine(signum, frame):
        raise AssertionError("not called")

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, mine)
    try:
        assert main(["--version"]) == 0
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == (before[signal.SIGTERM], mine)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_the_status_line_is_cut_to_the_terminal_not_wrapped(project, upstream):
    """A status line longer than the terminal wrapped, and each redraw moved the cursor up over the wrapped part."""
    two_models(project, upstream)
    code, out = _on_terminal(["build", "--all"], project.root, {"TERM": "xterm-256color", "COLUMNS": "24", "LINES": "20"})
    assert code == 0, out
    assert "…".encode() in out  # "[1/2] other/trainer: fetching ..." cut, to the width
    # One cursor-up, to clear the line at the end; a wrapped status moved up over its wrapped part at each redraw.
    assert out.count(b"\x1b[1A") == 1, out
    assert b"\n" not in out[: out.index(b"\x1b[?25h")].rstrip(b"\r\n")  # nothing but the one line until then


def test_usage_errors_read_as_zmrs_other_errors(tmp_path):
    """click's `Error: No such option` became `zmr: error: ...`, with the usage and where the help is below it."""
    unknown = zmr("build", "--no-such-option", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stdout == ""
    lines = unknown.stderr.splitlines()
    assert re.fullmatch(r"zmr: error: No such option:? '?--no-such-option'?\.?", lines[0]), lines[0]  # click 8.5 quotes it
    assert re.match(r"  Usage: (python -m )?zmr build \[OPTIONS\]", lines[1]) and re.fullmatch(r"  Try '(python -m )?zmr build -h' for help\.", lines[2])
    missing = zmr("checkout", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("zmr: error: Missing argument")
    for result in (unknown, missing, zmr("biuld", cwd=tmp_path), zmr("-C", cwd=tmp_path)):
        assert result.returncode == 2 and result.stderr.startswith("zmr: error: ") and "\nError:" not in "\n" + result.stderr


def test_dash_capital_v_is_version(tmp_path):
    assert zmr("-V", cwd=tmp_path).stdout == zmr("--version", cwd=tmp_path).stdout == f"zmr {__import__('zmr.model.source', fromlist=['version']).version()}\n"


def test_main_called_again_in_one_process_starts_from_its_defaults(tmp_path, capsys):
    """A library caller (or a test) that runs main twice: -q, then -v, then neither, each as if alone (it said "not both")."""
    import logging

    from zmr.cli import main, render

    assert main(["-q", "list"]) in (0, 2)
    assert render.quiet()
    capsys.readouterr()
    assert main(["-v", "list"]) in (0, 2), capsys.readouterr().err
    assert "not both" not in capsys.readouterr().err and render.verbose()
    assert main(["list"]) in (0, 2)
    assert not render.quiet() and not render.verbose()
    assert logging.getLogger("zmr").getEffectiveLevel() == logging.WARNING
