"""`zmr import --find-base`: every first-parent commit of the upstream is a candidate, however old; ties are refused."""

from __future__ import annotations

import time

from conftest import git, make_project, make_upstream, zmr
from test_adopt import _hand_made_branch

DAY = 24 * 3600
FILES = 40


def _maker(tmp_path, project):
    work = tmp_path / "maker"
    git("clone", "-q", str(project.root), str(work))
    return work


def test_find_base_takes_an_old_base_over_recent_commits_that_differ_more(tmp_path):
    """A snapshot committed today of a fork made months ago: the old commit with 1 differing path, not a recent one with 31 (exit 0 before)."""
    many = {f"pkg/f{i:03}.py": f"V = {i}\n" for i in range(FILES)}
    up = make_upstream(tmp_path / "up", [many])
    base = up.commits[0]  # committed in November 2023
    up._clock = int(time.time()) - 30 * DAY  # upstream moves on, well inside the last 120 days
    # Each round leaves 5 more files as they were at the base: the newest is the closest of the recent ones (31 paths).
    recent = [
        up.commit({name: text if i < 5 * k else f"V = {i}  # round {k}\n" for i, (name, text) in enumerate(many.items())}, f"Round {k}") for k in range(3)
    ]
    project = make_project(tmp_path / "project")
    project.commit_all("start")
    work = _maker(tmp_path, project)
    _hand_made_branch(work, up, base, "up/kimi", "Kimi working trees", {"kimi.txt": "kda\n"}, single=True)
    result = zmr("import", "up/kimi", "--upstream", str(up.path), "--find-base", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert f"commit: {base}\n" in (project.root / "manifests/kimi.yaml").read_text()
    assert f"{base[:12]}  1 path differs" in result.stdout
    assert f"{recent[2][:12]}  {FILES - 10 + 1} paths differ" in result.stdout
    project.commit_all("imported")
    assert zmr("build", "kimi", cwd=project.root).returncode == 0
    assert git("rev-parse", "up/kimi^{tree}", cwd=project.root) == git("rev-parse", "up/kimi^{tree}", cwd=work)


def test_find_base_counts_paths_like_a_tree_diff_across_merges_and_side_branches(tmp_path):
    """Distances carried along first parents equal a direct diff-tree, on a history with a merge, a deletion and a tag."""
    from zmr.infra import git as zgit
    from zmr.importing.findbase import find_base, tree_distances

    up = make_upstream(tmp_path / "up", [{"a.txt": "1\n", "b.txt": "b\n", "d/c.txt": "c\n"}, {"a.txt": "2\n", "d/c.txt": None}])
    git("checkout", "-q", "-b", "side", up.commits[0], cwd=up.path)
    side = up.commit({"s.txt": "side\n", "b.txt": "b2\n"}, "side work")
    git("checkout", "-q", "main", cwd=up.path)
    git(
        "merge",
        "-q",
        "--no-ff",
        "-m",
        "merge side",
        "side",
        cwd=up.path,
        env={"GIT_AUTHOR_DATE": "@1700100000 +0000", "GIT_COMMITTER_DATE": "@1700100000 +0000"},
    )
    merge = git("rev-parse", "HEAD", cwd=up.path)
    after = up.commit({"d/c.txt": "back\n", "e.txt": "e\n"}, "after the merge")
    git("tag", "v1", up.commits[1], cwd=up.path)
    snapshot = git("rev-parse", f"{up.commits[1]}^{{tree}}", cwd=up.path)
    repo = zgit.Repo(up.path / ".git")
    search = find_base(repo, snapshot, refs=("--branches", "--tags"))
    commits = [c.commit for c in search.candidates]
    assert set(commits) == {up.commits[0], up.commits[1], side, merge, after}  # side is the tip of its own branch
    trees = [git("rev-parse", f"{c}^{{tree}}", cwd=up.path) for c in commits]
    direct = dict(zip(commits, tree_distances(repo, trees, snapshot)))
    assert sorted(direct.values()) == [0, 2, 2, 4, 4]
    assert {c.commit: c.distance for c in search.candidates} == direct
    assert search.best is not None and search.best.commit == up.commits[1] and search.best.distance == 0
