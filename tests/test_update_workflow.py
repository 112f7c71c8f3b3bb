"""The weekly job `zmr init` writes: update with a check, one pull request per moved pin, the blocking patch's author named."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from conftest import git, simple_model, zmr
from test_update import grow


def update_job(tmp_path) -> dict:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    assert zmr("init", cwd=repo).returncode == 0
    return yaml.safe_load((repo / ".github/workflows/zmr.yml").read_text())["jobs"]["update"]


def test_the_weekly_job_checks_each_move_and_opens_one_pull_request_per_pin(tmp_path, project, upstream):
    job = update_job(tmp_path)
    assert job["env"]["ZMR_UPDATE_CHECK"] == "--smoke" and int(job["env"]["ZMR_FETCH_ATTEMPTS"]) > 1
    steps = {step.get("name"): step.get("run", "") for step in job["steps"]}
    assert 'zmr update --json $ZMR_UPDATE_CHECK --report "$RUNNER_TEMP/update.md"' in steps["Find how far each pin can move"]
    loop = steps["One pull request per moved pin"]
    assert 'branch="zmr/update/$model/$component"' in loop and "gh pr create" in loop and "--apply $ZMR_UPDATE_CHECK" in loop
    assert "cc %s: %s blocks moving further." in loop
    # The job's reader of `zmr update --json`, run on a real report: one line per component, the blocking patch's author.
    script = re.search(r"<<'EOF'\n(.*?)\n\s*EOF\n", loop, re.S)
    assert script
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 6, special={3: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    report = tmp_path / "update.json"
    result = zmr("update", "--json", "--smoke", cwd=project.root)  # every component: those without smoke tests are not checked
    assert result.returncode == 0, result.stderr
    report.write_text(result.stdout)
    code = "\n".join(line[10:] if line.startswith(" " * 10) else line for line in script.group(1).splitlines())
    lines = subprocess.run([sys.executable, "-c", code, str(report)], capture_output=True, text=True, check=True).stdout
    assert lines == "toy\trollout\t1\tauthor@zmr.invalid\t0001-fixed-split.patch\n"
