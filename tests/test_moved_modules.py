"""Public modules that moved into a subpackage still import under their old names, as the same module objects, with a DeprecationWarning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zmr import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_module_at_its_new_place(old):
    new = MOVED[old]
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        "assert old is new, (old, new)\n"
        "assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)], 'no DeprecationWarning'\n"
        "print(old.__name__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == new


def test_a_submodule_under_an_old_name_is_not_loaded_twice():
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import zmr.adapters.common as a, zmr.evidence.adapters.common as b\n"
        "from zmr.mismatch import write_dump\n"
        "import zmr.evidence.mismatch as m\n"
        "print(a is b, write_dump is m.write_dump)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


def test_a_name_that_never_existed_is_still_an_import_error():
    proc = subprocess.run([sys.executable, "-c", "import zmr.no_such_module"], capture_output=True, text=True)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr
