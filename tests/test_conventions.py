"""git's conventions, on the real CLI and fixture upstreams with history (docs/reference.md §6).

-h and --version, -q and -v, one suggestion for a mistyped command, one rule
for default targets, validate --json, upstreamed skipping components without
track, a closed pipe, git failures told as zmr errors, tables that never cut
a value, progress with counts.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from conftest import git, simple_model, two_models, zmr

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")




def on_terminal(args: list[str], cwd: Path, columns: int = 40) -> tuple[int, str, str]:
    """Run zmr with stdout on a pseudo-terminal *columns* wide; returns status, what the terminal showed (no colours), stderr."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm", "NO_COLOR": "1"}
    env.pop("ZMR_REPO", None)
    proc = subprocess.Popen([sys.executable, "-m", "zmr", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.wait(timeout=120)
    return proc.returncode, ANSI_RE.sub("", shown.decode("utf-8", "replace")).replace("\r", ""), err


def with_closed_stdout(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run zmr with a stdout whose reader is already gone, as `zmr ... | head -1` is once head has its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = dict(os.environ)
    env.pop("ZMR_REPO", None)
    try:
        argv = [sys.executable, "-m", "zmr", *args]
        proc = subprocess.run(argv, cwd=cwd, env=env, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    return proc


# -- -h, --version, a mistyped command ------------------------------------------------------------


def test_short_help_and_version(tmp_path):
    for args in ([], ["build"], ["rebase"], ["smoke"]):
        short = zmr(*args, "-h", cwd=tmp_path)
        long = zmr(*args, "--help", cwd=tmp_path)
        assert short.returncode == 0, short.stderr
        assert short.stdout == long.stdout and "Usage:" in short.stdout
    assert "-h, --help" in zmr("list", "-h", cwd=tmp_path).stdout
    version = zmr("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout == f"zmr {__import__('zmr.model.source', fromlist=['version']).version()}\n"


def test_a_mistyped_command_is_suggested_once(tmp_path):
    result = zmr("biuld", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("Did you mean") == 1 and "'build'" in result.stderr


# -- -q and -v -------------------------------------------------------------------------------------


def test_verbose_shows_git_commands_and_fetch_counts_quiet_shows_no_progress(project, upstream):
    two_models(project, upstream)
    loud = zmr("-v", "build", "--all", cwd=project.root)
    assert loud.returncode == 0, loud.stderr
    assert re.search(r"^zmr: git fetch .*: exit 0, \d+ ms$", loud.stderr, re.MULTILINE), loud.stderr
    # Progress, as lines outside a terminal: the place among the components, and git's object counts.
    assert re.search(r"^\[1/2\] other/trainer: fetching", loud.stderr, re.MULTILINE), loud.stderr
    assert re.search(r"^\[2/2\] toy/rollout: ", loud.stderr, re.MULTILINE), loud.stderr
    assert re.search(r"objects: 100% \(\d+/\d+\)", loud.stderr), loud.stderr
    assert loud.stdout.splitlines()[0].startswith("created")
    plain = zmr("verify", "--all", cwd=project.root)
    assert plain.returncode == 0 and plain.stderr == ""
    both = zmr("-q", "-v", "list", cwd=project.root)
    assert both.returncode == 2 and "not both" in both.stderr


def test_quiet_smoke_prints_results_only(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + "    smoke:\n      - name: ok\n        run: 'true'\n")
    project.commit_all("a smoke test")
    normal = zmr("smoke", "toy", cwd=project.root)
    assert normal.returncode == 0, normal.stderr
    assert "PASS " in normal.stderr and "rollout.ok" in normal.stderr  # the per-test progress line
    quiet = zmr("-q", "smoke", "toy", cwd=project.root)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert "1 passed" in quiet.stdout


# -- one rule for default targets ------------------------------------------------------------------


def test_read_only_commands_default_to_every_model_writing_ones_need_a_model(tmp_path, project, upstream):
    two_models(project, upstream)
    for args in (["build"], ["publish"], ["smoke"]):
        refused = zmr(*args, cwd=project.root)
        assert refused.returncode == 2, (args, refused.stderr)
        assert "zmr: error: name one or more models, or pass --all" in refused.stderr
    assert project.refs().keys() == {"refs/heads/main"}
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    verify = zmr("verify", cwd=project.root)
    assert verify.returncode == 0, verify.stderr
    assert [line.split()[:2] for line in verify.stdout.splitlines()] == [["ok", "trainer/other"], ["ok", "rollout/toy"]]
    fetched = zmr("fetch", cwd=project.root)
    assert fetched.returncode == 0 and len(fetched.stdout.splitlines()) == 2
    bare = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(bare))
    git("remote", "add", "origin", str(bare), cwd=project.root)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0


def test_update_apply_is_the_one_writing_command_that_defaults_to_every_model(project, upstream):
    """§6.4's exception (zmr.model.selection.UPDATE_WRITES): the scheduled job runs `zmr update --apply` without a model."""
    import json

    two_models(project, upstream)
    result = zmr("update", "--apply", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    moved = json.loads(result.stdout)["components"]
    assert [(c["model"], c["component"], c["applied"]) for c in moved] == [("toy", "rollout", True)]  # every model; the tracked components
    assert upstream.commits[-1] in (project.root / "manifests/toy.yaml").read_text()
    assert project.refs().keys() == {"refs/heads/main"}  # pins and series in the working tree, never a branch


def test_plain_output_columns_are_aligned(project, upstream):
    two_models(project, upstream)
    built = zmr("build", "--all", cwd=project.root)
    assert built.returncode == 0, built.stderr
    lines = built.stdout.splitlines()
    starts = {len(line) - len(line.split()[-1]) for line in lines}
    assert len(lines) == 2 and len(starts) == 1, built.stdout  # the commit ids start in one column
    verify = zmr("verify", "--all", cwd=project.root)
    assert len({line.index(line.split()[2]) for line in verify.stdout.splitlines()}) == 1, verify.stdout


# -- validate --json, ci-matrix --json -------------------------------------------------------------


def test_validate_json_reports_problems_as_data(project, upstream):
    two_models(project, upstream)
    good = zmr("validate", "--json", cwd=project.root)
    assert good.returncode == 0, good.stderr
    data = json.loads(good.stdout)
    assert data["ok"] is True and data["problems"] == [] and data["models"] == ["other", "toy"] and data["patches"] == 3
    # A series line naming a file that does not exist.
    (project.root / "patches/toy/rollout/series").write_text("0001-fixed-split.patch\n0009-gone.patch\n0002-contiguous.patch\n")
    bad = zmr("validate", "--json", cwd=project.root)
    assert bad.returncode == 2
    report = json.loads(bad.stdout)
    assert report["ok"] is False
    assert report["problems"] == [
        {
            "file": "patches/toy/rollout/series",
            "line": 2,
            "message": "0009-gone.patch: patch file not found",
            "hint": "add patches/toy/rollout/0009-gone.patch or remove the line",
        }
    ]
    assert bad.stderr == "zmr: error: 1 problem, listed in the JSON report\n"
    # A manifest problem: file and line of the manifest.
    manifest = project.root / "manifests/other.yaml"
    manifest.write_text(manifest.read_text().replace("commit: ", "commit: abc"))
    line = next(n for n, text in enumerate(manifest.read_text().splitlines(), 1) if "commit:" in text)
    broken = json.loads(zmr("validate", "--json", cwd=project.root).stdout)
    # The series problem above is still there: every problem of the project at once (#36), the manifest's first.
    assert [(p["file"], p["line"]) for p in broken["problems"]] == [("manifests/other.yaml", line), ("patches/toy/rollout/series", 2)]
    assert broken["problems"][0]["message"] and set(broken["problems"][0]) == {"file", "line", "message", "hint"}


def test_ci_matrix_accepts_json(project, upstream):
    two_models(project, upstream)
    plain = zmr("ci-matrix", cwd=project.root)
    flagged = zmr("ci-matrix", "--json", cwd=project.root)
    assert flagged.returncode == 0, flagged.stderr
    assert flagged.stdout == plain.stdout and json.loads(flagged.stdout)["include"]


# -- upstreamed over several components --------------------------------------------------------------


def test_upstreamed_skips_components_without_track_and_goes_on(project, upstream):
    two_models(project, upstream)
    # One model with both kinds: trainer follows no upstream ref.
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[1]}\n")
    project.series("toy", "trainer", [])
    project.commit_all("trainer without track")
    upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul output contiguous")
    result = zmr("upstreamed", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("toy/rollout: 1 of 2 patches upstream between")
    assert lines[-1] == "toy/trainer: skipped (no `track` in manifests/toy.yaml; pass --onto REV to compare with a revision)"
    everything = json.loads(zmr("upstreamed", "--all", "--json", cwd=project.root).stdout)
    assert [c["component"] for c in everything["components"]] == ["rollout"]
    assert everything["skipped"] == [
        {"model": "other", "component": "trainer", "reason": "no track"},
        {"model": "toy", "component": "trainer", "reason": "no track"},
    ]
    # One component named: told what to do, as before.
    named = zmr("upstreamed", "toy", "-c", "trainer", cwd=project.root)
    assert named.returncode == 2 and "--onto REV" in named.stderr


# -- a closed pipe -----------------------------------------------------------------------------------


def test_a_closed_pipe_exits_quietly_like_git(tmp_path, project, upstream):
    from zmr.evidence.mismatch import write_dump

    simple_model(project, upstream)
    listed = with_closed_stdout(["list"], project.root)
    assert (listed.returncode, listed.stderr) == (141, "")
    records = [{"id": f"s{i}", "step": i % 3, "tokens": [1, 2, 3], "logprobs": [-0.5, -1.0, -1.5 - i]} for i in range(50)]
    write_dump(tmp_path / "r.jsonl", records)
    write_dump(tmp_path / "t.jsonl", [{**r, "logprobs": [-0.5, -1.0, -1.25]} for r in records])
    compared = with_closed_stdout(["mismatch", str(tmp_path / "r.jsonl"), str(tmp_path / "t.jsonl")], tmp_path)
    assert (compared.returncode, compared.stderr) == (141, "")
    # Through a shell, as a user types it: nothing on stderr, the first line arrives.
    shell = subprocess.run(
        f"{sys.executable} -m zmr mismatch r.jsonl t.jsonl | head -1; echo \"status ${{PIPESTATUS[0]}}\"",
        shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True, check=False,
    )
    assert shell.stderr == "" and shell.stdout.splitlines()[0].startswith("step") and shell.stdout.splitlines()[-1] in ("status 0", "status 141")


# -- git failures, told by zmr -----------------------------------------------------------------------


def _no_raw_git(stderr: str) -> None:
    assert stderr.startswith("zmr: error: ")
    assert not any(line.lstrip().startswith(("fatal:", "error:")) for line in stderr.splitlines()), stderr


def test_publish_to_a_missing_remote(project, upstream):
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    result = zmr("publish", "toy", "--remote", "upstream", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "zmr: error: no remote 'upstream': `git remote add upstream URL` or `--remote`"
    _no_raw_git(result.stderr)


def test_git_failures_are_told_as_zmr_errors(tmp_path, project, upstream):
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    # A remote name git does not know (verify --remote goes straight to git).
    unknown = zmr("verify", "toy", "--remote", "nowhere", cwd=project.root)
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[:2] == ["zmr: error: no remote 'nowhere'", "  `git remote add nowhere URL` or `--remote`"]
    assert "  git: fatal: 'nowhere' does not appear to be a git repository" in unknown.stderr
    _no_raw_git(unknown.stderr)
    # A path that is not a repository.
    (tmp_path / "plain").mkdir()
    not_repo = zmr("verify", "toy", "--remote", str(tmp_path / "plain"), cwd=project.root)
    assert not_repo.returncode == 2 and not_repo.stderr.startswith(f"zmr: error: {tmp_path / 'plain'}: not a git repository\n")
    _no_raw_git(not_repo.stderr)
    # A remote that refuses the push (a hook): zmr's headline, git's reason as a detail.
    bare = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(bare))
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are frozen' >&2\nexit 1\n")
    hook.chmod(0o755)
    git("remote", "add", "origin", str(bare), cwd=project.root)
    refused = zmr("publish", "toy", cwd=project.root)
    assert refused.returncode == 1
    assert refused.stderr.startswith("zmr: error: origin refused the push of rollout/toy\n") and "pushes are frozen" in refused.stderr
    _no_raw_git(refused.stderr)


def test_an_unreachable_upstream_is_told_as_a_zmr_error(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(f"upstream: {upstream.path}", "upstream: https://127.0.0.1:9/toy.git"))
    project.commit_all("unreachable upstream")
    result = zmr("fetch", "toy", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.startswith("zmr: error: toy/rollout (https://127.0.0.1:9/toy.git): cannot fetch from https://127.0.0.1:9/toy.git\n")
    assert "  cannot reach https://127.0.0.1:9/toy.git" in result.stderr and "check the URL and your network" in result.stderr
    _no_raw_git(result.stderr)


def test_outside_a_git_repository(tmp_path, project, upstream):
    simple_model(project, upstream)
    (project.root / ".git").rename(project.root / "dot-git")
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 2 and "not a git repository" in result.stderr and "git init" in result.stderr
    _no_raw_git(result.stderr)
    # What git says there, as the library reports it.
    from zmr.infra import git as zgit

    try:
        zgit.Repo(tmp_path, tmp_path).out(["log"])
    except zgit.GitError as err:
        assert err.message == "not a git repository"
        assert err.details[0].startswith("run zmr inside the repository")
        assert err.details[-1].startswith("git: fatal: not a git repository")
    else:  # pragma: no cover
        raise AssertionError("git log outside a repository succeeded")


# -- tables on a terminal ------------------------------------------------------------------------------


def test_a_table_on_a_narrow_terminal_shows_every_value_whole(project, upstream):
    simple_model(project, upstream)
    status, shown, err = on_terminal(["list"], project.root, columns=40)
    assert status == 0, err
    assert str(upstream.path) in shown, shown
    assert upstream.commits[1][:12] in shown and "rollout/toy" in shown


def test_checkout_progress_counts_components_and_objects(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[1]}\n")
    project.series("toy", "trainer", [])
    project.commit_all("a second component")
    result = zmr("-v", "checkout", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\[1/2\] toy/rollout: fetching", result.stderr, re.MULTILINE), result.stderr
    assert re.search(r"^\[2/2\] toy/trainer: ", result.stderr, re.MULTILINE), result.stderr
    assert re.search(r"objects: 100% \(\d+/\d+\)", result.stderr), result.stderr
    # Applying shows where it is in the series: patch N of M.
    assert re.search(r"^\[1/2\] toy/rollout: patch 1 of 2 \(0001-fixed-split\.patch\)$", result.stderr, re.MULTILINE), result.stderr
    assert re.search(r"^\[1/2\] toy/rollout: patch 2 of 2 ", result.stderr, re.MULTILINE), result.stderr
