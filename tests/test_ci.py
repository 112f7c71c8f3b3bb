"""CI: `zmr ci-matrix` against the manifests, and the GitHub Actions workflow (actionlint + structure)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from conftest import actionlint, simple_model, zmr

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "zmr.yml"


# -- ci-matrix --------------------------------------------------------------------------


def test_ci_matrix_one_job_per_component(project, upstream):
    pin = simple_model(project, upstream)
    project.series("big", "rollout", [])
    project.series("big", "trainer", [])
    project.manifest(
        "big",
        f"""
        model: big
        components:
          rollout:
            upstream: {upstream.path}
            commit: {pin}
            branch: engine/big
            smoke:
              - name: import
                run: python -c "import toy"
              - name: kernels
                run: python -m pytest tests/kernels
                resources: {{GPU: 1}}
          trainer:
            upstream: {upstream.path}
            commit: {pin}
            release: snapshot
            smoke:
              - name: cpu-only
                run: "true"
                resources: {{CPU: 4, GPU: 0}}
        smoke:
          - name: bitwise
            needs: [trainer, rollout]
            run: python scripts/bitwise.py
          - name: bitwise-8gpu
            needs: [trainer]
            run: python scripts/bitwise.py --gpus 8
            resources: {{GPU: 8}}
        """,
    )
    result = zmr("ci-matrix", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1  # one line: fits $GITHUB_OUTPUT as is
    matrix = json.loads(result.stdout)
    assert matrix == {
        "include": [
            {
                "name": "big/rollout", "model": "big", "component": "rollout", "branch": "engine/big",
                "upstream": str(upstream.path), "commit": pin, "release": "two-commit",
                # The model test needing [trainer, rollout] goes to the first of them in manifest order.
                "smoke": ["rollout.import", "bitwise"], "smoke_args": "--only rollout.import --only bitwise",
                "gpu": True, "gpu_smoke": ["rollout.kernels"],
            },
            {
                "name": "big/trainer", "model": "big", "component": "trainer", "branch": "trainer/big",
                "upstream": str(upstream.path), "commit": pin, "release": "snapshot",
                "smoke": ["trainer.cpu-only"], "smoke_args": "--only trainer.cpu-only",
                "gpu": True, "gpu_smoke": ["bitwise-8gpu"],
            },
            {
                "name": "toy/rollout", "model": "toy", "component": "rollout", "branch": "rollout/toy",
                "upstream": str(upstream.path), "commit": pin, "release": "two-commit",
                "smoke": [], "smoke_args": "", "gpu": False, "gpu_smoke": [],
            },
        ]
    }
    only = json.loads(zmr("ci-matrix", "toy", cwd=project.root).stdout)
    assert [job["name"] for job in only["include"]] == ["toy/rollout"]
    # The ids work as they are with `zmr smoke --only` (its selection accepts them).
    from zmr.model.manifest import load_manifests
    from zmr.smoke.runner import select

    big = load_manifests(project.root, ["big"])
    for job in matrix["include"][:2]:
        chosen = select(big, None, job["smoke"] + job["gpu_smoke"])
        assert sorted(j.id for j in chosen) == sorted(job["smoke"] + job["gpu_smoke"])


def test_ci_matrix_matches_the_repository_manifests():
    """Every component of the repository's manifests is one job, with its pin and branch."""
    matrix = json.loads(zmr("ci-matrix", cwd=REPO_ROOT).stdout)
    listed = json.loads(zmr("list", "--json", cwd=REPO_ROOT).stdout)
    expected = sorted(
        (m["model"], c["component"], c["branch"], c["upstream"], c["commit"], c["release"]) for m in listed["models"] for c in m["components"]
    )
    assert sorted((j["model"], j["component"], j["branch"], j["upstream"], j["commit"], j["release"]) for j in matrix["include"]) == expected
    assert all(re.fullmatch(r"(--only [A-Za-z0-9][A-Za-z0-9._-]*( |$))*", j["smoke_args"]) for j in matrix["include"])


def test_ci_matrix_bad_manifest_exit_2(project):
    project.manifest("bad", "model: bad\ncomponents:\n  rollout:\n    upstream: https://example.org/x.git\n    commit: main\n")
    result = zmr("ci-matrix", cwd=project.root)
    assert result.returncode == 2
    assert "manifests/bad.yaml:5: components.rollout.commit: 'main' is not a full commit id" in result.stderr


# -- the workflow ------------------------------------------------------------------------


def _lint(*files: Path) -> subprocess.CompletedProcess[str]:
    return actionlint(*files)


def test_actionlint_passes_on_the_workflows():
    files = sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))
    assert files, "no workflow in .github/workflows"
    result = _lint(*files)  # from the repository's root: `uses: ./` is checked against action.yml's inputs
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_actionlint_catches_a_broken_workflow(tmp_path):
    text = WORKFLOW.read_text()
    broken = tmp_path / "broken.yml"
    assert "needs: [verify, smoke]" in text and "github.event_name == 'pull_request'" in text
    broken.write_text(text.replace("needs: [verify, smoke]", "needs: [verify, smok]").replace("github.event_name == 'pull_request'", "github.event_nam == 'pull_request'", 1))
    result = _lint(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r'broken\.yml:\d+:\d+: job "publish" needs job "smok" which does not exist', result.stdout), result.stdout
    assert re.search(r'property "event_nam" is not defined', result.stdout), result.stdout


def _workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def _action_use(job: dict) -> dict:
    """The `with:` of the job's one use of zmr's action."""
    (use,) = [step for step in job["steps"] if step.get("uses") == "./"]
    return use["with"]


def test_workflow_structure():
    wf = _workflow()
    assert set(wf["on"]) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["permissions"] == {"contents": "read"}
    jobs = wf["jobs"]
    assert {name: _action_use(job)["command"] for name, job in jobs.items()} == {
        "verify": "verify",
        "smoke": "smoke",
        "diff": "diff",
        "publish": "publish",
        "upstreamed": "upstreamed",
        "update": "update",
        "update-pull-requests": "update-pull-requests",
    }
    # Write access only where publishing happens, and only for pushes to main; and for the scheduled update's pull
    # requests, in a job of their own that runs none of upstream's code (the update job runs its smoke tests).
    writers = [name for name, job in jobs.items() if job.get("permissions", {}).get("contents") == "write"]
    assert writers == ["publish", "update-pull-requests"]
    assert jobs["publish"]["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert set(jobs["publish"]["needs"]) == {"verify", "smoke"}
    # Pull requests and pushes: verify and smoke, untrusted on pull requests; diff on pull requests, always untrusted.
    for name in ("verify", "smoke"):
        assert jobs[name]["if"] == "github.event_name == 'pull_request' || github.event_name == 'push'"
        assert _action_use(jobs[name])["untrusted"] == "${{ github.event_name == 'pull_request' }}"
    assert jobs["diff"]["if"] == "github.event_name == 'pull_request'" and _action_use(jobs["diff"])["untrusted"] is True
    # The schedule: upstreamed and update only.
    for name in ("upstreamed", "update", "update-pull-requests"):
        assert jobs[name]["if"] == "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    assert wf["on"]["schedule"][0]["cron"]


def test_workflow_update_job_opens_pull_requests():
    jobs = _workflow()["jobs"]
    job, writer = jobs["update"], jobs["update-pull-requests"]
    assert "permissions" not in job and _workflow()["permissions"] == {"contents": "read"}  # it runs upstream's smoke tests
    assert writer["permissions"] == {"contents": "write", "pull-requests": "write"} and writer["needs"] == ["update"]
    assert [name for name, j in jobs.items() if "pull-requests" in j.get("permissions", {})] == ["update-pull-requests"]
    assert _action_use(job) == {"command": "update", "update-check": "--smoke", "pull-requests": True}
    assert _action_use(writer) == {"command": "update-pull-requests"}
    assert job["concurrency"] == {"group": "zmr-update", "cancel-in-progress": False}
    assert writer["concurrency"] == {"group": "zmr-update-pull-requests", "cancel-in-progress": False}


def test_workflow_hygiene():
    wf = _workflow()
    for name, job in wf["jobs"].items():
        for step in job["steps"]:
            if "uses" in step and step["uses"] != "./":
                # Pinned by full commit id, the tag kept in a comment.
                assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", step["uses"]), (name, step["uses"])
            # No ${{ }} expansion inside shell scripts (script injection from pull requests).
            assert "${{" not in step.get("run", ""), (name, step.get("run"))
        checkout = job["steps"][0]
        assert checkout["uses"].startswith("actions/checkout@")  # `uses: ./` needs the files
        if name != "publish":
            assert checkout.get("with", {}).get("persist-credentials") is False, name
    text = WORKFLOW.read_text()
    other = [line for line in re.findall(r"^ *- uses: (.*)$", text, re.M) if line != "./"]
    # The tag in a comment, then at most zizmor's ignore comment (its reason on the lines above: tests/test_action.py).
    assert other and all(re.fullmatch(r"\S+@[0-9a-f]{40} # v\d+\.\d+\.\d+( # zizmor: ignore\[[a-z-]+\])?", line) for line in other), other
