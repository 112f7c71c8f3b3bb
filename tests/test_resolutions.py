"""Recorded resolutions: a conflict resolved once in `zmr rebase --continue` is replayed later, also on a fresh clone."""

from __future__ import annotations

import json

from conftest import git, simple_model, zmr
from test_update import grow


def test_a_resolution_recorded_by_continue_is_reused_by_update_on_a_fresh_clone(project, upstream, tmp_path):
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    reworked = model_py.replace("line 10\n", "line 10 upstream\n")
    made = grow(upstream, 8, special={3: ({"src/model.py": reworked}, "Rework line 10")})
    # Without a resolution, update is blocked at the rework.
    before = json.loads(zmr("update", "toy", "--json", cwd=project.root).stdout)["components"][0]
    assert before["status"] == "partial" and before["blocked_by"]["commit"] == made[3] and before["reused_resolutions"] == []
    # The engineer resolves it once, in a rebase.
    stopped = zmr("rebase", "toy", "--onto", made[3], cwd=project.root)
    assert stopped.returncode == 1, stopped.stderr
    co = project.root / "work/toy/rollout"
    (co / "src/model.py").write_text(reworked.replace("line 10 upstream\n", "line 10 upstream, fixed split\n"))
    git("add", "src/model.py", cwd=co)
    done = zmr("rebase", "toy", "--continue", "--json", cwd=project.root)
    assert done.returncode == 0, done.stderr
    [recorded] = json.loads(done.stdout)["recorded_resolutions"]
    assert recorded.startswith("resolutions/") and recorded.endswith(".diff")
    assert "+line 10 upstream, fixed split" in (project.root / recorded).read_text()
    # Only the resolution is committed (say the move itself went nowhere): the series on main still conflicts at made[3].
    git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "patches", cwd=project.root)
    git("add", recorded, cwd=project.root)
    git("commit", "-q", "-m", "Record the resolution of 0001 at the line 10 rework", cwd=project.root)
    # A CI job on a fresh clone: no checkout, no zmr state, no rr-cache; the resolution comes with the repository.
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(project.root), str(fresh))
    result = zmr("update", "toy", "--json", "--apply", cwd=fresh)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    assert data["status"] == "clean" and data["target"] == made[-1] and data["applied"] is True
    assert data["reused_resolutions"] == ["0001-fixed-split.patch"] and data["blocked_by"] is None
    assert made[-1] in (fresh / "manifests/toy.yaml").read_text()
    assert "+line 10 upstream, fixed split" in (fresh / "patches/toy/rollout/0001-fixed-split.patch").read_text()
    assert zmr("build", "toy", cwd=fresh).returncode == 0
    assert "line 10 upstream, fixed split" in git("show", "rollout/toy:src/model.py", cwd=fresh)
    text = zmr("update", "toy", "--onto", made[5], cwd=project.root)
    assert "toy/rollout: 0001-fixed-split.patch replays by its recorded resolution" in text.stdout
