"""All-or-nothing multi-file writes (zmr.infra.transaction), SIGTERM; the per-component locks are in test_lock.py.

Races and interruptions land at points the test chooses: with
``ZMR_TEST_PAUSE=POINT=FILE`` a zmr process reaching POINT creates FILE and
waits until it is removed, so the test can start a second zmr, or send
SIGTERM or SIGKILL, while the first is exactly there (no sleeps and hope).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import git, make_project, simple_model, state_dir, zmr


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    return subprocess.Popen([sys.executable, "-m", "zmr", *args], cwd=cwd, env={**full, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _paused(args: list[str], cwd: Path, point: str, marker: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A zmr process stopped at *point* (the marker file exists; remove it to let the process go on)."""
    proc = _start(args, cwd, {**(env or {}), "ZMR_TEST_PAUSE": f"{point}={marker}"})
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"zmr {' '.join(args)} ended (exit {proc.returncode}) without reaching {point}: {err}")
        assert time.monotonic() < deadline, f"zmr {' '.join(args)} never reached {point}"
        time.sleep(0.02)
    return proc


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _files(project) -> dict[str, bytes]:
    """Manifests and series: what the commands under test write (not what they stage)."""
    return {f"{top}/{k}": v for top in ("manifests", "patches") for k, v in _tree_bytes(project.root / top).items() if not k.endswith(".zmr-stage")}


def _leftovers(project) -> list[str]:
    return sorted(p.relative_to(project.root).as_posix() for p in project.root.rglob("*zmr-stage") if ".git" not in p.parts)


def _export_fixture(tmp_path, upstream, added: int):
    """A checkout with the first patch reworded and *added* new commits."""
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    work = project.root / "work/toy/rollout"
    git("commit", "-q", "--amend", "-m", "Make matmul output contiguous (reworded)", cwd=work)
    for n in range(added):
        (work / f"src/extra_{n}.py").write_text(f"value = {n}\n")
        git("add", f"src/extra_{n}.py", cwd=work)
        git("commit", "-q", "-m", f"Add extra module {n}", cwd=work)
    (project.root.parent / "series-record").write_text(git("config", "zmr.series", cwd=work))
    return project


def _reset(project) -> None:
    """Manifests and series as committed, and a checkout's record of its series with them (else export's three sides see a repository that moved)."""
    git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "manifests", "patches", cwd=project.root)
    record = project.root.parent / "series-record"
    if record.exists():
        git("config", "zmr.series", record.read_text(), cwd=project.root / "work/toy/rollout")


# -- all or nothing: update --apply -------------------------------------------------------------------------


def _update_fixture(tmp_path, upstream):
    """A component whose ``series`` names its pin in a comment: ``update --apply`` rewrites the manifest and the series."""
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    series = project.root / "patches/toy/rollout/series"
    series.write_text(f"# made for {pin[:12]}\n" + series.read_text())
    project.commit_all("series header")
    for k in range(3):
        upstream.commit({f"docs/notes-{k}.md": f"note {k}\n"}, f"Add note {k}")
    before = _files(project)
    assert zmr("update", "toy", "--apply", cwd=project.root).returncode == 0
    after = _files(project)
    changed = sorted(k for k in after if after[k] != before.get(k))
    assert changed == ["manifests/toy.yaml", "patches/toy/rollout/series"], changed
    _reset(project)
    assert _files(project) == before
    return project, before, after


def test_update_apply_killed_between_its_renames_is_finished_by_the_next_command(tmp_path, upstream):
    """SIGKILL after the first rename (the new pin, the old series): the next zmr finishes the write; validate never sees half."""
    project, before, after = _update_fixture(tmp_path, upstream)
    marker = tmp_path / "paused"
    proc = _paused(["update", "toy", "--apply"], project.root, "transaction-renaming", marker)
    journal = state_dir(project.root) / "transactions/rebase/toy/rollout.json"
    assert journal.is_file()
    proc.kill()
    proc.wait(timeout=60)
    half = _files(project)
    assert half not in (before, after)  # the pin moved, the series did not: what a kill leaves on disk
    result = zmr("validate", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "an interrupted zmr left a half-written change (rebase/toy/rollout): finished now" in result.stderr
    assert _files(project) == after and not journal.exists() and not _leftovers(project)
    again = zmr("update", "toy", "--apply", cwd=project.root)  # finishes the rebase the kill left in progress
    assert again.returncode == 0, again.stderr
    assert _files(project) == after
    assert not (state_dir(project.root) / "rebase/toy/rollout").exists()
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert zmr("verify", "toy", cwd=project.root).returncode == 0


def test_update_apply_terminated_before_its_commit_changes_nothing_and_exits_143(tmp_path, upstream):
    project, before, after = _update_fixture(tmp_path, upstream)
    marker = tmp_path / "paused"
    proc = _paused(["update", "toy", "--apply"], project.root, "transaction-staged", marker)
    assert _leftovers(project)  # staged next to their targets
    proc.send_signal(signal.SIGTERM)  # to zmr alone, as `timeout` and `docker stop` do
    code, err = _finish(proc)
    assert code == 143, err
    assert "zmr: terminated" in err and "Traceback" not in err
    assert _files(project) == before and not _leftovers(project)
    assert not (state_dir(project.root) / "rebase/toy/rollout").exists()  # the move it started is undone
    assert not list((state_dir(project.root) / "transactions").rglob("*.json"))
    result = zmr("update", "toy", "--apply", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert _files(project) == after


# -- all or nothing: import ----------------------------------------------------------------------------------


def _import_fixture(tmp_path, upstream):
    """A project with two built models to import from, and the files an uninterrupted import writes."""
    source = make_project(tmp_path / "source")
    simple_model(source, upstream)
    simple_model(source, upstream, model="second")
    assert zmr("build", "--all", cwd=source.root).returncode == 0
    args = ["import", "rollout/toy", "rollout/second", "--remote", str(source.root)]
    reference = make_project(tmp_path / "reference")
    result = zmr(*args, cwd=reference.root)
    assert result.returncode == 0, result.stderr
    expected = _files(reference)
    assert len(expected) == 6  # two manifests, two series of one patch each
    target = make_project(tmp_path / "target")
    return target, args, expected


def test_import_terminated_writes_nothing_and_the_rerun_succeeds(tmp_path, upstream):
    """Today SIGTERM leaves some manifests and the rerun refuses; now exit 143, nothing written, the rerun imports."""
    target, args, expected = _import_fixture(tmp_path, upstream)
    marker = tmp_path / "paused"
    proc = _paused(args, target.root, "transaction-staged", marker)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 143, err
    assert _files(target) == {} and not _leftovers(target)
    assert sorted(p.name for p in target.root.iterdir()) == [".git", "manifests"]  # no patches/ folder made
    result = zmr(*args, cwd=target.root)
    assert result.returncode == 0, result.stderr
    assert _files(target) == expected


def test_import_killed_between_its_renames_converges(tmp_path, upstream):
    target, args, expected = _import_fixture(tmp_path, upstream)
    marker = tmp_path / "paused"
    proc = _paused(args, target.root, "transaction-renaming", marker)
    proc.kill()
    proc.wait(timeout=60)
    assert 0 < len(_files(target)) < len(expected)
    result = zmr("list", cwd=target.root)
    assert result.returncode == 0, result.stderr
    assert "(import): finished now" in result.stderr
    assert _files(target) == expected and not _leftovers(target)
    assert zmr("build", "--all", cwd=target.root).returncode == 0


def test_a_journal_zmr_did_not_write_is_not_followed(tmp_path, upstream):
    """A journal naming a file outside the repository (or a staged name zmr never makes) is left alone, with a warning."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    journals = state_dir(project.root) / "transactions"
    journals.mkdir(parents=True)
    (journals / "evil.json").write_text(f'{{"version": 1, "phase": "commit", "dirs": [], "files": [], "remove": ["../{outside.name}"]}}')
    (journals / "odd.json").write_text('{"version": 1, "phase": "commit", "dirs": [], "files": [["manifests/toy.yaml", "../x"]], "remove": []}')
    # A file in a checkout (a nested git repository): an engineer's unexported work.
    mine = project.write("work/toy/rollout/src/mine.py", "work in progress\n")
    git("init", "-q", cwd=mine.parents[1])
    (journals / "work.json").write_text('{"version": 1, "phase": "commit", "dirs": [], "files": [], "remove": ["work/toy/rollout/src/mine.py"]}')
    result = zmr("list", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("not a journal zmr wrote") == 3, result.stderr
    assert "lies inside the git repository work/toy/rollout" in result.stderr
    assert outside.read_text() == "keep me\n" and (project.root / "manifests/toy.yaml").is_file() and mine.is_file()


def test_a_symlink_in_place_of_a_series_file_is_refused_not_written_through(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    series = project.root / "patches/toy/rollout/series"
    outside = project.write("patches/toy/rollout/series.real", f"# made for {pin[:12]}\n" + series.read_text())  # in the folder: readable
    series.unlink()
    series.symlink_to(outside)
    project.commit_all("a linked series")
    upstream.commit({"docs/notes.md": "note\n"}, "Add a note")
    before = outside.read_bytes()
    result = zmr("rebase", "toy", "-c", "rollout", "--onto", "main", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert "patches/toy/rollout/series: is a symbolic link; zmr replaces only regular files" in result.stderr
    assert outside.read_bytes() == before and pin in (project.root / "manifests/toy.yaml").read_text()


# -- all or nothing: init and new ----------------------------------------------------------------------------


def _work_tree(root: Path) -> dict[str, bytes]:
    """Every file but git's and zmr's own state."""
    return {k: v for k, v in _tree_bytes(root).items() if not k.startswith((".git/", ".zmr/")) and not k.endswith(".zmr-stage")}


def test_init_interrupted_writes_nothing_or_everything(tmp_path):
    """SIGTERM before the commit: exit 143, no file (a half-made project would make the rerun skip what is missing); SIGKILL mid-rename: the rerun finishes."""
    reference = tmp_path / "reference"
    reference.mkdir()
    git("init", "-q", "-b", "main", cwd=reference)
    assert zmr("init", cwd=reference).returncode == 0
    expected = _work_tree(reference)
    assert {"zmr.yaml", ".gitignore", "README.md", ".github/workflows/zmr.yml"} <= set(expected)
    for sig, point in ((signal.SIGTERM, "transaction-staged"), (signal.SIGKILL, "transaction-renaming")):
        repo = tmp_path / f"repo-{sig.name}"
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        marker = tmp_path / f"paused-{sig.name}"
        proc = _paused(["init"], repo, point, marker)
        proc.send_signal(sig)
        code, err = _finish(proc)
        now = _work_tree(repo)
        if sig == signal.SIGTERM:
            assert code == 143, err
            assert now == {} and not (repo / "manifests").exists(), now
        else:
            assert 0 < len(now) < len(expected), now  # what a kill leaves: the rerun must finish it
        result = zmr("init", cwd=repo)
        assert result.returncode == 0, result.stderr
        assert _work_tree(repo).keys() == expected.keys() and (repo / "manifests").is_dir()
        assert {k: v for k, v in _work_tree(repo).items() if k != "README.md"} == {k: v for k, v in expected.items() if k != "README.md"}  # titled by folder
        assert not _leftovers_in(repo)
        assert zmr("docs", "--check", cwd=repo).returncode == 0


def _leftovers_in(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*zmr-stage") if ".git" not in p.parts)


def test_new_killed_between_its_renames_converges_and_never_overwrites(tmp_path, upstream):
    args = ["new", "qwen3", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", "-c", f"trainer={upstream.path}@{upstream.commits[2]}"]
    reference = make_project(tmp_path / "reference")
    assert zmr(*args, cwd=reference.root).returncode == 0
    expected = _work_tree(reference.root)
    # the manifest, two series files, the case's case.yaml, README.md, recipe.md and evidence/README.md (skill/templates)
    assert sorted(expected) == [
        "cases/qwen3/README.md",
        "cases/qwen3/case.yaml",
        "cases/qwen3/evidence/README.md",
        "cases/qwen3/recipe.md",
        "manifests/qwen3.yaml",
        "patches/qwen3/rollout/series",
        "patches/qwen3/trainer/series",
    ]
    project = make_project(tmp_path / "project")
    marker = tmp_path / "paused"
    proc = _paused(args, project.root, "transaction-renaming", marker)
    proc.kill()
    proc.wait(timeout=60)
    assert 0 < len(_work_tree(project.root)) < len(expected)
    result = zmr("validate", cwd=project.root)
    assert "(new): finished now" in result.stderr, result.stderr
    assert _work_tree(project.root) == expected and not _leftovers_in(project.root)
    # A file that appears while `new` stages its own is never overwritten: the whole write is refused.
    other = make_project(tmp_path / "other")
    marker = tmp_path / "paused-2"
    proc = _paused(args, other.root, "transaction-staged", marker)
    (other.root / "cases/qwen3").mkdir(parents=True, exist_ok=True)
    (other.root / "cases/qwen3/recipe.md").write_text("mine\n")
    marker.unlink()
    code, err = _finish(proc)
    assert code == 2, err
    assert "cases/qwen3/recipe.md: appeared while zmr was writing; nothing was overwritten" in err
    assert _work_tree(other.root) == {"cases/qwen3/recipe.md": b"mine\n"} and not _leftovers_in(other.root)


def test_a_journal_a_crash_cut_short_is_undone_and_one_that_says_commit_is_refused(tmp_path, upstream):
    """A journal that does not parse: cut short while it was written (phase staging): its staged copies go, the targets stay; one that says commit is left alone."""
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    original = manifest.read_bytes()
    staged = manifest.with_name(".toy.yaml.0123456789ab.zmr-stage")
    staged.write_bytes(b"half of a new manifest")
    journals = state_dir(project.root) / "transactions"
    journals.mkdir(parents=True)
    whole = '{"version": 1, "phase": "staging", "dirs": [], "files": [["manifests/toy.yaml", ".toy.yaml.0123456789ab.zmr-stage"], ["patches/toy/x", ".x.0'
    (journals / "cut.json").write_text(whole)
    (journals / "empty.json").write_bytes(b"")
    result = zmr("list", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "(cut): undone now" in result.stderr and "(empty): undone now" in result.stderr, result.stderr
    assert not staged.exists() and manifest.read_bytes() == original
    assert not list(journals.glob("*.json"))
    # Cut short in its commit phase, or not JSON at all: refused, nothing removed.
    staged.write_bytes(b"the new manifest")
    (journals / "late.json").write_text(whole.replace('"staging"', '"commit"'))
    (journals / "text.json").write_text("hello\n")
    result = zmr("list", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "late.json: the journal of a committed change is cut short" in result.stderr, result.stderr
    assert "text.json: not a journal zmr wrote (it is not JSON); zmr changed and removed nothing" in result.stderr, result.stderr
    assert staged.read_bytes() == b"the new manifest" and manifest.read_bytes() == original
    assert (journals / "late.json").exists() and (journals / "text.json").exists()


def test_a_full_disk_while_a_transaction_stages_names_the_file_and_changes_nothing(tmp_path, upstream):
    """ENOSPC or EDQUOT (injected: ZMR_TEST_FAULT) while export stages: exit 2 naming the patch file, the series as it was, no journal left."""
    project = _export_fixture(tmp_path, upstream, added=2)
    before = _files(project)
    for code, words in (("ENOSPC", "No space left on device"), ("EDQUOT", "Disk quota exceeded")):
        result = zmr("export", "toy", cwd=project.root, env={"ZMR_TEST_FAULT": f"stage-write={code}"})
        assert result.returncode == 2, result.stderr
        assert re.search(rf"zmr: error: \S+/patches/toy/rollout/\S+\.patch: {words}", result.stderr), result.stderr
        assert "free space" in result.stderr or "quota" in result.stderr
        assert _files(project) == before and not _leftovers(project)
        assert not list((state_dir(project.root) / "transactions").rglob("*.json"))
    bad = zmr("export", "toy", cwd=project.root, env={"ZMR_TEST_FAULT": "stage-write=ENOSPACE"})
    assert bad.returncode == 2 and "ZMR_TEST_FAULT='stage-write=ENOSPACE': not POINT=ERRNO" in bad.stderr, bad.stderr
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    assert _files(project) != before


def test_a_full_disk_while_rebase_writes_its_state_is_exit_2_naming_the_file_and_changes_nothing(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    upstream.commit({"docs/notes.md": "notes\n"}, "Add notes")
    before = _files(project)
    for code in ("ENOSPC", "EDQUOT"):
        result = zmr("rebase", "toy", "--onto", "main", cwd=project.root, env={"ZMR_TEST_FAULT": f"atomic-write={code}"})
        assert result.returncode == 2, result.stderr
        assert re.search(r"zmr: error: /\S+: (No space left on device|Disk quota exceeded)", result.stderr), result.stderr
        assert "Traceback" not in result.stderr
        assert _files(project) == before and not (state_dir(project.root) / "rebase/toy/rollout").exists()
    assert zmr("rebase", "toy", "--onto", "main", cwd=project.root).returncode == 0
    assert _files(project) != before
