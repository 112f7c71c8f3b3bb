"""The parsers of git's listings in zmr/infra/git.py (ls-tree, diff-tree --raw, cat-file --batch and --batch-check), on real git output.

The repository is made with fast-import, so that it holds names a working tree could not: a newline, bytes that
are not UTF-8, a submodule entry (gitlink) whose commit is not in the repository.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import git, make_upstream

from zmr.infra import git as zgit
from zmr.infra.git import GitObject, ObjectInfo, RawDiffEntry, TreeEntry

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
SUBMODULE = "1234567890abcdef1234567890abcdef12345678"  # a gitlink need not name an object of this repository
HELLO = b"hello\n"
BINARY = b"\0two\nlines\0"
NON_UTF8 = "caf\udce9.txt"  # b"caf\xe9.txt" as zmr decodes it (surrogateescape)


def _commit(mark: int, parent: int | None, message: str, changes: bytes) -> bytes:
    head = b"commit refs/heads/main\nmark :%d\ncommitter Dev <dev@example.invalid> 1700000000 +0000\ndata %d\n%s\n" % (mark, len(message), message.encode())
    return head + (b"from :%d\n" % parent if parent else b"") + changes + b"\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> zgit.Repo:
    """main~2: every kind of entry; main~1: changes of every kind; main: an empty commit."""
    path = tmp_path_factory.mktemp("parsers") / "repo.git"
    git("init", "-q", "--bare", str(path))
    blobs = b"".join(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data) for mark, data in ((1, HELLO), (2, BINARY), (3, b"a b/file with space.txt")))
    first = (
        b'M 100644 :1 "a b/file with space.txt"\n'
        b'M 100644 :2 "new\\nline"\n'
        b'M 100644 :1 "caf\\351.txt"\n'
        b"M 100755 :2 bin/run.sh\n"
        b"M 120000 :3 link\n"
        b"M 160000 " + SUBMODULE.encode() + b" sub\n"
    )
    second = (
        b'D "a b/file with space.txt"\n'
        b'M 100644 :1 "a b/moved.txt"\n'  # the same blob elsewhere: a rename for -M
        b'M 100644 :1 "new\\nline"\n'
        b'D "caf\\351.txt"\n'
        b"M 100644 :1 link\n"  # a symbolic link becomes a file
        b"M 160000 " + SUBMODULE[::-1].encode() + b" sub\n"
    )
    stream = blobs + _commit(10, None, "first", first) + _commit(11, 10, "second", second) + _commit(12, 11, "empty", b"") + b"done\n"
    git("fast-import", "--quiet", "--done", cwd=path, input=stream)
    return zgit.Repo(path)


def _rev(repo: zgit.Repo, rev: str) -> str:
    return repo.out(["rev-parse", rev])


# -- ls-tree -------------------------------------------------------------------------------------


def test_ls_tree_lists_every_kind_of_entry(repo):
    hello, binary, target = (_rev(repo, f"main~2:{name}") for name in ("a b/file with space.txt", "bin/run.sh", "link"))
    assert repo.ls_tree("main~2") == [
        TreeEntry("100644", "blob", hello, "a b/file with space.txt"),
        TreeEntry("100755", "blob", binary, "bin/run.sh"),
        TreeEntry("100644", "blob", hello, NON_UTF8),
        TreeEntry("120000", "blob", target, "link"),
        TreeEntry("100644", "blob", binary, "new\nline"),
        TreeEntry("160000", "commit", SUBMODULE, "sub"),
    ]
    assert [e.path_bytes for e in repo.ls_tree("main~2")][2] == b"caf\xe9.txt"  # git's bytes back


def test_ls_tree_long_gives_blob_sizes_and_none_for_a_submodule(repo):
    sizes = {e.path: e.size for e in repo.ls_tree("main~2", long=True)}
    assert sizes == {"a b/file with space.txt": 6, "bin/run.sh": len(BINARY), NON_UTF8: 6, "link": 23, "new\nline": len(BINARY), "sub": None}


def test_ls_tree_trees_only_lists_folders_and_submodules(repo):
    assert [(e.type, e.path) for e in repo.ls_tree("main~2", trees_only=True)] == [("tree", "a b"), ("tree", "bin"), ("commit", "sub")]


def test_ls_tree_paths_are_literal_and_an_entry_two_batches_list_comes_once(repo, monkeypatch):
    assert [e.path for e in repo.ls_tree("main~2", ["a b", "new\nline", "*"])] == ["a b/file with space.txt", "new\nline"]
    monkeypatch.setattr(zgit, "ARGUMENT_BUDGET", 1)  # one path a batch: a folder and the file in it in two ls-tree processes
    assert [e.path for e in repo.ls_tree("main~2", ["a b", "a b/file with space.txt", NON_UTF8])] == ["a b/file with space.txt", NON_UTF8]


def test_ls_tree_of_nothing(repo):
    assert repo.out(["hash-object", "-w", "-t", "tree", "--stdin"], input=b"") == EMPTY_TREE
    assert repo.ls_tree(EMPTY_TREE) == [] and repo.ls_tree("main", []) == [] and repo.ls_tree("main", ["absent"]) == []
    assert zgit.parse_ls_tree(b"") == []


@pytest.mark.parametrize("out", [b"100644 blob abc\0", b"100644 blob\tname\0", b"100644 blob abc 12 x\tname\0", b"100644 blob abc\t\0"])
def test_ls_tree_output_that_does_not_parse_is_refused(out):
    with pytest.raises(ValueError, match="ls-tree: unreadable entry"):
        zgit.parse_ls_tree(out)


# -- diff-tree --raw -----------------------------------------------------------------------------


def test_diff_tree_raw_of_commits(repo):
    first, second, empty = (_rev(repo, rev) for rev in ("main~2", "main~1", "main"))
    hello, binary, target = (_rev(repo, f"main~2:{name}") for name in ("a b/file with space.txt", "bin/run.sh", "link"))
    zero, absent = zgit.ZERO_OID, "000000"
    changes = repo.diff_tree_raw([first, second, empty])
    assert list(changes) == [second]  # a root commit and an empty one show nothing
    assert changes[second] == [
        RawDiffEntry("100644", absent, hello, zero, "D", "a b/file with space.txt"),
        RawDiffEntry("000000", "100644", zero, hello, "A", "a b/moved.txt"),
        RawDiffEntry("100644", absent, hello, zero, "D", NON_UTF8),
        RawDiffEntry("120000", "100644", target, hello, "T", "link"),
        RawDiffEntry("100644", "100644", binary, hello, "M", "new\nline"),
        RawDiffEntry("160000", "160000", SUBMODULE, SUBMODULE[::-1], "M", "sub"),
    ]
    assert [(c.old_entry, c.new_entry) for c in changes[second][:2]] == [(("100644", hello), None), (None, ("100644", hello))]
    assert changes[second][2].path_bytes == b"caf\xe9.txt"
    assert repo.diff_tree_raw([first, second, empty], always=True) == {first: [], second: changes[second], empty: []}


def test_diff_tree_raw_of_tree_pairs_equal_pairs_included(repo):
    t1, t2 = _rev(repo, "main~2^{tree}"), _rev(repo, "main~1^{tree}")
    pairs = [f"{t1} {t1}", f"{t1} {t2}", f"{t2} {t2}", f"{t2} {t1}", f"{t1} {t1}"]
    changes = repo.diff_tree_raw(pairs)
    assert list(changes) == pairs[:4]  # each line once, in git's order; an equal pair is its line alone
    assert changes[pairs[0]] == changes[pairs[2]] == []
    assert [c.path for c in changes[pairs[1]]] == ["a b/file with space.txt", "a b/moved.txt", NON_UTF8, "link", "new\nline", "sub"]
    assert [c.status for c in changes[pairs[3]]] == ["A", "D", "A", "T", "M", "M"]
    assert repo.diff_tree_raw([]) == {}


def _numstat(repo: zgit.Repo, old: str, new: str, *paths: str) -> list[tuple[str, int | None, int | None]]:
    """git's own counts (``diff-tree --numstat``), parsed here: what ``Repo.tree_diff`` counts from the diff must equal."""
    out = repo.run(["--literal-pathspecs", "diff-tree", "-r", "-z", "--numstat", "--no-renames", old, new, "--", *paths]).stdout
    counted = []
    for record in out.split(b"\0")[:-1]:
        ins, dels, path = record.split(b"\t", 2)
        counted.append((path.decode("utf-8", "surrogateescape"), None if ins == b"-" else int(ins), None if dels == b"-" else int(dels)))
    return counted


@pytest.mark.parametrize("paths", [None, ["a b/file with space.txt", "a b/moved.txt", NON_UTF8, "new\nline", "sub"]], ids=["a-typechange", "no-typechange"])
def test_tree_diff_counts_each_files_lines_as_numstat_and_gives_gits_diff(repo, paths):
    """Odd names, a binary file, a submodule; and a symbolic link that became a file (two diffs in the patch, so numstat counts it)."""
    changes, text = repo.tree_diff("main~2", "main~1", patch=True, paths=paths)
    assert changes == _numstat(repo, "main~2", "main~1", *(paths or []))
    assert ("new\nline", None, None) in changes and ("sub", 1, 1) in changes
    literal = ["--literal-pathspecs"] if paths else []
    assert text == repo.run([*literal, "diff-tree", "-r", "-p", "--no-renames", "main~2", "main~1", "--", *(paths or [])]).stdout.decode("utf-8", "replace")
    assert repo.tree_diff("main~2", "main~1", patch=False, paths=paths) == (changes, None)
    assert repo.tree_diff("main~1", "main", patch=True) == ([], "")


_LINES = st.sampled_from(["", "x", " x", "+x", "-x", "--- a/f", "+++ b/f", "@@ -1 +1 @@", "diff --git a/f b/f", "\\ No newline at end of file", "Binary files a/f and b/f differ"])


@settings(max_examples=30, deadline=None)
@given(versions=st.lists(st.tuples(st.lists(_LINES, max_size=8), st.booleans(), st.booleans()), min_size=4, max_size=4))
def test_tree_diff_counts_of_any_text_are_numstats(tmp_path_factory, versions):
    """Files whose lines look like a diff's own (headers, hunks, a binary notice), with or without a last newline, or
    binary: counted from the diff as numstat counts them."""
    path = tmp_path_factory.mktemp("counts") / "repo.git"
    git("init", "-q", "--bare", str(path))
    repo = zgit.Repo(path)
    trees = []
    for side in (versions[:2], versions[2:]):
        entries = []
        for k, (lines, newline, binary) in enumerate(side):
            data = ("\n".join(lines) + ("\n" if newline and lines else "")).encode() + (b"\0" if binary else b"")
            blob = git("hash-object", "-w", "--stdin", cwd=path, input=data)
            entries.append(f"100644 blob {blob}\tf{k}\n")
        trees.append(git("mktree", cwd=path, input="".join(entries).encode()))
    changes, _ = repo.tree_diff(*trees, patch=True)
    assert changes == _numstat(repo, *trees)


def test_parse_raw_diff_reads_renames_and_output_without_stdin(repo):
    out = repo.run(["diff-tree", "-r", "-z", "--raw", "-M", "--no-abbrev", "main~2", "main~1"]).stdout
    changes = zgit.parse_raw_diff(out)
    assert list(changes) == [""]  # no --stdin: no line to file them under
    renamed = [c for c in changes[""] if c.status.startswith("R")]
    assert [(c.status, c.old_path, c.path, c.old_entry == c.new_entry) for c in renamed] == [("R100", "a b/file with space.txt", "a b/moved.txt", True)]
    assert {c.path for c in changes[""]} == {"a b/moved.txt", NON_UTF8, "link", "new\nline", "sub"}
    assert zgit.parse_raw_diff(b"") == {}


@pytest.mark.parametrize(
    "out", [b":100644 100644 abc def\0name\0", b":100644 100644 abc def M\0", b"c1\0:100644 100644 a b R100\0only-one\0", b":100644 100644 a b R100\0only-one"]
)
def test_diff_tree_output_that_does_not_parse_is_refused(out):
    with pytest.raises(ValueError, match="diff-tree: unreadable record"):
        zgit.parse_raw_diff(out)


# -- cat-file --batch and --batch-check --------------------------------------------------------------


def test_cat_file_batch_reads_each_object_in_the_order_asked(repo):
    blob, tree, commit = _rev(repo, "main~2:bin/run.sh"), _rev(repo, "main~2^{tree}"), _rev(repo, "main~2")
    names = [blob, SUBMODULE, f"main~2:{NON_UTF8}", "main~2:a b/file with space.txt", tree, "main~2", blob]
    objects = repo.cat_file_batch(names)
    hello = _rev(repo, "main~2:a b/file with space.txt")
    assert objects[:4] == [GitObject(blob, "blob", len(BINARY), BINARY), None, GitObject(hello, "blob", 6, HELLO), GitObject(hello, "blob", 6, HELLO)]
    assert (objects[4].type, objects[4].content) == ("tree", repo.cat_file("tree", tree))  # type: ignore[union-attr]
    assert (objects[5].oid, objects[5].type, objects[5].content) == (commit, "commit", repo.cat_file("commit", commit))  # type: ignore[union-attr]
    assert objects[6] == objects[0]
    assert repo.cat_file_batch([]) == []


def test_object_infos(repo):
    blob = _rev(repo, "main~2:bin/run.sh")
    infos = repo.object_infos([blob, "main~2:absent", "main~2:a b", SUBMODULE, f"main~2:{NON_UTF8}"])
    assert infos[0] == ObjectInfo(blob, "blob", len(BINARY)) and infos[1] is None and infos[3] is None
    assert infos[2] is not None and infos[2].type == "tree" and infos[4] is not None and infos[4].size == 6
    assert repo.missing_objects([blob, SUBMODULE]) == [SUBMODULE] and repo.missing_objects([]) == []


def test_a_name_with_a_newline_is_refused_before_git_reads_it(repo):
    for ask in (repo.cat_file_batch, repo.object_infos):
        with pytest.raises(ValueError, match="newline"):
            ask(["main~2:new\nline"])


def test_cat_file_output_that_does_not_parse_is_refused(repo):
    out = repo.run(["cat-file", "--batch"], input=_rev(repo, "main~2:bin/run.sh").encode() + b"\n").stdout
    assert [o.content for o in zgit.parse_cat_file_batch(out) if o] == [BINARY]
    for bad, why in (
        (out[:-2], "fewer than"),
        (out[:20], "ends inside a header"),
        (b"abc blob x\n", "unreadable header"),
        (b"abc blob\n", "unreadable header"),
    ):
        with pytest.raises(ValueError, match=why):
            list(zgit.parse_cat_file_batch(bad))
    with pytest.raises(ValueError, match="unreadable header"):
        list(zgit.parse_cat_file_check(b"abc\n"))


def test_subtrees_reads_every_tree_and_skips_submodules(repo):
    tree = _rev(repo, "main~2^{tree}")
    assert [(path, raw) for path, raw in repo.subtrees(tree)] == [(p, repo.cat_file("tree", _rev(repo, f"{tree}:{p}"))) for p in ("", "a b", "bin")]


# -- the plumbing zmr's modules ask git.Repo for (no git argument lists outside zmr/infra/git.py) ---------------------


def _work_repo(path):
    """A repository with a work tree: main = a <- b <- c (c touches f), a side branch off a with a merge into main."""
    from conftest import make_upstream

    up = make_upstream(path, [{"f": "1\n"}, {"f": "2\n"}, {"f": "3\n", "g": "x\n"}])
    git("branch", "side", up.commits[0], cwd=path)
    return up


def test_repo_at_a_folder_asks_git_from_there(tmp_path):
    up = _work_repo(tmp_path / "w")
    (up.path / "sub").mkdir()
    repo = zgit.Repo.at(up.path / "sub")
    assert repo.toplevel() == str(up.path.resolve())
    assert repo.absolute_git_dir() == (up.path / ".git").resolve()
    assert repo.git_path("info/exclude") == (up.path / ".git/info/exclude").resolve()
    (up.path / ".gitignore").write_text("work/\n")
    assert repo.is_ignored("work/") and not repo.is_ignored("src/")
    outside = zgit.Repo.at(tmp_path)
    assert outside.toplevel() is None and outside.absolute_git_dir() is None and outside.git_path("info/exclude") is None


def test_config_get_set_and_all_values(tmp_path):
    up = _work_repo(tmp_path / "w")
    repo = zgit.Repo.discover(up.path)
    assert repo.config_get("zmr.partial") is None
    repo.config_set("zmr.partial", "yes")
    assert repo.config_get("zmr.partial") == "yes"
    assert repo.config_get("zmr.partial", bool_type=True) == "true"  # --bool spells it the one way
    assert repo.config_get("zmr.partial", local=True) == "yes"
    assert repo.config_get_all("remote.up.fetch") == []
    git("config", "--add", "remote.up.fetch", "+refs/heads/*:refs/remotes/up/*", cwd=up.path)
    git("config", "--add", "remote.up.fetch", "^refs/heads/tmp/*", cwd=up.path)
    assert repo.config_get_all("remote.up.fetch") == ["+refs/heads/*:refs/remotes/up/*", "^refs/heads/tmp/*"]


def test_history_questions(tmp_path):
    up = _work_repo(tmp_path / "w")
    a, b, c = up.commits
    repo = zgit.Repo.discover(up.path)
    assert repo.count(c, exclude=[a]) == 2 and repo.count(c) == 3 and repo.count(c, max_count=1) == 1
    assert repo.count(a, exclude=[c]) == 0
    assert repo.merge_base(c, "side") == a
    assert repo.parent(c) == b
    assert c in repo.commits_with_prefix(c[:7])
    assert repo.symbolic_full_name("main") == "refs/heads/main" and repo.symbolic_full_name("nothing") == ""
    assert repo.first_ref_containing(b, ["refs/heads/main"]) == "refs/heads/main"
    assert repo.first_ref_containing(b, ["refs/heads/side"]) == ""
    assert repo.first_parent_log(["main"], "%H %P").splitlines() == [f"{c} {b}", f"{b} {a}", f"{a} "]
    assert repo.range_diff(f"{a}..{b}", f"{a}..{c}") is not None


def test_blobs_and_refs_zmr_keeps_for_itself(tmp_path):
    repo = zgit.init_bare(tmp_path / "mirror.git")
    assert (tmp_path / "mirror.git/HEAD").is_file() and repo.git_dir == tmp_path / "mirror.git"
    assert repo.read_blob("refs/zmr/patch-ids/x") is None
    blob = repo.hash_blob(b"a 1\nb 2\n")
    repo.update_ref("refs/zmr/patch-ids/x", blob)
    assert repo.ref_value("refs/zmr/patch-ids/x") == blob
    assert repo.read_blob("refs/zmr/patch-ids/x") == b"a 1\nb 2\n"


def test_a_temporary_index_holds_what_it_is_given(tmp_path):
    up = _work_repo(tmp_path / "w")
    repo = zgit.Repo(up.path / ".git")
    env = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    tree = repo.tree_of(up.commits[2])
    repo.read_tree(tree, env=env)
    assert repo.write_tree(env=env) == tree
    repo.read_tree(None, env=env)
    assert repo.ls_files(["-s", "-z"], env=env).stdout == b""
    repo.update_index(repo.ls_tree_paths(tree, ["g"]), env=env)
    assert repo.ls_files(["-z"], env=env).stdout == b"g\0"
    patch = b"--- a/g\n+++ b/g\n@@ -1 +1 @@\n-x\n+y\n"
    assert repo.apply(["--cached", "--check"], input=patch, env=env).returncode == 0
    assert repo.apply(["--cached", "--check", "--reverse"], input=patch, env=env).returncode != 0


def test_worktrees_are_listed_in_both_forms_and_removed(tmp_path):
    up = _work_repo(tmp_path / "w")
    repo = zgit.Repo.discover(up.path)
    tree = tmp_path / "trees" / "one"
    repo.worktree_add(tree, up.commits[1])
    assert (tree / "f").read_text() == "2\n"
    for nul in (True, False):
        listed = repo.worktrees(nul=nul)
        assert [w["worktree"] for w in listed] == [str(up.path.resolve()), str(tree.resolve())]
        assert listed[0]["branch"] == "refs/heads/main" and "detached" in listed[1] and listed[1]["HEAD"] == up.commits[1]
    assert repo.worktree_remove(tree) and not tree.exists()
    assert not repo.worktree_remove(tree)  # nothing there any more: False, not an error
    repo.worktree_add(tree, up.commits[1])
    import shutil

    shutil.rmtree(tree)
    repo.worktree_prune()
    assert len(repo.worktrees()) == 1


def test_head_is_read_pointed_and_detached_through_repo_methods(tmp_path):
    """The plumbing the checkout package used to spell (symbolic-ref, update-ref --no-deref, rev-parse --show-toplevel) is git.Repo's (#49)."""
    work = tmp_path / "w"
    git("init", "-q", "-b", "main", str(work))
    (work / "sub").mkdir()
    (work / "f").write_text("x\n")
    git("add", "f", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "one", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work).strip()
    repo = zgit.Repo.at(work)
    assert repo.head_symref() == "refs/heads/main"
    repo.detach_head(first)
    assert repo.head_symref() is None and git("rev-parse", "HEAD", cwd=work).strip() == first
    git("branch", "other", first, cwd=work)
    repo.point_head("refs/heads/other")
    assert repo.head_symref() == "refs/heads/other"
    assert zgit.Repo.at(work / "sub").absolute_toplevel() == work.resolve()
    assert zgit.Repo.at(tmp_path).absolute_toplevel() is None


def test_a_run_with_progress_passes_the_progress_lines_and_keeps_the_rest_and_its_input_whole(tmp_path):
    """With a progress callback, git's progress lines go to it as they come; stdout, the other stderr lines and the exit
    status are those of a run without one, and an input larger than a pipe holds reaches git whole."""
    src, dst = make_upstream(tmp_path / "src").path, tmp_path / "dst.git"
    git("init", "-q", "--bare", str(dst))
    lines: list[str] = []
    fetched = zgit.run(["fetch", "--progress", src.as_uri(), "+refs/heads/*:refs/heads/*"], git_dir=dst, transport=True, progress=lines.append)
    assert fetched.returncode == 0 and any(" objects: " in line and "% (" in line for line in lines), lines
    assert b"% (" not in fetched.stderr and b"[new branch]" in fetched.stderr  # progress out of what is kept, the rest in it
    assert git("rev-parse", "main", cwd=dst).strip() == git("rev-parse", "main", cwd=src).strip()
    data = bytes(range(256)) * 4096  # 1 MiB: many pipe buffers
    args = ["hash-object", "--stdin"]
    assert zgit.run(args, input=data, progress=lines.append).stdout == zgit.run(args, input=data).stdout
    failed = zgit.run(["rev-parse", "--verify", "nothing"], cwd=src, check=False, progress=lines.append)
    assert failed.returncode == 128 and b"fatal" in failed.stderr


def test_an_interrupt_while_git_shows_progress_ends_the_run_at_once_though_a_child_of_git_holds_its_pipes(tmp_path):
    """A Ctrl-C (or the SIGTERM or SIGHUP zmr turns into one) while zmr reads a git's progress kills that git and returns
    at once, as `subprocess.run` does for the other git commands: a child of git that keeps the pipes open (a fetch's remote
    helper; here an alias's command, sleeping a minute) does not hold zmr. It used to wait for that child's end."""
    pid_file = tmp_path / "child.pid"

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGALRM, interrupt)
    start = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            zgit.run(["-c", f"alias.hang=!echo $$ > {pid_file}; exec sleep 60", "hang"], cwd=tmp_path, progress=lambda line: None)
        took = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        if pid_file.is_file():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert pid_file.is_file()  # the child was running when the interrupt came
    assert took < 10, took
