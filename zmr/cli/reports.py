"""Which report each command prints under ``--json``, and the JSON Schemas of docs/json-schema/ generated from them.

`command_reports` names, per command, the `zmr.infra.reports.Report` types its ``--json`` may print (``checkout`` prints a
`CheckoutReport`, or with ``--merge`` a `MergeResult`); ``error`` is what any command prints for an error. `schemas`
makes each command's schema with `zmr.infra.reports.json_schema`; ``scripts/json-schemas`` writes them (``--check``: exit 1
where a committed one differs), and tests/test_json_contract.py requires the committed files to be what it writes and
every command with ``--json`` to be named here. ``ci-matrix`` prints a GitHub Actions matrix, no report: not here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.reports import Report

FOLDER = Path("docs") / "json-schema"
SCHEMA_ID = "https://zmr.invalid/json-schema/{name}.json"


def command_reports() -> dict[str, tuple[type[Report], ...]]:
    """Each command with ``--json`` (and ``error``) → the report types it prints (imported here: the CLI alone knows them)."""
    from zmr.ops.bisect import BisectReport
    from zmr.ops.build import BuildReport
    from zmr.infra.cache import FetchReport
    from zmr.ops.checkout import CheckoutReport
    from zmr.ops.checkout.merge import MergeResult
    from zmr.ops.diff import DiffReport
    from zmr.ops.docs import Outcome as DocsOutcome
    from zmr.evidence.locate import LocateReport
    from zmr.evidence.mismatch import MismatchReport
    from zmr.ops.export import ExportReport
    from zmr.model.file_schemas import PublishedSchema
    from zmr.importing.importer import ImportResult
    from zmr.ops.init import InitResult
    from zmr.ops.new import Scaffolded
    from zmr.model.project import Listing
    from zmr.ops.publish import PublishResult
    from zmr.ops.rebase import Aborted, Outcome as RebaseOutcome, Stopped
    from zmr.infra.reports import ErrorReport
    from zmr.smoke.runner import Report as SmokeReport
    from zmr.ops.status import StatusReport
    from zmr.ops.update import UpdateReport
    from zmr.ops.upstream import UpstreamedReports
    from zmr.ops.validate import ValidateReport
    from zmr.ops.verify import VerifyReport

    return {
        "bisect": (BisectReport,),
        "build": (BuildReport,),
        "checkout": (CheckoutReport, MergeResult),
        "diff": (DiffReport,),
        "docs": (DocsOutcome,),
        "error": (ErrorReport,),
        "export": (ExportReport,),
        "fetch": (FetchReport,),
        "import": (ImportResult,),
        "init": (InitResult,),
        "list": (Listing,),
        "locate": (LocateReport,),
        "mismatch": (MismatchReport,),
        "new": (Scaffolded,),
        "publish": (PublishResult,),
        "rebase": (RebaseOutcome, Stopped, Aborted),
        "schema": (PublishedSchema,),
        "smoke": (SmokeReport,),
        "status": (StatusReport,),
        "update": (UpdateReport,),
        "upstreamed": (UpstreamedReports,),
        "validate": (ValidateReport,),
        "verify": (VerifyReport,),
    }


def schemas() -> dict[str, dict[str, Any]]:
    """Every schema of docs/json-schema/, by name (a command, or ``error``), generated from the report types."""
    from zmr.infra.reports import json_schema

    made = {}
    for name, reports in command_reports().items():
        title = "an error under --json" if name == "error" else f"zmr {name} --json"
        made[name] = json_schema(title, reports, schema_id=SCHEMA_ID.format(name=name))
    return made


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as its committed file holds it."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def stale(root: Path) -> list[str]:
    """The files of *root*/docs/json-schema/ that differ from what `schemas` makes (missing or extra ones too)."""
    folder = root / FOLDER
    wanted = {f"{name}.json": schema_text(schema) for name, schema in schemas().items()}
    present = {p.name for p in folder.glob("*.json")} if folder.is_dir() else set()
    differ = [name for name, text in wanted.items() if name not in present or (folder / name).read_text(encoding="utf-8") != text]
    return sorted(differ + [name for name in present if name not in wanted])


def write(root: Path) -> list[str]:
    """Write docs/json-schema/ under *root* as `schemas` makes it; the files written (a file no command prints is left
    alone: `stale` still names it)."""
    from zmr.infra.files import atomic_write

    folder = root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {f"{name}.json": schema_text(schema) for name, schema in schemas().items()}
    written = [name for name in stale(root) if name in wanted]
    for name in written:
        atomic_write(folder / name, wanted[name].encode("utf-8"))
    return written
