"""Patches that landed upstream in another form: reformatted, split over two commits, or only in part (kept)."""

from __future__ import annotations

import json

from conftest import git, make_patch, zmr
from test_update import grow

TWO_PLACES = "Fix the split in two places"


def two_place_model(project, upstream) -> tuple[str, str]:
    """toy/rollout pinned at upstream's second commit; one patch that changes lines 10 and 30 of src/model.py."""
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    changed = model_py.replace("line 10\n", "line 10 fixed split\n").replace("line 30\n", "line 30 fixed split\n")
    patch = make_patch(upstream, pin, {"src/model.py": changed}, TWO_PLACES)
    other = make_patch(upstream, pin, {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul output contiguous")
    project.series("toy", "rollout", [("0001-two-places.patch", patch), ("0002-contiguous.patch", other)])
    project.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {pin}\n    track: main\n")
    project.commit_all("toy")
    return pin, model_py


def upstreamed(project) -> dict:
    result = zmr("upstreamed", "toy", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["components"][0]


def update(project, *args: str) -> dict:
    result = zmr("update", "toy", "--json", *args, cwd=project.root)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["components"][0]


def test_a_patch_that_landed_reformatted_is_dropped_naming_the_upstream_commit(project, upstream):
    pin, model_py = two_place_model(project, upstream)
    # Upstream takes the change with other spacing and tidies a line next to it in the same commit:
    # the patch neither applies nor reverse-applies, and the upstream commit's patch id differs.
    reformatted = model_py.replace("line 10\n", "line  10   fixed split\n").replace("line 30\n", "line 30 fixed  split \n").replace("line 11\n", "line 11 (tidied)\n")
    made = grow(upstream, 6, special={2: ({"src/model.py": reformatted}, "Fix split sizes (reformatted)")})
    found = upstreamed(project)
    [landed] = found["upstreamed"]
    assert (landed["name"], landed["method"], landed["upstream_commit"], landed["via"]) == ("0001-two-places.patch", "landed", made[2], [made[2]])
    assert landed["landed"] == f"landed (modified, via {made[2][:12]})" and found["conflicts"] == []
    data = update(project, "--apply")
    assert data["status"] == "clean" and data["applied"] is True
    assert [(d["name"], d["method"], d["upstream"], d["landed"]) for d in data["dropped"]] == [
        ("0001-two-places.patch", "landed", made[2], f"landed (modified, via {made[2][:12]})")
    ]
    assert (project.root / "patches/toy/rollout/series").read_text() == "0002-contiguous.patch\n"
    assert not (project.root / "patches/toy/rollout/0001-two-places.patch").exists()
    assert made[-1] in (project.root / "manifests/toy.yaml").read_text() and pin not in (project.root / "manifests/toy.yaml").read_text()


def test_diff_says_how_a_removed_patch_landed(project, upstream, tmp_path):
    """The same definition in `zmr diff`: a change that moves the pin and drops a patch says the patch landed, and via what."""
    pin, model_py = two_place_model(project, upstream)
    reformatted = model_py.replace("line 10\n", "line  10   fixed split\n").replace("line 30\n", "line 30 fixed  split \n").replace("line 11\n", "line 11 (tidied)\n")
    made = grow(upstream, 3, special={1: ({"src/model.py": reformatted}, "Fix split sizes (reformatted)")})
    base = git("rev-parse", "HEAD", cwd=project.root)
    assert zmr("rebase", "toy", "--onto", "main", cwd=project.root).returncode == 0
    project.commit_all("move the pin; 0001 landed upstream")
    result = zmr("diff", "--json", base, "HEAD", cwd=project.root)
    assert result.returncode in (0, 1), result.stderr
    [entry] = json.loads(result.stdout)["components"]
    assert entry["patches"]["removed"] == ["0001-two-places.patch"]
    assert entry["patches"]["landed"] == {"0001-two-places.patch": f"landed (modified, via {made[1][:12]})"}
    text = zmr("diff", base, "HEAD", cwd=project.root).stdout
    assert f"removed 0001-two-places.patch: landed (modified, via {made[1][:12]})" in text


def test_a_patch_that_landed_split_over_two_commits_names_both(project, upstream, tmp_path):
    pin, model_py = two_place_model(project, upstream)
    first = model_py.replace("line 10\n", "line 10 fixed split\n")
    made = grow(upstream, 8, special={2: ({"src/model.py": first}, "Fix the split at line 10"), 5: ({"src/model.py": first.replace("line 30\n", "line 30 fixed split\n")}, "And at line 30")})
    [landed] = upstreamed(project)["upstreamed"]
    assert landed["name"] == "0001-two-places.patch" and landed["via"] == [made[2], made[5]]
    assert landed["landed"] == f"landed (modified, via {made[2][:12]}, {made[5][:12]})"
    report = tmp_path / "rebase.md"
    result = zmr("rebase", "toy", "--onto", "main", "--report", str(report), cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert f"landed (modified, via {made[2][:12]}, {made[5][:12]})" in report.read_text()
    assert (project.root / "patches/toy/rollout/series").read_text() == "0002-contiguous.patch\n"


def test_a_partially_landed_patch_is_kept_and_reported(project, upstream, tmp_path):
    pin, model_py = two_place_model(project, upstream)
    made = grow(upstream, 5, special={1: ({"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Fix the split at line 10 only")})
    found = upstreamed(project)
    assert found["upstreamed"] == [] and found["conflicts"] == ["0001-two-places.patch"]
    assert found["partially_landed"]["0001-two-places.patch"] == {
        "state": "partial",
        "label": f"partially landed (1 of 2 changes, via {made[1][:12]}; left: src/model.py: line 30)",
        "via": [made[1]],
        "landed": 1,
        "total": 2,
        "left": ["src/model.py: line 30"],
    }
    text = zmr("upstreamed", "toy", cwd=project.root).stdout
    assert f"0001-two-places.patch: partially landed (1 of 2 changes, via {made[1][:12]}; left: src/model.py: line 30) (kept)" in text
    # update: the 3-way replay takes the rest of the change; the patch stays, reported as partially landed.
    report = tmp_path / "report.md"
    data = update(project, "--apply", "--report", str(report))
    assert data["applied"] is True and data["dropped"] == [] and list(data["partially_landed"]) == ["0001-two-places.patch"]
    assert "### Partially landed: kept (1)" in report.read_text()
    series = project.root / "patches/toy/rollout"
    assert (series / "series").read_text() == "0001-two-places.patch\n0002-contiguous.patch\n"
    assert "+line 30 fixed split" in (series / "0001-two-places.patch").read_text()


def test_a_change_is_judged_on_tokens_in_place_whitespace_and_line_breaks_aside():
    from zmr.ops.landed import Change

    before = {"f": b"a\nold line\n}\n"}
    change = Change.of(before.get, {"f": b"a\nnew  line\n}\n"}.get, ["f"])
    assert change.against({"f": b"a\nnew line\n}\n"}.get).present == 1
    assert change.against({"f": b"a\nnew\n    line\n}\n"}.get).present == 1  # wrapped over two lines
    assert change.against({"f": b"a\nold line\nnew line\n"}.get).present == 0  # the old line is still there
    assert change.against(before.get).present == 0
    # Upstream rewrote the removed line another way: a conflict, not a landing.
    assert change.against({"f": b"a\nold line, reworked\n}\n"}.get).present == 0
    call = Change.of({"f": b"x = g(a)\n"}.get, {"f": b"x = g(a, scale=2)\n"}.get, ["f"])
    assert call.against({"f": b"x = g(\n    a,\n    extra=1,\n    scale=2,\n)\n"}.get).present == 1  # upstream added around it
    assert call.against({"f": b"x = g(a, scale, q=2)\n"}.get).present == 0  # its tokens, scattered: not its change
    deletion = Change.of(before.get, {"f": b"a\n}\n"}.get, ["f"])
    assert (deletion.against({"f": b"a\n}\n"}.get).present, deletion.against(before.get).present) == (1, 0)
