"""The replay machinery under rebase and checkout: a partial index, fast-import, git's formats read by zmr.

Every fast path is checked against the plain one it replaces, on real
repositories: same commit ids, same patches, same verdicts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import git, make_upstream
from zmr.infra import git as zgit
from zmr.model.patchfile import commit_diff, commit_diffs
from zmr.model.series import read_series
from zmr.model.manifest import Component
from zmr.ops.patchplan import plan_export
from zmr.ops.replay import Replayer, TempIndex, build_chain, chain_patch_ids, file_sets, files_unchanged, patch_file_sets, patch_ids, paths_fit

AUTHOR = {"GIT_AUTHOR_NAME": "Patch Author", "GIT_AUTHOR_EMAIL": "author@zmr.invalid"}


def series_from(upstream, base: str, steps: list[tuple[str, dict, dict]], folder: Path) -> list:
    """Commit *steps* (subject, files, author env) on *base* in a scratch clone; format-patch them into *folder*."""
    scratch = folder.parent / f"scratch-{folder.name}"
    git("clone", "-q", str(upstream.path), str(scratch))
    git("checkout", "-q", "--detach", base, cwd=scratch)
    for n, (subject, files, who) in enumerate(steps):
        for name, content in files.items():
            target = scratch / name
            if content is None:
                git("rm", "-q", "--", name, cwd=scratch)
            elif isinstance(content, tuple):  # ("mv", new name) or ("chmod", "+x")
                if content[0] == "mv":
                    git("mv", "--", name, content[1], cwd=scratch)
                else:
                    git("update-index", "--chmod=+x", "--", name, cwd=scratch)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
                git("add", "--", name, cwd=scratch)
        stamp = f"@{1_710_000_000 + 60 * n} +0530"
        git("commit", "-q", "-m", subject, cwd=scratch, env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp, **AUTHOR, **who})
    folder.mkdir(parents=True)
    git("format-patch", "-q", "-M", "--binary", "--zero-commit", "--full-index", "--no-signature", "-k", "-o", str(folder), f"{base}..HEAD", cwd=scratch)
    names = sorted(p.name for p in folder.glob("*.patch"))
    (folder / "series").write_text("".join(f"{n}\n" for n in names))
    return list(read_series(folder, "patches").patches)


def replay(repo: zgit.Repo, base: str, patches, paths) -> tuple[list[str], bool]:
    commits, sparse, _ = replay_moved(repo, base, patches, paths)
    return commits, sparse


def replay_moved(repo: zgit.Repo, base: str, patches, paths) -> tuple[list[str], bool, list[bool]]:
    """One patch at a time: the commits, whether the index stayed partial, and which patches applied at an offset."""
    with Replayer(repo, base, paths) as r:
        moved = []
        for patch in patches:
            ok, stderr = r.try_apply(patch, verbose=True)
            assert ok, stderr
            r.commit(patch)
            moved.append(r.moved)
        return list(r.commits), r.sparse, moved


@pytest.fixture
def rich_upstream(tmp_path):
    text = "".join(f"line {i}\n" for i in range(1, 61))
    return make_upstream(
        tmp_path / "upstream",
        [
            {"src/model.py": text, "src/kernels/matmul.py": "def matmul(a, b):\n    return a @ b\n", "setup.cfg": "[metadata]\n", "docs/guide.md": "guide\n", "lib/blob.bin": bytes(range(256)) * 4},
            {"README.md": "toy\n"},
        ],
    )


@pytest.mark.parametrize("tidied", [False, True], ids=["plain-identities", "identities-commit-tree-tidies"])
def test_partial_index_replay_writes_the_commits_commit_tree_writes(rich_upstream, tmp_path, tidied):
    """Edits, new folders, odd names, a rename, a mode change, a deletion, binary data, two hunks near each
    other, and (one run) identities commit-tree tidies ("Jr."): the fast replay gives the same commit ids."""
    up = rich_upstream
    base = up.commits[-1]
    text = up.file_at(base, "src/model.py") + "\n"
    steps = [
        ("Fix the split", {"src/model.py": text.replace("line 10\n", "line 10 fixed\n")}, {}),
        ("Add a kernel", {"new dir/kernel ü.py": "x = 1\n", '"quoted".py': "q\n"}, {"GIT_AUTHOR_NAME": "Jürgen Doe"}),
        ("Rename matmul", {"src/kernels/matmul.py": ("mv", "src/kernels/mm.py")}, {}),
        ("Make setup executable", {"setup.cfg": ("chmod", "+x")}, {"GIT_AUTHOR_EMAIL": "odd@zmr.invalid"}),
        ("Drop the guide", {"docs/guide.md": None}, {}),
        ("Patch the binary", {"lib/blob.bin": bytes(range(255, -1, -1)) * 4}, {}),
        ("Fix near the first fix", {"src/model.py": text.replace("line 10\n", "line 10 fixed\n").replace("line 14\n", "line 14 also\n")}, {}),
    ]
    patches = series_from(up, base, steps, tmp_path / "series")
    if tidied:
        # Mails say what they like; commit-tree drops the crud at the ends ("Jr." -> "Jr").
        for patch, line in ((patches[1], b'From: "J. Doe Jr." <author@zmr.invalid>'), (patches[3], b"From: Patch Author <odd.@zmr.invalid.>")):
            data = patch.path.read_bytes()
            start = data.index(b"\nFrom: ") + 1
            patch.path.write_bytes(data[:start] + line + data[data.index(b"\n", start) :])
        patches = list(read_series(tmp_path / "series", "patches").patches)
        assert (patches[1].author_name, patches[3].author_email) == ("J. Doe Jr.", "odd.@zmr.invalid.")
    repo = zgit.Repo(up.path / ".git")
    paths = sorted(set().union(*patch_file_sets(repo, patches)))
    assert {"src/kernels/matmul.py", "src/kernels/mm.py", "new dir/kernel ü.py", '"quoted".py', "docs/guide.md"} <= set(paths)
    fast, sparse = replay(repo, base, patches, paths)
    plain, plain_sparse = replay(repo, base, patches, None)
    assert (sparse, plain_sparse) == (True, False)
    assert fast == plain
    # build_chain also puts patches on disjoint files into one git apply: still the same commits.
    sets = patch_file_sets(repo, patches)
    assert sets is not None and sets[2] == {"src/kernels/matmul.py", "src/kernels/mm.py"} and sets[4] == {"docs/guide.md"}
    component = Component(model="toy", key="rollout", upstream=str(up.path), commit=base, branch="rollout/toy")
    assert build_chain(repo, component, base, patches) == plain
    # And both are what git am makes of the series (trees; am's committer differs).
    git("checkout", "-q", "--detach", base, cwd=up.path)
    git("am", "-q", *(str(p.path) for p in patches), cwd=up.path)
    assert git("rev-parse", "HEAD^{tree}", cwd=up.path) == git("rev-parse", f"{fast[-1]}^{{tree}}", cwd=up.path)
    assert not git("for-each-ref", "refs/zmr/replay", cwd=up.path)  # fast-import's scratch branch is gone


def test_a_patch_that_fails_on_the_partial_index_is_tried_on_the_full_one(rich_upstream, tmp_path):
    up = rich_upstream
    base = up.commits[-1]
    text = up.file_at(base, "src/model.py") + "\n"
    patches = series_from(up, base, [("Two files", {"src/model.py": text + "more\n", "README.md": "toy v2\n"}, {})], tmp_path / "series")
    repo = zgit.Repo(up.path / ".git")
    # Told too little (README.md missing): the partial index cannot take the patch, the full one can.
    with Replayer(repo, base, ["src/model.py"]) as r:
        assert r.sparse
        ok, _ = r.try_apply(patches[0])
        assert ok and not r.sparse
        r.commit(patches[0])
        assert r.commits == replay(repo, base, patches, None)[0]


def test_a_file_where_the_series_puts_a_folder_is_not_hidden_by_the_partial_index(tmp_path):
    up = make_upstream(tmp_path / "upstream", [{"README.md": "toy\n"}])
    old = up.commits[-1]
    patches = series_from(up, old, [("Add a plugin", {"plugins/fast.py": "x = 1\n"}, {})], tmp_path / "series")
    new = up.commit({"plugins": "now a file\n"}, "plugins becomes a file")
    repo = zgit.Repo(up.path / ".git")
    paths = sorted(set().union(*patch_file_sets(repo, patches)))
    assert paths == ["plugins/fast.py"]
    assert paths_fit(repo, old, paths) and not paths_fit(repo, new, paths)
    # The series' files did not change, but the series no longer fits: no pin-only shortcut ...
    assert not files_unchanged(repo, old, new, paths)
    # ... and the replay says it does not apply, as a full index does.
    with Replayer(repo, new, paths) as r:
        assert not r.sparse
        assert not r.try_apply(patches[0])[0]


def test_commit_diffs_split_one_diff_tree_run_exactly(rich_upstream, tmp_path):
    up = rich_upstream
    base = up.commits[-1]
    text = up.file_at(base, "src/model.py") + "\n"
    steps = [
        ("Binary", {"lib/blob.bin": bytes(range(255, -1, -1)) * 4}, {}),
        ("Text", {"src/model.py": text.replace("line 3\n", "line 3 x\n")}, {}),
        ("New", {"a/b.py": "\n".join("0123456789abcdef0123456789abcdef01234567" for _ in range(3)) + "\n"}, {}),
        ("Gone", {"docs/guide.md": None}, {}),
    ]
    patches = series_from(up, base, steps, tmp_path / "series")
    repo = zgit.Repo(up.path / ".git")
    chain, _ = replay(repo, base, patches, None)
    parents = [base, *chain[:-1]]
    assert commit_diffs(repo, chain) == {c: commit_diff(repo, p, c) for c, p in zip(chain, parents)}


def test_chain_patch_ids_are_kept_and_a_damaged_record_is_recomputed(rich_upstream, tmp_path):
    up = rich_upstream
    base = up.commits[-1]
    text = up.file_at(base, "src/model.py") + "\n"
    patches = series_from(up, base, [("One", {"src/model.py": text + "one\n"}, {}), ("Two", {"README.md": "two\n"}, {})], tmp_path / "series")
    repo = zgit.Repo(up.path / ".git")
    chain, _ = replay(repo, base, patches, None)
    expected = patch_ids(repo, chain)
    assert len(expected) == 2
    assert chain_patch_ids(repo, chain) == expected
    ref = f"refs/zmr/patch-ids/{chain[-1]}"
    assert repo.ref_value(ref)
    for damage in (b"garbage\n", f"{chain[0]} {expected[chain[0]]}\n".encode(), f"{chain[0]} nothex\n{chain[1]} {expected[chain[1]]}\n".encode()):
        blob = git("hash-object", "-w", "--stdin", cwd=up.path, input=damage)
        git("update-ref", ref, blob, cwd=up.path)
        assert chain_patch_ids(repo, chain) == expected
        assert git("cat-file", "blob", ref, cwd=up.path).encode() + b"\n" != damage  # replaced


def test_file_sets_name_every_path_each_commit_changes(rich_upstream, tmp_path):
    up = rich_upstream
    base = up.commits[-1]
    steps = [("Rename", {"src/kernels/matmul.py": ("mv", "src/kernels/m m.py")}, {}), ("Odd", {"tab\tname.py": "t\n"}, {})]
    patches = series_from(up, base, steps, tmp_path / "series")
    repo = zgit.Repo(up.path / ".git")
    chain, _ = replay(repo, base, patches, None)
    assert file_sets(repo, chain) == {chain[0]: frozenset({"src/kernels/matmul.py", "src/kernels/m m.py"}), chain[1]: frozenset({"tab\tname.py"})}


def test_plan_export_told_what_a_replay_did_plans_what_it_finds_out_itself(rich_upstream, tmp_path):
    up = rich_upstream
    old = up.commits[-1]
    text = up.file_at(old, "src/model.py") + "\n"
    steps = [("First", {"src/model.py": text.replace("line 20\n", "line 20 x\n")}, {}), ("Second", {"setup.cfg": "[metadata]\nname = toy\n"}, {})]
    folder = tmp_path / "series"
    patches = series_from(up, old, steps, folder)
    new = up.commit({"src/model.py": "header\n" + text}, "Move every line of model.py")
    repo = zgit.Repo(up.path / ".git")
    chain, _, moved = replay_moved(repo, new, patches, sorted(set().union(*patch_file_sets(repo, patches))))
    assert moved == [True, False]
    told = plan_export(repo, new, chain, folder, "patches", replayed={c: (p.name, m) for c, p, m in zip(chain, patches, moved)})
    found = plan_export(repo, new, chain, folder, "patches")
    shape = lambda plan: [(p.name, p.status, p.data) for p in plan.patches]  # noqa: E731
    assert shape(told) == shape(found)
    assert [p.status for p in told.patches] == ["refreshed", "unchanged"]


def test_index_entries_reads_what_ls_files_lists(rich_upstream, tmp_path):
    up = rich_upstream
    repo = zgit.Repo(up.path / ".git")
    with TempIndex(repo) as index:
        index.read_tree(up.commits[-1])
        git("update-index", "--chmod=+x", "--", "setup.cfg", cwd=up.path, env={"GIT_INDEX_FILE": index.env["GIT_INDEX_FILE"]})
        git("update-index", "--add", "--cacheinfo", "120000,e69de29bb2d1d6434b8b29ae775ad8c2e48c5391,link", cwd=up.path, env={"GIT_INDEX_FILE": index.env["GIT_INDEX_FILE"]})
        listed = git("ls-files", "-s", cwd=up.path, env={"GIT_INDEX_FILE": index.env["GIT_INDEX_FILE"]})
        expected = {line.split("\t", 1)[1].encode(): tuple(line.split("\t", 1)[0].split(" ")[:2]) for line in listed.splitlines()}
        assert index.entries() == expected
        # Version 4 (prefix-compressed) is left to git.
        git("update-index", "--index-version", "4", cwd=up.path, env={"GIT_INDEX_FILE": index.env["GIT_INDEX_FILE"]})
        with pytest.raises(ValueError):
            zgit.index_entries(index.env["GIT_INDEX_FILE"])
        assert index.entries() == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_index_entries_never_misreads_damage(tmp_path, data):
    """Random bytes after a valid header are an error or a well-formed answer, never a crash of another kind."""
    path = tmp_path / "index"
    path.write_bytes(b"DIRC\x00\x00\x00\x02" + data)
    try:
        entries = zgit.index_entries(path)
    except ValueError:
        return
    assert all(len(oid) == 40 and mode.isdigit() for mode, oid in entries.values())


def test_fast_import_leaves_no_ref(rich_upstream):
    repo = zgit.Repo(rich_upstream.path / ".git")
    base = rich_upstream.commits[-1]
    stream = f"commit refs/zmr/replay\nmark :1\ncommitter z <z@z.invalid> 0 +0000\ndata 0\nfrom {base}\nD README.md\n\nreset refs/zmr/replay\n\ndone\n".encode()
    marks = repo.fast_import(stream)
    assert set(marks) == {":1"} and repo.ref_value("refs/zmr/replay") is None
    assert git("ls-tree", "--name-only", marks[":1"], "--", "README.md", cwd=rich_upstream.path) == ""
    assert os.path.isdir(rich_upstream.path / ".git")


def test_history_fetches_keep_a_commit_graph_and_a_kept_chain_is_found_by_counting(rich_upstream, tmp_path):
    from zmr.infra.cache import Cache, resolve_upstream
    from zmr.ops.replay import kept_chain

    up = rich_upstream
    cache = Cache(tmp_path / "cache")
    url = resolve_upstream(str(up.path), Path("/"))
    mirror = cache.ensure(url, [up.commits[0]])
    assert (mirror.path / "shallow").exists()  # a pin alone comes shallow: no graph is possible there
    mirror, head = cache.fetch_ref(url, "main")
    assert head == up.commits[-1] and not (mirror.path / "shallow").exists()
    graph = mirror.path / "objects/info"
    assert (graph / "commit-graph").is_file() or any((graph / "commit-graphs").glob("*.graph"))
    # A chain dated long before its base is still found, and exactly.
    text = up.file_at(up.commits[-1], "src/model.py") + "\n"
    patches = series_from(up, up.commits[-1], [("Old date", {"src/model.py": text + "x\n"}, {}), ("Older", {"README.md": "y\n"}, {})], tmp_path / "series")
    component = Component(model="toy", key="rollout", upstream=str(up.path), commit=up.commits[-1], branch="rollout/toy")
    chain = build_chain(mirror.repo, component, up.commits[-1], patches)
    assert kept_chain(mirror.repo, up.commits[-1], patches) == chain
    assert kept_chain(mirror.repo, up.commits[0], patches) is None


def test_patches_on_disjoint_files_applied_together_commit_what_one_by_one_commits(rich_upstream, tmp_path):
    up = rich_upstream
    old = up.commits[-1]
    text = up.file_at(old, "src/model.py") + "\n"
    steps = [
        ("Model", {"src/model.py": text.replace("line 30\n", "line 30 x\n")}, {}),
        ("Matmul", {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, {}),
        ("Quoted name", {'we"ird.py': "w\n"}, {}),
        ("Setup", {"setup.cfg": "[metadata]\nname = toy\n"}, {}),
    ]
    patches = series_from(up, old, steps, tmp_path / "series")
    new = up.commit({"src/model.py": "# header\n" + text}, "Move model.py down a line")
    repo = zgit.Repo(up.path / ".git")
    chain, _ = replay(repo, old, patches, None)
    files = [file_sets(repo, chain)[c] for c in chain]
    paths = sorted(set().union(*files))
    expected, _, flags = replay_moved(repo, new, patches, paths)
    assert flags == [True, False, False, False]
    with Replayer(repo, new, paths) as together:
        assert together.apply_together(patches, files) == flags
        for patch, names in zip(patches, files):
            assert together.changed(names)
            together.commit(patch, names)
        assert together.commits == expected
    # One patch that does not apply: none is applied, and one by one still works from the same index.
    broken = patches[1].path.read_bytes().replace(b"-    return a @ b", b"-    return a @ c")
    (tmp_path / "broken.patch").write_bytes(broken)
    bad = read_series_patch(tmp_path / "broken.patch")
    with Replayer(repo, new, paths) as together:
        assert together.apply_together([patches[0], bad], files[:2]) is None
        assert not together.changed()
        for patch in patches:
            assert together.try_apply(patch)[0]
            together.commit(patch)
        assert together.commits == expected


def read_series_patch(path: Path):
    from zmr.model.series import load_patch

    return load_patch(path, path.name, 1, path.name)


def test_moved_flags_are_unknown_where_git_names_a_file_zmr_cannot_place():
    from zmr.ops.replay import _moved_by_patch

    files = [frozenset({"a.py"}), frozenset({"b c.py"})]
    plain = b"Checking patch a.py...\nHunk #1 succeeded at 12 (offset 2 lines).\nChecking patch b c.py...\nApplied patch a.py cleanly.\n"
    assert _moved_by_patch(plain, files) == [True, False]
    quoted = b'Checking patch a.py...\nChecking patch "b\\tc.py"...\nHunk #1 succeeded at 3 (offset 1 line).\n'
    assert _moved_by_patch(quoted, files) == [None, None]


def test_patch_file_sets_tell_patches_apart_at_any_strip_level(rich_upstream, tmp_path):
    up = rich_upstream
    base = up.commits[-1]
    steps = [("Rename", {"src/kernels/matmul.py": ("mv", "src/kernels/mm.py")}, {}), ("Two", {"README.md": "a\n", "docs/guide.md": "b\n"}, {}), ("Binary", {"lib/blob.bin": b"\0" * 9}, {})]
    patches = series_from(up, base, steps, tmp_path / "series")
    repo = zgit.Repo(up.path / ".git")
    expected = [frozenset({"src/kernels/matmul.py", "src/kernels/mm.py"}), frozenset({"README.md", "docs/guide.md"}), frozenset({"lib/blob.bin"})]
    assert patch_file_sets(repo, patches) == expected
    # The same patches with one more leading folder, read with -p2.
    deeper = []
    for patch in patches:
        data = patch.path.read_bytes()
        pairs = ((b" a/", b" a/x/"), (b" b/", b" b/x/"), (b"--- a/", b"--- a/x/"), (b"+++ b/", b"+++ b/x/"), (b"rename from ", b"rename from x/"), (b"rename to ", b"rename to x/"))
        for old, new in pairs:
            data = data.replace(old, new)
        target = tmp_path / f"p2-{patch.name}"
        target.write_bytes(data)
        from zmr.model.series import load_patch

        deeper.append(load_patch(target, target.name, 2, target.name))
    assert patch_file_sets(repo, [deeper[0], patches[1], deeper[2]]) == expected


def test_the_replay_driver_says_what_it_did_with_each_patch_and_batches_change_nothing(rich_upstream, tmp_path):
    """Replayer.replay: applied / empty / failed / skipped, the same steps and commits with batches or without."""
    up = rich_upstream
    base = up.commits[-1]
    text = up.file_at(base, "src/model.py") + "\n"
    steps = [
        ("Model", {"src/model.py": text.replace("line 30\n", "line 30 x\n")}, {}),
        ("Matmul", {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, {}),
        ("Guide executable", {"docs/guide.md": ("chmod", "+x")}, {}),
        ("Setup", {"setup.cfg": "[metadata]\nname = toy\n"}, {}),
        ("Readme", {"README.md": "toy v2\n"}, {}),
    ]
    patches = series_from(up, base, steps, tmp_path / "series")
    # Upstream made the guide executable too (the patch applies and changes nothing) and reworked setup.cfg (it fails).
    git("update-index", "--chmod=+x", "--", "docs/guide.md", cwd=up.path)
    new = up.commit({"setup.cfg": "[options]\n"}, "Upstream moves on")
    repo = zgit.Repo(up.path / ".git")
    files = patch_file_sets(repo, patches)
    assert files is not None
    paths = sorted(set().union(*files))
    with Replayer(repo, new, paths) as r:
        assert r.apply_together(patches[:3], files[:3]) is not None  # the first three go in one git apply
    runs = {}
    for batched in (True, False):
        with Replayer(repo, new, paths) as r:
            got = [(s.index, s.status, s.moved) for s in r.replay(patches, files if batched else None, skip={4}, offsets=True)]
            runs[batched] = (got, list(r.commits))
    assert runs[True] == runs[False]
    assert [(i, status) for i, status, _ in runs[True][0]] == [(0, "applied"), (1, "applied"), (2, "empty"), (3, "failed"), (4, "skipped")]
    assert runs[True][1] == replay(repo, new, patches[:2], None)[0]  # the commits of the two that applied
    # keep_empty: the empty patch is committed too (a chain has one commit per patch).
    with Replayer(repo, new, paths) as r:
        kept = [s.status for s in r.replay(patches[:3], files[:3], keep_empty=True)]
        assert kept == ["applied"] * 3 and len(r.commits) == 3


def test_trial_pick_merges_3_way_drops_a_pick_that_changes_nothing_and_stops_at_a_conflict(tmp_path):
    from zmr.ops.replay import trial_pick

    text = "".join(f"line {i}\n" for i in range(1, 21))
    up = make_upstream(tmp_path / "upstream", [{"a.txt": text, "b.txt": "b\n", "c.txt": "c\n"}])
    base = up.commits[0]
    steps = [
        ("Edit a", {"a.txt": text.replace("line 10\n", "line 10 (ours)\n")}, {}),
        ("Fix b", {"b.txt": "b (fixed)\n"}, {}),
        ("Edit c", {"c.txt": "c (ours)\n"}, {}),
    ]
    patches = series_from(up, base, steps, tmp_path / "series")
    # Upstream edits a line of patch a's context (a plain apply fails there), takes patch b as it is, and changes c its own way.
    new = up.commit({"a.txt": text.replace("line 12\n", "line 12 (theirs)\n"), "b.txt": "b (fixed)\n", "c.txt": "c (theirs)\n"}, "upstream")
    repo = zgit.Repo(up.path / ".git")
    component = Component(model="toy", key="rollout", upstream=str(up.path), commit=base, branch="rollout/toy")
    chain = build_chain(repo, component, base, patches)
    with Replayer(repo, new, None) as r:
        assert not r.try_apply(patches[0])[0]  # only the 3-way apply takes it

    picks = trial_pick(repo, new, patches, chain, 0)
    assert [j for _, j in picks.made] == [0] and picks.tip == picks.made[0][0]
    assert (picks.empty, picks.conflict, picks.files) == ([1], 2, ["c.txt"])
    assert git("rev-parse", f"{picks.tip}^", cwd=up.path) == new
    assert git("log", "-1", "--format=%s|%an", picks.tip, cwd=up.path) == "Edit a|Patch Author"
    assert up.file_at(picks.tip, "a.txt") == text.replace("line 10\n", "line 10 (ours)\n").replace("line 12\n", "line 12 (theirs)\n").rstrip("\n")

    # From a later start, and without the conflicting patch: every pick goes in, nothing conflicts.
    rest = trial_pick(repo, new, patches[:2], chain[:2], 1)
    assert (rest.tip, rest.made, rest.empty, rest.conflict, rest.files) == (new, [], [1], None, [])
