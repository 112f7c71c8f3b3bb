"""zmr checkout: a plain git working tree per component, found from anywhere, with upstream's history on demand."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from checkout_fixture import files, proj, three_patch_model  # noqa: F401 (proj is a fixture)
from conftest import git, simple_model, zmr


def test_checkout_is_a_plain_repository_with_one_commit_per_patch(proj, upstream):
    pin, folder, co = three_patch_model(proj, upstream)
    log = git("log", "--reverse", "--format=%an|%ae|%at|%s", "zmr/base..", cwd=co).splitlines()
    assert log == [
        "Patch Author|author@zmr.invalid|1710000000|Use a fixed split size in matmul",
        "Patch Author|author@zmr.invalid|1710000000|Make matmul output contiguous",
        "Quilt Maintainer|quilt@zmr.invalid|0|Extend the guide, quilt style",
    ]
    assert git("rev-parse", "zmr/base", cwd=co) == pin
    assert git("symbolic-ref", "HEAD", cwd=co) == "refs/heads/toy/rollout"
    assert git("config", "zmr.pin", cwd=co) == pin
    assert git("status", "--porcelain", cwd=co) == ""
    assert "appendix from quilt" in (co / "docs/guide.md").read_text()
    body = git("log", "-1", "--format=%b", "zmr/base~0..HEAD~1", cwd=co)
    assert "Batch-invariant" not in body  # HEAD~1 is the contiguous patch; the body of the first:
    assert "Batch-invariant" in git("log", "-1", "--format=%b", "HEAD~2", cwd=co)
    # Objects are copied, never borrowed: the checkout survives the cache.
    assert not (co / ".git/objects/info/alternates").exists()
    shutil.rmtree(os.environ["ZMR_CACHE"])
    git("fsck", "--no-dangling", cwd=co)
    assert git("rev-list", "--count", "zmr/base..HEAD", cwd=co) == "3"
    # A checkout equal to the series is left alone, and export writes nothing.
    again = zmr("checkout", "toy", cwd=proj.root)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("unchanged")
    before = files(folder)
    exported = zmr("export", "toy", cwd=co)
    assert exported.returncode == 0, exported.stderr
    assert "unchanged patches/toy/rollout" in exported.stdout
    assert files(folder) == before


def test_checkout_refuses_dirty_or_unexported_work_and_force_keeps_a_backup(proj, upstream):
    _, _folder, co = three_patch_model(proj, upstream)
    (co / "README.md").write_text("edited\n")
    dirty = zmr("checkout", "toy", cwd=proj.root)
    assert dirty.returncode == 2
    assert "has work that is not in the series" in dirty.stderr
    assert "uncommitted changes in README.md" in dirty.stderr
    assert "zmr export toy" in dirty.stderr and "--force" in dirty.stderr
    git("commit", "-q", "-am", "Rewrite the README", cwd=co)
    unexported = zmr("checkout", "toy", cwd=proj.root)
    assert unexported.returncode == 2
    assert "added     0004-rewrite-the-readme.patch" in unexported.stderr
    work = git("rev-parse", "HEAD", cwd=co)
    (co / "scratch.txt").write_text("untracked\n")
    forced = zmr("checkout", "toy", "--force", cwd=proj.root)
    assert forced.returncode == 0, forced.stderr
    assert "saved the discarded work as refs/zmr/backup/" in forced.stdout
    # Found on the real-history walkthrough (#47.7): the ref is in the checkout's repository, not the project's, and the
    # line says so with a command that works from the repository root, as printed.
    shown = next(c for c in re.findall(r"`(git -C \S+ log [^`]+)`", forced.stdout) if not c.endswith("-worktree"))
    listed = subprocess.run(shown, shell=True, cwd=proj.root, capture_output=True, text=True)
    assert listed.returncode == 0 and "Rewrite the README" in listed.stdout, (forced.stdout, listed.stderr)
    backups = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/zmr/backup/", cwd=co).splitlines()
    assert any(line.endswith(work) for line in backups)
    snapshot = next(line.split()[0] for line in backups if line.split()[0].endswith("-worktree"))
    assert git("show", f"{snapshot}:scratch.txt", cwd=co) == "untracked"
    assert git("rev-list", "--count", "zmr/base..HEAD", cwd=co) == "3"
    assert git("status", "--porcelain", cwd=co) == ""
    assert not (co / "scratch.txt").exists()
    # An interrupted refresh (its marker still there) is finished, not taken for work.
    (co / ".git/zmr-refresh").write_text("x\n")
    (co / "README.md").write_text("half reset\n")
    resumed = zmr("checkout", "toy", cwd=proj.root)
    assert resumed.returncode == 0, resumed.stderr
    assert git("status", "--porcelain", cwd=co) == "" and not (co / ".git/zmr-refresh").exists()


def test_every_command_finds_the_project_from_a_checkout_outside_it(proj, upstream, tmp_path):
    """A `--dir` checkout outside the repository records it in its git config (zmr.project); all commands read it."""
    simple_model(proj, upstream)
    outside = tmp_path / "elsewhere" / "rollout"
    made = zmr("checkout", "toy", "--dir", str(outside), cwd=proj.root)
    assert made.returncode == 0, made.stderr
    listed = zmr("list", cwd=outside)
    assert listed.returncode == 0 and "toy" in listed.stdout, listed.stderr
    for args in (["validate", "toy"], ["build", "toy"], ["verify", "toy"], ["export", "toy", "--dir", str(outside), "--dry-run"]):
        result = zmr(*args, cwd=outside / "src")
        assert result.returncode == 0, (args, result.stderr)
    assert git("rev-parse", "--verify", "-q", "refs/heads/rollout/toy", cwd=proj.root)


def test_checkout_has_an_upstream_remote_and_history_on_demand(proj, upstream):
    for n in range(4):
        upstream.commit({"docs/history.md": f"{n}\n"}, f"older history {n}")
    pin = simple_model(proj, upstream, pin_index=len(upstream.commits) - 1)
    later = upstream.commit({"docs/other.md": "later\n"}, "A later upstream fix")
    assert zmr("checkout", "toy", cwd=proj.root).returncode == 0
    co = proj.root / "work/toy/rollout"
    assert git("config", "remote.upstream.url", cwd=co) == str(upstream.path)
    assert (co / ".git/shallow").is_file()  # the default stays shallow: fast
    assert git("rev-parse", "--is-shallow-repository", cwd=co) == "true"
    # On demand: zmr checkout --history (from zmr's mirror), or `git fetch --unshallow upstream`.
    again = zmr("checkout", "toy", "--history", cwd=proj.root)
    assert again.returncode == 0, again.stderr
    assert "with upstream's history" in again.stdout
    assert git("rev-parse", "--is-shallow-repository", cwd=co) == "false"
    assert git("rev-parse", "upstream/main", cwd=co) == later
    assert git("log", "--format=%s", pin, cwd=co).splitlines()[-3:] == ["upstream commit 3", "upstream commit 2", "upstream commit 1"]
    git("cherry-pick", later, cwd=co)
    assert (co / "docs/other.md").read_text() == "later\n"
    git("reset", "-q", "--hard", "HEAD~1", cwd=co)
    assert zmr("export", "toy", cwd=proj.root).stdout.startswith("unchanged")
    # The documented git step works as well, in a fresh checkout.
    other = proj.root / "elsewhere"
    assert zmr("checkout", "toy", "--dir", str(other), cwd=proj.root).returncode == 0
    assert git("rev-parse", "--is-shallow-repository", cwd=other) == "true"
    git("fetch", "-q", "--unshallow", "upstream", cwd=other)
    assert git("rev-parse", "upstream/main", cwd=other) == later
    assert git("rev-list", "--count", pin, cwd=other) == str(len(upstream.commits) - 1)


def test_a_colleagues_branch_fetched_from_elsewhere_is_not_taken_for_upstream(proj, upstream, tmp_path):
    """Only refs of the upstream's URL (and zmr's mirror) name upstream commits: a branch fetched from a colleague exports."""
    _, folder, co = three_patch_model(proj, upstream)
    colleague = tmp_path / "colleague"
    git("clone", "-q", str(co), str(colleague))
    (colleague / "docs/guide.md").write_text("guide\nfrom a colleague\n")
    git("commit", "-q", "-am", "Colleague's change", cwd=colleague)
    git("remote", "add", "colleague", str(colleague), cwd=co)
    git("fetch", "-q", "colleague", cwd=co)
    git("reset", "-q", "--hard", "colleague/toy/rollout", cwd=co)
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    assert "added     0004-colleague-s-change.patch" in result.stdout
