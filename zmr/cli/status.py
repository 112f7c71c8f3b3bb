"""`zmr status`: per component, its pin, checkout, work not exported, rebase, release branch and lock.

The work is `zmr.status`.
"""

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import print_json, table


def status(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Where each component stands: pin, checkout, commits not exported, rebase, release branch current or stale, lock, upstream status."""
    from zmr import selection
    import zmr.status

    project = find_project()
    report = zmr.status.status(project, selection.components(project, models, components, all_models, writes=False))
    if json_out:
        print_json(report.to_json())
        return
    rows = []
    for c in report.components:
        rows.append(
            [
                f"{c.model}/{c.component}",
                c.pin[:12],
                c.release,
                (c.checkout or "-") + (" (not exported)" if c.not_exported else ""),
                "rebase in progress" if c.rebase_in_progress else "-",
                f"pid {c.lock_holder.get('pid')}: {c.lock_holder.get('command', '')}" if c.lock_holder is not None else "-",
                ", ".join(f"{n} {kind}" for kind, n in c.upstream_status.items()) or "-",
            ]
        )
    table(["component", "pin", "release branch", "checkout", "rebase", "lock", "upstream status"], rows)
    for c in report.components:
        for line in c.not_exported:
            print(f"{c.model}/{c.component}: {line}")
