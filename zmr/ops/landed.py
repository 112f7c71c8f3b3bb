"""Has upstream a patch's change? The one answer per patch, decided here and worded here (docs/reference.md §7.9.1).

Every command that asks whether a patch is "already upstream" asks this
module: ``zmr update`` (its trials, in memory and 3-way), ``zmr rebase``
(in memory and in its checkout), ``zmr upstreamed``, ``zmr bisect`` (through
update's trials), ``zmr diff`` (a removed patch). The answer, for a patch at a
target tree (the target plus the patches of the series kept before it)::

    the patch applies there and changes the tree ──▶ not landed (never dropped: upstream lacks its change)
        unless it applies only at an offset and all its changes are there (below) without it: git found its context
        again after upstream's own copy of it and would put it in twice (``already_there``: judged as not applying)
    it applies and changes nothing ──▶ landed (``empty``)
    it does not apply ──Change.against(target)──▶ per file (at its new name where upstream renamed it since the pin:
    ``following_renames``), a 3-way comparison of tokens:
        before (the file where the patch was made) → after (the file it makes): the patch's changes
        before → target: upstream's;  each change of the patch is in the target when upstream made
        a change over the same tokens that holds it (each run of tokens it puts in, whole and in order;
        what it removes gone; upstream free to add around them; whitespace and line breaks are not tokens)
    all its changes there ──▶ landed (``reverse-apply`` when git reverse-applies it, else ``landed``), unless git's own
        3-way merge of it there goes in cleanly and changes the tree (``_git_would_add``): then not landed
    some ──▶ partially landed: kept, with what is left (file and lines of the patch's result)
    none ──▶ not landed
    it declares ``Upstream-Status: backport <commit>`` (or ``accepted <commit>``), that commit is
    at or below the target, its change is in that commit's tree and it does not change the target ──▶ landed (``backport``),
        whatever the target shows of it now: upstream took the change there, and may have reformatted or rewritten
        those lines since; the declared commit names it (not a patch-id match, not ``via``, not ``empty``)

A change judged on the tree, not on whether its lines appear somewhere: a line
that upstream added in another function or that a sibling patch brought is
not this patch's change. ``naming`` finds the upstream commits where it landed
(those at which more of the change is in the tree than before them). The
words: ``Dropped.landed``, ``Dropped.how``, ``Landing.label``.

Read-only but for the mirror (``zmr.ops.replay``'s throwaway indexes); ``zmr.infra.git`` spells the diffs.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypedDict

from zmr.infra import git

if TYPE_CHECKING:
    from zmr.model.series import Patch
    from zmr.ops.replay import Replayer, Step

MAX_COMMITS = 300  # upstream commits read when naming those that brought a change in

LANDED, PARTIAL, NOT_LANDED = "landed", "partial", "not landed"

Reader = Callable[[str], "bytes | None"]

_TOKEN = re.compile(rb"\w+|[^\w\s]")


# -- a patch's change against a tree ------------------------------------------------------------------


@dataclass(frozen=True)
class _Tokens:
    words: list[bytes]
    lines: list[int]  # the line (1-based) of each token

    @classmethod
    def of(cls, data: bytes | None) -> _Tokens:
        words: list[bytes] = []
        lines: list[int] = []
        for number, line in enumerate((data or b"").split(b"\n"), 1):
            for token in _TOKEN.findall(line):
                words.append(token)
                lines.append(number)
        return cls(words, lines)

    def text(self) -> bytes:
        return b"".join(word + b"\n" for word in self.words)


@dataclass(frozen=True)
class Measure:
    """How much of a patch's change a tree holds: *present* of *total* changes; *left*: where the rest is (``path:lines``)."""

    present: int
    total: int
    left: tuple[str, ...] = ()


def _holds(base: list[bytes], mine: list[bytes], theirs: list[bytes]) -> bool:
    """Upstream's *theirs* (for *base*) holds the change *base* → *mine*: each run of tokens *mine* puts in is in it,
    whole and in order (upstream may add around a run, not inside it); what *mine* removed is gone from it."""
    if mine == theirs:
        return True
    runs = [mine[j1:j2] for op, _, _, j1, j2 in difflib.SequenceMatcher(None, base, mine, autojunk=False).get_opcodes() if op in ("insert", "replace")]
    at = 0
    for run in runs:
        found = next((k for k in range(at, len(theirs) - len(run) + 1) if theirs[k : k + len(run)] == run), None)
        if found is None:
            return False
        at = found + len(run)
    kept, have = Counter(mine), Counter(theirs)
    return all(have[token] <= kept[token] for token in Counter(base) - kept)


def _groups(mine: list[tuple[int, int, int, int]], theirs: list[tuple[int, int, int, int]]) -> list[tuple[int, int, list[int], list[int]]]:
    """The hunks of both diffs (from the same base) that touch, grouped: (base start, base end, my hunks, their hunks)."""
    events = sorted([(h[0], h[0] + h[1], 0, k) for k, h in enumerate(mine)] + [(h[0], h[0] + h[1], 1, k) for k, h in enumerate(theirs)])
    groups: list[tuple[int, int, list[int], list[int]]] = []
    for start, end, side, k in events:
        if groups and start <= groups[-1][1]:
            g = groups[-1]
            groups[-1] = (g[0], max(g[1], end), g[2], g[3])
        else:
            groups.append((start, end, [], []))
        (groups[-1][3] if side else groups[-1][2]).append(k)
    return groups


def _slid(hunks: list[tuple[int, int, int, int]], old: list[bytes], new: list[bytes]) -> list[tuple[int, int, int, int]]:
    """*hunks* (``old`` → ``new``) each widened over the tokens it could slide across: a run put in (or taken out) next to
    tokens equal to its own end can be placed a token earlier or later and say the same, and two diffs of one change can
    place it differently; widened, they meet in one group. A hunk that replaces stays as it is; none crosses another."""
    widened = []
    for k, (s, c, ns, nc) in enumerate(hunks):
        low = hunks[k - 1][0] + hunks[k - 1][1] if k else 0
        high = hunks[k + 1][0] if k + 1 < len(hunks) else len(old)
        left = right = 0
        if c == 0 and nc:  # new[ns:ns + nc] put in before old[s]
            while s - left > low and new[ns - left - 1] == new[ns + nc - left - 1]:
                left += 1
            while s + right < high and new[ns + nc + right] == new[ns + right]:
                right += 1
        elif nc == 0 and c:  # old[s:s + c] taken out
            while s - left > low and old[s - left - 1] == old[s + c - left - 1]:
                left += 1
            while s + c + right < high and old[s + c + right] == old[s + right]:
                right += 1
        widened.append((s - left, c + left + right, ns - left, nc + left + right))
    return widened


def _span(hunks: list[tuple[int, int, int, int]], chosen: list[int], start: int, end: int) -> tuple[int, int]:
    """Where base[start:end] (a group, its hunks *chosen*) is in the other side of *hunks*."""
    shift = sum(h[3] - h[1] for k, h in enumerate(hunks) if k not in chosen and h[0] + h[1] <= start)
    grow = sum(hunks[k][3] - hunks[k][1] for k in chosen)
    return start + shift, end + shift + grow


@dataclass(frozen=True)
class _FileChange:
    path: str
    before: bytes | None
    after: bytes | None

    def against(self, now: bytes | None) -> Measure:
        if self.after is None:  # the patch deletes the file
            return Measure(int(now is None), 1, () if now is None else (f"{self.path}: deleted",))
        if now is None:
            return Measure(0, 1, (f"{self.path}: the whole file",))
        if b"\0" in self.after or b"\0" in (self.before or b"") or b"\0" in now:
            return Measure(int(now == self.after), 1, () if now == self.after else (f"{self.path}: binary",))
        base, mine, theirs = _Tokens.of(self.before), _Tokens.of(self.after), _Tokens.of(now)
        my_hunks = _slid(_diff(base.text(), mine.text()), base.words, mine.words)
        their_hunks = _slid(_diff(base.text(), theirs.text()), base.words, theirs.words) if theirs.words != base.words else []
        present = total = 0
        left: list[str] = []
        for start, end, my_group, their_group in _groups(my_hunks, their_hunks):
            if not my_group:
                continue
            total += 1
            a0, a1 = _span(my_hunks, my_group, start, end)
            t0, t1 = _span(their_hunks, their_group, start, end)
            if their_group and _holds(base.words[start:end], mine.words[a0:a1], theirs.words[t0:t1]):
                present += 1
                continue
            lines = mine.lines[a0:a1] or base.lines[start:end]
            where = f"lines {lines[0]}-{lines[-1]}" if lines and lines[0] != lines[-1] else f"line {lines[0]}" if lines else "its end"
            left.append(f"{self.path}: {where}")
        return Measure(present, total, tuple(left))


@functools.lru_cache(maxsize=256)
def _diff(old: bytes, new: bytes) -> list[tuple[int, int, int, int]]:
    return git.diff_lines(old, new)


class Change:
    """A patch's change: per file it changes, the file before it (*before*) and after it (*after*); ``against`` a tree."""

    def __init__(self, files: Sequence[_FileChange]):
        self.files = [f for f in files if f.before != f.after]

    @classmethod
    def of(cls, before: Reader, after: Reader, paths: Sequence[str]) -> Change:
        return cls([_FileChange(path, before(path), after(path)) for path in sorted(paths)])

    def against(self, target: Reader) -> Measure:
        """How much of the change *target* (path → its bytes, None: absent) holds."""
        present = total = 0
        left: list[str] = []
        for f in self.files:
            found = f.against(target(f.path))
            present, total = present + found.present, total + found.total
            left += found.left
        return Measure(present, total, tuple(left))


@functools.lru_cache(maxsize=128)
def change_of(repo: git.Repo, before: str, after: str, paths: tuple[str, ...]) -> Change:
    """The change of the commit *after* over *before* (one patch of a series as commits), in *paths*; kept per commit pair."""
    return Change.of(blob_reader(repo, before), blob_reader(repo, after), paths)


def blob_reader(repo: git.Repo, commit: str) -> Reader:
    """path → its bytes in *commit* (None: absent, or not in a partial mirror)."""

    def read(path: str) -> bytes | None:
        try:
            return repo.cat_file("blob", f"{commit}:{path}")
        except git.GitError:
            return None

    return read


def following_renames(repo: git.Repo, base: str, target: str, read: Reader) -> Reader:
    """*read* (a tree on upstream *target*), but a path gone there is read where upstream renamed it between *base* and *target*
    (``git.Repo.renames``): the file a cherry-pick's merge would change, so a change that landed before a rename is still found."""

    def follow(path: str) -> bytes | None:
        data = read(path)
        if data is None and (moved := renamed_since(repo, base, target).get(path)) is not None:
            return read(moved)
        return data

    return follow


@functools.lru_cache(maxsize=64)
def renamed_since(repo: git.Repo, base: str, target: str) -> dict[str, str]:
    """Upstream's renames from *base* to *target* (old path → new, ``git.Repo.renames``): what a cherry-pick's merge follows; kept per pair."""
    try:
        return repo.renames(base, target)
    except git.GitError:  # a commit not in a partial mirror: no rename known, the path reads as absent
        return {}


def renamed_files(files: Sequence[str], renamed: dict[str, str]) -> list[str]:
    """*files* in conflict (as a cherry-pick leaves them: at upstream's new names) as a report names them: a file upstream
    renamed since the pin (*renamed*: new path → old) with the name the patch knows it by."""
    return [f"{f} (renamed from {renamed[f]} upstream)" if f in renamed else f for f in files]


# -- the answer ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One patch at one target: *state* ``landed`` / ``partial`` / ``not landed``; *how* it landed; *measure* of its change there."""

    state: str
    how: str = ""  # empty | reverse-apply | landed | backport
    measure: Measure | None = None
    backport: str | None = None  # the declared upstream commit, for ``backport``

    @property
    def landed(self) -> bool:
        return self.state == LANDED


def _git_would_add(change: Change, target: Reader) -> bool:
    """git's 3-way merge of *change* into *target* goes in cleanly and changes it (``git apply --3way`` would): then the
    patch is not dropped, even where its tokens are all there (a line that repeats its neighbour, taken re-wrapped)."""
    for f in change.files:
        now = target(f.path)
        if f.before is None or f.after is None or now is None:
            continue
        merged = git.merge_file(f.before, now, f.after)
        if merged is not None and merged != now:
            return True
    return False


def judge(
    applied: str, reverse_applies: Callable[[], bool], change: Change, target: Reader, declared: Reader | None = None, commit: str | None = None
) -> Answer:
    """The answer for a patch whose apply at the target gave *applied* (``applied`` / ``empty`` / ``failed``).

    *declared*: the tree of the upstream commit *commit* the patch says it
    backports, when that commit is at or below the target. A landed patch
    (empty, or its change in the target) whose declared commit holds its
    change is landed as ``backport``, naming that commit: one answer however
    upstream has since reformatted the lines (§7.9.1).
    """
    if applied not in ("empty", "failed"):
        return Answer(NOT_LANDED)  # applying it still changes the tree: upstream lacks (part of) its change
    measure = change.against(target) if applied == "failed" else None
    if declared is not None:  # the commit it says it backports, at or below the target: the one name for how it landed
        there = change.against(declared)
        if there.total and there.present == there.total:
            return Answer(LANDED, "backport", measure, commit)
    if measure is None:
        return Answer(LANDED, "empty")
    if measure.total and measure.present == measure.total and not _git_would_add(change, target):
        return Answer(LANDED, "reverse-apply" if reverse_applies() else "landed", measure)
    if not measure.total and reverse_applies():  # only whitespace changes: git's word for it
        return Answer(LANDED, "reverse-apply", measure)
    return Answer(PARTIAL if measure.present else NOT_LANDED, "", measure)


def picked_empty(repo: git.Repo, patch: Patch, change: Change, target: str) -> Answer:
    """The answer for *patch* (its *change*) whose 3-way pick at upstream *target* changed nothing: landed, ``empty``, or
    ``backport`` when it declares a commit at or below *target* that holds its change (as ``judge`` says of every landed patch)."""
    declared, commit = declared_commit(repo, patch, target)
    return judge("empty", lambda: False, change, lambda path: None, declared, commit)


def declared_commit(repo: git.Repo, patch: Patch, target: str) -> tuple[Reader, str] | tuple[None, None]:
    """The upstream commit *patch* says it backports (or was accepted as), when it is at or below *target*: its tree's reader."""
    from zmr.model.upstream_status import status_of

    status = status_of(patch)[0]
    named = repo.resolve(status.commit) if status is not None and status.commit else None
    if named is None or not repo.is_ancestor(named, target):
        return None, None
    return blob_reader(repo, named), named


def at_replay(replay: Replayer, step: Step, change: Change, target: str | None = None, base: str | None = None) -> Answer:
    """The answer for a *step* of *replay* (the series on *target*, in memory): the step's result read as ``judge`` reads it.

    *base*: the upstream commit the series was made on; a file upstream renamed since is read at its new name.
    """
    declared, commit = declared_commit(replay.repo, step.patch, target) if target and step.status in ("empty", "failed") else (None, None)
    read = following_renames(replay.repo, base, target, replay.read_file) if base and target else replay.read_file
    return judge(step.status, lambda: replay.reverse_applies(step.patch), change, read, declared, commit)


def already_there(replay: Replayer, change: Change, target: str | None = None, base: str | None = None) -> bool:
    """A patch that applied only at an offset: is every change of it in the index without it (read as ``at_replay`` reads)?

    Then it is landed, not applied: upstream's copy of it ends with the lines
    its context begins with, and git found that context again after the copy.
    Only where git's 3-way merge of it there (``git.merge_file``) changes nothing too.
    """
    read = following_renames(replay.repo, base, target, replay.read_file) if base and target else replay.read_file
    measure = change.against(read)
    if not measure.total or measure.present != measure.total:
        return False
    # And git's own 3-way merge of it there changes nothing (what ``git apply --3way`` does).
    return all(f.before is not None and f.after is not None and git.merge_file(f.before, read(f.path) or b"", f.after) == read(f.path) for f in change.files)


def naming(repo: git.Repo, change: Change, commits: Sequence[str]) -> list[str]:
    """Of *commits* (upstream, oldest first, touching the change's files), those at which more of *change* is in the tree than before."""
    found: list[str] = []
    best = 0
    for commit in commits[:MAX_COMMITS]:
        measure = change.against(blob_reader(repo, commit))
        if measure.present > best:
            found.append(commit)
            best = measure.present
            if best == measure.total:
                break
    return found


# -- the words ----------------------------------------------------------------------------------------


_HOW = {
    "patch-id": "same patch-id",
    "reverse-apply": "its changes are already there (reverse-applies)",
    "empty": "empty once applied",
    "resolved-empty": "empty after conflict resolution",
    "landed": "its changes are all there, in another form",
    "backport": "the upstream commit it backports is at or below the new pin, with its change",
}


class DroppedJson(TypedDict):
    """A patch left out: upstream has it (*method*: how that was found, patch-id, reverse-apply, empty, landed, backport,
    resolved-empty) or ``--skip`` (skipped); the upstream commit and subject, when found; *via*: the commits where it
    landed; *landed*: in words ('' when skipped)."""

    name: str
    subject: str
    method: str
    upstream: str | None
    upstream_subject: str
    via: list[str]
    landed: str


class LandingJson(TypedDict):
    """How much of a patch's change a target holds: *state* same-patch, modified or partial, in words (*label*), the
    upstream commits (*via*), *landed* of *total* changes, and where the rest is (*left*)."""

    state: str
    label: str
    via: list[str]
    landed: int
    total: int
    left: list[str]


@dataclass
class Dropped:
    """A patch left out because upstream has it (``judge``), or by ``--skip``; *upstream* names the commit, when found.

    *method*: how upstream has it (``patch-id``: it landed and an upstream commit in
    between has the patch's patch id, which names that commit; the others: ``Answer.how``).
    *via*: the upstream commits since the pin where it landed (``naming``; several when upstream split it).
    """

    name: str
    subject: str
    method: str  # patch-id | reverse-apply | empty | landed | backport | resolved-empty | skipped
    upstream: str | None = None
    upstream_subject: str = ""
    via: list[str] = field(default_factory=list)

    @property
    def landed(self) -> str:
        """``landed (same patch)``, ``landed (modified, via <commit>)`` (another change with the same effect), or "" (skipped)."""
        if self.method == "patch-id":
            return "landed (same patch)"
        if self.method in ("skipped", "resolved-empty"):
            return ""
        via = ", ".join(c[:12] for c in self.via or ([self.upstream] if self.upstream else []))
        if self.method == "backport":
            return f"landed (backport of {via or 'commit not identified'})"
        return f"landed (modified, via {via or 'commit not identified'})"

    @property
    def how(self) -> str:
        """How that was found, in words."""
        return _HOW.get(self.method, self.method)

    def to_json(self) -> DroppedJson:
        return {
            "name": self.name,
            "subject": self.subject,
            "method": self.method,
            "upstream": self.upstream,
            "upstream_subject": self.upstream_subject,
            "via": self.via,
            "landed": self.landed,
        }

    def state(self) -> dict[str, Any]:
        """As kept in a rebase's ``state.json``: the keys of earlier zmr versions, *via* only when known (an older zmr reads the rest)."""
        data = asdict(self)
        if not self.via:
            del data["via"]
        return data

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> Dropped:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Landing:
    """How much of a kept (or removed) patch's change a target holds: *state* ``same-patch``, ``modified``, ``backport`` or
    ``partial``; *via*: the upstream commits (for ``backport``, the one it declares).

    *landed* of *total* changes; *left*: where the rest is (file and lines of the patch's result).
    """

    state: str
    via: list[str]
    landed: int = 0
    total: int = 0
    left: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        via = ", ".join(c[:12] for c in self.via) or "commit not identified"
        if self.state == "same-patch":
            return f"landed (same patch, via {via})"
        if self.state == "modified":
            return f"landed (modified, via {via})"
        if self.state == "backport":
            return f"landed (backport of {via})"
        left = f"; left: {', '.join(self.left)}" if self.left else ""
        return f"partially landed ({self.landed} of {self.total} changes, via {via}{left})"

    def to_json(self) -> LandingJson:
        return {"state": self.state, "label": self.label, "via": self.via, "landed": self.landed, "total": self.total, "left": self.left}


def partial_landing(answer: Answer, via: Callable[[], list[str]]) -> Landing | None:
    """The ``partial`` Landing of a kept patch's *answer* (None: nothing of it is there, or all of it)."""
    if answer.state != PARTIAL or answer.measure is None:
        return None
    return Landing("partial", via(), answer.measure.present, answer.measure.total, list(answer.measure.left))
