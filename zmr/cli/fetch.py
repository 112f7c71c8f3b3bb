"""`zmr fetch`: fill the cache with the pinned commits.

The work is `zmr.infra.cache`.
"""

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import Progress, print_report, warn


def fetch(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Fill the cache with the pinned commits."""
    from zmr.infra.cache import Cache, Fetched, FetchReport
    from zmr.model import selection

    project = find_project()
    chosen = selection.components(project, models, components, all_models, writes=False)
    results = []
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        for comp in chosen:
            progress(f"{comp.label}: {comp.upstream} {comp.commit[:12]}")
            mirror = cache.for_component(comp, project.root).ensure([comp.commit])
            results.append(Fetched(comp.model, comp.key, comp.commit, mirror.path))
    for note in cache.notes:
        warn(note)
    if json_out:
        print_report(FetchReport(results))
    else:
        for item in results:
            print(f"fetched {item.model}/{item.component} {item.commit[:12]}")
