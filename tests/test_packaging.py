"""What the package declares is what zmr imports: every third-party package zmr imports is a dependency or in an extra."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata

from conftest import REPO_ROOT

# The import name → the distribution that provides it, where the two differ.
DISTRIBUTION = {"yaml": "pyyaml"}
# The frameworks whose tensors the evidence adapters read, inside the user's own environment: never installed by zmr.
USERS_FRAMEWORKS = {"vllm", "megatron"}


def _imported_packages() -> set[str]:
    found: set[str] = set()
    for path in (REPO_ROOT / "zmr").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "zmr"}


def _declared() -> dict[str, str]:
    """Distribution name → the requirement line (with its extra marker) from the installed zmr's metadata."""
    declared = {}
    for requirement in metadata.requires("zmr") or []:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert name, requirement
        declared.setdefault(name.group(0).lower().replace("_", "-"), requirement)
    return declared


def test_every_imported_package_is_declared():
    imported = _imported_packages()
    assert {"typer", "rich", "yaml", "numpy"} <= imported  # the scan sees imports at all
    declared = _declared()
    missing = {name for name in imported - USERS_FRAMEWORKS if DISTRIBUTION.get(name, name) not in declared}
    assert not missing, f"imported by zmr/ but not declared in pyproject.toml: {sorted(missing)}"


def test_zmr_uses_typer_not_click():
    """typer 0.26+ carries its own copy of click and no longer depends on click: zmr imports only typer's API."""
    assert "click" not in _imported_packages()
    assert "click" not in _declared()



def test_one_version_a_license_and_py_typed():
    """The version is zmr.__version__ alone (pyproject reads it), LICENSE is Apache-2.0, py.typed ships, CHANGELOG names the version."""
    import zmr

    assert metadata.version("zmr") == zmr.__version__
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {attr = "zmr.__version__"}' in pyproject
    assert not re.search(r"^version\s*=\s*\"", pyproject, re.M)  # no second number
    license_text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text and "END OF TERMS AND CONDITIONS" in license_text
    assert metadata.metadata("zmr")["License-Expression"] == "Apache-2.0"
    assert (REPO_ROOT / "zmr" / "py.typed").is_file() and '"zmr" = ["py.typed"]' in pyproject
    assert f"## {zmr.__version__}" in (REPO_ROOT / "CHANGELOG.md").read_text()
