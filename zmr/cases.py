"""Cases: ``cases/<model>/case.yaml``, what the README tables say about a model.

A case holds the facts ``zmr docs`` renders into the README (support matrix,
key features, hardware, notes); the manifest holds the pins. Either may exist
without the other: a model still being written up has a manifest and no case,
a model whose branches live elsewhere may have a case and no manifest.

Schema (``family`` and ``status`` are required, every other key optional)::

    model: demo                      # optional; must equal the folder name
    title: Demo                      # display name (default: the manifest's title)
    family: toy decoder-only transformer
    status: zero mismatch on CPU
    trainer: toy trainer
    evidence:                        # the support matrix's evidence cell
      text: bitwise-identical log-probs for every token
      links:
        - title: case study
          url: cases/demo/README.md  # an http(s) URL, a path in the repository, or #anchor
    overhead:                        # rollout overhead of the zero-mismatch kernels
      figure: not measured yet       # the cell
      footnote: measured by scripts/demo_bitwise.py   # how it was measured: a footnote of the cell
    features:                        # key features: dimension -> text (free dimension names)
      attention: ...
      MoE: ...
    hardware:                        # hardware -> status, or {status, note}
      CPU: validated
      H200: {status: not verified, note: needs a GPU runner}
    notes:                           # free notes, e.g. changes that landed upstream
      - ...

Text values are single Markdown snippets (inline markup and links are fine;
line breaks are folded into spaces in tables). A value YAML would read as a
number or boolean (``LoRA: yes``) is taken as written.

Validation works like the manifests' (``zmr.manifest``): every problem of a
file at once, as ``file:line: problem; fix``, unknown keys rejected, exit 2.
The format is data: ``CASE``, a `zmr.schema.Record`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from zmr.errors import CaseError, ManifestError, ZmrError
from zmr.manifest import MODEL_RE, manifest_paths
from zmr.schema import CONTROL, At, Check, Field, Fields, Key, ListOf, MapOf, Record, Text, one_of, read_file
from zmr.yamlnodes import Problems, display_path

if TYPE_CHECKING:  # pragma: no cover
    from zmr.manifest import Manifest
    from zmr.project import Project

CASES_DIR = "cases"
CASE_FILE = "case.yaml"
# Hardware validation states, in the order the README explains them.
HARDWARE_STATUSES = ("validated", "not verified")
_URL_RE = re.compile(r"https?://[^\s<>]+\Z")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    title: str
    url: str  # http(s) URL, repository-relative path, or #anchor


@dataclass(frozen=True)
class Evidence:
    text: str = ""
    links: tuple[Link, ...] = ()


@dataclass(frozen=True)
class Overhead:
    figure: str
    footnote: str = ""  # how the figure was measured; rendered as a footnote of the cell


@dataclass(frozen=True)
class Hardware:
    name: str
    status: str  # one of HARDWARE_STATUSES
    note: str = ""


@dataclass(frozen=True)
class Case:
    """A validated ``cases/<model>/case.yaml``. Tuples keep the file's order."""

    model: str
    path: Path
    family: str
    status: str
    title: str | None = None
    trainer: str | None = None
    evidence: Evidence | None = None
    overhead: Overhead | None = None
    features: tuple[tuple[str, str], ...] = ()
    hardware: tuple[Hardware, ...] = ()
    notes: tuple[str, ...] = ()


# -- checks of single values ----------------------------------------------------------
# Each takes (clean text, At) and returns the value to keep, or None after at.add(...).


@dataclass
class _Context:
    root: Path
    model: str
    path: Path


def _model(value: str, at: At) -> str | None:
    model = at.ctx.model
    if value != model:
        at.add(f"{value!r} does not match the folder name {model!r}", f"write model: {model}, or move the file to cases/{value}/case.yaml")
        return None
    return value


def _url(value: str, at: At) -> str | None:
    if value.startswith("#"):
        if any(c.isspace() for c in value):
            at.add(f"whitespace in anchor {value!r}", "write the anchor as GitHub makes it (lower case, '-' for spaces)")
            return None
        return value
    if _SCHEME_RE.match(value):
        if not _URL_RE.match(value):
            at.add(f"{value!r} is not an http(s) URL", "use https://..., a path in the repository, or #anchor")
            return None
        return value
    target = value.split("#", 1)[0]
    pure = PurePosixPath(target)
    if not target or pure.is_absolute() or ".." in pure.parts or "\\" in target or any(c.isspace() for c in target):
        at.add(f"{value!r} must be a path inside the repository", "write it relative to the repository root, e.g. cases/<model>/README.md")
        return None
    if not (at.ctx.root / target).exists():
        at.add(f"{target!r} does not exist (paths are relative to the repository root)", "fix the path, or add the file")
        return None
    return value


# -- the schema -------------------------------------------------------------------------
# Change it together with `zmr.docs` (the renderer), the format's reference and `zmr new`'s template.


def _text(check: Check | None = None) -> Text:
    """Text taken as written (``yes`` stays "yes"), non-empty, no control characters, stripped."""
    return Text("expected text, got {kind}", written=(int, float, bool), null_is_empty=True, control=CONTROL | {"\x7f"}, strip=True, check=check)


def _nonblank(name: str) -> bool:
    return bool(name.strip())


_STATUS = _text(one_of(HARDWARE_STATUSES, "hardware status", suggest=True))

_LINK = Record(
    (Field("title", _text(), required=True), Field("url", _text(_url), required=True)),
    "expected a mapping with title and url, got {kind}",
    "write `- title: ...` and `url: ...`",
    make=lambda f, at: Link(f["title"], f["url"]),
)
_EVIDENCE = Record(
    (
        Field("text", _text(), default=""),
        Field("links", ListOf(_LINK, "expected a list of links, got {kind}", "write `- title: ...` and `url: ...` entries"), default=()),
    ),
    "expected a mapping with text and links, got {kind}",
    "write `text: ...` and/or `links: [...]`",
    empty=("is empty", "give it `text:` or `links:`, or remove it"),
    make=lambda f, at: Evidence(f["text"], f["links"]),
)
_OVERHEAD = Record(
    (Field("figure", _text(), required=True), Field("footnote", _text(), default="")),
    "expected a mapping with figure and footnote, got {kind}",
    "write `figure: ...` and `footnote: <how it was measured>`",
    make=lambda f, at: Overhead(f["figure"], f["footnote"]),
)
# A hardware entry is a status, or a mapping with status and note.
_HARDWARE = Record(
    (Field("status", _STATUS, required=True, deferred=True), Field("note", _text(), default="")),
    "expected a status or a mapping with status and note, got {kind}",
    f"write one of: {', '.join(HARDWARE_STATUSES)}",
    shorthand="status",
    make=lambda f, at: Hardware(at.key.strip(), f["status"], f["note"]),
)


def _case(fields: Fields, at: At) -> Case:
    return Case(
        model=at.ctx.model,
        path=at.ctx.path,
        family=fields["family"],
        status=fields["status"],
        title=fields.get("title"),
        trainer=fields.get("trainer"),
        evidence=fields.get("evidence"),
        overhead=fields.get("overhead"),
        features=fields["features"],
        hardware=tuple(hardware for _, hardware in fields["hardware"]),
        notes=fields["notes"],
    )


CASE = Record(
    (
        Field("model", _text(_model)),
        Field("title", _text()),
        Field("family", _text(), required=True),
        Field("status", _text(), required=True),
        Field("trainer", _text()),
        Field("evidence", _EVIDENCE),
        Field("overhead", _OVERHEAD),
        Field(
            "features",
            MapOf(_text(), "expected a mapping of dimension -> text, got {kind}", "write e.g. `attention: MLA, batch-invariant split-KV`",
                  key=Key(_nonblank, "{map}: empty dimension name", "name the dimension, e.g. attention"), strip_keys=True),
            default=(),
        ),
        Field(
            "hardware",
            MapOf(_HARDWARE, "expected a mapping of hardware -> status, got {kind}", "write e.g. `H200: {status: validated, note: ...}`",
                  key=Key(_nonblank, "{map}: empty hardware name", "name the hardware, e.g. H200")),
            default=(),
        ),
        Field("notes", ListOf(_text(), "expected a list of notes, got {kind}", "write `- ...` entries"), default=()),
    ),
    fix="start with `family:` and `status:`",
    make=_case,
)


# -- loading --------------------------------------------------------------------------


def parse_case(path: Path, root: Path) -> tuple[Case | None, list]:
    """Parse and validate one case file; returns (case or None, problems)."""
    display = display_path(path, root)
    problems = Problems(display)
    model = path.parent.name
    if not MODEL_RE.match(model):
        problems.add(None, f"folder name {model!r} is not a valid model name", "name the folder cases/<model> with [a-z0-9][a-z0-9._-]*")
    case = read_file(path, display, CASE, problems, _Context(root, model, path))
    if problems:
        return None, problems.items
    return case, []


def case_folders(root: Path) -> list[Path]:
    """Folders under ``cases/`` (a case folder may hold no case.yaml yet)."""
    folder = root / CASES_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_cases(root: Path, models: list[str] | None = None) -> tuple[list[Case], list]:
    """Every valid case (of *models*, or all), sorted by model, and every problem found."""
    cases: list[Case] = []
    problems: list = []
    for folder in case_folders(root):
        if models and folder.name not in models:
            continue
        path = folder / CASE_FILE
        wrong = folder / "case.yml"
        if wrong.is_file():
            p = Problems(display_path(wrong, root))
            p.add(None, "case files use the .yaml extension", "rename it to case.yaml")
            problems.extend(p.items)
        if not path.is_file():
            continue
        case, found = parse_case(path, root)
        problems.extend(found)
        if case is not None:
            cases.append(case)
    return cases, problems


def check_project(project: Project, models: list[str] | None = None) -> tuple[list[Manifest], list[Case]]:
    """Manifests and cases of *models* (all when empty): every problem of both in one error (exit 2).

    A model named in *models* may have a manifest, a case, or both.
    """
    root = project.root
    manifest_models = {p.name.rsplit(".", 1)[0] for p in manifest_paths(root)}
    case_models = {f.name for f in case_folders(root) if (f / CASE_FILE).is_file() or (f / "case.yml").is_file()}
    wanted = list(models or [])
    unknown = [m for m in wanted if m not in manifest_models and m not in case_models]
    if unknown:
        raise ZmrError(
            f"no manifest for model {', '.join(repr(m) for m in unknown)} in {root / 'manifests'}, and no case in {root / CASES_DIR}",
            details=[f"known models: {', '.join(sorted(manifest_models | case_models)) or 'none'}", "the files are manifests/<model>.yaml and cases/<model>/case.yaml"],
        )
    problems: list = []
    manifests: list = []
    if not wanted or any(m in manifest_models for m in wanted):
        try:
            manifests = project.manifests([m for m in wanted if m in manifest_models] or None)
        except ManifestError as err:
            problems.extend(err.problems)
    found, case_problems = load_cases(root, wanted or None)
    problems.extend(case_problems)
    if problems:
        raise CaseError(problems)
    return manifests, found


def model_titles(manifests: list[Manifest], found: list[Case]) -> dict[str, str]:
    """Display name per model: the case's title, else the manifest's, else the model."""
    titles = {m.model: m.title for m in manifests}
    for case in found:
        titles[case.model] = case.title or titles.get(case.model) or case.model
    return titles

