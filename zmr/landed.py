"""Has a patch's change landed upstream in another form? Its changed lines against the target.

The one definition of "upstream" (docs/reference.md §7.9.1, ``replay.upstream_holds``)
asks, for a patch at the target (the target plus the patches before it):
it applies and changes nothing (``empty``); it does not apply and
reverse-applies (``reverse-apply``); else, its changed lines (this module):

    patch ──changed_lines──▶ per file: lines it adds, lines it removes (significant: with a letter or digit;
                              compared without any whitespace, so a reformatted line still matches)
    before (the file where the patch was made) / after (the file at the target) ──line_landing──▶ landed, total
        a line the patch adds counts as landed when the target has it as many more times as the patch adds it;
        a line it removes, when the target has it as many fewer times

All of them landed: ``landed`` (upstream holds the change, reformatted, split
over several commits, squashed with others or with different context); some
of them, at least one added line among them: *partially landed* (kept and
reported, never dropped); none: not upstream. The lines a patch adds are the
evidence: a patch that only removes lines is not judged by them. ``introducing_commits`` names the upstream commits since the pin
that added or removed those lines (``via``).

Read-only; standard library and zmr.git only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zmr import git

MAX_COMMITS = 300  # upstream commits read when naming those that brought a change in

_SIGNIFICANT = re.compile(r"[A-Za-z0-9]")
_WS = re.compile(rb"\s+")


def _norm(line: bytes) -> bytes:
    return _WS.sub(b"", line)


def _significant(line: bytes) -> bool:
    return bool(_SIGNIFICANT.search(line.decode("utf-8", "replace")))


def _path(header: bytes, strip: int) -> str | None:
    name = header.split(b"\t")[0].strip()
    if name == b"/dev/null":
        return None
    if name.startswith(b'"'):
        return None  # a quoted (unusual) name: not compared
    parts = name.decode("utf-8", "surrogateescape").split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else None


def changed_lines(data: bytes, strip: int = 1) -> dict[str, tuple[Counter[bytes], Counter[bytes]]]:
    """Per file of the diff in *data* (new name; old name for a deletion): (lines added, lines removed), normalized, significant."""
    result: dict[str, tuple[Counter[bytes], Counter[bytes]]] = {}
    current: tuple[Counter[bytes], Counter[bytes]] | None = None
    old_name: str | None = None
    in_hunk = False
    for raw in data.split(b"\n"):
        if raw.startswith(b"diff --git "):
            current, old_name, in_hunk = None, None, False
            continue
        if not in_hunk and raw.startswith(b"--- "):
            old_name = _path(raw[4:], strip)
            continue
        if not in_hunk and raw.startswith(b"+++ "):
            name = _path(raw[4:], strip) or old_name
            current = result.setdefault(name, (Counter(), Counter())) if name else None
            continue
        if raw.startswith(b"@@"):
            in_hunk = True
            continue
        if current is None or not in_hunk:
            continue
        if raw.startswith(b"+") and _significant(raw[1:]):
            current[0][_norm(raw[1:])] += 1
        elif raw.startswith(b"-") and _significant(raw[1:]):
            current[1][_norm(raw[1:])] += 1
        elif not raw.startswith((b" ", b"\\")) and raw:
            in_hunk = False  # the mail's signature or trailing text
    return result


def _counts(content: bytes | None) -> Counter[bytes]:
    if not content:
        return Counter()
    return Counter(_norm(line) for line in content.split(b"\n") if _significant(line))


def line_landing(data: bytes, strip: int, before: Callable[[str], bytes | None], after: Callable[[str], bytes | None]) -> tuple[int, int]:
    """(lines of the patch's change present at *after*, lines of its change): see the module docstring.

    The evidence is the lines it adds: with none of them at *after*, nothing
    landed (upstream may have rewritten the lines the patch removes, which a
    conflict looks like too); a patch that only removes lines gives (0, 0)
    (its removal reverse-applies, or it is not judged here).
    """
    added_landed = added_total = removed_landed = removed_total = 0
    for path, (added, removed) in changed_lines(data, strip).items():
        if not added and not removed:
            continue
        was, now = _counts(before(path)), _counts(after(path))
        for line, need in added.items():
            if line in removed:  # moved within the file: not a change the counts can see
                continue
            added_total += need
            added_landed += max(0, min(need, now[line] - was[line]))
        for line, need in removed.items():
            if line in added:
                continue
            removed_total += need
            removed_landed += max(0, min(need, was[line] - now[line]))
    if not added_total:
        return 0, 0
    if not added_landed:
        return 0, added_total + removed_total
    return added_landed + removed_landed, added_total + removed_total


def blob_reader(repo: git.Repo, commit: str) -> Callable[[str], bytes | None]:
    """path → its bytes in *commit* (None: absent, or not in a partial mirror)."""

    def read(path: str) -> bytes | None:
        try:
            return repo.cat_file("blob", f"{commit}:{path}")
        except git.GitError:
            return None

    return read


def introducing_commits(repo: git.Repo, commits: Sequence[str], data: bytes, strip: int) -> list[str]:
    """Those of *commits* (upstream, oldest first, touching the patch's files) that add a line the patch adds or remove one it removes."""
    wanted = changed_lines(data, strip)
    if not wanted:
        return []
    paths = sorted(wanted)
    found = []
    for commit in commits[:MAX_COMMITS]:
        for path, (added, removed) in changed_lines(repo.diff_patch(commit, paths), 1).items():
            mine = wanted.get(path)
            if mine and ((set(added) & set(mine[0]) - set(mine[1])) or (set(removed) & set(mine[1]) - set(mine[0]))):
                found.append(commit)
                break
    return found


@dataclass
class Landing:
    """How much of a patch's change the target holds: *state* ``same-patch``, ``modified`` or ``partial``; *via*: the upstream commits."""

    state: str
    via: list[str]
    landed: int = 0
    total: int = 0

    @property
    def label(self) -> str:
        via = ", ".join(c[:12] for c in self.via) or "commit not identified"
        if self.state == "same-patch":
            return f"landed (same patch, via {via})"
        if self.state == "modified":
            return f"landed (modified, via {via})"
        return f"partially landed ({self.landed} of {self.total} changed lines, via {via})"

    def to_json(self) -> dict:
        return {"state": self.state, "label": self.label, "via": self.via, "landed": self.landed, "total": self.total}
