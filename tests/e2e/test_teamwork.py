"""Teamwork: two clones of one zmr repository and a bare hub (export's three sides), and one meaning of "already upstream"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Upstream, git, make_project, simple_model, team_clones, zmr

FIX_ONE = "Fix one"


def _edit(checkout: Path, old: str, new: str, subject: str, amend: bool = False) -> None:
    """Change a line of src/model.py in *checkout* and commit it (or amend the last commit)."""
    path = checkout / "src/model.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    git("add", "src/model.py", cwd=checkout)
    git("commit", "-q", *(["--amend", "--no-edit"] if amend else ["-m", subject]), cwd=checkout)


@pytest.fixture
def team(tmp_path, upstream: Upstream):
    """(mine, colleague's): clones of one zmr repository through a bare hub; 0003-fix-one.patch exported and pushed by me, then edited by the colleague."""
    mine, theirs = team_clones(tmp_path, upstream, "/work/\n/.zmr/\n")
    work = mine / "work/toy/rollout"
    assert zmr("checkout", "toy", "-c", "rollout", cwd=mine).returncode == 0
    _edit(work, "line 20\n", "line 20 fix one\n", FIX_ONE)
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 0 and "added     0003-fix-one.patch" in result.stdout, result.stdout + result.stderr
    git("add", "-A", cwd=mine)
    git("commit", "-q", "-m", "export fix one", cwd=mine)
    git("push", "-q", "origin", "main", cwd=mine)
    # The colleague edits that patch and pushes.
    git("pull", "-q", "--ff-only", cwd=theirs)
    assert zmr("checkout", "toy", "-c", "rollout", cwd=theirs).returncode == 0
    _edit(theirs / "work/toy/rollout", "line 20 fix one\n", "line 20 fix one, better\n", FIX_ONE, amend=True)
    result = zmr("export", "toy", "-c", "rollout", cwd=theirs)
    assert result.returncode == 0 and "modified  0003-fix-one.patch" in result.stdout, result.stdout + result.stderr
    git("commit", "-q", "-am", "colleague: better fix one", cwd=theirs)
    git("push", "-q", "origin", "main", cwd=theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    return mine, theirs


def _series(root: Path) -> dict[str, bytes]:
    folder = root / "patches/toy/rollout"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_export_after_a_pull_never_reverts_the_colleagues_change(team):
    mine, theirs = team
    pulled = _series(mine)
    assert b"fix one, better" in pulled["0003-fix-one.patch"]
    # Only the repository moved: export refuses (exit 2), names the one command that refreshes, writes nothing.
    for args in ((), ("--dry-run",)):
        result = zmr("export", "toy", "-c", "rollout", *args, cwd=mine)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "changed in the repository since this checkout was made or exported" in result.stderr
        assert "`zmr checkout toy -c rollout`" in result.stderr
        assert "modified" not in result.stdout
    assert _series(mine) == pulled
    # That command refreshes the checkout to the colleague's series; export then has nothing to do.
    result = zmr("checkout", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 0 and "refreshed" in result.stdout, result.stdout + result.stderr
    assert "line 20 fix one, better" in (mine / "work/toy/rollout/src/model.py").read_text()
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 0, result.stderr
    assert _series(mine) == pulled


def test_export_refuses_when_both_sides_moved(team):
    mine, _ = team
    pulled = _series(mine)
    work = mine / "work/toy/rollout"
    _edit(work, "line 30\n", "line 30 fix two\n", "Fix two")
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "both sides moved" in result.stderr and "the checkout has 1 commit since" in result.stderr
    assert "`zmr checkout toy -c rollout --merge`" in result.stderr
    assert _series(mine) == pulled
    # Plain checkout does not discard the new commit either, and names the way to combine.
    result = zmr("checkout", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 2 and "`zmr checkout toy -c rollout --merge`" in result.stderr, result.stderr
    assert "line 30 fix two" in (work / "src/model.py").read_text()


def test_export_refuses_when_both_moved_and_my_commits_rewrite_the_old_ones(team):
    mine, _ = team
    pulled = _series(mine)
    work = mine / "work/toy/rollout"
    _edit(work, "line 20 fix one\n", "line 20 fix one, mine\n", FIX_ONE, amend=True)  # my own edit of the patch the colleague edited
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "both sides moved" in result.stderr and "commits were rewritten since" in result.stderr
    assert "--force" in result.stderr and f"git -C {work} branch keep" in result.stderr
    result = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine)
    assert result.returncode == 2 and "HEAD does not descend from the last exported tip" in result.stderr, result.stderr
    assert _series(mine) == pulled
    assert "line 20 fix one, mine" in (work / "src/model.py").read_text()


def test_checkout_merge_replays_my_new_commit_on_the_colleagues_series(team):
    mine, _ = team
    pulled = _series(mine)
    work = mine / "work/toy/rollout"
    _edit(work, "line 30\n", "line 30 fix two\n", "Fix two")
    result = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 commit replayed" in result.stdout
    text = (work / "src/model.py").read_text()
    assert "line 20 fix one, better\n" in text and "line 30 fix two\n" in text
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "added     0004-fix-two.patch" in result.stdout and "0003" not in result.stdout
    after = _series(mine)
    assert {n: after[n] for n in pulled if n != "series"} == {n: b for n, b in pulled.items() if n != "series"}  # the colleague's bytes kept
    assert b"+line 30 fix two" in after["0004-fix-two.patch"]


def test_checkout_merge_conflict_abort_then_continue(team):
    mine, _ = team
    pulled = _series(mine)
    work = mine / "work/toy/rollout"
    _edit(work, "line 20 fix one\n", "line 20 fix one, mine\n", "Fix one again")
    mine_head = git("rev-parse", "HEAD", cwd=work)
    result = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "conflicts with the repository's series" in result.stderr and "conflicting files: src/model.py" in result.stderr
    assert "`zmr checkout toy -c rollout --continue`" in result.stderr
    # While it is stopped, neither export nor a plain checkout touches anything.
    for args in (("export", "toy", "-c", "rollout"), ("checkout", "toy", "-c", "rollout")):
        refused = zmr(*args, cwd=mine)
        assert refused.returncode == 2 and "--merge` is in progress" in refused.stderr, refused.stderr
    # A merge interrupted while it refreshed the checkout (its marker left behind) can only be aborted.
    (work / ".git/zmr-refresh").write_text("interrupted\n")
    refused = zmr("checkout", "toy", "-c", "rollout", "--continue", cwd=mine)
    assert refused.returncode == 2 and "was interrupted while it refreshed" in refused.stderr, refused.stderr
    result = zmr("checkout", "toy", "-c", "rollout", "--abort", cwd=mine)
    assert result.returncode == 0, result.stderr
    assert not (work / ".git/zmr-refresh").exists() and not (work / ".git/zmr-merge").exists()
    assert git("rev-parse", "HEAD", cwd=work) == mine_head
    assert git("status", "--porcelain", cwd=work) == ""
    assert zmr("export", "toy", "-c", "rollout", cwd=mine).returncode == 2  # both sides moved, still
    assert _series(mine) == pulled
    # Again, and resolve it: --continue refuses markers, then takes the resolution.
    assert zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine).returncode == 1
    result = zmr("checkout", "toy", "-c", "rollout", "--continue", cwd=mine)
    assert result.returncode == 2 and "not resolved yet" in result.stderr
    model_py = work / "src/model.py"
    text = model_py.read_text()
    start, end = text.index("<<<<<<< "), text.index(">>>>>>> ")
    model_py.write_text(text[:start] + "line 20 fix one, better and mine\n" + text[text.index("\n", end) + 1 :])
    git("add", "src/model.py", cwd=work)
    result = zmr("checkout", "toy", "-c", "rollout", "--continue", cwd=mine)
    assert result.returncode == 0, result.stdout + result.stderr
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "added     0004-fix-one-again.patch" in result.stdout
    after = _series(mine)
    assert after["0003-fix-one.patch"] == pulled["0003-fix-one.patch"]
    assert b"-line 20 fix one, better\n+line 20 fix one, better and mine" in after["0004-fix-one-again.patch"]


def test_a_refused_checkout_merge_leaves_no_merge_behind(team):
    """#47.4: a --merge refused before it moved anything (here the pulled series does not apply) writes nothing: no merge in progress after it."""
    mine, _ = team
    work = mine / "work/toy/rollout"
    _edit(work, "line 30\n", "line 30 fix two\n", "Fix two")
    head = git("rev-parse", "HEAD", cwd=work)
    patch = mine / "patches/toy/rollout/0003-fix-one.patch"
    good = patch.read_bytes()
    patch.write_bytes(good.replace(b" line 19\n", b" line 19 (not upstream's)\n"))  # a pull that brought a broken patch
    result = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine)
    assert result.returncode == 2, result.stdout + result.stderr
    assert not (work / ".git/zmr-merge").exists()
    assert git("rev-parse", "HEAD", cwd=work) == head and git("status", "--porcelain", cwd=work) == ""
    result = zmr("checkout", "toy", "-c", "rollout", "--continue", cwd=mine)
    assert result.returncode == 2 and "no `zmr checkout --merge` in progress" in result.stderr, result.stdout + result.stderr
    result = zmr("export", "toy", "-c", "rollout", cwd=mine)
    assert "in progress" not in result.stderr, result.stderr
    # With the series mended, the same --merge goes through.
    patch.write_bytes(good)
    result = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine)
    assert result.returncode == 0 and "1 commit replayed" in result.stdout, result.stdout + result.stderr


# -- one meaning of "already upstream" -------------------------------------------------------------


@pytest.fixture
def merged_and_reverted(tmp_path, upstream: Upstream):
    """A project whose upstream merged 0001's change and reverted it later, and merged 0002's change for good.

    Returns a function giving a fresh clone of the project (each command changes it) and the new tip.
    """
    origin = make_project(tmp_path / "origin")
    origin.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(origin, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split size (#5054)")
    upstream.commit({"src/model.py": model_py}, 'Revert "Use a fixed split size (#5054)" (#5091)')
    merged = upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "matmul: contiguous output")
    tip = upstream.commit({"docs/guide.md": "guide v3\n"}, "Update the guide again")
    clones = iter(range(10))

    def fresh() -> Path:
        path = tmp_path / f"clone-{next(clones)}"
        git("clone", "-q", str(origin.root), str(path))
        return path

    return fresh, merged, tip


def _names(root: Path) -> list[str]:
    return (root / "patches/toy/rollout/series").read_text().split()


def test_upstream_means_the_tree_holds_the_change_for_every_command(merged_and_reverted):
    fresh, merged, tip = merged_and_reverted
    root = fresh()
    result = zmr("upstreamed", "toy", "-c", "rollout", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    report = report["components"][0] if "components" in report else report
    assert [(u["name"], u["upstream_commit"]) for u in report["upstreamed"]] == [("0002-contiguous.patch", merged)]
    assert report["conflicts"] == []
    result = zmr("update", "toy", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)["components"][0]
    assert found["status"] == "clean" and found["target"] == tip
    assert [(d["name"], d["upstream"]) for d in found["dropped"]] == [("0002-contiguous.patch", merged)]
    # update --apply, rebase without a checkout, rebase with one: the same answer, and the fix stays in the release branch.
    for how in ("update --apply", "rebase", "rebase after checkout"):
        root = fresh()
        if how == "rebase after checkout":
            assert zmr("checkout", "toy", "-c", "rollout", cwd=root).returncode == 0
        if how == "update --apply":
            result = zmr("update", "toy", "--apply", "--json", cwd=root)
            assert result.returncode == 0, result.stderr
            dropped = json.loads(result.stdout)["components"][0]["dropped"]
        else:
            result = zmr("rebase", "toy", "-c", "rollout", "--onto", "main", "--json", cwd=root)
            assert result.returncode == 0, result.stderr
            dropped = json.loads(result.stdout)["dropped"]
        assert [d["name"] for d in dropped] == ["0002-contiguous.patch"], how
        assert _names(root) == ["0001-fixed-split.patch"], how
        assert tip in (root / "manifests/toy.yaml").read_text(), how
        assert zmr("build", "toy", cwd=root).returncode == 0, how
        built = git("show", "rollout/toy:src/model.py", cwd=root)
        assert "line 10 fixed split" in built, how
        assert git("show", "rollout/toy:src/kernels/matmul.py", cwd=root).endswith(".contiguous()"), how
        if how == "rebase after checkout":  # the rebase recorded the series it moved the checkout to: nothing to export
            result = zmr("export", "toy", "-c", "rollout", cwd=root)
            assert result.returncode == 0 and "unchanged" in result.stdout, result.stdout + result.stderr
