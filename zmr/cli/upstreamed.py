"""`zmr upstreamed`: which patches of a series upstream has taken (read-only).

The work is `zmr.ops.upstream`.
"""

from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Json, OptionalModel, find_project
from zmr.cli.render import Progress, print_report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.ops.upstream import UpstreamedReport


def upstreamed(
    model: OptionalModel = None,
    all_models: Annotated[bool, typer.Option("--all", help="Every component of every model (the default when no MODEL is named).")] = False,
    components: Components = None,
    rev: Annotated[
        str | None,
        typer.Option(
            "--onto", "--rev", metavar="REV", help="Upstream commit, tag or branch (default: the component's track; --rev is the old name).", show_default=False
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Which patches of the series have landed upstream between the pin and REV (exit 0: a report)."""
    from zmr.infra.errors import ZmrError
    from zmr.model import selection
    from zmr.ops import upstream

    project = find_project()
    if model and all_models:
        raise ZmrError("name one model, or pass --all, not both", details=["`zmr list` shows the models"])
    chosen = selection.components(project, [model] if model else None, components, all_models, writes=False)
    # One component the user named is compared or refused (no track: the library says to pass --onto);
    # of several, those that follow no upstream ref have nothing to compare with: skipped, and the rest go on.
    named_one = bool(model) and len(chosen) == 1
    compared = [c for c in chosen if named_one or rev is not None or c.track is not None]
    skipped = [upstream.NotCompared(c) for c in chosen if c not in compared]
    with Progress(steps=[c.label for c in compared]) as progress:
        reports = [upstream.upstreamed(project, comp, rev, progress=progress) for comp in compared]
    if json_out:
        print_report(upstream.UpstreamedReports(reports, skipped))
        return
    for r in reports:
        print(upstreamed_text(r), end="")
    for c in (s.component for s in skipped):
        print(f"{c.label}: skipped (no `track` in manifests/{c.model}.yaml; pass --onto REV to compare with a revision)")


def upstreamed_text(r: "UpstreamedReport") -> str:
    c = r.component
    lines = [f"{c.label}: {len(r.upstreamed)} of {r.patches} patches upstream between {c.commit[:12]} and {r.rev} ({r.rev_commit[:12]})"]
    for d in r.upstreamed:
        where = f"{d.upstream[:12]} {d.upstream_subject}" if d.upstream else "(commit not identified)"
        lines.append(f"  {d.name}  {d.subject}  <- {where}  [{d.method}] {d.landed}")
    if r.conflicts:
        lines.append(f"  would conflict at {r.rev}: {', '.join(r.conflicts)}")
    for name, landing in r.partial.items():
        lines.append(f"  {name}: {landing.label} (kept)")
    return "\n".join(lines) + "\n"
