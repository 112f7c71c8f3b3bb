"""`zmr new`: scaffold a model (manifest, empty series, case folder); never overwrites.

The work is `zmr.ops.new`.
"""

from typing import Annotated

import typer

from zmr.cli.options import Json, find_project
from zmr.cli.render import print_report, warn


def new(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="Name of the new model ([a-z0-9][a-z0-9._-]*).")],
    components: Annotated[
        list[str] | None,
        typer.Option(
            "--component",
            "-c",
            metavar="NAME=URL@REV",
            help="A component: its name, upstream (URL or path in this repository) and commit (full or abbreviated id, branch or tag; repeatable).",
            show_default=False,
        ),
    ] = None,
    title: Annotated[str | None, typer.Option("--title", metavar="T", help="Display name (default: MODEL).", show_default=False)] = None,
    tracks: Annotated[
        list[str] | None,
        typer.Option(
            "--track",
            metavar="[NAME=]REF",
            help="The upstream branch or tag a component follows: REF for every component, NAME=REF for one (repeatable).",
            show_default=False,
        ),
    ] = None,
    json_out: Json = False,
) -> None:
    """Scaffold a model: manifest, empty series and a case folder (README, recipe, case.yaml). Never overwrites."""
    import zmr.ops.new

    project = find_project()
    created = zmr.ops.new.create(project, model, components or [], title, tracks or [])
    for line in created.warnings:
        warn(line)
    if json_out:
        print_report(created)
        return
    for path in created.files:
        print(f"{'changed' if path in created.changed else 'created'}  {path}")
    print(f"next: fill in cases/{model}/, add patches (zmr checkout {model} -c <component>, then zmr export), zmr validate {model}, zmr docs")
