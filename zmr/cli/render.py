"""Rendering helpers shared by the commands: tables, JSON, progress.

On a terminal, rich tables and a live status line; elsewhere (CI, pipes)
plain aligned text and no progress, so logs stay readable.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.reports import Report

# -1 with `zmr -q` (no progress), 1 with `zmr -v` (progress also outside a terminal), else 0.
_verbosity = 0


def set_verbosity(level: int) -> None:
    global _verbosity
    _verbosity = level


# False with `zmr --no-pager`: output is never paged.
_paging = True


def set_paging(on: bool) -> None:
    global _paging
    _paging = on


def paging() -> bool:
    return _paging


def usage_error(message: str, ctx: Any) -> list[str]:
    """The lines of a usage error (click's, for a command line it cannot parse) as zmr's other errors read: `zmr: error:`
    and the message, then the usage of the command (*ctx*: its click context, when known) and where its help is."""
    lines = message.splitlines() or [""]
    if ctx is not None:
        lines += [ctx.get_usage(), f"Try '{ctx.command_path} -h' for help."]
    return ["zmr: error: " + lines[0], *("  " + line for line in lines[1:])]


def quiet() -> bool:
    return _verbosity < 0


def verbose() -> bool:
    return _verbosity > 0


def interactive() -> bool:
    return sys.stdout.isatty() and not os.environ.get("CI")


def no_color() -> bool:
    """`NO_COLOR` set and not empty (no-color.org): no ANSI escape at all, neither colour nor bold nor a redrawn status line."""
    return bool(os.environ.get("NO_COLOR"))


def live_stderr() -> bool:
    """Whether long work may redraw a status line on stderr (a terminal, not CI, no `NO_COLOR`)."""
    return sys.stderr.isatty() and not os.environ.get("CI") and not no_color()


def console(stderr: bool = False, width: int | None = None) -> Any:
    """A rich console that writes no escape sequence under `NO_COLOR` (rich's own handling still prints bold)."""
    from rich.console import Console

    return Console(stderr=stderr, width=width, color_system=None if no_color() else "auto")


# The type of each report printed: an error after the report is not printed as JSON a second time (and a test reads
# which report type a command printed).
JSON_PRINTED: list[type[Report]] = []


def print_report(report: Report, *, allow_nan: bool = True) -> None:
    """A `--json` report on stdout, in the one envelope (`zmr.infra.reports.envelope`; the JSON contract, docs/reference.md §6.2)."""
    import json

    from zmr.infra.reports import envelope
    from zmr.model.source import version

    JSON_PRINTED.append(type(report))
    sys.stdout.write(json.dumps(envelope(report, version()), indent=2, sort_keys=False, allow_nan=allow_nan) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    if interactive():
        from rich.measure import Measurement
        from rich.table import Table

        grid = Table(title=title, show_lines=False)
        for header in headers:
            grid.add_column(header, no_wrap=True, overflow="ignore")
        for row in rows:
            grid.add_row(*[str(c) for c in row])
        out = console()
        # Never cut a value (a commit id, a path) to fit the terminal: draw the table as wide as it needs.
        needed = Measurement.get(out, out.options.update(width=10**6), grid).maximum
        if needed > out.width:
            out = console(width=needed)
        out.print(grid, crop=False)
        return
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if title:
        print(title)
    for index, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


def warn(message: str) -> None:
    print(f"zmr: warning: {message}", file=sys.stderr)


class Progress:
    """What long work is doing, on stderr: a live status line on a terminal, nothing elsewhere.

    `zmr -q`: nothing anywhere; `zmr -v`: plain lines outside a terminal too
    (of git's counting lines, the last one of each phase). With *steps* (the
    labels of the components a command works through), a message that starts
    with ``<label>:`` is shown with its place, ``[2/5] rollout/demo: ...``.
    """

    def __init__(self, enabled: bool | None = None, steps: Sequence[str] = ()):
        terminal = live_stderr()
        self.enabled = terminal and not quiet() if enabled is None else enabled
        self.lines = enabled is None and not terminal and verbose()
        self._steps = {label: index for index, label in enumerate(steps, 1)}
        self._status: Any = None
        self._held: str | None = None  # a counting line not printed yet: the next one may be its update

    def __enter__(self) -> Progress:
        if self.enabled:
            self._status = console(stderr=True).status("working")
            self._status.__enter__()
        return self

    def __call__(self, message: str) -> None:
        label = message.partition(":")[0].partition(" ")[0]
        if label in self._steps and len(self._steps) > 1:
            message = f"[{self._steps[label]}/{len(self._steps)}] {message}"
        if self._status is not None:
            self._status.update(self._fit(message))
        elif self.lines:
            self._line(message)

    def _fit(self, message: str) -> Any:
        """*message* cut to one line of the terminal, beside the spinner (a longer one wrapped, and each redraw scrolled)."""
        from rich.cells import cell_len, set_cell_size
        from rich.text import Text

        room = self._status.console.width - 2  # the spinner's frame and a space
        if cell_len(message) > room:
            message = set_cell_size(message, max(room - 1, 0)) + "…"
        return Text(message)

    def _line(self, message: str) -> None:
        counting = re.match(_COUNTING, message)
        if self._held is not None and not (counting and self._held.startswith(counting.group(1))):
            print(self._held, file=sys.stderr, flush=True)
        self._held = None
        if counting and not message.endswith("done."):
            self._held = message
        else:
            print(message, file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._held is not None:
            print(self._held, file=sys.stderr, flush=True)
            self._held = None
        if self._status is not None:
            self._status.__exit__(*exc)


# "<what>: Receiving objects:  45% (450/1000), 1.20 MiB": group 1 is the phase, for telling an update from a new phase.
_COUNTING = r"(.*?: +)\d+% \(\d+/\d+\)"  # compiled by re when first used (a command that shows no progress never does)
