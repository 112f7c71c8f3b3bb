"""`zmr rebase`, `zmr upstreamed`: move a series to a new upstream commit; find the patches upstream has taken.

The work is `zmr.ops.rebase` (the move) and `zmr.ops.upstream` (`upstreamed`); they
return data (`Outcome`, `Stopped`, `Aborted`, `UpstreamedReport`, each with
`to_json()` for --json), rendered here as text and as the markdown report
(written where `Outcome.report` says).
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Dir, Json, OptionalModel, find_project
from zmr.cli.render import Progress, print_report, warn

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.resolutions import NotReplayed
    from zmr.ops.landed import Dropped
    from zmr.ops.rebase import Outcome, Stopped


def rebase(
    model: OptionalModel = None,
    components: Components = None,
    onto: Annotated[
        str | None,
        typer.Option(
            "--onto", metavar="REV", help="Upstream commit: a branch, tag, (abbreviated) id, main~5 (default: the component's track).", show_default=False
        ),
    ] = None,
    cont: Annotated[bool, typer.Option("--continue", help="Go on after resolving a conflict.")] = False,
    skip: Annotated[bool, typer.Option("--skip", help="Drop the patch the rebase stopped on from the series, and go on.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Restore pin, series and checkout as they were before the rebase.")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Also write the report (markdown) here (also after --continue).", show_default=False)
    ] = None,
    directory: Dir = None,
    json_out: Json = False,
) -> None:
    """Replay the series on a new upstream commit; drop patches already upstream; update the pin.

    MODEL may be left out with --continue, --skip and --abort while one rebase is in progress.
    """
    import zmr.ops.rebase
    from zmr.infra.errors import ZmrError
    from zmr.model import selection

    project = find_project()
    chosen = sum(bool(x) for x in (onto, cont, skip, abort))
    if chosen > 1:
        raise ZmrError("give one of --onto REV, --continue, --skip, --abort")
    comp = selection.one_component(project, model, components, in_progress=cont or skip or abort)
    with Progress() as progress:
        if abort:
            aborted = zmr.ops.rebase.abort(project, comp)
            if json_out:
                print_report(aborted)
            else:
                print(f"aborted the rebase of {comp.label}: pin, series and checkout are as before")
            return
        if cont:
            outcome = zmr.ops.rebase.resume(project, comp, progress=progress, report=report)
        elif skip:
            outcome = zmr.ops.rebase.skip(project, comp, progress=progress, report=report)
        else:
            outcome = zmr.ops.rebase.start(project, comp, onto, checkout_dir=directory, progress=progress, report=report, warn=warn)
    _finish_rebase(outcome, json_out)


def _finish_rebase(outcome: "Outcome | Stopped", json_out: bool) -> None:
    import zmr.ops.rebase
    from zmr.infra.errors import CheckFailed
    from zmr.infra.files import atomic_write

    for line in outcome.recovered:  # a zmr killed in the middle of its own git work: what this run finished or undid of it
        warn(f"{outcome.component.label}: {line}")
    if isinstance(outcome, zmr.ops.rebase.Stopped):
        if json_out:
            print_report(outcome)
        else:
            print(stopped_text(outcome), end="")
        raise CheckFailed(outcome.reason(), details=stopped_next_steps(outcome))
    text = outcome_markdown(outcome)
    if outcome.report is not None:
        atomic_write(Path(outcome.report), text.encode("utf-8"))
    if json_out:
        print_report(outcome)
    else:
        print(text, end="")


# -- rendering: the library's reports as text (stdout) and markdown (stdout, --report FILE) --

_REPLAYED = {
    "pin-only": "not needed (every hunk applies where it was: only the pin moved)",
    "fast": "in memory (every patch applied)",
    "checkout": "in the checkout (conflicts resolved)",
}


def dropped_line(d: "Dropped") -> str:
    """A markdown list item: the dropped patch, the upstream commit that has it, and how that was found."""
    from zmr.cli.diffmarkdown import code  # subjects are anybody's text: inert in a pull request's body (§7.22)

    if d.method == "skipped":
        return f"- {code(d.name)} {code(d.subject)}: dropped with --skip"
    where = f"upstream commit `{d.upstream}` ({code(d.upstream_subject or '')})" if d.upstream else "upstream commit not identified"
    return f"- {code(d.name)} {code(d.subject)}: {where}; {d.how}; {d.landed}"


def outcome_markdown(o: "Outcome") -> str:
    """The report of a finished rebase."""
    c = o.component
    if o.already:
        named = "" if o.new.startswith(o.rev) else f" ({o.rev})"
        return f"# zmr rebase {c.label}\n\nAlready pinned at `{o.new}`{named}; nothing to do.\n"
    out = [
        f"# zmr rebase {c.label}",
        "",
        f"- upstream: {c.upstream}",
        f"- old pin: `{o.old}`",
        f"- new pin: `{o.new}`" + ("" if o.new.startswith(o.rev) else f" ({o.rev})"),
        f"- upstream commits in between: {o.upstream_count}",
        f"- series: {c.patches}: {len(o.kept)} kept, {len(o.changed)} changed, {len(o.dropped)} dropped" + (f", {len(o.added)} added" if o.added else ""),
        f"- replayed: {_REPLAYED[o.path]}",
        "",
        f"## Kept ({len(o.kept)})",
        "",
    ]
    out += [f"- `{name}` {subject}" + (f" ({note})" if note else "") for name, subject, note in o.kept] or ["none"]
    out += ["", f"## Changed ({len(o.changed)})", ""]
    if not o.changed:
        out.append("none")
    for ch in o.changed:
        kind = f" ({ch.kind}, paired by {ch.paired_by})" if ch.kind else ""
        out += [f"- `{ch.name}` {ch.subject}{kind}", "", "```diff", ch.range_diff.rstrip("\n") or "(no range-diff)", "```", ""]
    if o.added:
        out += ["", f"## Added ({len(o.added)})", ""] + [f"- `{n}` {s}" for n, s in o.added]
    # Only what upstream holds is "already upstream": a conflict resolved to nothing is the engineer's decision.
    upstream = [d for d in o.dropped if d.method not in ("skipped", "resolved-empty")]
    resolved = [d for d in o.dropped if d.method == "resolved-empty"]
    skipped = [d for d in o.dropped if d.method == "skipped"]
    out += ["", f"## Dropped: already upstream ({len(upstream)})", ""]
    out += [dropped_line(d) for d in upstream] or ["none"]
    if resolved:
        out += ["", f"## Dropped: conflict resolved to no change ({len(resolved)})", ""]
        out += [f"- `{d.name}` {d.subject}: the resolution left nothing to commit" for d in resolved]
    if skipped:
        out += ["", f"## Dropped with --skip ({len(skipped)})", ""] + [f"- `{d.name}` {d.subject}" for d in skipped]
    if o.reused:
        out += ["", f"## Recorded resolutions reused ({len(o.reused)})", ""] + [f"- `{name}`" for name in o.reused]
    if o.unused:
        out += ["", f"## Recorded resolutions not replayed ({len(o.unused)})", ""] + [unused_line(u) for u in o.unused]
    if o.recorded:
        out += ["", f"## Resolutions recorded ({len(o.recorded)}): commit them", ""] + [f"- `{path}`" for path in o.recorded]
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"


def unused_line(u: "NotReplayed") -> str:
    """A markdown list item: a recorded resolution that was not replayed where its patch conflicted, and why."""
    return f"- `{u.patch}` (`{u.file}`): {u.reason}"


def stopped_next_steps(s: "Stopped") -> list[str]:
    c = s.component
    return [
        f"conflicting files: {', '.join(s.file_names)}",
        f"in {s.checkout}: edit those files to resolve the conflict markers, `git add` them",
        f"then run `zmr rebase {c.model} -c {c.key} --continue` ({s.remaining} patch{'es' if s.remaining != 1 else ''} after this one)",
        f"or drop this patch from the series: `zmr rebase {c.model} -c {c.key} --skip`",
        f"or give up: `zmr rebase {c.model} -c {c.key} --abort` restores pin, series and checkout",
    ]


def stopped_text(s: "Stopped") -> str:
    """What happened before the stop (the conflict itself goes to stderr): the commit rebased onto, the patches dropped."""
    named = "" if not s.rev or s.new.startswith(s.rev) else f" ({s.rev})"
    text = f"rebasing {s.component.label} onto {s.new}{named}\n"
    if s.dropped:
        text += "dropped so far:\n" + "".join(f"  {dropped_line(d)[2:]}\n" for d in s.dropped)
    if s.reused:
        text += "replayed by their recorded resolution:\n" + "".join(f"  {name}\n" for name in s.reused)
    if s.unused:
        text += "recorded resolutions not replayed:\n" + "".join(f"  {unused_line(u)[2:]}\n" for u in s.unused)
    return text
