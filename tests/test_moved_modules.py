"""Public modules that moved into a subpackage still import under their old names, as the same module objects, with a DeprecationWarning."""

from __future__ import annotations

import json
import subprocess
import sys


from zmr import MOVED


def test_an_old_name_is_the_module_at_its_new_place():
    """Every entry of MOVED, each imported first under its old name in one fresh interpreter."""
    code = (
        "import importlib, json, sys, warnings\n"
        "from zmr import MOVED\n"
        "out = {}\n"
        "for old, new in sorted(MOVED.items()):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        mod = importlib.import_module(old)\n"
        "    warned = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        "    out[old] = [mod is importlib.import_module(new), mod.__name__, warned]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert sorted(seen) == sorted(MOVED)
    for old, (same, name, warned) in seen.items():
        assert same and name == MOVED[old], (old, name)
        assert warned == [f"{old} moved to {MOVED[old]}; import it from there"], (old, warned)


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
