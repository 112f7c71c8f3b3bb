"""scripts/supported-pythons, which .ci/run tests every Python with: from requires-python's floor to the newest
installed, found on PATH or under pyenv; a version missing in that range fails the run, naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT


def _layout(tmp_path: Path, versions: list[str], floor: str = "3.10") -> tuple[Path, dict]:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "scripts" / "supported-pythons", root / "scripts" / "supported-pythons")
    (root / "pyproject.toml").write_text(f'[project]\nname = "x"\nrequires-python = ">={floor}"\n')
    home = tmp_path / "home"
    for version in versions:  # pyenv's layout; each a real Python (this one) under that version's name
        bin_dir = home / ".pyenv" / "versions" / f"{version}.1" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python3").symlink_to(sys.executable)
    path = tmp_path / "path"  # PATH without any python3.X, but with what the script itself runs
    path.mkdir()
    for tool in ("bash", "sed", "seq", "env", "dirname"):
        found = shutil.which(tool)
        assert found
        (path / tool).symlink_to(found)
    return root, {"HOME": str(home), "PATH": str(path)}


def _run(root: Path, env: dict) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "scripts" / "supported-pythons")], env=env, capture_output=True, text=True, timeout=60)


def test_every_version_from_the_floor_to_the_newest(tmp_path):
    root, env = _layout(tmp_path, ["3.10", "3.11", "3.12"])
    result = _run(root, env)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["3.10", "3.11", "3.12"]
    assert all(os.path.exists(line.split()[1]) for line in result.stdout.splitlines())


def test_a_missing_version_in_the_range_fails_naming_it(tmp_path):
    root, env = _layout(tmp_path, ["3.10", "3.12"])
    result = _run(root, env)
    assert result.returncode == 1 and result.stdout == ""
    assert "Python 3.11 is supported (requires-python >=3.10; 3.12 is installed) but not installed" in result.stderr


def test_a_missing_floor_fails(tmp_path):
    root, env = _layout(tmp_path, ["3.11"])
    result = _run(root, env)
    assert result.returncode == 1 and "Python 3.10 is supported" in result.stderr
    root, env = _layout(tmp_path / "none", [])
    assert "no Python 3.10 or newer installed" in _run(root, env).stderr
