"""git's habits: `-C DIR` before the command, and shell completion for bash, zsh and fish through the entry point the
completion scripts call (`_ZMR_COMPLETE=...`): commands, options, model and component names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, simple_model, zmr


def _complete(shell: str, words: str, cwd, env: dict | None = None) -> list[str]:
    """What the shell's completion function gets for the command line *words* (the cursor at its end)."""
    full = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"} | (env or {})
    full["_ZMR_COMPLETE"] = f"complete_{shell}"
    if shell == "bash":
        parts = words.split(" ")
        full |= {"COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    else:
        full["_TYPER_COMPLETE_ARGS"] = words
        if shell == "fish":
            full["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    code = "import sys; sys.argv[0] = 'zmr'; from zmr.cli import main; sys.exit(main())"
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    if shell == "zsh":  # _arguments '*: :(("build":"help" "verify":"help"))', or (("demo")) without help
        import re

        return re.findall(r'"((?:[^"\\]|\\.)*)"(?::"(?:[^"\\]|\\.)*")?', result.stdout)
    return [line.split("\t")[0] for line in result.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_of_commands_options_models_and_components(shell, project, upstream):
    simple_model(project, upstream)
    simple_model(project, upstream, model="other")
    root = project.root
    assert _complete(shell, "zmr bu", root) == ["build"]
    assert set(_complete(shell, "zmr ", root)) >= {"build", "verify", "checkout", "export", "diff", "help"}
    assert "--all" in _complete(shell, "zmr build --a", root)
    assert _complete(shell, "zmr verify o", root) == ["other"]
    assert set(_complete(shell, "zmr checkout ", root)) >= {"toy", "other"}
    assert _complete(shell, "zmr checkout toy -c r", root) == ["rollout"]
    # From a folder below the project, and nowhere near one: nothing to offer, no error.
    (root / "patches").mkdir(exist_ok=True)
    assert _complete(shell, "zmr verify t", root / "patches") == ["toy"]
    assert _complete(shell, "zmr verify t", root.parent) == []
    # -C DIR, as the command itself would run there (each relative to the last), and ZMR_REPO relative to it.
    assert _complete(shell, f"zmr -C {root.name} build o", root.parent) == ["other"]
    assert _complete(shell, f"zmr -C {root.parent} -C {root.name} checkout toy -c r", root / "patches") == ["rollout"]
    assert _complete(shell, f"zmr -C {root.parent} verify t", root / "patches", env={"ZMR_REPO": root.name}) == ["toy"]
    assert _complete(shell, f"zmr -C {root.parent} verify t", root) == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_name_the_entry_point(shell, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'zmr'; from zmr.cli import main; sys.exit(main())"],
        env=os.environ | {"_ZMR_COMPLETE": f"source_{shell}"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert f"_ZMR_COMPLETE=complete_{shell}" in result.stdout
    assert "zmr" in result.stdout


def test_dash_c_runs_as_if_started_in_dir(project, upstream, tmp_path):
    simple_model(project, upstream)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = zmr("-C", str(project.root), "list", "--json", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert "toy" in listed.stdout
    # Repeatable, each relative to the one before, as git's.
    again = zmr("-C", str(project.root.parent), "-C", project.root.name, "-q", "list", cwd=elsewhere)
    assert again.returncode == 0 and again.stdout == zmr("list", cwd=project.root).stdout
    missing = zmr("-C", str(tmp_path / "nowhere"), "list", cwd=elsewhere)
    assert missing.returncode == 2 and "cannot change to" in missing.stderr
    assert "-C DIR" in zmr("--help", cwd=REPO_ROOT).stdout


@pytest.mark.parametrize(
    ("env", "commands"),
    [
        ({"COMP_WORDS": "zmr -q -C 'a dir' build ", "COMP_CWORD": "5"}, ["build"]),
        ({"COMP_WORDS": "zmr bu", "COMP_CWORD": "1"}, None),
        ({"COMP_WORDS": "zmr -C ", "COMP_CWORD": "2"}, None),
        ({"COMP_WORDS": "zmr 'unclosed", "COMP_CWORD": "1"}, None),
        ({"_TYPER_COMPLETE_ARGS": "zmr -C x checkout toy -c r"}, ["checkout"]),
        ({"_TYPER_COMPLETE_ARGS": "zmr checkout"}, None),
        ({"_TYPER_COMPLETE_ARGS": "zmr help "}, None),
        ({}, None),  # `_ZMR_COMPLETE=source_bash`: the script, from the whole app
    ],
)
def test_a_completion_after_a_command_asks_an_app_of_that_command_alone(monkeypatch, env, commands):
    """zmr.cli._app_for: the words before the one completed name the command, whose app alone answers (typer builds
    every command it holds); anything else, the whole app. test_completion_of_commands_options_models_and_components
    completes through both in every shell."""
    import typer.main

    from zmr.cli import _app_for, app

    for name in ("COMP_WORDS", "COMP_CWORD", "_TYPER_COMPLETE_ARGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("_ZMR_COMPLETE", "complete_bash" if "COMP_WORDS" in env else "complete_zsh")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    chosen = _app_for(["list"])  # the command line of a completion request is the environment's, not argv
    if commands is None:
        assert chosen is app
    else:
        assert list(typer.main.get_command(chosen).commands) == commands  # type: ignore[attr-defined]
