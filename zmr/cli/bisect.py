"""`zmr bisect`: the upstream commit that first breaks a check for the current series.

The work is `zmr.ops.bisect`; it returns a `BisectReport` (`to_json()` for
--json), rendered here as text.
"""

from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Json, Model, find_project
from zmr.cli.render import Progress, print_report
from zmr.infra.wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from zmr.ops.bisect import BisectReport


def bisect(
    model: Model,
    components: Components = None,
    good: Annotated[str, typer.Option("--good", metavar="REV", help="An upstream commit where the check passes (not tested).", show_default=False)] = "",
    bad: Annotated[str, typer.Option("--bad", metavar="REV", help="A later upstream commit where it fails (not tested).", show_default=False)] = "",
    test: Annotated[
        str | None,
        typer.Option("--test", metavar="CMD", help="Shell command run in a tree of the release (exit 0: good, 125: skip, else bad).", show_default=False),
    ] = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="The component's smoke tests are the check.")] = False,
    bitwise: Annotated[bool, typer.Option("--bitwise", help="The model's mismatch check (model smoke tests that need the component).")] = False,
    json_out: Json = False,
) -> None:
    """The first upstream commit between --good and --bad where the check fails for the current series."""
    import zmr.ops.bisect
    from zmr.cli.update import check_factory
    from zmr.infra.errors import ZmrError
    from zmr.model import selection

    project = find_project()
    if not good or not bad:
        raise ZmrError("zmr bisect needs --good REV and --bad REV", details=["for example --good v1.2 --bad main"])
    check_for = check_factory(project, test, smoke, bitwise)
    if check_for is None:
        raise ZmrError("zmr bisect needs a check: --test CMD, --smoke or --bitwise")
    component = selection.one_component(project, model, components, command="bisect")
    check = check_for(component)
    if check is None:
        raise ZmrError(f"{component.label}: no check to bisect with", details=["give --test CMD, or declare smoke tests for it"])
    with Progress() as progress:
        report = zmr.ops.bisect.bisect(project, component, good, bad, check, progress=progress)
    if json_out:
        print_report(report)
    else:
        print(report_text(report), end="")


def report_text(r: "BisectReport") -> str:
    label = r.component.label
    aside = f", {r.not_replayed} set aside (the series does not replay onto them)" if r.not_replayed else ""
    runs = f"{counted(r.tests, 'check')} run, {r.cached} reused{aside}, for {counted(r.candidates, 'commit')} between"
    out = []
    if r.found:
        out.append(f"{label}: first bad {r.first_bad.commit} {r.first_bad_subject}")
    else:
        out.append(
            f"{label}: first bad is one of {len(r.skipped) + 1} commits (skipped: {', '.join(c[:12] for c in r.skipped)}; then {r.first_bad.commit[:12]})"
        )
    out.append(f"{label}: last good {r.last_good[:12]}; {r.check.label}: {r.first_bad.reason} ({runs})")
    if r.first_bad.output:
        out.append(r.first_bad.output.rstrip("\n"))
    return "\n".join(out) + "\n"
