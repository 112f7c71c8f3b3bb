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
The schema is data: ``_TOP_KEYS`` and friends; change them with ``zmr.docs``
(the renderer) and the README section of the format.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from zmr.errors import CaseError, ManifestError, ZmrError
from zmr.manifest import MODEL_RE, manifest_paths
from zmr.yamlnodes import Problems, display_path, join_path, kind, mapping_items, read_top_mapping, scalar

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


# -- field validators ----------------------------------------------------------------
# Each takes (node, path, problems, ctx) and returns the clean value or None.

_Validator = Callable[[Node, str, Problems, "_Context"], object]


@dataclass
class _Context:
    root: Path
    model: str


def _text(node: Node, path: str, problems: Problems, ctx: _Context | None = None) -> str | None:
    """A scalar taken as written (``yes`` stays "yes"), non-empty, no control characters."""
    if not isinstance(node, ScalarNode):
        problems.add(node, f"{path}: expected text, got {kind(node)}", "write a plain string")
        return None
    if scalar(node) is None or not str(node.value).strip():
        problems.add(node, f"{path}: must not be empty", "write a value or remove the key")
        return None
    value = str(node.value)
    if any(ord(c) < 32 and c not in "\t\n" for c in value) or "\x7f" in value:
        problems.add(node, f"{path}: control characters are not allowed", "remove them")
        return None
    return value.strip()


def _model(node, path, problems, ctx):
    value = _text(node, path, problems, ctx)
    if value is not None and value != ctx.model:
        problems.add(node, f"{path}: {value!r} does not match the folder name {ctx.model!r}", f"write model: {ctx.model}, or move the file to cases/{value}/case.yaml")
        return None
    return value


def _url(node, path, problems, ctx) -> str | None:
    value = _text(node, path, problems, ctx)
    if value is None:
        return None
    if value.startswith("#"):
        if any(c.isspace() for c in value):
            problems.add(node, f"{path}: whitespace in anchor {value!r}", "write the anchor as GitHub makes it (lower case, '-' for spaces)")
            return None
        return value
    if _SCHEME_RE.match(value):
        if not _URL_RE.match(value):
            problems.add(node, f"{path}: {value!r} is not an http(s) URL", "use https://..., a path in the repository, or #anchor")
            return None
        return value
    target = value.split("#", 1)[0]
    pure = PurePosixPath(target)
    if not target or pure.is_absolute() or ".." in pure.parts or "\\" in target or any(c.isspace() for c in target):
        problems.add(node, f"{path}: {value!r} must be a path inside the repository", "write it relative to the repository root, e.g. cases/<model>/README.md")
        return None
    if not (ctx.root / target).exists():
        problems.add(node, f"{path}: {target!r} does not exist (paths are relative to the repository root)", "fix the path, or add the file")
        return None
    return value


def _links(node, path, problems, ctx) -> tuple[Link, ...] | None:
    if not isinstance(node, SequenceNode):
        problems.add(node, f"{path}: expected a list of links, got {kind(node)}", "write `- title: ...` and `url: ...` entries")
        return None
    links = []
    for index, item in enumerate(node.value):
        where = join_path(path, index)
        if not isinstance(item, MappingNode):
            problems.add(item, f"{where}: expected a mapping with title and url, got {kind(item)}", "write `- title: ...` and `url: ...`")
            continue
        values = _fields(item, _LINK_KEYS, where, problems, ctx)
        if "title" in values and "url" in values:
            links.append(Link(values["title"], values["url"]))
    return tuple(links)


def _evidence(node, path, problems, ctx) -> Evidence | None:
    if not isinstance(node, MappingNode):
        problems.add(node, f"{path}: expected a mapping with text and links, got {kind(node)}", "write `text: ...` and/or `links: [...]`")
        return None
    values = _fields(node, _EVIDENCE_KEYS, path, problems, ctx)
    if not values and not any(True for _ in node.value):
        problems.add(node, f"{path}: is empty", "give it `text:` or `links:`, or remove it")
        return None
    return Evidence(values.get("text", ""), values.get("links", ()))


def _overhead(node, path, problems, ctx) -> Overhead | None:
    if not isinstance(node, MappingNode):
        problems.add(node, f"{path}: expected a mapping with figure and footnote, got {kind(node)}", "write `figure: ...` and `footnote: <how it was measured>`")
        return None
    values = _fields(node, _OVERHEAD_KEYS, path, problems, ctx)
    if "figure" not in values:
        return None
    return Overhead(values["figure"], values.get("footnote", ""))


def _features(node, path, problems, ctx) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(node, MappingNode):
        problems.add(node, f"{path}: expected a mapping of dimension -> text, got {kind(node)}", "write e.g. `attention: MLA, batch-invariant split-KV`")
        return None
    result = []
    for key, key_node, value_node in mapping_items(node, problems, path):
        if not key.strip():
            problems.add(key_node, f"{path}: empty dimension name", "name the dimension, e.g. attention")
            continue
        value = _text(value_node, join_path(path, key), problems, ctx)
        if value is not None:
            result.append((key.strip(), value))
    return tuple(result)


def _hardware(node, path, problems, ctx) -> tuple[Hardware, ...] | None:
    if not isinstance(node, MappingNode):
        problems.add(node, f"{path}: expected a mapping of hardware -> status, got {kind(node)}", "write e.g. `H200: {status: validated, note: ...}`")
        return None
    result = []
    for key, key_node, value_node in mapping_items(node, problems, path):
        where = join_path(path, key)
        if not key.strip():
            problems.add(key_node, f"{path}: empty hardware name", "name the hardware, e.g. H200")
            continue
        if isinstance(value_node, ScalarNode):
            status_node, note = value_node, ""
        elif isinstance(value_node, MappingNode):
            values = _fields(value_node, _HARDWARE_KEYS, where, problems, ctx, raw={"status"})
            if "status" not in values:
                continue
            status_node, note = values["status"], values.get("note", "")
        else:
            problems.add(value_node, f"{where}: expected a status or a mapping with status and note, got {kind(value_node)}", f"write one of: {', '.join(HARDWARE_STATUSES)}")
            continue
        status = _status(status_node, join_path(where, "status") if status_node is not value_node else where, problems, ctx)
        if status is not None:
            result.append(Hardware(key.strip(), status, note))
    return tuple(result)


def _status(node, path, problems, ctx) -> str | None:
    value = _text(node, path, problems, ctx)
    if value is None:
        return None
    if value not in HARDWARE_STATUSES:
        close = difflib.get_close_matches(value, HARDWARE_STATUSES, n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"use one of: {', '.join(HARDWARE_STATUSES)}"
        problems.add(node, f"{path}: unknown hardware status {value!r}", fix)
        return None
    return value


def _notes(node, path, problems, ctx) -> tuple[str, ...] | None:
    if not isinstance(node, SequenceNode):
        problems.add(node, f"{path}: expected a list of notes, got {kind(node)}", "write `- ...` entries")
        return None
    result = []
    for index, item in enumerate(node.value):
        value = _text(item, join_path(path, index), problems, ctx)
        if value is not None:
            result.append(value)
    return tuple(result)


@dataclass(frozen=True)
class _Key:
    validate: _Validator
    required: bool = False


_TOP_KEYS = {
    "model": _Key(_model),
    "title": _Key(_text),
    "family": _Key(_text, required=True),
    "status": _Key(_text, required=True),
    "trainer": _Key(_text),
    "evidence": _Key(_evidence),
    "overhead": _Key(_overhead),
    "features": _Key(_features),
    "hardware": _Key(_hardware),
    "notes": _Key(_notes),
}
_EVIDENCE_KEYS = {"text": _Key(_text), "links": _Key(_links)}
_LINK_KEYS = {"title": _Key(_text, required=True), "url": _Key(_url, required=True)}
_OVERHEAD_KEYS = {"figure": _Key(_text, required=True), "footnote": _Key(_text)}
_HARDWARE_KEYS = {"status": _Key(_text, required=True), "note": _Key(_text)}


def _fields(node: MappingNode, schema: dict[str, _Key], path: str, problems: Problems, ctx: _Context, raw: frozenset[str] | set[str] = frozenset()) -> dict:
    """Validate a mapping against *schema*; key -> clean value (or the node, for keys in *raw*)."""
    result: dict = {}
    present: set[str] = set()
    for key, key_node, value_node in mapping_items(node, problems, path or "top level"):
        present.add(key)
        if key not in schema:
            close = difflib.get_close_matches(key, list(schema), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(schema)}"
            problems.add(key_node, f"{join_path(path, key)}: unknown key", fix)
            continue
        if key in raw:
            result[key] = value_node
            continue
        value = schema[key].validate(value_node, join_path(path, key), problems, ctx)
        if value is not None:
            result[key] = value
    for key, spec in schema.items():
        if spec.required and key not in present:
            problems.add(node, f"{join_path(path, key)}: required key is missing", f"add `{key}:`")
    return result


# -- loading --------------------------------------------------------------------------


def parse_case(path: Path, root: Path) -> tuple[Case | None, list]:
    """Parse and validate one case file; returns (case or None, problems)."""
    display = display_path(path, root)
    problems = Problems(display)
    model = path.parent.name
    if not MODEL_RE.match(model):
        problems.add(None, f"folder name {model!r} is not a valid model name", "name the folder cases/<model> with [a-z0-9][a-z0-9._-]*")
    node = read_top_mapping(path, display, problems, "start with `family:` and `status:`")
    if node is None:
        return None, problems.items
    values = _fields(node, _TOP_KEYS, "", problems, _Context(root, model))
    if problems:
        return None, problems.items
    return (
        Case(
            model=model,
            path=path,
            family=values["family"],
            status=values["status"],
            title=values.get("title"),
            trainer=values.get("trainer"),
            evidence=values.get("evidence"),
            overhead=values.get("overhead"),
            features=values.get("features", ()),
            hardware=values.get("hardware", ()),
            notes=values.get("notes", ()),
        ),
        [],
    )


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


def check_project(project: "Project", models: list[str] | None = None) -> tuple[list["Manifest"], list[Case]]:
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


def model_titles(manifests: list["Manifest"], found: list[Case]) -> dict[str, str]:
    """Display name per model: the case's title, else the manifest's, else the model."""
    titles = {m.model: m.title for m in manifests}
    for case in found:
        titles[case.model] = case.title or titles.get(case.model) or case.model
    return titles

