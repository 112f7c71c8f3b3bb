"""`zmr schema`: print the JSON Schema of manifests or of ``zmr.yaml``.

The work is `zmr.file_schemas`.
"""

import sys
from typing import Annotated

import typer


def schema(
    name: Annotated[str, typer.Argument(metavar="manifest|settings", help="Which file: manifest (manifests/<model>.yaml) or settings (zmr.yaml).")],
) -> None:
    """Print the JSON Schema of manifests or zmr.yaml (for editors; the same declarations zmr validate reads with)."""
    import zmr.file_schemas

    if name not in zmr.file_schemas.NAMES:
        raise typer.BadParameter(f"{name!r}: give one of {', '.join(zmr.file_schemas.NAMES)}", param_hint="'NAME'")
    sys.stdout.write(zmr.file_schemas.schema_text(name))
