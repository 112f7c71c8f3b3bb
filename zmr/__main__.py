"""`python -m zmr` runs the CLI; so does the `zmr` console script (`run`)."""

import sys


def run() -> int:
    """The CLI's `main`, with a Ctrl-C that comes while the CLI is still being imported answered as one during a command.

    Importing the CLI (typer, rich) takes a tenth of a second and more on a
    busy machine; a SIGINT then would end in a traceback and exit status 1.
    It ends as an interrupted command does: ``zmr: interrupted``, 130.
    """
    try:
        from zmr.cli import main

        return main()
    except KeyboardInterrupt:
        print("zmr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
