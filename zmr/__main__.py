"""`python -m zmr` runs the CLI."""

import sys

from zmr.cli import main

sys.exit(main())
