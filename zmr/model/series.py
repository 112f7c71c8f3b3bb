"""Patch series: ``patches/<model>/<component>/series`` (docs/reference.md §3).

The ``series`` file is quilt's: one patch name per line in apply order,
``#`` comments, blank lines ignored, an optional ``-pN`` per line (default
``-p1``). Names are relative to the folder (subfolders allowed); absolute
names, ``..`` and anything resolving outside the folder are refused.

Each patch is a ``git format-patch`` mail, or a plain unified diff with
free-form (e.g. DEP-3) headers. ``Patch`` keeps the exact bytes: the series
digest and the changes commit are functions of those bytes.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from zmr.infra.errors import SeriesError
from zmr.infra.files import FileRefused, read_repo_file
from zmr.model.yamlnodes import Problem
from zmr.model.yamlrecords import invisible_character

MAX_PATCH_BYTES = 64 << 20
MAX_SERIES_BYTES = 1 << 20
PATCH_SUFFIXES = (".patch", ".diff")
# Patterns that reading a plain series never needs (an option, an mbox, a conflict marker, a DEP-3 field, a folded header, the
# message's checks) are strings, compiled (and kept) by re when first used, as zmr.infra.git's: `zmr list` never pays for them.
_STRIP = r"-p(\d+)\Z"
_DIFF_START_RE = re.compile(rb"^(?:diff --git |--- \S|GIT binary patch)", re.MULTILINE)
# The line that starts each mail of an mbox (git format-patch: "From <id> Mon Sep 17 00:00:00 2001").
_MBOX_FROM = rb"(?m)^From \S+ +[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}$"
_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class SeriesEntry:
    """One line of ``series``: the patch name, its -p level and where it was written."""

    name: str
    strip: int
    line: int


@dataclass(frozen=True)
class Patch:
    """A patch file: exact bytes plus the metadata a commit needs.

    Author and date are kept as their headers give them (*author*: ``From:``,
    or DEP-3's ``Author:``, decoded and unfolded; *date*: ``Date:``;
    *last_update*: DEP-3's ``Last-Update:``) and read on first use
    (`author_name`, `author_email`, `timestamp`, `offset`): the standard
    library's mail parsers cost a command that never asks (``zmr list``) a few
    ms to import.
    """

    name: str
    path: Path
    strip: int
    data: bytes
    subject: str
    body: str
    author: str | None = None
    date: str | None = None
    last_update: str | None = None

    @functools.cached_property
    def _author(self) -> tuple[str | None, str | None]:
        if not self.author:
            return None, None
        import email.utils

        name, address = email.utils.parseaddr(self.author)
        return name or None, address or None

    @property
    def author_name(self) -> str | None:
        return self._author[0]

    @property
    def author_email(self) -> str | None:
        return self._author[1]

    @functools.cached_property
    def _date(self) -> tuple[int | None, str]:
        timestamp, offset = _parse_date(self.date) if self.date else (None, "+0000")
        if timestamp is None and self.last_update:  # DEP-3: the day its information was last updated, the nearest to an author date
            timestamp, offset = _parse_day(self.last_update)
        return timestamp, offset

    @property
    def timestamp(self) -> int | None:
        """The author date, epoch seconds; None when the patch gives none zmr can read."""
        return self._date[0]

    @property
    def offset(self) -> str:
        """The author date's time zone, ``+HHMM``; ``+0000`` without a date."""
        return self._date[1]

    @functools.cached_property
    def sha256(self) -> str:
        """Of the bytes: computed once (series digests and comparisons ask again and again)."""
        import hashlib  # here: OpenSSL's start is a few ms that reading a series (zmr list) never needs

        return hashlib.sha256(self.data).hexdigest()

    def hunks(self) -> list[Hunk]:
        return list_hunks(self.data, self.strip)


@dataclass(frozen=True)
class Hunk:
    """One hunk of a patch, for naming the one that failed."""

    file: str
    index: int  # 1-based within its file
    old_start: int
    header: str
    line: int  # line in the patch file


@dataclass
class Series:
    """The ordered patches of one component, plus warnings found while reading.

    *text* and *entries* are the ``series`` file as `read_series` read it (its text, its lines parsed), so that
    whoever needs the file itself (export keeps its comments and layout) does not read it a second time; None and
    empty for a series that was not read from a folder.
    """

    folder: Path
    patches: list[Patch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    text: str | None = None
    entries: list[SeriesEntry] = field(default_factory=list)

    def digest(self) -> str:
        """``sha256:<hex>`` over every patch's bytes, name and -p level, in order."""
        import hashlib

        h = hashlib.sha256()
        for patch in self.patches:
            h.update(f"{patch.sha256} -p{patch.strip} {patch.name}\n".encode())
        return "sha256:" + h.hexdigest()


def parse_series_file(text: str, display: str) -> tuple[list[SeriesEntry], list[Problem]]:
    """Parse the text of a quilt ``series`` file."""
    entries: list[SeriesEntry] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    if text.startswith("\ufeff"):
        # quilt would read the mark as part of the first patch's name; an editor added it, the user cannot see it.
        problems.append(Problem(display, 1, "starts with a UTF-8 byte order mark (U+FEFF)", "save the file as UTF-8 without a byte order mark"))
        text = text[1:]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        words = line.split()
        name, options = words[0], words[1:]
        strip = 1
        bad = False
        for option in options:
            match = re.match(_STRIP, option)
            if match:
                strip = int(match.group(1))
            else:
                problems.append(
                    Problem(display, number, f"unsupported option {option!r} for {name}", "only -pN is supported (quilt's -R reverse patches are not)")
                )
                bad = True
        reason = _name_problem(name)
        if reason:
            problems.append(Problem(display, number, f"patch name {name!r} {reason}", "use a path relative to the series folder"))
            continue
        if name in seen:
            problems.append(Problem(display, number, f"{name} is listed twice (first at line {seen[name]})", "remove one of the lines"))
            continue
        seen[name] = number
        if not bad:
            entries.append(SeriesEntry(name, strip, number))
    return entries, problems


def _name_problem(name: str) -> str:
    if "\0" in name:
        return "contains a NUL byte"
    if invisible_character(name):
        return f"contains the invisible character {invisible_character(name)}"
    if name.startswith("-"):
        return "starts with '-'"
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("~"):
        return "is absolute"
    if ".." in pure.parts:
        return "contains '..'"
    if "\\" in name:
        return "contains a backslash"
    return ""


def read_series(folder: Path, display: str, *, origin: str = "") -> Series:
    """Read the series in *folder*; *origin* (``manifests/<model>.yaml:<line>``) names where the folder is set.

    A missing folder or ``series`` file is an error, never an empty series: a
    typo in ``patches:`` (or a renamed component) must not build a release
    without its patches. A component without patches has an empty ``series``.
    """
    series = Series(folder)
    series_file = folder / "series"
    if not series_file.is_symlink() and not series_file.exists():
        where = f"{origin}: " if origin else ""
        empty = f"a component without patches has an empty series file: create {display}/series"
        if not folder.is_dir():
            raise SeriesError(f"{where}series folder {display} does not exist", details=["fix `patches:` (or the component's name) in the manifest", empty])
        if _patch_files(folder):
            raise SeriesError(f"{display}/series: file not found", details=["list the patches in apply order, one per line, in a file named series"])
        raise SeriesError(f"{where}{display}/series: file not found", details=[empty])
    root = folder.resolve()
    try:
        text = _read(root, series_file, MAX_SERIES_BYTES, "series file", f"{display}/series").decode("utf-8")
    except UnicodeDecodeError:
        raise SeriesError(f"{display}/series: not valid UTF-8", details=["save it as UTF-8"]) from None
    entries, problems = parse_series_file(text, f"{display}/series")
    series.text, series.entries = text, entries
    for entry in entries:
        path = folder / entry.name
        resolved = _resolved(path, root, entry.name)
        try:
            resolved.relative_to(root)
        except ValueError:
            problems.append(
                Problem(f"{display}/series", entry.line, f"{entry.name} resolves outside the series folder", "do not use symbolic links that leave the folder")
            )
            continue
        if not path.is_symlink() and not path.exists():
            problems.append(Problem(f"{display}/series", entry.line, f"{entry.name}: patch file not found", f"add {display}/{entry.name} or remove the line"))
            continue
        try:
            series.patches.append(load_patch(path, entry.name, entry.strip, f"{display}/{entry.name}", root=root))
        except SeriesError as err:
            if err.problems:  # located in the patch file itself: every one of them
                problems.extend(p for p in err.problems if isinstance(p, Problem))
            else:
                problems.append(Problem(f"{display}/series", entry.line, str(err), ""))
    if problems:
        raise SeriesError(
            f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {display}/series",
            details=[str(p) for p in problems],
            problems=problems,
        )
    listed = {e.name for e in entries}
    for extra in _patch_files(folder):
        rel = extra.relative_to(folder).as_posix()
        if rel not in listed:
            series.warnings.append(f"{display}/{rel}: not listed in series (ignored); add it to series or delete it")
    return series


def _resolved(path: Path, root: Path, name: str) -> Path:
    """``path.resolve()`` of *path*, the folder whose ``resolve()`` is *root* and then *name*: ``root / name`` when *name* is
    one plain component that is no symbolic link (all realpath would make of it), else ``path.resolve()`` itself."""
    if not name or "/" in name or name in (".", ".."):
        return path.resolve()
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:  # realpath takes a name it cannot stat as it is, too
        link = False
    return path.resolve() if link else root / name


def _patch_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in PATCH_SUFFIXES)


def _read(root: Path | None, path: Path, limit: int, what: str, display: str) -> bytes:
    try:
        return read_repo_file(root, path, limit=limit, what=what, display=display)
    except FileRefused as refused:
        raise SeriesError(refused.message, details=refused.details) from None


def load_patch(path: Path, name: str, strip: int, display: str, *, root: Path | None = None) -> Patch:
    """The patch file *path* (a regular file inside *root*, when given), checked by the patch guards."""
    data = _read(root, path, MAX_PATCH_BYTES, "patch", display)
    if not _DIFF_START_RE.search(data):
        raise SeriesError(f"{display}: contains no diff", details=["remove it from series, or give it the changes it was meant to carry"])
    # Each mail's From line starts a line with "From ": fewer than two such lines, fewer than two mails (a format-patch has one).
    mails = re.findall(_MBOX_FROM, data) if data.startswith(b"From ") + data.count(b"\nFrom ") > 1 else []
    if len(mails) > 1:
        raise SeriesError(
            f"{display}: holds {len(mails)} mails (an mbox); each patch of a series is one file, so each keeps its author and subject",
            details=[f"split it: git mailsplit -o<folder> {PurePosixPath(display).name}, or git format-patch without --stdout; then list each file in series"],
        )
    problem = unsafe_path_problem(data, strip)
    if problem:
        raise SeriesError(f"{display}: {problem}; a patch may only change files inside the tree")
    broken = form_problems(data, display)
    if broken:
        raise SeriesError(f"{len(broken)} problem{'s' if len(broken) != 1 else ''} in {display}", details=[str(b) for b in broken], problems=broken)
    return parse_patch(data, name, strip, path, display)


_MARKER = rb"^(<{7}|>{7})(?: |$)|^={7}$"
_MARKERS = (b"<" * 7, b">" * 7, b"=" * 7)


def form_problems(data: bytes, display: str) -> list[Problem]:
    """What makes *data* no patch git can apply, each with its line: conflict markers, hunks whose ``@@`` counts do not match their lines.

    Every problem of the file, not only the first; found before any git
    command reads the patch, so that no command says "corrupt patch" and no
    advice sends the user to a command that fails the same way.
    """
    found: list[Problem] = []
    restore = f"or take the file back from the last commit where it was good: `git log --oneline -- {display}`, then `git checkout <commit> -- {display}`"
    lines = data.split(b"\n")
    start = _DIFF_START_RE.search(data)
    first = data[: start.start()].count(b"\n") if start else len(lines)
    markers: list[tuple[int, bytes]] = []
    if any(marker in data for marker in _MARKERS):  # a marker line holds one of them (most patches: none)
        marker_line = re.compile(_MARKER).match  # (re's cache, once for the file: not a lookup per line)
        markers = [(n, line) for n, line in enumerate(lines, start=1) if marker_line(line) and (n > first or not line.startswith(b"="))]
    for number, line in markers:
        shown = f"conflict marker `{line.decode('utf-8', 'replace')[:40]}`"
        if number != markers[0][0]:  # one cause, its advice said once: at the first marker, which names every line
            found.append(Problem(display, number, f"{shown} (the merge of line {markers[0][0]})"))
            continue
        at = f" (marker lines {', '.join(str(n) for n, _ in markers)})" if len(markers) > 1 else ""
        found.append(
            Problem(
                display,
                number,
                f"{shown}: a merge (git pull, git rebase) stopped in this patch file{at}",
                f"resolve it: keep the side you want, delete the marker lines (`git checkout --theirs -- {display}` or `--ours` takes a side); {restore}",
            )
        )
    if found:
        return found  # the markers break the hunks around them too: one cause, said once
    n, total = first, len(lines)
    while n < total:
        match = _HUNK_RE.match(lines[n])
        n += 1
        if not match:
            continue
        header = n
        old = int(match.group(2)) if match.group(2) is not None else 1
        new = int(match.group(4)) if match.group(4) is not None else 1
        seen_old = seen_new = 0
        while n < total and (seen_old < old or seen_new < new):
            # By the first byte (32 " ", 45 "-", 43 "+", 92 "\\"; an empty line is context): a hunk's lines are most of a patch.
            line = lines[n]
            kind = line[0] if line else 32
            if kind == 32:
                seen_old += 1
                seen_new += 1
            elif kind == 45:
                if line[:4] == b"--- ":
                    break
                seen_old += 1
            elif kind == 43:
                if line[:4] == b"+++ ":
                    break
                seen_new += 1
            elif kind != 92:  # "\\ No newline at end of file" counts for neither side
                break
            n += 1
        extra = n < len(lines) and lines[n][:1] in (b"+", b"-") and lines[n] not in (b"-- ", b"--") and not lines[n].startswith((b"--- ", b"+++ "))
        if (seen_old, seen_new) != (old, new) or extra:
            what = "more lines than" if extra and (seen_old, seen_new) == (old, new) else f"{seen_old} old and {seen_new} new lines where"
            found.append(
                Problem(
                    display,
                    header,
                    f"hunk `{lines[header - 1].decode('utf-8', 'replace').split(' @@')[0]} @@` has {what} its header says ({old} old, {new} new): "
                    "the file was edited by hand",
                    f"correct the counts in that @@ line (old: context and - lines; new: context and + lines); {restore}",
                )
            )
    return found


def parse_patch(data: bytes, name: str, strip: int = 1, path: Path | None = None, display: str = "") -> Patch:
    """Metadata of a format-patch mail or a plain diff with free-form headers."""
    display = display or name
    # git apply takes NUL bytes in hunk lines (fuzzer reproducers carry them); a commit message cannot hold one.
    diff_start = _DIFF_START_RE.search(data)
    if b"\0" in data[: diff_start.start() if diff_start else len(data)]:
        raise SeriesError(f"{display}: NUL byte in the message (before the diff)", details=["remove it from the subject or description"])
    text = data.decode("utf-8", "surrogateescape")
    header, body_text = _split_header(text)
    fields = _mail_headers(header) if header is not None else {}
    if not fields or ("subject" not in fields and "description" in fields):  # DEP-3 (also when it starts with From:)
        fields = _dep3_headers(text)
        body_text = fields.pop("_body", "")
    subject = fields.get("subject") or fields.get("description") or ""
    subject = strip_patch_tags(_unfold(subject))
    if not subject:
        subject = PurePosixPath(name).stem
        subject = re.sub(r"^\d{4}-", "", subject).replace("-", " ")
    author = fields.get("from") or fields.get("author")
    return Patch(
        name=name,
        path=path or Path(name),
        strip=strip,
        data=data,
        subject=subject,
        body=body_text.strip("\n"),
        author=_unfold(author) if author else None,  # author and date are read on first use (`Patch`)
        date=fields.get("date") or None,
        last_update=fields.get("last-update") or None,
    )


# What may follow a `diff --git` line in a real diff (git's extended headers, the old-file line, a binary marker).
_GIT_DIFF_NEXT = (
    "old mode ", "new mode ", "deleted file mode ", "new file mode ", "copy from ", "copy to ", "rename from ", "rename to ",
    "similarity index ", "dissimilarity index ", "index ", "--- ", "Binary files ", "GIT binary patch", "diff --git ",
)  # fmt: skip
_FIRST_HUNK = r"^(?:@@ |GIT binary patch|Binary files )"


def message_split_problem(patch: Patch) -> tuple[int, str] | None:
    """(line of the file, what is wrong) when the commit message in *patch* would be cut, or read as a diff; None when it reads whole.

    In a mail, the message ends at the first ``---``, ``--- ...``, ``Index: ...``
    or ``diff --git`` line: any of them before the mail's last ``---``
    separator means the message held one (a round trip through an older export
    or ``git format-patch`` loses the rest). Anywhere before the first hunk, a
    ``diff --git`` line that no diff header follows is a quoted one that
    ``git apply`` would try to read.
    """
    lines = patch.data.decode("utf-8", "surrogateescape").split("\n")
    first_hunk = re.compile(_FIRST_HUNK).match  # (re's cache, once for the patch: not a lookup per line)
    end = next((i for i, line in enumerate(lines) if first_hunk(line)), len(lines))
    for i in range(end):
        if lines[i].startswith("diff --git ") and not (i + 1 < len(lines) and lines[i + 1].startswith(_GIT_DIFF_NEXT)):
            return i + 1, f"`{lines[i]}` quotes a diff header in the message: git apply reads a diff there and fails"
    header, _ = _split_header(patch.data.decode("utf-8", "surrogateescape"))
    if header is None or "" not in lines:
        return None
    start = lines.index("", 1 if lines[0].startswith("From ") else 0) + 1  # the message starts after the header's blank line
    separators = [i for i in range(start, end) if lines[i] == "---"]
    if not separators:
        return None
    for i in range(start, separators[-1]):
        if lines[i] == "---" or lines[i].startswith(("--- ", "diff --git ", "Index: ")):
            return i + 1, f"`{lines[i]}` is in the commit message: zmr and git am end the message there, and lose what follows up to line {separators[-1] + 1}"
    return None


def strip_patch_tags(subject: str) -> str:
    """The subject as ``git mailinfo -b`` (``git am --keep-non-patch``) reads it.

    Leading ``[...]`` tags that contain ``PATCH`` (``[PATCH]``, ``[PATCH v2 3/7]``,
    ``[RFC PATCH]``) are a mail's, not the commit's, and are dropped; any other
    (``[Bugfix]``, ``[rollout, vllm]``) is part of the subject and kept.
    """
    text = subject.strip()
    kept = []
    at = 0  # an index into *text*, never a copy of its rest: linear in the subject's length, whatever its tags
    while text.startswith("[", at):
        end = text.find("]", at)
        if end < 0:
            break
        tag, after = text[at : end + 1], end + 1
        if "PATCH" not in tag:
            kept.append(tag + (" " if text[after : after + 1].isspace() else ""))
        at = after
        while at < len(text) and text[at].isspace():
            at += 1
    return ("".join(kept) + text[at:]).strip()


def _split_header(text: str) -> tuple[str | None, str]:
    """For a mail: (header block, body up to the diff); else (None, '')."""
    lines = text.split("\n")
    start = 1 if lines and lines[0].startswith("From ") else 0
    if start >= len(lines) or not re.match(r"^(From|Subject|Date):", lines[start]):
        return None, ""
    end = start
    while end < len(lines) and lines[end] != "":
        end += 1
    header = "\n".join(lines[start:end])
    body: list[str] = []
    for line in lines[end + 1 :]:
        if line == "---" or line.startswith(("diff --git ", "Index: ", "--- ")):
            break
        body.append(line)
    return header, "\n".join(body)


def _mail_headers(header: str) -> dict[str, str]:
    fields: dict[str, list[str]] = {}  # the lines of each field, joined once at the end (not one copy per continuation line)
    current = None
    for line in header.split("\n"):
        if line[:1] in (" ", "\t") and current:
            fields[current].append(line)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        current = key.strip().lower()
        if current in fields:
            current = None  # a repeated field: the first one counts, its continuation lines too
            continue
        fields[current] = [value.strip()]
    return {k: _decode_words("\n".join(v)) for k, v in fields.items()}


# DEP-3's fields: a later paragraph that starts with one of them is a second set of fields (pseudo-headers), not free text.
_DEP3_FIELDS = frozenset(
    ["description", "subject", "origin", "bug", "forwarded", "author", "from", "reviewed-by", "acked-by", "last-update", "applied-upstream", "signed-off-by"]
)
_FIELD = r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$"


def _dep3_headers(text: str) -> dict[str, str]:
    """DEP-3 headers before the diff: the fields, and under ``_body`` the long description.

    As DEP-3 has it: fields start on the first non-empty line and end at an
    empty line; a later paragraph that starts with a DEP-3 field is a second
    set of fields, any other is free text that extends the long description;
    ``Description:``'s continuation lines are the long description (one
    leading space dropped, `` .`` an empty line); a ``---`` line ends the
    meta-information.
    """
    fields: dict[str, str] = {}
    long_description: list[str] = []
    free: list[list[str]] = []  # paragraphs of free text
    current: str | None = None  # the field whose continuation lines may follow
    folded: list[str] = []  # the subject's continuation lines (joined once, at the end)
    at_paragraph_start = True
    field_line = re.compile(_FIELD).match  # (re's cache, once for the text: not a lookup per line)
    for line in text.split("\n"):
        if line.startswith(("diff --git ", "--- ", "Index: ", "=== ")) or line.rstrip() == "---":
            break
        if not line.strip():
            current, at_paragraph_start = None, True
            continue
        match = field_line(line)
        key = match.group(1).lower() if match else ""
        if match and (current is not None or (at_paragraph_start and (not fields or key in _DEP3_FIELDS or key.startswith("bug-")))):
            current, at_paragraph_start = key, False
            fields.setdefault(key, match.group(2).strip())
            continue
        if line[:1] in (" ", "\t") and current is not None:
            if current == "description":
                long_description.append("" if line.strip() == "." else line[1:].rstrip())
            elif current == "subject":
                folded.append(line.strip())  # folded, as in a mail
            continue
        if at_paragraph_start or current is not None:
            free.append([])
        current, at_paragraph_start = None, False
        free[-1].append(line.rstrip())
    if folded and "subject" in fields:
        fields["subject"] = " ".join([fields["subject"], *folded])
    paragraphs = ["\n".join(long_description).strip("\n"), *("\n".join(p) for p in free)]
    fields["_body"] = "\n\n".join(p for p in paragraphs if p)
    return fields


def _parse_day(value: str) -> tuple[int | None, str]:
    """DEP-3's ``Last-Update: YYYY-MM-DD`` as midnight UTC of that day (an RFC 2822 date is read as one)."""
    match = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", value.strip())
    if not match:
        return _parse_date(value)
    try:
        day = datetime.datetime(int(match.group(1)), int(match.group(2)), int(match.group(3)), tzinfo=datetime.timezone.utc)
    except ValueError:
        return None, "+0000"
    return int(day.timestamp()), "+0000"


_ENCODED_WORDS_MAX = 1 << 16  # characters of a header value decoded (RFC 2047); a real one is far shorter


def _decode_words(value: str) -> str:
    """RFC 2047 encoded-words (=?UTF-8?q?...?=) decoded, folding undone."""
    value = _unfold(value)
    if "=?" not in value or len(value) > _ENCODED_WORDS_MAX:
        return value  # (the standard library's decoder is quadratic in the length: a longer value stays as written)
    try:
        import email.header  # here: only an encoded subject (=?utf-8?q?...?=) needs it

        return str(email.header.make_header(email.header.decode_header(value)))
    except Exception:  # noqa: BLE001 - malformed encoded-words stay as written
        return value


_SPACE_RUN = r"\s+"


def _unfold(value: str) -> str:
    """A folded header value on one line: each run of white space with a line break inside it (not only at its end) becomes one space.

    What ``re.sub(r"\\s*\\n\\s+", " ", value)`` does, in one pass over the runs:
    that pattern backtracks over a long run of spaces without a line break, quadratic in its length.
    """
    if "\n" not in value:
        return value
    return re.sub(_SPACE_RUN, lambda m: " " if "\n" in m.group()[:-1] else m.group(), value)


def _parse_date(value: str) -> tuple[int | None, str]:
    import email.utils

    try:
        parsed = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        parsed = None
    if parsed is None:
        return None, "+0000"
    if parsed.tzinfo is None:
        return int(parsed.replace(tzinfo=datetime.timezone.utc).timestamp()), "+0000"
    delta = parsed.utcoffset()
    minutes = int(delta.total_seconds() // 60) if delta else 0
    sign = "+" if minutes >= 0 else "-"
    offset = f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
    return int(parsed.timestamp()), offset


def list_hunks(data: bytes, strip: int = 1) -> list[Hunk]:
    """Every hunk with its file (after stripping *strip* components) and old start line."""
    hunks: list[Hunk] = []
    current_file = ""
    index = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.startswith(b"+++ "):
            target = _header_name(line[4:])
            if target == "/dev/null":
                continue
            current_file = _strip_path(target, strip)
            index = 0
        elif line.startswith(b"--- ") and not current_file:
            source = _header_name(line[4:])
            if source != "/dev/null":
                current_file = _strip_path(source, strip)
        elif line.startswith(b"diff --git "):
            current_file = ""
            index = 0
        else:
            match = _HUNK_RE.match(line)
            if match and current_file:
                index += 1
                hunks.append(Hunk(current_file, index, int(match.group(1)), line.decode("utf-8", "replace"), number))
    return hunks


def _strip_path(path: str, strip: int) -> str:
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    parts = path.split("/")
    return "/".join(parts[strip:]) if strip < len(parts) else parts[-1]


_GIT_HEADER_PATHS = (b"rename from ", b"rename to ", b"copy from ", b"copy to ")
_SYMLINK_MODE_LINES = (b"new file mode 120000", b"new mode 120000")
# A line that starts as one of the tuples above, `---`/`+++` or `diff --git ` do (what unsafe_path_problem reads): the
# first line of a patch (_PATH_LINE_RE.match) and every line after a newline (_PATH_LINE_RE.finditer, group 1; a pattern
# that starts with a newline is scanned for much faster than one that starts with ^ under re.M).
_PATH_LINE = b"(?:--- |\\+\\+\\+ |diff --git |" + b"|".join(re.escape(p) for p in (*_GIT_HEADER_PATHS, *_SYMLINK_MODE_LINES)) + b")[^\n]*"
_PATH_LINE_RE = re.compile(b"\n(" + _PATH_LINE + b")")
_FIRST_PATH_LINE_RE = re.compile(_PATH_LINE)
# Code points HFS+ ignores in names (git's is_hfs_dotgit): ".g\u200cit" is ".git" on a Mac.
_HFS_IGNORED = frozenset([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])
_C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12, ord("r"): 13, ord('"'): 34, ord("\\"): 92}


def unquote_c(data: bytes) -> tuple[bytes, bytes] | None:
    """A C-quoted name at the start of *data* (``"a/\\303\\244.txt"``, as git writes it): (name, rest); None if not quoted."""
    if not data.startswith(b'"'):
        return None
    out = bytearray()
    i = 1
    while i < len(data):
        c = data[i]
        if c == ord('"'):
            return bytes(out), data[i + 1 :]
        if c == ord("\\") and i + 1 < len(data):
            nxt = data[i + 1]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            digits = data[i + 1 : i + 4]
            if len(digits) == 3 and all(ord("0") <= d <= ord("7") for d in digits):
                out.append(int(digits, 8) & 0xFF)
                i += 4
                continue
        out.append(c)
        i += 1
    return None  # no closing quote: git refuses it too, as written it names nothing


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _header_name(raw: bytes) -> str:
    """A ``---``/``+++``/``rename to`` name: unquoted, up to a tab (git's date suffix)."""
    quoted = unquote_c(raw)
    return _name(quoted[0]) if quoted else _name(raw.split(b"\t")[0]).strip()


def _git_line_names(rest: bytes) -> list[str]:
    """The names of a ``diff --git`` line: quoted ones unquoted, unquoted ones split at ``a/``, ``b/``."""
    names: list[str] = []
    while rest.strip():
        rest = rest.lstrip(b" ")
        quoted = unquote_c(rest)
        if quoted:
            names.append(_strip_path(_name(quoted[0]), 1))
            rest = quoted[1]
            continue
        word, _, rest = rest.partition(b' "') if b' "' in rest else (rest, b"", b"")
        rest = (b'"' + rest) if rest else b""
        names += [_strip_path(p, 1) for p in _name(word).split(" ") if p.startswith(("a/", "b/"))]
    return names


def unsafe_path_problem(data: bytes, strip: int = 1) -> str:
    """Why a patch would write outside the tree, into ``.git``, or plant an escaping symlink; '' if safe.

    Every way a patch names a path counts: ``diff --git``, ``---``/``+++``,
    ``rename``/``copy`` lines, C-quoted or not; a symlink's target is read
    from a text hunk or decoded from a ``GIT binary patch``.
    """
    # Only the lines that name a path or a symlink's mode, found by one scan of the bytes (the hunks' lines, nearly all of
    # a patch, are never looked at one by one); their numbers counted as they come.
    lines: list[bytes] | None = None
    number, counted = 1, 0
    for start, line in _path_lines(data):
        number += data.count(b"\n", counted, start)
        counted = start
        paths: list[str] = []
        if line.startswith((b"--- ", b"+++ ")):
            raw = _header_name(line[4:])
            if raw != "/dev/null":
                paths.append(_strip_path(raw, strip) if _has_components(raw, strip) else raw)
        elif line.startswith(b"diff --git "):
            paths += _git_line_names(line[len(b"diff --git ") :])
        elif line.startswith(_GIT_HEADER_PATHS):
            paths.append(_header_name(line.split(b" ", 2)[2]))
        for path in paths:
            reason = _tree_path_problem(path)
            if reason:
                return f"line {number}: path {path!r} {reason}"
        if line.startswith(_SYMLINK_MODE_LINES):
            lines = data.split(b"\n") if lines is None else lines
            link = _link_path(lines, number)
            target = _symlink_target(lines, number)
            if target is None:
                return f"line {number}: makes {link!r} a symlink without a target zmr can read; write the link's target as a text hunk"
            if _escapes(link, target):
                return f"line {number}: creates symlink {link!r} pointing outside the tree ({target!r})"
    return ""


def _path_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each line of *data* that unsafe_path_problem reads, in order."""
    first = _FIRST_PATH_LINE_RE.match(data)
    if first:
        yield 0, first.group()
    for found in _PATH_LINE_RE.finditer(data):
        yield found.start(1), found.group(1)


def _has_components(path: str, strip: int) -> bool:
    return len(path.split("/")) > strip


def is_dotgit(part: str) -> bool:
    """*part* names ``.git`` on some file system: any case, trailing dots or spaces (NTFS), HFS+-ignored code points, ``git~1``."""
    if part.isascii():  # no HFS+-ignored code point is ASCII: the common case needs no per-character fold
        folded = part.lower()
        if "git" not in folded:
            return False
    else:
        folded = "".join(c for c in part if ord(c) not in _HFS_IGNORED).lower()
    folded = folded.split(":", 1)[0].rstrip(". ")  # NTFS: ".git::$INDEX_ALLOCATION", ".git. ." are .git
    return folded in (".git", "git~1")


def _tree_path_problem(path: str) -> str:
    if "\0" in path:
        return "contains a NUL byte"
    if path.startswith("/"):  # PurePosixPath(path).is_absolute(), without making one for each path of a patch
        return "is absolute"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return "leaves the tree ('..')"
    if any(is_dotgit(p) for p in parts):
        return "writes into .git"
    return ""


def _symlink_target(lines: list[bytes], start: int) -> str | None:
    """A new symlink's target: the first added line of its text hunk, or its literal ``GIT binary patch``; None if neither."""
    for line in lines[start : start + 12]:
        if line.startswith(b"diff --git "):
            return None
        if line.startswith(b"+") and not line.startswith(b"+++"):
            return _name(line[1:])
        if line.startswith(b"GIT binary patch"):
            content = _binary_content(lines, lines.index(line, start) + 1)
            return None if content is None else _name(content)
    return None


def _binary_content(lines: list[bytes], start: int) -> bytes | None:
    """The new content of a ``GIT binary patch`` (``literal``, or a ``delta`` that only inserts); None when it cannot be told."""
    import base64
    import zlib

    if start >= len(lines):
        return None
    kind = lines[start].partition(b" ")[0]
    data = bytearray()
    for line in lines[start + 1 :]:
        if not line:
            break
        length = line[0] - (ord("A") - 1) if line[:1].isupper() else line[0] - (ord("a") - 27)
        try:
            data += base64.b85decode(line[1:])[:length]
        except ValueError:
            return None
    try:
        raw = zlib.decompress(bytes(data))
    except zlib.error:
        return None
    if kind == b"literal":
        return raw
    if kind != b"delta":
        return None
    # A delta: two varint sizes, then opcodes; only inserts (no copies from the old content) can be read.
    pos = 0
    for _ in range(2):
        while pos < len(raw) and raw[pos] & 0x80:
            pos += 1
        pos += 1
    out = bytearray()
    while pos < len(raw):
        op = raw[pos]
        if op & 0x80 or op == 0:
            return None
        out += raw[pos + 1 : pos + 1 + op]
        pos += 1 + op
    return bytes(out)


def _link_path(lines: list[bytes], start: int) -> str:
    for back in range(start - 1, max(start - 6, -1), -1):
        if lines[back].startswith(b"diff --git "):
            names = _git_line_names(lines[back][len(b"diff --git ") :])
            if names:
                return names[-1]
    return ""


def _escapes(link: str, target: str) -> bool:
    if target.startswith("/"):
        return True
    depth = len([p for p in link.split("/")[:-1] if p not in ("", ".")])
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False
