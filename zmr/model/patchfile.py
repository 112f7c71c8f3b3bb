"""Canonical patch files: one commit → one byte-stable ``git format-patch``-style mail.

The bytes are a function of the commit alone (author, date, message, the
diff against its parent), never of the git version or of anyone's config:
the mail header is written here, not by ``format-patch``, and the diff comes
from ``git diff-tree`` with every option that could vary spelled out::

    From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
    From: Patch Author <author@example.org>
    Date: Sun, 10 Mar 2024 16:00:00 +0000
    Subject: [PATCH] Use a fixed split size in matmul

    Body of the commit message, as written.
    ---
    diff --git a/src/model.py b/src/model.py
    index <40 hex>..<40 hex> 100644
    --- a/src/model.py
    +++ b/src/model.py
    @@ -7,7 +7,7 @@
    ...

- the ``From`` line carries the zero id (no commit id churn), there is no
  ``[PATCH n/m]`` numbering, no diffstat and no version signature;
- non-ASCII subjects and names are RFC 2047 encoded (UTF-8) and the body is
  declared ``text/plain; charset=UTF-8`` with 8bit transfer, as git does;
- the diff: full ``index`` lines, ``a/`` ``b/`` prefixes, 3 lines of
  context, exact (100 %) renames only and no copies, myers with the indent
  heuristic, binary changes as ``GIT binary patch``, no textconv or external diff.

``series.parse_patch`` reads these files back to the same author, date,
subject and body, and ``git am`` / ``git apply`` take them as they are
(``git am --keep-non-patch`` keeps subject tags such as ``[Bugfix]`` as zmr
does; plain ``git am`` drops every leading ``[...]``).

The same module maps a patch to the commit that stands for it
(``CommitMeta.for_patch``): author, date and message come from the patch;
a patch without them (a quilt-style diff) gets fixed placeholders, so the
commit is still a pure function of the patch bytes.
"""

from __future__ import annotations

import datetime
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from zmr.infra import git
from zmr.model.series import Patch, strip_patch_tags

ZERO_FROM_LINE = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
# Identity of a commit made from a patch that names no author or date.
UNKNOWN_NAME = "Unknown Author"
UNKNOWN_EMAIL = "unknown@zmr.invalid"
UNKNOWN_TIMESTAMP = 0

# Repository config that could still change a diff (a checkout's own .git/config is read):
# forced here, on top of what zmr.infra.git fixes for every call.
DIFF_CONFIG = (
    "-c",
    "diff.suppressBlankEmpty=false",
    "-c",
    "diff.context=3",
    "-c",
    "diff.interHunkContext=0",
    "-c",
    "diff.algorithm=myers",
    "-c",
    "diff.indentHeuristic=true",
    "-c",
    "diff.relative=false",
    "-c",
    "apply.ignoreWhitespace=no",
    "-c",
    "apply.whitespace=nowarn",
)
DIFF_OPTIONS = (
    "-p",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--full-index",
    "--binary",
    "--find-renames=100%",  # exact renames only (no copies): a moved file is a few lines, not its whole text twice
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--ignore-submodules=none",
    "--inter-hunk-context=0",
    "--no-relative",
    "-O/dev/null",
)

# Patterns compiled (and kept) by re when first used, as zmr.infra.git's: `zmr status` imports this module and uses none of them.
_SIGNATURE = r"^(.*?) ?<([^<>]*)> (-?\d+) ([+-]\d{4})$"
_SLUG = r"[^a-z0-9]+"
SLUG_MAX = 52


@dataclass(frozen=True)
class CommitMeta:
    """What a patch says about its commit: author, author date, subject and body."""

    name: str
    email: str
    timestamp: int
    offset: str
    subject: str
    body: str

    @property
    def identity(self) -> git.Identity:
        return git.Identity(self.name, self.email, self.timestamp, self.offset)

    @property
    def message(self) -> str:
        return self.subject + "\n" + (f"\n{self.body}\n" if self.body else "")

    @classmethod
    def for_patch(cls, patch: Patch) -> CommitMeta:
        return cls(
            name=patch.author_name or UNKNOWN_NAME,
            email=patch.author_email or UNKNOWN_EMAIL,
            timestamp=patch.timestamp if patch.timestamp is not None else UNKNOWN_TIMESTAMP,
            offset=patch.offset if patch.timestamp is not None else "+0000",
            subject=patch.subject,
            body=patch.body,
        )

    @classmethod
    def for_commit(cls, info: git.CommitInfo) -> CommitMeta:
        match = re.match(_SIGNATURE, info.author.strip())
        if match:
            name, mail, stamp, offset = match.group(1), match.group(2), int(match.group(3)), match.group(4)
        else:  # pragma: no cover - git never writes such an author line
            name, mail, stamp, offset = info.author, "", 0, "+0000"
        subject, body = split_message(info.message)
        return cls(name.strip(), mail.strip(), stamp, offset, subject, body)

    def same_as_patch(self, patch: Patch) -> bool:
        """True when a commit with this metadata is what *patch* turns into."""
        mine = CommitMeta(self.name, self.email, self.timestamp, self.offset, normalize_subject(self.subject), self.body)
        return mine == CommitMeta.for_patch(patch)


def split_message(message: str) -> tuple[str, str]:
    """(subject, body) as ``git format-patch`` sees a message: first paragraph joined into one line."""
    lines = [line.rstrip() for line in message.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    subject_lines = []
    while lines and lines[0].strip():
        subject_lines.append(lines.pop(0).strip())
    body = "\n".join(lines).strip("\n")
    return " ".join(subject_lines), body


# A message line that a reader of the patch file takes for the end of the message or the start of a diff:
# `---` (zmr and git am end the message there), `--- x` and `Index: x` (zmr's reader does), `diff --git` (git apply reads a diff).
_MESSAGE_CUT = r"^(?:---$|--- |diff --git |Index: )"


def message_cut(message: str) -> tuple[int, str] | None:
    """(line number in *message*, the line) of the first body line that would cut the message in a patch file; None when none would.

    Written into a patch as it is, such a line loses the rest of the message
    when the series is checked out again, or makes ``git apply`` read a diff
    that is not there; git has no way to quote it.
    """
    lines = message.replace("\r\n", "\n").split("\n")
    number = 0
    while number < len(lines) and not lines[number].strip():
        number += 1
    while number < len(lines) and lines[number].strip():  # the subject paragraph becomes one Subject: line
        number += 1
    cut = re.compile(_MESSAGE_CUT)  # once, not per line
    for index in range(number, len(lines)):
        line = lines[index].rstrip()
        if cut.match(line):
            return index + 1, line
    return None


def normalize_subject(subject: str) -> str:
    """The subject ``series.parse_patch`` (and ``git am --keep-non-patch``) reads back: leading ``[PATCH ...]`` tags dropped, others kept."""
    return strip_patch_tags(subject)


def slug(subject: str) -> str:
    """``Use a fixed split size!`` → ``use-a-fixed-split-size`` (a-z, 0-9, '-'; at most 52 characters)."""
    text = re.sub(_SLUG, "-", normalize_subject(subject).lower()).strip("-")
    if len(text) > SLUG_MAX:
        text = text[:SLUG_MAX].rsplit("-", 1)[0] if "-" in text[:SLUG_MAX] else text[:SLUG_MAX]
    return text.strip("-") or "patch"


def patch_name(position: int, subject: str) -> str:
    return f"{position:04d}-{slug(subject)}.patch"


def commit_diff(repo: git.Repo, parent: str, commit: str) -> bytes:
    """The canonical diff of *commit* against *parent* (trees or commits)."""
    return diff_tree(repo, parent, commit).stdout


def commit_diffs(repo: git.Repo, commits: Sequence[str]) -> dict[str, bytes]:
    """``commit_diff`` of each commit against its only parent, from one ``git diff-tree --stdin``."""
    if not commits:
        return {}
    out = diff_tree(repo, "--stdin", "--always", input=("\n".join(commits) + "\n").encode()).stdout
    diffs: dict[str, bytes] = {}
    pos = 0
    for i, commit in enumerate(commits):
        # Each commit's diff follows a line holding just its id; a diff line never is one (it starts with a
        # marker, and a base85 line is 1 + 5k characters long).
        header = commit.encode() + b"\n"
        if not out.startswith(header, pos):
            raise ValueError(f"diff-tree --stdin: expected {commit} at byte {pos}")
        start = pos + len(header)
        end = out.find(b"\n" + commits[i + 1].encode() + b"\n", start - 1) + 1 if i + 1 < len(commits) else len(out)
        if end <= 0:
            raise ValueError(f"diff-tree --stdin: no output for {commits[i + 1]}")
        diffs[commit] = out[start:end]
        pos = end
    return diffs


def diff_tree(repo: git.Repo, *rest: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git diff-tree`` with the canonical options (and config overrides) and *rest*."""
    return repo.diff_tree([*DIFF_OPTIONS, *rest], options=DIFF_CONFIG, input=input)


def format_mail(meta: CommitMeta, diff: bytes) -> bytes:
    """Header, message and diff of one patch mail."""
    import email.utils  # here, as email.header below: a command that writes no patch (`zmr status`) needs neither

    ascii_only = all(ord(c) < 128 for c in meta.subject + meta.body + meta.name)
    headers = [
        ZERO_FROM_LINE,
        "From: " + email.utils.formataddr((meta.name, meta.email), charset="utf-8"),
        "Date: " + format_date(meta.timestamp, meta.offset),
        "Subject: [PATCH] " + _encode_header(meta.subject),
    ]
    if not ascii_only:
        headers += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=UTF-8", "Content-Transfer-Encoding: 8bit"]
    text = "\n".join(headers) + "\n\n"
    if meta.body:
        text += meta.body + "\n"
    text += "---\n"
    return text.encode("utf-8", "surrogateescape") + diff


def _encode_header(value: str) -> str:
    if all(32 <= ord(c) < 127 for c in value):
        return value
    import email.header

    return email.header.Header(value, "utf-8", maxlinelen=1 << 20).encode()


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def format_date(timestamp: int, offset: str) -> str:
    """RFC 2822 date as git writes it: ``Sat, 9 Mar 2024 16:00:00 +0000`` (in the author's offset)."""
    if not re.fullmatch(r"[+-]\d{4}", offset):
        offset = "+0000"
    sign = -1 if offset.startswith("-") else 1
    minutes = sign * (int(offset[1:3]) * 60 + int(offset[3:5]))
    tz = datetime.timezone(datetime.timedelta(minutes=minutes))
    dt = datetime.datetime.fromtimestamp(timestamp, tz)
    return f"{_DAYS[dt.weekday()]}, {dt.day} {_MONTHS[dt.month - 1]} {dt.year} {dt:%H:%M:%S} {offset}"
