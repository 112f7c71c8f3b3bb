"""`zmr list`: models, components, pins, patch counts and upstream statuses.

The work is `zmr.model.project.list_models`.
"""

from zmr.cli.options import Json, find_project
from zmr.cli.render import print_report, table


def list_models(json_out: Json = False) -> None:
    """Models, components, pins and patch counts."""
    import zmr.model.project

    listing = zmr.model.project.list_models(find_project())
    if json_out:
        print_report(listing)
        return
    rows = [
        [m.manifest.model, c.key, c.commit[:12], m.patch_counts[c.key], c.branch, c.upstream, _statuses(m.statuses[c.key])]
        for m in listing.models
        for c in m.manifest.components.values()
    ]
    table(["model", "component", "pin", "patches", "branch", "upstream", "upstream status"], rows)


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "-"
