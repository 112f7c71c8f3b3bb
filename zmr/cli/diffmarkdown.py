"""``zmr diff --markdown``: the report as one pull-request comment, under GitHub's size limit.

Layout: the hidden marker (the workflow finds its own comment by it), a
summary table of the changed components, then one section per changed
component: its pin and branch, the series' range-diff, then collapsible
blocks: each changed patch's interdiff (a ``context`` one folded: closed,
after the others), each added patch's diff, the release tree's diff stat
and its unified diff. What does not fit in *limit* characters is cut
whole, largest block first: a folded block leaves one line in its place
saying what it was, how big, and the local ``zmr diff`` that shows it;
sections that still do not fit are left out; a note at the end counts
what was left out. Every text that comes from the repository (names,
diffs, reasons) goes into code spans or fenced blocks, so a patch cannot
write markdown or mention anyone.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING
from zmr.wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from zmr.diff import ComponentDiff, DiffReport, FileChange

COMMENT_LIMIT = 65_536  # characters GitHub accepts in one pull-request comment
MARKER = "<!-- zmr-diff -->"  # the first line: the workflow finds its own comment by it
STAT_FILES = 200  # files a release tree's diff stat lists in the comment (then how many more, then the totals)
_NOTE_ROOM = 800  # characters kept for the truncation note
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
    return f"{t.files_changed} file{'s' if t.files_changed != 1 else ''}, +{t.insertions} −{t.deletions}"


def _row(c: ComponentDiff) -> str:
    return f"| {code(c.label)} | {c.status} | {_pin(c)} | {_patches(c)} | {_tree(c)} |\n"


@dataclass
class _Block:
    """A collapsible block of one section: what it shows, and whether it is cut."""

    command: str  # the local zmr diff that shows the whole block
    title: str
    body: str
    lang: str = "diff"
    open: bool = False
    folded: bool = False

    def render(self) -> str:
        if self.folded:
            lines = self.body.count("\n") + (not self.body.endswith("\n"))
            size = f"{counted(lines, 'line')}, {counted(len(self.body), 'character')}"
            return f"- {self.title}: left out to fit one comment ({size}); {code(self.command)} shows it\n"
        return f"<details{' open' if self.open else ''}><summary>{self.title}</summary>\n\n{fenced(self.body, self.lang)}\n</details>\n"


@dataclass
class _Section:
    component: ComponentDiff
    head: str
    blocks: list[_Block]
    dropped: bool = False

    def render(self) -> str:
        return self.head + "".join(b.render() for b in self.blocks) + "\n"


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
        for name, how in p.landed.items():
            lines.append(f"- {code(name)} {how}")
    head = "\n".join(lines) + "\n\n"
    command = local_command(report, c)
    blocks: list[_Block] = []
    if p is not None and p.pairs and (p.changed or p.added or p.removed or p.reordered):
        width = len(str(max(len(p.pairs), 1)))
        body = "".join(pair.line(width) + (f"  [{pair.kind}]" if pair.kind else "") + "\n" for pair in p.pairs)
        blocks.append(_Block(command, f"series range-diff ({counted(len(p.pairs), 'line')})", body, "", open=True))
        for pair in sorted(p.changed, key=lambda x: x.kind == "context"):
            what = {"code": "code changed", "message": "message only", "context": "context only (the pin moved)"}.get(pair.kind or "", "changed")
            blocks.append(_Block(command, f"interdiff {code(pair.new_name or '')}: {what}", pair.interdiff or "(no interdiff)", open=pair.kind != "context"))
        for pair in p.pairs:
            if pair.sign == ">":
                blocks.append(_Block(command, f"added patch {code(pair.new_name or '')}", pair.diff or "(empty)", open=True))
    if t is not None and t.same_as is not None:
        head += f"The release tree's diff is {code(t.same_as)}'s (the same two trees).\n\n"
    elif t is not None and t.old is not None and t.new is not None and t.files:
        shown = f", the first {counted(STAT_FILES, 'file')}" if len(t.files) > STAT_FILES else ""
        blocks.append(_Block(command, f"release tree: diff stat ({_tree(c)}{shown})", stat_text(t.files, limit=STAT_FILES), ""))
        if t.patch is not None:
            blocks.append(_Block(command, "release tree: unified diff", t.patch))
    return _Section(c, head, blocks)


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

    # Fold the largest block first, until the sections fit (each fold leaves a line saying what it was);
    # then give back, smallest first, the folded blocks that fit in the room left.
    blocks = sorted((b for s in sections for b in s.blocks), key=lambda b: len(b.body), reverse=True)
    total = size()
    for block in blocks:
        if total <= room:
            break
        total -= _saved(block)  # a block's text does not depend on the others
    for block in sorted(blocks, key=lambda b: len(b.body)):  # among equals, the first sections first
        if block.folded and total + _cost(block) <= room:
            total += _cost(block)
            block.folded = False
    # Still too long (too many components): leave out whole sections, the last first.
    for s in reversed(sections):
        if size() <= room:
            break
        s.dropped = True
    folded = [b for s in sections if not s.dropped for b in s.blocks if b.folded]
    dropped = [s.component.label for s in sections if s.dropped]
    text = intro + table + "".join(s.render() for s in sections if not s.dropped) + _note(report, folded, dropped, left_rows)
    return text if len(text) <= limit else text[: limit - 1] + "\n"


def _saved(block: _Block) -> int:
    """Fold *block*: the characters that saves."""
    whole = len(block.render())
    block.folded = True
    return whole - len(block.render())


def _cost(block: _Block) -> int:
    """The characters unfolding a folded *block* would add."""
    folded = len(block.render())
    block.folded = False
    whole = len(block.render())
    block.folded = True
    return whole - folded


def _note(report: DiffReport, folded: list[_Block], dropped: list[str], left_rows: int) -> str:
    if not (folded or dropped or left_rows):
        return ""
    said = []
    if folded:
        said.append(f"{counted(len(folded), 'block')} ({counted(sum(len(b.body) for b in folded), 'character')}; each says where it stood)")
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
