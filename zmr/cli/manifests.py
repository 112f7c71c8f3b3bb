"""`zmr list`, `zmr validate`, `zmr fetch`: read the manifests and series, fill the cache.

The work is `zmr.manifest`, `zmr.series`, `zmr.cases` and `zmr.cache`.
"""

from zmr.cli.options import All, Components, Json, Models, Untrusted, find_project, targets
from zmr.cli.render import Progress, print_json, table, warn


def list_models(json_out: Json = False) -> None:
    """Models, components, pins and patch counts."""
    from zmr.series import read_series

    project = find_project()
    rows = []
    data = []
    for manifest in project.manifests():
        comps = []
        for comp in manifest.components.values():
            series = read_series(project.root / comp.patches, comp.patches)
            comps.append(
                {
                    "component": comp.key,
                    "upstream": comp.upstream,
                    "commit": comp.commit,
                    "track": comp.track,
                    "branch": comp.branch,
                    "release": comp.release,
                    "patches": len(series.patches),
                    "series": comp.patches,
                }
            )
            rows.append([manifest.model, comp.key, comp.commit[:12], len(series.patches), comp.branch, comp.upstream])
        data.append({"model": manifest.model, "title": manifest.title, "components": comps, "smoke": [t.name for t in manifest.smoke]})
    if json_out:
        print_json({"models": data})
    else:
        table(["model", "component", "pin", "patches", "branch", "upstream"], rows)


def validate(models: Models = None, json_out: Json = False, untrusted: Untrusted = False) -> None:
    """Check manifests and series: schema, files, ordering. Exit 2 on any problem."""
    from zmr.cases import check_project
    from zmr.errors import ZmrError
    from zmr.series import read_series

    project = find_project(untrusted)
    manifests, cases = check_project(project, models)
    problems: list[str] = []
    warnings: list[str] = []
    count = 0
    for manifest in manifests:
        for comp in manifest.components.values():
            try:
                series = read_series(project.root / comp.patches, comp.patches)
            except ZmrError as err:
                problems.append(str(err))
                continue
            count += len(series.patches)
            warnings.extend(series.warnings)
    for text in warnings:
        warn(text)
    if problems:
        raise ZmrError(problems[0].splitlines()[0], details=[line for p in problems for line in p.splitlines()][1:])
    if json_out:
        print_json({"ok": True, "models": [m.model for m in manifests], "cases": [c.model for c in cases], "patches": count, "warnings": warnings})
    else:
        print(f"ok: {len(manifests)} manifest{'s' if len(manifests) != 1 else ''}, {len(cases)} case{'s' if len(cases) != 1 else ''}, {count} patches")


def fetch(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Fill the cache with the pinned commits."""
    from zmr.cache import Cache, resolve_upstream

    project = find_project()
    chosen = targets(project, models, components, all_models, writes=False)
    results = []
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        for comp in chosen:
            progress(f"{comp.label}: {comp.upstream} {comp.commit[:12]}")
            mirror = cache.ensure(resolve_upstream(comp.upstream, project.root), [comp.commit], display=f"{comp.label} ({comp.upstream})")
            results.append({"model": comp.model, "component": comp.key, "commit": comp.commit, "mirror": str(mirror.path)})
    if json_out:
        print_json({"fetched": results})
    else:
        for item in results:
            print(f"fetched {item['model']}/{item['component']} {item['commit'][:12]}")
