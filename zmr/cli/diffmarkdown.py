"""``zmr diff --markdown``: the report as one pull-request comment, under GitHub's size limit.

Layout, in the order a reviewer reads (§7.20): the hidden marker (the
workflow finds its own comment by it), a summary table of the changed
components; then one section per changed component: its summary (pin,
branch, the patches added, changed, dropped and landed by name, conflicts,
the release tree's stat in one line); then what the series changes
relative to upstream's move, open: the range-diff, each changed patch's
interdiff (a ``context`` one folded), each added and each removed patch's
diff, the release tree's diff of the files a patch touches; then
upstream's own change, folded: the diff stat and the diff of the files no
patch touches. What does not fit in *limit* characters is cut, largest
block first: a cut block shows its head up to what fits and then says how
many lines and characters were left out and the local ``zmr diff`` that
shows them (a block with no room for a head leaves one line saying what
it was); sections that still do not fit are left out; a note at the end
counts what was left out. Every text that comes from the repository
(names, diffs, reasons) goes into code spans or fenced blocks, so a patch
cannot write markdown or mention anyone.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zmr.infra.wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from zmr.ops.diff import ComponentDiff, DiffReport, FileChange

COMMENT_LIMIT = 65_536  # characters GitHub accepts in one pull-request comment
MARKER = "<!-- zmr-diff -->"  # the first line: the workflow finds its own comment by it
STAT_FILES = 200  # files a release tree's diff stat lists in the comment (then how many more, then the totals)
_NOTE_ROOM = 800  # characters kept for the truncation note
_CUT_NOTE = 400  # room for what a cut block says it left out
_MIN_HEAD = 200  # a cut block shows a head of at least this many characters, or none
_TICKS_RE = re.compile(r"`+")


def code(text: str) -> str:
    """*text* as an inline code span, whatever backticks it holds."""
    flat = " ".join(str(text).split())
    ticks = "`" * (max((len(m) for m in _TICKS_RE.findall(flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def fenced(text: str, lang: str = "") -> str:
    """*text* as a fenced block whose fence is longer than any run of backticks in it."""
    fence = "`" * max(3, max((len(m) for m in _TICKS_RE.findall(text)), default=0) + 1)
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}\n"


def stat_text(files: tuple[FileChange, ...] | list[FileChange], width: int = 40, limit: int | None = None) -> str:
    """``git diff --stat`` of *files*: one line each (the first *limit*, then how many more), then the totals of all."""
    if not files:
        return " 0 files changed\n"
    shown = files if limit is None or len(files) <= limit else files[:limit]
    name_width = min(max(len(f.path) for f in files), 60)
    most = max((f.insertions or 0) + (f.deletions or 0) for f in files) or 1
    count_width = len(str(most))
    lines = []
    for f in shown:
        name = f.path if len(f.path) <= name_width else "..." + f.path[-(name_width - 3) :]
        if f.insertions is None or f.deletions is None:
            lines.append(f" {name:<{name_width}} | {'Bin':>{count_width}}")
            continue
        total = f.insertions + f.deletions
        scale = min(1.0, width / most)
        plus, minus = round(f.insertions * scale), round(f.deletions * scale)
        if total and not plus + minus:
            plus, minus = (1, 0) if f.insertions else (0, 1)
        lines.append(f" {name:<{name_width}} | {total:>{count_width}} {'+' * plus}{'-' * minus}".rstrip())
    ins, dels = sum(f.insertions or 0 for f in files), sum(f.deletions or 0 for f in files)
    total_line = f" {len(files)} file{_s(len(files))} changed, {ins} insertion{_s(ins)}(+), {dels} deletion{_s(dels)}(-)"
    more = [f" ... and {len(files) - len(shown)} more files"] if len(shown) < len(files) else []
    return "\n".join(lines + more + [total_line]) + "\n"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def local_command(report: DiffReport, c: ComponentDiff) -> str:
    """The ``zmr diff`` that shows *c* alone, run in a clone of the repository."""
    revs = [report.base[:12]] + ([report.head[:12]] if report.head else [])
    return " ".join(["zmr diff", *revs, shlex.quote(c.model), "-c", shlex.quote(c.component)])


def _short(oid: str | None) -> str:
    return code(oid[:12]) if oid else "none"


def _pin(c: ComponentDiff) -> str:
    p = c.pin
    if p.old == p.new:
        return _short(p.new)
    move = f"{_short(p.old)} → {_short(p.new)}"
    if p.direction and p.direction != "same":
        move += f" ({p.direction}" + (f", {p.commits} commit{'s' if p.commits != 1 else ''}" if p.commits is not None else "") + ")"
    return move


def _patches(c: ComponentDiff) -> str:
    if c.patches is None:
        return ""
    p = c.patches
    text = f"+{len(p.added)} −{len(p.removed)} ~{len(p.changed)}, {p.unchanged} unchanged"
    return text + (", reordered" if p.reordered else "")


def _tree(c: ComponentDiff) -> str:
    t = c.tree
    if t is None or t.old is None or t.new is None:
        return ""
    return _tree_of(list(t.files))


def _row(c: ComponentDiff) -> str:
    return f"| {code(c.label)} | {c.status} | {_pin(c)} | {_patches(c)} | {_tree(c)} |\n"


@dataclass
class _Block:
    """A collapsible block of one section: what it shows, and how much of it (*keep*: the characters of its head; None: all)."""

    command: str  # the local zmr diff that shows the whole block
    title: str
    body: str
    lang: str = "diff"
    open: bool = False
    keep: int | None = None

    @property
    def folded(self) -> bool:
        """Cut to nothing: one line says what it was."""
        return self.keep == 0

    @property
    def cut(self) -> bool:
        return self.keep is not None

    def render(self) -> str:
        lines = self.body.count("\n") + (not self.body.endswith("\n"))
        if self.folded:
            size = f"{counted(lines, 'line')}, {counted(len(self.body), 'character')}"
            return f"- {self.title}: left out to fit one comment ({size}); {code(self.command)} shows it\n"
        if self.keep is None:
            return f"<details{' open' if self.open else ''}><summary>{self.title}</summary>\n\n{fenced(self.body, self.lang)}\n</details>\n"
        head = self.body[: self.keep]
        shown = head.count("\n")
        note = (
            f"_first {shown} of {counted(lines, 'line')} shown; {counted(lines - shown, 'line')} ({counted(len(self.body) - len(head), 'character')})"
            " left out to fit one comment;"
            f" {code(self.command)} shows them_"
        )
        return f"<details{' open' if self.open else ''}><summary>{self.title}</summary>\n\n{fenced(head, self.lang)}\n{note}\n</details>\n"

    def cut_to(self, chars: int) -> None:
        """Keep the whole lines of the body's head that fit in *chars* characters (none: folded to one line)."""
        head = self.body[: max(0, chars)]
        end = head.rfind("\n") + 1
        self.keep = end if end >= _MIN_HEAD else 0


@dataclass
class _Section:
    component: ComponentDiff
    head: str
    blocks: list[_Block]
    dropped: bool = False

    def render(self) -> str:
        return self.head + "".join(b.render() for b in self.blocks) + "\n"


def summary_lines(c: ComponentDiff) -> list[str]:
    """What a reviewer reads first about a changed component, past its one line: the patches by name, and its conflicts."""
    if c.status == "unchanged":
        return []
    lines = []
    p = c.patches
    if p is not None:
        dropped = [name for name in p.removed if name not in p.landed]
        for what, names in (
            ("added", p.added),
            ("changed", [f"{x.new_name} ({x.kind})" if x.kind else x.new_name or "" for x in p.changed]),
            ("dropped", dropped),
        ):
            if names:
                lines.append(f"{what} {', '.join(names)}")
        lines += [f"removed {name}: {how}" for name, how in p.landed.items()]  # how it landed (§7.9.1)
    if c.status == "broken":
        lines.append(f"conflicts: {(c.reason or '').splitlines()[0] if c.reason else 'the series does not apply'}")
    return lines


def _section(report: DiffReport, c: ComponentDiff) -> _Section:
    lines = [f"### {code(c.label)}: {c.status}", ""]
    if c.reason:
        lines += ["", fenced(c.reason)]
    lines.append(f"- pin: {_pin(c)}")
    lines.append(f"- branch {code(c.branch_name)}: {_short(c.branch[0])} → {_short(c.branch[1])}")
    t = c.tree
    if t is not None:
        if t.old is not None and t.new is not None:
            lines.append(f"- release tree: {_tree(c)}")
        lines.append(
            f"- files the series touches: base {', '.join(map(code, t.series_files_old)) or 'none'}; head {', '.join(map(code, t.series_files_new)) or 'none'}"
        )
    p = c.patches
    if p is not None:
        lines.append(f"- patches: {_patches(c)}" + ("" if p.matched_by == "range-diff" else f" (matched by {p.matched_by})"))
    for line in summary_lines(c):
        what, _, rest = line.partition(" ")
        lines.append(f"- {what.rstrip(':')}: {code(rest)}")
    head = "\n".join(lines) + "\n\n"
    command = local_command(report, c)
    blocks: list[_Block] = []
    if p is not None and p.pairs and (p.changed or p.added or p.removed or p.reordered):
        width = len(str(max(len(p.pairs), 1)))
        body = "".join(pair.line(width) + (f"  [{pair.kind}]" if pair.kind else "") + "\n" for pair in p.pairs)
        blocks.append(_Block(command, f"the series' change: range-diff ({counted(len(p.pairs), 'line')})", body, "", open=True))
        for pair in sorted(p.changed, key=lambda x: x.kind == "context"):
            what = {"code": "code changed", "message": "message only", "context": "context only (the pin moved)"}.get(pair.kind or "", "changed")
            blocks.append(_Block(command, f"interdiff {code(pair.new_name or '')}: {what}", pair.interdiff or "(no interdiff)", open=pair.kind != "context"))
        for pair in p.pairs:
            if pair.sign == ">":
                blocks.append(_Block(command, f"added patch {code(pair.new_name or '')}", pair.diff or "(empty)", open=True))
            elif pair.sign == "<":
                landed = p.landed.get(pair.old_name or "")
                title = f"removed patch {code(pair.old_name or '')}" + (f": {code(landed)}" if landed else "")
                blocks.append(_Block(command, title, pair.diff or "(not known: the two sides' upstreams differ)", open=True))
    if t is not None and t.same_as is not None:
        head += f"The release tree's diff is {code(t.same_as)}'s (the same two trees).\n\n"
    elif t is not None and t.old is not None and t.new is not None and t.files:
        ours, theirs = t.split_files()
        ours_patch, theirs_patch = t.split_patch()
        if ours:
            body = stat_text(ours, limit=STAT_FILES) + ("\n" + ours_patch if t.patch is not None else "")
            title = f"release tree, the files a patch touches ({_tree_of(ours)}: upstream's change and the series')"
            blocks.append(_Block(command, title, body, open=True))
        if theirs:
            shown = f", the first {counted(STAT_FILES, 'file')}" if len(theirs) > STAT_FILES else ""
            blocks.append(_Block(command, f"upstream's own change: diff stat ({_tree_of(theirs)}{shown})", stat_text(theirs, limit=STAT_FILES), ""))
            if t.patch is not None:
                blocks.append(_Block(command, "upstream's own change: unified diff (the files no patch touches)", theirs_patch))
    return _Section(c, head, blocks)


def _tree_of(files: list[FileChange]) -> str:
    ins, dels = sum(f.insertions or 0 for f in files), sum(f.deletions or 0 for f in files)
    return f"{counted(len(files), 'file')}, +{ins} −{dels}"


def render(report: DiffReport, limit: int = COMMENT_LIMIT) -> str:
    """The comment, at most *limit* characters."""
    changed = report.changed
    head = report.head[:12] if report.head else "working tree"
    intro = (
        f"{MARKER}\n## zmr diff: {len(changed)} of {len(report.components)} component{'s' if len(report.components) != 1 else ''} change\n\n"
        f"Base {code(report.base[:12])} ({code(report.base_rev)}), head {code(head)}.\n\n"
    )
    budget = limit - _NOTE_ROOM
    table = ""
    left_rows = 0
    if changed:
        table = "| component | status | pin | patches | release tree |\n| --- | --- | --- | --- | --- |\n"
        for c in changed:
            row = _row(c)
            if len(intro) + len(table) + len(row) > budget // 2:
                left_rows += 1
                continue
            table += row
        table += "\n"
    sections = [_section(report, c) for c in changed]
    room = budget - len(intro) - len(table)

    def size() -> int:
        return sum(len(s.render()) for s in sections if not s.dropped)

    # Cut the blocks that are over a common cap, the largest most (each keeps its head and says what it left out), the cap
    # the largest that lets the sections fit; then, as the cut lines' notes are only estimated, the largest first again.
    blocks = [b for s in sections for b in s.blocks]
    total = size()
    if total > room and blocks:
        cap = _cap([len(b.body) for b in blocks], total - room)
        for block in blocks:
            if len(block.body) > cap:
                block.cut_to(cap)
        total = size()
    for block in sorted(blocks, key=lambda b: len(b.render()), reverse=True):
        if total <= room:
            break
        before = len(block.render())
        block.cut_to((block.keep if block.keep is not None else len(block.body)) - (total - room) - _CUT_NOTE)
        total += len(block.render()) - before
    # Still too long (too many components): leave out whole sections, the last first.
    for s in reversed(sections):
        if size() <= room:
            break
        s.dropped = True
    folded = [b for s in sections if not s.dropped for b in s.blocks if b.cut]
    dropped = [s.component.label for s in sections if s.dropped]
    text = intro + table + "".join(s.render() for s in sections if not s.dropped) + _note(report, folded, dropped, left_rows)
    return text if len(text) <= limit else text[: limit - 1] + "\n"


def _cap(sizes: list[int], excess: int) -> int:
    """The largest cap such that cutting every size over it to it (plus a note each) saves *excess* characters or more."""

    def saved(cap: int) -> int:
        return sum(size - cap - _CUT_NOTE for size in sizes if size > cap)

    low, high = 0, max(sizes)
    while low < high:
        mid = (low + high + 1) // 2
        if saved(mid) >= excess:
            low = mid
        else:
            high = mid - 1
    return low


def _note(report: DiffReport, folded: list[_Block], dropped: list[str], left_rows: int) -> str:
    if not (folded or dropped or left_rows):
        return ""
    said = []
    if folded:
        left = sum(len(b.body) - (b.keep or 0) for b in folded)
        said.append(f"parts of {counted(len(folded), 'block')} ({counted(left, 'character')}; each says what it left out)")
    if dropped:
        named = ", ".join(dropped)
        if len(named) > 300:
            named = named[:300] + "..."
        said.append(f"the section{'s' if len(dropped) != 1 else ''} of {len(dropped)} component{'s' if len(dropped) != 1 else ''} ({named})")
    if left_rows:
        said.append(f"{left_rows} row{'s' if left_rows != 1 else ''} of the table")
    revs = " ".join([report.base[:12]] + ([report.head[:12]] if report.head else []))
    return (
        f"\n**Truncated** to fit one comment ({COMMENT_LIMIT:,} characters): left out {', '.join(said)}. "
        f"{code('zmr diff ' + revs)} in a clone shows all of it; the JSON artifact holds it too.\n"
    )
