"""zmr diff: what a change does to every release branch, compared in memory on fixture upstreams."""

from __future__ import annotations

import json
import re
import os
import shlex
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import Upstream, git, make_patch, make_project, make_upstream, zmr

MARKER_LINE = "<!-- zmr-diff -->\n"
BIG = "\n".join(f"value {i}" for i in range(1, 61)) + "\n"


def _history() -> list[dict[str, str | None]]:
    files = {f"src/f{k}.py": BIG for k in range(6)}
    return [
        {"README.md": "toy upstream\n", **files},
        {"docs/guide.md": "guide\n"},
        {"src/extra.py": "extra = 1\n", "docs/guide.md": "guide v2\nmore\n"},
        {"src/later.py": "later = 2\n"},
    ]


def _edit(text: str, line: int, new: str) -> str:
    return text.replace(f"value {line}\n", f"{new}\n", 1)


@pytest.fixture
def up(tmp_path):
    return make_upstream(tmp_path / "upstream", _history())


@pytest.fixture
def proj(tmp_path):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/.zmr/\n/work/\n")
    return project


def patch(up, pin: str, k: int, line: int, subject: str, *, body: str = "", new: str | None = None) -> bytes:
    """A patch of src/f<k>.py at *line*."""
    return make_patch(up, pin, {f"src/f{k}.py": _edit(BIG, line, new or f"value {line} patched")}, subject, body)


def manifest(proj, up, pin: str, model: str = "toy", component: str = "rollout") -> None:
    proj.manifest(
        model,
        f"""
        model: {model}
        components:
          {component}:
            upstream: {up.path}
            commit: {pin}
        """,
    )


def run_json(proj, *args: str) -> tuple[int, dict, str]:
    result = zmr("diff", "--json", *args, cwd=proj.root)
    assert result.returncode in (0, 1, 2), result.stderr
    data = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, data, result.stderr


def component(data: dict, label: str) -> dict:
    found = [c for c in data["components"] if f"{c['model']}/{c['component']}" == label]
    assert len(found) == 1, data
    return found[0]


def mirrors() -> list[Path]:
    folder = Path(os.environ["ZMR_CACHE"]) / "mirrors"
    return sorted(folder.glob("*.git")) if folder.is_dir() else []


# -- the working tree, and what costs nothing -----------------------------------------------------


def test_unchanged_components_cost_nothing_and_the_working_tree_is_the_default_head(proj, up):
    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    code, data, err = run_json(proj)
    assert code == 0, err
    assert data["base"] == proj.ref("HEAD") and data["head"] is None
    assert [(c["status"], c["pin"]["direction"], c["patches"]["unchanged"]) for c in data["components"]] == [("unchanged", "same", 1)]
    assert mirrors() == []  # nothing fetched
    assert zmr("diff", "--check", cwd=proj.root).returncode == 0
    # An uncommitted edit of the series is the head side.
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A", new="value 5 patched again"))])
    code, data, err = run_json(proj)
    assert code == 0, err
    entry = component(data, "toy/rollout")
    assert entry["status"] == "changed"
    assert entry["branch"]["old"] != entry["branch"]["new"]
    assert [c["old"] for c in entry["patches"]["changed"]] == ["0001-a.patch"]
    assert "value 5 patched again" in entry["patches"]["changed"][0]["interdiff"]
    assert entry["tree"]["files_changed"] == 1 and entry["tree"]["insertions"] == 1 and entry["tree"]["deletions"] == 1
    assert entry["tree"]["series_files"] == {"old": ["src/f0.py"], "new": ["src/f0.py"]}
    result = zmr("diff", "--check", cwd=proj.root)
    assert result.returncode == 1, result.stderr
    assert zmr("diff", "--exit-code", cwd=proj.root).returncode == 1  # the old name of --check, still accepted
    assert "changed   toy/rollout" in result.stdout
    # The head side's branch id is what zmr build makes of the working tree.
    proj.commit_all("edit")
    assert zmr("build", "toy", cwd=proj.root).returncode == 0
    assert proj.ref(f"refs/heads/{entry['branch']['name']}") == entry["branch"]["new"]


# -- each kind of patch change ----------------------------------------------------------------------


def test_patches_are_matched_by_content_added_removed_reordered_message_and_code_edits(proj, up):
    pin = up.commits[1]
    a = patch(up, pin, 0, 5, "Patch A")
    b = patch(up, pin, 1, 5, "Patch B", body="Why B.")
    c = patch(up, pin, 2, 5, "Patch C")
    d = patch(up, pin, 3, 5, "Patch D")
    proj.series("toy", "rollout", [("0001-a.patch", a), ("0002-b.patch", b), ("0003-c.patch", c), ("0004-d.patch", d)])
    manifest(proj, up, pin)
    proj.commit_all("four patches")
    base = proj.ref("HEAD")
    for name in ("0001-a.patch", "0002-b.patch", "0003-c.patch", "0004-d.patch"):
        (proj.root / "patches/toy/rollout" / name).unlink()
    b_message = patch(up, pin, 1, 5, "Patch B", body="Why B, said better.")  # message only
    c_code = patch(up, pin, 2, 5, "Patch C", new="value 5 patched, and better")  # code only
    e = make_patch(up, pin, {"src/new.py": "".join(f"def new_{i}():\n    return {i}\n" for i in range(12))}, "Add a new module")
    # A is renamed and moved after B: the same content under another name is the same patch.
    proj.series("toy", "rollout", [("0001-b.patch", b_message), ("0002-a-renamed.patch", a), ("0003-c.patch", c_code), ("0004-e.patch", e)])
    proj.commit_all("rework the series")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    assert data["base"] == base and data["head"] == proj.ref("HEAD")
    entry = component(data, "toy/rollout")
    patches = entry["patches"]
    assert entry["status"] == "changed"
    assert patches["added"] == ["0004-e.patch"]
    assert patches["removed"] == ["0004-d.patch"]
    assert patches["unchanged"] == 1  # A, renamed
    assert patches["reordered"] is True
    changed = {(x["old"], x["new"]): x["interdiff"] for x in patches["changed"]}
    assert set(changed) == {("0002-b.patch", "0001-b.patch"), ("0003-c.patch", "0003-c.patch")}
    assert "said better" in changed[("0002-b.patch", "0001-b.patch")] and "value 5 patched, and better" not in changed[("0002-b.patch", "0001-b.patch")]
    assert "value 5 patched, and better" in changed[("0003-c.patch", "0003-c.patch")]
    kinds = {(x["old"], x["new"]): (x["kind"], x["paired_by"]) for x in patches["changed"]}
    assert kinds == {("0002-b.patch", "0001-b.patch"): ("message", "content"), ("0003-c.patch", "0003-c.patch"): ("code", "content")}
    # The series range-diff as git prints it: the new order, the removed patch last (it stood after every paired one).
    assert [(p["old"], p["sign"], p["new"]) for p in patches["range_diff"]] == [
        ("0002-b.patch", "!", "0001-b.patch"),
        ("0001-a.patch", "=", "0002-a-renamed.patch"),
        ("0003-c.patch", "!", "0003-c.patch"),
        (None, ">", "0004-e.patch"),
        ("0004-d.patch", "<", None),
    ]
    added = patches["range_diff"][3]
    assert "+++ b/src/new.py" in added["diff"] and "+def new_11():" in added["diff"]  # an added patch comes with its diff
    assert entry["pin"] == {"old": pin, "new": pin, "commits": 0, "direction": "same"}
    # f2 (C's new line), f3 (D gone), src/new.py (E's 24 lines).
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (3, 26, 2)
    assert entry["tree"]["series_files"]["old"] == ["src/f0.py", "src/f1.py", "src/f2.py", "src/f3.py"]
    assert entry["tree"]["series_files"]["new"] == ["src/f0.py", "src/f1.py", "src/f2.py", "src/new.py"]
    # The text shows the same, with --stat or --name-only without the diffs, coloured when asked.
    text = zmr("diff", base, "HEAD", cwd=proj.root).stdout
    assert "    3: 0003-c.patch ! 3: 0003-c.patch Patch C  [code]" in text and "    -: - > 4: 0004-e.patch Add a new module" in text
    assert "  interdiff 0001-b.patch (message, paired by content):" in text and "  added 0004-e.patch:\n" in text and "\n+def new_11():" in text
    assert " src/new.py | 24 +" in text and " 3 files changed, 26 insertions(+), 2 deletions(-)" in text
    assert "diff --git a/src/f3.py b/src/f3.py" in text and "\x1b[" not in text  # not a terminal: no colour
    stat = zmr("diff", "--stat", base, "HEAD", cwd=proj.root).stdout
    assert " 3 files changed, 26 insertions(+), 2 deletions(-)" in stat and "diff --git" not in stat and "interdiff" not in stat
    assert "    2: 0002-b.patch ! 1: 0001-b.patch Patch B  [message]" in stat
    names = zmr("diff", "--name-only", base, "HEAD", cwd=proj.root).stdout
    assert "\n  src/f2.py\n  src/f3.py\n  src/new.py\n" in names and "|" not in names and "diff --git" not in names
    colored = zmr("diff", "--color", "always", base, "HEAD", cwd=proj.root).stdout
    assert "\x1b[32m+def new_11():\x1b[m" in colored and "\x1b[31m-value 5 patched\x1b[m" in colored
    assert zmr("diff", "--stat", "--name-only", base, cwd=proj.root).returncode == 2
    # Only the order changed: reordered, nothing else.
    proj.series("toy", "rollout", [("0001-a.patch", a), ("0002-b.patch", b_message)])
    proj.commit_all("two patches")
    two = proj.ref("HEAD")
    proj.series("toy", "rollout", [("0001-b.patch", b_message), ("0002-a.patch", a)])
    for stale in ("0003-c.patch", "0004-e.patch", "0002-a-renamed.patch"):
        (proj.root / "patches/toy/rollout" / stale).unlink(missing_ok=True)
    code, data, err = run_json(proj, two)
    patches = component(data, "toy/rollout")["patches"]
    assert (patches["added"], patches["removed"], patches["changed"], patches["unchanged"], patches["reordered"]) == ([], [], [], 2, True)


def test_pin_moved_forward_backward_and_to_an_unrelated_commit(proj, up):
    old, new = up.commits[1], up.commits[3]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, old, 0, 5, "Patch A"))])
    manifest(proj, up, old)
    proj.commit_all("old pin")
    base = proj.ref("HEAD")
    manifest(proj, up, new)
    proj.commit_all("new pin")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    entry = component(data, "toy/rollout")
    assert entry["pin"] == {"old": old, "new": new, "commits": 2, "direction": "forward"}
    assert entry["patches"]["unchanged"] == 1 and not entry["patches"]["changed"]
    numstat = git("diff", "--numstat", old, new, cwd=up.path).splitlines()
    inserted = sum(int(line.split()[0]) for line in numstat)
    deleted = sum(int(line.split()[1]) for line in numstat)
    # Lines always counted (the blobs of the files that differ are fetched), and the unified diff is the upstream's.
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (len(numstat), inserted, deleted)
    assert entry["tree"]["patch"] == git("diff", "--no-renames", "--full-index", old, new, cwd=up.path) + "\n"
    # The pin moved backward: the same files, the lines the other way round, the reverse diff.
    code, data, err = run_json(proj, "HEAD", base)
    assert code == 0, err
    back = component(data, "toy/rollout")
    assert back["pin"] == {"old": new, "new": old, "commits": 2, "direction": "backward"}
    assert (back["tree"]["files_changed"], back["tree"]["insertions"], back["tree"]["deletions"]) == (len(numstat), deleted, inserted)
    assert back["tree"]["patch"] == git("diff", "--no-renames", "--full-index", new, old, cwd=up.path) + "\n"
    assert back["patches"]["unchanged"] == 1 and back["patches"]["range_diff"][0]["sign"] == "="
    # Both release commits are kept where the printed command finds them.
    objects = back["tree"]["objects"]
    assert objects["old"] == back["branch"]["old"] and objects["new"] == back["branch"]["new"]
    for tree in (back["tree"]["old"], back["tree"]["new"]):
        assert git("--git-dir", objects["git_dir"], "cat-file", "-t", tree, cwd=proj.root) == "tree"
    assert git("--git-dir", objects["git_dir"], "rev-parse", f"refs/zmr/diff/{objects['new']}", cwd=proj.root) == objects["new"]
    shown = git(*objects["command"].split()[1:], "--stat", cwd=proj.root)
    assert f"{len(numstat)} files changed" in shown
    # A commit on a side branch: neither pin is an ancestor of the other.
    git("checkout", "-q", "-b", "side", up.commits[0], cwd=up.path)
    side = up.commit({"src/side.py": "side = 1\n"}, "side work")
    manifest(proj, up, side)
    code, data, err = run_json(proj, base)
    assert code == 0, err
    assert component(data, "toy/rollout")["pin"] == {"old": old, "new": side, "commits": 1, "direction": "unrelated"}


# -- statuses ---------------------------------------------------------------------------------------


def test_added_removed_and_broken_components(proj, up):
    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.series("gone", "trainer", [])
    manifest(proj, up, pin, model="gone", component="trainer")
    proj.commit_all("two models")
    base = proj.ref("HEAD")
    (proj.root / "manifests/gone.yaml").unlink()
    proj.series("new", "trainer", [("0001-b.patch", patch(up, pin, 1, 5, "Patch B"))])
    manifest(proj, up, pin, model="new", component="trainer")
    code, data, err = run_json(proj, base)
    assert code == 0, err
    added, removed = component(data, "new/trainer"), component(data, "gone/trainer")
    assert added["status"] == "added" and added["patches"]["added"] == ["0001-b.patch"]
    assert added["pin"] == {"old": None, "new": pin, "commits": None, "direction": None}
    assert added["branch"]["old"] is None and added["branch"]["new"]
    assert removed["status"] == "removed" and removed["branch"]["new"] is None and removed["tree"]["new"] is None
    assert component(data, "toy/rollout")["status"] == "unchanged"
    # A series that no longer applies on the head side: reported as broken, naming the side; exit 2.
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A")), ("0002-again.patch", patch(up, pin, 0, 5, "Patch A again"))])
    result = zmr("diff", "--json", base, "toy", cwd=proj.root)
    assert result.returncode == 2, result.stderr
    broken = component(json.loads(result.stdout), "toy/rollout")
    assert broken["status"] == "broken" and broken["reason"].startswith("head (working tree): ")
    assert "0002-again.patch" in broken["reason"]
    assert "1 component broken: toy/rollout" in result.stderr and "Traceback" not in result.stderr
    # Only the named model, and -c: only that component.
    code, data, err = run_json(proj, base, "new")
    assert [f"{c['model']}/{c['component']}" for c in data["components"]] == ["new/trainer"]
    code, data, err = run_json(proj, base, "-c", "trainer")
    assert sorted(c["model"] for c in data["components"]) == ["gone", "new"]


def test_bad_base_or_head_names_the_side(proj, up):
    pin = up.commits[1]
    proj.series("toy", "rollout", [])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    for args, side in ((["no-such-rev"], "base"), (["HEAD", "no-such-rev"], "head"), (["--", "-x"], "base")):
        result = zmr("diff", *args, cwd=proj.root)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(f"zmr: error: {side}: "), result.stderr
        assert "is not a revision" in result.stderr and "Traceback" not in result.stderr
    # A side whose manifests do not validate.
    proj.write("manifests/toy.yaml", "model: toy\ncomponents:\n  rollout:\n    upstream: 3\n")
    proj.commit_all("broken manifest")
    result = zmr("diff", "HEAD~1", "HEAD", cwd=proj.root)
    assert result.returncode == 2
    assert result.stderr.startswith("zmr: error: head (HEAD): ") and "manifests/toy.yaml:" in result.stderr, result.stderr
    result = zmr("diff", "HEAD", "HEAD~1", cwd=proj.root)
    assert result.returncode == 2 and result.stderr.startswith("zmr: error: base (HEAD): "), result.stderr


def test_a_revision_is_read_from_git_objects_with_the_working_tree_checks(proj, up, tmp_path):
    """A committed link that leaves the repository is refused as in a working tree, and never read."""
    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    secret = tmp_path / "secret.patch"
    secret.write_text("TOKEN=hunter2\n")
    os.symlink(secret, proj.root / "patches/toy/rollout/0001-a.patch.link")
    (proj.root / "patches/toy/rollout/series").write_text("0001-a.patch.link\n")
    proj.commit_all("a link out")
    result = zmr("diff", "--json", "HEAD", "HEAD~1", cwd=proj.root)  # the link is on the base side
    assert result.returncode == 2, result.stderr
    broken = component(json.loads(result.stdout), "toy/rollout")
    assert broken["status"] == "broken" and broken["reason"].startswith("base (HEAD): ")
    assert "outside" in broken["reason"] and "hunter2" not in result.stdout + result.stderr
    # Nothing of the revision was checked out into the repository.
    assert git("status", "--porcelain", cwd=proj.root) == ""


# -- markdown ----------------------------------------------------------------------------------------


def _report(count: int, interdiff_lines: int, tree_lines: int = 3):
    from zmr.ops.diff import ComponentDiff, DiffReport, FileChange, PatchChanges, PinMove, TreeDiff
    from zmr.ops.upstream import Pair

    body = "1:  aaaa ! 1:  bbbb Patch\n" + "".join(f"    -old line {i}\n    +new line {i} ```\n" for i in range(interdiff_lines))
    tree_patch = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n" + "".join(f"+tree line {i}\n" for i in range(tree_lines))
    pairs = [
        Pair(0, 0, "0001-x.patch", "0001-x.patch", "!", "Patch", "code", "content", body),
        Pair(1, 1, "0002-y.patch", "0002-y.patch", "=", "Same"),
        Pair(None, 2, None, "0003-z.patch", ">", "Added", diff="diff --git a/src/z.py b/src/z.py\n+z = 1\n"),
    ]
    components = [
        ComponentDiff(
            "m",
            f"c{i}",
            "changed",
            PinMove("a" * 40, "b" * 40, 3, "forward"),
            f"zmr/m/c{i}",
            PatchChanges(pairs),
            TreeDiff("c" * 40, "d" * 40, (FileChange("src/x.py", tree_lines, 1),), tree_patch, ("src/x.py",), ("src/x.py",)),
            ("e" * 40, "f" * 40),
        )
        for i in range(count)
    ]
    return DiffReport("1" * 40, "main", "2" * 40, "HEAD", components)


def test_markdown_fits_one_github_comment_and_says_what_it_left_out():
    from zmr.cli.diffmarkdown import COMMENT_LIMIT, MARKER, render

    small = render(_report(2, 3))
    assert small.startswith(MARKER + "\n") and "Truncated" not in small
    assert "`m/c1`" in small and "left out" not in small
    # Per component: the range-diff, the interdiff, the added patch, the release tree's diff of the file the series touches.
    assert small.count("<details") == 2 * 4
    assert "1: 0001-x.patch ! 1: 0001-x.patch Patch  [code]" in small and "-: - > 3: 0003-z.patch Added" in small
    assert "````diff" in small  # the fence is longer than the backticks inside
    assert "+z = 1" in small and " src/x.py | 4 +++-" in small and "+tree line 2" in small
    # One huge release-tree diff: only it is folded (largest first), and its place says what it was and how to see it.
    huge = render(_report(2, 3, tree_lines=5000))
    assert len(huge) <= COMMENT_LIMIT and "**Truncated** to fit one comment" in huge
    assert "+tree line 4999" not in huge and "+new line 2" in huge and "+z = 1" in huge
    # Cut, not dropped (#47.9): each shows its head, then says how much it left out and where to see it.
    assert huge.count("+tree line 0\n") == 2 and len(re.findall(r"_first \d+ of 5007 lines shown; \d+ lines \(\d+ characters\) left out", huge)) == 2
    assert "`zmr diff 111111111111 222222222222 m -c c0` shows them" in huge
    assert "left out parts of 2 blocks" in huge
    # Many components with big diffs: blocks folded, then whole sections left out, and said.
    big = render(_report(60, 400, tree_lines=400))
    assert len(big) <= COMMENT_LIMIT
    assert big.startswith(MARKER + "\n")
    assert "**Truncated** to fit one comment" in big
    shown = big.count("### `m/c")
    assert 0 < shown < 60
    assert f"the sections of {60 - shown} components" in big
    assert "`zmr diff 111111111111 222222222222` in a clone shows all of it" in big
    # A release tree of many files: the comment's stat lists the first 200, says how many more, and totals all of them.
    from zmr.ops.diff import FileChange
    from zmr.cli.diffmarkdown import stat_text

    many = [FileChange(f"src/m{i}.py", i, 1) for i in range(300)]
    capped = stat_text(many, limit=200)
    assert " src/m199.py | 200 " in capped and "m200.py" not in capped and " ... and 100 more files\n" in capped
    assert capped.endswith(f" 300 files changed, {sum(range(300))} insertions(+), 300 deletions(-)\n")
    # Text from the repository cannot write markdown: a name with backticks stays one code span.
    from zmr.cli.diffmarkdown import code

    assert code("a`b") == "``a`b``" and code("@here") == "`@here`"


def test_markdown_file_from_the_cli(proj, up, tmp_path):
    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A", body="Explained."))])
    out = tmp_path / "comment.md"
    result = zmr("diff", "--markdown", str(out), cwd=proj.root)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.startswith("<!-- zmr-diff -->\n## zmr diff: 1 of 1 component change")
    assert "### `toy/rollout`: changed" in text and "+    Explained." in text


# -- CI: the untrusted pull-request workflow -------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def _load(path: Path) -> dict:
    import yaml

    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def _lint(*files: Path, cwd: Path | None = None) -> None:
    from conftest import actionlint

    result = actionlint(*files, cwd=cwd)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def _uses(job: dict) -> tuple[str, dict]:
    """The job's one use of zmr's action: (reference, inputs)."""
    (step,) = [s for s in job["steps"] if s.get("uses", "") == "./" or s.get("uses", "").startswith("Inferact/zero-mismatch-rl@")]
    return step["uses"], step["with"]


def _check_pair(pr_workflow: dict, comment_workflow: dict) -> None:
    """The unprivileged job computes and uploads (the action's diff); the workflow_run job posts (its diff-comment)."""
    job = pr_workflow["jobs"]["diff"]
    assert job["if"] == "github.event_name == 'pull_request'"
    assert "permissions" not in job and pr_workflow["permissions"] == {"contents": "read"}  # read-only token, no secrets
    assert "secrets." not in str(job)
    assert _uses(job)[1] == {"command": "diff", "untrusted": True}  # `comment` off: the workflow_run workflow posts
    checkout = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"] == {"persist-credentials": False, "fetch-depth": 0}
    assert comment_workflow["on"] == {"workflow_run": {"workflows": [pr_workflow["name"]], "types": ["completed"]}}
    assert comment_workflow["permissions"] == {}
    (name, post), *others = comment_workflow["jobs"].items()
    assert not others and post["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert post["if"] == "github.event.workflow_run.event == 'pull_request'"
    assert _uses(post)[1] == {"command": "diff-comment"}
    for step in post["steps"]:  # never checks out or runs the pull request's code: at most the default branch's files
        assert "run" not in step and "ref" not in step.get("with", {}), step
    # The action's steps: the diff job uploads what the comment step downloads and checks.
    action = yaml.safe_load((REPO_ROOT / "action.yml").read_text())
    steps = {step.get("name", ""): step for step in action["runs"]["steps"]}
    assert steps["Upload the diff"]["with"]["name"] == "zmr-diff"
    script = steps["Post the diff of the pull request's run"]["run"]
    assert 'gh run download "$RUN_ID" --name zmr-diff' in script
    assert "*[!0-9]*" in script and '!= "$HEAD_SHA"' in script  # the artifact's number is checked against the run
    poster = (REPO_ROOT / "action/post-comment").read_text()
    assert 'marker="<!-- zmr-diff -->"' in poster and "startswith(env.MARKER)" in poster
    assert "-X PATCH" in poster and "-X POST" in poster  # edits its earlier comment, else posts one


def test_this_repositorys_workflows_post_the_diff_of_untrusted_pull_requests():
    from zmr.cli.diffmarkdown import MARKER

    pr_workflow, comment = WORKFLOWS / "zmr.yml", WORKFLOWS / "zmr-diff-comment.yml"
    _check_pair(_load(pr_workflow), _load(comment))
    assert f'marker="{MARKER}"' in (REPO_ROOT / "action/post-comment").read_text()
    _lint(pr_workflow, comment)


def test_zmr_init_writes_both_workflows(tmp_path):
    import shutil

    repo = tmp_path / "new"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    result = zmr("init", "--json", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert ".github/workflows/zmr-diff-comment.yml" in json.loads(result.stdout)["created"]
    pr_workflow, comment = repo / ".github/workflows/zmr.yml", repo / ".github/workflows/zmr-diff-comment.yml"
    _check_pair(_load(pr_workflow), _load(comment))
    # Linted with the action as `./` (actionlint reads a local action's inputs; it does not fetch a remote one).
    shutil.copy(REPO_ROOT / "action.yml", repo / "action.yml")
    for path in (pr_workflow, comment):
        path.write_text(re.sub(r"uses: Inferact/zero-mismatch-rl@[0-9a-f]{40}", "uses: ./", path.read_text()))
    _lint(pr_workflow, comment, cwd=repo)


def test_a_revisions_files_keep_the_working_trees_size_limits(proj, up):
    from zmr.model.series import MAX_SERIES_BYTES

    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    (proj.root / "patches/toy/rollout/series").write_text("0001-a.patch\n" + "#" * MAX_SERIES_BYTES + "\n")
    proj.commit_all("a series over the limit")
    result = zmr("diff", "--json", "HEAD", "HEAD~1", cwd=proj.root)
    assert result.returncode == 2, result.stderr
    broken = component(json.loads(result.stdout), "toy/rollout")
    assert broken["reason"].startswith("base (HEAD): ") and f"over the limit of {MAX_SERIES_BYTES}" in broken["reason"], broken["reason"]


def test_a_revisions_named_folders_and_bundled_upstreams_are_its_own(proj, up, tmp_path):
    """`patches:` folders outside patches/ and an upstream bundle inside the repository are read from the revision."""
    pin = up.commits[1]
    (proj.root / "upstreams").mkdir()
    git("bundle", "create", str(proj.root / "upstreams/up.bundle"), "main", cwd=up.path)
    proj.write("series-elsewhere/series", "0001-a.patch\n")
    proj.write("series-elsewhere/0001-a.patch", patch(up, pin, 0, 5, "Patch A"))
    proj.series("toy", "trainer", [("0001-b.patch", patch(up, pin, 1, 5, "Patch B"))])
    proj.manifest(
        "toy",
        f"""
        model: toy
        components:
          rollout:
            upstream: upstreams/up.bundle
            commit: {pin}
            patches: series-elsewhere
          trainer:
            upstream: upstreams/up.bundle
            commit: {pin}
            patches: patches/toy/trainer
        """,
    )
    proj.commit_all("named folders")
    base = proj.ref("HEAD")
    proj.write("series-elsewhere/0001-a.patch", patch(up, pin, 0, 5, "Patch A", body="Reworded."))
    proj.commit_all("reword A")
    (proj.root / "upstreams/up.bundle").unlink()  # the working tree has no bundle now: both sides are revisions
    code, data, err = run_json(proj, base, "HEAD", "--untrusted")
    assert code == 0, err
    assert component(data, "toy/rollout")["status"] == "changed"
    assert [c["old"] for c in component(data, "toy/rollout")["patches"]["changed"]] == ["0001-a.patch"]
    assert component(data, "toy/trainer")["status"] == "unchanged"


# -- one pairing for diff, rebase and update: what a reviewer must check ------------------------------


def _fixture_model(proj, upstream) -> tuple[str, str, str]:
    """conftest's toy model (two patches on src/model.py line 10 and matmul.py): (pin, model.py there, the zmr commit)."""
    from conftest import simple_model

    pin = simple_model(proj, upstream)
    return pin, upstream.file_at(pin, "src/model.py") + "\n", proj.ref("HEAD")


def test_a_conflict_resolved_by_hand_is_a_changed_pair_in_the_rebase_report_and_in_diff(proj, upstream, tmp_path):
    import re

    pin, model_py, base = _fixture_model(proj, upstream)
    upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    new = upstream.commit({"docs/guide.md": "guide v2\n"}, "Update the guide")
    stopped = zmr("rebase", "toy", "--onto", new, cwd=proj.root)
    assert stopped.returncode == 1, stopped.stderr
    co = proj.root / "work/toy/rollout"
    # The resolution rewrites the patch well past what git range-diff still pairs with the old one.
    resolution = "".join(f"split part {k}: a fixed size per row block, whatever the batch\n" for k in range(8))
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", resolution, text, flags=re.S))
    git("add", "src/model.py", cwd=co)
    report = tmp_path / "rebase.md"
    done = zmr("rebase", "toy", "--continue", "--json", "--report", str(report), cwd=proj.root)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["added"] == [] and [c["name"] for c in data["changed"]] == ["0001-fixed-split.patch"]
    changed = data["changed"][0]
    assert (changed["kind"], changed["paired_by"]) == ("code", "name")  # range-diff alone saw two different patches
    assert re.match(r"\s*1:\s+[0-9a-f]+ ! 1:\s+[0-9a-f]+ Use a fixed split size in matmul\n", changed["range_diff"])
    assert "-+line 10 fixed split" in changed["range_diff"] and "++split part 7: a fixed size" in changed["range_diff"]
    body = report.read_text()
    assert "## Changed (1)" in body and "- `0001-fixed-split.patch` Use a fixed split size in matmul (code, paired by name)" in body
    assert "++split part 0" in body and "## Added" not in body
    # zmr diff of the commit that records the rebase: the same pair, with its interdiff, not a patch added and one removed.
    proj.commit_all("rebase toy onto upstream")
    code, diffed, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    entry = component(diffed, "toy/rollout")
    patches = entry["patches"]
    assert (patches["added"], patches["removed"], patches["unchanged"]) == ([], [], 1)
    assert [(c["old"], c["new"], c["kind"], c["paired_by"]) for c in patches["changed"]] == [
        ("0001-fixed-split.patch", "0001-fixed-split.patch", "code", "name")
    ]
    assert "++split part 7" in patches["changed"][0]["interdiff"]
    assert [p["sign"] for p in patches["range_diff"]] == ["!", "="]
    assert entry["pin"]["direction"] == "forward" and entry["pin"]["commits"] == 3  # the fixture upstream had one more commit
    text = zmr("diff", base, "HEAD", cwd=proj.root).stdout
    assert "    1: 0001-fixed-split.patch ! 1: 0001-fixed-split.patch Use a fixed split size in matmul  [code]" in text
    assert "  interdiff 0001-fixed-split.patch (code, paired by name):" in text and "    ++split part 7" in text


def test_a_3_way_merged_patch_is_paired_in_the_update_report_and_diff_calls_it_context(proj, upstream, tmp_path):
    pin, model_py, base = _fixture_model(proj, upstream)
    # Upstream rewrites the lines around the patched one (not next to it): git apply refuses, the 3-way merge takes it.
    around = model_py
    for k in (7, 8, 12, 13):
        around = around.replace(f"line {k}\n", f"line {k}: reworded upstream, quite a lot longer than before\n")
    new = upstream.commit({"src/model.py": around}, "Reword the lines around line 10")
    report = tmp_path / "update.md"
    result = zmr("update", "toy", "--json", "--apply", "--report", str(report), cwd=proj.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert data["applied"] is True and data["target"] == new
    assert [(c["name"], c["kind"]) for c in data["changed"]] == [("0001-fixed-split.patch", "context")]
    block = data["changed"][0]["range_diff"]
    assert block.lstrip().startswith("1:") and " ! 1:" in block.splitlines()[0]  # both sides
    assert "line 8: reworded upstream" in block
    body = report.read_text()
    assert "### Changed (1)" in body and "- `0001-fixed-split.patch` `Use a fixed split size in matmul` (context, paired by" in body
    # The commit that records the update, as a reviewer sees it: the pin moved, the patch changed in its context only.
    proj.commit_all("update toy")
    code, diffed, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    entry = component(diffed, "toy/rollout")
    assert entry["pin"] == {"old": pin, "new": new, "commits": 2, "direction": "forward"}  # the fixture upstream had one more commit
    assert [(c["new"], c["kind"]) for c in entry["patches"]["changed"]] == [("0001-fixed-split.patch", "context")]
    files = {f["path"]: (f["insertions"], f["deletions"]) for f in entry["tree"]["files"]}
    assert files == {"src/model.py": (4, 4), "src/kernels/attention.py": (2, 0), "setup.cfg": (2, 0)}  # upstream's, nothing of the patch
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (3, 8, 4)
    text = zmr("diff", base, "HEAD", cwd=proj.root).stdout
    assert "  interdiff 0001-fixed-split.patch: context only (" in text and "folded" in text
    assert "\n-line 7\n-line 8\n+line 7: reworded upstream" in text  # the release tree's unified diff
    out = tmp_path / "comment.md"
    assert zmr("diff", "--markdown", str(out), base, "HEAD", cwd=proj.root).returncode == 0
    comment = out.read_text()
    assert "<details><summary>interdiff `0001-fixed-split.patch`: context only (the pin moved)</summary>" in comment  # closed
    assert "<details open><summary>the series' change: range-diff" in comment
    assert "release tree, the files a patch touches (1 file" in comment and "upstream's own change: unified diff" in comment


def test_the_pull_request_workflows_post_the_new_markdown(proj, up, tmp_path):
    """The diff job's own step makes the comment; the comment workflow's own script posts it (gh is a recorder here)."""
    pin = up.commits[1]
    (proj.root / "upstreams").mkdir()
    git("bundle", "create", str(proj.root / "upstreams/up.bundle"), "main", cwd=up.path)  # --untrusted: upstreams inside the repository
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    proj.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: upstreams/up.bundle\n    commit: {pin}\n")
    proj.commit_all("toy")
    base = proj.ref("HEAD")
    proj.series(
        "toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A", new="value 5 patched again")), ("0002-b.patch", patch(up, pin, 1, 7, "Patch B"))]
    )
    proj.commit_all("the pull request")
    from test_action import _inputs, _run_step

    runner = tmp_path / "runner"
    runner.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorded = tmp_path / "posted.md"
    gh = bin_dir / "gh"
    # `gh run download` hands over the artifact the diff job uploaded; `gh api` answers the head and posts.
    gh.write_text(
        "#!/bin/sh\n"
        'case "$1 $2" in\n'
        f'  "run download") mkdir -p "$7" && cp {runner}/zmr/diff/* "$7"/ ;;\n'
        '  "api repos/"*) case "$2" in */pulls/*) echo "$HEAD_SHA" ;; esac ;;\n'
        '  "api --paginate") ;;\n'
        f'  "api -X") [ "$3" = POST ] && for a in "$@"; do case "$a" in body=@*) cp "${{a#body=@}}" {recorded} ;; esac; done ;;\n'
        "esac\n"
    )
    gh.chmod(0o755)
    pull_request = {"event.pull_request.base.sha": base, "event.pull_request.number": "7"}
    ran = _run_step("Run zmr", proj.root, runner, _inputs("diff", untrusted="true"), pull_request)
    assert ran.returncode == 0 and (runner / "output").read_text() == "status=0\n", ran.stdout + ran.stderr
    made = (runner / "zmr/diff/diff.md").read_text()
    workflow_run = {"event.workflow_run.id": "1", "event.workflow_run.head_sha": "abc", "repository": "o/r", "token": "t"}
    ran = _run_step("Post the diff", tmp_path, runner, _inputs("diff-comment"), workflow_run, bin_dir)
    assert ran.returncode == 0 and "commented on #7" in ran.stdout, ran.stdout + ran.stderr
    assert recorded.read_text() == made  # the comment is zmr diff's markdown, byte for byte
    assert made.startswith(MARKER_LINE) and "<details open><summary>the series' change: range-diff (2 lines)</summary>" in made
    assert "interdiff `0001-a.patch`: code changed" in made and "+value 5 patched again" in made
    assert "added patch `0002-b.patch`" in made and "release tree, the files a patch touches" in made


def test_the_text_goes_through_gits_pager_on_a_terminal(proj, up, tmp_path):
    import pty

    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A", new="value 5 on a terminal"))])

    def on_a_terminal(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[bytes]:
        main, terminal = pty.openpty()
        try:
            clean = {k: v for k, v in os.environ.items() if k not in ("PAGER", "GIT_PAGER", "CI", "NO_COLOR")}
            return subprocess.run(
                [sys.executable, "-m", "zmr", "-q", *options, "diff"], cwd=proj.root, stdout=terminal, stderr=subprocess.PIPE, env={**clean, **env}, timeout=300
            )
        finally:
            os.close(terminal)
            os.close(main)

    paged = tmp_path / "paged.txt"
    assert on_a_terminal({"GIT_PAGER": f"cat > {paged}"}).returncode == 0
    text = paged.read_text()
    assert text.startswith("base ") and "+value 5 on a terminal" in text and "\x1b[32m" in text  # a terminal: coloured, as git does
    # No GIT_PAGER: core.pager of the repository, then PAGER.
    git("config", "core.pager", f"cat > {tmp_path / 'core.txt'}", cwd=proj.root)
    assert on_a_terminal({"PAGER": f"cat > {tmp_path / 'pager.txt'}"}).returncode == 0
    assert "+value 5 on a terminal" in (tmp_path / "core.txt").read_text() and not (tmp_path / "pager.txt").exists()
    git("config", "--unset", "core.pager", cwd=proj.root)
    assert on_a_terminal({"PAGER": f"cat > {tmp_path / 'pager.txt'}"}).returncode == 0
    assert "+value 5 on a terminal" in (tmp_path / "pager.txt").read_text()
    # zmr --no-pager, as git --no-pager: the text on the terminal itself.
    unpaged = tmp_path / "unpaged.txt"
    assert on_a_terminal({"GIT_PAGER": f"cat > {unpaged}"}, "--no-pager").returncode == 0
    assert not unpaged.exists()


def test_kept_release_commits_are_refs_dated_by_their_reflog_and_pruned_by_age(proj, up):
    import time

    pin = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, pin, 0, 5, "Patch A"))])
    manifest(proj, up, pin)
    proj.commit_all("toy")
    base = proj.ref("HEAD")
    manifest(proj, up, up.commits[3])
    proj.commit_all("move the pin")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    first = component(data, "toy/rollout")
    objects = first["tree"]["objects"]
    mirror = objects["git_dir"]
    assert Path(mirror).parent == Path(os.environ["ZMR_CACHE"]) / "mirrors"  # the cache's mirror, never the repository
    assert proj.root / ".git" != Path(mirror) and git("for-each-ref", "refs/zmr/diff/", cwd=proj.root) == ""
    now = int(time.time())
    for name, days in (("stale", 20), ("recent", 2)):
        when = {"GIT_COMMITTER_DATE": f"@{now - days * 86400} +0000"}
        git("--git-dir", mirror, "update-ref", "--create-reflog", "-m", "an earlier diff", f"refs/zmr/diff/{name}", objects["old"], cwd=proj.root, env=when)
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    again = component(data, "toy/rollout")
    assert again["branch"] == first["branch"] and again["tree"]["objects"] == objects  # no clock in any id
    kept = git("--git-dir", mirror, "for-each-ref", "--format=%(refname)", "refs/zmr/diff/", cwd=proj.root).split()
    assert sorted(kept) == sorted({f"refs/zmr/diff/{objects['old']}", f"refs/zmr/diff/{objects['new']}", "refs/zmr/diff/recent"})
    # Each ref the diff showed was made anew: its reflog entry is this run's.
    stamp = git("--git-dir", mirror, "log", "-g", "--format=%gd", "--date=unix", f"refs/zmr/diff/{objects['new']}", cwd=proj.root)
    assert [int(line.rpartition("@{")[2].rstrip("}")) >= now - 5 for line in stamp.splitlines()] == [True]


def _shell(command: str, cwd: Path) -> str:
    """*command* run as a reviewer pastes it: by a shell, in *cwd*, with no GIT_ variable of zmr's or the tests'."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_printed_git_diff_run_as_printed_shows_the_release_tree_diff(proj, up, tmp_path):
    """The command in the text and in objects.command, pasted into a shell in the project folder, shows the very diff zmr counted.

    Upstream renamed a file between the pins (git diff would show a rename of
    1 file where zmr counts 2); the ids are found through objects.git_dir,
    never in the project's repository; a second upstream URL is read
    through an alternate that the command names.
    """
    old = up.commits[1]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, old, 0, 5, "Patch A"))])
    manifest(proj, up, old)
    proj.commit_all("old pin")
    base = proj.ref("HEAD")
    new = up.commit({"src/f5.py": None, "src/g5.py": BIG, "src/f1.py": _edit(BIG, 9, "value 9 upstream")}, "rename f5, change f1")
    manifest(proj, up, new)
    proj.commit_all("new pin")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    tree = component(data, "toy/rollout")["tree"]
    objects = tree["objects"]
    assert {f["path"] for f in tree["files"]} >= {"src/f5.py", "src/g5.py", "src/f1.py"}
    assert Path(objects["git_dir"]).is_absolute() and objects["alternates"] == []
    assert shlex.split(objects["command"]) == ["git", f"--git-dir={objects['git_dir']}", "diff", "--no-renames", "--full-index", objects["old"], objects["new"]]
    assert _shell(objects["command"], proj.root) == tree["patch"]
    # The text prints the same command; from another folder it works as well.
    text = zmr("diff", "--color=never", base, "HEAD", cwd=proj.root)
    assert text.returncode == 0, text.stderr
    printed = [line.split(": ", 1)[1] for line in text.stdout.splitlines() if line.lstrip().startswith("release tree ")]
    assert printed == [objects["command"]]
    assert _shell(printed[0], tmp_path) == tree["patch"]
    for tree_id in (tree["old"], tree["new"]):
        assert git("--git-dir", objects["git_dir"], "cat-file", "-t", tree_id, cwd=proj.root) == "tree"
        assert git("cat-file", "-t", tree_id, cwd=proj.root, check=False) == ""  # the project's own repository is left alone
    # The upstream moved to another URL: the old side is in the other mirror, which the command adds as an alternate.
    moved = tmp_path / "moved.git"
    git("clone", "-q", "--bare", str(up.path), str(moved))
    proj.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {moved}\n    commit: {new}\n")
    proj.commit_all("moved upstream")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    tree = component(data, "toy/rollout")["tree"]
    objects = tree["objects"]
    assert len(objects["alternates"]) == 1 and Path(objects["alternates"][0]).parent != Path(objects["git_dir"])
    assert objects["command"].startswith("GIT_ALTERNATE_OBJECT_DIRECTORIES=")
    assert _shell(objects["command"], proj.root) == tree["patch"]
    assert git("--git-dir", str(Path(objects["alternates"][0]).parent), "rev-parse", f"refs/zmr/diff/{objects['old']}", cwd=proj.root) == objects["old"]
    assert git("--git-dir", objects["git_dir"], "rev-parse", f"refs/zmr/diff/{objects['new']}", cwd=proj.root) == objects["new"]


def test_components_with_the_same_release_trees_share_one_patch(proj, up, tmp_path):
    old, new = up.commits[1], up.commits[3]
    a = patch(up, old, 0, 5, "Patch A")
    for comp in ("rollout", "trainer"):
        proj.series("toy", comp, [("0001-a.patch", a)])
    pins = "".join(f"  {comp}:\n    upstream: {up.path}\n    commit: {{pin}}\n" for comp in ("rollout", "trainer"))
    proj.manifest("toy", "model: toy\ncomponents:\n" + pins.format(pin=old))
    proj.commit_all("two components, one pin, one series")
    base = proj.ref("HEAD")
    proj.manifest("toy", "model: toy\ncomponents:\n" + pins.format(pin=new))
    proj.commit_all("move both pins")
    code, data, err = run_json(proj, base, "HEAD")
    assert code == 0, err
    first, second = component(data, "toy/rollout")["tree"], component(data, "toy/trainer")["tree"]
    assert (first["old"], first["new"]) == (second["old"], second["new"])
    assert first["same_as"] is None and first["patch"].startswith("diff --git")
    assert second["same_as"] == "toy/rollout" and second["patch"] is None
    assert second["files"] == first["files"] and second["insertions"] == first["insertions"] > 0
    text = zmr("diff", base, "HEAD", cwd=proj.root).stdout
    assert text.count("diff --git") == first["patch"].count("diff --git")  # printed once
    assert f"  the same trees as toy/rollout: {first['files_changed']} files +{first['insertions']} -{first['deletions']}" in text
    out = tmp_path / "comment.md"
    assert zmr("diff", "--markdown", str(out), base, "HEAD", cwd=proj.root).returncode == 0
    comment = out.read_text()
    assert comment.count("upstream's own change: unified diff") == 1 and "The release tree's diff is `toy/rollout`'s (the same two trees)." in comment


# -- blobs the project has ---------------------------------------------------------------------------


def _packs_holding(mirror: Path, oid: str) -> list[Path]:
    """The packs of *mirror* whose index lists *oid*."""
    found = []
    for index in sorted((mirror / "objects/pack").glob("*.idx")):
        listed = subprocess.run(["git", "show-index"], stdin=index.open("rb"), capture_output=True, text=True, check=True).stdout
        if any(line.split()[1] == oid for line in listed.splitlines()):
            found.append(index.with_suffix(".pack"))
    return found


def _fetched(pack: Path) -> bool:
    """A pack a fetch from the upstream wrote (git marks those of a partial-clone fetch with a ``.promisor`` file)."""
    return pack.with_suffix(".promisor").exists()


def _pin_move_with_base_built(proj, up) -> tuple[str, str, list[str]]:
    """A pin move whose base side's release branch is built in the project (with a cache of its own, as on another
    machine: the diffs below start from an empty one): (base commit, the old blob of a file upstream changed between
    the pins, the new blobs)."""
    git("config", "uploadpack.allowFilter", "true", cwd=up.path)
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=up.path)
    old, new = up.commits[1], up.commits[3]
    proj.series("toy", "rollout", [("0001-a.patch", patch(up, old, 0, 5, "Patch A"))])
    manifest(proj, up, old)
    proj.commit_all("old pin")
    base = proj.ref("HEAD")
    built = zmr("build", "toy", cwd=proj.root, env={"ZMR_CACHE": str(proj.root.parent / "cache-of-the-build")})
    assert built.returncode == 0, built.stderr
    manifest(proj, up, new)
    proj.commit_all("new pin")
    changed = ("docs/guide.md", "src/extra.py", "src/later.py")
    assert git("diff", "--name-only", old, new, cwd=up.path).split() == list(changed)
    assert not mirrors()
    return base, git("rev-parse", f"{old}:docs/guide.md", cwd=up.path), [git("rev-parse", f"{new}:{path}", cwd=up.path) for path in changed]


def _diff_in(proj, cache: Path, *args: str, env: dict | None = None, verbose: bool = False) -> tuple[dict, Path, subprocess.CompletedProcess[str]]:
    """``zmr diff --json ARGS`` with *cache* (empty at first): the report, the upstream's mirror there, the process (``-v`` with *env* or *verbose*)."""
    result = zmr(*(["-v"] if env or verbose else []), "diff", "--json", *args, cwd=proj.root, env={"ZMR_CACHE": str(cache), **(env or {})})
    assert result.returncode == 0, result.stderr
    (mirror,) = sorted((cache / "mirrors").glob("*.git"))
    return json.loads(result.stdout), mirror, result


def test_a_pin_moves_old_blobs_come_from_the_projects_release_branch_not_the_network(proj, up, tmp_path):
    base, old_blob, new_blobs = _pin_move_with_base_built(proj, up)
    data, mirror, _ = _diff_in(proj, tmp_path / "cache", base, "HEAD")
    tree = component(data, "toy/rollout")["tree"]
    assert (tree["files_changed"], tree["insertions"], tree["deletions"]) == (3, 4, 1)
    assert "+guide v2" in tree["patch"] and "-guide" in tree["patch"]
    # The old side's blob was copied from the project's rollout/toy (a pack no fetch wrote); the new side's were fetched.
    assert [_fetched(p) for p in _packs_holding(mirror, old_blob)] == [False]
    assert all(_packs_holding(mirror, oid) and all(map(_fetched, _packs_holding(mirror, oid))) for oid in new_blobs)
    # The printed command shows the same diff from what the mirror now holds.
    assert git(*tree["objects"]["command"].split()[1:], cwd=proj.root) + "\n" == tree["patch"]


def test_blobs_are_not_taken_from_a_partial_clone_or_from_an_object_that_is_not_what_its_id_says(proj, up, tmp_path):
    base, old_blob, _ = _pin_move_with_base_built(proj, up)
    # A partial clone: asking it which objects it has could start a fetch there (git before 2.44). It is not asked.
    git("config", "core.repositoryformatversion", "1", cwd=proj.root)
    git("config", "extensions.partialClone", "origin", cwd=proj.root)
    data, mirror, _ = _diff_in(proj, tmp_path / "cache-partial", base, "HEAD")
    assert component(data, "toy/rollout")["tree"]["insertions"] == 4
    assert [_fetched(p) for p in _packs_holding(mirror, old_blob)] == [True]
    git("config", "--unset", "extensions.partialClone", cwd=proj.root)
    # An object whose bytes are not what its id says (a damaged or forged loose object): index-pack names the bytes by
    # their own id, so the wanted blob is still missing and is fetched; the diff is the true one.
    _forge(proj, old_blob, tmp_path)
    data, mirror, _ = _diff_in(proj, tmp_path / "cache-forged", base, "HEAD")
    tree = component(data, "toy/rollout")["tree"]
    assert (tree["insertions"], tree["deletions"]) == (4, 1) and "forged" not in tree["patch"]
    assert [_fetched(p) for p in _packs_holding(mirror, old_blob)] == [True]
    forged = subprocess.run(["git", "hash-object", "--stdin"], input="forged\n", capture_output=True, text=True, check=True).stdout.strip()
    assert [_fetched(p) for p in _packs_holding(mirror, forged)] == [False]  # copied, under the id of its own bytes


def _forge(proj, oid: str, tmp_path: Path) -> None:
    """Every object of the project loose, and *oid*'s file holding the bytes of another blob ("forged\\n")."""
    git("repack", "-a", "-d", "-q", cwd=proj.root)
    for pack in sorted((proj.root / ".git/objects/pack").glob("pack-*.pack")):
        moved = tmp_path / pack.name
        pack.rename(moved)
        for other in pack.parent.glob(f"{pack.stem}.*"):
            other.unlink()
        subprocess.run(["git", "unpack-objects", "-q"], stdin=moved.open("rb"), cwd=proj.root, check=True)
    loose = proj.root / ".git/objects" / oid[:2] / oid[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 7\0forged\n"))


def test_a_full_disk_while_copying_the_projects_blobs_leaves_no_half_pack_and_the_copy_is_made_again(proj, up, tmp_path):
    """The fault hits the first copy (the prefetch, which leaves failures to the tree diff); the tree diff copies again."""
    base, old_blob, _ = _pin_move_with_base_built(proj, up)
    data, mirror, result = _diff_in(proj, tmp_path / "cache", base, "HEAD", env={"ZMR_TEST_FAULT": "git index-pack=ENOSPC"})
    assert re.findall(r"zmr: git index-pack --stdin .*: exit (\d+)", result.stderr) == ["128", "0"], result.stderr  # failed, then made
    tree = component(data, "toy/rollout")["tree"]
    assert (tree["insertions"], tree["deletions"]) == (4, 1)
    assert not list(mirror.glob("objects/pack/tmp_*"))
    assert [_fetched(p) for p in _packs_holding(mirror, old_blob)] == [False]


# -- the new pin's blobs, by a fetch that walks both trees --------------------------------------------

LONG = "".join(f"line {i}: long enough that the server sends a new version as a delta against the old one\n" for i in range(400))


def _two_pins(proj, up, readme: str) -> tuple[str, str, str]:
    """The project's component pinned to *up*'s first commit with one patch of README.md (to *readme*), then to its
    second: (old pin, new pin, the project's commit of the old pin); HEAD is the new pin's."""
    old, new = up.commits
    proj.series("toy", "rollout", [("0001-a.patch", make_patch(up, old, {"README.md": readme}, "Patch A"))])
    manifest(proj, up, old)
    proj.commit_all("old pin")
    base = proj.ref("HEAD")
    manifest(proj, up, new)
    proj.commit_all("new pin")
    return old, new, base


def _long_pin_move(proj, tmp_path: Path, *, build: str = "old"):
    """An upstream whose pin move drops one line of three long files, the release branch of the *build* side built in
    the project (with a cache of its own): (upstream, base commit, old pin, new pin)."""
    files = {f"src/long{k}.py": LONG.replace("line 7:", f"line 7 of {k}:") for k in range(3)}
    up = make_upstream(tmp_path / "upstream-long", [{"README.md": "long\n", **files}])
    up.commit({path: "".join(line for i, line in enumerate(text.splitlines(keepends=True)) if i != 200) for path, text in files.items()}, "drop a line of each")
    # Packed, the smaller new versions stored as deltas against the old ones: what a thin pack reuses.
    git("repack", "-a", "-d", "-q", cwd=up.path)
    git("config", "uploadpack.allowFilter", "true", cwd=up.path)
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=up.path)
    old, new, base = _two_pins(proj, up, "long, patched\n")
    if build == "old":
        git("checkout", "-q", base, cwd=proj.root)
    built = zmr("build", "toy", cwd=proj.root, env={"ZMR_CACHE": str(tmp_path / "cache-of-the-build")})
    assert built.returncode == 0, built.stderr
    if build == "old":
        git("checkout", "-q", "-", cwd=proj.root)
    return up, base, old, new


def _blob(up, commit: str, path: str) -> str:
    return git("rev-parse", f"{commit}:{path}", cwd=up.path)


def test_a_pin_moved_forward_gets_the_new_blobs_in_one_fetch_of_the_new_pin_whose_delta_bases_come_from_the_project(proj, tmp_path):
    up, base, old, new = _long_pin_move(proj, tmp_path)
    packets = tmp_path / "packets.txt"
    data, mirror, _ = _diff_in(proj, tmp_path / "cache", base, "HEAD", env={"GIT_TRACE_PACKET": str(packets)})
    # The old pin is the one have the server hears of: not the project's branches, which that fetch reads objects from.
    assert re.findall(r"fetch> have (\w+)", packets.read_text()) == [old]
    tree = component(data, "toy/rollout")["tree"]
    assert tree["patch"] == git("diff", "--no-renames", "--full-index", old, new, cwd=up.path) + "\n"
    assert (tree["files_changed"], tree["insertions"], tree["deletions"]) == (3, 0, 3)
    for k in range(3):
        (pack,) = _packs_holding(mirror, _blob(up, new, f"src/long{k}.py"))
        # A fetch that walked the new pin's tree (its root is in the pack), not one by id, which sends blobs alone ...
        assert _fetched(pack) and pack in _packs_holding(mirror, git("rev-parse", f"{new}^{{tree}}", cwd=up.path))
        # ... whose thin pack sent the new version as a delta against the old one, which index-pack read from the
        # project's release branch and appended to the pack.
        assert pack in _packs_holding(mirror, _blob(up, old, f"src/long{k}.py"))


def test_a_pin_moves_missing_blobs_that_are_all_the_old_pins_are_copied_and_the_new_pin_is_not_fetched(proj, tmp_path):
    """Where the mirror lacks only old blobs (a run killed after the fetch, before the copy), the project has them all:
    no fetch of the new pin against the old one, which would bring the new blobs again."""
    from zmr.infra.cache import Cache
    from zmr.infra.git import Repo

    up, _, old, new = _long_pin_move(proj, tmp_path)
    upstream = Cache(tmp_path / "cache").for_upstream(str(up.path), proj.root)
    mirror = upstream.ensure([old, new], paths=()).path  # both pins, blobless
    packs = set((mirror / "objects/pack").glob("*.pack"))
    olds, news = ([_blob(up, pin, f"src/long{k}.py") for k in range(3)] for pin in (old, new))
    upstream.ensure_blobs([old, new], olds, local=Repo(proj.root / ".git"), move=(old, new))
    (copy,) = set((mirror / "objects/pack").glob("*.pack")) - packs
    assert not _fetched(copy) and all(_packs_holding(mirror, oid) == [copy] for oid in olds)
    packs.add(copy)
    upstream.ensure_blobs([old, new], [*olds, *news], local=Repo(proj.root / ".git"), move=(old, new))
    (fetched,) = set((mirror / "objects/pack").glob("*.pack")) - packs  # a new blob missing: the fetch against the old pin
    assert _fetched(fetched) and all(_packs_holding(mirror, oid) == [fetched] for oid in news)
    assert fetched in _packs_holding(mirror, git("rev-parse", f"{new}^{{tree}}", cwd=up.path))


def test_a_delta_base_that_is_not_what_its_id_says_fails_that_fetch_and_the_blobs_are_fetched_by_id(proj, tmp_path):
    up, base, old, new = _long_pin_move(proj, tmp_path)
    old_blob = _blob(up, old, "src/long0.py")
    _forge(proj, old_blob, tmp_path)
    data, mirror, result = _diff_in(proj, tmp_path / "cache", base, "HEAD", verbose=True)
    assert re.search(r"the fetch of \w{12} against \w{12} failed \(.*local object \w+ is corrupt\)", result.stderr), result.stderr
    tree = component(data, "toy/rollout")["tree"]
    assert tree["patch"] == git("diff", "--no-renames", "--full-index", old, new, cwd=up.path) + "\n" and "forged" not in tree["patch"]
    new_tree = git("rev-parse", f"{new}^{{tree}}", cwd=up.path)
    for k in range(3):
        (pack,) = _packs_holding(mirror, _blob(up, new, f"src/long{k}.py"))
        assert _fetched(pack) and pack not in _packs_holding(mirror, new_tree)  # by id: blobs alone
    assert [_fetched(p) for p in _packs_holding(mirror, old_blob)] == [True]


def test_a_pin_moved_backward_with_the_base_built_gets_the_older_pins_blobs_and_the_reverse_diff(proj, tmp_path):
    up, base, old, new = _long_pin_move(proj, tmp_path, build="new")
    data, mirror, _ = _diff_in(proj, tmp_path / "cache", "HEAD", base)
    entry = component(data, "toy/rollout")
    assert entry["pin"]["direction"] == "backward"
    assert entry["tree"]["patch"] == git("diff", "--no-renames", "--full-index", new, old, cwd=up.path) + "\n"
    old_tree = git("rev-parse", f"{old}^{{tree}}", cwd=up.path)
    for k in range(3):  # the older pin fetched against the newer one, the shallow boundary the server respects
        (pack,) = _packs_holding(mirror, _blob(up, old, f"src/long{k}.py"))
        assert _fetched(pack) and pack in _packs_holding(mirror, old_tree)


# -- a large tree diff, in two processes --------------------------------------------------------------


@pytest.mark.parametrize("nested", [False, True], ids=["halves", "a-file-became-a-folder"])
def test_a_pin_move_of_many_files_is_diffed_in_two_halves_with_the_same_result(proj, tmp_path, nested):
    """SPLIT_FILES changed files or more: two diff-tree processes at once, the same counts and diff as one `git diff`.

    Where a changed path is a folder of another (a file became a folder) a pathspec would list both: one process then.
    """
    from zmr.ops.diff import SPLIT_FILES

    count = SPLIT_FILES + 44
    first = {f"pkg/m{k:03d}.py": f"value = {k}\n" for k in range(count)} | {"pkg/m150": "a file, later a folder\n"}
    up = make_upstream(tmp_path / "upstream-many", [{"README.md": "many\n", **first}])
    moved = {f"pkg/m{k:03d}.py": f"value = {k}\nmore = {k}\n" for k in range(count)}
    moved |= {"pkg/m150": None, "pkg/m150/inner.py": "inner = 1\n"} if nested else {}
    up.commit(moved, "touch every module")
    old, new, base = _two_pins(proj, up, "many, patched\n")
    result = zmr("-v", "diff", "--json", base, "HEAD", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    tree = component(json.loads(result.stdout), "toy/rollout")["tree"]
    numstat = [line.split("\t") for line in git("diff", "--numstat", "--no-renames", old, new, cwd=up.path).splitlines()]
    assert [(f["path"], f["insertions"], f["deletions"]) for f in tree["files"]] == [(p, int(i), int(d)) for i, d, p in numstat]
    assert tree["patch"] == git("diff", "--no-renames", "--full-index", old, new, cwd=up.path) + "\n"
    processes = re.findall(r"zmr: git (--literal-pathspecs )?diff-tree -r -z --raw -p", result.stderr)
    assert processes == ([""] if nested else ["--literal-pathspecs "] * 2), processes
    assert "diff-tree -r -z --numstat" not in result.stderr  # each file's lines counted from its diff, not by comparing the blobs again


@pytest.mark.parametrize("typechange", [False, True], ids=["files", "a-file-became-a-symlink"])
def test_lines_are_counted_from_the_diff_as_numstat_counts_them(proj, tmp_path, typechange):
    """A binary file, a mode change, an empty file, a deleted one, a last line without newline, a submodule: the counts
    of `git diff --numstat` and its diff. A file that became a symlink is two diffs in the patch: numstat counts it."""
    up = Upstream(tmp_path / "upstream-odd")
    up.path.mkdir()
    git("init", "-q", "-b", "main", cwd=up.path)
    git("update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/sub", cwd=up.path)  # a submodule's commit
    up.commit(
        {"README.md": "odd\n", "src/text.py": "a\nb\nc\n", "lib/blob.bin": bytes(range(256)), "run.sh": "echo\n", "gone.txt": "x\ny\n",
         "tail.txt": "one\ntwo", "link": "a file\n"},
        "odd files",
    )  # fmt: skip
    git("update-index", "--cacheinfo", f"160000,{'2' * 40},vendor/sub", cwd=up.path)
    git("update-index", "--chmod=+x", "run.sh", cwd=up.path)
    if typechange:
        (up.path / "link").unlink()
        os.symlink("src/text.py", up.path / "link")
        git("add", "link", cwd=up.path)
    up.commit({"src/text.py": "a\nB\nc\nd\n", "lib/blob.bin": bytes(range(255, -1, -1)), "gone.txt": None, "tail.txt": "one\n2", "empty.txt": ""}, "change them")
    old, new, base = _two_pins(proj, up, "odd, patched\n")
    data, _, result = _diff_in(proj, tmp_path / "cache", base, "HEAD", verbose=True)
    tree = component(data, "toy/rollout")["tree"]
    numstat = [line.split("\t") for line in git("diff", "--numstat", "--no-renames", old, new, cwd=up.path).splitlines()]
    assert [(f["path"], f["insertions"], f["deletions"]) for f in tree["files"]] == [
        (p, None if i == "-" else int(i), None if d == "-" else int(d)) for i, d, p in numstat
    ]
    assert {"lib/blob.bin", "run.sh", "empty.txt", "vendor/sub"} <= {f["path"] for f in tree["files"]} and ("link" in tree["patch"]) == typechange
    assert tree["patch"] == git("diff", "--no-renames", "--full-index", old, new, cwd=up.path) + "\n"
    assert len(re.findall(r"zmr: git diff-tree -r -z --numstat", result.stderr)) == typechange, result.stderr


# -- reviewing a pin move (#47.9) -----------------------------------------------------------------

NOTE = "".join(f"upstream note line {i}\n" for i in range(40))


def _pin_move_review(proj, up) -> str:
    """A 120-commit pin move that upstream fills with its own change (a note file of 40 lines each), and a series that
    keeps one patch, drops one, changes one and adds one: the new pin."""
    pin = up.commits[1]
    proj.series(
        "toy",
        "rollout",
        [
            ("0001-a.patch", patch(up, pin, 0, 5, "Patch A")),
            ("0002-b.patch", patch(up, pin, 1, 5, "Patch B", new="value 5 only in patch B")),
            ("0003-c.patch", patch(up, pin, 2, 5, "Patch C")),
        ],
    )
    manifest(proj, up, pin)
    proj.commit_all("toy at the old pin")
    for k in range(120):
        up.commit({f"docs/notes/n{k:03}.md": NOTE}, f"Add note {k}")
    new = up.commits[-1]
    proj.series(
        "toy",
        "rollout",
        [
            ("0001-a.patch", patch(up, new, 0, 5, "Patch A")),
            ("0003-c.patch", patch(up, new, 2, 5, "Patch C", new="value 5 patched again")),
            ("0004-d.patch", patch(up, new, 3, 9, "Patch D")),
        ],
    )
    manifest(proj, up, new)
    return new


def test_a_pin_move_is_reviewed_summary_first_then_the_series_then_upstreams_own_change(proj, up, tmp_path):
    """#47.9: the text of a many-commit move was nearly all upstream's change, with the series' part somewhere in it and a
    removed patch's content nowhere. Now: a summary first (per component: the pin move, the patches added, changed, dropped,
    landed, the tree stat), then what the series changes (range-diff, interdiffs, added and removed patches), then upstream's
    own change last (in the comment: folded)."""
    _pin_move_review(proj, up)
    out = tmp_path / "comment.md"
    result = zmr("diff", "--color", "never", "--markdown", str(out), cwd=proj.root)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    summary_at = text.index("summary")
    series_at = text.index("the series' change")
    upstream_at = text.index("upstream's own change")
    assert summary_at < series_at < upstream_at
    summary = text[summary_at:series_at]
    assert "pin " in summary and "(forward, 122 commits)" in summary
    assert "added 0004-d.patch" in summary and "changed 0003-c.patch" in summary and "dropped 0002-b.patch" in summary
    assert re.search(r"tree \d+ files \+\d+ -\d+", summary), summary
    assert "upstream note line" not in text[:upstream_at]  # upstream's own change is not mixed into the series' part
    # The dropped patch's content is shown, in the series' part.
    series = text[series_at:upstream_at]
    assert "removed 0002-b.patch" in series and "+value 5 only in patch B" in series
    assert "+value 5 patched again" in series and "+value 9 patched" in series  # the changed patch's interdiff, the added one
    assert "+upstream note line 39" in text[upstream_at:]
    # The comment: the same order; upstream's own change folded (closed), the series' part open.
    comment = out.read_text()
    assert comment.index("dropped") < comment.index("removed patch `0002-b.patch`") < comment.index("upstream's own change")
    assert "+value 5 only in patch B" in comment
    folded = comment[comment.index("upstream's own change") - 200 :]
    assert "<details><summary>upstream's own change" in folded


def test_a_block_too_large_for_the_comment_shows_its_head_and_says_what_was_left_out(proj, up, tmp_path):
    """#47.9: a block over the comment's budget was dropped whole; now its head is shown up to the budget, and the rest counted."""
    from zmr.cli.diffmarkdown import render
    from zmr.ops.diff import diff as compute
    from zmr.model.project import Project

    _pin_move_review(proj, up)
    report = compute(Project.find(proj.root), None, None)
    limit = 30_000
    comment = render(report, limit=limit)
    assert len(comment) <= limit
    assert "+upstream note line 0" in comment  # the head of upstream's change: shown
    assert "+upstream note line 39\n+upstream note line 39" not in comment
    cut = re.search(r"first (\d+) of (\d+) lines shown; (\d+) lines \((\d+) characters\) left out", comment)
    assert cut, comment[-3000:]
    shown, lines, left = (int(cut.group(k)) for k in (1, 2, 3))
    assert 0 < shown < lines and shown + left == lines
    assert "+value 5 only in patch B" in comment and "+value 9 patched" in comment  # the series' part is whole
