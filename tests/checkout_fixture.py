"""Shared by test_checkout.py and test_export.py: a project whose toy/rollout series has two mails and a quilt diff."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_project, simple_model, zmr

QUILT = (
    "Description: Extend the guide, quilt style\n"
    "Author: Quilt Maintainer <quilt@zmr.invalid>\n"
    "Forwarded: not-needed\n"
    "\n"
    "--- a/docs/guide.md\n"
    "+++ b/docs/guide.md\n"
    "@@ -1 +1,2 @@\n"
    " guide\n"
    "+appendix from quilt\n"
)

SERIES_TEXT = (
    "# zero-mismatch series for toy/rollout\n"
    "\n"
    "# batch-invariant split\n"
    "0001-fixed-split.patch\n"
    "0002-contiguous.patch   # small\n"
    "\n"
    "# documentation, quilt style\n"
    "guide.diff\n"
    "# trailing comment\n"
)


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def proj(tmp_path):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    return project


def three_patch_model(project, upstream) -> tuple[str, Path, Path]:
    """toy/rollout with two format-patch mails and a quilt-style diff, checked out."""
    pin = simple_model(project, upstream)
    folder = project.root / "patches/toy/rollout"
    (folder / "guide.diff").write_text(QUILT)
    (folder / "series").write_text(SERIES_TEXT)
    (folder / "NOTES.txt").write_text("not a patch; export must leave it alone\n")
    project.commit_all("three patches")
    result = zmr("checkout", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    return pin, folder, project.root / "work/toy/rollout"
