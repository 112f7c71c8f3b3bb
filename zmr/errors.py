"""The one exception hierarchy for user-facing failures.

The CLI maps `ZmrError` to its `exit_code` and prints the message; anything
else escaping a command is a bug and is reported as one.
"""

from __future__ import annotations


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
