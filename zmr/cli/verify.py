"""`zmr verify`: rebuild the release branches in memory and compare commit ids.

The work is `zmr.ops.verify`.
"""

from typing import Annotated

import typer

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import Progress, print_report, warn


def verify(
    models: Models = None,
    all_models: All = False,
    components: Components = None,
    remote: Annotated[str | None, typer.Option("--remote", help="Compare with this remote's branches (ls-remote) instead of local ones.")] = None,
    json_out: Json = False,
) -> None:
    """Rebuild in memory and compare commit ids with the branches. Exit 1 on drift."""
    import zmr.ops.verify
    from zmr.infra.cache import Cache
    from zmr.infra.errors import CheckFailed
    from zmr.model import selection

    project = find_project()
    chosen = selection.components(project, models, components, all_models, writes=False)
    with Progress(steps=[c.label for c in chosen]) as progress:
        cache = Cache(progress=progress)
        results = zmr.ops.verify.verify(project, chosen, remote=remote, cache=cache, progress=progress)
    for note in cache.notes:
        warn(note)
    report = zmr.ops.verify.VerifyReport(results, remote)
    if json_out:
        print_report(report)
    else:
        width = max((len(r.branch) for r in results), default=0)
        for r in results:
            if r.status == "ok":
                line = f"{r.status:8} {r.branch.ljust(width)}  {r.expected[:12]}"
            else:  # both ids: what zmr builds, and where the branch is
                line = f"{r.status:8} {r.branch.ljust(width)}  expected {r.expected[:12]}, branch at {r.actual[:12] if r.actual else '(none)'}"
            if r.reasons:
                line += ": " + "; ".join(r.reasons)
            print(line)
    if report.failed():
        named = " ".join(sorted({r.component.model for r in report.drifted}))
        only = "".join(f" -c {k}" for k in sorted({r.component.key for r in report.drifted})) if components else ""
        fix = [f"to make the branches what the manifests and series say: `zmr build {named}{only}`"]
        if remote:
            fix.append(f"then push them: `zmr publish {named} --remote {remote}`")
        raise CheckFailed(report.reason(), details=fix)
