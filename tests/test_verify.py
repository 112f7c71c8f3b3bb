"""zmr verify (zmr.ops.verify): rebuild and compare commit ids; a branch that differs is named with why (message, commits, trees)."""

from __future__ import annotations

import json

from conftest import git, simple_model, zmr


def _tamper_amend(project):
    tip = project.ref("refs/heads/rollout/toy")
    git("checkout", "-q", "rollout/toy", cwd=project.root)
    git("commit", "-q", "--amend", "-m", "rewritten message", cwd=project.root)
    git("checkout", "-q", "main", cwd=project.root)
    return tip


def test_verify_names_an_amended_branch(project, upstream):
    simple_model(project, upstream)
    zmr("build", "toy", cwd=project.root)
    _tamper_amend(project)
    result = zmr("verify", "toy", cwd=project.root)
    assert result.returncode == 1
    assert "differs  rollout/toy" in result.stdout
    assert "changes metadata differs (message" in result.stdout
    assert "rollout/toy" in result.stderr


def test_verify_names_an_added_commit(project, upstream):
    simple_model(project, upstream)
    zmr("build", "toy", cwd=project.root)
    git("checkout", "-q", "rollout/toy", cwd=project.root)
    (project.root / "src/extra.py").write_text("x = 1\n")
    git("add", "src/extra.py", cwd=project.root)
    git("commit", "-q", "-m", "sneaky", cwd=project.root)
    git("checkout", "-q", "main", cwd=project.root)
    result = zmr("verify", "toy", "--json", cwd=project.root)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    reasons = data["branches"][0]["reasons"]
    assert data["ok"] is False and data["branches"][0]["status"] == "differs"
    assert any("has 3 commits, expected 2" in r for r in reasons)
    assert any("changes tree differs (src/extra.py)" in r for r in reasons)


def test_verify_names_a_changed_snapshot_tree(project, upstream):
    pin = simple_model(project, upstream)
    zmr("build", "toy", cwd=project.root)
    tip = project.ref("refs/heads/rollout/toy")
    snapshot = git("rev-list", "--max-parents=0", tip, cwd=project.root)
    # Rebuild the branch with a snapshot whose tree lost a file.
    tree_lines = git("ls-tree", f"{snapshot}^{{tree}}", cwd=project.root).splitlines()
    new_tree = git("mktree", cwd=project.root, input=("\n".join(line for line in tree_lines if not line.endswith("\tREADME.md")) + "\n").encode())
    message = git("log", "-1", "--format=%B", snapshot, cwd=project.root)
    bad_snapshot = git("commit-tree", new_tree, "-m", message, cwd=project.root)
    changes_tree = git("rev-parse", f"{tip}^{{tree}}", cwd=project.root)
    bad_tip = git("commit-tree", changes_tree, "-p", bad_snapshot, "-m", git("log", "-1", "--format=%B", tip, cwd=project.root), cwd=project.root)
    git("update-ref", "refs/heads/rollout/toy", bad_tip, cwd=project.root)
    result = zmr("verify", "toy", cwd=project.root)
    assert result.returncode == 1
    assert f"snapshot tree differs from upstream {pin[:12]} (README.md)" in result.stdout


def test_verify_reports_missing_branch(project, upstream):
    simple_model(project, upstream)
    result = zmr("verify", "--all", cwd=project.root)
    assert result.returncode == 1
    assert "missing  rollout/toy" in result.stdout
