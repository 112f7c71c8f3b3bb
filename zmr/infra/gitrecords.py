"""What git's plumbing answers and what zmr gives it, as records: entries of ``ls-tree`` and ``diff-tree --raw``, objects of
``cat-file``, commits; the identity of a commit zmr writes, a ref update, a picked tree.

The types of `zmr.infra.git` (which parses git's output into them and runs every git command), in a module of their own so
that a command that never reads these (``zmr list``, ``zmr status``) does not build them at its start: each dataclass
costs its generated methods' compilation. ``zmr.infra.git`` still names each of them (``git.Identity``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PickedTree:
    """What ``Repo.pick_tree`` made: *tree*, and the paths left in conflict (*conflicts*, empty when it merged cleanly)."""

    tree: str
    conflicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """Author or committer of a commit zmr writes: name, email, epoch seconds, offset."""

    name: str
    email: str
    timestamp: int
    offset: str = "+0000"

    def env(self, role: str) -> dict[str, str]:
        return {
            f"GIT_{role}_NAME": self.name,
            f"GIT_{role}_EMAIL": self.email,
            f"GIT_{role}_DATE": f"@{self.timestamp} {self.offset}",
        }


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One record of ``ls-tree -z``: *type* is ``blob``, ``tree`` or ``commit`` (a submodule); *size* only with ``-l``, for blobs."""

    mode: str
    type: str
    oid: str
    path: str
    size: int | None = None

    @property
    def path_bytes(self) -> bytes:
        return self.path.encode("utf-8", "surrogateescape")


_ABSENT_MODE = "000000"  # diff-tree's mode for the side of a path that is not there


@dataclass(frozen=True, slots=True)
class RawDiffEntry:
    """One record of ``diff-tree --raw -z``. A side where the path is absent has mode ``000000`` and the zero id.

    *status* is git's letter, with a score for a rename or copy (``R100``); then *old_path* is where it came from.
    """

    old_mode: str
    new_mode: str
    old_oid: str
    new_oid: str
    status: str
    path: str
    old_path: str | None = None

    @property
    def path_bytes(self) -> bytes:
        return self.path.encode("utf-8", "surrogateescape")

    @property
    def old_entry(self) -> tuple[str, str] | None:
        """(mode, id) before; None where the path was absent."""
        return None if self.old_mode == _ABSENT_MODE else (self.old_mode, self.old_oid)

    @property
    def new_entry(self) -> tuple[str, str] | None:
        """(mode, id) after; None where the path is deleted."""
        return None if self.new_mode == _ABSENT_MODE else (self.new_mode, self.new_oid)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``cat-file --batch-check`` says of an object that exists."""

    oid: str
    type: str
    size: int


@dataclass(frozen=True, slots=True)
class GitObject:
    """An object read by ``cat-file --batch``: its id, type, size and bytes."""

    oid: str
    type: str
    size: int
    content: bytes


@dataclass(frozen=True)
class RefUpdate:
    ref: str
    new: str | None  # None deletes
    old: str | None  # None: must not exist (for updates) / any (for deletes)


@dataclass(frozen=True)
class CommitInfo:
    """A parsed commit object."""

    oid: str
    tree: str
    parents: tuple[str, ...]
    author: str
    committer: str
    message: str

    @classmethod
    def parse(cls, oid: str, raw: bytes) -> CommitInfo:
        head, _, body = raw.partition(b"\n\n")
        tree = ""
        parents: list[str] = []
        author = committer = ""
        for line in head.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                tree = value
            elif key == "parent":
                parents.append(value)
            elif key == "author":
                author = value
            elif key == "committer":
                committer = value
        return cls(oid, tree, tuple(parents), author, committer, body.decode("utf-8", "replace"))

    def trailers(self) -> dict[str, str]:
        """``Key: value`` lines of the last paragraph."""
        paragraphs = self.message.strip().split("\n\n")
        result: dict[str, str] = {}
        for line in paragraphs[-1].splitlines() if paragraphs else []:
            key, sep, value = line.partition(": ")
            if sep and key and " " not in key:
                result[key] = value.strip()
        return result
