"""The README's front page runs as written: its shell blocks before the first `## ` heading, in order, on a fresh clone.

The set-up block's first line is run from its first `zmr` command on (the clone's `.venv` is this test's environment,
linked, so nothing is installed); its second line is the test suite itself. Every other line runs verbatim, each block
as one `bash -e` script from the clone's root."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git
from test_action import _inputs, _load, _run_step

SETUP_INSTALL = "python3 -m venv .venv && .venv/bin/pip install -q -e . && "


def _front_blocks() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    front = text.split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", front, flags=re.M | re.S)


@pytest.mark.slow
def test_the_front_page_runs_as_written_on_a_fresh_clone(tmp_path):
    blocks = _front_blocks()
    assert len(blocks) >= 3, "set-up, start your own project, the daily loop"
    setup = blocks[0].splitlines()
    assert setup[0].startswith(SETUP_INSTALL) and setup[1].startswith("python3 -m venv .venv && ")
    own = blocks[1]
    for step in ("zmr init", "zmr new", "zmr checkout", "git -C", "zmr export", "zmr build"):
        assert step in own, step
    assert "commit -a" not in blocks[2] or "echo" in blocks[2]  # an edit comes before the commit
    clone = tmp_path / "zmr"
    git("clone", "-q", str(REPO_ROOT), str(clone), cwd=tmp_path)
    (clone / "README.md").write_text((REPO_ROOT / "README.md").read_text())  # this README, also before it is committed
    (clone / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    env |= {"GIT_AUTHOR_NAME": "A User", "GIT_AUTHOR_EMAIL": "user@example.com", "GIT_COMMITTER_NAME": "A User", "GIT_COMMITTER_EMAIL": "user@example.com"}
    scripts = [setup[0][len(SETUP_INSTALL) :], *blocks[1:]]
    for index, script in enumerate(scripts):
        result = subprocess.run(["bash", "-e", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"README block {index + 1}:\n{script}\n{result.stdout}\n{result.stderr}"
    # What the blocks say they do, done: a project with a one-patch series and its release branch; the demo's edit exported.
    project = clone / "my-rl-patches"
    assert (project / "patches/mymodel/rollout/0001-fix-the-split-size.patch").is_file()
    assert git("rev-list", "--count", "rollout/mymodel", cwd=project).strip() == "2"
    assert any(p.name.endswith("fix-the-split.patch") for p in (clone / "patches/demo/rollout").iterdir())
    _passes_its_pull_request_ci(project, tmp_path / "runner")


def _passes_its_pull_request_ci(project: Path, runner: Path) -> None:
    """issue #47: the project the block makes failed its own CI (`validate --untrusted` and `diff --untrusted` exit 2 on a
    `../` upstream, `docs --check` on README tables not regenerated). Every pull-request job of the workflow `zmr init`
    wrote there, run as the runner runs the action's step, with the inputs that job passes, on a pull request whose base
    is the block's commit."""
    assert git("status", "--porcelain", cwd=project) == "", "the block commits what it made"
    workflow = _load(project / ".github/workflows/zmr.yml")
    ran = []
    for name, job in workflow["jobs"].items():
        if "pull_request" not in job.get("if", "") or "github.event_name == 'pull_request'" not in job.get("if", ""):
            continue
        [step] = [s for s in job["steps"] if not s["uses"].startswith("actions/checkout@")]
        given = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in step["with"].items()}
        given = {k: v.replace("${{ github.event_name == 'pull_request' }}", "true") for k, v in given.items()}
        assert not any("${{" in v for v in given.values()), given
        assert given.get("untrusted") == "true", (name, given)  # a pull request is untrusted input
        folder = runner / name
        folder.mkdir(parents=True)
        result = _run_step("Run zmr", project, folder, _inputs(**given), github={"event.pull_request.base.sha": git("rev-parse", "HEAD", cwd=project).strip()})
        assert result.returncode == 0, f"job {name}:\n{result.stdout}\n{result.stderr}"
        ran.append(name)
        log = (folder / "zmr/log.txt").read_text()
        if name in ("verify", "smoke"):
            assert "$ zmr validate --untrusted" in log, log
        if name == "verify":
            assert "$ zmr docs --check" in log, log
        if name == "diff":
            assert "--untrusted" in log, log
    assert sorted(ran) == ["diff", "smoke", "verify"], ran


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run's full-suite step is the README's second set-up line, byte for byte (with its --durations, so every CI log
    lists the slowest tests)."""
    command = _front_blocks()[0].splitlines()[1]
    assert "pytest" in command and "--durations=" in command
    ci = (REPO_ROOT / ".ci/run").read_text().splitlines()
    assert command in ci, f".ci/run does not run the README's test command verbatim: {command}"
