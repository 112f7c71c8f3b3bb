"""`zmr export`: write the commits of a checkout back into the series, byte-stable.

The work is `zmr.ops.export`.
"""

from typing import Annotated

import typer

from zmr.cli.options import Components, Dir, Json, Model, dir_for, find_project
from zmr.cli.render import print_report
from zmr.infra.wording import counted


def export(
    model: Model,
    components: Components = None,
    directory: Dir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would change; write nothing.")] = False,
    json_out: Json = False,
) -> None:
    """Write the checkout's commits back into the series (byte-stable)."""
    import zmr.ops.checkout
    import zmr.ops.export
    from zmr.infra.errors import ZmrError
    from zmr.model import selection

    project = find_project()
    targets = selection.components(project, [model], components, writes=True)
    if not components:
        targets = [c for c in targets if zmr.ops.checkout.open_checkout(zmr.ops.checkout.checkout_path(project, c, dir_for(directory, c.key, len(targets))))]
        if not targets:
            raise ZmrError(f"model {model!r} has no checkout", details=[f"run `zmr checkout {model}` first"])
    results = [zmr.ops.export.export(project, c, dir_for(directory, c.key, len(targets)), dry_run=dry_run) for c in targets]
    if json_out:
        print_report(zmr.ops.export.ExportReport(results, dry_run))
        return
    for r in results:
        verb = "would change" if dry_run else "exported"
        source = f"from {zmr.ops.checkout.show_path(project, r.path)}"  # which checkout was read: the selection rule's answer
        if not r.plan.changed:
            print(f"unchanged {r.component.patches}: {counted(len(r.plan.patches), 'patch')}, {source}")
            continue
        print(f"{verb} {r.component.patches}: {counted(len(r.plan.patches), 'patch')}, {source}")
        for line in r.plan.summary():
            print(f"  {line}")
