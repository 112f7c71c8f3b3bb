"""One answer per patch (issue #47, points 2, 3, 5 and 11): landed, partially landed with what is left, or not landed,
decided by zmr/ops/landed.py on the tree and used alike by update, rebase, upstreamed, bisect and diff.

Real upstream histories in temporary folders; the CLI runs in-process (``zmr.cli.main``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import git, make_patch, simple_model, state_dir
from test_update import grow

BACKPORT = "0002-scale-line-20.patch"


@pytest.fixture
def cli(capsys, monkeypatch):
    """The real CLI, in this process: (exit status, stdout, stderr) of ``zmr ARGS`` run in *cwd*."""
    from zmr.cli import main

    def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def backport_model(project, upstream, more: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """simple_model (0001: line 10) plus a backport (0002: line 20) of an upstream commit that upstream re-wraps, then rewrites.

    Upstream, after the pin: the backported commit (3; with the files *more* too: the backport takes part of it, so no
    patch-id matches), a reformat that wraps and re-indents the lines around it (8), a rewrite of the backported line
    (12, "two" becomes "2"), and a rework of line 10 that blocks 0001 (20).
    """
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    scaled = model_py.replace("line 20\n", "line 20 scaled by two\n")
    wrapped = scaled.replace("line 19\n", "    line 19\n").replace("line 20 scaled by two\n", "line 20 scaled\n        by two\n")
    special = {
        3: ({"src/model.py": scaled, **(more or {})}, "Scale line 20 by two"),
        8: ({"src/model.py": wrapped}, "Reformat the model (wrap long lines)"),
        12: ({"src/model.py": wrapped.replace("by two\n", "by 2\n")}, "Spell numbers as digits"),
        20: ({"src/model.py": wrapped.replace("by two\n", "by 2\n").replace("line 10\n", "line 10 upstream\n")}, "Rework line 10"),
    }
    # The backport is made on the pin before upstream's commit exists: its id is known only after; write it in afterwards.
    made = grow(upstream, 30, special=special)
    patch = make_patch(upstream, pin, {"src/model.py": scaled}, "Scale line 20 by two", f"Upstream-Status: backport {made[3]}")
    patch = patch.replace(b"From: Patch Author <author@zmr.invalid>", b"From: Upstream Contributor <contributor@upstream.invalid>")
    folder = project.root / "patches/toy/rollout"
    (folder / BACKPORT).write_bytes(patch)
    (folder / "series").write_text(f"0001-fixed-split.patch\n0002-contiguous.patch\n{BACKPORT}\n")
    project.commit_all("add a backport")
    return pin, made


def test_a_landed_backport_never_blocks_the_move_and_has_one_answer(project, upstream, cli, tmp_path):
    """#47.2: the backport, re-wrapped then rewritten upstream, is dropped (the commit it backports is below the new pin);
    the move goes to the commit before the one that really blocks; text, JSON and markdown say one thing of it."""
    pin, made = backport_model(project, upstream)
    report = tmp_path / "report.md"
    code, out, err = cli("update", "toy", "--json", "--report", str(report), cwd=project.root)
    assert code == 0, err
    [data] = json.loads(out)["components"]
    assert (data["status"], data["target"]) == ("partial", made[19])  # not held at the reformat (8) nor the rewrite (12)
    blocked = data["blocked_by"]
    assert (blocked["commit"], blocked["patch"]) == (made[20], "0001-fixed-split.patch")
    assert (blocked["author_name"], blocked["author_email"]) == ("Patch Author", "author@zmr.invalid")  # the series' patch, its author
    [dropped] = data["dropped"]
    assert (dropped["name"], dropped["method"], dropped["upstream"], dropped["via"]) == (BACKPORT, "backport", made[3], [made[3]])
    assert dropped["landed"] == f"landed (backport of {made[3][:12]})"
    assert BACKPORT not in data["partially_landed"] and BACKPORT not in data["droppable"]
    markdown = report.read_text()
    assert markdown.count(BACKPORT) == 2, markdown  # once under "Dropped", once in the upstream status table
    assert "Partially landed" not in markdown
    code, text, err = cli("update", "toy", cwd=project.root)
    assert code == 0, err
    assert text.count(f"drops {BACKPORT}") == 1 and f"keeps {BACKPORT}" not in text
    assert "Upstream Contributor" not in text + markdown


def test_a_backport_that_still_blocks_names_who_brought_it_into_the_series(project, upstream, cli):
    """#47.2: a backport whose commit is not below the blocking commit blocks; the weekly job must not mention the upstream
    contributor of the backported commit (its From:) but the one who added the patch to the series."""
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    project.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {pin}\n    track: main\n")
    made = grow(upstream, 6, special={2: ({"src/model.py": model_py.replace("line 21\n", "line 21 reworked\n")}, "Rework line 21")})
    patch = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 20\n", "line 20 scaled\n")}, "Scale line 20", "Upstream-Status: backport 1234567")
    patch = patch.replace(b"From: Patch Author <author@zmr.invalid>", b"From: Upstream Contributor <contributor@upstream.invalid>")
    project.series("toy", "rollout", [("0001-scale.patch", patch)])
    git("add", "-A", cwd=project.root)
    git("commit", "-q", "-m", "backport the scaling", cwd=project.root, env={"GIT_AUTHOR_NAME": "Series Maintainer", "GIT_AUTHOR_EMAIL": "maint@team.invalid"})
    code, out, err = cli("update", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [data] = json.loads(out)["components"]
    blocked = data["blocked_by"]
    assert (blocked["commit"], blocked["patch"]) == (made[2], "0001-scale.patch")
    assert (blocked["author_name"], blocked["author_email"]) == ("Series Maintainer", "maint@team.invalid")


def test_rebase_in_a_checkout_drops_a_landed_patch_as_upstream_not_as_skipped(project, upstream, cli):
    """#47.2: past a real conflict, the rebase's cherry-pick of the landed backport conflicts; it is dropped as upstream, without a stop."""
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin, made = backport_model(project, upstream)
    assert cli("checkout", "toy", cwd=project.root)[0] == 0
    code, out, err = cli("rebase", "toy", "--onto", made[20], cwd=project.root)
    assert code == 1 and "0001-fixed-split.patch" in err and "conflicts with upstream" in err
    co = project.root / "work/toy/rollout"
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S))
    git("add", "src/model.py", cwd=co)
    code, out, err = cli("rebase", "toy", "--continue", "--json", cwd=project.root)
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "done"
    [dropped] = result["dropped"]
    assert (dropped["name"], dropped["method"], dropped["upstream"]) == (BACKPORT, "backport", made[3])
    folder = project.root / "patches/toy/rollout"
    assert (folder / "series").read_text() == "0001-fixed-split.patch\n0002-contiguous.patch\n"


def test_a_change_landed_wrapped_over_lines_is_dropped_naming_its_commit(project, upstream, cli):
    """#47.3: the same tokens over other lines, upstream adding around them: landed, via the commit that brought it."""
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    wrapped = model_py.replace("line 10\n", "line 10 (\n    fixed\n        split, checked\n)\n").replace("line 11\n", "    line 11\n")
    made = grow(upstream, 6, special={2: ({"src/model.py": wrapped}, "Fix the split (black-formatted)")})
    code, out, err = cli("upstreamed", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [found] = json.loads(out)["components"]
    [landed] = found["upstreamed"]
    assert (landed["name"], landed["method"], landed["upstream_commit"]) == ("0001-fixed-split.patch", "landed", made[2])
    assert landed["via"] == [made[2]] and found["conflicts"] == []


def test_a_line_upstream_added_in_another_function_is_not_the_patch_landing(project, upstream, cli):
    """#47.11: upstream adds the patch's line elsewhere and reworks the patch's context: a conflict, never a drop."""
    source = "def f(x):\n    y = x + 1\n    return y\n# --\ndef g(x):\n    z = x * 2\n    return z\n"
    at_pin = upstream.commit({"src/ops.py": source}, "Add ops")
    patch = make_patch(upstream, at_pin, {"src/ops.py": source.replace("    y = x + 1\n", "    y = x + 1\n    check(y)\n")}, "Check y in f")
    project.series("toy", "rollout", [("0001-check.patch", patch)])
    project.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {at_pin}\n    track: main\n")
    project.commit_all("add model")
    elsewhere = source.replace("    y = x + 1\n", "    y = x + 1  # the sum\n").replace("    z = x * 2\n", "    z = x * 2\n    check(y)\n")
    made = grow(upstream, 3, special={1: ({"src/ops.py": elsewhere}, "Check in g; comment f")})
    code, out, err = cli("upstreamed", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [found] = json.loads(out)["components"]
    assert found["upstreamed"] == [] and found["conflicts"] == ["0001-check.patch"]
    code, out, err = cli("update", "toy", "--json", cwd=project.root)
    [data] = json.loads(out)["components"]
    assert data["dropped"] == [] and data["blocked_by"]["commit"] == made[1] and data["blocked_by"]["patch"] == "0001-check.patch"


# -- the property: never drop what upstream does not have ---------------------------------------------

WORDS = [
    "x = f(a)", "y = g(b, c)", "return x", "if a:", "pass", "z = h(x, y)", "print(z)", "w = [1, 2]",
    "del w", "k += 1", "check(y)", "u = v.t()", "s = sum(w)", "assert s", "q = x @ y", "log(q, s)",
]  # fmt: skip


def _lines(data) -> list[str]:
    return data.draw(st.lists(st.sampled_from(WORDS), min_size=4, max_size=9, unique=True))


def _edit(data, lines: list[str]) -> list[str]:
    """*lines* with a few random edits: replace, insert, delete."""
    out = list(lines)
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        at = data.draw(st.integers(0, max(0, len(out) - 1)))
        if kind == "insert":
            out.insert(at, data.draw(st.sampled_from(WORDS)))
        elif out and kind == "replace":
            out[at] = data.draw(st.sampled_from(WORDS))
        elif len(out) > 1:
            del out[at]
    return out


def _rewrap(data, lines: list[str]) -> list[str]:
    """The same tokens over other lines and indentation."""
    out: list[str] = []
    for line in lines:
        if " " in line and data.draw(st.booleans()):
            head, _, tail = line.partition(" ")
            out += [head, "    " + tail]
        else:
            out.append(("  " if data.draw(st.booleans()) else "") + line)
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    path = tmp_path_factory.mktemp("property") / "repo.git"
    git("init", "-q", "--bare", str(path))
    return path


def _commit(repo: Path, text: str, parent: str | None) -> str:
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input=text.encode())
    tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tm.py\n".encode())
    env = {"GIT_AUTHOR_DATE": "@1700000000 +0000", "GIT_COMMITTER_DATE": "@1700000000 +0000"}
    return git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", "c", cwd=repo, env=env)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_whenever_a_patch_is_dropped_as_landed_a_three_way_apply_changes_nothing(scratch, tmp_path, data):
    """#47.11, as a property: over random files, patches and upstream moves (some taking the patch's change, re-wrapped,
    some another change or the same line elsewhere), zmr's answer "landed" implies that ``git apply --3way`` of the
    patch onto the new pin, where it goes in, changes nothing; and a patch that applies and changes the tree is never landed."""
    from zmr.infra import git as zgit
    from zmr.model.series import load_patch
    from zmr.ops.upstream import replay_onto

    base = _lines(data)
    mine = _edit(data, base)
    if mine == base:
        return
    added = [line for line in mine if line not in base]
    how = data.draw(st.sampled_from(["took", "took and more", "the same line elsewhere", "another change"]))
    if how == "took":
        theirs = _rewrap(data, mine)
    elif how == "took and more":
        theirs = _edit(data, _rewrap(data, mine))
    elif how == "the same line elsewhere" and added:
        theirs = list(base)
        theirs.insert(data.draw(st.integers(0, len(theirs))), data.draw(st.sampled_from(added)))
        theirs = _edit(data, theirs)
    else:
        theirs = _edit(data, base)
    pin = _commit(scratch, "\n".join(base) + "\n", None)
    patched = _commit(scratch, "\n".join(mine) + "\n", pin)
    new = _commit(scratch, "\n".join(theirs) + "\n", pin)
    diff = subprocess.run(["git", "diff", "--full-index", pin, patched], cwd=scratch, capture_output=True, check=True).stdout
    path = tmp_path / "p.patch"
    path.write_bytes(b"Subject: p\n\n---\n" + diff)
    patch = load_patch(path, "p.patch", 1, "p.patch")
    repo = zgit.Repo(scratch)
    dropped = replay_onto(repo, pin, new, [patch], [patched], {patched: frozenset({"m.py"})}, [None], name_upstream=False).dropped
    env = {"GIT_INDEX_FILE": str(tmp_path / "index"), "GIT_DIR": str(scratch)}
    git("read-tree", new, cwd=tmp_path, env=env)
    proc = subprocess.run(
        ["git", "--git-dir", str(scratch), "apply", "--cached", "--3way", str(path)], cwd=tmp_path, env={**os.environ, **env}, capture_output=True
    )
    changed = proc.returncode == 0 and git("write-tree", cwd=tmp_path, env=env) != git("rev-parse", f"{new}^{{tree}}", cwd=tmp_path, env=env)
    if dropped:
        assert not changed, (base, mine, theirs)


# -- zmr bisect: counts that agree, skips kept -----------------------------------------------------------


def test_bisect_counts_truthfully_and_keeps_where_the_series_does_not_replay(project, upstream, cli, tmp_path):
    """#47.5: text and JSON give the same counts; where the series does not replay is kept in the state folder, so a
    re-run reuses every answer (nothing replayed, nothing run)."""
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    special = {
        8: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10"),  # the series conflicts from here ...
        15: ({"BROKEN": "x\n"}, "Break the release"),
        22: ({"src/model.py": model_py}, "Revert the rework of line 10"),  # ... to here
    }
    made = grow(upstream, 30, special=special)
    check = 'echo "$ZMR_UPSTREAM_COMMIT" >> "$COUNTER"; [ ! -e BROKEN ]'
    env = {"COUNTER": str(tmp_path / "runs")}
    args = ("bisect", "toy", "--good", made[0], "--bad", made[-1], "--test", check)
    code, out, err = cli(*args, "--json", cwd=project.root, env=env)
    assert code == 0, err
    first = json.loads(out)
    aside = [t for t in first["tried"] if t["tree"] is None and t["verdict"] == "skip"]
    assert aside and first["not_replayed"] == len(aside) and first["cached"] == 0
    assert first["tests"] == len((tmp_path / "runs").read_text().split())
    # Again, as text: the counts are the JSON's; every answer is reused, the skips too.
    code, text, err = cli(*args, cwd=project.root, env=env)
    assert code == 0, err
    tried = len(first["tried"])
    assert f"(0 checks run, {tried} reused, {len(aside)} set aside (the series does not replay onto them), for {first['candidates']} commits between)" in text
    code, out, err = cli(*args, "--json", cwd=project.root, env=env)
    again = json.loads(out)
    assert (again["tests"], again["cached"], again["not_replayed"]) == (0, tried, len(aside))
    assert all(t["cached"] for t in again["tried"]) and again["skipped"] == first["skipped"]
    assert first["tests"] == len((tmp_path / "runs").read_text().split())  # nothing ran again
    [kept] = (state_dir(project.root) / "checks/toy/rollout").glob("*.json")
    assert sum(":replay:" in key for key in json.loads(kept.read_text())["results"]) >= len(aside)


def test_a_landed_patch_in_a_file_upstream_then_renamed_is_dropped_by_every_command(project, upstream, cli):
    """#47.2/#47.11 on verl's history (``e2e_sft.yml`` → ``e2e_sft_llm.yml``): upstream takes 0001's change, then renames
    its file. ``rebase --onto`` (git's cherry-pick follows the rename) drops it as landed; update, its trials and
    upstreamed must give the same answer, not a conflict at the rename that holds the pin back."""
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    taken = model_py.replace("line 10\n", "line 10 fixed split\n")
    special = {
        2: ({"src/model.py": taken}, "Use a fixed split size"),
        5: ({"src/model.py": None, "src/net.py": taken, "docs/renamed.md": "model.py is net.py now\n"}, "Rename model.py to net.py"),
    }
    made = grow(upstream, 9, special=special)
    code, out, err = cli("update", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [data] = json.loads(out)["components"]
    assert (data["status"], data["target"], data["blocked_by"]) == ("clean", made[-1], None)
    [dropped] = data["dropped"]
    assert dropped["name"] == "0001-fixed-split.patch" and dropped["landed"].startswith("landed")
    assert data["partially_landed"] == {}
    code, out, err = cli("upstreamed", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [found] = json.loads(out)["components"]
    assert [d["name"] for d in found["upstreamed"]] == ["0001-fixed-split.patch"] and found["conflicts"] == []
    base = git("rev-parse", "HEAD", cwd=project.root)
    assert cli("checkout", "toy", cwd=project.root)[0] == 0
    code, out, err = cli("rebase", "toy", "--onto", made[-1], "--json", cwd=project.root)
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "done"
    assert [d["name"] for d in result["dropped"]] == ["0001-fixed-split.patch"]
    assert (project.root / "patches/toy/rollout/series").read_text() == "0002-contiguous.patch\n"
    project.commit_all("move the pin past the rename; 0001 landed upstream")
    code, out, err = cli("diff", "--json", base, "HEAD", cwd=project.root)
    assert code in (0, 1), err
    [entry] = json.loads(out)["components"]
    assert entry["patches"]["removed"] == ["0001-fixed-split.patch"]
    assert entry["patches"]["landed"] == {"0001-fixed-split.patch": f"landed (same patch, via {made[2][:12]})"}


@pytest.mark.parametrize("part", [False, True], ids=["whole-commit", "part-of-the-commit"])
@pytest.mark.parametrize("at", [5, 10], ids=["as-committed", "re-indented-since"])
def test_a_backport_whose_change_is_in_the_target_is_reported_as_backport_by_update_and_rebase(project, upstream, cli, tmp_path, at, part):
    """Reference §7.9.1: a declared backport whose commit is at or below the target, and whose change the target holds, is
    `landed (backport of <commit>)`, whether the target has it as the commit made it (5) or re-wrapped and re-indented
    since (10: all its tokens still there), and whether the backport is that commit whole (a patch-id matches) or a part
    of it: one answer, never `landed (same patch)` or `landed (modified, via …)`, in update's and rebase's text and JSON alike."""
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin, made = backport_model(project, upstream, {"docs/scaling.md": "line 20 is scaled\n"} if part else None)
    label = f"landed (backport of {made[3][:12]})"
    code, out, err = cli("update", "toy", "--onto", made[at], "--json", cwd=project.root)
    assert code == 0, err
    [data] = json.loads(out)["components"]
    assert (data["status"], data["target"]) == ("clean", made[at])
    [dropped] = data["dropped"]
    assert (dropped["name"], dropped["method"], dropped["upstream"], dropped["via"], dropped["landed"]) == (BACKPORT, "backport", made[3], [made[3]], label)
    code, text, err = cli("update", "toy", "--onto", made[at], cwd=project.root)
    assert code == 0, err
    assert f"drops {BACKPORT} (Scale line 20 by two) <- {made[3][:12]} Scale line 20 by two [backport] {label}" in text
    code, out, err = cli("rebase", "toy", "--onto", made[at], "--json", "--report", str(tmp_path / "rebase.md"), cwd=project.root)
    assert code == 0, err
    [dropped] = json.loads(out)["dropped"]
    assert (dropped["name"], dropped["method"], dropped["upstream"], dropped["landed"]) == (BACKPORT, "backport", made[3], label)
    assert f"; {label}" in (tmp_path / "rebase.md").read_text()
    project.commit_all("move the pin")
    code, out, err = cli("diff", "--json", "HEAD~1", "HEAD", cwd=project.root)
    assert code in (0, 1), err
    [entry] = json.loads(out)["components"]
    assert entry["patches"]["landed"] == {BACKPORT: label}


def test_a_block_upstream_took_verbatim_whose_context_repeats_is_dropped_not_put_in_twice(project, upstream, cli):
    """#47.3 (found on verl's history): upstream takes the patch's block as it is; the block ends with the lines the patch's
    context begins with, so ``git apply`` finds that context again right after upstream's copy and would add the block a
    second time. The change is there: landed, by every command, and the rebased file is upstream's, not a duplicate."""
    source = "try:\n    import a\nexcept ImportError:\n    pass\n\ntry:\n    import c\nexcept ImportError:\n    pass\n"
    block = "try:\n    import b\nexcept ImportError:\n    pass\n\n"
    at_pin = upstream.commit({"src/imports.py": source}, "Add imports")
    with_b = source.replace("try:\n    import c\n", block + "try:\n    import c\n")
    patch = make_patch(upstream, at_pin, {"src/imports.py": with_b}, "Import b too")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    project.series("toy", "rollout", [("0001-import-b.patch", patch)])
    project.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {at_pin}\n    track: main\n")
    project.commit_all("add model")
    made = grow(upstream, 4, special={1: ({"src/imports.py": with_b}, "Support b (#36)"), 2: ({"src/imports.py": "# header\n" + with_b}, "Add a header")})
    code, out, err = cli("upstreamed", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [found] = json.loads(out)["components"]
    assert [(d["name"], d["upstream_commit"]) for d in found["upstreamed"]] == [("0001-import-b.patch", made[1])]
    code, out, err = cli("update", "toy", "--json", cwd=project.root)
    assert code == 0, err
    [moved] = json.loads(out)["components"]
    assert moved["status"] == "clean" and [d["name"] for d in moved["dropped"]] == ["0001-import-b.patch"]
    assert cli("checkout", "toy", cwd=project.root)[0] == 0
    code, out, err = cli("rebase", "toy", "--onto", made[-1], "--json", cwd=project.root)
    assert code == 0, err
    assert [d["name"] for d in json.loads(out)["dropped"]] == ["0001-import-b.patch"]
    assert (project.root / "work/toy/rollout/src/imports.py").read_text() == "# header\n" + with_b
    assert (project.root / "patches/toy/rollout/series").read_text().strip() == ""


def test_an_insertion_two_diffs_place_apart_is_one_change(monkeypatch):
    """#47.3 (found on verl's history): a block put in next to tokens equal to its own ends can be placed anywhere in
    that stretch, and git's diff of the pin against the patch and against upstream may place it differently (verl's
    vllm/patch.py: 11 tokens apart, because upstream changed another function of the file). The same change: landed.
    git's two placements are given here as git gave them there; the rest is the real measure."""
    from zmr.infra import git
    from zmr.ops import landed

    base, mine = b"pass\ntry\nkimi\n", b"pass\ntry\nnext\npass\ntry\nkimi\n"
    theirs = mine + b"end\n"
    placed = {
        (landed._Tokens.of(base).text(), landed._Tokens.of(mine).text()): [(2, 0, 2, 3)],  # after "pass try": "next pass try"
        (landed._Tokens.of(base).text(), landed._Tokens.of(theirs).text()): [(0, 0, 0, 3), (3, 0, 6, 1)],  # first: "pass try next"
    }
    monkeypatch.setattr(landed, "_diff", lambda old, new: placed.get((old, new)) or git.diff_lines(old, new))
    change = landed.Change.of(lambda _: base, lambda _: mine, ["f.py"])
    assert change.against(lambda _: theirs) == landed.Measure(1, 1)
    assert change.against(lambda _: base + b"end\n").present == 0  # not there: not landed


def test_a_line_repeating_its_neighbour_taken_rewrapped_is_kept_where_git_would_add_it(scratch, tmp_path):
    """#47.11: the property's counterexample (hypothesis found it): the patch repeats the line above it; upstream has the
    same tokens with that line wrapped, and the patch's context no longer matches. Tokens alone say landed, but git's
    3-way merge of the patch there goes in cleanly and adds the line: never dropped."""
    from zmr.infra import git as zgit
    from zmr.model.series import load_patch
    from zmr.ops.upstream import replay_onto

    base = "x = f(a)\ny = g(b, c)\nreturn x\nif a:\n"
    pin = _commit(scratch, base, None)
    patched = _commit(scratch, "x = f(a)\n" + base, pin)
    new = _commit(scratch, "x\n    = f(a)\nx = f(a)\ny = g(b, c)\nreturn x\nif\n    a:\n", pin)
    diff = subprocess.run(["git", "diff", "--full-index", pin, patched], cwd=scratch, capture_output=True, check=True).stdout
    path = tmp_path / "p.patch"
    path.write_bytes(b"Subject: p\n\n---\n" + diff)
    patch = load_patch(path, "p.patch", 1, "p.patch")
    memory = replay_onto(zgit.Repo(scratch), pin, new, [patch], [patched], {patched: frozenset({"m.py"})}, [None], name_upstream=False)
    assert memory.dropped == [] and memory.conflict_at == 0
