"""`python -m zmr` runs the CLI; so does the `zmr` console script (`run`)."""

import gc
import sys


def run() -> int:
    """The CLI's `main`, with a Ctrl-C that comes while the CLI is still being imported answered as one during a command.

    Importing the CLI (typer, rich) takes a tenth of a second and more on a
    busy machine; a SIGINT then would end in a traceback and exit status 1.
    It ends as an interrupted command does: ``zmr: interrupted``, 130.

    The garbage collector sits the import out: what it makes (modules,
    classes, functions: some 100,000 objects) lives as long as the process,
    and collecting them over and over, then once more at exit, was a tenth of
    ``zmr list``'s CPU. Once imported they are frozen (``gc.freeze``: no
    collection looks at them again) and the collector runs as usual for what
    the command makes.
    """
    try:
        try:
            gc.disable()
            try:
                from zmr.cli import main
            finally:
                gc.freeze()
                gc.enable()
            return main()
        except KeyboardInterrupt:
            print("zmr: interrupted", file=sys.stderr)
            return 130
    finally:
        _forget_caught_interrupts()


def _forget_caught_interrupts() -> None:
    """Clear CPython's note of an interrupt that left code compiled from a string, zmr having caught it (issue #47).

    An interrupt (Ctrl-C, or zmr's SIGTERM and SIGHUP handler) raised while
    Python runs code it compiled from a string (``exec``/``eval``: a
    dataclass's generated methods, typer evaluating annotations, during a
    lazy import) is noted as unhandled even when zmr catches it; under
    ``python -m zmr`` the interpreter then ends by SIGINT at exit, whatever
    status zmr returned (a hang-up's 129 read as -2, killed by SIGINT). Each
    evaluation of a string starts by clearing that note: this empty one does.
    """
    exec("")


if __name__ == "__main__":
    sys.exit(run())
