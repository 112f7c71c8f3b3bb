"""`zmr import`: turn existing release branches into a manifest and series that rebuild them.

The work is `zmr.importing.importer`; its `ImportResult` is rendered here.
"""

from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Json, find_project
from zmr.cli.render import Progress, print_report, warn

if TYPE_CHECKING:  # pragma: no cover
    from zmr.importing.importer import ImportResult


def import_(
    branches: Annotated[list[str], typer.Argument(metavar="BRANCH", help="Release branches to import (two-commit or snapshot layout).", show_default=False)],
    model: Annotated[str | None, typer.Option("--model", help="Model name (default: from the branch trailers or name).", show_default=False)] = None,
    remote: Annotated[
        str | None, typer.Option("--remote", help="Read the branches from this remote (name or URL) instead of local branches.", show_default=False)
    ] = None,
    upstream: Annotated[
        list[str] | None,
        typer.Option(
            "--upstream",
            metavar="[COMPONENT=]URL",
            help="Upstream URL, when the message does not name it; COMPONENT=URL for one component (repeatable).",
            show_default=False,
        ),
    ] = None,
    commit: Annotated[
        str | None, typer.Option("--commit", metavar="ID", help="Upstream commit id, when the snapshot message does not name it.", show_default=False)
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", metavar="REV", help="A single snapshot commit's base: upstream commit, tag or branch.", show_default=False)
    ] = None,
    find_base: Annotated[bool, typer.Option("--find-base", help="A single snapshot commit's base: the upstream commit with the closest tree.")] = False,
    json_out: Json = False,
) -> None:
    """Turn existing release branches into a manifest and series that rebuild them."""
    from zmr.importing import importer

    project = find_project()
    with Progress() as progress:
        result = importer.import_branches(
            project, branches, model=model, remote=remote, upstream=upstream, commit=commit, base=base, find_base=find_base, progress=progress
        )
    for text in result.warnings:
        warn(text)
    if json_out:
        print_report(result)
        return
    print(import_text(result), end="")


def import_text(result: "ImportResult") -> str:
    """What was written, per model and component, and how to rebuild."""
    lines = []
    for model, items in result.manifests.items():
        lines.append(f"{'added to' if model in result.added else 'wrote'} manifests/{model}.yaml")
        for item in items:
            count = len(item.patches)
            lines.append(
                f"  {item.key}: {item.branch} ({item.layout}) = {item.upstream} at {item.commit[:12]}"
                f" + {count} patch{'es' if count != 1 else ''} in {item.folder}"
            )
            lines += [f"    {note}" for note in item.notes]
    models = " ".join(result.manifests)
    lines.append(f"rebuild with `zmr build {models}` (same trees; the commit ids follow the zmr layout)")
    return "\n".join(lines) + "\n"
