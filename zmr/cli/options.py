"""What several commands share, declared once: their common arguments and options, the project they act on, and which models.

A command takes ``models: Models = None`` or ``json_out: Json = False``; the
flag, its help and its default live here, so ``--json`` means the same thing
everywhere. Which components a command acts on is `zmr.model.selection`'s one
rule (docs/reference.md §6.4).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.project import Project

_MODEL_HELP = "Model name (manifests/<model>.yaml)."


def _manifests(ctx: typer.Context) -> list[Path]:
    """For shell completion, cheaply: manifests/*.yaml of $ZMR_REPO or of the first folder up from here that has one,
    where "here" is where the command would run: the current folder, changed by each `-C DIR` on the command line
    (completion parses them but runs no command, so they are not yet changed to)."""
    import os

    here = Path.cwd()
    for directory in ctx.find_root().params.get("directories") or ():
        here = here / str(directory)
    start = (here / os.environ.get("ZMR_REPO", "")).resolve()
    for folder in (start, *start.parents):
        if (folder / "manifests").is_dir():
            return sorted((folder / "manifests").glob("*.yaml"))
    return []


def complete_models(ctx: typer.Context, incomplete: str) -> list[str]:
    """Model names for shell completion (`zmr build <TAB>`, `zmr -C repo build <TAB>`)."""
    return [path.stem for path in _manifests(ctx) if path.stem.startswith(incomplete)]


def complete_components(ctx: typer.Context, incomplete: str) -> list[str]:
    """Component names of every manifest for shell completion (`zmr checkout demo -c <TAB>`)."""
    import yaml

    names: set[str] = set()
    for path in _manifests(ctx):
        try:
            components = (yaml.safe_load(path.read_text()) or {}).get("components")
        except (OSError, ValueError, yaml.YAMLError, AttributeError):
            continue  # completion never fails: a broken manifest just offers nothing
        if isinstance(components, dict):
            names.update(str(name) for name in components)
    return sorted(name for name in names if name.startswith(incomplete))


Models = Annotated[
    list[str] | None, typer.Argument(metavar="MODEL", help="Model names (manifests/<model>.yaml).", show_default=False, autocompletion=complete_models)
]
Model = Annotated[str, typer.Argument(metavar="MODEL", help=_MODEL_HELP, show_default=False, autocompletion=complete_models)]
OptionalModel = Annotated[str | None, typer.Argument(metavar="MODEL", help=_MODEL_HELP, show_default=False, autocompletion=complete_models)]
All = Annotated[bool, typer.Option("--all", help="Every model.")]
Components = Annotated[
    list[str] | None,
    typer.Option("--component", "-c", metavar="NAME", help="Only these components (repeatable).", show_default=False, autocompletion=complete_components),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
Untrusted = Annotated[bool, typer.Option("--untrusted", help="Treat manifests as untrusted input (pull requests in CI).", envvar="ZMR_UNTRUSTED")]
Dir = Annotated[Path | None, typer.Option("--dir", metavar="DIR", help="The checkout folder (default work/<model>/<component>).", show_default=False)]


FOUND: list[Project] = []  # the projects this run acts on: `zmr.cli.main` prints their notices at the end


def find_project(untrusted: bool = False) -> Project:
    """The zmr repository the command acts on, opened (``zmr.ops.recovery.open_project``: found, also from inside a checkout;
    what a killed zmr left finished or undone, said as warnings; an older zmr's ``.zmr/`` migrated, said at the end)."""
    from zmr.cli.render import warn
    from zmr.infra import lock
    from zmr.model.manifest import Policy
    from zmr.ops.recovery import open_project

    lock.timeout()  # $ZMR_LOCK_TIMEOUT checked before any work: a bad value is exit 2 at once, not at the first lock
    opened = open_project(policy=Policy(untrusted=untrusted))
    FOUND.append(opened.project)
    opened.project.notices.extend(opened.report.migrated)
    for line in opened.report.lines():
        warn(line)
    return opened.project


def dir_for(base: Path | None, key: str, count: int) -> Path | None:
    if base is None:
        return None
    return base if count == 1 else base / key
