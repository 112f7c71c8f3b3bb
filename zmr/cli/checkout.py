"""`zmr checkout`, `zmr export`: a git working tree per component, and its commits written back as the series.

The work is `zmr.ops.checkout`.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Components, Dir, Json, Model, dir_for, find_project
from zmr.cli.render import Progress, print_report
from zmr.infra.wording import counted

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Component
    from zmr.model.project import Project


def checkout(
    model: Model,
    components: Components = None,
    directory: Dir = None,
    force: Annotated[bool, typer.Option("--force", help="Discard unexported work (kept under refs/zmr/backup/ first).")] = False,
    history: Annotated[bool, typer.Option("--history", help="Also copy upstream's history and branches (git log, blame, cherry-pick).")] = False,
    merge: Annotated[bool, typer.Option("--merge", help="Replay the commits made since the last export on the repository's series.")] = False,
    go_on: Annotated[bool, typer.Option("--continue", help="Go on with a --merge stopped on a conflict.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Undo a --merge: the checkout back as it was.")] = False,
    json_out: Json = False,
) -> None:
    """A git working tree per component: the pin, plus one commit per patch on a local branch.

    The checkout is shallow, with an `upstream` remote: `--history` (or `git fetch --unshallow upstream` there) adds the rest.
    """
    import zmr.ops.checkout
    from zmr.infra.cache import Cache
    from zmr.model import selection

    project = find_project()
    targets = selection.components(project, [model], components, writes=True)
    if merge or go_on or abort:
        _merge(project, targets, directory, merge, go_on, abort, json_out)
        return
    results = []
    with Progress(steps=[c.label for c in targets]) as progress:
        cache = Cache(progress=progress)
        for comp in targets:
            path = dir_for(directory, comp.key, len(targets))
            results.append(zmr.ops.checkout.checkout(project, comp, cache=cache, path=path, force=force, progress=progress, history=history))
    if json_out:
        print_report(zmr.ops.checkout.CheckoutReport(results))
        return
    import shlex

    for r in results:
        print(f"{r.action:9} {r.path}  branch {r.branch}: {r.patches} patch{'es' if r.patches != 1 else ''} on {r.base[:12]}")
        for ref in r.backups:
            print(f"          saved the discarded work as {ref}, in the checkout's repository: `git -C {shlex.quote(str(r.path))} log {ref}`")
        if r.history:
            print("          with upstream's history (branches as upstream/<branch>)")
    if results:
        print("change the series with git there (git log zmr/base.. shows it), then run `zmr export " + model + "`")


def _merge(project: "Project", targets: "list[Component]", directory: Path | None, merge: bool, go_on: bool, abort: bool, json_out: bool) -> None:
    """`zmr checkout --merge | --continue | --abort` for one component."""
    import zmr.ops.checkout
    from zmr.infra.cache import Cache
    from zmr.infra.errors import CheckFailed, ZmrError

    if merge + go_on + abort > 1:
        raise ZmrError("give one of --merge, --continue, --abort")
    if len(targets) != 1:
        raise ZmrError("merge one component at a time; name it with -c", details=[f"components: {', '.join(c.key for c in targets)}"])
    comp = targets[0]
    if merge:
        with Progress(steps=[comp.label]) as progress:
            result = zmr.ops.checkout.merge(project, comp, cache=Cache(progress=progress), path=directory, progress=progress)
    elif go_on:
        result = zmr.ops.checkout.merge_continue(project, comp, directory)
    else:
        result = zmr.ops.checkout.merge_abort(project, comp, directory)
    if json_out:
        print_report(result)
    elif result.action == "merged":
        print(f"merged    {result.path}: {counted(result.replayed, 'commit')} replayed on the repository's series")
        print(f"now run `zmr export {comp.model} -c {comp.key}`")
    elif result.action == "aborted":
        print(f"aborted   {result.path}: the checkout is back as it was before --merge")
    if result.action == "stopped":
        m, k = comp.model, comp.key
        raise CheckFailed(
            f"{comp.label}: your commit {result.commit[:12]} ({result.subject}) conflicts with the repository's series",
            details=[
                f"conflicting files: {', '.join(result.files)}",
                f"in {result.path}: edit those files to resolve the conflict markers, `git add` them",
                f"then run `zmr checkout {m} -c {k} --continue` ({counted(result.left, 'commit')} after this one)",
                f"or give up: `zmr checkout {m} -c {k} --abort` puts the checkout back as it was",
            ],
        )
