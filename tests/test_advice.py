"""Advice followed literally (issue #36): each refusal below names a command; the test runs exactly that command and checks nothing was lost.

The commands are read out of zmr's own message (the text between backticks),
never retyped here, so advice that changes must keep working.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from conftest import Upstream, git, make_project, simple_model, team_clones, zmr


def _advised(stderr: str, starting: str) -> list[str]:
    """The arguments of the first command in backticks in *stderr* that starts with *starting*."""
    for command in re.findall(r"`([^`]+)`", stderr):
        if command.startswith(starting):
            return shlex.split(command)
    raise AssertionError(f"no `{starting}...` in the advice:\n{stderr}")


def _run(argv: list[str], cwd: Path):
    assert argv[0] == "zmr", argv
    return zmr(*argv[1:], cwd=cwd)


def _moved_pin_under_my_commit(tmp_path: Path, upstream: Upstream) -> tuple[Path, Path]:
    """My clone's checkout has one new commit; a colleague moved the pin (`zmr rebase --onto main`) and I pulled it."""
    mine, theirs = team_clones(tmp_path, upstream)
    assert zmr("checkout", "toy", cwd=mine).returncode == 0
    work = mine / "work/toy/rollout"
    (work / "src/notes.md").write_text("my notes\n")
    git("add", "src/notes.md", cwd=work)
    git("commit", "-q", "-m", "Add my notes", cwd=work)
    model_py = upstream.file_at(upstream.commits[-1], "src/model.py")
    upstream.commit({"src/model.py": model_py + "\n# upstream moved on\n"}, "Upstream moves on")
    moved = zmr("rebase", "toy", "--onto", "main", cwd=theirs)
    assert moved.returncode == 0, moved.stderr
    git("commit", "-q", "-am", "colleague: move the pin", cwd=theirs)
    git("push", "-q", "origin", "main", cwd=theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    return mine, work


def _my_commit_is_in_the_series(mine: Path) -> None:
    series = mine / "patches/toy/rollout"
    assert (series / "series").read_text().splitlines()[-1] == "0003-add-my-notes.patch"
    assert "+my notes" in (series / "0003-add-my-notes.patch").read_text()
    assert zmr("build", "toy", cwd=mine).returncode == 0
    assert zmr("verify", "toy", cwd=mine).returncode == 0


def test_export_after_a_colleague_moved_the_pin_names_checkout_merge_and_it_works(tmp_path, upstream):
    mine, work = _moved_pin_under_my_commit(tmp_path, upstream)
    refused = zmr("export", "toy", cwd=mine)
    assert refused.returncode == 2 and "the base moved" in refused.stderr, refused.stderr
    assert "--force" not in refused.stderr  # no advice that discards the commit
    merged = _run(_advised(refused.stderr, "zmr checkout toy -c rollout --merge"), mine)
    assert merged.returncode == 0, merged.stderr
    exported = _run(_advised(refused.stderr, "zmr export"), mine)
    assert exported.returncode == 0, exported.stderr
    _my_commit_is_in_the_series(mine)


def test_checkout_over_work_when_the_series_moved_too_names_merge_not_export(tmp_path, upstream):
    """issue #36: checkout said "keep it: commit, then zmr export", which export then refused; now it names --merge, and that works."""
    mine, work = _moved_pin_under_my_commit(tmp_path, upstream)
    refused = zmr("checkout", "toy", cwd=mine)
    assert refused.returncode == 2, refused.stderr
    assert "then `zmr export" not in refused.stderr, refused.stderr
    merged = _run(_advised(refused.stderr, "zmr checkout toy -c rollout --merge"), mine)
    assert merged.returncode == 0, merged.stderr
    assert zmr("export", "toy", cwd=mine).returncode == 0
    _my_commit_is_in_the_series(mine)
    assert "Add my notes" in git("log", "--format=%s", "-1", cwd=work)


def test_broken_patch_files_are_found_first_every_one_with_its_line_and_the_advice_works(tmp_path, upstream):
    """issue #36: conflict markers from `git pull` and a hand-edited hunk passed validate; build said `corrupt patch`, advised a checkout that failed the same way."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    folder = project.root / "patches/toy/rollout"
    first, second = folder / "0001-fixed-split.patch", folder / "0002-contiguous.patch"
    good = (first.read_bytes(), second.read_bytes())
    text = first.read_text()
    marked = text.replace("+line 10 fixed split\n", "<<<<<<< HEAD\n+line 10 fixed split\n=======\n+line 10 split fixed\n>>>>>>> theirs\n")
    first.write_text(marked)
    lines = second.read_text().split("\n")
    last_added = max(i for i, line in enumerate(lines) if line.startswith("+") and not line.startswith("+++"))
    lines.insert(last_added + 1, "+    # a line added by hand")
    second.write_text("\n".join(lines))
    at = {
        "<<<<<<< HEAD": marked.split("\n").index("<<<<<<< HEAD") + 1,
        "=======": marked.split("\n").index("=======") + 1,
        ">>>>>>> theirs": marked.split("\n").index(">>>>>>> theirs") + 1,
    }
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@")) + 1
    for args in (["validate"], ["build", "toy"], ["checkout", "toy"]):
        result = zmr(*args, cwd=project.root)
        assert result.returncode == 2, (args, result.stderr)
        for marker, line in at.items():
            assert f"patches/toy/rollout/0001-fixed-split.patch:{line}: conflict marker `{marker}`" in result.stderr, (args, result.stderr)
        assert f"patches/toy/rollout/0002-contiguous.patch:{hunk}: hunk `@@ " in result.stderr and "has more lines than its header says" in result.stderr
        assert "corrupt patch" not in result.stderr and "git:" not in result.stderr, result.stderr
    report = zmr("validate", "--json", cwd=project.root)
    import json

    problems = json.loads(report.stdout)["problems"]
    assert sorted((p["file"].rsplit("/", 1)[-1], p["line"]) for p in problems) == sorted(
        [("0001-fixed-split.patch", line) for line in at.values()] + [("0002-contiguous.patch", hunk)]
    )
    # The advice, literally: `git log --oneline -- FILE`, then `git checkout <commit> -- FILE` with the commit it names.
    stderr = zmr("validate", cwd=project.root).stderr
    for path in (first, second):
        rel = path.relative_to(project.root).as_posix()
        log_cmd = _advised_git(stderr, f"git log --oneline -- {rel}")
        last_good = git(*log_cmd[1:], cwd=project.root).split("\n")[0].split()[0]
        restore = _advised_git(stderr, f"git checkout <commit> -- {rel}")
        git(*[last_good if arg == "<commit>" else arg for arg in restore[1:]], cwd=project.root)
    assert (first.read_bytes(), second.read_bytes()) == good
    assert zmr("validate", cwd=project.root).returncode == 0
    assert zmr("build", "toy", cwd=project.root).returncode == 0


def _advised_git(stderr: str, command: str) -> list[str]:
    assert f"`{command}`" in stderr, stderr
    return shlex.split(command)


def test_a_patch_that_does_not_apply_gets_advice_that_is_not_circular(tmp_path, upstream):
    """A well-formed patch whose context is wrong: the advice names the file and its last good commit, never `zmr checkout` (which fails the same way)."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    patch = project.root / "patches/toy/rollout/0001-fixed-split.patch"
    good = patch.read_bytes()
    patch.write_text(patch.read_text().replace(" line 9\n", " line nine\n"))
    for args in (["build", "toy"], ["checkout", "toy"]):
        result = zmr(*args, cwd=project.root)
        assert result.returncode == 2 and "does not apply" in result.stderr, result.stderr
        assert "zmr checkout" not in result.stderr and "zmr export" not in result.stderr, result.stderr
    rel = "patches/toy/rollout/0001-fixed-split.patch"
    last_good = git("log", "--oneline", "--", rel, cwd=project.root).split("\n")[0].split()[0]
    restore = _advised_git(result.stderr, f"git checkout <commit> -- {rel}")
    git(*[last_good if arg == "<commit>" else arg for arg in restore[1:]], cwd=project.root)
    assert patch.read_bytes() == good
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0


def test_verify_prints_expected_and_actual_ids_and_ends_with_the_build_that_fixes_the_drift(tmp_path, upstream):
    """issue #36: verify printed the expected id under the branch's name and did not say what to do."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    expected = project.ref("refs/heads/rollout/toy")
    git("checkout", "-q", "rollout/toy", cwd=project.root)
    git("commit", "-q", "--amend", "-m", "rewritten message", cwd=project.root)
    git("checkout", "-q", "main", cwd=project.root)
    actual = project.ref("refs/heads/rollout/toy")
    drift = zmr("verify", "toy", cwd=project.root)
    assert drift.returncode == 1
    assert f"differs  rollout/toy  expected {expected[:12]}, branch at {actual[:12]}:" in drift.stdout, drift.stdout
    assert drift.stderr.rstrip().splitlines()[-1].strip().endswith("`zmr build toy`"), drift.stderr
    fixed = _run(_advised(drift.stderr, "zmr build"), project.root)
    assert fixed.returncode == 0, fixed.stderr
    assert project.ref("refs/heads/rollout/toy") == expected
    assert zmr("verify", "toy", cwd=project.root).returncode == 0


def test_a_partial_update_apply_exits_1_and_says_what_was_not_moved_and_why(tmp_path, upstream):
    """issue #36: `update --all --apply` exited 0 when a component stayed behind for unexported work; a CI job could not tell."""
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n")
    simple_model(project, upstream)
    simple_model(project, upstream, model="other")
    project.commit_all("two models")
    upstream.commit({"docs/notes.md": "notes\n"}, "Add notes")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    work = project.root / "work/toy/rollout"
    (work / "NOTES").write_text("work in progress\n")
    git("add", "NOTES", cwd=work)
    git("commit", "-q", "-m", "Not exported yet", cwd=work)
    toy = (project.root / "manifests/toy.yaml").read_bytes()
    partial = zmr("update", "--all", "--apply", cwd=project.root)
    assert partial.returncode == 1, partial.stderr
    assert "zmr: error: 1 of 2 components not moved: toy/rollout" in partial.stderr, partial.stderr
    assert "toy/rollout: its checkout work/toy/rollout has work not in the series" in partial.stderr
    assert (project.root / "manifests/toy.yaml").read_bytes() == toy  # left alone
    assert upstream.commits[-1] in (project.root / "manifests/other.yaml").read_text()  # the other moved
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    again = zmr("update", "--all", "--apply", cwd=project.root)
    assert again.returncode == 0, again.stderr
    assert upstream.commits[-1] in (project.root / "manifests/toy.yaml").read_text()


def test_a_pull_that_stops_in_a_patch_file_is_said_once_with_every_marker_line_and_the_advice_works(tmp_path, upstream):
    """issue #47: the conflict-marker error repeated its advice (500 characters) once per marker line; now once, at the
    first marker, which lists them all; the others name only their line. `git checkout --theirs -- FILE`, as advised,
    then the merge finished: the series builds."""
    mine, theirs = team_clones(tmp_path, upstream)
    rel = "patches/toy/rollout/0001-fixed-split.patch"
    for clone, side in ((theirs, "theirs"), (mine, "mine")):
        path = clone / rel
        path.write_text(path.read_text().replace("+line 10 fixed split\n", f"+line 10 fixed split ({side})\n"))
        git("commit", "-q", "-am", f"0001: {side}", cwd=clone)
    git("push", "-q", "origin", "main", cwd=theirs)
    git("pull", "-q", "--no-rebase", cwd=mine, check=False)
    text = (mine / rel).read_text().split("\n")
    lines = [n for n, line in enumerate(text, start=1) if line.startswith(("<<<<<<<", "=======", ">>>>>>>"))]
    assert len(lines) == 3, text
    for args in (["validate"], ["build", "toy"]):
        result = zmr(*args, cwd=mine)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("resolve it: keep the side you want") == 1, result.stderr
        assert f"(marker lines {', '.join(map(str, lines))})" in result.stderr, result.stderr
        for n in lines:
            assert f"{rel}:{n}: conflict marker `" in result.stderr, result.stderr
    take = _advised_git(result.stderr, f"git checkout --theirs -- {rel}")
    git(*take[1:], cwd=mine)
    git("add", rel, cwd=mine)
    git("commit", "-q", "--no-edit", cwd=mine)
    assert "+line 10 fixed split (theirs)" in (mine / rel).read_text()
    assert zmr("validate", cwd=mine).returncode == 0 and zmr("build", "toy", cwd=mine).returncode == 0


def test_an_abbreviated_pin_gets_a_command_that_prints_the_full_id_where_the_user_is(tmp_path, upstream):
    """issue #47: `git rev-parse 3bfd87b`, advised for an abbreviated pin, fails in the project (it holds no upstream
    commit). The advice, run as written from the repository root, prints the full id; written in, the manifest validates."""
    import subprocess

    project = make_project(tmp_path / "project")
    pin = simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(pin, pin[:7]))
    assert subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{pin[:7]}^{{commit}}"], cwd=project.root, capture_output=True).returncode != 0
    refused = zmr("validate", cwd=project.root)
    assert refused.returncode == 2 and "is an abbreviated commit id" in refused.stderr, refused.stderr
    [command] = [c for c in re.findall(r"`([^`]+)`", refused.stderr) if "rev-parse" in c]
    printed = subprocess.run(["bash", "-c", command], cwd=project.root, capture_output=True, text=True)
    assert printed.returncode == 0 and printed.stdout.strip() == pin, printed
    manifest.write_text(manifest.read_text().replace(pin[:7], printed.stdout.strip()))
    assert zmr("validate", cwd=project.root).returncode == 0


def test_rewritten_commits_under_a_moved_series_advice_names_the_checkout_and_changes_the_patch_not_a_new_one(tmp_path, upstream):
    """issue #47: "save them (git branch keep) ... redo your change on top (git cherry-pick ...)" named no directory, and
    cherry-picking the amended commit exported a new patch with the subject of the old one. Followed as written now: the
    branch is made in the checkout, survives --force, the range-diff shows the change, and the change lands in its own
    patch (0002 changed, no 0003), with the colleague's change to 0001 kept."""
    mine, theirs = team_clones(tmp_path, upstream)
    assert zmr("checkout", "toy", cwd=mine).returncode == 0
    work = mine / "work/toy/rollout"
    (work / "src/kernels/matmul.py").write_text("def matmul(a, b):\n    return (a @ b).contiguous()  # mine\n")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=work)  # 0002 rewritten: HEAD no longer descends from the export
    rel = "patches/toy/rollout/0001-fixed-split.patch"
    (theirs / rel).write_text((theirs / rel).read_text().replace("+line 10 fixed split\n", "+line 10 fixed split (theirs)\n"))
    git("commit", "-q", "-am", "colleague: 0001", cwd=theirs)
    git("push", "-q", "origin", "main", cwd=theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    refused = zmr("export", "toy", cwd=mine)
    assert refused.returncode == 2 and "rewrite earlier ones" in refused.stderr, refused.stderr
    assert "cherry-pick" not in refused.stderr, refused.stderr
    advised = [c for c in re.findall(r"`([^`]+)`", refused.stderr)]
    save, force, compare = (next(c for c in advised if word in c) for word in ("branch keep", "--force", "range-diff"))
    assert save == f"git -C {work} branch keep", save
    elsewhere = tmp_path / "elsewhere"  # the git commands name their directory: they work from anywhere
    elsewhere.mkdir()
    git(*shlex.split(save)[1:], cwd=elsewhere)
    assert _run(shlex.split(force), mine).returncode == 0
    shown = git(*shlex.split(compare)[1:], cwd=elsewhere)
    assert "# mine" in shown, shown  # the change to redo, shown where it belongs
    assert "# mine" in git("show", "keep:src/kernels/matmul.py", cwd=work)  # nothing lost
    # Redo it in the commit it changes (the last one here: amend), then export as advised.
    (work / "src/kernels/matmul.py").write_text(git("show", "keep:src/kernels/matmul.py", cwd=work))
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=work)
    exported = _run(_advised(refused.stderr, "zmr export"), mine)
    assert exported.returncode == 0, exported.stderr
    series = mine / "patches/toy/rollout"
    assert (series / "series").read_text().split() == ["0001-fixed-split.patch", "0002-contiguous.patch"]
    assert "# mine" in (series / "0002-contiguous.patch").read_text() and "(theirs)" in (series / "0001-fixed-split.patch").read_text()
