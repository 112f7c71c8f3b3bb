"""The one exception hierarchy for user-facing failures.

The CLI maps `ZmrError` to its `exit_code` and prints the message; anything
else escaping a command is a bug and is reported as one.

    ZmrError                 bad input or usage (exit 2)
    ├── CheckFailed          a check ran and failed (exit 1)
    ├── FileProblems         problems located in files, reported together
    │   ├── ManifestError    manifests/<model>.yaml
    │   ├── CaseError        cases/<model>/case.yaml (and `zmr validate`'s combined report)
    │   ├── SettingsError    zmr.yaml
    │   └── DocsError        the README's marker lines
    └── SeriesError          a series or patch file

The domains are siblings: catching one never catches another's failures.
Errors of other parts (git, the cache, checkouts, rebases...) are defined
next to the code that raises them, each directly under `ZmrError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypedDict


class ZmrError(Exception):
    """Bad input or usage: the message says what is wrong and what to do."""

    exit_code = 2

    def __init__(self, message: str, *, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.details = list(details or [])

    def __str__(self) -> str:
        return "\n".join([self.message, *self.details])


class CheckFailed(ZmrError):
    """A check ran and failed (drift, mismatch, smoke failure): exit 1."""

    exit_code = 1


class ProblemJson(TypedDict):
    """A problem located in a file: the file (relative to the repository), its line (null: the whole file), what is wrong, what to do."""

    file: str
    line: int | None
    message: str
    hint: str


class Located(Protocol):
    """A problem at ``path:line`` (`zmr.model.yamlnodes.Problem`)."""

    path: str
    line: int

    def to_json(self) -> ProblemJson: ...


class FileProblems(ZmrError):
    """One or more files are invalid; ``problems`` lists each one, sorted by file and line."""

    def __init__(self, problems: Sequence[Located]):
        self.problems = sorted(problems, key=lambda p: (p.path, p.line))
        count = len(self.problems)
        files = sorted({p.path for p in self.problems})
        head = f"{count} problem{'s' if count != 1 else ''} in {', '.join(files)}"
        super().__init__(head, details=[str(p) for p in self.problems])


class ManifestError(FileProblems):
    """One or more manifest files are invalid."""


class CaseError(FileProblems):
    """One or more case files are invalid (`zmr validate` reports manifest problems with them)."""


class SettingsError(FileProblems):
    """``zmr.yaml`` is invalid."""


class DocsError(FileProblems):
    """The README's marker lines are wrong."""


class SeriesError(ZmrError):
    """A series or patch file is invalid; ``problems`` lists each one when a series has several."""

    def __init__(self, message: str, *, details: list[str] | None = None, problems: Sequence[Located] = ()):
        super().__init__(message, details=details)
        self.problems = list(problems)
