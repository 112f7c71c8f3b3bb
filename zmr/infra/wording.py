"""How zmr words a count in what it prints: ``counted(1, "patch")`` is "1 patch", ``counted(2, "patch")`` "2 patches".

The one owner of plural agreement: every "<number> <noun>" zmr writes for a person goes through ``counted``
(tests/test_help_text.py checks the sources), so that no message says "1 patches".
"""

from __future__ import annotations


def plural(noun: str) -> str:
    """*noun*'s plural: "patch" -> "patches", "commit" -> "commits"."""
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def counted(n: int, noun: str) -> str:
    """*n* and *noun* agreeing with it: "1 patch", "0 patches", "3 patches"."""
    return f"{n} {noun if n == 1 else plural(noun)}"


def verb(n: int, one: str, many: str) -> str:
    """The form of a verb that agrees with *n* things: ``verb(1, "differs", "differ")`` is "differs"."""
    return one if n == 1 else many
