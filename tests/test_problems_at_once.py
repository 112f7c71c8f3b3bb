"""Every command that loads a manifest names all that is wrong with it and its series in one run (issue #36, "errors one at a time")."""

from __future__ import annotations

import json

import pytest
from conftest import make_project, simple_model, zmr

MARKED = "<<<<<<< HEAD\n+line 10 fixed split\n=======\n+line 10 split fixed\n>>>>>>> theirs\n"


def _three_problems(tmp_path, upstream):
    """A component added by hand (`commit: main`, no series folder) and conflict markers from `git pull` in another one's patch file."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + "  trainer:\n    upstream: https://example.com/t.git\n    commit: main\n")
    patch = project.root / "patches/toy/rollout/0001-fixed-split.patch"
    text = patch.read_text()
    patch.write_text(text.replace("+line 10 fixed split\n", MARKED))
    lines = manifest.read_text().split("\n")
    at = {
        "commit": lines.index("    commit: main") + 1,
        "folder": lines.index("  trainer:") + 1,
        "marker": patch.read_text().split("\n").index("<<<<<<< HEAD") + 1,
    }
    return project, at


@pytest.mark.parametrize(
    "args",
    [
        ["build", "toy"],
        ["verify", "toy"],
        ["export", "toy"],
        ["checkout", "toy"],
        ["diff", "toy"],
        ["status"],
        ["list"],
        ["update", "toy"],
        ["rebase", "toy", "--onto", "main"],
        ["validate"],
    ],
    ids=lambda args: args[0],
)
def test_a_bad_commit_a_missing_series_folder_and_a_broken_patch_file_in_one_run(tmp_path, upstream, args):
    project, at = _three_problems(tmp_path, upstream)
    before = {p: p.read_bytes() for p in project.root.rglob("*") if p.is_file() and ".git" not in p.parts}
    result = zmr(*args, cwd=project.root)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    err = result.stderr
    assert f"manifests/toy.yaml:{at['commit']}: components.trainer.commit: 'main' is not a full commit id" in err, err
    assert f"manifests/toy.yaml:{at['folder']}: components.trainer: series folder patches/toy/trainer does not exist" in err, err
    assert "create patches/toy/trainer/series, empty" in err, err
    assert f"patches/toy/rollout/0001-fixed-split.patch:{at['marker']}: conflict marker `<<<<<<< HEAD`" in err, err
    assert "problems in manifests/toy.yaml, patches/toy/rollout/0001-fixed-split.patch" in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert {p: p.read_bytes() for p in project.root.rglob("*") if p.is_file() and ".git" not in p.parts} == before  # nothing written


def test_the_json_error_lists_every_problem_and_following_the_hints_fixes_them_all(tmp_path, upstream):
    project, at = _three_problems(tmp_path, upstream)
    result = zmr("build", "toy", "--json", cwd=project.root)
    assert result.returncode == 2
    listed = json.loads(result.stdout or result.stderr.splitlines()[-1])
    text = json.dumps(listed)
    for needle in ("is not a full commit id", "series folder patches/toy/trainer does not exist", "conflict marker"):
        assert needle in text, listed
    # The three hints, followed: a full commit id, an empty series for a component without patches, the patch file restored.
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace("commit: main", "commit: " + upstream.commits[1]).replace("https://example.com/t.git", str(upstream.path)))
    (project.root / "patches/toy/trainer").mkdir()
    (project.root / "patches/toy/trainer/series").write_text("")
    patch = project.root / "patches/toy/rollout/0001-fixed-split.patch"
    patch.write_text(patch.read_text().replace(MARKED, "+line 10 fixed split\n"))
    built = zmr("build", "toy", cwd=project.root)
    assert built.returncode == 0, built.stderr


def test_a_valid_manifest_still_names_only_what_it_loads(tmp_path, upstream):
    """Without a manifest problem, a series a command does not act on is not read: checkout -c rollout works while another series is missing."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[1]}\n")
    assert zmr("checkout", "toy", "-c", "rollout", cwd=project.root).returncode == 0
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 2 and "series folder patches/toy/trainer does not exist" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["build", "verify"])
def test_with_a_valid_manifest_every_broken_series_of_the_components_acted_on_is_named_at_once(tmp_path, upstream, command):
    """Two components, a missing series folder for one and conflict markers in the other's patch: one run names both."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + f"  trainer:\n    upstream: {upstream.path}\n    commit: {upstream.commits[1]}\n")
    patch = project.root / "patches/toy/rollout/0001-fixed-split.patch"
    patch.write_text(patch.read_text().replace("+line 10 fixed split\n", MARKED))
    folder_line = manifest.read_text().split("\n").index("  trainer:") + 1
    result = zmr(command, "toy", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert "problems in manifests/toy.yaml, patches/toy/rollout/0001-fixed-split.patch" in result.stderr, result.stderr
    assert f"manifests/toy.yaml:{folder_line}: series folder patches/toy/trainer does not exist" in result.stderr, result.stderr
    assert "patches/toy/rollout/0001-fixed-split.patch:" in result.stderr and "conflict marker `<<<<<<< HEAD`" in result.stderr
    assert not any(project.root.joinpath(".git/refs/heads").rglob("toy"))  # nothing built
    # One broken series alone keeps its own message.
    (project.root / "patches/toy/trainer").mkdir()
    (project.root / "patches/toy/trainer/series").write_text("")
    alone = zmr(command, "toy", cwd=project.root)
    assert alone.returncode == 2 and "3 problems in patches/toy/rollout/series" in alone.stderr, alone.stderr
