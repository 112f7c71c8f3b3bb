"""The weekly job `zmr init` writes: update with a check, one pull request per moved pin, the blocking patch's author named."""

from __future__ import annotations

import subprocess
import sys

import yaml

from conftest import REPO_ROOT, git, simple_model, zmr
from test_update import grow


def update_job(tmp_path) -> dict:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    assert zmr("init", cwd=repo).returncode == 0
    return yaml.safe_load((repo / ".github/workflows/zmr.yml").read_text())["jobs"]["update"]


def test_the_weekly_job_checks_each_move_and_opens_one_pull_request_per_pin(tmp_path, project, upstream):
    job = update_job(tmp_path)
    # The job is a use of zmr's action: update with the smoke check, one pull request per pin that moves.
    (use,) = [step for step in job["steps"] if "zero-mismatch-rl@" in step.get("uses", "")]
    assert use["with"] == {"command": "update", "update-check": "--smoke", "pull-requests": True}
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    action = yaml.safe_load((REPO_ROOT / "action.yml").read_text())
    steps = {step.get("name"): step.get("run", "") for step in action["runs"]["steps"]}
    run = steps["Run zmr ${{ inputs.command }}"]
    assert 'update "${targets[@]}" "${check[@]}" --report "$out/update.md" --json' in run
    loop = steps["Open a pull request per moved pin"]
    assert 'branch="zmr/update/$model/$component"' in loop and "gh pr create" in loop and '--apply "${check[@]}"' in loop
    assert "cc %s: %s blocks moving further." in loop and "action/jobs.py\" moves" in loop
    # The loop's reader of `zmr update --json` (action/jobs.py moves), run on a real report: one line per component,
    # the blocking patch's author.
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 6, special={3: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    result = zmr("update", "--json", "--smoke", cwd=project.root)  # every component: those without smoke tests are not checked
    assert result.returncode == 0, result.stderr
    lines = subprocess.run([sys.executable, str(REPO_ROOT / "action/jobs.py"), "moves"], input=result.stdout, capture_output=True, text=True, check=True).stdout
    assert lines == "toy\trollout\t1\tauthor@zmr.invalid\t0001-fixed-split.patch\n"
