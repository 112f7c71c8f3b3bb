"""`zmr diff`: what a change to this repository does to every release branch.

The work is `zmr.diff`.
"""

from pathlib import Path
from typing import Annotated

import typer

from zmr.cli.options import Components, Json, Untrusted, find_project
from zmr.cli.render import Progress, print_json, warn

Arguments = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[BASE [HEAD]] [MODEL...]",
        help="BASE and HEAD: revisions of this repository (default: the merge-base of HEAD with the default branch, and the working tree); then models.",
        show_default=False,
    ),
]
Markdown = Annotated[Path | None, typer.Option("--markdown", help="Also write the report as one pull-request comment (markdown) to FILE.", show_default=False)]
Stat = Annotated[bool, typer.Option("--stat", help="Also count the lines of a moved pin's upstream changes (fetches every file upstream changed).")]
Check = Annotated[bool, typer.Option("--check", help="Exit 1 when any component changed, as git diff --exit-code.")]
ExitCode = Annotated[bool, typer.Option("--exit-code", hidden=True, help="The old name of --check.")]


def diff(
    arguments: Arguments = None,
    components: Components = None,
    json_out: Json = False,
    markdown: Markdown = None,
    stat: Stat = False,
    check: Check = False,
    exit_code: ExitCode = False,
    untrusted: Untrusted = False,
) -> None:
    """Compare the release branches of two revisions (default: the merge-base with main and the working tree), built in memory."""
    import zmr.diff
    from zmr.cache import Cache
    from zmr.errors import CheckFailed, ZmrError
    from zmr.files import atomic_write

    project = find_project(untrusted)
    base, head, models = zmr.diff.split_arguments(project, arguments or [])
    with Progress() as progress:
        cache = Cache(progress=progress)
        report = zmr.diff.diff(project, base, head, models, components or [], cache=cache, progress=progress, stat=stat)
    for note in cache.notes:
        warn(note)
    if markdown is not None:
        atomic_write(markdown, report.to_markdown().encode("utf-8"))
    if json_out:
        print_json(report.to_json())
    else:
        _print(report)
    if report.broken:
        raise ZmrError(
            f"{len(report.broken)} component{'s' if len(report.broken) != 1 else ''} broken: " + ", ".join(c.label for c in report.broken),
            details=[c.reason or "" for c in report.broken],
        )
    if (check or exit_code) and report.changed:
        raise CheckFailed(f"{len(report.changed)} of {len(report.components)} components change")


def _print(report) -> None:
    head = report.head[:12] if report.head else "working tree"
    print(f"base {report.base[:12]} ({report.base_rev}), head {head}")
    for c in report.components:
        line = f"{c.status:9} {c.label}"
        p = c.pin
        if c.status == "unchanged":
            print(line)
            continue
        if p.old != p.new:
            line += f"  pin {(p.old or 'none')[:12]} -> {(p.new or 'none')[:12]}"
            if p.direction:
                line += f" ({p.direction}" + (f", {p.commits} commits" if p.commits is not None else "") + ")"
        if c.patches:
            q = c.patches
            line += f"  patches +{len(q.added)} -{len(q.removed)} ~{len(q.changed)} ={q.unchanged}" + (" reordered" if q.reordered else "")
        if c.tree and c.tree.files_changed is not None:
            lines = f" +{c.tree.insertions} -{c.tree.deletions}" if c.tree.insertions is not None else " (lines not counted: --stat)"
            line += f"  tree {c.tree.files_changed} files{lines}"
        if c.reason:
            line += f"  ({c.reason.splitlines()[0]})"
        print(line)
        for change in c.patches.changed if c.patches else []:
            print(f"  changed {change.old} -> {change.new}")
            for text in change.interdiff.splitlines()[1:]:
                print(f"    {text}")
