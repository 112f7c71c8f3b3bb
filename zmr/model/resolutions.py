"""Recorded conflict resolutions (rerere for series), kept in the repository: ``resolutions/<key>.diff``.

When ``zmr rebase --continue`` takes the engineer's resolution of a patch
that conflicted, the resolved change (the diff of the commit made, against
the one before it) is recorded under the key of the patch as it was (a hash
of its diff, so rewording or re-exporting it keeps the key). The file is
part of the repository: committed with the rest, a CI job on a fresh clone
has it. Later, when the same patch does not apply again (``zmr update``'s
trials, ``zmr rebase``, ``update --apply``), the recorded change is tried in
its place before it counts as a conflict, in every pass that can meet the
conflict (the in-memory replay, the 3-way trial picks of ``zmr update``,
the cherry-picks in rebase's checkout); if it applies, it goes in (with the
patch's message and author) and the report names it as reused; one that was
tried and did not go in is reported with why (``NotReplayed``). Nothing else
changes a resolution; delete the file to forget one; ``zmr rebase --abort``
forgets those recorded during the rebase it undoes. A resolution recorded
before upstream renamed a file it changes is tried, in the passes that
follow renames (update's trial picks, rebase's cherry-picks), also with
that file's new name (``moved``).

A resolution comes from a commit, so from anyone: it is read only as a
regular file under a real ``resolutions/`` folder (no symbolic link on the
way), and is not replayed when it adds a conflict marker line, names a path
outside the tree (absolute, ``..``, ``.git``) or makes a symbolic link.

Layout: ``resolutions/<key>.diff`` at the repository root, ``key`` = the
first 24 hex digits of SHA-256 over the patch's diff (from its first
``diff --git`` line, the mail signature left out).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from zmr.infra.files import atomic_write
from zmr.model.series import Patch

if TYPE_CHECKING:
    from zmr.model.project import Project

FOLDER = "resolutions"
FILE_RE = re.compile(r"resolutions/[0-9a-f]{24}\.diff")  # the only paths a resolution has (checked where one is read from state)


def _diff_part(data: bytes) -> bytes:
    start = data.find(b"diff --git ")
    body = data[start:] if start >= 0 else data
    cut = body.rfind(b"\n-- \n")
    return body[: cut + 1] if cut >= 0 else body


def key_of(patch: Patch) -> str:
    return hashlib.sha256(_diff_part(patch.data)).hexdigest()[:24]


def file_of(patch: Patch) -> str:
    """Where *patch*'s resolution is kept, relative to the repository root: ``resolutions/<key>.diff``."""
    return f"{FOLDER}/{key_of(patch)}.diff"


def path_for(root: Path, patch: Patch) -> Path:
    return root / file_of(patch)


class NotReplayedJson(TypedDict):
    """A recorded resolution (*file*, resolutions/<key>.diff) of *patch* that was not replayed where it conflicted, and why."""

    patch: str
    file: str
    reason: str


@dataclasses.dataclass(frozen=True)
class NotReplayed:
    """A recorded resolution of *patch* that was not replayed where the patch conflicted, and why (*reason*)."""

    patch: str
    file: str  # resolutions/<key>.diff
    reason: str

    def to_json(self) -> NotReplayedJson:
        return {"patch": self.patch, "file": self.file, "reason": self.reason}


Recorded = Callable[[Patch], "Patch | NotReplayed | None"]  # a patch → its recorded resolution (``recorded``), bound to a root


def recorded(root: Path, patch: Patch) -> Patch | NotReplayed | None:
    """*patch* with its recorded resolution as its change (message and author kept); None when none is recorded;
    ``NotReplayed`` when there is one that zmr does not replay (a link, a conflict marker, a path outside the tree)."""
    rel = file_of(patch)
    folder, path = root / FOLDER, root / rel
    if folder.is_symlink() or path.is_symlink():
        return NotReplayed(patch.name, rel, f"{FOLDER if folder.is_symlink() else rel} is a symbolic link: zmr reads no resolution through one")
    if not path.exists():
        return None
    if not path.is_file():
        return NotReplayed(patch.name, rel, "not a regular file")
    try:
        diff = path.read_bytes()
    except OSError as err:
        return NotReplayed(patch.name, rel, f"cannot be read ({err.strerror})")
    if not diff.strip():
        return None
    problem = unsafe(diff)
    if problem:
        return NotReplayed(patch.name, rel, problem)
    return dataclasses.replace(patch, data=diff, strip=1)


# Patterns compiled (and kept) by re when first used, as zmr.infra.git's: only a command that reads a resolution pays for them.
_MARKER = rb"^\+(?:<<<<<<<|>>>>>>>|\|\|\|\|\|\|\|)(?: |$)"
_PATH_LINE = rb"^(?:diff --git |--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$"
_LINK_MODE = rb"^(?:new file mode|new mode|old mode|deleted file mode) 120000$"


def unsafe(diff: bytes) -> str | None:
    """Why *diff* (a recorded resolution) is not replayed, or None: it adds a conflict marker line, names a path
    outside the tree (absolute, ``..`` or ``.git`` in it) or changes a symbolic link. One pass over its lines; a path
    line is checked wherever it stands (git apply may read one after a hunk)."""
    in_hunk = False
    marker, link_mode, path_line = re.compile(_MARKER), re.compile(_LINK_MODE), re.compile(_PATH_LINE)  # once, not per line
    for number, line in enumerate(diff.split(b"\n"), 1):
        if line.startswith(b"diff --git "):
            in_hunk = False
        elif line.startswith(b"@@ "):
            in_hunk = True
        if in_hunk and marker.match(line):
            return f"line {number} adds a conflict marker ({line[1:8].decode()}): a resolution is replayed only without them"
        if link_mode.match(line.rstrip(b"\r")):
            return f"line {number} changes a symbolic link: a resolution may not make or change one"
        match = path_line.match(line)
        if match:
            names = match.group(1).split(b"\t", 1)[0].replace(b'"', b" ")
            for name in names.split(b" "):
                parts = name.split(b"/")
                if name.startswith(b"/") and name != b"/dev/null" or any(p in (b"..",) or p.lower() == b".git" for p in parts):
                    return f"line {number} names a path outside the tree ({name.decode('utf-8', 'replace')})"
    return None


def try_recorded(
    resolved: Recorded | None,
    patch: Patch,
    replay: Callable[[Patch], str | None],
    reused: list[str],
    unused: list[NotReplayed],
    renames: Callable[[], Mapping[str, str]] | None = None,
) -> bool:
    """Replay *patch*'s recorded resolution where the patch conflicts: *replay* (a pass's own way of applying it) commits it
    and returns None, or says why it did not go in. Reused: *patch*'s name added to *reused*; tried and not reused: a
    ``NotReplayed`` in *unused* (one per patch, the last). False: the patch still conflicts.

    *renames*: upstream's renames since the pin (old path → new), in a pass that follows them (a cherry-pick's merge): a
    resolution recorded before upstream renamed a file it changes, which does not go in as recorded, is tried again at
    the new names (``moved``), and the reason of one that still does not go in says which names it was tried at."""
    found = resolved(patch) if resolved else None
    if found is None:
        return False
    if isinstance(found, Patch):
        reason = replay(found)
        moves = moved(found, renames()) if reason is not None and renames is not None else None
        if moves is not None:
            again = replay(moves[0])
            shown = ", ".join(f"{old} -> {new}" for old, new in moves[1].items())
            reason = None if again is None else f"{again}, as recorded and at the names upstream renamed its files to ({shown})"
        if reason is None:
            unused[:] = [u for u in unused if u.patch != patch.name]
            reused.append(patch.name)
            return True
        found = NotReplayed(patch.name, file_of(patch), reason)
    unused[:] = [u for u in unused if u.patch != patch.name] + [found]
    return False


_HEADER_PATH = rb"^(diff --git a/(\S+) b/(\S+)|(?:---|\+\+\+) [ab]/(\S+)|(?:rename|copy) (?:from|to) (\S+))$"


def moved(resolution: Patch, renames: Mapping[str, str]) -> tuple[Patch, dict[str, str]] | None:
    """*resolution* (``-p1``) with each file that upstream renamed (*renames*: old path → new) named by its new name, and the
    names it moved; None when it names none of them. Only the header lines of each file (before its first hunk) change, and
    only plain names (a quoted one, or one with a space or a tab, is left as it is: then it does not apply and is said so)."""
    if not renames:
        return None
    keys = {old.encode("utf-8", "surrogateescape"): new.encode("utf-8", "surrogateescape") for old, new in renames.items()}
    done: dict[str, str] = {}
    out: list[bytes] = []
    header = False
    header_path = re.compile(_HEADER_PATH)  # once, not per line
    for line in resolution.data.split(b"\n"):
        if line.startswith(b"diff --git "):
            header = True
        elif line.startswith(b"@@ "):
            header = False
        for group in range(2, 6) if header else ():
            match = header_path.match(line)  # again after each name replaced: the spans after it moved
            name = match.group(group) if match else None
            if match and name is not None and name in keys:
                start, end = match.span(group)
                line = line[:start] + keys[name] + line[end:]
                done[name.decode("utf-8", "surrogateescape")] = keys[name].decode("utf-8", "surrogateescape")
        out.append(line)
    data = b"\n".join(out)
    if not done or unsafe(data):  # (the new names are upstream's paths; checked again all the same)
        return None
    return dataclasses.replace(resolution, data=data), done


def record(project: Project, patch: Patch, diff: bytes) -> Path:
    """Keep *diff* (the resolved change, ``-p1``) as the resolution of *patch*; returns the file written.

    Never through a symbolic link (a committed ``resolutions`` link, or a link
    in place of the file, would send the write outside the work tree).
    """
    path = project.no_links(file_of(patch), "recorded resolutions")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, diff)
    return path
