"""The composite GitHub Action (action.yml): its inputs, actionlint on its steps (as a reusable workflow with the same
inputs) and on workflows that use it (`uses: ./`: the native actionlint checks the inputs they pass), the workflows of
this repository against the ones `zmr init` writes, and the action's shell steps run as a runner runs them, on a
fixture project."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from conftest import REPO_ROOT, actionlint, git, simple_model, zizmor, zmr

ACTION = REPO_ROOT / "action.yml"
TEMPLATES = REPO_ROOT / "zmr" / "templates"
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
COMMANDS = ["verify", "smoke", "diff", "update", "update-pull-requests", "publish", "upstreamed", "diff-comment"]


def _action() -> dict:
    return yaml.safe_load(ACTION.read_text())


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_the_action_declares_its_inputs_and_runs_composite_steps():
    action = _action()
    assert set(action["inputs"]) >= {"command", "models", "untrusted", "comment", "base", "update-check", "pull-requests", "extras", "pip-args"}
    assert action["inputs"]["command"]["required"] is True
    assert all(f"{command} (" in action["inputs"]["command"]["description"] for command in COMMANDS)
    assert action["runs"]["using"] == "composite"
    runs = [step for step in action["runs"]["steps"] if "run" in step]
    assert runs and all(step["shell"] == "bash" for step in runs)
    for step in runs:  # inputs reach scripts through env only: no expression is pasted into a script (injection)
        assert "${{" not in step["run"], step["name"]
    install = next(step for step in runs if step["name"] == "Install zmr")
    assert 'spec="$GITHUB_ACTION_PATH"' in install["run"]  # the action's own files: the reference the workflow pinned
    for step in action["runs"]["steps"]:  # other actions by full commit id, as the workflow zmr init writes names them
        assert "uses" not in step or re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    cache = next(step for step in action["runs"]["steps"] if step.get("uses", "").startswith("actions/cache@"))
    assert "steps.key.outputs.pins" in cache["with"]["key"]
    # diff-comment runs in the privileged workflow_run workflow: nothing of the pull request's is installed or run.
    for step in action["runs"]["steps"]:
        if step.get("name") != "Post the diff of the pull request's run":
            assert "inputs.command == 'diff-comment'" not in step.get("if", ""), step
    runs_for_comment = [s.get("name", s.get("uses")) for s in action["runs"]["steps"] if "inputs.command != 'diff-comment'" not in s.get("if", "") and not re.search(r"inputs\.command == '(?!diff-comment')", s.get("if", ""))]
    assert runs_for_comment == ["Post the diff of the pull request's run"]
    upload = next(step for step in action["runs"]["steps"] if step.get("name") == "Upload the diff")
    assert upload["with"]["name"] == "zmr-diff" and upload["if"] == "always() && inputs.command == 'diff' && github.event_name == 'pull_request'"


def test_actionlint_accepts_the_actions_steps(tmp_path):
    """actionlint reads a local action's inputs but does not lint its steps: they are linted as a reusable workflow's."""
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
    lint = actionlint(path, cwd=tmp_path)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    # And it finds what it should: an input the action does not declare.
    path.write_text(path.read_text().replace("inputs.command", "inputs.comand", 1))
    assert actionlint(path, cwd=tmp_path).returncode == 1


def _local_action_project(tmp_path: Path, workflows: dict[str, str]) -> Path:
    """A repository with action.yml (this one's) at its root and *workflows* that use it as `./`."""
    root = tmp_path / "uses-local"
    (root / ".github" / "workflows").mkdir(parents=True)
    git("init", "-q", str(root), cwd=tmp_path)
    shutil.copy(ACTION, root / "action.yml")
    for name, text in workflows.items():
        (root / ".github" / "workflows" / name).write_text(text)
    return root


def test_actionlint_checks_the_inputs_written_workflows_pass_to_the_action(tmp_path):
    """The workflows `zmr init` writes, with the action as `./` (actionlint does not fetch a remote one)."""
    workflows = {name: (TEMPLATES / f"{name}.tmpl").read_text().replace("@ZMR_ACTION@", "./") for name in ("workflow.yml", "workflow-diff-comment.yml")}
    root = _local_action_project(tmp_path, workflows)
    lint = actionlint(*sorted((root / ".github/workflows").iterdir()), cwd=root)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    # An input the action does not declare, and a required one left out, are findings.
    (root / ".github/workflows/workflow.yml").write_text(workflows["workflow.yml"].replace("update-check:", "update-chek:"))
    (root / ".github/workflows/workflow-diff-comment.yml").write_text(workflows["workflow-diff-comment.yml"].replace("command: diff-comment", "models: x"))
    lint = actionlint(*sorted((root / ".github/workflows").iterdir()), cwd=root)
    assert lint.returncode == 1
    assert 'input "update-chek" is not defined in action "zmr" defined at "./"' in lint.stdout, lint.stdout
    assert 'missing input "command" which is required by action "zmr" defined at "./"' in lint.stdout, lint.stdout


def test_this_repositorys_workflows_are_the_ones_zmr_init_writes():
    """Its own CI is the written one but for `uses: ./` (the commit under test), the demo's extra, and a checkout."""
    for template, ours in (("workflow.yml", "zmr.yml"), ("workflow-diff-comment.yml", "zmr-diff-comment.yml")):
        written = yaml.safe_load((TEMPLATES / f"{template}.tmpl").read_text().replace("@ZMR_ACTION@", "./"))
        mine = yaml.safe_load((WORKFLOWS / ours).read_text())
        smoke = mine["jobs"].get("smoke", {"steps": []})
        for step in smoke["steps"]:
            if step.get("uses") == "./":
                assert step["with"].pop("extras") == "demo" and "download.pytorch.org/whl/cpu" in step["with"].pop("pip-args")
        comment = mine["jobs"].get("comment", {"steps": []})
        if comment["steps"]:
            checkout = comment["steps"].pop(0)  # the default branch's action (a workflow_run workflow runs no PR code)
            assert checkout["uses"].startswith("actions/checkout@") and checkout["with"] == {"persist-credentials": False}
        assert mine == written, ours
    assert actionlint(*sorted(WORKFLOWS.glob("*.yml"))).stdout == ""


def test_zizmor_finds_nothing_in_the_written_workflows_and_the_action(tmp_path):
    """What adopters' security linter says of what `zmr init` writes: it gave a High (dangerous-triggers: the
    workflow_run commenter) and a Medium (artipacked: publish keeps the checkout's token). The design is sound, and
    the workflows say why where zizmor reads it: an ignore comment on the line, its reason just above."""
    repo = tmp_path / "fresh"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    assert zmr("init", cwd=repo).returncode == 0
    lint = zizmor(repo / ".github" / "workflows", ACTION)
    assert lint.returncode == 0 and "No findings to report" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    ours = zizmor("--min-severity=medium", WORKFLOWS)  # zmr's own CI: `uses: ./` draws zizmor's help-level self-repository
    assert ours.returncode == 0, ours.stdout + ours.stderr
    for path in [*(repo / ".github" / "workflows").iterdir(), *WORKFLOWS.iterdir()]:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            for audit in re.findall(r"# zizmor: ignore\[([a-z-]+)\]", line):
                assert f"# zizmor's {audit}: " in "\n".join(lines[max(0, number - 3) : number]), (path.name, number + 1)  # the reason
    # And it sees what it should: the written workflow without its ignore comments is a High again.
    comment = repo / ".github" / "workflows" / "zmr-diff-comment.yml"
    comment.write_text(re.sub(r" # zizmor: ignore\[[a-z-]+\]", "", comment.read_text()))
    assert "dangerous-triggers" in zizmor(comment).stdout


def _run_step(name: str, cwd: Path, tmp: Path, inputs: dict[str, str], github: dict[str, str] | None = None, bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the action's step *name* as the runner would: bash, its env with the expressions evaluated, the runner's files.

    *github*: values of `github.` expressions (`event.pull_request.number`, ...); the others are empty, as outside
    that event. *bin_dir*: commands found before any other (recorders of `gh`)."""
    step = next(s for s in _action()["runs"]["steps"] if s.get("name", "").startswith(name))
    values = {f"inputs.{k}": v for k, v in inputs.items()} | {"runner.temp": str(tmp)} | {f"github.{k}": v for k, v in (github or {}).items()}

    def value(name: str) -> str:
        assert name.startswith(("inputs.", "runner.", "github.")), name
        assert not name.startswith("inputs.") or name in values, f"{name}: not among the inputs the test gives"
        return values.get(name, "")

    def evaluate(text: str) -> str:  # `${{ a }}` and `${{ a || b }}`: the first that is not empty
        return re.sub(r"\$\{\{\s*([\w.|\s-]+?)\s*\}\}", lambda m: next((v for v in map(value, re.split(r"\s*\|\|\s*", m.group(1))) if v), ""), text)

    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    env |= {k: evaluate(str(v)) for k, v in step.get("env", {}).items()}
    env |= {
        "PATH": os.pathsep.join([*([str(bin_dir)] if bin_dir else []), str(Path(sys.executable).parent), env["PATH"]]),
        "RUNNER_TEMP": str(tmp),
        "GITHUB_OUTPUT": str(tmp / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_ACTION_PATH": str(REPO_ROOT),
    }
    # As the runner runs `shell: bash`: bash --noprofile --norc -eo pipefail {0}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _inputs(command: str, **more: str) -> dict[str, str]:
    defaults = {name: str(spec.get("default", "")) for name, spec in _action()["inputs"].items()}
    return defaults | {"command": command} | more


def _pull_requests(root: Path, runner: Path, inputs: dict[str, str], bin_dir: Path, calls: Path, artifact: Callable[[Path], None] | None = None) -> subprocess.CompletedProcess[str]:
    """After `update` with pull-requests: true ran: its job's step that prepares a commit per moved pin (no token: gh is
    never called), the artifact handed over as download-artifact puts it, and the update-pull-requests job's step, in
    its own checkout of the tested commit, with a runner of its own. Returns that step's run."""
    prepared = _run_step("Prepare a pull request per moved pin", root, runner, inputs, bin_dir=bin_dir)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert not calls.exists() or calls.read_text() == "", calls.read_text()  # the job that ran upstream code holds no token
    writer = runner.parent / "runner-pull-requests"
    shutil.rmtree(writer, ignore_errors=True)
    writer.mkdir()
    shutil.copytree(runner / "zmr" / "pulls", writer / "zmr-update")
    if artifact is not None:  # what the job that ran upstream code may have made of it
        artifact(writer / "zmr-update")
    git("checkout", "-q", "--detach", os.environ["GITHUB_SHA"], cwd=root)
    return _run_step("Open a pull request per moved pin", root, writer, _inputs("update-pull-requests"), {"event.repository.default_branch": "main"}, bin_dir)


@pytest.mark.parametrize("command,status", [("verify", "0"), ("update", "0"), ("diff", "0"), ("publish", "2"), ("upstreamed", "0"), ("nonsense", None)])
def test_the_actions_shell_steps_on_a_fixture_project(command, status, project, upstream, tmp_path):
    simple_model(project, upstream)
    runner = tmp_path / "runner"
    runner.mkdir()
    inputs = _inputs(command)
    key = _run_step("Cache key", project.root, runner, inputs)
    assert key.returncode == 0, key.stderr
    assert re.fullmatch(r"pins=[0-9a-f]{16}\n", (runner / "output").read_text())
    result = _run_step("Run zmr", project.root, runner, inputs)
    if status is None:
        assert result.returncode == 2 and "command must be verify, smoke, diff, update, publish, upstreamed, update-pull-requests or diff-comment" in result.stdout
        return
    assert str(result.returncode) == status, result.stdout + result.stderr
    assert f"status={status}\n" in (runner / "output").read_text()
    summary = (runner / "summary.md").read_text()
    assert summary.startswith(f"## zmr {command}\n") and f"exit status {status}" in summary
    if command == "verify":  # built, then verified: the branch is what the manifest makes
        assert "$ zmr build --all" in summary and "$ zmr verify --all" in summary
        assert re.search(r"ok +rollout/toy", summary), summary
        assert "docs --check" not in summary  # the fixture has no README with zmr's sections
    if command == "diff":
        assert "<!-- zmr-diff -->" in summary and (runner / "zmr/diff/diff.md").read_text().startswith("<!-- zmr-diff -->\n")
        assert json.loads((runner / "zmr/diff/diff.json").read_text())["tool"] == "zmr"
    if command == "update":
        assert json.loads((runner / "zmr/update.json").read_text())["components"][0]["status"] == "clean"
        # What the pull-request step reads from the report: the pin moves, nothing blocks it.
        moves = subprocess.run([sys.executable, str(REPO_ROOT / "action/jobs.py"), "moves"], stdin=(runner / "zmr/update.json").open(), capture_output=True, text=True, check=True)
        assert moves.stdout == "toy\trollout\t1\t-\t-\t0\n"  # --smoke, no smoke tests: not checked
        assert summary.split("\n", 1)[1].startswith((runner / "zmr/update.md").read_text())  # the report is the summary
    if command == "publish":  # build, then publish to origin: the fixture has no remote
        assert "$ zmr publish --all --remote origin" in summary and "origin" in result.stdout
    if command == "upstreamed":
        assert json.loads((runner / "zmr/upstreamed.json").read_text())["components"][0]["upstreamed"] == []
    assert (runner / "zmr-cache").is_dir() or command in ("diff", "upstreamed")  # ZMR_CACHE points where actions/cache saves


def _reworded_pull_request(project, upstream, tmp_path: Path) -> tuple[str, Path]:
    """A pull request that rewords one patch's message: its base commit, and an empty folder for the runner's files."""
    simple_model(project, upstream)
    base = project.ref("HEAD")
    project.write("patches/toy/rollout/0002-contiguous.patch", (project.root / "patches/toy/rollout/0002-contiguous.patch").read_text().replace("Make matmul", "Make the matmul"))
    project.commit_all("reword")
    runner = tmp_path / "runner"
    runner.mkdir()
    return base, runner


def test_a_pull_requests_diff_is_kept_for_the_comment_workflow(project, upstream, tmp_path):
    """On a pull request: base..HEAD, its number beside the report (what the diff-comment step checks)."""
    base, runner = _reworded_pull_request(project, upstream, tmp_path)
    result = _run_step("Run zmr", project.root, runner, _inputs("diff"), {"event.pull_request.base.sha": base, "event.pull_request.number": "17"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"$ zmr diff {base} HEAD --json --markdown" in result.stdout
    assert (runner / "zmr/diff/pr-number").read_text() == "17\n"
    report = (runner / "zmr/diff/diff.md").read_text()
    assert report.startswith("<!-- zmr-diff -->\n") and "toy/rollout" in report and "Make the matmul" in report
    assert report in (runner / "summary.md").read_text()


def test_upstreamed_fails_naming_the_patch_that_landed(project, upstream, tmp_path):
    simple_model(project, upstream)
    landed = upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "matmul: contiguous output")
    runner = tmp_path / "runner"
    runner.mkdir()
    result = _run_step("Run zmr", project.root, runner, _inputs("upstreamed"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"::error::toy/rollout: 0002-contiguous.patch (Make matmul output contiguous) landed upstream in {landed}; drop it with zmr rebase" in result.stdout
    assert "status=1\n" in (runner / "output").read_text()


def test_smoke_runs_the_tests_that_need_no_gpu(project, upstream, tmp_path):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(
        manifest.read_text()
        + "    smoke:\n"
        + "      - name: cpu\n        run: test -f src/model.py\n"
        + "      - name: gpu\n        run: exit 1\n        resources: {GPU: 1}\n"
    )
    project.commit_all("smoke tests")
    runner = tmp_path / "runner"
    runner.mkdir()
    result = _run_step("Run zmr", project.root, runner, _inputs("smoke"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "$ zmr smoke toy --only" in result.stdout
    junit = (runner / "zmr/smoke/toy-rollout.xml").read_text()
    assert "cpu" in junit and 'name="gpu' not in junit  # the GPU test is left to a GPU runner


def test_untrusted_validates_before_anything_is_fetched(project, upstream, tmp_path):
    simple_model(project, upstream)
    project.write("manifests/evil.yaml", "model: evil\ncomponents:\n  rollout:\n    upstream: ext::sh -c 'touch /tmp/pwned'\n    commit: 1234\n")
    runner = tmp_path / "runner"
    runner.mkdir()
    result = _run_step("Run zmr", project.root, runner, _inputs("verify", untrusted="true"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "$ zmr validate --untrusted" in result.stdout and "$ zmr build" not in result.stdout
    assert not (runner / "zmr-cache").exists()


def test_diff_comment_refuses_outside_a_workflow_run(tmp_path):
    runner = tmp_path / "runner"
    runner.mkdir()
    result = _run_step("Post the diff", tmp_path, runner, _inputs("diff-comment"))
    assert result.returncode == 2 and "command diff-comment runs in a workflow_run workflow" in result.stdout


def test_the_comment_script_refuses_a_report_without_zmrs_marker(tmp_path):
    body = tmp_path / "diff.md"
    body.write_text("@everyone look here\n")
    result = subprocess.run([str(REPO_ROOT / "action/post-comment"), "7", str(body)], capture_output=True, text=True, env={**os.environ, "GH_REPO": "o/r"}, timeout=30)
    assert result.returncode == 1 and "does not start with <!-- zmr-diff -->" in result.stdout


def test_the_weekly_pull_request_step_pushes_one_branch_per_moved_pin_and_names_the_blocking_author(project, upstream, tmp_path, monkeypatch):
    """update with pull-requests, then update-pull-requests: the action's own loops (the commits prepared where upstream
    code ran, pushed from the job with the token), with gh a recorder and origin a bare repository: the pin moves
    as far as the blocking patch lets it, on branch zmr/update/<model>/<component>, and the pull request's body is the
    report with the blocking patch's author named (the login GitHub's user search gives for the author's email)."""
    from test_update import grow

    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 6, special={3: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    origin = tmp_path / "origin.git"
    git("clone", "-q", "--bare", str(project.root), str(origin), cwd=tmp_path)
    git("remote", "add", "origin", str(origin), cwd=project.root)
    runner = tmp_path / "runner"
    runner.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "gh-calls"
    (bin_dir / "gh").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >>{calls}\n'
        'case "$1 $2" in\n'
        '  "api -X") echo octocat ;;\n'  # the user search: the author's login
        f'  "pr create") for a in "$@"; do [ -f "$a" ] && cp "$a" {tmp_path}/body.md; done ;;\n'
        "esac\n"
    )
    (bin_dir / "gh").chmod(0o755)
    tested = project.ref("HEAD")
    monkeypatch.setenv("GITHUB_SHA", tested)
    inputs = _inputs("update", **{"update-check": "", "pull-requests": "true"})
    ran = _run_step("Run zmr", project.root, runner, inputs)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    opened = _pull_requests(project.root, runner, inputs, bin_dir, calls)
    assert opened.returncode == 0, opened.stdout + opened.stderr
    assert "::warning::toy/rollout: blocked by 0001-fixed-split.patch; cc @octocat" in opened.stdout
    recorded = calls.read_text().splitlines()
    assert "auth setup-git" in recorded
    assert "pr create --head zmr/update/toy/rollout --base main --title zmr update: move toy/rollout along its track --body-file " + str(tmp_path / "runner-pull-requests/zmr/body.md") in recorded
    # The branch on origin: one commit on the tested one, the pin moved to the commit before the blocking one.
    moved = git("--git-dir", str(origin), "show", "zmr/update/toy/rollout:manifests/toy.yaml", cwd=tmp_path)
    assert f"commit: {upstream.commits[-4]}" in moved, moved
    assert git("--git-dir", str(origin), "rev-parse", "zmr/update/toy/rollout~1", cwd=tmp_path).strip() == tested
    body = (tmp_path / "body.md").read_text()
    assert body.endswith("\ncc @octocat: 0001-fixed-split.patch blocks moving further.\n") and "toy/rollout" in body


def test_comment_true_posts_for_a_pull_request_of_the_same_repository_and_leaves_a_forks_to_the_comment_workflow(project, upstream, tmp_path):
    """diff with comment: true: the diff job's own token comments on a same-repository pull request (editing zmr's
    earlier comment, found by its marker); on a fork's, whose token is read-only, it says why and posts nothing."""
    base, runner = _reworded_pull_request(project, upstream, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls, posted = tmp_path / "gh-calls", tmp_path / "posted.md"
    (bin_dir / "gh").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >>{calls}\n'
        'case "$1 $2" in\n'
        '  "api --paginate") echo 4242 ;;\n'  # zmr's earlier comment
        f'  "api -X") for a in "$@"; do case "$a" in body=@*) cp "${{a#body=@}}" {posted} ;; esac; done ;;\n'
        "esac\n"
    )
    (bin_dir / "gh").chmod(0o755)
    inputs = _inputs("diff", comment="true")
    pull_request = {"event.pull_request.base.sha": base, "event.pull_request.number": "7", "repository": "o/r", "token": "t"}
    ran = _run_step("Run zmr", project.root, runner, inputs, pull_request)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    fork = _run_step("Comment on the pull request", project.root, runner, inputs, pull_request | {"event.pull_request.head.repo.full_name": "someone/r"}, bin_dir)
    assert fork.returncode == 0 and "pull request from someone/r: its token cannot comment" in fork.stdout, fork.stdout + fork.stderr
    assert not calls.exists()  # nothing asked of GitHub
    same = _run_step("Comment on the pull request", project.root, runner, inputs, pull_request | {"event.pull_request.head.repo.full_name": "o/r"}, bin_dir)
    assert same.returncode == 0 and "updated comment 4242 on #7" in same.stdout, same.stdout + same.stderr
    assert calls.read_text().splitlines()[-1].startswith("api -X PATCH repos/o/r/issues/comments/4242 -F body=@")
    assert posted.read_text() == (runner / "zmr/diff/diff.md").read_text() and posted.read_text().startswith("<!-- zmr-diff -->\n")
