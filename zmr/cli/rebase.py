"""`zmr rebase`, `zmr upstreamed`: move a series to a new upstream commit; find the patches upstream has taken.

The work is `zmr.rebase`.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Dir, Json, Model, OptionalModel, find_project
from zmr.cli.render import Progress, print_json

if TYPE_CHECKING:  # pragma: no cover
    from zmr.rebase import Outcome, Stopped


def rebase(
    model: Model,
    components: Components = None,
    onto: Annotated[str | None, typer.Option("--onto", help="Upstream commit id, tag or branch to move the series to.", show_default=False)] = None,
    cont: Annotated[bool, typer.Option("--continue", help="Go on after resolving a conflict.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Restore pin, series and checkout as they were before the rebase.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Also write the report (markdown) to this file.", show_default=False)] = None,
    directory: Dir = None,
    json_out: Json = False,
) -> None:
    """Replay the series on a new upstream commit; drop patches already upstream; update the pin."""
    from zmr import rebase as rb
    from zmr.errors import ZmrError

    project = find_project()
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


def _finish_rebase(outcome: "Outcome | Stopped", report: Path | None, json_out: bool) -> None:
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


def upstreamed(
    model: OptionalModel = None,
    all_models: Annotated[bool, typer.Option("--all", help="Every component of every model that has a `track` ref.")] = False,
    components: Components = None,
    rev: Annotated[str | None, typer.Option("--rev", help="Upstream commit, tag or branch (default: the component's track).", show_default=False)] = None,
    json_out: Json = False,
) -> None:
    """Which patches of the series have landed upstream between the pin and REV (exit 0: a report)."""
    from zmr import rebase as rb
    from zmr import workspace
    from zmr.errors import ZmrError

    project = find_project()
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

