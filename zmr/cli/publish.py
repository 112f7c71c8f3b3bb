"""`zmr publish` (push the release branches, verified, in one atomic push) and `zmr ci-matrix` (the CI job matrix).

The work is `zmr.ops.publish`.
"""

from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import All, Json, Models, find_project
from zmr.cli.render import Progress, print_report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.ops.publish import BranchPush


def publish(
    models: Models = None,
    all_models: All = False,
    remote: Annotated[str, typer.Option("--remote", help="Remote (name or URL) to push the release branches to.")] = "origin",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Verify and check the remote, print the plan, push nothing.")] = False,
    replace_foreign: Annotated[
        bool, typer.Option("--replace-foreign", help="Replace remote branches zmr did not build; old tips stay as refs/zmr/replaced/<branch>/<old-id>.")
    ] = False,
    json_out: Json = False,
) -> None:
    """Verify, then push the release branches of MODEL... (or --all) in one atomic push with lease."""
    import zmr.ops.publish
    from zmr.infra.cache import Cache
    from zmr.model import selection

    project = find_project()
    chosen = selection.components(project, models, None, all_models, writes=True)
    with Progress(steps=[c.label for c in chosen]) as progress:
        result = zmr.ops.publish.publish(
            project, chosen, remote, dry_run=dry_run, replace_foreign=replace_foreign, cache=Cache(progress=progress), progress=progress
        )
    if json_out:
        print_report(result)
        if result.refusal:
            raise result.refusal
        return
    width = max((len(b.branch) for b in result.branches), default=0)
    verbs = {zmr.ops.publish.CREATED: "would create", zmr.ops.publish.UPDATED: "would update", zmr.ops.publish.REPLACED: "would replace"} if dry_run else {}
    for b in result.branches:
        status = "refused" if b.refused else verbs.get(b.status, b.status)
        if b.status == zmr.ops.publish.UP_TO_DATE:
            change = b.new[:12]
        elif b.status == zmr.ops.publish.CREATED:
            change = f"(none) -> {b.new[:12]}"
        else:
            change = f"{b.old[:12]} -> {b.new[:12]}"  # type: ignore[index]
        print(f"{status:12} {b.branch.ljust(width)}  {change}")
        if b.refused:
            print(f"{'':12} {''.ljust(width)}  {b.refused}")
        elif b.status == zmr.ops.publish.REPLACED:
            print(f"{'':12} {''.ljust(width)}  not built by zmr ({b.foreign}); {_kept(b, replace_foreign, result.refusal is not None)}")
    moved, same = len(result.moving), len(result.branches) - len(result.moving)
    if dry_run:
        if result.refusal:
            # One atomic push: while a branch refuses, no branch would move.
            blocked = sum(1 for b in result.branches if b.refused)
            refused = f"{blocked} branch{'es' if blocked != 1 else ''} refused"
            print(f"dry run: nothing pushed to {remote}; publish would refuse ({refused}), so no branch would move")
            raise result.refusal
        print(f"dry run: nothing pushed to {remote} ({moved} to push, {same} up to date)")
    elif result.pushed:
        print(f"pushed {moved} branch{'es' if moved != 1 else ''} to {remote} in one atomic push; {same} up to date")
    else:
        print(f"{remote} is up to date")


def _kept(b: "BranchPush", replace_foreign: bool, refused: bool) -> str:
    """Where a replaced branch's old tip is kept on the remote (a refused publish never got as far as asking)."""
    if b.keep:
        return f"old tip kept as {b.keep}"
    if not replace_foreign:
        return "needs --replace-foreign"
    return "old tip to be kept under refs/zmr/replaced/" if refused else "old tip kept already"
