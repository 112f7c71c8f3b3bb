"""`zmr docs`: regenerate the README's marked sections from manifests, cases, branches and evidence.

The work is `zmr.ops.docs`.
"""

import sys
from pathlib import Path
from typing import Annotated

import typer

from zmr.cli.options import Json, find_project
from zmr.cli.render import print_report, warn


def docs(
    check: Annotated[bool, typer.Option("--check", help="Change nothing; exit 1 with a diff when the README is out of date.")] = False,
    readme: Annotated[
        Path | None, typer.Option("--readme", metavar="FILE", help="The README to update (default README.md at the repository root).", show_default=False)
    ] = None,
    json_out: Json = False,
) -> None:
    """Regenerate the README's marked sections from manifests, cases, branches and evidence."""
    import zmr.ops.docs

    project = find_project()
    outcome = zmr.ops.docs.generate(project, readme, check=check)
    for text in outcome.warnings:
        warn(text)
    if not check:
        zmr.ops.docs.write(outcome)
    if json_out:
        print_report(outcome)
    elif check and outcome.stale:
        sys.stdout.write(outcome.diff())
    elif not outcome.stale:
        print(f"{outcome.display} is up to date")
    else:
        print(f"{outcome.display}: updated {', '.join(outcome.changed) or 'layout'}")
    if outcome.failed():
        from zmr.infra.errors import CheckFailed

        raise CheckFailed(outcome.reason(), details=["run `zmr docs` and commit the result"])
