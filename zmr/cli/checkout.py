"""`zmr checkout`, `zmr export`: a git working tree per component, and its commits written back as the series.

The work is `zmr.checkout`.
"""

from pathlib import Path
from typing import Annotated

import typer

from zmr.cli.options import Components, Dir, Json, Model, find_project
from zmr.cli.render import Progress, print_json


def _dir_for(base: Path | None, key: str, count: int) -> Path | None:
    if base is None:
        return None
    return base if count == 1 else base / key


def checkout(
    model: Model,
    components: Components = None,
    directory: Dir = None,
    force: Annotated[bool, typer.Option("--force", help="Discard unexported work (kept under refs/zmr/backup/ first).")] = False,
    history: Annotated[bool, typer.Option("--history", help="Also copy upstream's history and branches (git log, blame, cherry-pick).")] = False,
    json_out: Json = False,
) -> None:
    """A git working tree per component: the pin, plus one commit per patch on a local branch.

    The checkout is shallow, with an `upstream` remote: `--history` (or `git fetch --unshallow upstream` there) adds the rest.
    """
    from zmr import checkout as checkouts
    from zmr.cache import Cache

    project = find_project()
    targets = checkouts.select_components(project, model, components)
    results = []
    with Progress(steps=[c.label for c in targets]) as progress:
        cache = Cache(progress=progress)
        for comp in targets:
            path = _dir_for(directory, comp.key, len(targets))
            results.append(checkouts.checkout(project, comp, cache=cache, path=path, force=force, progress=progress, history=history))
    if json_out:
        print_json(
            {
                "checkouts": [
                    {
                        "model": r.component.model,
                        "component": r.component.key,
                        "path": str(r.path),
                        "branch": r.branch,
                        "base": r.base,
                        "tip": r.tip,
                        "patches": r.patches,
                        "action": r.action,
                        "backups": r.backups,
                        "history": r.history,
                    }
                    for r in results
                ]
            }
        )
        return
    for r in results:
        print(f"{r.action:9} {r.path}  branch {r.branch}: {r.patches} patch{'es' if r.patches != 1 else ''} on {r.base[:12]}")
        for ref in r.backups:
            print(f"          saved the discarded work as {ref}")
        if r.history:
            print("          with upstream's history (branches as upstream/<branch>)")
    if results:
        print("change the series with git there (git log zmr/base.. shows it), then run `zmr export " + model + "`")


def export(
    model: Model,
    components: Components = None,
    directory: Dir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would change; write nothing.")] = False,
    json_out: Json = False,
) -> None:
    """Write the checkout's commits back into the series (byte-stable)."""
    from zmr import checkout as checkouts
    from zmr.errors import ZmrError

    project = find_project()
    targets = checkouts.select_components(project, model, components)
    if not components:
        targets = [c for c in targets if checkouts.open_checkout(checkouts.checkout_path(project, c, _dir_for(directory, c.key, len(targets))))]
        if not targets:
            raise ZmrError(f"model {model!r} has no checkout", details=[f"run `zmr checkout {model}` first"])
    results = [checkouts.export(project, c, _dir_for(directory, c.key, len(targets)), dry_run=dry_run) for c in targets]
    if json_out:
        print_json(
            {
                "dry_run": dry_run,
                "exports": [
                    {
                        "model": r.component.model,
                        "component": r.component.key,
                        "series": r.component.patches,
                        "checkout": str(r.path),
                        "changed": r.plan.changed,
                        "patches": [
                            {"name": p.name, "status": p.status, "written": p.data is not None, "old_name": p.old_name, "subject": p.subject}
                            for p in r.plan.patches
                        ],
                        "removed": r.plan.removed,
                        "series_rewritten": r.plan.series_text is not None,
                    }
                    for r in results
                ],
            }
        )
        return
    for r in results:
        verb = "would change" if dry_run else "exported"
        source = f"from {checkouts.show_path(project, r.path)}"  # which checkout was read: the selection rule's answer
        if not r.plan.changed:
            print(f"unchanged {r.component.patches}: {len(r.plan.patches)} patches, {source}")
            continue
        print(f"{verb} {r.component.patches}: {len(r.plan.patches)} patches, {source}")
        for line in r.plan.summary():
            print(f"  {line}")
