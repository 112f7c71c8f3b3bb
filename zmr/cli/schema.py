"""`zmr schema`: print the JSON Schema of manifests or of ``zmr.yaml``.

The work is `zmr.model.file_schemas`. Without --json the schema alone (what editors and the committed copies under schemas/
hold); with --json, in the envelope of every --json output (`name`, `url` where it is published, `schema`).
"""

import sys
from typing import Annotated

import typer

from zmr.cli.options import Json


def schema(
    name: Annotated[str, typer.Argument(metavar="manifest|settings", help="Which file: manifest (manifests/<model>.yaml) or settings (zmr.yaml).")],
    json_out: Json = False,
) -> None:
    """Print the JSON Schema of manifests or zmr.yaml (for editors; the same declarations zmr validate reads with)."""
    import zmr.model.file_schemas

    if name not in zmr.model.file_schemas.NAMES:
        raise typer.BadParameter(f"{name!r}: give one of {', '.join(zmr.model.file_schemas.NAMES)}", param_hint="'NAME'")
    if json_out:
        from zmr.cli.render import print_report

        print_report(zmr.model.file_schemas.published(name))
        return
    sys.stdout.write(zmr.model.file_schemas.schema_text(name))
