"""The `zmr` command line: parses arguments and renders what the library returns.

Each command lives in the cli module named after it; the work is done by the
library module named after it (the exceptions are in the table), imported inside the command function so that `zmr --help`
stays instant::

    command      cli module               library module
    init         zmr/cli/init.py          zmr.ops.init
    list         zmr/cli/list_.py         zmr.model.project (list_models)
    validate     zmr/cli/validate.py      zmr.ops.validate
    fetch        zmr/cli/fetch.py         zmr.infra.cache
    build        zmr/cli/build.py         zmr.ops.build
    verify       zmr/cli/verify.py        zmr.ops.verify
    locate       zmr/cli/locate.py        zmr.evidence.locate
    new          zmr/cli/new.py           zmr.ops.new
    mismatch     zmr/cli/mismatch.py      zmr.evidence.mismatch
    docs         zmr/cli/docs.py          zmr.ops.docs
    publish      zmr/cli/publish.py       zmr.ops.publish
    ci-matrix    zmr/cli/ci_matrix.py     zmr.ops.publish (ci_matrix)
    smoke        zmr/cli/smoke.py         zmr.smoke (runner; ray_executor for --executor ray)
    checkout     zmr/cli/checkout.py      zmr.ops.checkout
    export       zmr/cli/export.py        zmr.ops.export
    rebase       zmr/cli/rebase.py        zmr.ops.rebase
    upstreamed   zmr/cli/upstreamed.py    zmr.ops.upstream (upstreamed)
    update       zmr/cli/update.py        zmr.ops.update (moves pins with zmr.ops.rebase; checks with zmr.ops.checks)
    bisect       zmr/cli/bisect.py        zmr.ops.bisect (checks with zmr.ops.checks)
    diff         zmr/cli/diff.py          zmr.ops.diff
    import       zmr/cli/import_.py       zmr.importing
    schema       zmr/cli/schema.py        zmr.model.file_schemas
    status       zmr/cli/status.py        zmr.ops.status

Shared by the commands: `zmr/cli/options.py` (arguments and options declared
once, and the project finder) and `zmr/cli/render.py` (tables, JSON,
progress). Command modules never import this package: they define plain
functions, registered here, so there is no import cycle.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from zmr.cli import options, render

# 128 + SIGPIPE: what a shell shows for git when the reader of its output went away (`| head -1`).
CLOSED_PIPE_STATUS = 141


class _ClosedPipe(Exception):
    """stdout's reader went away; raised past typer, which would turn the BrokenPipeError into exit 1."""


_QUIET_HELP = "No progress output: only results, warnings and errors."
_VERBOSE_HELP = "Show each git command zmr runs (stderr), and progress also outside a terminal."
_asked: set[str] = set()  # of "quiet", "verbose": what -q/-v asked for, before the command or after it


def _verbosity_option(value: bool, which: str) -> None:
    if not value:
        return
    _asked.add(which)
    if len(_asked) > 1:
        raise typer.BadParameter("give -q/--quiet or -v/--verbose, not both")
    render.set_verbosity(-1 if which == "quiet" else 1)
    if which == "verbose":
        import logging

        base: type[logging.StreamHandler[Any]] = logging.StreamHandler  # generic for the type checker alone (3.10)

        class CurrentStderr(base):  # type: ignore[valid-type,misc]
            """Writes to sys.stderr as it is at each record: the stderr of this run of main, not of the first one."""

            @property
            def stream(self) -> Any:
                return sys.stderr

            @stream.setter
            def stream(self, value: Any) -> None:
                pass

        logger = logging.getLogger("zmr")
        if not logger.handlers:
            handler = CurrentStderr()
            handler.setFormatter(logging.Formatter("zmr: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


def _fresh_run() -> None:
    """What one run of `main` decides for itself, undone from the one before (main called again in one process)."""
    _asked.clear()
    render.set_verbosity(0)
    if "zmr.infra.git" in sys.modules:
        from zmr.infra import git

        git.forget_caller_config()
    if "logging" in sys.modules:
        import logging

        logging.getLogger("zmr").setLevel(logging.NOTSET)


def _quiet_option(value: bool) -> None:
    _verbosity_option(value, "quiet")


def _verbose_option(value: bool) -> None:
    _verbosity_option(value, "verbose")


# -q/-v for a command: the same as before it (`zmr verify -q` is `zmr -q verify`). Typer parameters that each
# command function gets in its signature (`_with_verbosity`); their callbacks act, the command never sees them.
_VERBOSITY_PARAMETERS = (
    inspect.Parameter(
        "zmr_quiet_",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[bool, typer.Option("-q", "--quiet", help=_QUIET_HELP, callback=_quiet_option)],
    ),
    inspect.Parameter(
        "zmr_verbose_",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[bool, typer.Option("-v", "--verbose", help=_VERBOSE_HELP, callback=_verbose_option)],
    ),
)


def _with_verbosity(function: Callable[..., Any]) -> Callable[..., Any]:
    """*function* as a typer command that also takes -q/-v (what `zmr -q` does, after the command name)."""

    @functools.wraps(function)
    def command(*args: Any, zmr_quiet_: bool = False, zmr_verbose_: bool = False, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    # The annotations as objects, also those of a module with `from __future__ import annotations`.
    signature = inspect.signature(function, eval_str=True)
    signature = signature.replace(parameters=[*signature.parameters.values(), *_VERBOSITY_PARAMETERS])
    command.__signature__ = signature  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return command


# What zmr takes from typer beyond its decorators, in this one place: typer.core's TyperGroup and TyperCommand, subclassed
# with the methods of click's Command they inherit (invoke, collect_usage_pieces, format_options; the click that typer
# 0.26-0.28 carries as its own copy). tests/test_help_text.py holds every command's help to tests/data/help.txt, at the
# floors and at the newest versions pyproject.toml allows (.ci/run), so a typer that moves them fails there.
class _Group(typer.core.TyperGroup):
    def invoke(self, ctx: Any) -> Any:  # typer's click Context
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _ClosedPipe from None


class _Command(typer.core.TyperCommand):
    """A command whose help names each value as git and click do (`MODEL`, `[MODEL]...`, `--component NAME`).

    Typer renders a parameter without a metavar by its Python type (`<list[str]>`, `<str>`) and an argument as
    `{model}` (required) or `[model]` (optional); here a parameter without a metavar gets its name in capitals,
    and an argument's usage and help entry are click's: `MODEL` required, `[MODEL]` optional, `...` when repeatable
    (a metavar that spells its own brackets, `[BASE [HEAD]] [MODEL...]`, is shown as written).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and param.name and not getattr(param, "is_flag", False) and not getattr(param, "count", False):
                param.metavar = param.name.upper()

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(_argument_usage(param))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # typer's record is "NAME <type>": the name alone
                name = param.metavar or ""
                arguments.append((name if "[" in name else name + ("..." if param.nargs != 1 else ""), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_usage(param: Any) -> str:
    name = param.metavar or ""
    if "[" in name:
        return name
    return (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")


def _print_version(value: bool) -> None:
    if value:
        from zmr.model.source import version

        print(f"zmr {version()}")
        raise typer.Exit()


def _global_options(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True, help="Print zmr's version and exit.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=_QUIET_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=_VERBOSE_HELP)] = False,
    directories: Annotated[
        list[Path] | None,
        typer.Option("-C", metavar="DIR", help="Run as if zmr was started in DIR (repeatable, each relative to the last), as git -C.", show_default=False),
    ] = None,
    no_pager: Annotated[bool, typer.Option("--no-pager", help="Do not page the output (zmr diff on a terminal), as git --no-pager.")] = False,
) -> None:
    render.set_paging(not no_pager)
    for directory in directories or []:
        try:
            os.chdir(directory)
        except OSError as err:
            raise typer.BadParameter(f"cannot change to {str(directory)!r}: {err.strerror}", param_hint="'-C'") from None
    _asked.clear()
    _verbosity_option(quiet, "quiet")
    _verbosity_option(verbose, "verbose")


def _help(ctx: typer.Context, command: Annotated[list[str] | None, typer.Argument(help="The command (none: zmr itself).", show_default=False)] = None) -> None:
    """Help for a command: `zmr help build` is `zmr build --help`."""
    group = ctx.parent.command if ctx.parent else None
    assert isinstance(group, typer.core.TyperGroup)
    if not command:
        print(ctx.parent.get_help() if ctx.parent else "")
        return
    if len(command) > 1:
        ctx.fail(f"give one command, not {' '.join(command)!r}")
    found = group.get_command(ctx, command[0])
    if found is None:
        ctx.fail(f"no command {command[0]!r}; `zmr --help` lists them")
    print(type(ctx)(found, info_name=command[0], parent=ctx.parent).get_help())


# In this order in `zmr --help`: each command, its cli module (zmr/cli/<module>.py) and the function there, imported when
# the command is put in an app (`_command`): `zmr list` imports zmr/cli/list_.py, not the modules of the other commands.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("init", "init", "init"),
    ("list", "list_", "list_models"),
    ("status", "status", "status"),
    ("validate", "validate", "validate"),
    ("fetch", "fetch", "fetch"),
    ("build", "build", "build"),
    ("verify", "verify", "verify"),
    ("locate", "locate", "locate"),
    ("new", "new", "new"),
    ("mismatch", "mismatch", "mismatch"),
    ("docs", "docs", "docs"),
    ("publish", "publish", "publish"),
    ("ci-matrix", "ci_matrix", "ci_matrix"),
    ("smoke", "smoke", "smoke"),
    ("checkout", "checkout", "checkout"),
    ("export", "export", "export"),
    ("rebase", "rebase", "rebase"),
    ("upstreamed", "upstreamed", "upstreamed"),
    ("update", "update", "update"),
    ("bisect", "bisect", "bisect"),
    ("diff", "diff", "diff"),
    ("import", "import_", "import_"),
    ("schema", "schema", "schema"),
    ("help", "", "_help"),  # this module's
)


def _command(name: str) -> Callable[..., Any]:
    """The function of the command *name* (one of COMMANDS), its cli module imported now."""
    module, function = _BY_NAME[name]
    return getattr(importlib.import_module(f"zmr.cli.{module}"), function) if module else _help


def _typer_app(commands: tuple[str, ...]) -> typer.Typer:
    """zmr's typer app with *commands*: every one (`app`), or the one a command line names (`_main`)."""
    made = typer.Typer(
        name="zmr",
        cls=_Group,
        help="Zero-mismatch RL: manifests, patch series and reproducible release branches.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
        suggest_commands=True,  # "Did you mean": typer's own (the copy of click in typer 0.26-0.28 has none to repeat it)
    )
    made.callback()(_global_options)
    for name in commands:
        made.command(name, cls=_Command)(_with_verbosity(_command(name)))
    return made


@functools.cache
def _whole_app() -> typer.Typer:
    """The app with every command, made when first asked for (help, completion, `zmr help`, `zmr.cli.app`): a command line
    that names its command runs an app of that one (`_app_for`), and typer needs each command's signature with its
    annotations evaluated (`_with_verbosity`), a few ms of CPU for all of them."""
    return _typer_app(tuple(name for name, _, _ in COMMANDS))


def __getattr__(name: str) -> typer.Typer:
    """`zmr.cli.app`, zmr's typer app with every command (the same object every time)."""
    if name == "app":
        return _whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_BY_NAME = {name: (module, function) for name, module, function in COMMANDS}
_GLOBAL_FLAGS = frozenset({"-q", "--quiet", "-v", "--verbose", "--no-pager"})


def _words_before_completed() -> list[str] | None:
    """The words of a completion request before the one it completes, without the program's name (bash: COMP_WORDS and
    COMP_CWORD; zsh and fish: _TYPER_COMPLETE_ARGS, the line), split as typer splits them; None if they cannot be told."""
    import shlex

    try:
        if "COMP_WORDS" in os.environ:
            return shlex.split(os.environ["COMP_WORDS"])[1 : int(os.environ.get("COMP_CWORD", ""))]
        line = os.environ.get("_TYPER_COMPLETE_ARGS")
        if line is None:
            return None
        words = shlex.split(line)
        return words[1:] if line.endswith(" ") else words[1:-1]
    except ValueError:
        return None


def _app_for(args: list[str]) -> typer.Typer:
    """The app with only the command that *args* names, when they plainly name one: typer builds the click command of
    every command it has at each start (14 ms of CPU for the 24 here), and one is enough to run it (none, for -V). Anything else (no
    command, `help`, an option it does not know here) gets the whole app; so does a completion request (typer's protocol,
    `_ZMR_COMPLETE`) unless the words before the one completed name a command. tests/test_help_text.py holds each
    command's help to `zmr help COMMAND`'s, which the whole app prints; tests/test_shell.py completes in every shell."""
    if "_ZMR_COMPLETE" in os.environ:
        completed = _words_before_completed()
        if completed is None:
            return _whole_app()
        args = completed
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GLOBAL_FLAGS:
            i += 1
        elif arg == "-C":
            i += 2
        elif arg in ("-V", "--version"):  # answered before any command is looked at: an app of none
            return _typer_app(())
        elif arg.startswith("-"):
            return _whole_app()
        else:
            return _typer_app((arg,)) if arg in _BY_NAME and arg != "help" else _whole_app()
    return _whole_app()


# 128 + SIGTERM: what `timeout`, CI runners and `docker stop` send; 128 + SIGHUP: a closed terminal or ssh session.
# Both handled as Ctrl-C is (the checks zmr started ended with their process groups), then reported as a shell would.
TERMINATED_STATUS = 143
HUNG_UP_STATUS = 129
_terminated: int | None = None  # the signal (SIGTERM, SIGHUP) that ended the command


_COMMAND_RUNNING: list[bool] = []  # set while _main's command runs: the handler raises only then
_LATE: list[int] = []  # signals that came after it, sent again once the handlers are put back


def _on_sigterm(signum: int, frame: object) -> None:
    global _terminated
    if not _COMMAND_RUNNING:
        # Python runs a handler at its next check, not when the signal lands: one that came as the command returned goes
        # to the handler put back (the default: the process ends as that signal), not an interrupt raised while _main
        # puts them back (run() then said "zmr: interrupted", exit 130).
        _LATE.append(signum)
        return
    _terminated = signum
    raise KeyboardInterrupt  # the same clean-up as Ctrl-C: staged files removed, child processes ended


def _interrupted() -> int:
    import signal

    if _terminated is None:
        print("zmr: interrupted", file=sys.stderr)
        return 130
    hung_up = _terminated == signal.SIGHUP
    print("zmr: hung up" if hung_up else "zmr: terminated", file=sys.stderr)
    return HUNG_UP_STATUS if hung_up else TERMINATED_STATUS


_ARGV: list[list[str]] = []  # the arguments of the running main(), for --json errors


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: maps zmr errors to exit codes."""
    _ARGV.append(sys.argv[1:] if argv is None else list(argv))
    render.JSON_PRINTED.clear()
    _fresh_run()
    try:
        return _main(argv)
    finally:
        _ARGV.pop()
        for project in options.FOUND:
            for notice in project.notices:
                render.warn(notice)
        options.FOUND.clear()


def _main(argv: list[str] | None) -> int:
    import signal

    # The handlers hold for the command only: restored when it returns, so a SIGTERM or SIGHUP that comes later (the
    # interpreter shutting down, a library caller's own code) ends the process as that signal, never as an interrupt
    # raised where nothing catches it (Python ends then by SIGINT, or prints a traceback and exits 0 in an atexit hook).
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    _COMMAND_RUNNING.append(True)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        if before[signal.SIGHUP] != signal.SIG_IGN:  # (under nohup it stays ignored)
            signal.signal(signal.SIGHUP, _on_sigterm)
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            # Started with SIGINT ignored (a background job of a shell without job control, as CI runs tests): Python then leaves it
            # ignored, and a Ctrl-C or `kill -INT` never reaches zmr (tests/test_smoke.py's ctrl-c case hung so once).
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return _run_command(argv)
    except KeyboardInterrupt:  # one that came before _run_command's own try: "hung up", 129, not run()'s "interrupted", 130
        return _interrupted()
    finally:
        _COMMAND_RUNNING.pop()
        # Held back while they are put back: one landing in between is delivered to the caller's handler (the default:
        # the process ends as that signal), not lost between Python's noting it and its handler running.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, set(before))
        try:
            for signum, handler in before.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        late = list(dict.fromkeys(_LATE))
        _LATE.clear()
        for came in late:
            os.kill(os.getpid(), came)


def _run_command(argv: list[str] | None) -> int:
    from zmr.infra.errors import ZmrError

    try:
        args = sys.argv[1:] if argv is None else list(argv)
        code = _app_for(args)(args=args, prog_name="zmr", standalone_mode=False)  # "zmr" in usage lines, also run as python -m zmr or in-process
        sys.stdout.flush()  # here, not at exit: a closed pipe is still ours to handle
    except _ClosedPipe:
        return _closed_pipe()
    except BrokenPipeError:
        return _closed_pipe()
    except ZmrError as err:
        if _terminated is not None and err.exit_code == 130:  # a command's own "interrupted" error, caused by SIGTERM or SIGHUP
            return _interrupted()
        _print_error(err, err.exit_code)
        return err.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except SystemExit as err:  # typer.Exit and friends
        return int(err.code or 0)
    except OSError as err:  # the disk or the system refused (full, read-only, permissions): not a bug
        from zmr.infra.files import os_error

        _print_error(os_error(err, [folder for project in options.FOUND for folder in project.folders()]), 2)
        return 2
    except Exception as err:  # noqa: BLE001 - the last line of defence
        return _usage_or_bug(err)
    # Without standalone mode, click turns Ctrl-C into a returned 130.
    if code == 130:
        return _interrupted()
    return code if isinstance(code, int) else 0


def _closed_pipe() -> int:
    """Like git: the reader stopped reading (`zmr list | head -1`); drop the rest of the output, say nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE_STATUS


def _print_error(err: Exception, code: int) -> None:
    text = str(err)
    for i, line in enumerate(text.splitlines() or [""]):
        print(("zmr: error: " if i == 0 else "  ") + line, file=sys.stderr)
    _json_error(err, code, getattr(err, "message", text.splitlines()[0] if text else ""))


def _json_requested() -> bool:
    args = _ARGV[-1] if _ARGV else []
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _json_error(err: Exception, code: int, message: str) -> None:
    """Under --json, an error is also a JSON object on stdout (unless the command's report is there already)."""
    if not _json_requested() or render.JSON_PRINTED:
        return
    from zmr.infra.reports import ErrorReport

    problems = [p.to_json() for p in getattr(err, "problems", [])]
    render.print_report(ErrorReport(message, code, type(err).__name__, list(getattr(err, "details", [])), problems))


def _usage_or_bug(err: Exception) -> int:
    # Click/typer usage errors carry their own exit code and message.
    show = getattr(err, "show", None)
    exit_code = getattr(err, "exit_code", None)
    if callable(show) and isinstance(exit_code, int):
        format_message = getattr(err, "format_message", None)
        message = format_message() if callable(format_message) else str(err)
        print("\n".join(render.usage_error(message, getattr(err, "ctx", None))), file=sys.stderr)
        _json_error(err, 2, message)
        return 2
    if type(err).__name__ == "Abort":
        if _terminated is not None:
            return _interrupted()
        print("zmr: aborted", file=sys.stderr)
        return 130
    import traceback

    print("zmr: internal error (this is a bug in zmr, please report it):", file=sys.stderr)
    traceback.print_exception(err, file=sys.stderr)
    return 3
