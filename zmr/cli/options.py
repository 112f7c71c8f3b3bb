"""What several commands share, declared once: their common arguments and options, and the project they act on.

A command takes ``models: Models = None`` or ``json_out: Json = False``; the
flag, its help and its default live here, so ``--json`` means the same thing
everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # pragma: no cover
    from zmr.project import Project

_MODEL_HELP = "Model name (manifests/<model>.yaml)."

Models = Annotated[list[str] | None, typer.Argument(help="Model names (manifests/<model>.yaml).", show_default=False)]
Model = Annotated[str, typer.Argument(help=_MODEL_HELP, show_default=False)]
OptionalModel = Annotated[str | None, typer.Argument(help=_MODEL_HELP, show_default=False)]
All = Annotated[bool, typer.Option("--all", help="Every model.")]
Components = Annotated[list[str] | None, typer.Option("--component", "-c", help="Only these components (repeatable).", show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
Untrusted = Annotated[bool, typer.Option("--untrusted", help="Treat manifests as untrusted input (pull requests in CI).", envvar="ZMR_UNTRUSTED")]
Dir = Annotated[Path | None, typer.Option("--dir", help="The checkout folder (default work/<model>/<component>).", show_default=False)]


def find_project(untrusted: bool = False) -> Project:
    """The zmr repository the command acts on (``Project.find``: also from inside a checkout)."""
    from zmr.manifest import Policy
    from zmr.project import Project

    return Project.find(policy=Policy(untrusted=untrusted))
