"""zmr import on hand-made branches: candidates from the message, single snapshots, up-front refusals, adding to a manifest."""

from __future__ import annotations

import os

from conftest import git, make_project, make_upstream, zmr
from test_adopt import _hand_made_branch

from zmr.importing.importer import Imported, add_components


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
