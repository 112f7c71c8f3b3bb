"""Commands that publish: docs (README tables), publish (push release branches), ci-matrix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from zmr.cli import app
from zmr.cli.manifests import JSON, MODELS, UNTRUSTED
from zmr.cli.render import Progress, print_json, warn


@app.command("docs")
def docs(
    check: bool = typer.Option(False, "--check", help="Change nothing; exit 1 with a diff when the README is out of date."),
    readme: Optional[Path] = typer.Option(None, "--readme", metavar="FILE", help="The README to update (default README.md at the repository root).", show_default=False),
    json_out: bool = JSON,
) -> None:
    """Regenerate the README's marked sections from manifests, cases, branches and evidence."""
    from zmr import docs as gen
    from zmr.cli.manifests import _project

    project = _project()
    outcome = gen.generate(project, readme)
    for text in outcome.warnings:
        warn(text)
    if not check:
        gen.write(outcome)
    if json_out:
        print_json({"readme": outcome.display, "check": check, "up_to_date": not outcome.stale, "changed": outcome.changed, "written": outcome.stale and not check, "warnings": outcome.warnings})
    elif check and outcome.stale:
        sys.stdout.write(outcome.diff())
    elif not outcome.stale:
        print(f"{outcome.display} is up to date")
    else:
        print(f"{outcome.display}: updated {', '.join(outcome.changed) or 'layout'}")
    if check and outcome.stale:
        raise gen.stale_error(outcome)


@app.command("publish")
def publish(
    models: Optional[List[str]] = MODELS,
    remote: str = typer.Option("origin", "--remote", help="Remote (name or URL) to push the release branches to."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Verify and check the remote, print the plan, push nothing."),
    json_out: bool = JSON,
) -> None:
    """Verify, then push every release branch (default: all models) in one atomic push with lease."""
    from zmr import publish as pub
    from zmr.cli.manifests import _project

    project = _project()
    targets = project.targets(models, None, not models)
    with Progress() as progress:
        result = pub.publish(project, targets, remote, dry_run=dry_run, progress=progress)
    if json_out:
        print_json(result.to_json())
        return
    width = max((len(b.branch) for b in result.branches), default=0)
    verbs = {pub.CREATED: "would create", pub.UPDATED: "would update"} if dry_run else {}
    for b in result.branches:
        status = verbs.get(b.status, b.status)
        if b.status == pub.UP_TO_DATE:
            change = b.new[:12]
        elif b.status == pub.CREATED:
            change = f"(none) -> {b.new[:12]}"
        else:
            change = f"{b.old[:12]} -> {b.new[:12]}"  # type: ignore[index]
        print(f"{status:12} {b.branch.ljust(width)}  {change}")
    moved, same = len(result.moving), len(result.branches) - len(result.moving)
    if dry_run:
        print(f"dry run: nothing pushed to {remote} ({moved} to push, {same} up to date)")
    elif result.pushed:
        print(f"pushed {moved} branch{'es' if moved != 1 else ''} to {remote} in one atomic push; {same} up to date")
    else:
        print(f"{remote} is up to date")


@app.command("ci-matrix")
def ci_matrix(models: Optional[List[str]] = MODELS, untrusted: bool = UNTRUSTED) -> None:
    """Print the CI job matrix as one line of JSON: {"include": [one job per model × component]}."""
    import json

    from zmr import publish as pub
    from zmr.cli.manifests import _project

    project = _project(untrusted)
    matrix = pub.ci_matrix(project.manifests(models))
    sys.stdout.write(json.dumps(matrix, separators=(",", ":"), sort_keys=True) + "\n")
