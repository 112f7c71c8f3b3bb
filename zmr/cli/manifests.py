"""`zmr list`, `zmr validate`, `zmr fetch`: read the manifests and series, fill the cache.

The work is `zmr.manifest`, `zmr.series`, `zmr.cases` and `zmr.cache`.
"""

from typing import Annotated

import typer

from zmr.cli.options import All, Components, Json, Models, Untrusted, find_project
from zmr.cli.render import Progress, print_json, table, warn


def list_models(json_out: Json = False) -> None:
    """Models, components, pins and patch counts."""
    from zmr.manifest import list_models as listing_of

    listing = listing_of(find_project())
    if json_out:
        print_json(listing.to_json())
        return
    rows = [
        [m.manifest.model, c.key, c.commit[:12], m.patch_counts[c.key], c.branch, c.upstream, _statuses(m.statuses[c.key])]
        for m in listing.models
        for c in m.manifest.components.values()
    ]
    table(["model", "component", "pin", "patches", "branch", "upstream", "upstream status"], rows)


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "-"


def validate(
    models: Models = None,
    json_out: Json = False,
    untrusted: Untrusted = False,
    require_upstream_status: Annotated[
        bool, typer.Option("--require-upstream-status", help="Also require every patch to declare its upstream status (Upstream-Status:, Forwarded:).")
    ] = False,
) -> None:
    """Check manifests and series: schema, files, ordering. Exit 2 on any problem."""
    from zmr.cases import ValidateReport, check_project
    from zmr.errors import CaseError, Located, ZmrError
    from zmr.yamlnodes import Problem

    project = find_project(untrusted)
    problems: list[Located] = []  # for --json
    manifests: list = []
    cases: list = []
    try:
        manifests, cases = check_project(project, models)
    except CaseError as err:  # every problem of the manifests and cases
        if not json_out:
            raise
        problems += err.problems
    failed: list[ZmrError] = []
    warnings: list[str] = []
    count = 0
    for manifest in manifests:
        for comp in manifest.components.values():
            try:
                series = project.series(comp)
            except ZmrError as err:
                failed.append(err)
                listed = getattr(err, "problems", [])
                problems += listed or [Problem(comp.patches, 0, err.message, "; ".join(err.details))]
                continue
            count += len(series.patches)
            warnings.extend(series.warnings)
            split = _message_problems(comp.patches, series.patches) + _status_problems(comp.patches, series.patches, require_upstream_status)
            if split:
                problems += split
                failed.append(ZmrError(f"{len(split)} problem{'s' if len(split) != 1 else ''} in {comp.patches}/series", details=[str(p) for p in split]))
    for text in warnings:
        warn(text)
    if json_out:
        # The problems are the report (stdout); the exit status still says there are some.
        print_json(ValidateReport([m.model for m in manifests], [c.model for c in cases], count, problems, warnings).to_json())
        if problems:
            raise ZmrError(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}, listed in the JSON report")
        return
    if failed:
        texts = [str(err) for err in failed]
        raise ZmrError(texts[0].splitlines()[0], details=[line for text in texts for line in text.splitlines()][1:])
    print(f"ok: {len(manifests)} manifest{'s' if len(manifests) != 1 else ''}, {len(cases)} case{'s' if len(cases) != 1 else ''}, {count} patches")


def _message_problems(folder: str, patches: list) -> list:
    """Patch files whose commit message would be cut or read as a diff (`series.message_split_problem`)."""
    from zmr.series import message_split_problem
    from zmr.yamlnodes import Problem

    found = []
    for patch in patches:
        split = message_split_problem(patch)
        if split is not None:
            fix = "edit the file, or reword the commit in a checkout and export it again"
            found.append(Problem(f"{folder}/{patch.name}", split[0], split[1], fix))
    return found


def _status_problems(folder: str, patches: list, require: bool) -> list:
    """Malformed upstream-status headers; with *require*, patches that declare none (`zmr.upstream_status`)."""
    from zmr.upstream_status import FIX, status_of
    from zmr.yamlnodes import Problem

    found = []
    for patch in patches:
        status, problems = status_of(patch)
        found += [Problem(f"{folder}/{patch.name}", line, message, FIX) for line, message in problems]
        if require and status is None and not problems:
            found.append(Problem(f"{folder}/{patch.name}", 1, "no upstream status (--require-upstream-status)", FIX))
    return found


def fetch(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Fill the cache with the pinned commits."""
    from zmr import selection
    from zmr.cache import Cache, Fetched, FetchReport

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
        print_json(FetchReport(results).to_json())
    else:
        for item in results:
            print(f"fetched {item.model}/{item.component} {item.commit[:12]}")
