"""Each patch's upstream status: where its change stands with upstream, as the patch says it (docs/reference.md §7.2.1).

Read from the patch's message (what comes before its diff), first match wins::

    Upstream-Status: submitted <url> | backport <commit> | inappropriate <why> | pending | accepted [<commit>] | denied [<why>]
        (a trailer, as Yocto writes it; the kind in any case, the rest optionally in [brackets])
    Forwarded: <url> | no | not-needed                                   (DEP-3: submitted / pending / inappropriate)
    Origin: upstream|backport, <commit or URL naming one>                (DEP-3: backport)

``status_of`` returns the status and the problems of a malformed header
(``zmr validate`` reports them; ``--require-upstream-status`` also makes a
missing one a problem). ``backport`` and ``accepted`` name an upstream commit
(a 7 to 40 digit hex id in the text): ``zmr update`` checks it against the
upstream history (a commit at or below the pin: the patch is droppable).
Standard library and zmr.model.series only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from zmr.model.series import Patch

KINDS = ("submitted", "backport", "inappropriate", "pending", "accepted", "denied")
NEEDS_DETAIL = {"submitted": "the URL of the submission", "backport": "the upstream commit id", "inappropriate": "why it cannot go upstream"}
_LINE = re.compile(r"^(Upstream-Status|Forwarded|Origin)\s*:\s*(.*)$", re.I)  # the value stripped by str.strip: `(.*?)\s*$` is quadratic
_COMMIT = r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])"  # compiled (and kept) by re when first used: a count never needs it
FIX = "write `Upstream-Status: submitted <url>`, `backport <commit>`, `inappropriate <why>`, `pending`, `accepted` or `denied` in the patch's message"


class UpstreamStatusJson(TypedDict):
    """A patch's declared upstream status: *kind*, *detail* (URL, commit, reason), the commit a backport or accepted
    status names (null: none), the header it was read from and its line in the patch file."""

    kind: str
    detail: str
    commit: str | None
    header: str
    line: int


@dataclass(frozen=True)
class UpstreamStatus:
    """*kind* (one of KINDS), *detail* (URL, commit, reason), the *header* it was read from and its *line* in the patch file."""

    kind: str
    detail: str
    header: str
    line: int

    @property
    def commit(self) -> str | None:
        """The upstream commit a ``backport``/``accepted`` status names."""
        if self.kind not in ("backport", "accepted"):
            return None
        match = re.search(_COMMIT, self.detail)
        return match.group(0) if match else None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.detail}".strip()

    def to_json(self) -> UpstreamStatusJson:
        return {"kind": self.kind, "detail": self.detail, "commit": self.commit, "header": self.header, "line": self.line}


# The line that ends the message: `diff --git ...`, `---` alone, `Index: ...`; after a newline (a pattern that starts with one
# is scanned for fast), or as the file's first line.
_END = rb"(?:diff --git |---(?=\n|\Z)|Index: )"
_END_RE = re.compile(b"\n" + _END)
_FIRST_END_RE = re.compile(_END)


def _message_lines(data: bytes) -> list[tuple[int, str]]:
    """(line number, text) of the patch file up to its diff (the mail's ``---`` or the first ``diff --git``)."""
    if _FIRST_END_RE.match(data):
        return []
    end = _END_RE.search(data)
    found = []
    for number, raw in enumerate((data if end is None else data[: end.start()]).split(b"\n"), 1):  # the lines before it alone
        if raw.startswith(b"diff --git ") or raw == b"---" or raw.startswith(b"Index: "):
            break
        found.append((number, raw.decode("utf-8", "replace").rstrip("\r")))
    return found


def status_of(patch: Patch) -> tuple[UpstreamStatus | None, list[tuple[int, str]]]:
    """The status *patch* declares (None: none), and (line, problem) for each malformed header."""
    headers = [(n, m.group(1).lower(), m.group(2).strip()) for n, text in _message_lines(patch.data) for m in [_LINE.match(text)] if m]
    problems: list[tuple[int, str]] = []
    status = None
    for number, header, value in sorted(headers, key=lambda h: ("upstream-status", "forwarded", "origin").index(h[1])):
        found = _read(number, header, value, problems)
        if found is not None and status is None:
            status = found
    return status, problems


def _read(number: int, header: str, value: str, problems: list[tuple[int, str]]) -> UpstreamStatus | None:
    if header == "upstream-status":
        kind, _, detail = value.partition(" ")
        kind, detail = kind.lower().strip(), detail.strip().strip("[]").strip()
        if kind not in KINDS:
            problems.append((number, f"Upstream-Status: unknown status {kind!r} (one of {', '.join(KINDS)})"))
            return None
        if kind in NEEDS_DETAIL and not detail:
            problems.append((number, f"Upstream-Status: {kind} needs {NEEDS_DETAIL[kind]}"))
            return None
        status = UpstreamStatus(kind, detail, "Upstream-Status", number)
        if kind == "backport" and status.commit is None:
            problems.append((number, f"Upstream-Status: backport names no commit id (7 to 40 hex digits) in {detail!r}"))
            return None
        return status
    if header == "forwarded":
        lowered = value.lower()
        if lowered in ("no", ""):
            return UpstreamStatus("pending", "", "Forwarded", number)
        if lowered == "not-needed":
            return UpstreamStatus("inappropriate", "not-needed", "Forwarded", number)
        return UpstreamStatus("submitted", value, "Forwarded", number)
    origin, _, detail = value.partition(",")
    if origin.strip().lower() in ("upstream", "backport"):
        status = UpstreamStatus("backport", detail.strip(), "Origin", number)
        return status if status.commit else None  # a URL without a commit id: nothing to check
    return None  # vendor, other: where it came from, not where it stands


def counts(patches: Sequence[Patch]) -> dict[str, int]:
    """How many of *patches* declare each upstream status kind (``none``: no header), kinds in name order: `zmr list` and `zmr status`."""
    kinds = [status.kind if (status := status_of(p)[0]) else "none" for p in patches]
    return {kind: kinds.count(kind) for kind in sorted(set(kinds))}
