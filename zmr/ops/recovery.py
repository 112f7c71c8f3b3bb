"""Opening a project: `open_project` finds it, finishes or undoes what a killed zmr left, and migrates an older zmr's state.

Every command opens the project this way (``zmr.cli.options.find_project``),
and so does a library caller that reads or writes the project's files:
``Project.find`` only locates it. Opening, in this order:

1. ``Project.find`` (``$ZMR_REPO``, the checkout the folder is in, the
   nearest folder with ``manifests/`` or ``zmr.yaml``);
2. ``zmr.ops.legacy.migrate``: a ``.zmr/`` folder in the work tree (an older
   zmr's state) is never read; what passes the checks is migrated once;
3. ``zmr.infra.transaction.finish_all`` (not under ``--untrusted``): every
   multi-file write a SIGKILL or a crash cut short is finished (its journal
   was committed) or undone (it was not), before anything reads the files.

What was done comes back in `Opened.report`; nothing is printed. Each step
looks first, for the price of an ``lstat`` or two, whether it has anything to
do (a ``.zmr/`` folder; a journal): the machinery of migration and recovery is
imported only then, not by every command every time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zmr.model.manifest import Policy
from zmr.model.project import LEGACY_STATE_DIR, Project

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.transaction import Recovered


@dataclass(frozen=True)
class OpenReport:
    """What opening a project did: *recovered*, the interrupted transactions finished, undone or left (``finish_all``);
    *migrated*, what was said of an older zmr's ``.zmr/`` (``zmr.ops.legacy.migrate``)."""

    recovered: list[Recovered] = field(default_factory=list)
    migrated: list[str] = field(default_factory=list)

    def failed(self) -> bool:
        """A journal was left alone: files it names may be half-written."""
        return any(r.action == "left" for r in self.recovered)

    def lines(self) -> list[str]:
        """Each thing done, said for the user (the CLI prints them as warnings)."""
        return [r.line for r in self.recovered]

    def to_json(self) -> dict[str, Any]:
        return {"recovered": [{"name": r.name, "action": r.action, "message": r.line} for r in self.recovered], "migrated": list(self.migrated)}


@dataclass(frozen=True)
class Opened:
    """A project, opened (`open_project`), and what opening it did."""

    project: Project
    report: OpenReport


def open_project(start: str | os.PathLike[str] | None = None, policy: Policy = Policy()) -> Opened:
    """The project seen from *start* (``Project.find``), with what a killed zmr left finished or undone and old state migrated.

    Under ``policy.untrusted`` no transaction is recovered (a command of a
    pull request's CI writes nothing) and nothing is migrated; the report
    says so.
    """
    project = Project.find(start, policy=policy)
    migrated: list[str] = []
    if os.path.lexists(project.root / LEGACY_STATE_DIR):  # `legacy.migrate`'s own first look
        from zmr.ops import legacy

        migrated = legacy.migrate(project)
    recovered: list[Recovered] = []
    if not policy.untrusted and _journal_left(project):
        from zmr.infra import transaction

        recovered = transaction.finish_all(project)
    return Opened(project, OpenReport(recovered, migrated))


def _journal_left(project: Project) -> bool:
    """Whether ``transaction.finish_all`` may have work: a ``*.json`` in the journals' folder, found as it finds them.

    The same search over the same folder, so never False where it would find
    one (it may be True where ``finish_all`` then refuses the folder: a
    symbolic link); False, the journal machinery stays unimported.
    """
    folder = project.journal_folder()
    return folder is not None and any(folder.rglob("*.json"))
