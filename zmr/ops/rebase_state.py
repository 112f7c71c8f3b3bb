"""The state of a rebase under way: ``state.json`` in ``Project.rebase_dir`` (docs/reference.md §8.2).

Read and written only through ``zmr.infra.state.REBASE`` (format version 1, size
limit, atomic replace). Every name read from it is checked before it is
used: a series file (``Saved.series_files``) is a plain relative path
(``zmr.infra.state.relative_name``), the checkout is used only while it carries
the saved ``zmr.token`` (``SavedCheckout.open``). ``zmr.ops.rebase`` drives the
rebase; ``zmr.ops.legacy`` reads this too, to migrate a rebase an older zmr
started.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zmr.infra.state import REBASE, relative_name
from zmr.model.resolutions import NotReplayed
from zmr.ops.checkout import Checkout, SavedCheckout
from zmr.ops.landed import Dropped


def _saved(saved: dict[str, Any]) -> Saved:
    """``saved`` of a state file, each series name checked: a name that could leave the series folder is refused."""
    names = list(saved["series_files"])
    for name in names:
        if relative_name(name) is None:
            raise ValueError(f"series file {name!r} is not a name inside the series folder")
    return Saved(names, bool(saved["journal_existed"]), SavedCheckout.from_json(saved["checkout"]))


@dataclass
class StoppedAt:
    """The checkout phase is on the patch at *index*: its cherry-pick is about to run or ran on *head_before*.

    *conflict*: it stopped with *files* in conflict, for the engineer to resolve.
    """

    index: int
    head_before: str | None
    conflict: bool = False
    files: list[str] = field(default_factory=list)


@dataclass
class Saved:
    """What the state folder holds copies of, besides ``manifest.orig`` (the manifest as it was).

    Invariant: ``series/<name>`` in the state folder is a byte copy of each
    of *series_files* (every file of the series folder); an older zmr's
    export journal (``zmr.ops.legacy``) existed when the rebase started exactly
    when *journal_existed*.
    """

    series_files: list[str]
    journal_existed: bool
    checkout: SavedCheckout


@dataclass
class RebaseState:
    """``state.json`` of a rebase under way: enough to resume it (``--continue``) or undo it (``--abort``).

    Invariants: *old_chain*, *names* and *subjects* have one entry per patch
    of the series as it was (the old chain: its commits on the old pin);
    a patch index is in at most one of *dropped* (by name), *remaining* and
    the replayed or picked part. *phase* is ``picking`` (the checkout path:
    cherry-picking *remaining* onto *partial*, which holds the patches the
    fast path applied) or ``finalize`` (writing the result; *new_tip* is the
    fast path's tip). The file is replaced atomically after every change.

    Format version 1, the same as zmr wrote before this class: a rebase
    started by an earlier zmr goes on with this one, and the other way round.
    """

    model: str
    component: str
    old: str  # the pin before
    new: str  # the commit rebased onto
    rev: str  # what the engineer named it
    url: str  # the upstream's resolved URL (the mirror)
    old_chain: list[str]
    names: list[str]
    subjects: list[str]
    upstream_count: int
    phase: str  # picking | finalize
    path: str  # fast | checkout
    dropped: list[Dropped] = field(default_factory=list)
    new_tip: str | None = None  # fast: the replay's tip
    replayed: list[tuple[str, str, bool | None]] = field(default_factory=list)  # fast: (commit, patch name, applied at an offset)
    partial: str | None = None  # checkout: the tip of the patches replayed before the conflict
    prepared: bool = False  # checkout: the checkout was set up at partial
    remaining: list[int] = field(default_factory=list)  # checkout: patch indexes still to cherry-pick, in order
    stopped: StoppedAt | None = None
    saved: Saved | None = None  # set by _snapshot, before the file is first written
    report: str | None = None  # --report FILE given at the start: written when the rebase finishes (absent in older files)
    reused: list[str] = field(default_factory=list)  # patches replayed by their recorded resolution (absent in older files)
    recorded: list[str] = field(default_factory=list)  # files of the resolutions --continue recorded (absent in older files)
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried where their patch conflicted, not replayed

    @classmethod
    def load(cls, path: Path) -> RebaseState:
        """The rebase state in *path* (read through ``zmr.infra.state.REBASE``); `StateRefused` names the file and what to do."""
        data = REBASE.load(path)
        if data is None:
            raise REBASE.refused(path, "no such file")
        try:
            stopped, saved = data.get("stopped"), data.get("saved")
            return cls(
                model=data["model"],
                component=data["component"],
                old=data["old"],
                new=data["new"],
                rev=data["rev"],
                url=data["url"],
                old_chain=list(data["old_chain"]),
                names=list(data["names"]),
                subjects=list(data["subjects"]),
                upstream_count=int(data.get("upstream_count", 0)),
                phase=data["phase"],
                path=data["path"],
                dropped=[Dropped.from_state(d) for d in data.get("dropped", [])],
                new_tip=data.get("new_tip"),
                replayed=[(c, n, m) for c, n, m in data.get("replayed", [])],
                partial=data.get("partial"),
                prepared=bool(data.get("prepared")),
                remaining=[int(i) for i in data.get("remaining", [])],
                stopped=StoppedAt(**stopped) if stopped else None,
                saved=_saved(saved) if saved else None,
                report=data.get("report"),
                reused=[str(n) for n in data.get("reused", [])],
                recorded=[str(n) for n in data.get("recorded", [])],
                unused=[NotReplayed(str(u["patch"]), str(u["file"]), str(u["reason"])) for u in data.get("unused", [])],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise REBASE.refused(path, f"damaged ({err!r} is missing or wrong)") from None

    def to_json(self) -> dict[str, Any]:
        data = {"version": REBASE.version, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}
        data["dropped"] = [d.state() for d in self.dropped]
        data["replayed"] = [list(r) for r in self.replayed]
        data["stopped"] = asdict(self.stopped) if self.stopped else None
        data["unused"] = [u.to_json() for u in self.unused]
        if self.saved is not None:
            data["saved"] = {"series_files": self.saved.series_files, "journal_existed": self.saved.journal_existed, "checkout": self.saved.checkout.to_json()}
        return data

    def save(self, path: Path) -> None:
        """*path* replaced by this state, whole (``zmr.infra.state.REBASE``)."""
        REBASE.save(path, self.to_json())

    @property
    def checkout_path(self) -> Path:
        assert self.saved is not None
        return self.saved.checkout.path

    def open_checkout(self) -> Checkout | None:
        """The rebase's checkout, when it is there and carries the token saved for it (``SavedCheckout.open``)."""
        assert self.saved is not None
        return self.saved.checkout.open()
