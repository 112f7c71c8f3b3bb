"""Rendering helpers shared by the commands: tables, JSON, progress.

On a terminal, rich tables and a live status line; elsewhere (CI, pipes)
plain aligned text and no progress, so logs stay readable.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Self


def interactive() -> bool:
    return sys.stdout.isatty() and not os.environ.get("CI")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    if interactive():
        from rich.console import Console
        from rich.table import Table

        grid = Table(title=title, show_lines=False)
        for header in headers:
            grid.add_column(header)
        for row in rows:
            grid.add_row(*[str(c) for c in row])
        Console().print(grid)
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
    """Status lines on stderr while long work runs; silent outside a terminal."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() and not os.environ.get("CI") if enabled is None else enabled
        self._status = None

    def __enter__(self) -> Self:
        if self.enabled:
            from rich.console import Console

            self._status = Console(stderr=True).status("working")
            self._status.__enter__()
        return self

    def __call__(self, message: str) -> None:
        if self._status is not None:
            self._status.update(message)

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
