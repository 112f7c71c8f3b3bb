"""zmr import (zmr.importing.importer): release branches -> manifest + series -> zmr build gives the same trees.

On hand-made branches too: candidates from the message, single snapshots,
up-front refusals, adding to a manifest.
"""

from __future__ import annotations

import json
import os

from conftest import git, make_patch, make_project, make_upstream, simple_model, zmr
from test_adopt import _hand_made_branch

from zmr.importing.importer import Imported, add_components


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


def _maker(tmp_path, project):
    """A scratch clone whose pushes create branches in *project*."""
    work = tmp_path / "maker"
    git("clone", "-q", str(project.root), str(work))
    return work


def test_import_says_which_candidates_it_tried(tmp_path):
    up = make_upstream(tmp_path / "up", [{"a.txt": f"{i}\n", f"f{i}.txt": "x\n"} for i in range(3)])
    project = make_project(tmp_path / "project")
    project.commit_all("start")
    work = _maker(tmp_path, project)
    message = f"Snapshot of up at {up.commits[2]}\n\n(first tried at {up.commits[0][:9]}; see also cafe1234beef)"
    _hand_made_branch(work, up, up.commits[1], "up/m", message, {"a.txt": "changed\n"})
    result = zmr("import", "up/m", "--upstream", str(up.path), cwd=project.root)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("zmr: error: up/m: no upstream commit named in the message of snapshot ") and lines[0].endswith(" has its tree")
    assert f"  tried {up.commits[2][:12]} in {up.path}: tree differs from the snapshot (2 paths differ)" in lines
    assert f"  tried {up.commits[0][:12]} in {up.path}: tree differs from the snapshot (2 paths differ)" in lines
    assert f"  tried cafe1234beef in {up.path}: no commit with this abbreviated id" in lines
    assert "check --upstream, or pass --commit SHA" in result.stderr
    assert not (project.root / "manifests/m.yaml").exists() and not (project.root / "patches").exists()
    # Without --upstream and no URL anywhere: said so.
    bare = zmr("import", "up/m", cwd=project.root)
    assert bare.returncode == 2 and "no upstream repository to look it up in" in bare.stderr and "--upstream URL" in bare.stderr


def test_single_snapshot_base_given_or_found_only_when_unambiguous(tmp_path):
    # c0 and c2 have the same tree (c2 reverts c1): equally close to a snapshot made from either.
    up = make_upstream(tmp_path / "up", [{"a.txt": "1\n", "b.txt": "b\n"}, {"a.txt": "2\n"}, {"a.txt": "1\n"}])
    project = make_project(tmp_path / "project")
    project.commit_all("start")
    work = _maker(tmp_path, project)
    _hand_made_branch(work, up, up.commits[0], "up/kimi", "Kimi working trees", {"kimi.txt": "kda\n"}, single=True)
    none = zmr("import", "up/kimi", "--upstream", str(up.path), cwd=project.root)
    assert none.returncode == 2
    assert "a single snapshot commit" in none.stderr and "--base REV" in none.stderr and "--find-base" in none.stderr
    tie = zmr("import", "up/kimi", "--upstream", str(up.path), "--find-base", cwd=project.root)
    assert tie.returncode == 2
    assert "--find-base found no unambiguous base" in tie.stderr
    assert f"    {up.commits[2][:12]}  1 path differs" in tie.stderr and f"    {up.commits[0][:12]}  1 path differs" in tie.stderr
    assert f"    {up.commits[1][:12]}  2 paths differ" in tie.stderr
    assert not (project.root / "manifests/kimi.yaml").exists()
    given = zmr("import", "up/kimi", "--upstream", str(up.path), "--base", up.commits[2][:10], cwd=project.root)
    assert given.returncode == 0, given.stderr
    text = (project.root / "manifests/kimi.yaml").read_text()
    assert f"commit: {up.commits[2]}\n" in text and "release: snapshot\n" in text
    project.commit_all("imported")
    assert zmr("build", "kimi", cwd=project.root).returncode == 0
    assert git("rev-parse", "up/kimi^{tree}", cwd=project.root) == git("rev-parse", "up/kimi^{tree}", cwd=work)


def test_a_wrong_base_that_brings_upstream_changes_is_warned_about(tmp_path):
    many = {f"pkg/f{i:03}.py": f"V = {i}\n" for i in range(130)}
    up = make_upstream(tmp_path / "up", [many, {name: text + "# v2\n" for name, text in many.items()}])
    project = make_project(tmp_path / "project")
    project.commit_all("start")
    work = _maker(tmp_path, project)
    _hand_made_branch(work, up, up.commits[1], "up/kimi", "Kimi working trees", {"kimi.txt": "kda\n"}, single=True)
    wrong = zmr("import", "up/kimi", "--upstream", str(up.path), "--base", up.commits[0], "--model", "wrong", cwd=project.root)
    assert wrong.returncode == 0, wrong.stderr
    assert (
        f"zmr: warning: up/kimi: the patch from base {up.commits[0][:12]} touches 131 files (more than 100); a wrong base puts upstream changes into the series"
        in wrong.stderr
    )
    right = zmr("import", "up/kimi", "--upstream", str(up.path), "--find-base", "--model", "right", cwd=project.root)
    assert right.returncode == 0, right.stderr
    assert "warning" not in right.stderr
    assert f"{up.commits[1][:12]}  1 path differs" in right.stdout and f"{up.commits[0][:12]}  131 paths differ" in right.stdout


def test_import_refuses_up_front_what_build_refuses(tmp_path):
    up = make_upstream(tmp_path / "up", [{"a.txt": "1\n"}])
    project = make_project(tmp_path / "project")
    project.commit_all("start")
    work = _maker(tmp_path, project)

    def evil_link(tree):
        os.symlink("/etc/passwd", tree / "evil")
        git("add", "evil", cwd=tree)

    _hand_made_branch(work, up, up.commits[0], "up/m", f"up @ {up.commits[0]}", {"a.txt": "2\n"}, more=evil_link)
    result = zmr("import", "up/m", "--upstream", str(up.path), cwd=project.root)
    assert result.returncode == 2
    # As `zmr validate` and `zmr build` say it about that series.
    assert result.stderr.startswith(
        "zmr: error: up/m: 1 problem in patches/m/up/series\n  patches/m/up/series:2: patches/m/up/0001-zero-mismatch-changes.patch: line "
    )
    assert "creates symlink 'evil' pointing outside the tree ('/etc/passwd'); a patch may only change files inside the tree" in result.stderr
    assert "zmr build would refuse this series; nothing was written" in result.stderr
    assert not (project.root / "manifests/m.yaml").exists() and not (project.root / "patches").exists()


def _item(key: str, url: str) -> Imported:
    return Imported("m", key, f"{key}/m", "0" * 40, url, "1" * 40, "two-commit", "two-commit")


def test_adding_components_keeps_comments_and_layout():
    text = (
        "# The model m.\n"
        "model: m\n"
        'title: "M"   # shown in the README\n'
        "components:\n"
        "    vllm:\n"
        "        upstream: https://github.com/vllm-project/vllm.git   # rollout\n"
        "        commit: " + "a" * 40 + "\n"
        "        smoke:\n"
        "          - name: import\n"
        "            run: python -c 'import vllm'\n"
        "# Model-level tests:\n"
        "smoke:\n"
        "    - name: bitwise\n"
        "      run: python check.py\n"
    )
    new = add_components(text, "manifests/m.yaml", [_item("verl", "https://github.com/volcengine/verl.git"), _item("megatron", "/srv/Megatron LM")])
    cut = text.index("# Model-level tests:")
    assert new == (
        text[:cut]
        + "    verl:\n        upstream: https://github.com/volcengine/verl.git\n        commit: "
        + "1" * 40
        + "\n"
        + '    megatron:\n        upstream: "/srv/Megatron LM"\n        commit: '
        + "1" * 40
        + "\n"
        + text[cut:]
    )
    import yaml

    assert list(yaml.safe_load(new)["components"]) == ["vllm", "verl", "megatron"]
