"""Each patch's upstream status: read from the patch, validated, listed, and checked against upstream by update."""

from __future__ import annotations

import json

from conftest import make_patch, zmr
from test_update import grow


def model_with_statuses(project, upstream, bodies: dict[str, str]) -> str:
    """toy/rollout pinned at upstream's second commit; patches 0001 (line 10), 0002 (matmul), 0003 (guide) with the message bodies given."""
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    changes = {
        "0001-split.patch": ({"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split"),
        "0002-contiguous.patch": ({"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul contiguous"),
        "0003-guide.patch": ({"docs/guide.md": "guide v2\n"}, "Update the guide"),
    }
    series = [(name, make_patch(upstream, pin, files, subject, bodies.get(name, ""))) for name, (files, subject) in changes.items()]
    project.series("toy", "rollout", series)
    project.manifest("toy", f"model: toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {pin}\n    track: main\n")
    project.commit_all("toy")
    return pin


def test_validate_reads_statuses_and_refuses_malformed_ones(project, upstream):
    model_with_statuses(
        project,
        upstream,
        {"0001-split.patch": "Upstream-Status: Submitted [https://github.com/up/up/pull/12]", "0002-contiguous.patch": "Forwarded: not-needed"},
    )
    assert zmr("validate", cwd=project.root).returncode == 0
    required = zmr("validate", "--require-upstream-status", cwd=project.root)
    assert required.returncode == 2 and "0003-guide.patch" in required.stderr and "no upstream status" in required.stderr
    assert "0001-split.patch" not in required.stderr
    listed = json.loads(zmr("list", "--json", cwd=project.root).stdout)["models"][0]["components"][0]
    assert listed["upstream_status"] == {"inappropriate": 1, "none": 1, "submitted": 1}
    assert "1 inappropriate, 1 none, 1 submitted" in zmr("list", cwd=project.root).stdout


def test_validate_names_an_unknown_status_and_a_backport_without_a_commit(project, upstream):
    model_with_statuses(project, upstream, {"0001-split.patch": "Upstream-Status: maybe-later", "0002-contiguous.patch": "Upstream-Status: Backport [see the mailing list]"})
    result = zmr("validate", "--json", cwd=project.root)
    assert result.returncode == 2
    problems = {(p["file"].rsplit("/", 1)[-1], p["message"]) for p in json.loads(result.stdout)["problems"]}
    assert ("0001-split.patch", "Upstream-Status: unknown status 'maybe-later' (one of submitted, backport, inappropriate, pending, accepted, denied)") in problems
    assert ("0002-contiguous.patch", "Upstream-Status: backport names no commit id (7 to 40 hex digits) in 'see the mailing list'") in problems


def test_a_backport_whose_commit_is_below_the_pin_is_droppable(project, upstream, tmp_path):
    made = grow(upstream, 3, special={1: ({"docs/other.md": "upstream's form of the fix\n"}, "Fix it upstream (another form)")})
    model_with_statuses(project, upstream, {"0003-guide.patch": f"Upstream-Status: Backport [{made[1][:10]}]", "0001-split.patch": "Forwarded: no"})
    # The backported commit lies in pin..target; the patch still applies (upstream's form differs): reported, not dropped.
    result = zmr("update", "toy", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert data["upstream_status"]["0003-guide.patch"]["kind"] == "backport" and data["upstream_status"]["0003-guide.patch"]["commit"] == made[1][:10]
    assert data["upstream_status"]["0001-split.patch"]["kind"] == "pending" and "0002-contiguous.patch" not in data["upstream_status"]
    assert data["dropped"] == [] and data["droppable"] == {"0003-guide.patch": f"backport {made[1][:12]} is below the target"}
    # Pinned past the backported commit while the patch is still carried: droppable, already below the pin.
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(upstream.commits[1], made[-1]))
    project.commit_all("pin past the backport")
    grow(upstream, 2, start=20)
    report = tmp_path / "report.md"
    result = zmr("update", "toy", "--json", "--report", str(report), cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert data["droppable"] == {"0003-guide.patch": f"backport {made[1][:12]} is already below the pin"}
    assert f"| `0003-guide.patch` | backport {made[1][:10]} | backport {made[1][:12]} is already below the pin |" in report.read_text()
    assert "0003-guide.patch is droppable: backport" in zmr("update", "toy", cwd=project.root).stdout
