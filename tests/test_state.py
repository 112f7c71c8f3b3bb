"""Where zmr keeps its working state, and which paths it trusts (docs/reference.md §8, "What zmr trusts").

Every test here is a hostile or confusing state on real repositories: a
committed ``.zmr/``, state naming a folder zmr did not make, symbolic links
where zmr writes, a remembered ``--dir`` next to ``work/``, an adopted
repository's ``git status``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import git, make_project, simple_model, state_dir, zmr


def _toy(path: Path, upstream) -> tuple[object, str]:
    project = make_project(path)
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    return project, pin


def _victim_checkout(tmp_path: Path, upstream) -> tuple[Path, dict]:
    """Another project's checkout with a commit not exported yet: what no command of this project may touch."""
    other, _ = _toy(tmp_path / "other", upstream)
    assert zmr("checkout", "toy", cwd=other.root).returncode == 0
    co = other.root / "work/toy/rollout"
    (co / "unexported.txt").write_text("precious\n")
    git("add", "unexported.txt", cwd=co)
    git("commit", "-q", "-m", "Precious unexported work", cwd=co)
    return co, _seen(co)


def _seen(co: Path) -> dict:
    return {
        "config": (co / ".git/config").read_bytes(),
        "refs": git("for-each-ref", "--format=%(objectname) %(refname)", cwd=co),
        "head": git("rev-parse", "HEAD", cwd=co),
        "files": sorted(p.name for p in co.iterdir()),
    }


def _rebase_state(path: Path, checkout: dict) -> dict:
    oid = "1" * 40
    return {
        "version": 1, "model": "toy", "component": "rollout", "old": oid, "new": oid, "rev": "main", "url": "/nowhere",
        "old_chain": [], "names": [], "subjects": [], "upstream_count": 0, "phase": "picking", "path": "checkout",
        "saved": {"series_files": [], "journal_existed": False, "checkout": {"path": str(path), **checkout}},
    }  # fmt: skip


def test_a_committed_zmr_folder_is_never_read_and_says_so_once(tmp_path, upstream):
    """A pull request commits .zmr/ (git add -f): a rebase state that deletes a folder, a pointer outside, an export journal."""
    project, _ = _toy(tmp_path / "project", upstream)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    project.write(".zmr/rebase/toy-rollout/state.json", json.dumps(_rebase_state(victim, {"existed": False})))
    project.write(".zmr/checkouts/toy/rollout", f"{outside}\n")
    project.write(".zmr/pending-removals/toy-rollout.json", json.dumps(["0002-contiguous.patch"]))
    git("add", "-f", ".zmr", cwd=project.root)
    project.commit_all("hostile state")

    aborted = zmr("rebase", "toy", "--abort", cwd=project.root)
    assert aborted.returncode == 2 and "no rebase in progress" in aborted.stderr
    assert (victim / "keep.txt").read_text() == "mine\n"
    assert aborted.stderr.count(".zmr/ in the work tree is not read") == 1
    made = zmr("checkout", "toy", cwd=project.root)
    assert made.returncode == 0, made.stderr
    assert str(project.root / "work/toy/rollout") in made.stdout
    assert list(outside.iterdir()) == []
    assert ".zmr/" not in made.stderr  # one warning, not one per command
    exported = zmr("export", "toy", cwd=project.root)
    assert exported.returncode == 0 and exported.stdout.startswith("unchanged patches/toy/rollout: 2 patches"), exported.stdout
    assert (project.root / "patches/toy/rollout/0002-contiguous.patch").is_file()


@pytest.mark.parametrize("existed", [False, True])
def test_rebase_abort_never_deletes_or_resets_a_checkout_the_state_does_not_own(tmp_path, upstream, existed):
    """Even state in the git directory names a checkout only with its zmr.token: another project's checkout is left alone."""
    project, _ = _toy(tmp_path / "project", upstream)
    victim, before = _victim_checkout(tmp_path, upstream)
    state = state_dir(project.root) / "rebase/toy/rollout/state.json"
    state.parent.mkdir(parents=True)
    saved = {"existed": existed, "token": "f" * 32}
    if existed:
        saved.update(head="refs/heads/toy/rollout", head_symbolic=True, refs={})
        (state.parent / "checkout-config").write_bytes(b"[core]\n\tfsmonitor = touch /tmp/pwned\n")
    state.write_text(json.dumps(_rebase_state(victim, saved)))
    (state.parent / "manifest.orig").write_bytes((project.root / "manifests/toy.yaml").read_bytes())
    # The same state where an older zmr kept it, not committed: not migrated, its checkout is not work/toy/rollout.
    legacy = project.root / ".zmr/rebase/toy-rollout"
    legacy.mkdir(parents=True)
    for item in state.parent.iterdir():
        (legacy / item.name).write_bytes(item.read_bytes())
    aborted = zmr("rebase", "toy", "--abort", cwd=project.root)
    assert aborted.returncode == (2 if existed else 0), aborted.stderr
    assert ("is not the one this rebase saved" in aborted.stderr) == existed
    assert _seen(victim) == before
    assert (victim / "unexported.txt").read_text() == "precious\n"


def test_a_remembered_dir_whose_checkout_lacks_its_token_is_not_used(tmp_path, upstream):
    project, _ = _toy(tmp_path / "project", upstream)
    victim, before = _victim_checkout(tmp_path, upstream)
    pointer = state_dir(project.root) / "checkouts/toy/rollout"
    pointer.parent.mkdir(parents=True)
    pointer.write_text(json.dumps({"path": str(victim), "token": "0" * 32}))
    project.write(".zmr/checkouts/toy/rollout", f"{victim}\n")  # an older zmr's pointer, not committed: its zmr.project is another repository
    made = zmr("checkout", "toy", "--force", cwd=project.root)
    assert made.returncode == 0, made.stderr
    assert f"created   {project.root / 'work/toy/rollout'}" in made.stdout
    assert _seen(victim) == before


def test_symbolic_links_where_zmr_writes_are_refused(tmp_path, upstream):
    project, _ = _toy(tmp_path / "project", upstream)
    victim, before = _victim_checkout(tmp_path, upstream)
    # work/toy/rollout is another project's checkout: --force would discard its work.
    (project.root / "work/toy").mkdir(parents=True)
    (project.root / "work/toy/rollout").symlink_to(victim)
    forced = zmr("checkout", "toy", "--force", cwd=project.root)
    assert forced.returncode == 2 and "work/toy/rollout: is a symbolic link" in forced.stderr
    assert _seen(victim) == before
    # work/ itself.
    os.unlink(project.root / "work/toy/rollout")
    (project.root / "work/toy").rmdir()
    (project.root / "work").rmdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (project.root / "work").symlink_to(outside)
    linked = zmr("checkout", "toy", cwd=project.root)
    assert linked.returncode == 2 and "work: is a symbolic link" in linked.stderr and "replace work with a real folder" in linked.stderr
    assert list(outside.iterdir()) == []


def test_export_never_writes_or_removes_through_a_link_in_the_series(tmp_path, upstream):
    """A committed journal naming sub/x.patch and sub -> outside: export must not delete the outside file."""
    project, _ = _toy(tmp_path / "project", upstream)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.patch").write_text("not zmr's\n")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    (project.root / "patches/toy/rollout/sub").symlink_to(outside)
    project.write(".zmr/pending-removals/toy-rollout.json", json.dumps(["sub/victim.patch"]))
    git("add", "-f", ".zmr", cwd=project.root)
    project.commit_all("hostile journal and link")
    co = project.root / "work/toy/rollout"
    assert zmr("export", "toy", cwd=co).returncode == 0
    assert (outside / "victim.patch").read_text() == "not zmr's\n"
    # The same journal where zmr keeps it (an interrupted export's): refused, nothing removed.
    journal = state_dir(project.root) / "pending-removals/toy/rollout.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(json.dumps(["sub/victim.patch"]))
    refused = zmr("export", "toy", cwd=co)
    assert refused.returncode == 2 and "patches/toy/rollout/sub: is a symbolic link" in refused.stderr
    assert (outside / "victim.patch").read_text() == "not zmr's\n"


def test_a_series_folder_that_is_a_link_is_refused(tmp_path, upstream):
    project, _ = _toy(tmp_path / "project", upstream)
    os.rename(project.root / "patches/toy", project.root / "vendored")
    (project.root / "patches/toy").symlink_to("../vendored")
    project.commit_all("series behind a link")
    result = zmr("checkout", "toy", cwd=project.root)
    assert result.returncode == 2 and "patches/toy: is a symbolic link" in result.stderr


def test_the_checkout_a_command_stands_in_wins_over_a_remembered_dir(tmp_path, upstream):
    """issue #25 item 2: after `checkout --dir /elsewhere`, export inside work/toy/rollout exports work/toy/rollout."""
    project, _ = _toy(tmp_path / "project", upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    made = zmr("checkout", "toy", "--dir", str(elsewhere), cwd=project.root)
    assert made.returncode == 0 and str(elsewhere) in made.stdout
    co = project.root / "work/toy/rollout"
    (co / "NOTES.md").write_text("a note\n")
    git("add", "NOTES.md", cwd=co)
    git("commit", "-q", "-m", "Add a note", cwd=co)
    exported = zmr("export", "toy", "-c", "rollout", cwd=co)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("exported patches/toy/rollout: 3 patches, from work/toy/rollout"), exported.stdout
    assert (project.root / "patches/toy/rollout/0003-add-a-note.patch").is_file()
    # Standing in neither: two checkouts are refused, both named.
    both = zmr("export", "toy", cwd=project.root)
    assert both.returncode == 2 and "two checkouts" in both.stderr and str(elsewhere) in both.stderr and "work/toy/rollout" in both.stderr
    # Inside the remembered one: that one, named.
    there = zmr("export", "toy", cwd=elsewhere)
    # (it is stale now: the export above moved the repository's series, and export's three sides refuse, naming it)
    assert there.returncode == 2 and there.stderr.startswith(f"zmr: error: {elsewhere}: the series patches/toy/rollout changed"), there.stdout + there.stderr
    # The remembered folder is deleted: never made again behind the engineer's back.
    import shutil

    shutil.rmtree(elsewhere)
    shutil.rmtree(co)
    again = zmr("checkout", "toy", cwd=project.root)
    assert again.returncode == 0, again.stderr
    assert str(co) in again.stdout and not elsewhere.exists()
    assert f"--dir {elsewhere} is gone" in again.stderr


def test_checkouts_stay_out_of_git_status_in_an_adopted_repository(tmp_path, upstream):
    """issue #25 item 9: a repository not made by zmr init (no .gitignore line for work/)."""
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "*.pyc\n")
    simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    assert git("status", "--porcelain", cwd=project.root) == ""
    assert (project.root / ".gitignore").read_text() == "*.pyc\n"
    exclude = Path(git("rev-parse", "--path-format=absolute", "--git-path", "info/exclude", cwd=project.root))
    assert zmr("checkout", "toy", "--force", cwd=project.root).returncode == 0
    assert exclude.read_text().splitlines().count("/work/") == 1


def test_a_rebase_started_by_an_older_zmr_is_migrated_once_and_aborts(tmp_path, upstream):
    """State an older zmr wrote in .zmr/ (not committed, checkout work/toy/rollout) moves into the git directory."""
    project, _ = _toy(tmp_path / "project", upstream)
    model_py = upstream.file_at(upstream.commits[1], "src/model.py") + "\n"
    upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    before = (project.root / "manifests/toy.yaml").read_bytes(), {p.name: p.read_bytes() for p in (project.root / "patches/toy/rollout").iterdir()}
    assert zmr("rebase", "toy", "--onto", "main", cwd=project.root).returncode == 1
    co = project.root / "work/toy/rollout"
    # Make it look like an older zmr's: in .zmr/, no tokens anywhere.
    ours = state_dir(project.root)
    legacy = project.root / ".zmr/rebase/toy-rollout"
    legacy.parent.mkdir(parents=True)
    os.rename(ours / "rebase/toy/rollout", legacy)
    (ours / "legacy-migrated").unlink(missing_ok=True)
    data = json.loads((legacy / "state.json").read_text())
    del data["saved"]["checkout"]["token"]
    (legacy / "state.json").write_text(json.dumps(data))
    git("config", "--unset", "zmr.token", cwd=co)
    aborted = zmr("rebase", "toy", "--abort", cwd=project.root)
    assert aborted.returncode == 0, aborted.stderr
    assert "migrated: the rebase of toy/rollout" in aborted.stderr
    assert not co.exists() and not legacy.exists()
    assert ((project.root / "manifests/toy.yaml").read_bytes(), {p.name: p.read_bytes() for p in (project.root / "patches/toy/rollout").iterdir()}) == before


def test_smoke_record_refuses_an_evidence_folder_that_is_a_link_before_running(tmp_path, upstream):
    project, pin = _toy(tmp_path / "project", upstream)
    text = (project.root / "manifests/toy.yaml").read_text()
    project.write("manifests/toy.yaml", text + "    smoke:\n      - name: ok\n        run: touch \"$ZMR_ARTIFACTS/ran\"\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (project.root / "cases/toy").mkdir(parents=True)
    (project.root / "cases/toy/evidence").symlink_to(outside)
    project.commit_all("evidence behind a link")
    result = zmr("smoke", "toy", "--record", cwd=project.root)
    assert result.returncode == 2 and "cases/toy/evidence: is a symbolic link" in result.stderr, result.stderr
    assert list(outside.iterdir()) == []
    assert not (state_dir(project.root) / "smoke/toy/ran").exists()  # refused before anything ran


def test_a_state_folder_that_is_a_link_is_refused(tmp_path, upstream):
    project, _ = _toy(tmp_path / "project", upstream)
    outside = tmp_path / "outside"
    outside.mkdir()
    state_dir(project.root).symlink_to(outside)
    result = zmr("checkout", "toy", cwd=project.root)
    assert result.returncode == 2 and f"{state_dir(project.root)}: is not a folder (a symbolic link?)" in result.stderr, result.stderr
    assert list(outside.iterdir()) == []


def test_old_state_of_any_shape_is_migrated_or_left_with_a_message_never_a_traceback(tmp_path, upstream):
    """issue #36: `.zmr/` of an unexpected shape ended in `internal error`; now each shape is refused (left in .zmr/, one warning) and the command runs."""
    import shutil

    project, _ = _toy(tmp_path / "project", upstream)
    state = state_dir(project.root)
    legacy = project.root / ".zmr"
    rebase = legacy / "rebase/toy-rollout"
    valid = _rebase_state(project.root / "work/toy/rollout", {"existed": False})

    def write(path: Path, data: bytes | str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    shapes = {
        "a file": lambda: write(legacy, "x"),
        "rebase a file": lambda: write(legacy / "rebase", "x"),
        "state a folder": lambda: (rebase / "state.json").mkdir(parents=True),
        "state not JSON": lambda: write(rebase / "state.json", b"\xff\x00garbage"),
        "state a list": lambda: write(rebase / "state.json", "[1, 2]"),
        "state nested deep": lambda: write(rebase / "state.json", "[" * 5000 + "]" * 5000),
        "state of odd types": lambda: write(
            rebase / "state.json", json.dumps({**valid, "model": 5, "saved": {"series_files": 5, "journal_existed": [], "checkout": {"path": 7}}})
        ),
        "state a FIFO": lambda: (rebase.mkdir(parents=True), os.mkfifo(rebase / "state.json")),
        "journal a folder": lambda: (legacy / "pending-removals/toy-rollout.json").mkdir(parents=True),
        "journal not JSON": lambda: write(legacy / "pending-removals/toy-rollout.json", b"\xff{["),
        "journal of odd names": lambda: write(legacy / "pending-removals/toy-rollout.json", '[1, null, ["a"]]'),
        "journal a FIFO": lambda: ((legacy / "pending-removals").mkdir(parents=True), os.mkfifo(legacy / "pending-removals/toy-rollout.json")),
        "pointer a folder": lambda: (legacy / "checkouts/toy/rollout").mkdir(parents=True),
        "pointer binary": lambda: write(legacy / "checkouts/toy/rollout", b"\xff\xfe\x00"),
        "pointer relative": lambda: write(legacy / "checkouts/toy/rollout", "../../etc"),
        "pointer too long a path": lambda: write(legacy / "checkouts/toy/rollout", "/" + "a/" * 3000),
    }
    for shape, make in shapes.items():
        if legacy.is_dir():
            shutil.rmtree(legacy)
        elif os.path.lexists(legacy):
            legacy.unlink()
        (state / "legacy-migrated").unlink(missing_ok=True)
        make()
        result = zmr("list", cwd=project.root)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (shape, result.stderr)
        assert ".zmr/ in the work tree is not read" in result.stderr and "migrated:" not in result.stderr, (shape, result.stderr)
        assert os.path.lexists(legacy), shape  # nothing deleted that zmr did not understand
        assert not (state / "rebase").exists() and not (state / "checkouts").exists(), shape


@pytest.mark.parametrize("layout", ["linked-worktree", "separate-git-dir", "git-dir-env"])
def test_state_lives_in_the_git_directory_of_every_layout(tmp_path, upstream, layout):
    """issue #36: a linked work tree, `--separate-git-dir` (a `.git` file), GIT_DIR/GIT_WORK_TREE set by the caller: checkout, export,
    build and verify work, the state (the component lock) is in that layout's git directory, and nothing of zmr's lands in the work tree."""
    origin, _ = _toy(tmp_path / "origin", upstream)
    origin.commit_all("ignore work")
    env: dict[str, str] = {}
    if layout == "linked-worktree":
        root = tmp_path / "linked"
        git("worktree", "add", "-q", str(root), "-b", "linked", cwd=origin.root)
        git_dir = Path(git("rev-parse", "--absolute-git-dir", cwd=root))
        assert git_dir.parent.name == "worktrees"
    elif layout == "separate-git-dir":
        root, git_dir = tmp_path / "sep", tmp_path / "sep.git"
        git("clone", "-q", "--separate-git-dir", str(git_dir), str(origin.root), str(root))
        assert (root / ".git").is_file()
    else:
        root, git_dir = tmp_path / "env", tmp_path / "env/.git"
        git("clone", "-q", str(origin.root), str(root))
        env = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(root)}
    assert zmr("checkout", "toy", cwd=root, env=env).returncode == 0
    work = root / "work/toy/rollout"
    (work / "src/notes.md").write_text("notes\n")
    git("add", "src/notes.md", cwd=work)
    git("commit", "-q", "-m", "Add notes", cwd=work)
    exported = zmr("export", "toy", cwd=root, env=env)
    assert exported.returncode == 0, exported.stderr
    assert (root / "patches/toy/rollout/0003-add-notes.patch").is_file()
    assert (git_dir / "zmr/locks/toy/rollout.lock").is_file()  # the state folder of this layout's git directory
    assert not (root / ".zmr").exists() and not list(root.rglob("*.zmr-stage"))
    status = sorted(line.split(maxsplit=1)[1] for line in git("status", "--porcelain", cwd=root).splitlines())
    assert status == ["patches/toy/rollout/0003-add-notes.patch", "patches/toy/rollout/series"], status
    assert zmr("build", "toy", cwd=root, env=env).returncode == 0
    assert zmr("verify", "toy", cwd=root, env=env).returncode == 0


# -- one owner of the state (#49.1): zmr.infra.state's StateFile, zmr.ops.recovery.open_project, zmr.ops.legacy --------------


def _json_entries():
    from zmr.infra.state import STATE_FILES

    return [entry for entry in STATE_FILES if entry.kind == "json"]


def _sample(entry) -> object:
    return ["0001-a.patch", "sub/0002-b.patch"] if entry.shape is list else {"path": "/somewhere", "token": "t0k", "todo": [], "results": {}}


@pytest.mark.parametrize("entry", _json_entries(), ids=lambda e: e.name)
def test_every_state_format_round_trips_and_refuses_what_zmr_did_not_write_naming_the_file(tmp_path, entry):
    """Each JSON state file of zmr.infra.state.STATE_FILES: written and read back whole; another version, too big, not JSON, of
    another shape or a symbolic link is refused with one message naming the file and what to do."""
    from zmr.infra.state import StateMalformed, StateRefused, StateVersion

    path = tmp_path / "zmr" / "state.json"
    entry.save(path, _sample(entry))
    loaded = entry.load(path)
    assert loaded == (_sample(entry) if entry.shape is list else {"version": entry.version, **_sample(entry)})
    assert entry.load(tmp_path / "absent.json") is None

    def refused(data: bytes | None, kind: type[StateRefused], reason: str) -> None:
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(kind) as err:
            entry.load(path)
        assert err.value.message.startswith(f"{path}: cannot be read as {entry.what}: "), err.value.message
        assert reason in err.value.message and err.value.details, err.value.message

    if entry.version is not None:
        refused(json.dumps({**_sample(entry), "version": entry.version + 1}).encode(), StateVersion, f"this zmr reads version {entry.version}")
    refused(b'{"version": 1, "todo": [', StateMalformed, "not JSON")
    refused(b"[" * 100 + b"]" * 100, StateMalformed, "not JSON (nested more than 64 levels deep)")
    refused(b'"a string"', StateMalformed, f"not the {'list' if entry.shape is list else 'object'} zmr writes")
    with open(path, "wb") as handle:
        handle.truncate(entry.max_bytes + 1)  # sparse: never read
    refused(None, StateRefused, f"{entry.max_bytes + 1} bytes, more than the {entry.max_bytes} zmr writes")
    path.unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps(_sample(entry)))
    path.symlink_to(tmp_path / "elsewhere.json")
    refused(None, StateRefused, "a symbolic link")
    with pytest.raises(StateRefused):
        entry.save(path, _sample(entry))  # never written through a link
    assert json.loads((tmp_path / "elsewhere.json").read_text()) == _sample(entry)


def test_damaged_state_is_refused_by_every_command_with_the_same_message_and_its_advice_works(tmp_path, upstream):
    """A remembered --dir, an older zmr's export journal, a rebase's state, a merge's todo: too big or not JSON is exit 2
    naming the file (before: the pointer and the export journal were read without a limit, a bad pointer silently
    ignored, a bad todo.json an internal error); deleting the file as told lets the command run."""
    project, _ = _toy(tmp_path / "project", upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    state = state_dir(project.root)

    def refused(args: tuple[str, ...], path: Path, what: str, reason: str) -> str:
        result = zmr(*args, cwd=project.root)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert f"{path}: cannot be read as {what}: {reason}" in result.stderr, result.stderr
        return result.stderr

    pointer = state / "checkouts/toy/rollout"
    pointer.parent.mkdir(parents=True)
    pointer.write_text('{"path": "/p", "tok')
    told = refused(("checkout", "toy"), pointer, "a remembered --dir", "not JSON")
    assert f"delete {pointer}: zmr then uses work/<model>/<component>" in told
    pointer.unlink()
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0

    journal = state / "pending-removals/toy/rollout.json"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps(["0001-fixed-split.patch"] * 5000))
    told = refused(("export", "toy"), journal, "an older zmr's export journal", "130000 bytes, more than the 65536 zmr writes")
    assert f"delete {journal}: the files it names become untracked files of the series folder" in told
    journal.unlink()
    assert zmr("export", "toy", cwd=project.root).returncode == 0

    rebase = state / "rebase/toy/rollout/state.json"
    rebase.parent.mkdir(parents=True)
    with open(rebase, "wb") as handle:
        handle.truncate((16 << 20) + 1)
    told = refused(("rebase", "toy", "--abort"), rebase, "rebase state", f"{(16 << 20) + 1} bytes, more than the {16 << 20} zmr writes")
    assert f"or delete {rebase.parent} to forget it" in told
    import shutil

    shutil.rmtree(rebase.parent)

    from zmr.ops.checkout import open_checkout, snapshot
    from zmr.infra.state import MERGE_SAVED

    co = open_checkout(project.root / "work/toy/rollout")
    merge = co.git_dir / "zmr-merge"
    merge.mkdir()
    MERGE_SAVED.save(merge / "saved.json", snapshot(co, co.path, merge).to_json())  # what `checkout --merge` saves first
    (merge / "todo.json").write_text("{")
    refused(("checkout", "toy", "--continue"), merge / "todo.json", "the commits a merge has left", "not JSON")
    (merge / "todo.json").write_text(json.dumps({"todo": ["../../x"], "head": None, "replayed": 0}))
    told = refused(("checkout", "toy", "--continue"), merge / "todo.json", "the commits a merge has left", "not the commits left")
    assert "undo the merge with `zmr checkout toy -c rollout --abort`" in told
    assert zmr("checkout", "toy", "-c", "rollout", "--abort", cwd=project.root).returncode == 0 and not merge.exists()
    merge.mkdir()
    # A path read from state is checked: a saved checkout that is not the one the merge folder lies in is not restored.
    victim, seen = _victim_checkout(tmp_path, upstream)
    (merge / "saved.json").write_text(json.dumps({"path": str(victim), "existed": True, "token": "", "head": "HEAD", "refs": {}}))
    refused(("checkout", "toy", "--abort"), merge / "saved.json", "the saved checkout of a merge", f"it names {victim}, not the checkout it lies in")
    assert _seen(victim) == seen


def test_a_rebase_state_naming_a_file_outside_the_series_folder_is_refused(tmp_path):
    """saved.series_files are names inside the series folder (--abort writes each back there): `..` or an absolute name refuses the state."""
    from zmr.ops.rebase_state import RebaseState
    from zmr.infra.state import StateMalformed

    path = tmp_path / "state.json"
    for name in ("../../manifests/other.yaml", "/etc/passwd", "a/../../b"):
        data = _rebase_state(tmp_path / "work", {"existed": False})
        data["saved"]["series_files"] = ["series", name]
        path.write_text(json.dumps(data))
        with pytest.raises(StateMalformed, match=f"{path}: cannot be read as rebase state: damaged"):
            RebaseState.load(path)
    data["saved"]["series_files"] = ["series", "sub/0001-a.patch"]
    path.write_text(json.dumps(data))
    assert RebaseState.load(path).saved.series_files == ["series", "sub/0001-a.patch"]


def test_check_results_of_another_version_are_tested_again_and_damaged_ones_refused(tmp_path, upstream):
    """zmr.ops.checks' cache goes through zmr.infra.state too: another version is a cache miss (as before), a damaged file is refused."""
    from zmr.ops.checks import Check, Results
    from zmr.infra.errors import ZmrError
    from zmr.model.project import Project as ZmrProject
    from zmr.infra.state import CHECKS

    project, _ = _toy(tmp_path / "project", upstream)
    zp = ZmrProject.find(project.root)
    component = zp.manifests()[0].components["rollout"]
    check = Check("test", ())
    path = zp.state_path(CHECKS, model="toy", component="rollout", key=check.key)
    results = Results(zp, component, check)
    results.keep_replay("1" * 40, "s", "2" * 40)
    assert Results(zp, component, check).replayed("1" * 40, "s") == ("2" * 40, "")
    assert json.loads(path.read_text())["version"] == CHECKS.version
    path.write_text(json.dumps({"version": 99, "results": {"x": 1}}))
    assert Results(zp, component, check).replayed("1" * 40, "s") is None
    path.write_text("{")
    with pytest.raises(ZmrError, match=f"{path}: cannot be read as check results: not JSON"):
        Results(zp, component, check)


def _interrupted(project, name: str, phase: str, data: bytes) -> tuple[Path, Path]:
    """What a SIGKILL leaves of a transaction *name* that was writing manifests/toy.yaml: its staged copy and its journal in *phase*."""
    target = project.root / "manifests/toy.yaml"
    staged = target.with_name(".toy.yaml.0123456789ab.zmr-stage")
    staged.write_bytes(data)
    journal = state_dir(project.root) / "transactions" / f"{name}.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    record = {"version": 1, "phase": phase, "dirs": [], "files": [["manifests/toy.yaml", staged.name]], "remove": []}
    journal.write_text(json.dumps(record))
    return target, staged


def test_a_library_caller_that_opens_the_project_gets_interrupted_work_finished_or_undone_and_told_which(tmp_path, upstream, capsys):
    """zmr.ops.recovery.open_project does what every command does first (before: only the CLI did it, and printed it):
    a committed transaction is finished, an uncommitted one undone, and the report says which; nothing is printed.
    Project.find only locates the project (docs/reference.md §6.3): the journals stay for open_project."""
    from zmr.model.manifest import Policy
    from zmr.model.project import Project as ZmrProject
    from zmr.ops.recovery import open_project

    project, _ = _toy(tmp_path / "project", upstream)
    target = project.root / "manifests/toy.yaml"
    before = target.read_bytes()
    new = before.replace(b"model: toy", b"model: toy  # moved")
    _interrupted(project, "update/toy/rollout", "commit", new)
    assert ZmrProject.find(project.root).root == project.root.resolve()
    assert target.read_bytes() == before and (state_dir(project.root) / "transactions/update/toy/rollout.json").exists()

    assert open_project(project.root, Policy(untrusted=True)).report.recovered == []  # a pull request's CI writes nothing
    opened = open_project(project.root)
    assert opened.project.root == project.root.resolve()
    assert [(r.name, r.action) for r in opened.report.recovered] == [("update/toy/rollout", "finished")]
    assert opened.report.lines() == ["an interrupted zmr left a half-written change (update/toy/rollout): finished now"]
    assert target.read_bytes() == new and not opened.report.failed()

    _, staged = _interrupted(project, "import", "staging", b"half of a manifest")
    report = open_project(project.root).report
    assert [(r.name, r.action) for r in report.recovered] == [("import", "undone")]
    assert target.read_bytes() == new and not staged.exists()
    assert report.to_json()["recovered"] == [{"name": "import", "action": "undone", "message": report.lines()[0]}]
    assert open_project(project.root).report.recovered == []  # nothing left
    assert capsys.readouterr() == ("", "")


def test_an_older_zmr_s_export_journal_is_migrated_once_by_opening_and_honoured_through_zmr_legacy(tmp_path, upstream):
    """`.zmr/pending-removals/<model>-<component>.json`: moved into the state folder by the first open (a library caller's
    too), never again; export and rebase then read it through zmr.ops.legacy alone (tests/test_architecture.py)."""
    from zmr.ops import legacy
    from zmr.ops.recovery import open_project
    from zmr.infra.state import LEGACY_EXPORT_JOURNAL

    project, _ = _toy(tmp_path / "project", upstream)
    project.write(".zmr/pending-removals/toy-rollout.json", json.dumps(["0002-contiguous.patch", "../outside.patch"]))
    opened = open_project(project.root)
    assert opened.report.migrated == [
        f".zmr/ in the work tree is not read: zmr keeps its working state in {state_dir(project.root)} now;"
        " migrated: the export journal of toy/rollout; delete .zmr/ (what is left there is not used)"
    ]
    component = opened.project.manifests()[0].components["rollout"]
    assert opened.project.state_path(LEGACY_EXPORT_JOURNAL, model="toy", component="rollout").is_file()
    assert legacy.export_journal_names(opened.project, component) == {"0002-contiguous.patch"}  # a name leaving the series folder is not one
    project.write(".zmr/pending-removals/toy-rollout.json", json.dumps(["0001-fixed-split.patch"]))
    assert open_project(project.root).report.migrated == []  # once
    assert legacy.export_journal_names(opened.project, component) == {"0002-contiguous.patch"}
    legacy.forget_export_journal(opened.project, component)
    assert legacy.export_journal_names(opened.project, component) is None
    assert not (state_dir(project.root) / "pending-removals/toy").exists()  # its model's folder with it


def test_the_reference_names_where_every_state_file_lives():
    """docs/reference.md §8 (the state folder's table, §8.1/§8.2 for a merge's and a rebase's files) names each entry of zmr.infra.state.STATE_FILES."""
    from zmr.infra.state import STATE_FILES

    text = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text()
    section = text[text.index("## 8. Working state") : text.index("## 9. ")]
    missing = []
    for entry in STATE_FILES:
        shown = entry.where.format(name="<name>", model="<model>", component="<component>", key="<key>")
        shown = f".git/{shown}" if entry.base == "checkout" else shown
        folder, _, file = shown.rpartition("/")
        if f"`{shown}" not in section and not (folder and f"`{folder}/" in section and f"`{file}`" in section):
            missing.append(shown)
    assert missing == []
