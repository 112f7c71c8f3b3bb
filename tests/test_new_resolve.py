"""`zmr new`: `--track`, and a component pinned by branch, tag or abbreviated id is resolved in its upstream."""

from __future__ import annotations

from conftest import git, make_project, zmr
from zmr.model.manifest import load_manifests


def _project(tmp_path):
    project = make_project(tmp_path / "project")
    project.commit_all("empty project")
    return project


def test_new_resolves_a_branch_and_makes_it_the_track(tmp_path, upstream):
    project = _project(tmp_path)
    result = zmr("new", "m", "-c", f"rollout={upstream.path}@main", cwd=project.root)
    assert result.returncode == 0, result.stderr
    (manifest,) = load_manifests(project.root, ["m"])
    comp = manifest.components["rollout"]
    assert (comp.commit, comp.track) == (upstream.commits[-1], "main")
    assert zmr("validate", "m", cwd=project.root).returncode == 0


def test_new_resolves_an_abbreviated_id_and_takes_track(tmp_path, upstream):
    project = _project(tmp_path)
    git("branch", "stable", upstream.commits[0], cwd=upstream.path)
    result = zmr(
        "new", "m", "-c", f"rollout={upstream.path}@{upstream.commits[1][:9]}", "-c", f"trainer={upstream.path}@{upstream.commits[0]}",
        "--track", "main", "--track", "trainer=stable", cwd=project.root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (manifest,) = load_manifests(project.root, ["m"])
    assert [(c.key, c.commit, c.track) for c in manifest.components.values()] == [
        ("rollout", upstream.commits[1], "main"),
        ("trainer", upstream.commits[0], "stable"),
    ]


def test_new_says_where_to_run_rev_parse_when_it_cannot_resolve(tmp_path, upstream):
    project = _project(tmp_path)
    unknown = zmr("new", "m", "-c", f"rollout={upstream.path}@deadbeef1", cwd=project.root)
    assert unknown.returncode == 2
    assert f"--component 'rollout={upstream.path}@deadbeef1': 'deadbeef1' names no commit in {upstream.path}" in unknown.stderr
    assert f"git clone -q --bare --filter=tree:0 {upstream.path} \"$d\" && git -C \"$d\" rev-parse --verify 'deadbeef1^{{commit}}'`) and pass it" in unknown.stderr
    no_branch = zmr("new", "m", "-c", f"rollout={upstream.path}@no-such-branch", cwd=project.root)
    assert no_branch.returncode == 2
    assert "cannot resolve 'no-such-branch'" in no_branch.stderr and "rev-parse --verify 'no-such-branch^{commit}'" in no_branch.stderr
    typo = zmr("new", "m", "-c", f"rollout={upstream.path}@{upstream.commits[0]}", "--track", "rollot=main", cwd=project.root)
    assert typo.returncode == 2 and "no component 'rollot'" in typo.stderr
    assert not (project.root / "manifests/m.yaml").exists()
