"""Build → verify round trips, tampering, atomicity, reproducibility."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import git, make_patch, make_project, simple_model, zmr


def test_build_then_verify_round_trip(project, upstream):
    pin = simple_model(project, upstream)
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "created   rollout/toy" in result.stdout
    tip = project.ref("refs/heads/rollout/toy")
    assert tip is not None
    commits = git("rev-list", tip, cwd=project.root).split()
    assert len(commits) == 2
    snapshot, changes = commits[1], commits[0]
    # The snapshot is a root commit whose tree is exactly the upstream tree.
    assert git("rev-list", "--max-parents=0", tip, cwd=project.root) == snapshot
    assert git("rev-parse", f"{snapshot}^{{tree}}", cwd=project.root) == git("rev-parse", f"{pin}^{{tree}}", cwd=upstream.path)
    message = git("log", "-1", "--format=%B", snapshot, cwd=project.root)
    assert f"Zmr-Upstream-Commit: {pin}" in message
    assert f"Zmr-Upstream: {upstream.path}" in message
    body = git("log", "-1", "--format=%B", changes, cwd=project.root)
    assert "- Use a fixed split size in matmul" in body
    assert "- Make matmul output contiguous" in body
    assert "Zmr-Series: sha256:" in body
    assert "line 10 fixed split" in git("show", f"{changes}:src/model.py", cwd=project.root)
    verify = zmr("verify", "toy", cwd=project.root)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith("ok")
    again = zmr("build", "toy", cwd=project.root)
    assert "unchanged rollout/toy" in again.stdout
    assert project.ref("refs/heads/rollout/toy") == tip


def test_repository_holds_every_object_without_alternates(project, upstream, tmp_path):
    simple_model(project, upstream)
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    assert not (project.root / ".git/objects/info/alternates").exists()
    shutil.rmtree(os.environ["ZMR_CACHE"])
    git("fsck", "--strict", "--no-dangling", cwd=project.root)
    clone = tmp_path / "clone"
    git("clone", "-q", "--bare", str(project.root), str(clone))
    assert git("rev-list", "--count", "rollout/toy", cwd=clone) == "2"


def test_failing_patch_moves_no_ref(project, upstream):
    pin = upstream.commits[1]
    good = make_patch(upstream, pin, {"docs/guide.md": "guide v2\n"}, "Update the guide")
    simple_model(project, upstream)
    # A second model builds fine alone; in one run with a broken model, neither moves.
    project.series("other", "trainer", [("0001-guide.patch", good)])
    project.manifest("other", f"""
        model: other
        components:
          trainer:
            upstream: {upstream.path}
            commit: {pin}
        """)
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    before = project.refs()
    model_py = upstream.file_at(pin, "src/model.py")
    broken = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 30\n", "line 30 changed\n")}, "Change line 30")
    broken = broken.replace(b" line 29\n", b" line 29 drifted\n")
    project.series("toy", "rollout", [("0001-broken.patch", broken)])
    (project.root / "patches/other/trainer/0001-guide.patch").write_bytes(good.replace(b"guide v2", b"guide v3"))
    result = zmr("build", "--all", cwd=project.root)
    assert result.returncode == 2
    assert "patches/toy/rollout/0001-broken.patch: does not apply" in result.stderr
    assert f"at {pin}" in result.stderr
    assert "src/model.py, hunk #1 (@@ -27,7 +27,7 @@" in result.stderr
    assert project.refs() == before


def test_upstream_as_bundle_file_url_and_insteadof(tmp_path, upstream):
    bundle = tmp_path / "project/upstreams/toy.bundle"
    project = make_project(tmp_path / "project")
    bundle.parent.mkdir(parents=True)
    git("bundle", "create", "-q", str(bundle), "--all", cwd=upstream.path)
    simple_model(project, upstream, model="viabundle", upstream_spec="upstreams/toy.bundle")
    simple_model(project, upstream, model="viafile", upstream_spec=f"file://{upstream.path}")
    simple_model(project, upstream, model="viarewrite", upstream_spec="https://example.invalid/toy.git")
    # Git's own URL rewriting, from the user's global config.
    gitconfig = os.path.join(os.environ["HOME"], ".gitconfig")
    with open(gitconfig, "w") as handle:
        handle.write(f'[url "file://{upstream.path}"]\n\tinsteadOf = https://example.invalid/toy.git\n')
    result = zmr("build", "--all", cwd=project.root)
    assert result.returncode == 0, result.stderr
    trees = {git("rev-parse", f"rollout/{m}^{{tree}}", cwd=project.root) for m in ("viabundle", "viafile", "viarewrite")}
    assert len(trees) == 1
    assert zmr("verify", "--all", cwd=project.root).returncode == 0


def test_reproducible_across_clones_config_and_clock(tmp_path, upstream):
    first = make_project(tmp_path / "first")
    simple_model(first, upstream)
    second = tmp_path / "second"
    git("clone", "-q", str(first.root), str(second))
    assert zmr("build", "--all", cwd=first.root).returncode == 0
    home = tmp_path / "otherhome"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Someone Else\n\temail = else@example.com\n[core]\n\tabbrev = 7\n[format]\n\tsignature = x\n[commit]\n\tgpgSign = false\n")
    env = {
        "HOME": str(home),
        "TZ": "Asia/Kolkata",
        "LANG": "de_DE.UTF-8",
        "LC_ALL": "de_DE.UTF-8",
        "GIT_AUTHOR_NAME": "Leaky",
        "GIT_COMMITTER_DATE": "@1234567890 +0500",
        "GIT_AUTHOR_DATE": "@1234567890 +0500",
        "ZMR_CACHE": str(tmp_path / "cache2"),
    }
    assert zmr("build", "--all", cwd=second, env=env).returncode == 0
    a = git("rev-parse", "rollout/toy", cwd=first.root)
    b = git("rev-parse", "rollout/toy", cwd=second)
    assert a == b


def test_snapshot_release_is_one_root_commit_with_the_series_applied(project, upstream):
    pin = simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + "    release: snapshot\n")
    project.commit_all("snapshot mode")
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("refs/heads/rollout/toy")
    assert git("rev-list", tip, cwd=project.root) == tip  # a single, root commit
    assert "line 10 fixed split" in git("show", f"{tip}:src/model.py", cwd=project.root)
    message = git("log", "-1", "--format=%B", tip, cwd=project.root)
    for trailer in (f"Zmr-Upstream-Commit: {pin}", f"Zmr-Upstream: {upstream.path}", "Zmr-Model: toy", "Zmr-Component: rollout", "Zmr-Series: sha256:"):
        assert trailer in message
    assert zmr("verify", "toy", cwd=project.root).returncode == 0
    other = git("commit-tree", "-m", "hand-made", f"{tip}^{{tree}}", cwd=project.root)
    git("update-ref", "refs/heads/rollout/toy", other, cwd=project.root)
    result = zmr("verify", "toy", cwd=project.root)
    assert result.returncode == 1 and "changes metadata differs (message" in result.stdout


def test_build_refuses_to_move_a_checked_out_branch(project, upstream, tmp_path):
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("refs/heads/rollout/toy")
    worktree = tmp_path / "looking-at-the-release"
    git("worktree", "add", "-q", str(worktree), "rollout/toy", cwd=project.root)
    series = project.root / "patches/toy/rollout/series"
    series.write_text(series.read_text().splitlines()[0] + "\n")  # drop the second patch
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 2
    assert f"rollout/toy is checked out in {worktree}" in result.stderr
    assert project.ref("refs/heads/rollout/toy") == tip
    git("worktree", "remove", str(worktree), cwd=project.root)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert project.ref("refs/heads/rollout/toy") != tip


def test_a_series_folder_that_does_not_exist_is_an_error_not_an_empty_series(project, upstream):
    """A typo in `patches:` (or a renamed component) must not pass validate and build a release without its patches."""
    pin = simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    text = manifest.read_text()
    manifest.write_text(text.replace("    track: main\n", "    track: main\n    patches: patches/toy/rolout\n"))
    line = manifest.read_text().splitlines().index("    patches: patches/toy/rolout") + 1
    for command in ("validate", "build"):
        result = zmr(command, "toy", cwd=project.root)
        assert result.returncode == 2, (command, result.stdout)
        assert f"manifests/toy.yaml:{line}: series folder patches/toy/rolout does not exist" in result.stderr
        assert "create patches/toy/rolout/series" in result.stderr
    assert project.ref("rollout/toy") is None
    # A renamed component key: its default folder is missing; the error names the component's line.
    manifest.write_text(text.replace("  rollout:\n", "  engine:\n"))
    renamed = zmr("validate", "toy", cwd=project.root)
    assert renamed.returncode == 2
    assert "manifests/toy.yaml:4: series folder patches/toy/engine does not exist" in renamed.stderr
    # A component without patches says so with an empty series file.
    project.write("patches/toy/engine/series", "")
    ok = zmr("validate", "toy", cwd=project.root)
    assert ok.returncode == 0, ok.stderr
    assert "0 patches" in ok.stdout
    build = zmr("build", "toy", cwd=project.root)
    assert build.returncode == 0, build.stderr
    assert git("rev-parse", "engine/toy~1^{tree}", cwd=project.root) == git("rev-parse", f"{pin}^{{tree}}", cwd=upstream.path)
def test_a_ref_update_that_finds_its_result_already_there_succeeds(project, upstream):
    """update_refs is idempotent: refs already at their new values are done; a ref found elsewhere fails the whole update."""
    from zmr.infra import git as zgit

    repo = zgit.Repo(project.root / ".git")
    a, b, c = upstream.commits
    git("fetch", "-q", str(upstream.path), "main", cwd=project.root)
    git("update-ref", "refs/heads/x", b, cwd=project.root)  # another process got there first
    repo.update_refs([zgit.RefUpdate("refs/heads/x", b, None), zgit.RefUpdate("refs/heads/y", c, None)], "test")
    assert (project.ref("refs/heads/x"), project.ref("refs/heads/y")) == (b, c)
    git("update-ref", "refs/heads/x", a, cwd=project.root)  # moved elsewhere: a real conflict
    with pytest.raises(zgit.GitError):
        repo.update_refs([zgit.RefUpdate("refs/heads/x", c, b), zgit.RefUpdate("refs/heads/z", c, None)], "test")
    assert (project.ref("refs/heads/x"), project.ref("refs/heads/z")) == (a, None)  # nothing moved


def test_every_command_that_reads_a_series_names_the_manifest_line_of_a_missing_folder(project, upstream):
    """Project.series is the one reader: export named no manifest line before (it read the folder itself)."""
    simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    shutil.rmtree(project.root / "patches/toy/rollout")
    line = (project.root / "manifests/toy.yaml").read_text().splitlines().index("  rollout:") + 1
    # (`zmr update` joins this list when zmr/ops/update.py reads the series through Project.series too.)
    readers = (["export", "toy"], ["checkout", "toy"], ["list"], ["validate", "toy"], ["verify", "toy"], ["upstreamed", "toy"], ["update", "toy"])
    for args in (*readers, ["rebase", "toy", "--onto", "main"]):
        result = zmr(*args, cwd=project.root)
        assert result.returncode == 2, (args, result.stdout)
        assert f"manifests/toy.yaml:{line}: series folder patches/toy/rollout does not exist" in result.stderr, (args, result.stderr)
