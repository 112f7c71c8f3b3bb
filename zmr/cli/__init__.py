"""The `zmr` command line: parses arguments and renders results.

Each `_<topic>.py` module registers its commands on `app`; the work itself
lives in the library modules (`zmr.release`, `zmr.mismatch`, ...), imported
inside the command functions so that `zmr --help` stays instant.
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="zmr",
    help="Zero-mismatch RL: manifests, patch series and reproducible release branches.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Registration happens on import; each module only defines commands.
from zmr.cli import manifests, locate, mismatch, publish, smoke, checkout  # noqa: E402,F401


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: maps zmr errors to exit codes."""
    from zmr.errors import ZmrError

    try:
        code = app(args=argv, standalone_mode=False)
    except ZmrError as err:
        _print_error(err)
        return err.exit_code
    except KeyboardInterrupt:
        print("zmr: interrupted", file=sys.stderr)
        return 130
    except SystemExit as err:  # typer.Exit and friends
        return int(err.code or 0)
    except Exception as err:  # noqa: BLE001 - the last line of defence
        return _usage_or_bug(err)
    # Without standalone mode, click turns Ctrl-C into a returned 130.
    if code == 130:
        print("zmr: interrupted", file=sys.stderr)
        return 130
    return code if isinstance(code, int) else 0


def _print_error(err: Exception) -> None:
    text = str(err)
    for i, line in enumerate(text.splitlines() or [""]):
        print(("zmr: error: " if i == 0 else "  ") + line, file=sys.stderr)


def _usage_or_bug(err: Exception) -> int:
    # Click/typer usage errors carry their own exit code and message.
    show = getattr(err, "show", None)
    exit_code = getattr(err, "exit_code", None)
    if callable(show) and isinstance(exit_code, int):
        show()
        return 2
    if type(err).__name__ == "Abort":
        print("zmr: aborted", file=sys.stderr)
        return 130
    import traceback

    print("zmr: internal error (this is a bug in zmr, please report it):", file=sys.stderr)
    traceback.print_exception(err, file=sys.stderr)
    return 3
