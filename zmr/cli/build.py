"""`zmr build`, `zmr verify`: write the release branches, or rebuild them in memory and compare.

The work is `zmr.release`.
"""

from typing import Annotated

import typer

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import Progress, print_json, warn


def build(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Write release branches into this repository (all move together, or none)."""
    from zmr import selection
    from zmr import release
    from zmr.cache import Cache

    project = find_project()
    chosen = selection.components(project, models, components, all_models, writes=True)
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        updates = release.build(project, chosen, cache=cache, progress=progress)
    for note in cache.notes:
        warn(note)
    if json_out:
        print_json(release.BuildReport(updates).to_json())
        return
    width = max((len(u.branch) for u in updates), default=0)
    for u in updates:
        change = f"{(u.old or '')[:12]} -> {u.new[:12]}" if u.status == "updated" else u.new[:12]
        print(f"{u.status:9} {u.branch.ljust(width)}  {change}")
        if u.kept:
            print(f"          zmr did not build the old tip: kept it as {u.kept}")


def verify(
    models: Models = None,
    all_models: All = False,
    components: Components = None,
    remote: Annotated[str | None, typer.Option("--remote", help="Compare with this remote's branches (ls-remote) instead of local ones.")] = None,
    json_out: Json = False,
) -> None:
    """Rebuild in memory and compare commit ids with the branches. Exit 1 on drift."""
    from zmr import selection
    from zmr import release
    from zmr.cache import Cache
    from zmr.errors import CheckFailed

    project = find_project()
    chosen = selection.components(project, models, components, all_models, writes=False)
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        results = release.verify(project, chosen, remote=remote, cache=cache, progress=progress)
    for note in cache.notes:
        warn(note)
    report = release.VerifyReport(results, remote)
    bad = report.drifted
    if json_out:
        print_json(report.to_json())
    else:
        width = max((len(r.branch) for r in results), default=0)
        for r in results:
            line = f"{r.status:8} {r.branch.ljust(width)}  {r.expected[:12]}"
            if r.reasons:
                line += ": " + "; ".join(r.reasons)
            print(line)
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(results)} branch{'es' if len(results) != 1 else ''} drifted: " + ", ".join(r.branch for r in bad))
