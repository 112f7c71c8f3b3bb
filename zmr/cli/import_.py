"""`zmr import`: turn existing release branches into a manifest and series that rebuild them.

The work is `zmr.importer`.
"""

from typing import Annotated

import typer

from zmr.cli.options import Json, find_project
from zmr.cli.render import Progress, print_json, warn


def import_(
    branches: Annotated[list[str], typer.Argument(help="Release branches to import (two-commit or snapshot layout).", show_default=False)],
    model: Annotated[str | None, typer.Option("--model", help="Model name (default: from the branch trailers or name).", show_default=False)] = None,
    remote: Annotated[str | None, typer.Option("--remote", help="Read the branches from this remote (name or URL) instead of local branches.", show_default=False)] = None,
    upstream: Annotated[str | None, typer.Option("--upstream", help="Upstream URL, when the snapshot message does not name it.", show_default=False)] = None,
    commit: Annotated[str | None, typer.Option("--commit", help="Upstream commit id, when the snapshot message does not name it.", show_default=False)] = None,
    json_out: Json = False,
) -> None:
    """Turn existing release branches into a manifest and series that rebuild them."""
    from zmr import importer

    project = find_project()
    with Progress() as progress:
        result = importer.import_branches(project, branches, model=model, remote=remote, upstream=upstream, commit=commit, progress=progress)
    for text in result.warnings:
        warn(text)
    if json_out:
        print_json(result.to_json())
        return
    print(result.text(), end="")

