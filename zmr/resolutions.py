"""Recorded conflict resolutions (rerere for series), kept in the repository: ``resolutions/<key>.diff``.

When ``zmr rebase --continue`` takes the engineer's resolution of a patch
that conflicted, the resolved change (the diff of the commit made, against
the one before it) is recorded under the key of the patch as it was (a hash
of its diff, so rewording or re-exporting it keeps the key). The file is
part of the repository: committed with the rest, a CI job on a fresh clone
has it. Later, when the same patch does not apply again (``zmr update``'s
trials, ``zmr rebase``, ``update --apply``), the recorded change is tried in
its place before it counts as a conflict; if it applies, it goes in (with
the patch's message and author) and the report names it as reused. Nothing
else changes a resolution; delete the file to forget one.

Layout: ``resolutions/<key>.diff`` at the repository root, ``key`` = the
first 24 hex digits of SHA-256 over the patch's diff (from its first
``diff --git`` line, the mail signature left out).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from zmr.files import atomic_write
from zmr.series import Patch

FOLDER = "resolutions"


def _diff_part(data: bytes) -> bytes:
    start = data.find(b"diff --git ")
    body = data[start:] if start >= 0 else data
    cut = body.rfind(b"\n-- \n")
    return body[: cut + 1] if cut >= 0 else body


def key_of(patch: Patch) -> str:
    return hashlib.sha256(_diff_part(patch.data)).hexdigest()[:24]


def path_for(root: Path, patch: Patch) -> Path:
    return root / FOLDER / f"{key_of(patch)}.diff"


def recorded(root: Path, patch: Patch) -> Patch | None:
    """*patch* with its recorded resolution as its change (message and author kept), or None when none is recorded."""
    path = path_for(root, patch)
    try:
        diff = path.read_bytes()
    except OSError:
        return None
    return dataclasses.replace(patch, data=diff, strip=1) if diff.strip() else None


def record(root: Path, patch: Patch, diff: bytes) -> Path:
    """Keep *diff* (the resolved change, ``-p1``) as the resolution of *patch*; returns the file written."""
    path = path_for(root, patch)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, diff)
    return path
