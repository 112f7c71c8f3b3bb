"""zmr import: release branches → manifest + series → zmr build gives the same trees."""

from __future__ import annotations

import json

from conftest import git, make_patch, make_project, simple_model, zmr


def test_import_round_trip_rebuilds_the_same_trees(tmp_path, upstream):
    first = make_project(tmp_path / "first")
    pin = simple_model(first, upstream)
    # A second component released as a single snapshot commit.
    guide = make_patch(upstream, upstream.commits[2], {"docs/guide.md": "guide\nsnapshot notes\n"}, "Add snapshot notes")
    first.series("toy", "trainer", [("0001-notes.patch", guide)])
    manifest = first.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[2]}\n    release: snapshot\n")
    first.commit_all("two components")
    assert zmr("build", "toy", cwd=first.root).returncode == 0
    second = make_project(tmp_path / "second")
    result = zmr("import", "rollout/toy", "trainer/toy", "--remote", str(first.root), "--json", cwd=second.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["manifests"][0]
    assert data["model"] == "toy"
    assert [(c["component"], c["layout"], c["commit"], len(c["patches"])) for c in data["components"]] == [
        ("rollout", "two-commit", pin, 1),
        ("trainer", "snapshot", upstream.commits[2], 1),
    ]
    text = (second.root / "manifests/toy.yaml").read_text()
    assert text == (
        f"model: toy\ntitle: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {pin}\n"
        f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[2]}\n    release: snapshot\n"
    )
    patch = (second.root / "patches/toy/rollout/0001-toy-rollout-zero-mismatch-changes.patch").read_text()
    assert "- Use a fixed split size in matmul\n- Make matmul output contiguous\n---\n" in patch and "Zmr-Series" not in patch
    second.commit_all("imported")
    build = zmr("build", "toy", cwd=second.root)
    assert build.returncode == 0, build.stderr
    for rev in ("rollout/toy", "rollout/toy~1", "trainer/toy"):
        assert git("rev-parse", f"{rev}^{{tree}}", cwd=second.root) == git("rev-parse", f"{rev}^{{tree}}", cwd=first.root), rev
    assert git("rev-list", "--count", "trainer/toy", cwd=second.root) == "1"
    assert zmr("verify", "toy", cwd=second.root).returncode == 0
    again = zmr("import", "rollout/toy", "--remote", str(first.root), cwd=second.root)
    assert again.returncode == 2
    assert "manifests/toy.yaml already exists; zmr import never overwrites a manifest" in again.stderr


def test_import_branch_without_trailers_needs_and_checks_the_upstream(tmp_path, upstream):
    pin = upstream.commits[1]
    project = make_project(tmp_path / "project")
    # A hand-made vendor branch: snapshot, then two change commits (per-commit patches).
    scratch = tmp_path / "vendor"
    git("clone", "-q", str(upstream.path), str(scratch))
    git("checkout", "-q", "--orphan", "vendored", pin, cwd=scratch)
    git("commit", "-q", "-m", "Vendor the toy upstream", cwd=scratch)
    (scratch / "src/kernels/matmul.py").write_text("def matmul(a, b):\n    return (a @ b).contiguous()\n")
    git("commit", "-q", "-am", "Contiguous matmul", cwd=scratch, env={"GIT_AUTHOR_NAME": "Kernel Dev", "GIT_AUTHOR_DATE": "@1711000000 +0100"})
    (scratch / "docs/guide.md").write_text("guide\nvendored\n")
    git("commit", "-q", "-am", "Note the vendoring", cwd=scratch)
    git("push", "-q", str(project.root), "vendored:refs/heads/rollout/legacy", cwd=scratch)
    tip_tree = git("rev-parse", "rollout/legacy^{tree}", cwd=project.root)
    missing = zmr("import", "rollout/legacy", cwd=project.root)
    assert missing.returncode == 2
    assert "rollout/legacy: the snapshot commit" in missing.stderr and "does not name its upstream" in missing.stderr
    assert "--upstream URL --commit SHA" in missing.stderr
    wrong = zmr("import", "rollout/legacy", "--upstream", str(upstream.path), "--commit", upstream.commits[2], cwd=project.root)
    assert wrong.returncode == 2
    assert "the snapshot tree of" in wrong.stderr and f"differs from {upstream.path} at {upstream.commits[2]}" in wrong.stderr
    assert "differing paths: setup.cfg, src/kernels/attention.py" in wrong.stderr
    assert not (project.root / "manifests/legacy.yaml").exists() and not (project.root / "patches").exists()
    done = zmr("import", "rollout/legacy", "--upstream", str(upstream.path), "--commit", pin, cwd=project.root)
    assert done.returncode == 0, done.stderr
    folder = project.root / "patches/legacy/rollout"
    assert (folder / "series").read_text() == "# imported by zmr import from rollout/legacy\n0001-contiguous-matmul.patch\n0002-note-the-vendoring.patch\n"
    first = (folder / "0001-contiguous-matmul.patch").read_text()
    assert "From: Kernel Dev <dev@upstream.invalid>\nDate: Thu, 21 Mar 2024 06:46:40 +0100\nSubject: [PATCH] Contiguous matmul\n" in first
    project.commit_all("imported")
    build = zmr("build", "legacy", cwd=project.root)
    assert build.returncode == 0, build.stderr
    assert git("rev-parse", "rollout/legacy^{tree}", cwd=project.root) == tip_tree
    assert git("rev-list", "--count", "rollout/legacy", cwd=project.root) == "2"
