"""`zmr build`, `zmr verify`: write the release branches, or rebuild them in memory and compare.

The work is `zmr.ops.build`.
"""

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import Progress, print_report, warn


def build(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Write release branches into this repository (all move together, or none)."""
    import zmr.ops.build
    from zmr.infra.cache import Cache
    from zmr.model import selection

    project = find_project()
    chosen = selection.components(project, models, components, all_models, writes=True)
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        updates = zmr.ops.build.build(project, chosen, cache=cache, progress=progress)
    for note in cache.notes:
        warn(note)
    if json_out:
        print_report(zmr.ops.build.BuildReport(updates))
        return
    width = max((len(u.branch) for u in updates), default=0)
    for u in updates:
        change = f"{(u.old or '')[:12]} -> {u.new[:12]}" if u.status == "updated" else u.new[:12]
        print(f"{u.status:9} {u.branch.ljust(width)}  {change}")
        if u.kept:
            print(f"          zmr did not build the old tip: kept it as {u.kept}")
