"""A long series (issue #24): no git command gets one argument per patch or per file.

A 20,000-patch series overflows the arguments of a process at the default
stack limit; here the CLI runs under a small one (Linux allows arguments a
quarter of the stack limit, at least 128 KiB), so that 600 patches with
long names overflow them where zmr passes a list that grows with the series
(their files' names, or the paths they touch, take over 128 KiB each).
Not a timed test: scripts/bench_long_series.py measures 20,000 patches.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from conftest import Project, git, make_upstream

PATCHES = 600
STACK_LIMIT = 512 * 1024  # arguments and environment then get 128 KiB
FILLER = "x" * 150  # long names: 600 patch files or paths take over 128 KiB


def _small_stack() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    limit = STACK_LIMIT if hard == resource.RLIM_INFINITY else min(STACK_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (limit, hard))


def zmr_small_stack(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    return subprocess.run([sys.executable, "-m", "zmr", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, preexec_fn=_small_stack)


def _path(i: int) -> str:
    return f"generated/{FILLER}/{FILLER}/file-{i:05d}.txt"


def _patch(i: int, path: str) -> bytes:
    """A format-patch mail that adds *path* holding one line."""
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Patch Author <author@zmr.invalid>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
        f"Subject: [PATCH] Add generated file {i}\n\n---\n"
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+line {i}\n"
    ).encode()


@pytest.fixture
def long_series(tmp_path, project: Project) -> tuple[Project, str]:
    upstream = make_upstream(tmp_path / "upstream", [{"README.md": "upstream\n"}, {"README.md": "upstream, later\n"}])
    pin = upstream.commits[0]
    patches = [(f"{i:05d}-add-generated-file-{FILLER}-{i}.patch", _patch(i, _path(i))) for i in range(1, PATCHES + 1)]
    project.series("long", "comp", patches)
    project.manifest("long", f"model: long\ncomponents:\n  comp:\n    upstream: {upstream.path}\n    commit: {pin}\n")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    project.commit_all("a long series")
    return project, pin


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert "Argument list too long" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
def test_long_series_builds_verifies_checks_out_exports_and_publishes(tmp_path, long_series):
    project, pin = long_series
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))

    _ok(zmr_small_stack("build", "long", cwd=project.root))
    branch = project.ref("refs/heads/comp/long")
    assert branch is not None
    listing = git("ls-tree", "-r", "--name-only", "comp/long", cwd=project.root).splitlines()
    assert len(listing) == PATCHES + 1 and _path(PATCHES) in listing
    assert "ok" in _ok(zmr_small_stack("verify", "long", cwd=project.root)).stdout

    _ok(zmr_small_stack("checkout", "long", cwd=project.root))
    checkout = project.root / "work/long/comp"
    assert git("rev-list", "--count", "HEAD", "--not", "zmr/base", cwd=checkout) == str(PATCHES)
    assert git("rev-parse", "HEAD^{tree}", cwd=checkout) == git("rev-parse", "comp/long^{tree}", cwd=project.root)

    unchanged = _ok(zmr_small_stack("export", "long", cwd=project.root))
    assert f"{PATCHES} patches" in unchanged.stdout and git("status", "--porcelain", cwd=project.root) == ""

    # One more commit in the checkout: export writes exactly one more patch.
    (checkout / "added.txt").write_text("added in the checkout\n")
    git("add", "added.txt", cwd=checkout)
    git("commit", "-q", "-m", "Add a file in the checkout", cwd=checkout)
    _ok(zmr_small_stack("export", "long", cwd=project.root))
    series = (project.root / "patches/long/comp/series").read_text().splitlines()
    assert len(series) == PATCHES + 1 and series[-1].endswith(".patch")
    changed = git("status", "--porcelain", "--untracked-files=all", "--", "patches", cwd=project.root).splitlines()
    assert sorted(line.split()[-1] for line in changed) == ["patches/long/comp/" + series[-1], "patches/long/comp/series"]
    project.commit_all("export one more patch")

    _ok(zmr_small_stack("build", "long", cwd=project.root))
    _ok(zmr_small_stack("publish", "long", "--remote", str(bare), cwd=project.root))
    published = git("rev-parse", "refs/heads/comp/long", cwd=bare)
    assert published == project.ref("refs/heads/comp/long") != branch
    assert git("show", f"{published}:added.txt", cwd=bare) == "added in the checkout"


def test_long_series_updates_and_rebases(tmp_path, long_series):
    project, pin = long_series
    later = git("rev-parse", "main", cwd=tmp_path / "upstream")
    report = _ok(zmr_small_stack("update", "long", "--to", "main", cwd=project.root))
    assert "clean" in report.stdout and later[:12] in report.stdout
    _ok(zmr_small_stack("rebase", "long", "--onto", "main", cwd=project.root))
    assert f"commit: {later}" in (project.root / "manifests/long.yaml").read_text()
    assert git("status", "--porcelain", "--", "patches", cwd=project.root) == ""  # every patch applies as it is
    _ok(zmr_small_stack("build", "long", cwd=project.root))
    assert git("rev-parse", "comp/long^^{tree}", cwd=project.root) == git("rev-parse", f"{later}^{{tree}}", cwd=tmp_path / "upstream")


def test_argument_list_too_long_is_an_internal_error_naming_the_command(tmp_path):
    """E2BIG from exec is zmr's bug (exit 3), never reported as a permission or disk problem."""
    from zmr.infra import git as zgit

    repo = tmp_path / "repo"
    git("init", "-q", str(repo))
    too_many = [f"{'y' * 100}-{i}" for i in range(100_000)]  # 10 MB: over any system's limit
    with pytest.raises(zgit.ArgumentsTooLong) as caught:
        zgit.Repo(repo / ".git").run(["rev-parse", "--", *too_many])
    err = caught.value
    assert err.exit_code == 3
    assert err.message.startswith("internal error: the system refused to start `git rev-parse` with 100")
    assert "argument list too long" in err.message and "bug in zmr" in str(err)
    assert "permission" not in str(err) and "free space" not in str(err)


def test_argument_batches_keep_order_and_stay_under_the_budget():
    from zmr.infra.git import argument_batches, argument_bytes

    items = [f"path-{i}" * (1 + i % 7) for i in range(2000)]
    batches = argument_batches(items, budget=4096)
    assert [item for batch in batches for item in batch] == items
    assert len(batches) > 1 and all(sum(argument_bytes(item) for item in batch) <= 4096 for batch in batches)
    assert argument_batches(["z" * 5000, "a"], budget=4096) == [["z" * 5000], ["a"]]  # one over the budget goes alone
    assert argument_batches([], budget=4096) == []


def _six_patches_and_a_bad_one(tmp_path, upstream):
    from test_replay import series_from

    pin = upstream.commits[1]
    steps = [(f"Add file {k}", {f"src/new_{k}_{'n' * 40}.py": f"value = {k}\n"}, {}) for k in range(5)]
    steps.append(("Change the model", {"src/model.py": upstream.file_at(pin, "src/model.py").replace("line 7\n", "line 7 changed\n") + "\n"}, {}))
    patches = series_from(upstream, pin, steps, tmp_path / "series")
    bad = series_from(upstream, upstream.commits[0], [("Needs a later tree", {"docs/guide.md": "not what is there\n"}, {})], tmp_path / "bad")
    return pin, patches, bad[0]


def test_batched_apply_is_all_or_nothing_and_equals_one_process(tmp_path, upstream, monkeypatch):
    from zmr.infra import git as zgit
    from zmr.ops.replay import TempIndex

    pin, patches, bad = _six_patches_and_a_bad_one(tmp_path, upstream)
    repo = zgit.Repo(upstream.path / ".git")
    tree = repo.tree_of(pin)
    with TempIndex(repo) as index:
        index.read_tree(tree)
        assert index.apply_all(patches).returncode == 0
        one_process = index.write_tree()
    monkeypatch.setattr(zgit, "ARGUMENT_BUDGET", 150)  # a few paths to a git process
    assert len(zgit.argument_batches([str(p.path) for p in patches])) >= 3
    with TempIndex(repo) as index:
        index.read_tree(tree)
        before = index.entries()
        failed = index.apply_all([*patches, bad])
        assert failed.returncode != 0 and b"guide.md" in failed.stderr
        assert index.entries() == before  # the batches that applied were undone
        proc = index.apply_all(patches)
        assert proc.returncode == 0 and proc.stderr.count(b"Checking patch") == len(patches)  # --verbose of every batch
        assert index.write_tree() == one_process


def test_batched_file_sets_and_checks_equal_one_process(tmp_path, upstream, monkeypatch):
    from zmr.infra import git as zgit
    from zmr.ops.replay import files_unchanged, patch_file_sets

    pin, patches, _ = _six_patches_and_a_bad_one(tmp_path, upstream)
    repo = zgit.Repo(upstream.path / ".git")
    files = patch_file_sets(repo, patches)
    assert files is not None and [len(f) for f in files] == [1] * 6
    paths = sorted(set().union(*files))
    listing = repo.ls_tree_paths(pin, paths)
    monkeypatch.setattr(zgit, "ARGUMENT_BUDGET", 150)  # a few paths to a git process
    assert len(zgit.argument_batches(paths)) >= 3
    assert patch_file_sets(repo, patches) == files
    assert repo.ls_tree_paths(pin, paths) == listing and b"src/model.py" in listing
    assert files_unchanged(repo, upstream.commits[1], upstream.commits[2], paths)  # commit 3 leaves src/model.py alone
    assert not files_unchanged(repo, upstream.commits[0], upstream.commits[1], paths)  # commit 2 changes it
    assert repo.rev_list(["--reverse", upstream.commits[2], "--not", upstream.commits[0]], stdin=["--", *paths]) == [upstream.commits[1]]
