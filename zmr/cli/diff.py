"""`zmr diff`: what a change to this repository does to every release branch.

The work is `zmr.ops.diff`; this module parses the options and renders the
report (text like `git diff`, with colour and a pager on a terminal).
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Json, Untrusted, find_project
from zmr.cli.render import Progress, interactive, no_color, paging, print_report, warn
from zmr.infra.wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra import git
    from zmr.ops.diff import ComponentDiff, DiffReport, FileChange


class Color(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


Arguments = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[BASE [HEAD]] [MODEL...]",
        help="BASE and HEAD: revisions of this repository (default: the merge-base of HEAD with the default branch, and the working tree); then models.",
        show_default=False,
    ),
]
Markdown = Annotated[
    Path | None, typer.Option("--markdown", metavar="FILE", help="Also write the report as one pull-request comment (markdown) to FILE.", show_default=False)
]
Stat = Annotated[bool, typer.Option("--stat", help="Show the range-diffs and each release tree's diff stat, not the diffs (as git diff --stat).")]
NameOnly = Annotated[bool, typer.Option("--name-only", help="Show the range-diffs and the names of the files each release tree changes, not the diffs.")]
ColorOpt = Annotated[Color, typer.Option("--color", metavar="WHEN", help="Colour the text: auto (on a terminal, without NO_COLOR), always or never.")]
Check = Annotated[bool, typer.Option("--check", help="Exit 1 when any component changed, as git diff --exit-code.")]
ExitCode = Annotated[bool, typer.Option("--exit-code", hidden=True, help="The old name of --check.")]


def diff(
    arguments: Arguments = None,
    components: Components = None,
    json_out: Json = False,
    markdown: Markdown = None,
    stat: Stat = False,
    name_only: NameOnly = False,
    color: ColorOpt = Color.auto,
    check: Check = False,
    exit_code: ExitCode = False,
    untrusted: Untrusted = False,
) -> None:
    """Compare the release branches of two revisions (default: the merge-base with main and the working tree), built in memory."""
    import zmr.ops.diff
    from zmr.cli import diffmarkdown
    from zmr.infra.cache import Cache
    from zmr.infra.errors import CheckFailed, ZmrError
    from zmr.infra.files import atomic_write

    if stat and name_only:
        raise ZmrError("--stat and --name-only: give one of them", details=["--stat counts each file's lines; --name-only lists the files"])
    project = find_project(untrusted)
    base, head, models = zmr.ops.diff.split_arguments(project, arguments or [])
    with Progress() as progress:
        cache = Cache(progress=progress)
        patch = markdown is not None or not (stat or name_only)
        report = zmr.ops.diff.diff(project, base, head, models, components or [], cache=cache, progress=progress, patch=patch)
    for note in cache.notes:
        warn(note)
    if markdown is not None:
        atomic_write(markdown, diffmarkdown.render(report).encode("utf-8"))
    if json_out:
        print_report(report)
    else:
        mode = "stat" if stat else "name-only" if name_only else "patch"
        colored = color == Color.always or (color == Color.auto and sys.stdout.isatty() and not no_color())
        _page(render_text(report, mode, colored), project.repo if interactive() else None)
    if report.broken:
        raise ZmrError(
            f"{len(report.broken)} component{'s' if len(report.broken) != 1 else ''} broken: " + ", ".join(c.label for c in report.broken),
            details=[c.reason or "" for c in report.broken],
        )
    if (check or exit_code) and report.failed():
        raise CheckFailed(report.reason())


def _page(text: str, repo: git.Repo | None) -> None:
    """*text* on stdout, through git's pager on a terminal when it is longer than the screen can show (less -FRX)."""
    pager = repo.pager() if repo is not None and paging() else ""
    if not pager:
        sys.stdout.write(text)
        return
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX"), "LV": os.environ.get("LV", "-c")}
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(pager, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        sys.stdout.write(text)
        return
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode("utf-8", "replace"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the reader quit the pager early
    proc.wait()


_COLORS = {"+": "\x1b[32m", "-": "\x1b[31m", "@": "\x1b[36m", "head": "\x1b[1m"}
_RESET = "\x1b[m"


def _paint(line: str, colored: bool, nested: bool = False) -> str:
    """A diff line in git's colours: added green, removed red, hunk headers cyan (*nested*: a range-diff's outer marker)."""
    if not colored:
        return line
    body = line[4:] if nested and line.startswith("    ") else line
    if body.startswith(("diff --git", "+++ ", "--- ", "index ", "## ", "@@ ")) and not nested:
        key = "head" if not body.startswith("@@") else "@"
    elif body[:1] in "+-@":
        key = body[:1]
    else:
        return line
    return f"{_COLORS[key]}{line}{_RESET}"


def render_text(report: DiffReport, mode: str = "patch", colored: bool = False) -> str:
    """The report as text, for a reviewer in the order of reading (§7.20): a summary of every component first (its pin
    move, patches added, changed, dropped and landed, conflicts, the release tree's stat in one line); then, per changed
    component, what the series changes relative to upstream's move (range-diff, interdiffs, added and removed patches,
    the release tree's diff of the files a patch touches); then upstream's own change (the rest of the release tree's
    diff: files no patch touches), last.

    *mode*: ``patch`` (everything), ``stat`` (no diffs; each tree's diff stat), ``name-only`` (no diffs; the files' names).
    """
    from zmr.cli.diffmarkdown import summary_lines

    bold = (lambda s: f"\x1b[1m{s}{_RESET}") if colored else (lambda s: s)
    head = report.head[:12] if report.head else "working tree"
    out = [f"base {report.base[:12]} ({report.base_rev}), head {head}", bold("summary:")]
    for c in report.components:
        out.append("  " + (_summary(c) if c.status != "unchanged" else f"{c.status:9} {c.label}"))
        out += [f"    {line}" for line in summary_lines(c)]
    for c in report.changed:
        out += _series_part(c, mode, colored, bold)
        out += _upstream_part(c, mode, colored, bold)
    return "\n".join(out) + "\n"


def _series_part(c: ComponentDiff, mode: str, colored: bool, bold: Callable[[str], str]) -> list[str]:
    """What the series changes relative to upstream's move: the range-diff and each patch's part of it."""
    out = [bold(f"{c.label}: the series' change (relative to upstream's move)")]
    p = c.patches
    if p is not None and p.pairs and (p.changed or p.added or p.removed or p.reordered):
        width = len(str(len(p.pairs)))
        out.append(bold("  range-diff:"))
        out += [f"    {pair.line(width)}" + (f"  [{pair.kind}]" if pair.kind else "") for pair in p.pairs]
        if mode == "patch":
            for pair in p.changed:
                if pair.kind == "context":
                    lines = pair.interdiff.count("\n")
                    out.append(bold(f"  interdiff {pair.new_name}: context only ({counted(lines, 'line')}, folded; --json holds it)"))
                    continue
                out.append(bold(f"  interdiff {pair.new_name} ({pair.kind}, paired by {pair.by}):"))
                out += [_paint(f"    {line}", colored, nested=True) for line in pair.interdiff.splitlines()[1:]]
            for pair in p.pairs:
                if pair.sign in "<>":
                    name = pair.new_name if pair.sign == ">" else pair.old_name
                    landed = p.landed.get(name or "") if pair.sign == "<" else None
                    out.append(bold(f"  {'added' if pair.sign == '>' else 'removed'} {name}" + (f" ({landed})" if landed else "") + ":"))
                    out += [_paint(line, colored) for line in pair.diff.splitlines()]
    else:
        out.append("  the same patches")
    t = c.tree
    if t is None or t.old is None or t.new is None or t.same_as is not None:
        return out
    ours, _ = t.split_files()
    if not ours:
        return out
    out.append(bold(f"  release tree, the {counted(len(ours), 'file')} a patch touches (upstream's change and the series'):"))
    return out + _files_part(ours, t.split_patch()[0] if t.patch else "", mode, colored)


def _upstream_part(c: ComponentDiff, mode: str, colored: bool, bold: Callable[[str], str]) -> list[str]:
    """Upstream's own change: the release tree's diff of the files no patch touches, with the command that shows it all."""
    t = c.tree
    if t is None or t.old is None or t.new is None:
        return []
    out = [bold(f"{c.label}: upstream's own change (the files no patch touches)")]
    out.append(f"  release tree {t.old[:12]} -> {t.new[:12]}" + (f": {t.command}" if t.command else ":"))
    if t.same_as is not None:
        return out + [f"  the same trees as {t.same_as}: {counted(t.files_changed, 'file')} +{t.insertions} -{t.deletions}"]
    _, theirs = t.split_files()
    if not theirs:
        return out + ["  none: every file that changed is one a patch touches"]
    return out + _files_part(theirs, t.split_patch()[1] if t.patch else "", mode, colored)


def _files_part(files: list[FileChange], patch: str, mode: str, colored: bool) -> list[str]:
    """Files of a release tree's diff: their names (``name-only``), else their stat, then (``patch``) their unified diff."""
    from zmr.cli.diffmarkdown import stat_text

    if mode == "name-only":
        return [f"  {f.path}" for f in files]
    out = [f" {line}" for line in stat_text(files).splitlines()]
    return out + ([_paint(line, colored) for line in patch.splitlines()] if mode == "patch" else [])


def _summary(c: ComponentDiff) -> str:
    line = f"{c.status:9} {c.label}"
    p = c.pin
    if p.old != p.new:
        line += f"  pin {(p.old or 'none')[:12]} -> {(p.new or 'none')[:12]}"
        if p.direction:
            line += f" ({p.direction}" + (f", {counted(p.commits, 'commit')}" if p.commits is not None else "") + ")"
    if c.patches:
        q = c.patches
        line += f"  patches +{len(q.added)} -{len(q.removed)} ~{len(q.changed)} ={q.unchanged}" + (" reordered" if q.reordered else "")
    if c.tree and c.tree.old is not None and c.tree.new is not None:
        line += f"  tree {counted(c.tree.files_changed, 'file')} +{c.tree.insertions} -{c.tree.deletions}"
    if c.reason:
        line += f"  ({c.reason.splitlines()[0]})"
    return line
