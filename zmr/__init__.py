"""zmr: the tool behind zero-mismatch RL.

The library is usable without the CLI. The patch-set core is three layers,
each a folder that imports only the ones below it: `zmr.infra` (git, files,
locks, the upstream mirrors of `zmr.infra.cache`, the journal), `zmr.model`
(`zmr.model.manifest` loads and validates manifests, `zmr.model.series` reads
patch series) and `zmr.ops` (`zmr.ops.replay` applies a series in a throwaway
index, `zmr.ops.build` and `zmr.ops.verify` build and verify release branches,
and the other commands' work). The products beside it are subpackages:
`zmr.evidence` (mismatch, locate, dumps, engine adapters), `zmr.smoke` and
`zmr.importing`; `zmr.cli` sits above them all. Only `zmr.infra.git` starts git.

A library caller opens a project as every command does, with
`zmr.ops.recovery.open_project`: it finishes or undoes what a killed zmr left
and migrates an older zmr's state (`Project.find` only locates it).
"""

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # pragma: no cover
    from importlib.abc import Loader

# The one version number (pyproject.toml reads it). X.Y.Z only in a release commit, the one its tag vX.Y.Z names;
# every other commit is a development version X.Y.Z.devN of the next release (scripts/release sets both).
__version__ = "0.2.1.dev0"

# The core's modules by layer folder (#49): each was `zmr.<name>` in 0.1.0.
_LAYERS = {
    "infra": "cache errors faults files git lock procgroup transaction wording",
    "model": "cases file_schemas manifest patchfile project provenance resolutions selection series source upstream_status yamlnodes",
    "ops": "bisect build checkout checks diff docs export init landed legacy new patchplan publish rebase replay status update upstream validate verify",
}

# Public modules that moved into a subpackage, importable under the old name (with a DeprecationWarning) for one release.
MOVED = {
    "zmr.adapters": "zmr.evidence.adapters",
    "zmr.dumps": "zmr.evidence.dumps",
    "zmr.mismatch": "zmr.evidence.mismatch",
    "zmr.locate": "zmr.evidence.locate",
    "zmr.schema": "zmr.model.yamlrecords",
    **{f"zmr.{name}": f"zmr.{layer}.{name}" for layer, names in _LAYERS.items() for name in names.split()},
}


class _MovedModules:
    """Resolves an old module name to the module at its new place: one module object under both names.

    A meta path finder and loader by its methods, not by importlib.abc's classes (importing those imports
    importlib.resources, a few ms of every command's start); asked about every import, so any module outside zmr
    is answered at once.
    """

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("zmr."):
            return None
        for old, new in MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                return importlib.machinery.ModuleSpec(fullname, cast("Loader", self), origin=new + fullname[len(old) :])
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        assert spec.origin is not None
        warnings.warn(f"{spec.name} moved to {spec.origin}; import it from there", DeprecationWarning, stacklevel=3)
        return importlib.import_module(spec.origin)

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed under its new name."""


sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy of a submodule
