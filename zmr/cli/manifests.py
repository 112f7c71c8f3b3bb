"""Commands over manifests and release branches: list, validate, fetch, build, verify."""

from __future__ import annotations

from typing import List, Optional

import typer

from zmr.cli import app
from zmr.cli.render import Progress, print_json, table, warn

MODELS = typer.Argument(None, help="Model names (manifests/<model>.yaml).", show_default=False)
ALL = typer.Option(False, "--all", help="Every model.")
COMPONENTS = typer.Option(None, "--component", "-c", help="Only these components (repeatable).", show_default=False)
JSON = typer.Option(False, "--json", help="Machine-readable output on stdout.")
UNTRUSTED = typer.Option(False, "--untrusted", help="Treat manifests as untrusted input (pull requests in CI).", envvar="ZMR_UNTRUSTED")


def _project(untrusted: bool = False):
    from zmr.manifest import Policy
    from zmr.project import Project

    return Project.find(policy=Policy(untrusted=untrusted))


@app.command("list")
def list_models(json_out: bool = JSON) -> None:
    """Models, components, pins and patch counts."""
    from zmr.series import read_series

    project = _project()
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


@app.command("validate")
def validate(models: Optional[List[str]] = MODELS, json_out: bool = JSON, untrusted: bool = UNTRUSTED) -> None:
    """Check manifests and series: schema, files, ordering. Exit 2 on any problem."""
    from zmr.errors import ZmrError
    from zmr.series import read_series

    from zmr.cases import check_project

    project = _project(untrusted)
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


@app.command("fetch")
def fetch(models: Optional[List[str]] = MODELS, all_models: bool = ALL, components: Optional[List[str]] = COMPONENTS, json_out: bool = JSON) -> None:
    """Fill the cache with the pinned commits."""
    from zmr.cache import Cache, resolve_upstream

    project = _project()
    targets = project.targets(models, components, all_models or not models)
    cache = Cache()
    results = []
    with Progress() as progress:
        for comp in targets:
            progress(f"{comp.label}: {comp.upstream} {comp.commit[:12]}")
            mirror = cache.ensure(resolve_upstream(comp.upstream, project.root), [comp.commit], display=f"{comp.label} ({comp.upstream})")
            results.append({"model": comp.model, "component": comp.key, "commit": comp.commit, "mirror": str(mirror.path)})
    if json_out:
        print_json({"fetched": results})
    else:
        for item in results:
            print(f"fetched {item['model']}/{item['component']} {item['commit'][:12]}")


@app.command("build")
def build(models: Optional[List[str]] = MODELS, all_models: bool = ALL, components: Optional[List[str]] = COMPONENTS, json_out: bool = JSON) -> None:
    """Write release branches into this repository (all move together, or none)."""
    from zmr import release

    project = _project()
    targets = project.targets(models, components, all_models)
    with Progress() as progress:
        updates = release.build(project, targets, progress=progress)
    if json_out:
        print_json({"branches": [{"branch": u.branch, "old": u.old, "new": u.new, "status": u.status} for u in updates]})
        return
    for u in updates:
        change = f"{u.old[:12]} -> {u.new[:12]}" if u.status == "updated" else u.new[:12]
        print(f"{u.status:9} {u.branch}  {change}")


@app.command("verify")
def verify(
    models: Optional[List[str]] = MODELS,
    all_models: bool = ALL,
    components: Optional[List[str]] = COMPONENTS,
    remote: Optional[str] = typer.Option(None, "--remote", help="Compare with this remote's branches (ls-remote) instead of local ones."),
    json_out: bool = JSON,
) -> None:
    """Rebuild in memory and compare commit ids with the branches. Exit 1 on drift."""
    from zmr import release
    from zmr.errors import CheckFailed

    project = _project()
    targets = project.targets(models, components, all_models)
    with Progress() as progress:
        results = release.verify(project, targets, remote=remote, progress=progress)
    bad = [r for r in results if r.status != "ok"]
    if json_out:
        print_json(
            {
                "ok": not bad,
                "remote": remote,
                "branches": [
                    {"model": r.component.model, "component": r.component.key, "branch": r.branch, "status": r.status, "expected": r.expected, "actual": r.actual, "reasons": r.reasons}
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            line = f"{r.status:8} {r.branch}  {r.expected[:12]}"
            if r.reasons:
                line += ": " + "; ".join(r.reasons)
            print(line)
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(results)} branch{'es' if len(results) != 1 else ''} drifted: " + ", ".join(r.branch for r in bad))
