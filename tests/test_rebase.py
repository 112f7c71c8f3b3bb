"""zmr rebase and zmr upstreamed against fixture upstreams that moved on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import git, make_patch, make_project, simple_model, state_dir, zmr

MANIFEST = """\
# Toy model: zero-mismatch pins.
model: toy
title: "Toy model"     # display name

components:
  rollout:   # the rollout engine
    upstream: {upstream}
    # pinned; bump it with zmr rebase
    commit:   "{pin}"    # quoted on purpose
    track: main
"""


def tree_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.relative_to(folder).parts}


@pytest.fixture
def proj(tmp_path):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    return project


def toy(project, upstream) -> tuple[str, str]:
    """simple_model with a hand-laid-out manifest; returns (pin, model.py at the pin)."""
    pin = simple_model(project, upstream)
    project.write("manifests/toy.yaml", MANIFEST.format(upstream=upstream.path, pin=pin))
    project.commit_all("layout")
    return pin, upstream.file_at(pin, "src/model.py") + "\n"


def test_rebase_in_memory_keeps_manifest_layout_and_untouched_patch_bytes(proj, upstream, tmp_path):
    pin, model_py = toy(proj, upstream)
    folder = proj.root / "patches/toy/rollout"
    before = tree_files(folder)
    manifest = (proj.root / "manifests/toy.yaml").read_bytes()
    upstream.commit({"src/model.py": "# header\n# more header\n" + model_py}, "Add a header")
    new = upstream.commit({"docs/guide.md": "guide v2\n"}, "Update the guide")
    report = tmp_path / "report.md"
    result = zmr("rebase", "toy", "-c", "rollout", "--onto", "main", "--report", str(report), cwd=proj.root)
    assert result.returncode == 0, result.stderr
    # Only the commit value changed: comments, quotes and spacing are kept.
    assert (proj.root / "manifests/toy.yaml").read_bytes() == manifest.replace(pin.encode(), new.encode())
    after = tree_files(folder)
    assert after["series"] == before["series"]
    assert after["0002-contiguous.patch"] == before["0002-contiguous.patch"]  # applies as it was: not rewritten
    refreshed = after["0001-fixed-split.patch"].decode()
    assert refreshed != before["0001-fixed-split.patch"].decode()
    assert "@@ -9,7 +9,7 @@" in refreshed and "+line 10 fixed split\n" in refreshed
    assert "Subject: [PATCH] Use a fixed split size in matmul" in refreshed and "Date: Sat, 9 Mar 2024 16:00:00 +0000" in refreshed
    text = report.read_text()
    assert text == result.stdout
    assert f"- old pin: `{pin}`" in text and f"- new pin: `{new}` (main)" in text
    assert "- upstream commits in between: 3" in text
    assert "## Kept (2)" in text and "`0001-fixed-split.patch` Use a fixed split size in matmul (refreshed" in text
    assert "## Changed (0)" in text and "## Dropped: already upstream (0)" in text
    assert not (state_dir(proj.root) / "rebase").exists() or not any((state_dir(proj.root) / "rebase").iterdir())
    build = zmr("build", "toy", cwd=proj.root)
    assert build.returncode == 0, build.stderr
    built = git("show", "rollout/toy:src/model.py", cwd=proj.root)
    assert built.startswith("# header\n") and "line 10 fixed split" in built
    assert git("show", "rollout/toy:docs/guide.md", cwd=proj.root) == "guide v2"


def test_upstreamed_and_rebase_drop_patches_that_landed_upstream(proj, upstream):
    pin, model_py = toy(proj, upstream)
    guide = make_patch(upstream, pin, {"docs/guide.md": "guide\nzero-mismatch notes\n"}, "Document zero-mismatch")
    proj.series("toy", "rollout", [("0001-fixed-split.patch", (proj.root / "patches/toy/rollout/0001-fixed-split.patch").read_bytes()), ("0002-contiguous.patch", (proj.root / "patches/toy/rollout/0002-contiguous.patch").read_bytes()), ("0003-guide.patch", guide)])
    proj.commit_all("three patches")
    # Upstream takes the contiguous patch as is (same patch-id) and the split fix inside a bigger commit.
    same = upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "matmul: contiguous output")
    folded = upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n"), "README.md": "toy upstream, now batch-invariant\n"}, "Batch invariance for the toy model")
    upstream.commit({"setup.cfg": "[metadata]\nname = toy\nversion = 3\n"}, "Release 3")
    git("tag", "v3", cwd=upstream.path)
    listed = zmr("upstreamed", "toy", "--json", cwd=proj.root)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)["components"][0]
    assert data["rev"] == "main" and data["rev_commit"] == upstream.commits[-1]
    assert [(u["name"], u["upstream_commit"], u["method"]) for u in data["upstreamed"]] == [
        ("0001-fixed-split.patch", folded, "reverse-apply"),
        ("0002-contiguous.patch", same, "patch-id"),
    ]
    text = zmr("upstreamed", "toy", "--rev", upstream.commits[-2], cwd=proj.root)
    assert text.returncode == 0
    assert f"0002-contiguous.patch  Make matmul output contiguous  <- {same[:12]} matmul: contiguous output  [patch-id]" in text.stdout
    result = zmr("rebase", "toy", "--onto", "v3", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    assert "## Dropped: already upstream (2)" in result.stdout
    # Subjects are anybody's text: in code spans (inert in a pull request's body, §7.22).
    assert f"- `0002-contiguous.patch` `Make matmul output contiguous`: upstream commit `{same}` (`matmul: contiguous output`); same patch-id" in result.stdout
    assert f"- `0001-fixed-split.patch` `Use a fixed split size in matmul`: upstream commit `{folded}` (`Batch invariance for the toy model`)" in result.stdout
    assert "## Kept (1)" in result.stdout
    folder = proj.root / "patches/toy/rollout"
    assert (folder / "series").read_text() == "0003-guide.patch\n"
    assert sorted(p.name for p in folder.iterdir()) == ["0003-guide.patch", "series"]
    assert (folder / "0003-guide.patch").read_bytes() == guide
    assert f"commit:   \"{upstream.commits[-1]}\"" in (proj.root / "manifests/toy.yaml").read_text()
    # Without --rev and without track: a clear error.
    manifest = proj.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace("    track: main\n", ""))
    missing = zmr("upstreamed", "toy", cwd=proj.root)
    assert missing.returncode == 2
    assert "toy/rollout: no upstream revision to compare with" in missing.stderr and "--onto REV" in missing.stderr


def _conflicting_upstream(upstream, model_py: str) -> str:
    upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    return upstream.commit({"docs/guide.md": "guide v2\n"}, "Update the guide")


def test_rebase_stops_on_conflict_and_continues_after_resolution(proj, upstream):
    pin, model_py = toy(proj, upstream)
    new = _conflicting_upstream(upstream, model_py)
    folder = proj.root / "patches/toy/rollout"
    contiguous = (folder / "0002-contiguous.patch").read_bytes()
    stopped = zmr("rebase", "toy", "--onto", new[:10], cwd=proj.root)
    assert stopped.returncode == 1
    assert "toy/rollout: patch 0001-fixed-split.patch (Use a fixed split size in matmul) conflicts with upstream" in stopped.stderr
    assert "conflicting files: src/model.py" in stopped.stderr
    assert "zmr rebase toy -c rollout --continue" in stopped.stderr and "--abort" in stopped.stderr
    co = proj.root / "work/toy/rollout"
    assert "both modified:   src/model.py" in git("status", cwd=co)
    assert git("rev-parse", "zmr/base", cwd=co) == new
    early = zmr("rebase", "toy", "--continue", cwd=proj.root)
    assert early.returncode == 2 and "conflicts in src/model.py are not resolved yet" in early.stderr
    busy = zmr("rebase", "toy", "--onto", "main", cwd=proj.root)
    assert busy.returncode == 2 and "a rebase is already in progress" in busy.stderr
    # Resolve: keep both intentions.
    text = (co / "src/model.py").read_text()
    resolved = re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S)
    (co / "src/model.py").write_text(resolved)
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "toy", "--continue", cwd=proj.root)
    assert done.returncode == 0, done.stderr
    assert "## Changed (1)" in done.stdout and "## Kept (1)" in done.stdout
    assert "-+line 10 fixed split" in done.stdout and "++line 10 upstream, fixed split" in done.stdout
    assert "replayed: in the checkout (conflicts resolved)" in done.stdout
    assert f"commit:   \"{new}\"" in (proj.root / "manifests/toy.yaml").read_text()
    patch = (folder / "0001-fixed-split.patch").read_text()
    assert "-line 10 upstream\n+line 10 upstream, fixed split\n" in patch
    assert "Subject: [PATCH] Use a fixed split size in matmul\n" in patch and "From: Patch Author <author@zmr.invalid>" in patch
    assert (folder / "0002-contiguous.patch").read_bytes() == contiguous
    assert git("log", "--format=%an %s", "zmr/base..", cwd=co).splitlines() == ["Patch Author Make matmul output contiguous", "Patch Author Use a fixed split size in matmul"]
    assert git("config", "zmr.pin", cwd=co) == new
    assert zmr("export", "toy", cwd=proj.root).stdout.startswith("unchanged")
    build = zmr("build", "toy", cwd=proj.root)
    assert build.returncode == 0, build.stderr
    assert git("rev-parse", "rollout/toy^{tree}", cwd=proj.root) == git("rev-parse", "HEAD^{tree}", cwd=co)


def test_rebase_abort_restores_manifest_series_refs_and_checkout(proj, upstream):
    pin, model_py = toy(proj, upstream)
    new = _conflicting_upstream(upstream, model_py)
    co = proj.root / "work/toy/rollout"

    def state():
        return tree_files(proj.root / "manifests"), tree_files(proj.root / "patches"), proj.refs()

    before = state()
    # Without a checkout: the one made for the conflict goes away again.
    assert zmr("rebase", "toy", "--onto", "main", cwd=proj.root).returncode == 1
    assert co.is_dir()
    aborted = zmr("rebase", "toy", "--abort", cwd=proj.root)
    assert aborted.returncode == 0, aborted.stderr
    assert not co.exists() and state() == before
    # With a checkout, half-way through resolving.
    assert zmr("checkout", "toy", cwd=proj.root).returncode == 0
    git("config", "user.name", "Local Setting", cwd=co)
    checkout_before = (tree_files(co), git("for-each-ref", cwd=co), git("symbolic-ref", "HEAD", cwd=co), (co / ".git/config").read_bytes())
    assert zmr("rebase", "toy", "--onto", "main", cwd=proj.root).returncode == 1
    (co / "src/model.py").write_text("half resolved\n")
    git("add", "src/model.py", cwd=co)
    aborted = zmr("rebase", "toy", "--abort", cwd=proj.root)
    assert aborted.returncode == 0, aborted.stderr
    assert state() == before
    assert (tree_files(co), git("for-each-ref", cwd=co), git("symbolic-ref", "HEAD", cwd=co), (co / ".git/config").read_bytes()) == checkout_before
    assert git("status", "--porcelain", cwd=co) == ""
    assert not (co / ".git/CHERRY_PICK_HEAD").exists()
    assert not (state_dir(proj.root) / "rebase/toy/rollout").exists()
    again = zmr("rebase", "toy", "--abort", cwd=proj.root)
    assert again.returncode == 2 and "no rebase in progress" in again.stderr
    # The checkout is usable as before: export changes nothing.
    assert zmr("export", "toy", cwd=proj.root).stdout.startswith("unchanged")


def test_rebase_json_for_stop_abort_and_a_report_named_at_continue(proj, upstream, tmp_path):
    """Every result the rebase command shows has its JSON (--abort's too); a --report given to --continue wins over the start's."""
    pin, model_py = toy(proj, upstream)
    new = _conflicting_upstream(upstream, model_py)
    stopped = zmr("rebase", "toy", "--onto", new, "--json", cwd=proj.root)
    assert stopped.returncode == 1
    data = json.loads(stopped.stdout)
    assert (data["status"], data["patch"], data["files"], data["new"], data["remaining"]) == ("stopped", "0001-fixed-split.patch", ["src/model.py"], new, 1)
    aborted = zmr("rebase", "toy", "--abort", "--json", cwd=proj.root)
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout) == {"tool": "zmr", "zmr": __import__("zmr.model.source", fromlist=["version"]).version(), "schema_version": 1, "status": "aborted", "model": "toy", "component": "rollout"}
    at_start, at_continue = tmp_path / "start.md", tmp_path / "continue.md"
    assert zmr("rebase", "toy", "--onto", new, "--report", str(at_start), cwd=proj.root).returncode == 1
    co = proj.root / "work/toy/rollout"
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S))
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "toy", "--continue", "--report", str(at_continue), "--json", cwd=proj.root)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["status"], result["old"], result["new"], result["path"]) == ("done", pin, new, "checkout")
    assert not at_start.exists()
    assert at_continue.read_text().startswith("# zmr rebase toy/rollout\n") and f"- new pin: `{new}`\n" in at_continue.read_text()


def test_rebase_refuses_unexported_work_and_unknown_revisions(proj, upstream):
    toy(proj, upstream)
    assert zmr("checkout", "toy", cwd=proj.root).returncode == 0
    co = proj.root / "work/toy/rollout"
    (co / "README.md").write_text("work\n")
    git("commit", "-q", "-am", "Local work", cwd=co)
    refused = zmr("rebase", "toy", "--onto", "main", cwd=proj.root)
    assert refused.returncode == 2
    assert "the checkout has work that is not in the series" in refused.stderr and "zmr export toy -c rollout" in refused.stderr
    git("reset", "-q", "--hard", "HEAD~1", cwd=co)
    unknown = zmr("rebase", "toy", "--onto", "no-such-branch", cwd=proj.root)
    assert unknown.returncode == 2 and "cannot fetch 'no-such-branch'" in unknown.stderr
    usage = zmr("rebase", "toy", "--onto", "main", "--continue", cwd=proj.root)
    assert usage.returncode == 2 and "give one of --onto REV, --continue, --skip, --abort" in usage.stderr


def test_upstreamed_all_covers_every_tracked_component(proj, upstream):
    pin, model_py = toy(proj, upstream)
    # Upstream lands the series' second patch verbatim.
    upstream.commit({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul output contiguous")
    result = zmr("upstreamed", "--all", "--json", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [c["component"] for c in data["components"]] == ["rollout"]
    assert [p["name"] for p in data["components"][0]["upstreamed"]] == ["0002-contiguous.patch"]
    # No model named: a read-only command acts on every model (reference §6.4), as --all does.
    default = zmr("upstreamed", "--json", cwd=proj.root)
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout) == data


@pytest.mark.parametrize("where", ["elsewhere", "below-the-hunks"])
def test_clean_rebase_shortcut_gives_what_the_full_replay_gives(tmp_path, upstream, where):
    """Upstream moved elsewhere, or changed a patched file where no hunk moves: without a checkout only the
    pin moves, byte for byte as a replay would."""
    results = {}
    for mode in ("shortcut", "replay"):
        project = make_project(tmp_path / mode)
        project.write(".gitignore", "/work/\n/.zmr/\n")
        toy(project, upstream)
        if mode == "replay":
            # A checkout makes rebase replay every patch and refresh it.
            assert zmr("checkout", "toy", cwd=project.root).returncode == 0
        results[mode] = project
    if where == "elsewhere":
        new = upstream.commit({"docs/other.md": "unrelated\n"}, "Unrelated upstream change")
    else:
        model_py = upstream.file_at(upstream.commits[-1], "src/model.py") + "\n"
        new = upstream.commit({"src/model.py": model_py + "line 41\n"}, "Append to model.py")
    outputs = {}
    for mode, project in results.items():
        result = zmr("rebase", "toy", "-c", "rollout", "--onto", new, "--json", cwd=project.root)
        assert result.returncode == 0, result.stderr
        outputs[mode] = json.loads(result.stdout)
    a, b = results["shortcut"].root, results["replay"].root
    assert tree_files(a / "patches") == tree_files(b / "patches")
    assert (a / "manifests/toy.yaml").read_bytes() == (b / "manifests/toy.yaml").read_bytes()
    assert new in (a / "manifests/toy.yaml").read_text()
    assert not (a / "work").exists()  # no checkout was made for the shortcut
    assert (outputs["shortcut"]["path"], outputs["replay"]["path"]) == ("pin-only", "fast")
    for key in ("old", "new", "kept", "changed", "dropped"):
        assert outputs["shortcut"][key] == outputs["replay"][key], key
    assert zmr("build", "toy", cwd=a).returncode == 0 and zmr("build", "toy", cwd=b).returncode == 0
    assert git("rev-parse", "rollout/toy", cwd=a) == git("rev-parse", "rollout/toy", cwd=b)


def test_a_series_that_does_not_apply_to_its_pin_is_not_moved(proj, upstream):
    """The pin-only path still checks the series against the old pin: a broken series stops the rebase."""
    pin, model_py = toy(proj, upstream)
    patch = proj.root / "patches/toy/rollout/0002-contiguous.patch"
    patch.write_bytes(patch.read_bytes().replace(b"-    return a @ b", b"-    return a @ c"))
    proj.commit_all("break the series")
    upstream.commit({"docs/other.md": "unrelated\n"}, "Unrelated upstream change")
    manifest = (proj.root / "manifests/toy.yaml").read_bytes()
    result = zmr("rebase", "toy", "-c", "rollout", "--onto", "main", cwd=proj.root)
    assert result.returncode == 2
    assert "0002-contiguous.patch: does not apply" in result.stderr and "src/kernels/matmul.py" in result.stderr
    assert (proj.root / "manifests/toy.yaml").read_bytes() == manifest


@pytest.mark.parametrize("where", ["elsewhere", "below-the-hunks"])
def test_patches_on_top_of_each_other_still_take_the_pin_only_path(proj, upstream, where):
    """The second patch's context holds the first one's change: the check must apply them in order, not each alone."""
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    first = model_py.replace("line 10\n", "line 10 fixed\n")
    p1 = make_patch(upstream, pin, {"src/model.py": first}, "Fix line 10")
    scratch_base = upstream.path.parent / "stacked"
    git("clone", "-q", str(upstream.path), str(scratch_base))
    git("checkout", "-q", "--detach", pin, cwd=scratch_base)
    git("apply", "--index", "-", cwd=scratch_base, input=p1)
    git("commit", "-q", "-m", "p1", cwd=scratch_base)
    (scratch_base / "src/model.py").write_text(first.replace("line 11\n", "line 11 fixed too\n"))
    git("commit", "-q", "-am", "Fix line 11", cwd=scratch_base, env={"GIT_AUTHOR_DATE": "@1710000000 +0000", "GIT_AUTHOR_NAME": "Patch Author", "GIT_AUTHOR_EMAIL": "author@zmr.invalid"})
    p2 = git("format-patch", "-1", "--stdout", "--zero-commit", "--full-index", "--no-signature", "-k", "HEAD", cwd=scratch_base).encode() + b"\n"
    proj.series("toy", "rollout", [("0001-fix-10.patch", p1), ("0002-fix-11.patch", p2)])
    proj.write("manifests/toy.yaml", MANIFEST.format(upstream=upstream.path, pin=pin))
    proj.commit_all("stacked series")
    before = tree_files(proj.root / "patches/toy/rollout")
    if where == "elsewhere":
        new = upstream.commit({"docs/other.md": "unrelated\n"}, "Unrelated upstream change")
    else:
        new = upstream.commit({"src/model.py": upstream.file_at(upstream.commits[-1], "src/model.py") + "\nline 41\n"}, "Append to model.py")
    result = zmr("rebase", "toy", "-c", "rollout", "--onto", new, "--json", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "pin-only"
    assert tree_files(proj.root / "patches/toy/rollout") == before
    assert zmr("build", "toy", cwd=proj.root).returncode == 0
    assert "line 11 fixed too" in git("show", "rollout/toy:src/model.py", cwd=proj.root)


def test_rebase_state_reads_what_earlier_zmr_wrote_and_writes_the_same_format(tmp_path):
    """state.json is format version 1, as zmr wrote it before RebaseState: a rebase under way survives an upgrade."""
    from zmr.infra.errors import ZmrError
    from zmr.ops.rebase import RebaseState

    oid = lambda n: f"{n:040x}"  # noqa: E731
    legacy = {
        "version": 1, "model": "toy", "component": "rollout", "old": oid(1), "new": oid(2), "rev": "main", "url": "/up",
        "old_chain": [oid(3), oid(4)], "names": ["0001-a.patch", "0002-b.patch"], "subjects": ["A", "B"],
        "dropped": [{"name": "0002-b.patch", "subject": "B", "method": "patch-id", "upstream": oid(5), "upstream_subject": "B upstream"}],
        "upstream_count": 7, "phase": "picking", "path": "checkout", "partial": oid(2), "prepared": True, "remaining": [0],
        "stopped": {"index": 0, "head_before": oid(2), "conflict": True, "files": ["src/model.py"]},
        "saved": {"series_files": ["0001-a.patch", "series"], "journal_existed": False,
                  "checkout": {"path": "/p/work/toy/rollout", "existed": True, "head": "refs/heads/toy/rollout", "head_symbolic": True, "refs": {"refs/zmr/base": oid(1)}}},
    }
    path = tmp_path / "state.json"
    path.write_text(json.dumps(legacy, indent=1))
    state = RebaseState.load(path)
    assert (state.stopped.files, state.dropped[0].upstream, state.saved.checkout.head_symbolic, state.remaining) == (["src/model.py"], oid(5), True, [0])
    state.save(path)
    again = json.loads(path.read_text())
    assert again["saved"]["checkout"].pop("token") == ""  # added since; an older zmr reads past it, and a state without one names no checkout zmr may touch
    assert {key: again[key] for key in legacy} == legacy
    assert RebaseState.load(path) == state
    for damage in ("{", json.dumps({**legacy, "version": 2}), json.dumps({k: v for k, v in legacy.items() if k != "old_chain"})):
        path.write_text(damage)
        with pytest.raises(ZmrError) as err:
            RebaseState.load(path)
        assert str(path) in err.value.message


def test_a_damaged_rebase_state_is_an_error_that_names_the_file(proj, upstream):
    toy(proj, upstream)
    state = state_dir(proj.root) / "rebase/toy/rollout/state.json"
    state.parent.mkdir(parents=True)
    state.write_text("{")
    result = zmr("rebase", "toy", "--continue", cwd=proj.root)
    assert result.returncode == 2 and f"{state}: cannot be read" in result.stderr


def _stop_on_conflict(proj, upstream) -> tuple[Path, str]:
    pin, model_py = toy(proj, upstream)
    new = _conflicting_upstream(upstream, model_py)
    stopped = zmr("rebase", "toy", "--onto", "main", cwd=proj.root)
    assert stopped.returncode == 1, stopped.stderr
    assert "zmr rebase toy -c rollout --skip" in stopped.stderr
    return proj.root / "work/toy/rollout", new


def test_cherry_pick_abort_then_continue_keeps_the_patch_and_says_how_to_resume(proj, upstream):
    """git's status suggests `git cherry-pick --abort`: --continue after it must not drop the patch as 'upstream'."""
    co, new = _stop_on_conflict(proj, upstream)
    folder = proj.root / "patches/toy/rollout"
    series_before = tree_files(folder)
    git("cherry-pick", "--abort", cwd=co)
    refused = zmr("rebase", "--continue", cwd=proj.root)
    assert refused.returncode == 2, refused.stdout
    assert "the cherry-pick of 0001-fixed-split.patch is no longer in progress and nothing was committed" in refused.stderr
    assert "zmr rebase toy -c rollout --skip" in refused.stderr and "--abort" in refused.stderr
    assert tree_files(folder) == series_before
    assert (state_dir(proj.root) / "rebase/toy/rollout/state.json").is_file()
    # Redo it as the message says: the conflict is back; resolve, continue.
    old_commit = re.search(r"`git cherry-pick ([0-9a-f]{40})`", refused.stderr).group(1)
    git("cherry-pick", old_commit, cwd=co, check=False)
    assert (co / ".git/CHERRY_PICK_HEAD").is_file()
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S))
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "--continue", cwd=proj.root)
    assert done.returncode == 0, done.stderr
    assert "## Dropped: already upstream (0)" in done.stdout and "## Changed (1)" in done.stdout
    assert "line 10 upstream, fixed split" in (folder / "0001-fixed-split.patch").read_text()


def test_rebase_skip_drops_the_stopped_patch_and_says_so(proj, upstream):
    co, new = _stop_on_conflict(proj, upstream)
    folder = proj.root / "patches/toy/rollout"
    contiguous = (folder / "0002-contiguous.patch").read_bytes()
    done = zmr("rebase", "--skip", cwd=proj.root)
    assert done.returncode == 0, done.stderr
    assert "## Dropped: already upstream (0)" in done.stdout
    assert "## Dropped with --skip (1)" in done.stdout and "- `0001-fixed-split.patch` Use a fixed split size in matmul" in done.stdout
    assert (folder / "series").read_text() == "0002-contiguous.patch\n"
    assert (folder / "0002-contiguous.patch").read_bytes() == contiguous
    assert not (folder / "0001-fixed-split.patch").exists()
    assert f'commit:   "{new}"' in (proj.root / "manifests/toy.yaml").read_text()
    nothing = zmr("rebase", "--skip", cwd=proj.root)
    assert nothing.returncode == 2 and "no rebase in progress" in nothing.stderr


def test_rebase_onto_takes_what_git_takes_and_defaults_to_track(proj, upstream, tmp_path):
    pin, model_py = toy(proj, upstream)
    first = upstream.commit({"docs/other.md": "one\n"}, "Unrelated one")
    git("tag", "v4", cwd=upstream.path)
    upstream.commit({"docs/other.md": "two\n"}, "Unrelated two")
    newest = upstream.commit({"docs/other.md": "three\n"}, "Unrelated three")
    walked = zmr("rebase", "toy", "--onto", "main~2", cwd=proj.root)
    assert walked.returncode == 0, walked.stderr
    assert f"- new pin: `{first}` (main~2)" in walked.stdout
    too_far = zmr("rebase", "toy", "--onto", "v4~99", cwd=proj.root)
    assert too_far.returncode == 2 and "'v4~99' names no commit" in too_far.stderr
    unknown = zmr("rebase", "toy", "--onto", "no-such-branch~1", cwd=proj.root)
    assert unknown.returncode == 2 and "cannot fetch 'no-such-branch'" in unknown.stderr
    assert "refs/zmr" not in unknown.stderr and "refspec" not in unknown.stderr
    back = zmr("rebase", "toy", "--onto", pin[:9], cwd=proj.root)
    assert back.returncode == 0, back.stderr
    assert f"- new pin: `{pin}`\n" in back.stdout  # an id is not repeated as its own name
    # No --onto: the component's track (main), as the reference says.
    tracked = zmr("rebase", "toy", "-c", "rollout", cwd=proj.root)
    assert tracked.returncode == 0, tracked.stderr
    assert f"- new pin: `{newest}` (main)" in tracked.stdout
    assert f'commit:   "{newest}"' in (proj.root / "manifests/toy.yaml").read_text()
    manifest = proj.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace("    track: main\n", ""))
    untracked = zmr("rebase", "toy", cwd=proj.root)
    assert untracked.returncode == 2 and "no upstream revision to rebase onto" in untracked.stderr and "--onto REV" in untracked.stderr


def test_report_given_at_the_start_is_written_by_continue_and_the_header_names_the_new_pin(proj, upstream, tmp_path):
    pin, model_py = toy(proj, upstream)
    folder = proj.root / "patches/toy/rollout"
    header = f"# Zero-mismatch series of toy/rollout, applied on {pin[:12]} of\n# {upstream.path}.\n"
    (folder / "series").write_text(header + "0001-fixed-split.patch\n0002-contiguous.patch\n")
    proj.commit_all("series header")
    new = _conflicting_upstream(upstream, model_py)
    report = tmp_path / "report.md"
    stopped = zmr("rebase", "toy", "--onto", new, "--report", str(report), cwd=proj.root)
    assert stopped.returncode == 1
    assert f"rebasing toy/rollout onto {new}\n" in stopped.stdout
    assert not report.exists()
    co = proj.root / "work/toy/rollout"
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S))
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "--continue", cwd=proj.root)
    assert done.returncode == 0, done.stderr
    assert report.read_text() == done.stdout
    assert f"- new pin: `{new}`\n" in done.stdout and f"`{new}` ({new})" not in done.stdout
    assert (folder / "series").read_text() == header.replace(pin[:12], new[:12]) + "0001-fixed-split.patch\n0002-contiguous.patch\n"
