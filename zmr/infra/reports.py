"""Reports: what every command's work returns, the `--json` object it prints, and that object's JSON Schema.

The one owner of "report" (docs/reference.md §6.2):

- `Report`, the protocol every command's result implements: ``failed()`` (a check ran and failed: the CLI exits 1),
  ``reason()`` (why, in one line; '' when it did not), ``details()`` (lines under it) and ``to_json()`` (the report's
  keys). A report that is no check never fails. The library returns reports and never prints; only ``zmr/cli/`` turns a
  failed one into exit 1.
- `envelope`, the one builder of a ``--json`` output: ``tool`` ("zmr"), ``zmr`` (the version) and ``schema_version``
  (the report class's `Report.schema_version`), then the report's keys.
- `ErrorReport`: what ``--json`` prints for an error (exit 2 or 1 before any report, exit 3 for a bug is no JSON).
- `json_schema`, the JSON Schema of reports, generated from the declared types: each report's ``to_json`` is annotated
  with a `typing.TypedDict` (mypy checks the dict it builds against it), and the schema says exactly that: a key of a
  TypedDict is required unless the TypedDict is ``total=False``; ``X | None`` allows null; ``dict[str, X]`` is an
  object of any keys (``additionalProperties``); ``Literal`` is an ``enum``; a nested TypedDict is a ``$defs`` entry;
  ``Any`` (a schema, a provenance record, which zmr passes through verbatim) allows anything. No other key is allowed.
  ``zmr.cli.reports`` names each command's report types and writes ``docs/json-schema/`` (``scripts/json-schemas``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict

from zmr.infra.errors import ProblemJson

TOOL = "zmr"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


class Report:
    """The protocol of every command's result (a base class: the defaults are a report that is no check)."""

    schema_version: ClassVar[int] = 1
    """The ``schema_version`` of its ``--json`` output: raised when one of its keys changes meaning or goes away."""

    def failed(self) -> bool:
        """A check ran and failed (the command exits 1)."""
        return False

    def reason(self) -> str:
        """Why it failed, in one line; '' when it did not."""
        return ""

    def details(self) -> list[str]:
        """Lines under `reason` (one per failed item, what to do); [] when there are none."""
        return []

    def to_json(self) -> Mapping[str, object]:
        """The report's keys, as ``--json`` prints them after the envelope's (a subclass annotates it with its TypedDict)."""
        raise NotImplementedError(type(self).__name__)


def envelope(report: Report, version: str | None = None) -> dict[str, Any]:
    """*report* as every ``--json`` output is: ``tool``, ``zmr`` and ``schema_version`` first. *version*: what ``zmr``
    says (the CLI gives `zmr.model.source.version()`, which tells a development build; default ``zmr.__version__``)."""
    if version is None:
        from zmr import __version__ as version

    return {"tool": TOOL, "zmr": version, "schema_version": type(report).schema_version, **report.to_json()}


class _ErrorDetailRequired(TypedDict):
    message: str
    code: int
    type: str
    details: list[str]


class ErrorDetailJson(_ErrorDetailRequired, total=False):
    """What went wrong: the message (the `zmr: error:` line), the exit status, the error's class and detail lines; with
    problems located in files (an invalid manifest), the first one's file and line, and all of them."""

    file: str | None
    line: int | None
    problems: list[ProblemJson]


class ErrorJson(TypedDict):
    """An error under ``--json``: the command printed no report (docs/reference.md §6.2)."""

    ok: Literal[False]
    error: ErrorDetailJson


@dataclass
class ErrorReport(Report):
    """A command that failed before its report (bad input or usage, exit 2; a check that failed before reporting, exit 1)."""

    message: str
    code: int
    type: str
    lines: list[str] = field(default_factory=list)
    problems: list[ProblemJson] = field(default_factory=list)

    def failed(self) -> bool:
        return True

    def reason(self) -> str:
        return self.message

    def details(self) -> list[str]:
        return list(self.lines)

    def to_json(self) -> ErrorJson:
        error: ErrorDetailJson = {"message": self.message, "code": self.code, "type": self.type, "details": list(self.lines)}
        if self.problems:
            error["file"], error["line"], error["problems"] = self.problems[0]["file"], self.problems[0]["line"], self.problems
        return {"ok": False, "error": error}


# -- JSON Schema from the declared types ------------------------------------------------------------


def json_schema(title: str, reports: Sequence[type[Report]], *, schema_id: str, description: str = "") -> dict[str, Any]:
    """The JSON Schema of the ``--json`` output of *reports* (one of them: a command may print one of several kinds)."""
    defs: dict[str, Any] = {}
    shapes = [_report_object(report, defs) for report in reports]
    body: dict[str, Any] = shapes[0] if len(shapes) == 1 else {"oneOf": shapes}
    head = {"$schema": DRAFT, "$id": schema_id, "title": title}
    if description:
        head["description"] = description
    return {**head, **body, **({"$defs": dict(sorted(defs.items()))} if defs else {})}


def report_type(report: type[Report]) -> Any:
    """The TypedDict *report*'s ``to_json`` is annotated with (TypeError when it is not one: no schema without a type)."""
    hint = typing.get_type_hints(report.to_json).get("return")
    if not typing.is_typeddict(hint):
        raise TypeError(f"{report.__module__}.{report.__qualname__}.to_json returns {hint!r}: annotate it with a TypedDict")
    return hint


def _report_object(report: type[Report], defs: dict[str, Any]) -> dict[str, Any]:
    """The envelope's keys, then the report's TypedDict's (inline, so that the envelope is part of the object)."""
    shape = _typed_dict(report_type(report), defs)
    envelope_keys = {
        "tool": {"const": TOOL, "description": "Always zmr."},
        "zmr": {"type": "string", "description": "The version of zmr that wrote this output."},
        "schema_version": {"const": report.schema_version, "description": "Raised when a key changes meaning or goes away."},
    }
    described = {"description": shape.pop("description")} if "description" in shape else {}
    return {
        **described,
        "type": "object",
        "properties": {**envelope_keys, **shape["properties"]},
        "required": [*envelope_keys, *shape["required"]],
        "additionalProperties": False,
    }


def _typed_dict(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(hint)
    required = hint.__required_keys__
    schema: dict[str, Any] = {}
    doc = _own_doc(hint)
    if doc:
        schema["description"] = doc
    schema["type"] = "object"
    schema["properties"] = {key: _schema(value, defs) for key, value in hints.items()}
    schema["required"] = [key for key in hints if key in required]
    schema["additionalProperties"] = False
    return schema


def _own_doc(hint: Any) -> str:
    doc = hint.__dict__.get("__doc__") or ""
    return " ".join(doc.split())


def _schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if hint is Any or hint is object:
        return {}
    if hint is type(None) or hint is None:
        return {"type": "null"}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if typing.is_typeddict(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder while it is built: a type that contains itself refers to it
            defs[name] = _typed_dict(hint, defs)
        return {"$ref": f"#/$defs/{name}"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return _union([_schema(arg, defs) for arg in args])
    if origin in (list, Sequence, tuple) and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)):
        return {"type": "array", "items": _schema(args[0], defs)}
    if origin is tuple:
        return {"type": "array", "prefixItems": [_schema(arg, defs) for arg in args], "items": False, "minItems": len(args)}
    if origin in (dict, Mapping) and args and args[0] is str:
        return {"type": "object", "additionalProperties": _schema(args[1], defs)}
    raise TypeError(f"no JSON Schema for {hint!r}: use str, int, float, bool, None, Literal, list, dict[str, X], a TypedDict or Any")


def _union(members: list[dict[str, Any]]) -> dict[str, Any]:
    """`X | Y`: one ``type`` list where every member is a bare type (``["string", "null"]``), else ``anyOf``."""
    if all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        kinds = list(dict.fromkeys(m["type"] for m in members))
        return {"type": kinds[0] if len(kinds) == 1 else kinds}
    if {} in members:
        return {}
    return {"anyOf": members}
