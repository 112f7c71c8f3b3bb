"""zmr update: how far each pin can move along its track, found by bisection, and --apply/--report/--check."""

from __future__ import annotations

import json
import math

from conftest import git, make_project, simple_model, state_dir, zmr

CONTIGUOUS = "def matmul(a, b):\n    return (a @ b).contiguous()\n"


def grow(upstream, count: int, start: int = 0, special: dict[int, tuple[dict, str]] | None = None) -> list[str]:
    """*count* upstream commits that leave the series' files alone, but those of *special* (position → (files, message))."""
    made = []
    for k in range(start, start + count):
        files, message = (special or {}).get(k, ({f"docs/notes-{k}.md": f"note {k}\n"}, f"Add note {k}"))
        made.append(upstream.commit(files, message))
    return made


def update_json(project, *args: str) -> tuple[int, dict, str]:
    result = zmr("update", "toy", "--json", *args, cwd=project.root)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)["components"][0], result.stderr


def test_series_that_replays_to_the_tip_is_clean(project, upstream):
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    # Upstream moves the series' lines (a header above them) and adds unrelated commits.
    made = grow(upstream, 12, special={3: ({"src/model.py": "# header\n" + model_py}, "Add a header")})
    rc, data, _ = update_json(project)
    assert rc == 0
    assert data["status"] == "clean"
    assert (data["pin"], data["target"], data["tip"]) == (pin, made[-1], made[-1])
    assert data["behind"] == 13 and data["steps"] == 13  # upstream's third commit and the twelve made here
    assert data["replays"] == 1 and data["blocked_by"] is None and data["dropped"] == []
    assert set(data) >= {"model", "component", "status", "pin", "target", "tip", "behind", "dropped", "blocked_by"}
    assert zmr("update", "toy", "--check", cwd=project.root).returncode == 1  # behind, not moved
    assert pin in (project.root / "manifests/toy.yaml").read_text()  # read-only without --apply


def test_a_conflict_in_the_middle_names_its_commit_and_patch_in_about_log2_replays(project, upstream, tmp_path):
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    conflict = {21: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")}
    made = grow(upstream, 40, special=conflict)
    line = [upstream.commits[2], *made]  # first-parent commits after the pin
    rc, data, _ = update_json(project)
    assert rc == 0
    assert data["status"] == "partial"
    breaking = made[21]
    assert data["target"] == made[20] and data["tip"] == made[-1] and data["behind"] == len(line) == 41
    assert data["blocked_by"] == {
        "commit": breaking,
        "patch": "0001-fixed-split.patch",
        "files": ["src/model.py"],
        "author_name": "Patch Author",
        "author_email": "author@zmr.invalid",
        "partially_landed": None,
        "renamed_from": {},
    }
    assert data["steps"] == line.index(made[20]) + 1
    assert 2 <= data["replays"] <= 1 + math.ceil(math.log2(len(line)))  # the tip, then bisection: not 41
    report = tmp_path / "report.md"
    text = zmr("update", "toy", "--report", str(report), cwd=project.root)
    assert text.returncode == 0, text.stderr
    assert f"toy/rollout: blocked at {breaking[:12]} Rework line 10: 0001-fixed-split.patch conflicts in src/model.py" in text.stdout
    body = report.read_text()
    assert "## `toy/rollout`: partial" in body
    assert f"- pin: `{pin}` -> `{made[20]}` ({data['steps']} of 41 first-parent commits towards `main`)" in body
    blocked = f"- blocked by upstream commit `{breaking}` (`Rework line 10`): patch `0001-fixed-split.patch` (`Use a fixed split size in matmul`)"
    assert blocked + " conflicts in `src/model.py`" in body
    # --apply moves the pin there; the release branch's snapshot is the target's tree, and verify agrees.
    manifest = (project.root / "manifests/toy.yaml").read_text()
    rc, applied, _ = update_json(project, "--apply")
    assert rc == 0 and applied["applied"] is True and applied["target"] == made[20]
    assert (project.root / "manifests/toy.yaml").read_text() == manifest.replace(pin, made[20])
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    verify = zmr("verify", "toy", cwd=project.root)
    assert verify.returncode == 0, verify.stderr
    assert git("rev-parse", "rollout/toy^^{tree}", cwd=project.root) == git("rev-parse", f"{made[20]}^{{tree}}", cwd=upstream.path)
    assert "line 10 fixed split" in git("show", "rollout/toy:src/model.py", cwd=project.root)
    # Now blocked: the very next commit breaks the series; --check fails, nothing moves.
    rc, after, _ = update_json(project, "--apply", "--check")
    assert rc == 1
    assert after["status"] == "blocked" and after["target"] == made[20] and after["applied"] is False
    assert after["blocked_by"]["commit"] == breaking and after["steps"] == 0


def test_already_up_to_date(project, upstream):
    simple_model(project, upstream, pin_index=2)
    rc, data, _ = update_json(project, "--check")
    assert rc == 0
    assert data["status"] == "up-to-date" and data["behind"] == 0 and data["replays"] == 0
    assert data["pin"] == data["target"] == data["tip"] == upstream.commits[2]
    assert zmr("update", "--check", cwd=project.root).returncode == 0  # no model: every tracked component


def test_a_patch_upstreamed_along_the_way_is_dropped_and_reported(project, upstream, tmp_path):
    pin = simple_model(project, upstream)
    landed = {5: ({"src/kernels/matmul.py": CONTIGUOUS}, "matmul: contiguous output")}
    made = grow(upstream, 9, special=landed)
    rc, data, _ = update_json(project)
    assert data["status"] == "clean" and data["target"] == made[-1]
    assert [(d["name"], d["method"], d["upstream"]) for d in data["dropped"]] == [("0002-contiguous.patch", "patch-id", made[5])]
    report = tmp_path / "report.md"
    rc, applied, _ = update_json(project, "--apply", "--report", str(report), "--check")
    assert rc == 0  # moved to the tip: not behind any more
    assert applied["applied"] is True
    folder = project.root / "patches/toy/rollout"
    assert (folder / "series").read_text() == "0001-fixed-split.patch\n"
    assert not (folder / "0002-contiguous.patch").exists()
    body = report.read_text()
    assert "### Dropped: already upstream (1)" in body
    assert f"- `0002-contiguous.patch` `Make matmul output contiguous`: upstream commit `{made[5]}` (`matmul: contiguous output`); same patch-id" in body
    assert f"pin: `{pin}` -> `{made[-1]}`" in body and "- applied: the pin and the series are updated" in body
    rc, again, _ = update_json(project, "--check")
    assert rc == 0 and again["status"] == "up-to-date"


def test_a_patch_whose_context_changed_goes_in_by_3_way_merge_and_shows_its_range_diff(project, upstream, tmp_path):
    """git apply refuses the patch (a context line changed); zmr rebase's cherry-pick merges it: update says so."""
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    made = grow(upstream, 6, special={2: ({"src/model.py": model_py.replace("line 8\n", "line 8 (v3)\n")}, "Touch line 8")})
    report = tmp_path / "report.md"
    _, data, _ = update_json(project, "--report", str(report))
    assert data["status"] == "clean" and data["target"] == made[-1] and data["dropped"] == []
    body = report.read_text()
    assert "### Changed (1)" in body and "- `0001-fixed-split.patch` `Use a fixed split size in matmul`" in body
    assert "line 8 (v3)" in body  # the range-diff block shows the new context
    _, applied, _ = update_json(project, "--apply")
    assert applied["applied"] is True
    assert "line 8 (v3)" in (project.root / "patches/toy/rollout/0001-fixed-split.patch").read_text()
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    built = git("show", "rollout/toy:src/model.py", cwd=project.root)
    assert "line 8 (v3)" in built and "line 10 fixed split" in built


def test_apply_leaves_alone_a_component_with_unexported_work_or_a_rebase_in_progress(project, upstream):
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    made = grow(upstream, 6, special={4: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    manifest = (project.root / "manifests/toy.yaml").read_bytes()
    series = {p.name: p.read_bytes() for p in (project.root / "patches/toy/rollout").iterdir()}
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    co = project.root / "work/toy/rollout"
    (co / "NOTES").write_text("work in progress\n")
    git("add", "NOTES", cwd=co)
    git("commit", "-q", "-m", "Not exported yet", cwd=co)
    _, data, stderr = update_json(project, "--apply")
    assert data["status"] == "partial" and data["target"] == made[3] and data["applied"] is False
    assert "has work not in the series" in data["refused"] and "commits not exported" in data["refused"]
    assert "zmr: warning: toy/rollout: not moved:" in stderr
    assert (project.root / "manifests/toy.yaml").read_bytes() == manifest
    assert {p.name: p.read_bytes() for p in (project.root / "patches/toy/rollout").iterdir()} == series
    # A rebase stopped on a conflict: update may look, --apply does not touch it.
    git("reset", "-q", "--hard", "HEAD~1", cwd=co)
    stopped = zmr("rebase", "toy", "--onto", made[4], cwd=project.root)
    assert stopped.returncode == 1, stopped.stderr
    state = state_dir(project.root) / "rebase/toy/rollout/state.json"
    before = state.read_bytes()
    _, data, _ = update_json(project, "--apply")
    assert data["applied"] is False and data["refused"].startswith("a rebase is in progress")
    assert state.read_bytes() == before and (project.root / "manifests/toy.yaml").read_bytes() == manifest
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0


def test_update_needs_a_track_or_to(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace("    track: main\n", ""))
    result = zmr("update", "toy", cwd=project.root)
    assert result.returncode == 2 and "none of those selected has a `track`" in result.stderr
    everything = zmr("update", "--apply", "--check", cwd=project.root)  # the scheduled job: nothing follows upstream, nothing to do
    assert everything.returncode == 0 and everything.stdout == "no component has a `track`: nothing to update\n"
    _, data, _ = update_json(project, "--to", upstream.commits[2])
    assert data["status"] == "clean" and data["target"] == upstream.commits[2]


def test_progress_names_the_component_and_the_replay(project, upstream):
    from zmr.model.project import Project
    from zmr.ops.update import update

    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 20, special={9: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    proj = Project.find(project.root)
    messages: list[str] = []
    [found] = update(proj, list(proj.manifests(["toy"])[0].components.values()), progress=messages.append)
    replays = [m for m in messages if ": replay " in m]
    assert len(replays) == found.replays and replays[0].startswith("toy/rollout: replay 1 of ~6 (onto ")
    assert zmr("update", "toy", cwd=project.root, env={"CI": "1"}).stderr == ""  # quiet in CI


def test_search_keeps_good_lo_and_bad_hi_in_log2_steps():
    from zmr.ops.update import Trial, search

    line = [f"c{i}" for i in range(1, 201)]
    for good_until, holes in ((137, set()), (0, set()), (199, set()), (150, {40, 41})):
        tried: list[str] = []

        def good(commit: str, good_until=good_until, holes=holes, tried=tried) -> Trial:
            tried.append(commit)
            n = int(commit[1:])
            return Trial(commit, n <= good_until and n not in holes, [], commit)

        lo, good_trial, bad_trial = search(line, good)
        assert len(tried) <= 1 + math.ceil(math.log2(200))
        assert bad_trial is not None and bad_trial.commit == line[lo]  # the first-parent successor of the last good one
        assert lo == 0 or (good_trial is not None and good_trial.commit == line[lo - 1] and good_trial.ok)
        if not holes:
            assert lo == good_until
        else:  # not monotone: still a good commit right before a bad one
            assert int(bad_trial.commit[1:]) in holes | set(range(good_until + 1, 201))
    assert search(line, lambda c: Trial(c, True, [], c))[0] == 200


def test_a_merge_on_the_first_parent_line(project, upstream):
    """Side-branch commits are not candidates: the search walks first parents only."""
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 3)
    git("checkout", "-q", "-b", "side", cwd=upstream.path)
    side = upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 side\n")}, "Side: rework line 10")
    git("checkout", "-q", "main", cwd=upstream.path)
    before = grow(upstream, 2, start=10)
    stamp = "@1800000000 +0000"
    git("merge", "-q", "--no-ff", "-m", "Merge side", "side", cwd=upstream.path, env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    merge = git("rev-parse", "HEAD", cwd=upstream.path)
    grow(upstream, 2, start=20)
    _, data, _ = update_json(project)
    assert data["status"] == "partial" and data["target"] == before[-1]
    assert data["blocked_by"]["commit"] == merge and data["blocked_by"]["commit"] != side
    assert data["behind"] == 1 + 3 + 2 + 1 + 2


def test_first_parent_line_keeps_only_descendants_of_a_pin_merged_from_a_side_branch(upstream):
    from zmr.infra import git as zgit
    from zmr.ops.update import first_parent_line

    fork = upstream.commits[0]
    git("checkout", "-q", "-b", "side", fork, cwd=upstream.path)
    pin = upstream.commit({"docs/side.md": "side\n"}, "Side work")
    git("checkout", "-q", "main", cwd=upstream.path)
    git("merge", "-q", "--no-ff", "-m", "Merge side", "side", cwd=upstream.path)
    merge = git("rev-parse", "HEAD", cwd=upstream.path)
    after = upstream.commit({"docs/after.md": "after\n"}, "After the merge")
    repo = zgit.Repo(upstream.path / ".git")
    assert first_parent_line(repo, pin, after) == [merge, after]  # not upstream's commits 2 and 3: they lack the pin
    assert first_parent_line(repo, upstream.commits[1], after) == [upstream.commits[2], merge, after]


def test_every_result_of_update_and_upstream_says_itself_as_json():
    import json

    from zmr.ops.update import BlockedBy, Trial
    from zmr.ops.landed import Dropped
    from zmr.ops.upstream import InMemory

    dropped = Dropped("0002-b.patch", "B", "empty", "c" * 40, "B upstream")
    expected_dropped = {"name": "0002-b.patch", "subject": "B", "method": "empty", "upstream": "c" * 40, "upstream_subject": "B upstream"}
    assert dropped.to_json() == {**expected_dropped, "via": [], "landed": "landed (modified, via cccccccccccc)"}
    assert Dropped("0002-b.patch", "B", "patch-id", "c" * 40).landed == "landed (same patch)"
    trial = Trial("a" * 40, False, [dropped], "t" * 40, [("m1", 0), ("m2", 2)], {2, 0}, conflict=3, files=["src/x.py"])
    data = json.loads(json.dumps(trial.to_json()))  # a set (merged) or a dataclass would not dump
    assert data["merged"] == [0, 2] and data["made"] == [["m1", 0], ["m2", 2]] and data["dropped"] == [dropped.to_json()]
    assert (data["conflict"], data["files"], data["ok"]) == (3, ["src/x.py"], False)
    memory = InMemory("t" * 40, [("m1", "0001-a.patch", None)], [dropped], conflict_at=1)
    expected = {"tip": "t" * 40, "replayed": [["m1", "0001-a.patch", None]], "dropped": [dropped.to_json()], "conflict_at": 1, "reused": [], "unused": []}
    assert json.loads(json.dumps(memory.to_json())) == expected
    # The keys docs/reference.md §7.19 gives for blocked_by in `zmr update --json`.
    blocked = BlockedBy("b" * 40, "Upstream change", "0001-a.patch", "A", ["f"], "Patch Author", "author@zmr.invalid")
    assert blocked.to_json() == {
        "commit": "b" * 40,
        "patch": "0001-a.patch",
        "files": ["f"],
        "author_name": "Patch Author",
        "author_email": "author@zmr.invalid",
        "partially_landed": None,
        "renamed_from": {},
    }


# -- upstream renames a file the series patches (#47: update's trial picks follow renames as rebase's cherry-picks do) --------


def _renamed(model_py: str, line_10: str = "line 10\n") -> dict[str, str | None]:
    """src/model.py moved to src/net.py, a line far from 0001's changed on the way (a rename git finds, not a copy); *line_10* as given."""
    return {"src/model.py": None, "src/net.py": model_py.replace("line 35\n", "line 35 upstream\n").replace("line 10\n", line_10)}


def _series_files(root) -> dict[str, bytes]:
    folder = root / "patches/toy/rollout"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_patch_in_a_file_upstream_renamed_moves_clean_and_apply_is_what_rebase_makes(project, upstream, tmp_path):
    """verl's history: upstream renames a file 0001 patches and changes nothing 0001 touches. ``rebase --onto`` (cherry-pick,
    rename-aware) finishes; update must say the move is clean (not partial at the rename), and --apply give the same bytes."""
    other = make_project(tmp_path / "other")
    for each in (project, other):
        each.write(".gitignore", "/work/\n/.zmr/\n")
        pin = simple_model(each, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    made = grow(upstream, 6, special={2: (_renamed(model_py), "Rename model.py to net.py")})
    rc, data, err = update_json(project)
    assert rc == 0, err
    assert (data["status"], data["target"], data["blocked_by"]) == ("clean", made[-1], None)
    assert data["dropped"] == [] and data["partially_landed"] == {}
    rc, applied, err = update_json(project, "--apply")
    assert rc == 0 and applied["applied"] is True, err
    rebased = zmr("rebase", "toy", "--onto", made[-1], "--json", cwd=other.root)
    assert rebased.returncode == 0, rebased.stderr
    assert json.loads(rebased.stdout)["status"] == "done"
    assert _series_files(project.root) == _series_files(other.root)
    assert b"+++ b/src/net.py" in _series_files(project.root)["0001-fixed-split.patch"]
    assert (project.root / "manifests/toy.yaml").read_text() == (other.root / "manifests/toy.yaml").read_text()
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert "line 10 fixed split" in git("show", "rollout/toy:src/net.py", cwd=project.root)


def test_a_real_conflict_in_a_renamed_file_names_its_new_path_and_the_rename(project, upstream, tmp_path):
    """Where the renamed file also conflicts, update names the file as rebase's cherry-pick leaves it (the new path) and
    says which name the patch knows it by, in text, --json and the report."""
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    made = grow(upstream, 6, special={3: (_renamed(model_py, "line 10 upstream\n"), "Rename model.py to net.py, rework line 10")})
    rc, data, err = update_json(project)
    assert rc == 0, err
    assert (data["status"], data["target"]) == ("partial", made[2])
    blocked = data["blocked_by"]
    assert (blocked["commit"], blocked["patch"], blocked["files"]) == (made[3], "0001-fixed-split.patch", ["src/net.py"])
    assert blocked["renamed_from"] == {"src/net.py": "src/model.py"}
    report = tmp_path / "report.md"
    text = zmr("update", "toy", "--report", str(report), cwd=project.root)
    assert text.returncode == 0, text.stderr
    assert "0001-fixed-split.patch conflicts in src/net.py (renamed from src/model.py upstream)" in text.stdout
    assert "conflicts in `src/net.py` (renamed from `src/model.py` upstream)" in report.read_text()
    stopped = zmr("rebase", "toy", "--onto", made[3], "--json", cwd=project.root)  # what rebase's cherry-pick says of it
    assert stopped.returncode == 1
    data = json.loads(stopped.stdout)
    assert (data["files"], data["renamed_from"]) == (["src/net.py"], {"src/net.py": "src/model.py"})
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    stopped = zmr("rebase", "toy", "--onto", made[3], cwd=project.root)
    assert stopped.returncode == 1 and "conflicting files: src/net.py (renamed from src/model.py upstream)" in stopped.stderr


def test_a_git_older_than_2_38_is_told_to_upgrade_where_update_merges(project, upstream, tmp_path, monkeypatch):
    """zmr needs git 2.38 (merge-tree --write-tree). No older git is installed here, so a stand-in on PATH answers as git
    2.37 does to that command alone (its usage, exit 129) and hands every other command to the real git."""
    import shutil

    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    grow(upstream, 2, special={1: (_renamed(model_py), "Rename model.py to net.py")})
    shim = tmp_path / "old-git"
    shim.mkdir()
    (shim / "git").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" merge-tree --write-tree "*) echo "usage: git merge-tree <base-tree> <branch1> <branch2>" >&2; exit 129;; esac\n'
        'case " $* " in *" --version "*) echo "git version 2.37.7"; exit 0;; esac\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{__import__('os').environ['PATH']}")
    result = zmr("update", "toy", cwd=project.root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "git version 2.37.7 cannot merge in memory (`git merge-tree --write-tree`)" in result.stderr
    assert "install git 2.38 or newer" in result.stderr
