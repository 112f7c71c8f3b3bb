"""Recorded resolutions: a conflict resolved once in `zmr rebase --continue` is replayed later, also on a fresh clone."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git, simple_model, team_clones, zmr
from test_update import grow


def test_a_resolution_recorded_by_continue_is_reused_by_update_on_a_fresh_clone(project, upstream, tmp_path):
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    reworked = model_py.replace("line 10\n", "line 10 upstream\n")
    made = grow(upstream, 8, special={3: ({"src/model.py": reworked}, "Rework line 10")})
    # Without a resolution, update is blocked at the rework.
    before = json.loads(zmr("update", "toy", "--json", cwd=project.root).stdout)["components"][0]
    assert before["status"] == "partial" and before["blocked_by"]["commit"] == made[3] and before["reused_resolutions"] == []
    _resolve_line_10_once(project, made[3], reworked)  # the engineer resolves it once, in a rebase
    # A CI job on a fresh clone: no checkout, no zmr state, no rr-cache; the resolution comes with the repository.
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(project.root), str(fresh))
    result = zmr("update", "toy", "--json", "--apply", cwd=fresh)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert data["status"] == "clean" and data["target"] == made[-1] and data["applied"] is True
    assert data["reused_resolutions"] == ["0001-fixed-split.patch"] and data["blocked_by"] is None
    assert made[-1] in (fresh / "manifests/toy.yaml").read_text()
    assert "+line 10 upstream, fixed split" in (fresh / "patches/toy/rollout/0001-fixed-split.patch").read_text()
    assert zmr("build", "toy", cwd=fresh).returncode == 0
    assert "line 10 upstream, fixed split" in git("show", "rollout/toy:src/model.py", cwd=fresh)
    text = zmr("update", "toy", "--onto", made[5], cwd=project.root)
    assert "toy/rollout: 0001-fixed-split.patch replays by its recorded resolution" in text.stdout


def _resolve_line_10_once(project, onto: str, reworked: str) -> str:
    """The engineer resolves 0001's conflict at *onto* (upstream's *reworked* line 10) once, in a rebase; only the recorded
    resolution is committed (say the move itself went nowhere): the series on main still conflicts there. Its path."""
    stopped = zmr("rebase", "toy", "--onto", onto, cwd=project.root)
    assert stopped.returncode == 1, stopped.stderr
    co = project.root / "work/toy/rollout"
    (co / "src/model.py").write_text(reworked.replace("line 10 upstream\n", "line 10 upstream, fixed split\n"))
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "toy", "--continue", "--json", cwd=project.root)
    assert done.returncode == 0, done.stderr
    [recorded] = json.loads(done.stdout)["recorded_resolutions"]
    assert recorded.startswith("resolutions/") and recorded.endswith(".diff")
    assert "+line 10 upstream, fixed split" in (project.root / recorded).read_text()
    git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "patches", cwd=project.root)
    git("add", recorded, cwd=project.root)
    git("commit", "-q", "-m", "Record the resolution of 0001 at the line 10 rework", cwd=project.root)
    return recorded


# -- every pass that meets the conflict replays it (#47) -------------------------------------------------

MATMUL_UPSTREAM = "def matmul(a, b):\n    return torch.matmul(a, b)\n"
MATMUL_RESOLVED = "def matmul(a, b):\n    return torch.matmul(a, b).contiguous()\n"


def _move_needing_three_way(upstream, pin: str) -> str:
    """An upstream commit onto which 0001 only goes in 3-way (a line of its context changed) and 0002 conflicts."""
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    return upstream.commit({"src/model.py": model_py.replace("line 8\n", "line 8 upstream\n"), "src/kernels/matmul.py": MATMUL_UPSTREAM}, "Use torch.matmul")


def _resolve_matmul(co: Path) -> None:
    text = (co / "src/kernels/matmul.py").read_text()
    assert "<<<<<<<" in text
    (co / "src/kernels/matmul.py").write_text(MATMUL_RESOLVED)
    git("add", "src/kernels/matmul.py", cwd=co)


def test_a_colleagues_resolution_is_reused_after_an_earlier_patch_went_in_3_way(tmp_path, upstream):
    """The cherry-pick pass and update's 3-way trial picks replay a recorded resolution too, not only the in-memory pass."""
    mine, theirs = team_clones(tmp_path, upstream)
    pin = upstream.commits[1]
    new = _move_needing_three_way(upstream, pin)
    # The colleague meets the conflict once, resolves it and pushes only the resolution.
    stopped = zmr("rebase", "toy", "--onto", new, "--json", cwd=theirs)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert json.loads(stopped.stdout)["patch"] == "0002-contiguous.patch"
    _resolve_matmul(theirs / "work/toy/rollout")
    done = zmr("rebase", "toy", "--continue", "--json", cwd=theirs)
    assert done.returncode == 0, done.stdout + done.stderr
    [recorded] = json.loads(done.stdout)["recorded_resolutions"]
    git("checkout", "-q", "--", "manifests", "patches", cwd=theirs)
    git("add", recorded, cwd=theirs)
    git("commit", "-q", "-m", "Record the resolution of 0002 at torch.matmul", cwd=theirs)
    git("push", "-q", "origin", "main", cwd=theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    # My fresh clone: update's trials (0001 in 3-way, then 0002) reuse it ...
    data = json.loads(zmr("update", "toy", "--json", cwd=mine).stdout)["components"][0]
    assert data["status"] == "clean" and data["target"] == new and data["blocked_by"] is None, data
    assert data["reused_resolutions"] == ["0002-contiguous.patch"] and data["unused_resolutions"] == []
    # ... and so does the rebase's cherry-pick pass, which the move itself takes (the weekly job's `update --apply` too).
    result = zmr("rebase", "toy", "--onto", new, "--json", cwd=mine)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["path"] == "checkout" and report["reused_resolutions"] == ["0002-contiguous.patch"] and report["unused_resolutions"] == []
    assert "+    return torch.matmul(a, b).contiguous()" in (mine / "patches/toy/rollout/0002-contiguous.patch").read_text()
    assert new in (mine / "manifests/toy.yaml").read_text()
    weekly = tmp_path / "weekly"
    git("clone", "-q", str(tmp_path / "hub.git"), str(weekly))
    applied = zmr("update", "toy", "--apply", "--json", cwd=weekly)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    data = json.loads(applied.stdout)["components"][0]
    assert data["applied"] is True and data["target"] == new and data["reused_resolutions"] == ["0002-contiguous.patch"]
    assert (weekly / "patches/toy/rollout/0002-contiguous.patch").read_bytes() == (mine / "patches/toy/rollout/0002-contiguous.patch").read_bytes()


def test_a_resolution_that_does_not_apply_is_reported_with_why(tmp_path, upstream, project):
    """A recorded resolution tried where its patch conflicts and not replayed is named in the report (text and JSON), with the reason."""
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    new = _move_needing_three_way(upstream, pin)
    assert zmr("rebase", "toy", "--onto", new, cwd=project.root).returncode == 1
    _resolve_matmul(project.root / "work/toy/rollout")
    done = zmr("rebase", "toy", "--continue", "--json", cwd=project.root)
    [recorded] = json.loads(done.stdout)["recorded_resolutions"]
    git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
    git("add", recorded, cwd=project.root)
    git("commit", "-q", "-m", "Record a resolution", cwd=project.root)
    # Upstream moves on: the resolution no longer applies where 0002 conflicts.
    later = upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return torch.mm(a, b)\n"}, "Use torch.mm")
    result = zmr("rebase", "toy", "--onto", later, "--json", cwd=project.root)
    assert result.returncode == 1, result.stdout + result.stderr
    [unused] = json.loads(result.stdout)["unused_resolutions"]
    assert unused["patch"] == "0002-contiguous.patch" and unused["file"] == recorded and "does not apply" in unused["reason"]
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    text = zmr("rebase", "toy", "--onto", later, cwd=project.root)
    assert f"`0002-contiguous.patch` (`{recorded}`): does not apply" in text.stdout, text.stdout
    zmr("rebase", "toy", "--abort", cwd=project.root)
    update = zmr("update", "toy", "--json", "--onto", later, cwd=project.root)
    data = json.loads(update.stdout)["components"][0]
    assert data["blocked_by"]["patch"] == "0002-contiguous.patch"
    assert [u["patch"] for u in data["unused_resolutions"]] == ["0002-contiguous.patch"]
    assert "0002-contiguous.patch's recorded resolution" in zmr("update", "toy", "--onto", later, cwd=project.root).stdout


# -- resolutions come from commits: untrusted (#47) -------------------------------------------------------


def _both_conflict(project, upstream) -> str:
    """A project whose two patches both conflict at the returned upstream commit (0001 at line 10, 0002 in matmul)."""
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    return upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n"), "src/kernels/matmul.py": MATMUL_UPSTREAM}, "Rework")


def _resolve_line_10(co: Path) -> None:
    text = (co / "src/model.py").read_text()
    start, end = text.index("<<<<<<< "), text.index(">>>>>>> ")
    (co / "src/model.py").write_text(text[:start] + "line 10 upstream, fixed split\n" + text[text.index("\n", end) + 1 :])
    git("add", "src/model.py", cwd=co)


def test_rebase_abort_forgets_the_resolutions_recorded_during_the_rebase(project, upstream):
    new = _both_conflict(project, upstream)
    stale = "diff --git a/src/model.py b/src/model.py\n--- a/src/model.py\n+++ b/src/model.py\n@@ -1 +1 @@\n-no such line\n+nor this\n"
    co = project.root / "work/toy/rollout"
    # 0001 resolved and recorded by --continue, which stops again on 0002; --abort forgets the new file.
    stopped = json.loads(zmr("rebase", "toy", "--onto", new, "--json", cwd=project.root).stdout)
    assert stopped["patch"] == "0001-fixed-split.patch" and stopped["unused_resolutions"] == []
    _resolve_line_10(co)
    cont = zmr("rebase", "toy", "--continue", "--json", cwd=project.root)
    assert cont.returncode == 1, cont.stdout + cont.stderr  # stopped again, on 0002
    [name] = [p.name for p in (project.root / "resolutions").iterdir()]
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    assert not (project.root / "resolutions").exists() or not any((project.root / "resolutions").iterdir())  # forgotten
    project.write(f"resolutions/{name}", stale)
    project.commit_all("a stale resolution of 0001")
    stopped = json.loads(zmr("rebase", "toy", "--onto", new, "--json", cwd=project.root).stdout)
    assert [u["reason"][:14] for u in stopped["unused_resolutions"]] == ["does not apply"]
    _resolve_line_10(co)
    assert zmr("rebase", "toy", "--continue", cwd=project.root).returncode == 1
    assert "line 10 upstream, fixed split" in (project.root / "resolutions" / name).read_text()
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    assert (project.root / "resolutions" / name).read_text() == stale  # put back as it was before the rebase
    assert git("status", "--porcelain", cwd=project.root) == ""


def test_a_resolution_with_conflict_markers_is_never_replayed(project, upstream):
    new = _both_conflict(project, upstream)
    zmr("rebase", "toy", "--onto", new, cwd=project.root)
    co = project.root / "work/toy/rollout"
    _resolve_line_10(co)
    zmr("rebase", "toy", "--continue", cwd=project.root)
    [path] = list((project.root / "resolutions").iterdir())
    diff = path.read_text()
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    # A hostile (or careless) commit puts conflict markers into the recorded change: it applies, but is not replayed.
    path.parent.mkdir(exist_ok=True)
    path.write_text(diff.replace("+line 10 upstream, fixed split\n", "+<<<<<<< HEAD\n+line 10 upstream, fixed split\n+>>>>>>> theirs\n"))
    project.commit_all("resolution with markers")
    result = zmr("rebase", "toy", "--onto", new, "--json", cwd=project.root)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["patch"] == "0001-fixed-split.patch" and data["reused_resolutions"] == []
    [unused] = data["unused_resolutions"]
    assert "conflict marker" in unused["reason"], unused


def test_a_resolution_is_never_read_or_written_through_a_symbolic_link(project, upstream, tmp_path):
    new = _both_conflict(project, upstream)
    outside = tmp_path / "outside"
    outside.mkdir()
    (project.root / "resolutions").symlink_to(outside)
    project.commit_all("resolutions is a link")
    zmr("rebase", "toy", "--onto", new, cwd=project.root)
    _resolve_line_10(project.root / "work/toy/rollout")
    result = zmr("rebase", "toy", "--continue", cwd=project.root)
    assert result.returncode == 2 and "resolutions: is a symbolic link" in result.stderr, result.stdout + result.stderr
    assert list(outside.iterdir()) == []  # nothing written outside the work tree
    # Replaced by a real folder, --continue goes on and records there.
    (project.root / "resolutions").unlink()
    result = zmr("rebase", "toy", "--continue", cwd=project.root)
    assert result.returncode == 1, result.stdout + result.stderr  # on to 0002's conflict
    [path] = list((project.root / "resolutions").iterdir())
    recorded = path.read_text()
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    # A resolution file that is a link (to a file that would apply) is not read.
    target = outside / "res.diff"
    target.write_text(recorded)
    (project.root / "resolutions").mkdir(exist_ok=True)
    (project.root / "resolutions" / path.name).symlink_to(target)
    data = json.loads(zmr("rebase", "toy", "--onto", new, "--json", cwd=project.root).stdout)
    assert data["patch"] == "0001-fixed-split.patch"
    [unused] = data["unused_resolutions"]
    assert "symbolic link" in unused["reason"]


def test_a_resolution_recorded_before_upstream_renamed_the_file_is_replayed_at_its_new_name(project, upstream):
    """A resolution is keyed by the patch, and names the file as it was when recorded; upstream then renames that file.
    Update's trial picks and the rebase's cherry-picks (both follow the rename) replay it at the new name, and say so."""
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    reworked = model_py.replace("line 10\n", "line 10 upstream\n")
    made = grow(upstream, 4, special={2: ({"src/model.py": reworked}, "Rework line 10")})
    recorded = _resolve_line_10_once(project, made[2], reworked)
    assert "+++ b/src/model.py" in (project.root / recorded).read_text()
    # Then upstream renames the file (and changes a line far from line 10).
    assert zmr("checkout", "toy", "--force", cwd=project.root).returncode == 0  # the checkout back at the pin
    renamed = upstream.commit({"src/model.py": None, "src/net.py": reworked.replace("line 35\n", "line 35 upstream\n")}, "Rename model.py to net.py")
    tip = upstream.commit({"docs/after.md": "after the rename\n"}, "A note")
    result = zmr("update", "toy", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert (data["status"], data["target"], data["blocked_by"]) == ("clean", tip, None)
    assert data["reused_resolutions"] == ["0001-fixed-split.patch"] and data["unused_resolutions"] == []
    # Upstream then changes the lines around line 10 again: the resolution goes in neither as recorded nor at the new name,
    # and the report says both were tried.
    net_py = reworked.replace("line 35\n", "line 35 upstream\n")
    again = upstream.commit({"src/net.py": net_py.replace("line 11\n", "line 11 upstream\n")}, "Rework line 11")
    result = zmr("update", "toy", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert (data["status"], data["target"], data["blocked_by"]["commit"], data["blocked_by"]["files"]) == ("partial", tip, again, ["src/net.py"])
    [unused] = data["unused_resolutions"]
    assert unused["patch"] == "0001-fixed-split.patch" and unused["file"] == recorded
    assert unused["reason"] == (
        "does not apply where the patch conflicts (the new upstream with the patches before it),"
        " as recorded and at the names upstream renamed its files to (src/model.py -> src/net.py)"
    )
    applied = zmr("update", "toy", "--json", "--apply", cwd=project.root)
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)["components"][0]
    assert (data["applied"], data["reused_resolutions"]) == (True, ["0001-fixed-split.patch"])
    patch = (project.root / "patches/toy/rollout/0001-fixed-split.patch").read_text()  # the resolution, at the new name
    assert "+++ b/src/net.py" in patch and "+line 10 upstream, fixed split" in patch
    assert renamed != tip and tip in (project.root / "manifests/toy.yaml").read_text()


def test_moved_renames_only_the_header_lines_of_a_resolution(tmp_path):
    """``moved`` names a renamed file by its new name in the lines that name files, never in a hunk's text (a removed line
    that reads like a header), and leaves a file upstream did not rename, or a resolution naming none of them, alone."""
    from zmr.model.resolutions import moved
    from zmr.model.series import Patch

    diff = (
        b"diff --git a/src/model.py b/src/model.py\nindex 1111111..2222222 100644\n--- a/src/model.py\n+++ b/src/model.py\n"
        b"@@ -1,2 +1,2 @@\n--- a/src/model.py\n+line 10 fixed\n"
        b"diff --git a/docs/x.md b/docs/x.md\n--- a/docs/x.md\n+++ b/docs/x.md\n@@ -1 +1 @@\n-a\n+b\n"
    )
    patch = Patch("0001.patch", tmp_path / "0001.patch", 1, diff, "A resolution", "", None, None, None)
    new, names = moved(patch, {"src/model.py": "src/net.py", "gone.py": "here.py"})
    assert names == {"src/model.py": "src/net.py"}
    assert new.data == diff.replace(b"a/src/model.py b/src/model.py", b"a/src/net.py b/src/net.py").replace(
        b"--- a/src/model.py\n+++ b/src/model.py\n@@", b"--- a/src/net.py\n+++ b/src/net.py\n@@"
    )
    assert b"\n--- a/src/model.py\n+line 10 fixed" in new.data  # the hunk's own line, as it was
    assert moved(patch, {"elsewhere.py": "moved.py"}) is None and moved(patch, {}) is None


def test_bisect_replays_the_series_by_its_recorded_resolutions(project, upstream, tmp_path):
    """#47.1 and #47.5, found on verl's history: with a recorded resolution, update moved the pin past the conflict, but
    bisect (same series, same commits) set every commit past it aside as "the series does not replay onto them" and ran
    no check: it never read resolutions/. It must replay as update does, and test those commits."""
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    reworked = model_py.replace("line 10\n", "line 10 upstream\n")
    made = grow(upstream, 12, special={3: ({"src/model.py": reworked}, "Rework line 10"), 9: ({"BROKEN": "x\n"}, "Break the release")})
    assert zmr("rebase", "toy", "--onto", made[3], cwd=project.root).returncode == 1
    co = project.root / "work/toy/rollout"
    (co / "src/model.py").write_text(reworked.replace("line 10 upstream\n", "line 10 upstream, fixed split\n"))
    git("add", "src/model.py", cwd=co)
    assert zmr("rebase", "toy", "--continue", cwd=project.root).returncode == 0
    git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)  # only the resolution stays
    check = 'grep -q "fixed split" src/model.py || exit 3; [ ! -e BROKEN ]'
    result = zmr("bisect", "toy", "--json", "--good", pin, "--bad", made[-1], "--test", check, cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["found"] is True and data["first_bad"]["commit"] == made[9] and data["last_good"] == made[8], data
    assert data["not_replayed"] == 0 and data["tests"] > 0
