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
    assert zmr("diff", "--exit-code", cwd=proj.root).returncode == 0
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
    result = zmr("diff", "--exit-code", cwd=proj.root)
    assert result.returncode == 1, result.stderr
    assert "changed   toy/rollout" in result.stdout
    # The head side's branch id is what zmr build makes of the working tree.
    proj.commit_all("edit")
    assert zmr("build", "toy", cwd=proj.root).returncode == 0
    assert proj.ref(f"refs/heads/{entry['branch']['name']}") == entry["branch"]["new"]
