"""`zmr update`: move every pin as far as its series allows, and say what blocks the rest.

The work is `zmr.ops.update`; it returns one `Update` per component, rendered
here as a table, as JSON and as the markdown report of `--report FILE`
(the body of the scheduled job's pull request).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import Progress, print_report, table, warn

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from zmr.model.manifest import Component
    from zmr.model.project import Project
    from zmr.ops.checks import Check
    from zmr.ops.update import Update


def update(
    models: Models = None,
    all_models: All = False,
    components: Components = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--onto",
            "--to",
            metavar="REV",
            help="Upstream commit id, tag or branch to move towards (default: each component's track; --to is the old name).",
            show_default=False,
        ),
    ] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Move each pin as far as it can go and write the series, as zmr rebase does.")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Write the report (markdown, for a pull request) to this file.", show_default=False)
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when a component is left behind its track.")] = False,
    test: Annotated[
        str | None,
        typer.Option("--test", metavar="CMD", help="Also require this shell command to pass (exit 0; 125: skip) in a tree of the release.", show_default=False),
    ] = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="Also require the component's smoke tests to pass in a tree of the release.")] = False,
    bitwise: Annotated[
        bool, typer.Option("--bitwise", help="Also require the model's mismatch check (its model smoke tests that need the component) to pass.")
    ] = False,
    json_out: Json = False,
) -> None:
    """How far each pin can move towards its track (bisecting upstream history), and what blocks the rest."""
    import zmr.ops.update
    from zmr.infra.cache import Cache
    from zmr.infra.errors import CheckFailed, ZmrError
    from zmr.infra.files import atomic_write
    from zmr.model import selection

    project = find_project()
    # Every component (the scheduled job): --smoke leaves those without smoke tests unchecked (said in the report); a named model must have them.
    check_for = check_factory(project, test, smoke, bitwise, lenient=all_models or not models)
    # Without a model (or with --all): every component that follows an upstream ref (the scheduled CI job; selection.UPDATE_WRITES).
    chosen = selection.components(project, models, components, all_models, writes=selection.UPDATE_WRITES)
    targets = [c for c in chosen if to is not None or c.track is not None]
    if not targets:
        if not models and not components:  # the scheduled job of a repository that follows nothing
            if json_out:
                print_report(zmr.ops.update.UpdateReport([], applied=apply, checked=check, target=to))
            else:
                print("no component has a `track`: nothing to update")
            return
        raise ZmrError("no component to update: none of those selected has a `track`", details=["add `track: <branch>` to a component, or pass --onto REV"])
    with Progress() as progress:
        cache = Cache(progress=progress)
        results = zmr.ops.update.update(project, targets, to, apply_moves=apply, cache=cache, progress=progress, check_for=check_for)
    for note in cache.notes:  # a fetch retried after a transient network error, among others
        warn(note)
    for r in results:  # a move killed in the middle of its own git work: what this run finished or undid of it
        for line in r.outcome.recovered if r.outcome is not None else []:
            warn(f"{r.component.label}: {line}")
    if report is not None:
        atomic_write(Path(report).absolute(), report_markdown(results, apply).encode("utf-8"))
    outcome = zmr.ops.update.UpdateReport(results, applied=apply, checked=check, target=to)
    if json_out:
        print_report(outcome)
    else:
        print_text(results, apply)
    for r in outcome.refused:
        warn(f"{r.component.label}: not moved: {r.refused}")
    if outcome.failed():  # a partial --apply (a CI job must see that some pins did not move), or --check and behind
        raise CheckFailed(outcome.reason(), details=outcome.details())


def check_factory(project: Project, test: str | None, smoke: bool, bitwise: bool, lenient: bool = False) -> Callable[[Component], Check | None] | None:
    """The check each component gets from --test / --smoke / --bitwise (at most one), or None.

    *lenient*: a component without smoke tests gets no check under --smoke (instead of an error).
    """
    from zmr.infra.errors import ZmrError
    from zmr.ops import checks

    chosen = [name for name, on in (("--test", test is not None), ("--smoke", smoke), ("--bitwise", bitwise)) if on]
    if len(chosen) > 1:
        raise ZmrError(f"give one check, not {' and '.join(chosen)}", details=["--test CMD, --smoke or --bitwise"])
    if test is not None:
        made = checks.command_check(test)
        return lambda component: made
    if smoke:
        return (lambda component: checks.smoke_check(component) if component.smoke else None) if lenient else checks.smoke_check
    if bitwise:

        def for_component(component: Component) -> Check | None:
            manifest = next(m for m in project.manifests([component.model]))
            return checks.bitwise_check(project, component, manifest.smoke, manifest.components)

        return for_component
    return None


def check_lines(r: "Update", prefix: bool = True) -> list[str]:
    """What a check found, in plain lines (the text output and, without the component *prefix*, the report share them)."""
    c = r.check
    if c is None:
        return []
    label = r.component.label if prefix else ""
    runs = f"{c.tests} check{'s' if c.tests != 1 else ''} run, {c.cached} reused"
    if c.fails_at_pin:
        lines = [f"{c.check.label} fails at the pin {r.pin[:12]} already ({c.fails_at_pin.reason}); nothing moves ({runs})"]
    else:
        lines = [f"{c.check.label}: newest good {c.newest_good[:12]} ({runs})" if prefix else f"newest good `{c.newest_good}` ({runs})"]
    if c.first_bad:
        lines.append(f"first bad {c.first_bad.commit[:12]}: {c.first_bad.reason}" if prefix else f"first bad `{c.first_bad.commit}`: {c.first_bad.reason}")
    if c.skipped:
        lines.append(f"skipped between them: {', '.join(x[:12] for x in c.skipped)} (the first bad is one of those or the next)")
    return [f"{label}: {line}" if prefix else line for line in lines]


# -- rendering ------------------------------------------------------------------------------------


def _move(r: "Update") -> str:
    if r.status == "up-to-date":
        return r.pin[:12]
    if r.target == r.pin:
        return f"{r.pin[:12]} (stays)"
    return f"{r.pin[:12]} -> {r.target[:12]}"


def print_text(results: list["Update"], applied: bool) -> None:
    rows = []
    for r in results:
        done = "moved" if r.applied else ("not moved" if r.refused else "")
        rows.append([r.component.label, r.status, _move(r), f"{r.steps} of {r.behind}", r.replays, *([done] if applied else [])])
    table(["component", "status", "pin", "moves", "replays", *(["apply"] if applied else [])], rows)
    for r in results:
        for line in check_lines(r):
            print(line)
        if r.check and r.check.first_bad and r.check.first_bad.output:
            print(r.check.first_bad.output.rstrip("\n"))
        if r.blocked_by:
            b = r.blocked_by
            print(f"{r.component.label}: blocked at {b.commit[:12]} {b.subject}: {b.patch} conflicts in {', '.join(b.file_names)}")
            if b.landing:
                print(f"{r.component.label}: {b.patch} at {b.commit[:12]}: {b.landing.label}")
        for d in r.dropped:
            where = f"{d.upstream[:12]} {d.upstream_subject}" if d.upstream else "(commit not identified)"
            print(f"{r.component.label}: drops {d.name} ({d.subject}) <- {where} [{d.method}] {d.landed}")
        for name, landing in r.partial.items():
            print(f"{r.component.label}: keeps {name}: {landing.label}")
        for name, why in r.droppable.items():
            print(f"{r.component.label}: {name} is droppable: {why}")
        for name in r.reused:
            print(f"{r.component.label}: {name} replays by its recorded resolution")
        for u in r.unused:
            print(f"{r.component.label}: {u.patch}'s recorded resolution {u.file} is not replayed: {u.reason}")


def report_markdown(results: list["Update"], applied: bool) -> str:
    """The pull request body: per component the move, the patches dropped, what blocks, the range-diff of changed patches.

    Inert (§7.22): every text that comes from upstream or a check (subjects, the check's reason and output, names, the
    upstream's URL) is in a code span or a fenced block, so it cannot mention anyone, reference an issue, link or write HTML.
    """
    from zmr.cli.diffmarkdown import code, fenced
    from zmr.cli.rebase import dropped_line, unused_line

    moving = [r for r in results if r.can_move]
    out = ["# zmr update", ""]
    out += [f"{len(moving)} of {len(results)} component{'s' if len(results) != 1 else ''} can move" + (" (moved)" if applied and moving else "") + ".", ""]
    out += ["| component | status | from | to | tip | moves | replays |", "| --- | --- | --- | --- | --- | ---: | ---: |"]
    for r in results:
        moves = f"{r.steps} of {r.behind}"
        out.append(f"| {code(r.component.label)} | {r.status} | `{r.pin[:12]}` | `{r.target[:12]}` | `{r.tip[:12]}` ({code(r.rev)}) | {moves} | {r.replays} |")
    for r in results:
        c = r.component
        out += ["", f"## {code(c.label)}: {r.status}", ""]
        if r.status == "up-to-date":
            out.append(f"Pinned at `{r.pin}`, the tip of {code(r.rev)}.")
            continue
        out.append(f"- upstream: {code(c.upstream)}")
        if r.target != r.pin:
            out.append(f"- pin: `{r.pin}` -> `{r.target}` ({r.steps} of {r.behind} first-parent commits towards {code(r.rev)})")
        else:
            out.append(f"- pin: `{r.pin}` stays ({r.behind} first-parent commits behind {code(r.rev)})")
        if applied and r.can_move:
            out.append("- applied: the pin and the series are updated" if r.applied else f"- not applied: {code(r.refused or '')}")
        if r.blocked_by:
            b = r.blocked_by
            files = ", ".join(code(f) + (f" (renamed from {code(b.renamed[f])} upstream)" if f in b.renamed else "") for f in b.files)
            out.append(f"- blocked by upstream commit `{b.commit}` ({code(b.subject)}): patch {code(b.patch)} ({code(b.patch_subject)}) conflicts in {files}")
            if b.landing:
                out.append(f"- there, {code(b.patch)} is {code(b.landing.label)}")
        if r.check:
            out += ["", f"### Check: {code(r.check.check.label)}", ""]
            out += [f"- {code(line)}" for line in check_lines(r, prefix=False)]
            bad = r.check.first_bad or r.check.fails_at_pin
            if bad and bad.output:
                out += ["", f"Output at `{bad.commit}`:", "", fenced(bad.output).rstrip("\n")]
        out += ["", f"### Dropped: already upstream ({len(r.dropped)})", ""]
        out += [dropped_line(d) for d in r.dropped] or ["none"]
        if r.statuses:
            out += ["", "### Upstream status", "", "| patch | status | checked |", "| --- | --- | --- |"]
            out += [f"| `{name}` | {st.label} | {r.droppable.get(name, '')} |" for name, st in r.statuses.items()]  # the series' own headers
        if r.reused:
            out += ["", f"### Recorded resolutions reused ({len(r.reused)})", ""] + [f"- {code(name)}" for name in r.reused]
        if r.unused:
            out += ["", f"### Recorded resolutions not replayed ({len(r.unused)})", ""] + [unused_line(u) for u in r.unused]
        if r.partial:
            out += ["", f"### Partially landed: kept ({len(r.partial)})", ""]
            out += [f"- {code(name)}: {code(landing.label)}" for name, landing in r.partial.items()]
        if r.changed:
            out += ["", f"### Changed ({len(r.changed)})", ""]
            for ch in r.changed:
                kind = f" ({ch.kind}, paired by {ch.paired_by})" if ch.kind else ""
                out += [f"- {code(ch.name)} {code(ch.subject)}{kind}", "", fenced(ch.range_diff or "(no range-diff)", "diff"), ""]
    return "\n".join(out).replace("\n\n\n", "\n\n").rstrip("\n") + "\n"
