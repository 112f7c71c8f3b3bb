"""`zmr status`: per component, its pin, checkout, work not exported, rebase, release branch and lock.

The work is `zmr.ops.status`.
"""

from typing import TYPE_CHECKING

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import print_report, table

if TYPE_CHECKING:  # pragma: no cover
    from zmr.ops.status import ComponentStatus


def status(models: Models = None, all_models: All = False, components: Components = None, json_out: Json = False) -> None:
    """Where each component stands: pin, checkout, commits not exported, rebase, release branch current or stale, lock, upstream status."""
    import zmr.ops.status
    from zmr.model import selection

    project = find_project()
    report = zmr.ops.status.status(project, selection.components(project, models, components, all_models, writes=False))
    if json_out:
        print_report(report)
        return
    rows = []
    for c in report.components:
        rows.append(
            [
                f"{c.model}/{c.component}",
                c.pin[:12],
                c.release,
                (c.checkout or "-") + _CHECKOUT_NOTE.get(c.checkout_state, ""),
                _rebase_cell(c),
                f"pid {c.lock_holder.get('pid')}: {c.lock_holder.get('command', '')}" if c.lock_holder is not None else "-",
                ", ".join(f"{n} {kind}" for kind, n in c.upstream_status.items()) or "-",
            ]
        )
    table(["component", "pin", "release branch", "checkout", "rebase", "lock", "upstream status"], rows)
    for c in report.components:
        for line in _notes(c):
            print(f"{c.model}/{c.component}: {line}")


_CHECKOUT_NOTE = {"work": " (not exported)", "behind": " (behind the series)", "diverged": " (behind the series, and not exported)"}


def _rebase_cell(c: "ComponentStatus") -> str:
    r = c.rebase
    if r is None:
        return "-"
    if r.interrupted:
        return f"onto {r.onto[:12]}, interrupted"
    return f"onto {r.onto[:12]}" + (f", stopped at {r.stopped_at}" if r.stopped_at else "")


def _notes(c: "ComponentStatus") -> list[str]:
    """What the table's cells stand for, each with the command that goes on from there."""
    m, k = c.model, c.component
    lines = []
    for path in c.unmerged:
        lines.append(
            f"{path}: in conflict (a git merge, pull or rebase of the project stopped on it): keep one side"
            f" (`git checkout --theirs -- {path}` or `--ours`) or edit it, then `git add {path}` and finish the merge (`git commit`)"
        )
    r = c.rebase
    if r is not None and r.interrupted:
        lines.append(
            f"a pin move onto {r.onto[:12]} (zmr update --apply or zmr rebase) was cut short; `zmr update {m} -c {k} --apply` finishes it,"
            f" `zmr rebase {m} -c {k} --abort` undoes it"
        )
    elif r is not None and not r.onto:
        lines.append(f"a rebase is under way and its state does not read: `zmr rebase {m} -c {k} --continue` says why (or `--abort`)")
    elif r is not None:
        where = f" in {c.checkout}" if c.checkout else ""
        stop = f" stopped at {r.stopped_at} (conflict in {', '.join(r.files) or '?'}): resolve it{where}, `git add` the files, then" if r.stopped_at else ":"
        lines.append(f"rebase from {r.old[:12]} onto {r.onto[:12]}{stop} `zmr rebase {m} -c {k} --continue` (or `--abort`)")
    changed = ", ".join(c.series_changed)
    if c.checkout_state == "behind":
        lines.append(
            f"your checkout is behind the series: the repository's series changed since it was made or exported ({changed}; a pull?),"
            f" the checkout has no work of its own: refresh it with `zmr checkout {m} -c {k}`"
        )
    elif c.checkout_state == "diverged":
        lines.append(
            f"your checkout is behind the series: the repository's series changed since it was made or exported ({changed}; a pull?),"
            f" and the checkout has commits of its own: combine them with `zmr checkout {m} -c {k} --merge`, then `zmr export {m} -c {k}`"
        )
    elif c.not_exported:
        lines += c.not_exported
    return lines
