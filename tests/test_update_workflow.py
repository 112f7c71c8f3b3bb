"""The weekly job `zmr init` writes: update with a check, one pull request per moved pin, the blocking patch's author named."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO_ROOT, git, simple_model, zmr
from test_update import grow


def update_jobs(tmp_path) -> dict:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    assert zmr("init", cwd=repo).returncode == 0
    return yaml.safe_load((repo / ".github/workflows/zmr.yml").read_text())["jobs"]


def test_the_weekly_job_checks_each_move_and_opens_one_pull_request_per_pin(tmp_path, project, upstream):
    jobs = update_jobs(tmp_path)
    job, writer = jobs["update"], jobs["update-pull-requests"]
    # Two uses of zmr's action: update with the smoke check, which prepares one commit per pin that moves with no write
    # access (it runs upstream code: smoke tests), and update-pull-requests, after it, which pushes them with the token.
    (use,) = [step for step in job["steps"] if "zero-mismatch-rl@" in step.get("uses", "")]
    assert use["with"] == {"command": "update", "update-check": "--smoke", "pull-requests": True}
    assert "permissions" not in job  # the workflow's: contents: read
    (use,) = [step for step in writer["steps"] if "zero-mismatch-rl@" in step.get("uses", "")]
    assert use["with"] == {"command": "update-pull-requests"} and writer["needs"] == ["update"]
    assert writer["permissions"] == {"contents": "write", "pull-requests": "write"}
    action = yaml.safe_load((REPO_ROOT / "action.yml").read_text())
    steps = {step.get("name"): step for step in action["runs"]["steps"]}
    run = steps["Run zmr ${{ inputs.command }}"]["run"]
    assert 'update "${targets[@]}" "${check[@]}" --report "$out/update.md" --json' in run
    prepare = steps["Prepare a pull request per moved pin"]
    assert '--apply ${words[@]+"${words[@]}"}' in prepare["run"] and "gh " not in prepare["run"] and "GH_TOKEN" not in prepare["env"]
    assert steps["Upload the pull requests"]["with"]["name"] == steps["Download the pull requests"]["with"]["name"] == "zmr-update"
    loop = steps["Open a pull request per moved pin"]
    assert loop["if"] == "inputs.command == 'update-pull-requests'" and "zmr " not in loop["run"].replace("zmr update: move", "")
    assert 'branch="zmr/update/$model/$component"' in loop["run"] and "gh pr create" in loop["run"] and 'git am -q "$commit"' in loop["run"]
    assert "cc %s: %s blocks moving further." in loop["run"] and "action/jobs.py\" moves" in loop["run"]
    # The loop's reader of `zmr update --json` (action/jobs.py moves), run on a real report: one line per component,
    # the blocking patch's author.
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 6, special={3: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    result = zmr("update", "--json", "--smoke", cwd=project.root)  # every component: those without smoke tests are not checked
    assert result.returncode == 0, result.stderr
    lines = subprocess.run([sys.executable, str(REPO_ROOT / "action/jobs.py"), "moves"], input=result.stdout, capture_output=True, text=True, check=True).stdout
    assert lines == "toy\trollout\t1\tauthor@zmr.invalid\t0001-fixed-split.patch\t0\n"  # no smoke tests: not checked


# -- the pull-request step, run as the runner runs it (#47.12) --------------------------------------


def _gh(tmp_path: Path) -> Path:
    """A recorder of `gh`: the user search answers octocat; `pr create` and `pr edit` keep the body they were given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "gh").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >>{tmp_path}/gh-calls\n'
        'case "$1 $2" in\n'
        '  "api -X") echo octocat ;;\n'
        f'  "pr create"|"pr edit") for a in "$@"; do [ -f "$a" ] && cp "$a" {tmp_path}/body.md; done ;;\n'
        "esac\n"
    )
    (bin_dir / "gh").chmod(0o755)
    return bin_dir


def _weekly(project, tmp_path: Path, monkeypatch, check: str | None = None, artifact=None) -> subprocess.CompletedProcess[str]:
    """The update job's steps of the action, then the update-pull-requests job's, with origin a bare repository and gh a
    recorder: (the pull-request step's run)."""
    from test_action import _inputs, _pull_requests, _run_step

    runner = tmp_path / "runner"
    shutil.rmtree(runner, ignore_errors=True)
    runner.mkdir()
    monkeypatch.setenv("GITHUB_SHA", project.ref("HEAD"))
    more = {"pull-requests": "true"} | ({"update-check": check} if check is not None else {})
    inputs = _inputs("update", **more)
    ran = _run_step("Run zmr", project.root, runner, inputs)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    calls = tmp_path / "gh-calls"
    before = calls.read_text() if calls.exists() else ""
    calls.write_text("")
    try:
        return _pull_requests(project.root, runner, inputs, _gh(tmp_path), calls, artifact)
    finally:
        calls.write_text(before + calls.read_text())


def _origin(project, tmp_path: Path) -> Path:
    origin = tmp_path / "origin.git"
    git("clone", "-q", "--bare", str(project.root), str(origin), cwd=tmp_path)
    git("remote", "add", "origin", str(origin), cwd=project.root)
    return origin


BRANCH = "zmr/update/toy/rollout"


def test_the_weekly_step_never_force_pushes_over_a_colleagues_commit_on_its_branch(project, upstream, tmp_path, monkeypatch):
    """A colleague pushed a fix onto last week's update branch; this week's run must not push over it (it did: `--force`).
    Its own earlier commit it replaces, with a lease on what it found there."""
    simple_model(project, upstream)
    origin = _origin(project, tmp_path)
    grow(upstream, 3)
    first = _weekly(project, tmp_path, monkeypatch, check="")
    assert first.returncode == 0, first.stdout + first.stderr
    mine = git("--git-dir", str(origin), "rev-parse", BRANCH, cwd=tmp_path)
    # The next week: upstream moved again; the bot's own commit on the branch is replaced (force-with-lease over it).
    git("checkout", "-q", "--", ".", cwd=project.root)
    grow(upstream, 2, start=10)
    again = _weekly(project, tmp_path, monkeypatch, check="")
    assert again.returncode == 0, again.stdout + again.stderr
    replaced = git("--git-dir", str(origin), "rev-parse", BRANCH, cwd=tmp_path)
    assert replaced != mine and f"commit: {upstream.commits[-1]}" in git("--git-dir", str(origin), "show", f"{BRANCH}:manifests/toy.yaml", cwd=tmp_path)
    # A colleague fixes something on the branch and pushes it.
    colleague = tmp_path / "colleague"
    git("clone", "-q", "--branch", BRANCH, str(origin), str(colleague), cwd=tmp_path)
    (colleague / "NOTES.md").write_text("reviewed: keep this\n")
    git("add", "NOTES.md", cwd=colleague)
    git("-c", "user.name=Colleague", "-c", "user.email=colleague@zmr.invalid", "commit", "-q", "-m", "Note the review", cwd=colleague)
    git("push", "-q", "origin", f"HEAD:{BRANCH}", cwd=colleague)
    theirs = git("rev-parse", "HEAD", cwd=colleague)
    git("checkout", "-q", "--", ".", cwd=project.root)
    grow(upstream, 2, start=20)
    third = _weekly(project, tmp_path, monkeypatch, check="")
    assert git("--git-dir", str(origin), "rev-parse", BRANCH, cwd=tmp_path) == theirs  # the colleague's commit is still there
    assert third.returncode == 0, third.stdout + third.stderr
    assert re.search(rf"::warning::toy/rollout: not pushed: {re.escape(BRANCH)} on origin has commits zmr did not make", third.stdout), third.stdout
    assert theirs[:12] in third.stdout and "Note the review" in third.stdout
    calls = (tmp_path / "gh-calls").read_text()
    assert calls.count("pr create") + calls.count("pr edit") == 2  # the first two weeks; the third leaves the pull request alone


def test_the_weekly_step_works_with_the_default_check_for_components_with_and_without_smoke_tests(project, upstream, tmp_path, monkeypatch):
    """The job `zmr init` writes passes update-check --smoke: the step's own `zmr update MODEL -c COMPONENT --apply --smoke`
    refused a component without smoke tests ("--smoke needs smoke tests"), so the weekly job failed for it."""
    simple_model(project, upstream)
    origin = _origin(project, tmp_path)
    grow(upstream, 3)
    ran = _weekly(project, tmp_path, monkeypatch)  # the action's default: --smoke
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"commit: {upstream.commits[-1]}" in git("--git-dir", str(origin), "show", f"{BRANCH}:manifests/toy.yaml", cwd=tmp_path)
    # With a smoke test that breaks at an upstream commit: checked, the pin stops before it.
    manifest = project.root / "manifests/toy.yaml"
    git("checkout", "-q", "--", ".", cwd=project.root)
    manifest.write_text(manifest.read_text() + "    smoke:\n      - name: unbroken\n        run: test ! -e BROKEN\n")
    project.commit_all("smoke")
    made = grow(upstream, 4, start=30, special={32: ({"BROKEN": "x\n"}, "Break it")})
    ran = _weekly(project, tmp_path, monkeypatch)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"commit: {made[1]}" in git("--git-dir", str(origin), "show", f"{BRANCH}:manifests/toy.yaml", cwd=tmp_path)


EVIL = """diff --git a/.github/workflows/evil.yml b/.github/workflows/evil.yml
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/.github/workflows/evil.yml
@@ -0,0 +1 @@
+on: push
"""


def test_the_job_with_the_token_pushes_only_commits_that_change_manifests_patches_and_resolutions(project, upstream, tmp_path, monkeypatch):
    """The zmr-update artifact comes from the job that ran upstream code (its smoke tests): a commit in it that changes
    anything else, here a workflow, is refused by the job that holds the write token; nothing is pushed or opened."""
    simple_model(project, upstream)
    origin = _origin(project, tmp_path)
    grow(upstream, 3)

    def poison(artifact: Path) -> None:
        (patch,) = artifact.glob("*.patch")
        text = patch.read_text()
        end = text.rindex("\n-- \n") + 1
        patch.write_text(text[:end] + EVIL + text[end:])

    ran = _weekly(project, tmp_path, monkeypatch, check="", artifact=poison)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "::error::zmr-update: the commit for toy/rollout changes more than manifests/, patches/ and resolutions/: not applied" in ran.stdout
    assert git("--git-dir", str(origin), "for-each-ref", "refs/heads/zmr/", cwd=tmp_path) == ""
    assert "pr create" not in (tmp_path / "gh-calls").read_text()
    # The same artifact untouched: pushed, one pull request.
    git("checkout", "-q", "--", ".", cwd=project.root)
    assert _weekly(project, tmp_path, monkeypatch, check="").returncode == 0
    assert git("--git-dir", str(origin), "for-each-ref", "--format=%(refname)", "refs/heads/zmr/", cwd=tmp_path) == f"refs/heads/{BRANCH}"


HOSTILE = "@everyone see #12 and https://evil.example/x <img src=x onerror=alert(1)> [click](https://evil.example) ``` breakout"


def _outside_code(markdown: str) -> str:
    """The text of *markdown* that GitHub renders as markdown: what is outside fenced blocks and code spans."""
    out, fence = [], None
    for line in markdown.splitlines():
        match = re.match(r"^(`{3,})", line)
        if fence is not None:
            if match and len(match.group(1)) >= len(fence) and line.strip() == match.group(1):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        out.append(re.sub(r"(`+)(.+?)(?<!`)\1(?!`)", "", line))
    return "\n".join(out)


def test_the_pull_request_body_renders_upstream_subjects_and_check_output_as_inert_text(project, upstream, tmp_path, monkeypatch):
    """Upstream commit subjects and a check's output are anybody's text: in the pull request's body they must not mention,
    reference, link or write HTML (they did: a subject went into the body as markdown, and output with ``` left its fence)."""
    pin = simple_model(project, upstream)
    _origin(project, tmp_path)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    # The check fails from commit 1 on (its output hostile), the series stops applying at commit 2 (its subject hostile).
    grow(upstream, 4, special={1: ({"BROKEN": "x\n"}, HOSTILE), 2: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, HOSTILE)})
    script = tmp_path / "check.sh"  # the action splits update-check into words: the check is one file to run
    script.write_text(f"#!/bin/sh\nif [ -e BROKEN ]; then echo '{HOSTILE}'; exit 1; fi\n")
    script.chmod(0o755)
    check = f"--test {script}"
    ran = _weekly(project, tmp_path, monkeypatch, check=check)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    body = (tmp_path / "body.md").read_text()
    assert body.count("@everyone see #12") >= 2 and "Output at" in body  # the subject and the output are there, as text
    rendered = "\n".join(line for line in _outside_code(body).splitlines() if not line.startswith("cc @octocat"))
    for bad in ("@everyone", "#12", "https://", "<img", "](", "breakout"):
        assert bad not in rendered, (bad, rendered)
