"""`zmr publish`: verify, lease, one atomic push, against a real bare remote."""

from __future__ import annotations

import json
import os
import stat

from conftest import Project, git, make_patch, simple_model, two_models, zmr


def _remote(tmp_path, project, name="origin"):
    bare = tmp_path / f"{name}.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("remote", "add", name, str(bare), cwd=project.root)
    return bare


def _remote_heads(bare) -> dict[str, str]:
    text = git("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", cwd=bare)
    return {name: oid for oid, name in (line.split(" ", 1) for line in text.splitlines())}


def _two_models(project, upstream):
    """toy/rollout (two patches) and other/trainer (one patch), both built."""
    two_models(project, upstream)
    result = zmr("build", "--all", cwd=project.root)
    assert result.returncode == 0, result.stderr


def _change_series(project, upstream, model, component, text):
    pin = upstream.commits[1]
    project.series(model, component, [("0001-change.patch", make_patch(upstream, pin, {"docs/guide.md": text}, f"Change the guide: {text.strip()}"))])


def test_first_publish_then_noop_then_update(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    local = project.refs()
    dry = zmr("publish", "--all", "--dry-run", cwd=project.root)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would create trainer/other  (none) -> {local['refs/heads/trainer/other'][:12]}",
        f"would create rollout/toy    (none) -> {local['refs/heads/rollout/toy'][:12]}",
        "dry run: nothing pushed to origin (2 to push, 0 up to date)",
    ]
    assert _remote_heads(bare) == {}

    first = zmr("publish", "--all", cwd=project.root)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"created      trainer/other  (none) -> {local['refs/heads/trainer/other'][:12]}",
        f"created      rollout/toy    (none) -> {local['refs/heads/rollout/toy'][:12]}",
        "pushed 2 branches to origin in one atomic push; 0 up to date",
    ]
    assert _remote_heads(bare) == {"refs/heads/rollout/toy": local["refs/heads/rollout/toy"], "refs/heads/trainer/other": local["refs/heads/trainer/other"]}

    again = zmr("publish", "--all", "--json", cwd=project.root)
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["pushed"] is False and data["remote"] == "origin"
    assert [(b["branch"], b["status"], b["old"] == b["new"]) for b in data["branches"]] == [("trainer/other", "up to date", True), ("rollout/toy", "up to date", True)]

    # One model changes: only its branch moves; the plain output says old -> new.
    _change_series(project, upstream, "other", "trainer", "guide v3\n")
    assert zmr("build", "other", cwd=project.root).returncode == 0
    new = project.ref("refs/heads/trainer/other")
    update = zmr("publish", "--all", cwd=project.root)
    assert update.returncode == 0, update.stderr
    assert update.stdout.splitlines() == [
        f"updated      trainer/other  {local['refs/heads/trainer/other'][:12]} -> {new[:12]}",
        f"up to date   rollout/toy    {local['refs/heads/rollout/toy'][:12]}",
        "pushed 1 branch to origin in one atomic push; 1 up to date",
    ]
    assert _remote_heads(bare)["refs/heads/trainer/other"] == new


def test_publish_only_named_models(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    result = zmr("publish", "other", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert list(_remote_heads(bare)) == ["refs/heads/trainer/other"]


def test_published_branches_verify_from_a_fresh_clone(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    clone = tmp_path / "fresh"
    git("clone", "-q", str(project.root), str(clone))
    git("remote", "set-url", "origin", str(bare), cwd=clone)
    env = {"ZMR_CACHE": str(tmp_path / "fresh-cache")}
    result = zmr("verify", "--remote", "origin", "--all", cwd=clone, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["ok", "trainer/other"], ["ok", "rollout/toy"]]


def _someone_else_pushes(tmp_path, bare, branch="rollout/toy") -> str:
    other = tmp_path / "someone-else"
    git("clone", "-q", "--branch", branch, str(bare), str(other))
    (other / "HOTFIX").write_text("pushed by hand\n")
    git("add", "HOTFIX", cwd=other)
    git("commit", "-q", "-m", "hand-made fix", cwd=other)
    git("push", "-q", "origin", f"HEAD:refs/heads/{branch}", cwd=other)
    return git("rev-parse", "HEAD", cwd=other)


def test_publish_refused_after_someone_else_pushed(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    theirs = _someone_else_pushes(tmp_path, bare)
    _change_series(project, upstream, "other", "trainer", "guide v3\n")
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    before = _remote_heads(bare)
    ours = project.ref("refs/heads/rollout/toy")
    result = zmr("publish", "--all", cwd=project.root)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "zmr: error: refusing to publish: 1 branch on origin changed behind zmr's back"
    assert lines[1] == f"  rollout/toy: origin has {theirs[:12]}, but this repository last saw {ours[:12]} there (refs/remotes/origin/rollout/toy); someone else pushed to it"
    assert _remote_heads(bare) == before  # nothing moved, the other branch's update included

    # Addressed by URL there is no remote-tracking ref: the commit itself is looked at.
    by_url = zmr("publish", "--all", "--remote", str(bare), "--dry-run", cwd=project.root)
    assert by_url.returncode == 1
    assert f"rollout/toy: {bare} has {theirs[:12]}, which is not a release commit of toy/rollout (no Zmr-Model/Zmr-Component trailers naming it); someone else pushed to it" in by_url.stderr
    # The lookup fetched their commit without touching the remote-tracking ref.
    assert project.ref("refs/remotes/origin/rollout/toy") == ours

    # Once the user has looked and fetched, the branch may be replaced -- on request, as zmr did not build its tip.
    git("fetch", "-q", "origin", cwd=project.root)
    foreign = zmr("publish", "--all", cwd=project.root)
    assert foreign.returncode == 1
    assert "refusing to publish: 1 branch on origin holds commits zmr did not build: rollout/toy" in foreign.stderr
    assert "zmr publish --replace-foreign" in foreign.stderr
    accepted = zmr("publish", "--all", "--replace-foreign", cwd=project.root)
    assert accepted.returncode == 0, accepted.stderr
    assert f"replaced     rollout/toy    {theirs[:12]} -> {ours[:12]}" in accepted.stdout
    assert _remote_heads(bare)["refs/heads/rollout/toy"] == ours
    assert git("rev-parse", f"refs/zmr/replaced/rollout/toy/{theirs}", cwd=bare) == theirs


def test_fresh_clone_may_replace_an_earlier_release(tmp_path, project, upstream):
    """No remote-tracking ref (a CI clone): a release commit of the same component is replaced."""
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    ci = tmp_path / "ci"
    git("clone", "-q", "--depth", "1", f"file://{project.root}", str(ci))
    git("remote", "set-url", "origin", str(bare), cwd=ci)
    _change_series(Project(ci), upstream, "toy", "rollout", "guide for CI\n")
    git("add", "-A", cwd=ci)
    git("commit", "-q", "-m", "new series", cwd=ci)
    env = {"ZMR_CACHE": str(tmp_path / "ci-cache")}
    assert zmr("build", "--all", cwd=ci, env=env).returncode == 0
    result = zmr("publish", "--all", cwd=ci, env=env)
    assert result.returncode == 0, result.stderr
    assert "updated      rollout/toy" in result.stdout
    assert _remote_heads(bare)["refs/heads/rollout/toy"] == git("rev-parse", "rollout/toy", cwd=ci)


def test_publish_refused_when_verify_fails(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    git("checkout", "-q", "rollout/toy", cwd=project.root)
    git("commit", "-q", "--amend", "-m", "rewritten message", cwd=project.root)
    git("checkout", "-q", "main", cwd=project.root)
    result = zmr("publish", "--all", cwd=project.root)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "zmr: error: refusing to publish: rollout/toy does not rebuild to the same commit ids"
    assert lines[1].startswith("  differs rollout/toy: changes metadata differs (message")
    assert _remote_heads(bare) == {}
    # A branch that was never built is refused the same way.
    git("branch", "-q", "-D", "trainer/other", cwd=project.root)
    missing = zmr("publish", "other", cwd=project.root)
    assert missing.returncode == 1
    assert "missing trainer/other: branch not found; run `zmr build`" in missing.stderr


def test_publish_is_atomic(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    published = _remote_heads(bare)
    # A per-ref hook (`update`) that refuses one branch: without --atomic the other would move.
    hook = bare / "hooks" / "update"
    hook.write_text('#!/bin/sh\nif [ "$1" = refs/heads/trainer/other ]; then echo "trainer/other is frozen" >&2; exit 1; fi\nexit 0\n')
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    _change_series(project, upstream, "toy", "rollout", "guide, toy\n")
    _change_series(project, upstream, "other", "trainer", "guide, other\n")
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    result = zmr("publish", "--all", cwd=project.root)
    assert result.returncode == 1
    assert result.stderr.startswith("zmr: error: origin refused the push of trainer/other, rollout/toy\n")
    assert "trainer/other: [remote rejected] (hook declined)" in result.stderr
    assert "trainer/other is frozen" in result.stderr
    assert "the push was atomic: no branch moved on origin" in result.stderr
    assert _remote_heads(bare) == published
    os.unlink(hook)
    retry = zmr("publish", "--all", cwd=project.root)
    assert retry.returncode == 0, retry.stderr
    assert _remote_heads(bare) == {k: project.ref(k) for k in published}


def test_publish_bad_remote(tmp_path, project, upstream):
    simple_model(project, upstream)
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    result = zmr("publish", "--all", "--remote=--upload-pack=touch /tmp/x", cwd=project.root)
    assert result.returncode == 2
    assert "is not a remote name or URL" in result.stderr
    missing = zmr("publish", "--all", "--remote", "nowhere", cwd=project.root)
    assert missing.returncode == 2
    assert missing.stderr.splitlines()[0] == "zmr: error: no remote 'nowhere': `git remote add nowhere URL` or `--remote`"


def test_lease_refuses_a_change_made_while_publishing(tmp_path, project, upstream):
    """The remote moves between zmr's ls-remote and its push: the lease rejects the whole push."""
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    theirs = _someone_else_pushes(tmp_path, bare, "trainer/other")
    git("update-ref", "refs/heads/trainer/other", project.ref("refs/remotes/origin/trainer/other"), cwd=bare)  # undo, for now
    # The receive-pack the push starts moves the branch first: a push that lands in between.
    wrapper = tmp_path / "racing-receive-pack"
    wrapper.write_text(f'#!/bin/sh\ngit --git-dir="{bare}" update-ref refs/heads/trainer/other {theirs}\nexec git-receive-pack "$@"\n')
    wrapper.chmod(0o755)
    git("config", "remote.origin.receivepack", str(wrapper), cwd=project.root)
    _change_series(project, upstream, "toy", "rollout", "guide, toy\n")
    _change_series(project, upstream, "other", "trainer", "guide, other\n")
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    published_toy = _remote_heads(bare)["refs/heads/rollout/toy"]
    result = zmr("publish", "--all", cwd=project.root)
    assert result.returncode == 1
    assert "trainer/other: [rejected] (stale info)" in result.stderr
    assert "a branch on origin changed while publishing; run `zmr publish` again to look at it" in result.stderr
    assert _remote_heads(bare) == {"refs/heads/rollout/toy": published_toy, "refs/heads/trainer/other": theirs}
