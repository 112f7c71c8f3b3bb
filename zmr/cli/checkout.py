"""Commands that change a series with ordinary git: checkout, export, rebase, upstreamed, import."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from zmr.cli import app
from zmr.cli.manifests import _project
from zmr.cli.render import Progress, print_json, warn

MODEL = typer.Argument(..., help="Model name (manifests/<model>.yaml).", show_default=False)
COMPONENTS = typer.Option(None, "--component", "-c", help="Only these components (repeatable).", show_default=False)
JSON = typer.Option(False, "--json", help="Machine-readable output on stdout.")
DIR = typer.Option(None, "--dir", help="The checkout folder (default work/<model>/<component>).", show_default=False)


def _dir_for(base: Optional[Path], key: str, count: int) -> Optional[Path]:
    if base is None:
        return None
    return base if count == 1 else base / key


@app.command("checkout")
def checkout(
    model: str = MODEL,
    components: Optional[List[str]] = COMPONENTS,
    directory: Optional[Path] = DIR,
    force: bool = typer.Option(False, "--force", help="Discard unexported work (kept under refs/zmr/backup/ first)."),
    json_out: bool = JSON,
) -> None:
    """A git working tree per component: the pin, plus one commit per patch on a local branch."""
    from zmr import workspace

    project = _project()
    targets = workspace.select_components(project, model, components)
    results = []
    with Progress() as progress:
        for comp in targets:
            results.append(workspace.checkout(project, comp, path=_dir_for(directory, comp.key, len(targets)), force=force, progress=progress))
    if json_out:
        print_json(
            {
                "checkouts": [
                    {"model": r.component.model, "component": r.component.key, "path": str(r.path), "branch": r.branch, "base": r.base, "tip": r.tip, "patches": r.patches, "action": r.action, "backups": r.backups}
                    for r in results
                ]
            }
        )
        return
    for r in results:
        print(f"{r.action:9} {r.path}  branch {r.branch}: {r.patches} patch{'es' if r.patches != 1 else ''} on {r.base[:12]}")
        for ref in r.backups:
            print(f"          saved the discarded work as {ref}")
    if results:
        print("change the series with git there (git log zmr/base.. shows it), then run `zmr export " + model + "`")


@app.command("export")
def export(
    model: str = MODEL,
    components: Optional[List[str]] = COMPONENTS,
    directory: Optional[Path] = DIR,
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; write nothing."),
    json_out: bool = JSON,
) -> None:
    """Write the checkout's commits back into the series (byte-stable)."""
    from zmr import workspace
    from zmr.errors import ZmrError

    project = _project()
    targets = workspace.select_components(project, model, components)
    if not components:
        targets = [c for c in targets if workspace.open_checkout(workspace.checkout_path(project, c, _dir_for(directory, c.key, len(targets))))]
        if not targets:
            raise ZmrError(f"model {model!r} has no checkout", details=[f"run `zmr checkout {model}` first"])
    results = [workspace.export(project, c, _dir_for(directory, c.key, len(targets)), dry_run=dry_run) for c in targets]
    if json_out:
        print_json(
            {
                "dry_run": dry_run,
                "exports": [
                    {
                        "model": r.component.model,
                        "component": r.component.key,
                        "series": r.component.patches,
                        "changed": r.plan.changed,
                        "patches": [{"name": p.name, "status": p.status, "written": p.data is not None, "old_name": p.old_name, "subject": p.subject} for p in r.plan.patches],
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
        if not r.plan.changed:
            print(f"unchanged {r.component.patches}: {len(r.plan.patches)} patches")
            continue
        print(f"{verb} {r.component.patches}: {len(r.plan.patches)} patches")
        for line in r.plan.summary():
            print(f"  {line}")


@app.command("rebase")
def rebase(
    model: str = MODEL,
    components: Optional[List[str]] = COMPONENTS,
    onto: Optional[str] = typer.Option(None, "--onto", help="Upstream commit id, tag or branch to move the series to.", show_default=False),
    cont: bool = typer.Option(False, "--continue", help="Go on after resolving a conflict."),
    abort: bool = typer.Option(False, "--abort", help="Restore pin, series and checkout as they were before the rebase."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write the report (markdown) to this file.", show_default=False),
    directory: Optional[Path] = DIR,
    json_out: bool = JSON,
) -> None:
    """Replay the series on a new upstream commit; drop patches already upstream; update the pin."""
    from zmr import rebase as rb
    from zmr.errors import ZmrError

    project = _project()
    chosen = sum(bool(x) for x in (onto, cont, abort))
    if chosen != 1:
        raise ZmrError("give exactly one of --onto REV, --continue, --abort")
    comp = rb.pick_component(project, model, components, in_progress=cont or abort)
    with Progress() as progress:
        if abort:
            rb.abort(project, comp)
            print(f"aborted the rebase of {comp.label}: pin, series and checkout are as before")
            return
        if cont:
            outcome = rb.resume(project, comp, progress=progress)
        else:
            outcome = rb.start(project, comp, onto or "", checkout_dir=directory, progress=progress)
    _finish_rebase(outcome, report, json_out)


def _finish_rebase(outcome, report: Optional[Path], json_out: bool) -> None:
    from zmr import rebase as rb
    from zmr.errors import CheckFailed
    from zmr.files import atomic_write

    if isinstance(outcome, rb.Stopped):
        if json_out:
            print_json(outcome.to_json())
        else:
            print(outcome.text(), end="")
        raise CheckFailed(outcome.headline(), details=outcome.next_steps())
    text = outcome.markdown()
    if report is not None:
        atomic_write(Path(report).absolute(), text.encode("utf-8"))
    if json_out:
        print_json(outcome.to_json())
    else:
        print(text, end="")


@app.command("upstreamed")
def upstreamed(
    model: Optional[str] = typer.Argument(None, help="Model name (manifests/<model>.yaml).", show_default=False),
    all_models: bool = typer.Option(False, "--all", help="Every component of every model that has a `track` ref."),
    components: Optional[List[str]] = COMPONENTS,
    rev: Optional[str] = typer.Option(None, "--rev", help="Upstream commit, tag or branch (default: the component's track).", show_default=False),
    json_out: bool = JSON,
) -> None:
    """Which patches of the series have landed upstream between the pin and REV (exit 0: a report)."""
    from zmr import rebase as rb
    from zmr import workspace
    from zmr.errors import ZmrError

    project = _project()
    if all_models == bool(model):
        raise ZmrError("name one model, or pass --all", details=["`zmr list` shows the models"])
    if all_models:
        # Scheduled CI: components that follow no upstream ref have nothing to compare with.
        targets = [c for c in project.targets(None, components, True) if rev is not None or c.track is not None]
    else:
        targets = workspace.select_components(project, model, components)
    with Progress() as progress:
        reports = [rb.upstreamed(project, comp, rev, progress=progress) for comp in targets]
    if json_out:
        print_json({"components": [r.to_json() for r in reports]})
        return
    for r in reports:
        print(r.text(), end="")


@app.command("import")
def import_(
    branches: List[str] = typer.Argument(..., help="Release branches to import (two-commit or snapshot layout).", show_default=False),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: from the branch trailers or name).", show_default=False),
    remote: Optional[str] = typer.Option(None, "--remote", help="Read the branches from this remote (name or URL) instead of local branches.", show_default=False),
    upstream: Optional[str] = typer.Option(None, "--upstream", help="Upstream URL, when the snapshot message does not name it.", show_default=False),
    commit: Optional[str] = typer.Option(None, "--commit", help="Upstream commit id, when the snapshot message does not name it.", show_default=False),
    json_out: bool = JSON,
) -> None:
    """Turn existing release branches into a manifest and series that rebuild them."""
    from zmr import importer

    project = _project()
    with Progress() as progress:
        result = importer.import_branches(project, branches, model=model, remote=remote, upstream=upstream, commit=commit, progress=progress)
    for text in result.warnings:
        warn(text)
    if json_out:
        print_json(result.to_json())
        return
    print(result.text(), end="")
