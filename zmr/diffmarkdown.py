"""``zmr diff --markdown``: the report as one pull-request comment, under GitHub's size limit.

Layout: the hidden marker (the workflow finds its own comment by it), a
summary table of the changed components, then one section per changed
component with its range-diff in a collapsible block. What does not fit
in *limit* characters is cut whole: a section loses its range-diff first,
then is left out; a note at the end names what was left out. Every text
that comes from the repository (names, interdiffs, reasons) goes into code
spans or fenced blocks, so a patch cannot write markdown or mention anyone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from zmr.diff import ComponentDiff, DiffReport

COMMENT_LIMIT = 65_536  # characters GitHub accepts in one pull-request comment
MARKER = "<!-- zmr-diff -->"  # the first line: the workflow finds its own comment by it
_NOTE_ROOM = 600  # characters kept for the truncation note
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
    if t is None or t.files_changed is None:
        return ""
    files = f"{t.files_changed} file{'s' if t.files_changed != 1 else ''}"
    return f"{files}, +{t.insertions} −{t.deletions}" if t.insertions is not None else f"{files} (lines not counted)"


def _row(c: ComponentDiff) -> str:
    return f"| {code(c.label)} | {c.status} | {_pin(c)} | {_patches(c)} | {_tree(c)} |\n"


def _names(names: list[str]) -> str:
    return ", ".join(code(n) for n in names)


def _section(c: ComponentDiff, *, details: bool) -> str:
    lines = [f"### {code(c.label)}: {c.status}", ""]
    if c.reason:
        lines += ["", fenced(c.reason)]
    lines.append(f"- pin: {_pin(c)}")
    lines.append(f"- branch {code(c.branch_name)}: {_short(c.branch[0])} → {_short(c.branch[1])}")
    if c.tree is not None:
        if c.tree.files_changed is not None:
            lines.append(f"- release tree: {_tree(c)}")
        lines.append(
            f"- files the series touches: base {_names(list(c.tree.series_files_old)) or 'none'}; head {_names(list(c.tree.series_files_new)) or 'none'}"
        )
    p = c.patches
    if p is not None:
        for what, names in (("added", p.added), ("removed", p.removed), ("changed", [f"{x.old} → {x.new}" for x in p.changed])):
            if names:
                lines.append(f"- patches {what}: {_names(names)}")
        for name, how in p.landed.items():
            lines.append(f"- {code(name)} {how}")
        lines.append(f"- {p.unchanged} patch{'es' if p.unchanged != 1 else ''} unchanged" + ("; the order changed" if p.reordered else ""))
    text = "\n".join(lines) + "\n"
    if p is not None and p.changed:
        if details:
            body = "".join(x.interdiff for x in p.changed)
            text += f"\n<details><summary>range-diff ({len(p.changed)} changed)</summary>\n\n{fenced(body, 'diff')}\n</details>\n"
        else:
            text += "\n(range-diff left out: too long for one comment)\n"
    return text + "\n"


def render(report: DiffReport, limit: int) -> str:
    """The comment, at most *limit* characters."""
    changed = report.changed
    head = report.head[:12] if report.head else "working tree"
    intro = (
        f"{MARKER}\n## zmr diff: {len(changed)} of {len(report.components)} component{'s' if len(report.components) != 1 else ''} change\n\n"
        f"Base {code(report.base[:12])} ({code(report.base_rev)}), head {code(head)}.\n\n"
    )
    parts = [intro]
    used = len(intro)
    budget = limit - _NOTE_ROOM
    left_rows = 0
    if changed:
        table = "| component | status | pin | patches | release tree |\n| --- | --- | --- | --- | --- |\n"
        parts.append(table)
        used += len(table)
        for c in changed:
            row = _row(c)
            if used + len(row) > budget // 2:
                left_rows += 1
                continue
            parts.append(row)
            used += len(row)
        parts.append("\n")
        used += 1
    trimmed, left_out = [], []
    for c in changed:
        full = _section(c, details=True)
        short = _section(c, details=False)
        if used + len(full) <= budget:
            parts.append(full)
            used += len(full)
        elif used + len(short) <= budget:
            parts.append(short)
            used += len(short)
            trimmed.append(c.label)
        else:
            left_out.append(c.label)
    note = _note(trimmed, left_out, left_rows)
    text = "".join(parts) + note
    return text if len(text) <= limit else text[: limit - 1] + "\n"


def _note(trimmed: list[str], left_out: list[str], left_rows: int) -> str:
    if not (trimmed or left_out or left_rows):
        return ""
    said = []
    if trimmed:
        said.append(f"the range-diff of {len(trimmed)} component{'s' if len(trimmed) != 1 else ''}")
    if left_out:
        said.append(f"{len(left_out)} section{'s' if len(left_out) != 1 else ''}")
    if left_rows:
        said.append(f"{left_rows} row{'s' if left_rows != 1 else ''} of the table")
    named = ", ".join(trimmed + left_out)
    if len(named) > 300:
        named = named[:300] + "..."
    return f"\n**Truncated** to fit one comment: left out {', '.join(said)} ({named}). Run `zmr diff` locally, or read the JSON artifact, for all of it.\n"
