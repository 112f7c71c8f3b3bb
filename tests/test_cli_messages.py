"""Messages that said the wrong thing: each says what happened and what to do (issue #25, item 10)."""

from __future__ import annotations

from conftest import git, simple_model, zmr
from test_publish import _remote, _someone_else_pushes, _two_models


def test_zmr_repo_that_does_not_exist_says_so(project, tmp_path):
    missing = tmp_path / "nonexistent"
    result = zmr("list", cwd=project.root, env={"ZMR_REPO": str(missing)})
    assert result.returncode == 2
    assert result.stderr.startswith(f"zmr: error: ZMR_REPO={missing}: no such folder\n")
    assert "set ZMR_REPO" not in result.stderr and "unset it" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    other = zmr("list", cwd=project.root, env={"ZMR_REPO": str(empty)})
    assert other.returncode == 2 and f"ZMR_REPO={empty}: not a zmr repository" in other.stderr


def test_rebase_of_a_dirty_checkout_says_to_commit_before_exporting(project, upstream):
    simple_model(project, upstream)
    assert zmr("checkout", "toy", "-c", "rollout", cwd=project.root).returncode == 0
    tree = project.root / "work/toy/rollout"
    (tree / "src/kernels/matmul.py").write_text("edited, not committed\n")
    new = upstream.commit({"docs/notes.md": "notes\n"}, "Add notes")
    result = zmr("rebase", "toy", "--onto", new, cwd=project.root)
    assert result.returncode == 2
    assert "uncommitted changes in src/kernels/matmul.py" in result.stderr
    assert "commit it (git commit) and export it (`zmr export toy -c rollout`)" in result.stderr
    assert "export it first" not in result.stderr  # export refuses a dirty tree: that advice went in a circle
    assert zmr("export", "toy", "-c", "rollout", cwd=project.root).returncode == 2


def test_rebase_onto_an_ancestor_of_the_pin_warns_of_a_downgrade(project, upstream):
    pin = simple_model(project, upstream, pin_index=2)
    older = upstream.commits[1]
    result = zmr("rebase", "toy", "--onto", older, cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert f"zmr: warning: toy/rollout: {older} ({older[:12]}) is an ancestor of the pin {pin[:12]}: this moves the pin back 1 commit (a downgrade)" in result.stderr
    forward = upstream.commit({"docs/notes.md": "notes\n"}, "Add notes")
    ahead = zmr("rebase", "toy", "--onto", forward, cwd=project.root)
    assert ahead.returncode == 0 and "downgrade" not in ahead.stderr


def test_a_conflict_resolved_to_nothing_is_not_reported_as_already_upstream(project, upstream):
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    new = upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    stopped = zmr("rebase", "toy", "--onto", new, cwd=project.root)
    assert stopped.returncode == 1, stopped.stderr
    tree = project.root / "work/toy/rollout"
    git("checkout", "--ours", "--", "src/model.py", cwd=tree)  # keep upstream's line: the patch's change is given up
    git("add", "src/model.py", cwd=tree)
    done = zmr("rebase", "toy", "--continue", cwd=project.root)
    assert done.returncode == 0, done.stderr
    assert "## Dropped: already upstream (0)\n\nnone\n" in done.stdout
    assert "## Dropped: conflict resolved to no change (1)\n\n- `0001-fixed-split.patch` Use a fixed split size in matmul: the resolution left nothing to commit" in done.stdout


def test_publish_dry_run_with_replace_foreign_shows_the_refused_branch_as_refused(tmp_path, project, upstream):
    _two_models(project, upstream)
    bare = _remote(tmp_path, project)
    assert zmr("publish", "--all", cwd=project.root).returncode == 0
    theirs = _someone_else_pushes(tmp_path, bare)
    # origin moved behind zmr's back: even --replace-foreign does not take it before it is fetched and looked at.
    dry = zmr("publish", "--all", "--dry-run", "--replace-foreign", cwd=project.root)
    assert dry.returncode == 1
    lines = dry.stdout.splitlines()
    ours = project.ref("refs/heads/rollout/toy")
    assert f"refused      rollout/toy    {theirs[:12]} -> {ours[:12]}" in lines
    assert not any(line.startswith("would") and "rollout/toy" in line for line in lines)
    assert lines[-1] == "dry run: nothing pushed to origin; publish would refuse (1 branch refused), so no branch would move"
    assert "refusing to publish" in dry.stderr
