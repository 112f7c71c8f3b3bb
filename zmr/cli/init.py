"""`zmr init`: make the current git repository a zmr project.

The work is `zmr.ops.init`.
"""

from typing import Annotated

import typer

from zmr.cli.options import Json
from zmr.cli.render import print_report


def init(
    name: Annotated[
        str | None,
        typer.Option("--name", metavar="N", help="Release identity: author and committer name of release commits (default: zmr release).", show_default=False),
    ] = None,
    email: Annotated[
        str | None, typer.Option("--email", metavar="E", help="Release identity: e-mail (default: release@zmr.invalid).", show_default=False)
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url", metavar="URL", help="The repository's web page, for links in the README (default: from origin, if on GitHub).", show_default=False
        ),
    ] = None,
    readme_sections: Annotated[
        bool, typer.Option("--readme-sections", help="Append the marker sections `zmr docs` fills to an existing README that lacks them.")
    ] = False,
    skill: Annotated[
        bool, typer.Option("--skill", help="Add skill/: the zero-mismatch skill (workflow, mechanism guides, templates) for coding agents and engineers.")
    ] = False,
    json_out: Json = False,
) -> None:
    """Make this git repository a zmr project (creates what is missing, changes nothing that exists)."""
    import os
    from pathlib import Path

    import zmr.ops.init

    result = zmr.ops.init.init(Path(os.getcwd()), name=name, email=email, url=url, readme_sections=readme_sections, skill=skill)
    if json_out:
        print_report(result)
        return
    for rel in result.created:
        print(f"created   {rel}")
    ignored = [line for line in result.appended if line.startswith("/")]
    if ignored:
        print(f"added     {', '.join(ignored)} to .gitignore")
    for line in result.appended:
        if not line.startswith("/"):
            print(f"appended  {line}")
    for note in result.notes:
        print(f"note: {note}")
    if result.changed:
        print(f"{result.root} is a zmr project: commit these files; `zmr import BRANCH...` or `zmr new MODEL` adds models")
    else:
        print(f"{result.root} is a zmr project already: nothing changed")
