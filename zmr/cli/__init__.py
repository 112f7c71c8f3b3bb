"""The `zmr` command line: parses arguments and renders what the library returns.

Each command lives in the cli module named after it; the work is done by a
library module, imported inside the command function so that `zmr --help`
stays instant::

    command      cli module            library module
    init         zmr/cli/init.py       zmr.init
    list         zmr/cli/manifests.py  zmr.manifest, zmr.series
    validate     zmr/cli/manifests.py  zmr.cases, zmr.series
    fetch        zmr/cli/manifests.py  zmr.cache
    build        zmr/cli/build.py      zmr.release
    verify       zmr/cli/build.py      zmr.release
    locate       zmr/cli/locate.py     zmr.locate
    new          zmr/cli/new.py        zmr.scaffold
    mismatch     zmr/cli/mismatch.py   zmr.mismatch
    docs         zmr/cli/docs.py       zmr.docs
    publish      zmr/cli/publish.py    zmr.publish
    ci-matrix    zmr/cli/publish.py    zmr.publish
    smoke        zmr/cli/smoke.py      zmr.smoke (zmr.smoke_ray for --executor ray)
    checkout     zmr/cli/checkout.py   zmr.checkout
    export       zmr/cli/checkout.py   zmr.checkout
    rebase       zmr/cli/rebase.py     zmr.rebase
    upstreamed   zmr/cli/rebase.py     zmr.rebase
    import       zmr/cli/import_.py    zmr.importer

Shared by the commands: `zmr/cli/options.py` (arguments and options declared
once, and the project finder) and `zmr/cli/render.py` (tables, JSON,
progress). Command modules never import this package: they define plain
functions, registered here, so there is no import cycle.
"""

from __future__ import annotations

import sys

import typer

from zmr.cli import build, checkout, docs, import_, init, locate, manifests, mismatch, new, publish, rebase, smoke

app = typer.Typer(
    name="zmr",
    help="Zero-mismatch RL: manifests, patch series and reproducible release branches.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# In this order in `zmr --help`.
for _name, _command in (
    ("init", init.init),
    ("list", manifests.list_models),
    ("validate", manifests.validate),
    ("fetch", manifests.fetch),
    ("build", build.build),
    ("verify", build.verify),
    ("locate", locate.locate),
    ("new", new.new),
    ("mismatch", mismatch.mismatch),
    ("docs", docs.docs),
    ("publish", publish.publish),
    ("ci-matrix", publish.ci_matrix),
    ("smoke", smoke.smoke),
    ("checkout", checkout.checkout),
    ("export", checkout.export),
    ("rebase", rebase.rebase),
    ("upstreamed", rebase.upstreamed),
    ("import", import_.import_),
):
    app.command(_name)(_command)


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
