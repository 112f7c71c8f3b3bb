"""A ``.zmr/`` folder in the work tree: where zmr kept its working state before it moved into the git directory.

Anything a commit carries may be hostile, and a commit can carry ``.zmr/``
(``git add -f``). So the folder is never read as state. Once (the first run
that needs state and finds it), what it holds is migrated into
``Project.state_dir`` only when it passes the checks fresh state gets
(docs/reference.md §8.3): ``.zmr`` a real folder, nothing under it tracked
in the index, each entry for a component of the manifests and made of
regular files only, and every checkout it names a zmr checkout of this
component that zmr would have chosen (``work/<model>/<component>`` for a
rebase; for a remembered ``--dir``, one whose ``zmr.project`` is this
repository). A checkout named so gets its ``zmr.token`` then. Everything
else stays where it is, unread, and one warning says so.

This module is the one that knows an older zmr's state. Besides ``.zmr/``
that is the export journal an older zmr's interrupted export left in the
state folder (``zmr.infra.state.LEGACY_EXPORT_JOURNAL``, a JSON list of the names
it owned, with a ``.staging/`` folder): export and rebase ask
`export_journal_names` for it, and `forget_export_journal` /
`abort_export_journal` remove it; no other module reads or names it. This
zmr never writes one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from zmr.infra import git
from zmr.infra.errors import ZmrError
from zmr.infra.files import read_repo_file
from zmr.infra.state import LEGACY_EXPORT_JOURNAL, LEGACY_MARKER, relative_name

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Component
    from zmr.model.project import Project

MIGRATED_MARKER = LEGACY_MARKER.where
MAX_LEGACY_POINTER = 1 << 16


def migrate(project: Project) -> list[str]:
    """Move what passes the checks from ``.zmr/`` into ``Project.state_dir``; the notices for the user (none when there is nothing to say).

    Cheap when there is no ``.zmr``: one ``lstat``, no git.
    """
    from zmr.model.project import LEGACY_STATE_DIR

    legacy = project.root / LEGACY_STATE_DIR
    if not os.path.lexists(legacy):
        return []
    try:
        marker = project.state_path(LEGACY_MARKER)
    except ZmrError:
        return []  # no git repository: no command that needs state can run here anyway
    if marker.exists():
        return []
    state = marker.parent
    shown = f"{legacy.name}/"
    head = f"{shown} in the work tree is not read: zmr keeps its working state in {state} now"
    if project.policy.untrusted:
        return [f"{head} (--untrusted: nothing migrated)"]
    try:
        state.mkdir(parents=True, exist_ok=True)
        marker.write_bytes(b"")
    except OSError:
        return [f"{head} (the git directory is not writable: nothing migrated)"]
    if legacy.is_symlink() or not legacy.is_dir():
        return [f"{head} ({shown} is not a real folder: nothing migrated); delete it"]
    tracked = git.Repo.at(project.root).ls_files(["-z"], [legacy.name], check=False)
    if tracked.returncode != 0 or tracked.stdout:
        return [f"{head} ({shown} is tracked by git, so a commit may have put it there: nothing migrated); delete it"]
    try:
        components = [c for m in project.manifests() for c in m.components.values()]
    except ZmrError:
        return [f"{head} (the manifests do not validate: nothing migrated); fix them and finish older work with the zmr that started it"]
    moved = []
    for component in components:
        moved += _migrate_component(project, component, legacy)
    done = f"; migrated: {', '.join(moved)}" if moved else ""
    return [f"{head}{done}; delete {shown} (what is left there is not used)"]


def _migrate_component(project: Project, component: Component, legacy: Path) -> list[str]:
    """What of *component*'s old state moved; an entry of a shape zmr does not know stays (``_tried``), whatever it holds."""
    moved = []
    name = f"{component.model}-{component.key}"
    if _tried(lambda: _migrate_rebase(project, component, legacy / "rebase" / name)):
        moved.append(f"the rebase of {component.label}")
    if _tried(lambda: _migrate_journal(project, component, legacy / "pending-removals" / f"{name}.json")):
        moved.append(f"the export journal of {component.label}")
    if _tried(lambda: _migrate_pointer(project, component, legacy / "checkouts" / component.model / component.key)):
        moved.append(f"the remembered --dir of {component.label}")
    return moved


def _tried(step: Callable[[], bool]) -> bool:
    """*step*'s answer; False when what it read is of no shape zmr knows (damaged JSON, a name the system refuses): that entry is not migrated."""
    try:
        return step()
    except (ZmrError, OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return False


def _migrate_journal(project: Project, component: Component, journal: Path) -> bool:
    """An export journal: migrated when it is what an older zmr wrote, a JSON list of names."""
    target = _export_journal(project, component)
    if not _regular(journal) or target.exists():
        return False
    names = LEGACY_EXPORT_JOURNAL.load(journal)
    if not all(isinstance(n, str) for n in names):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(journal, target)
    journal.unlink()
    return True


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _only_regular_files(folder: Path) -> bool:
    """*folder* is a real folder holding only real folders and regular files (no link, FIFO or device anywhere)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for top, dirs, files in os.walk(folder):
        for entry in dirs:
            if os.path.islink(os.path.join(top, entry)):
                return False
        if not all(_regular(Path(top, entry)) for entry in files):
            return False
    return True


def _migrate_rebase(project: Project, component: Component, folder: Path) -> bool:
    """A rebase under way: migrated when its checkout is ``work/<model>/<component>`` (the one zmr chooses) and it is that component's."""
    from zmr.ops import checkout
    from zmr.ops.rebase_state import RebaseState

    target = project.rebase_dir(component)
    if not _only_regular_files(folder) or not _regular(folder / "state.json") or target.exists():
        return False
    try:
        state = RebaseState.load(folder / "state.json")
        default = checkout.default_path(project, component)
    except ZmrError:
        return False
    saved = state.saved
    if saved is None or (state.model, state.component) != (component.model, component.key) or os.path.abspath(saved.checkout.path) != str(default):
        return False
    co = checkout.checkout_of(default, component)
    if saved.checkout.existed and co is None:
        return False  # nothing there to restore: leave it for the user
    made_by_it = co is not None and (saved.checkout.existed or state.prepared)
    token = co.ensure_token() if made_by_it and co is not None else checkout.new_token()
    saved.checkout = dataclasses.replace(saved.checkout, token=token)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder, target, symlinks=True)
    state.save(target / "state.json")
    shutil.rmtree(folder)
    return True


def _migrate_pointer(project: Project, component: Component, file: Path) -> bool:
    """A remembered ``--dir`` (one line): migrated when it names a zmr checkout of this component whose ``zmr.project`` is this repository."""
    from zmr.infra.files import FileRefused
    from zmr.ops import checkout

    if not _regular(file) or project.checkout_pointer(component).exists():
        return False
    try:
        text = read_repo_file(None, file, limit=MAX_LEGACY_POINTER, what="checkout pointer").decode("utf-8").strip()
    except (FileRefused, UnicodeDecodeError):
        return False
    path = Path(text)
    co = checkout.checkout_of(path, component) if text and path.is_absolute() else None
    if co is None or os.path.realpath(co.config.get("zmr.project", "")) != os.path.realpath(project.root):
        return False
    checkout.write_pointer(project, component, co)
    file.unlink()
    return True


# -- the export journal of an older zmr ------------------------------------------------------------


def _export_journal(project: Project, component: Component) -> Path:
    return project.state_path(LEGACY_EXPORT_JOURNAL, model=component.model, component=component.key)


def _staging_dir(journal: Path) -> Path:
    """Where an older zmr's export staged files before renaming them into the series folder: next to its journal."""
    return journal.with_name(journal.stem + ".staging")


def export_journal_exists(project: Project, component: Component) -> bool:
    """An older zmr's interrupted export of *component* left its journal (a rebase records this when it starts)."""
    return _export_journal(project, component).is_file()


def export_journal_names(project: Project, component: Component) -> set[str] | None:
    """The names an older zmr's interrupted export of *component* owned (wrote or meant to remove); None without its journal.

    Only plain names inside the series folder count (``zmr.infra.state.relative_name``); a journal that is not the
    JSON list zmr wrote, or too big, is refused (``zmr.infra.state.StateRefused``: the file and what to do).
    """
    names = LEGACY_EXPORT_JOURNAL.load(_export_journal(project, component))
    if names is None:
        return None
    return {n for n in names if relative_name(n) is not None}


def forget_export_journal(project: Project, component: Component) -> None:
    """An older zmr's export journal of *component* and its staging folder gone, once the series it described is written."""
    journal = _export_journal(project, component)
    shutil.rmtree(_staging_dir(journal), ignore_errors=True)
    for tmp in journal.parent.glob(f".{journal.name}.*.zmr-tmp"):
        tmp.unlink(missing_ok=True)
    if _regular(journal):
        _remove_journal(journal)


def abort_export_journal(project: Project, component: Component, existed: bool) -> None:
    """``rebase --abort``: what an interrupted write of the series staged goes; the journal too unless it *existed* when the rebase started."""
    journal = _export_journal(project, component)
    shutil.rmtree(_staging_dir(journal), ignore_errors=True)
    if journal.exists() and not existed:
        _remove_journal(journal)


def _remove_journal(journal: Path) -> None:
    """The journal removed, and its model's folder with it when no other export of the model left one."""
    journal.unlink()
    with contextlib.suppress(OSError):
        journal.parent.rmdir()
