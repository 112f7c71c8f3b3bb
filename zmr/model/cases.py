"""Cases: ``cases/<model>/case.yaml``, what the README tables say about a model.

A case holds the facts ``zmr docs`` renders into the README (support matrix,
key features, hardware, notes); the manifest holds the pins. Either may exist
without the other: a model still being written up has a manifest and no case,
a model whose branches live elsewhere may have a case and no manifest.

Schema (``family`` and ``status`` are required, every other key optional)::

    model: demo                      # optional; must equal the folder name
    title: Demo                      # display name (default: the manifest's title)
    short_title: Demo                # in the column headers and the code-branch table (default: title)
    order: 10                        # position in the tables: lower first; unordered models follow, by name
    family: toy decoder-only transformer
    status: zero mismatch on CPU
    rollout: toy rollout engine
    trainer: toy trainer
    evidence:                        # the support matrix's evidence cell
      text: bitwise-identical log-probs for every token
      runs:                          # each run: what it showed, on what hardware, with links
        - text: 100 RL steps, KL = 0 at every step
          hardware: 32 GB200
          links: [{title: verl#8505, url: https://github.com/volcengine/verl/pull/8505}]
      links:
        - title: case study
          url: cases/demo/README.md  # an http(s) URL, a path in the repository, or #anchor
    overhead:                        # rollout overhead of the zero-mismatch kernels
      figure: not measured yet       # the cell
      footnote:                      # how it was measured: a footnote of the cell (text, or a list of items)
        - measured by scripts/demo_bitwise.py
    features:                        # key features: dimension -> text, or {text, status}
      attention: ...
      LoRA: {text: all modules, status: supported}        # status: supported | experimental
    feature_notes: [...]             # under the key-features table
    hardware:                        # hardware -> status, or {status, note}; notes are listed under the table
      CPU: validated
      H200: {status: not verified, note: needs a GPU runner}
    branches:                        # code branches of a model WITHOUT a manifest (a manifest's come from it)
      vLLM: vllm/demo                # framework -> branch, or {branch, layout: two-commit | snapshot}
    branch_notes: [...]              # under the code-branch table
    notes:                           # free notes, e.g. changes that landed upstream
      - ...

Text values are single Markdown snippets (inline markup and links are fine;
line breaks are folded into spaces in tables). A value YAML would read as a
number or boolean (``LoRA: yes``) is taken as written.

Validation works like the manifests' (``zmr.model.manifest``): every problem of a
file at once, as ``file:line: problem; fix``, unknown keys rejected, exit 2.
The format is data: ``CASE``, a `zmr.model.yamlrecords.Record`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, cast

from yaml.nodes import MappingNode, Node, SequenceNode

from zmr.infra.errors import CaseError, Located, ManifestError, ZmrError
from zmr.model.manifest import MODEL_RE, RELEASE_MODES, RESERVED_BRANCHES, length_problem, manifest_paths, name_fold, ref_format_problem
from zmr.model.yamlnodes import Problem, Problems, display_path, line_of
from zmr.model.yamlrecords import CONTROL, At, Check, Field, Fields, Key, ListOf, MapOf, Number, Record, Text, one_of, read_file

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Manifest
    from zmr.model.project import Project

CASES_DIR = "cases"
CASE_FILE = "case.yaml"
# Hardware validation states, in the order the README explains them.
HARDWARE_STATUSES = ("validated", "not verified")
# Feature states the tables mark (a feature without one is described, not marked).
FEATURE_STATUSES = ("supported", "experimental")
_URL_RE = re.compile(r"https?://[^\s<>]+\Z")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    title: str
    url: str  # http(s) URL, repository-relative path, or #anchor


@dataclass(frozen=True)
class Run:
    """One run behind the evidence: what it showed, where it ran, and its links."""

    text: str
    hardware: str = ""
    links: tuple[Link, ...] = ()


@dataclass(frozen=True)
class Evidence:
    text: str = ""
    links: tuple[Link, ...] = ()
    runs: tuple[Run, ...] = ()


@dataclass(frozen=True)
class Overhead:
    figure: str
    footnote: tuple[str, ...] = ()  # how the figure was measured, item by item; rendered as a footnote of the cell


@dataclass(frozen=True)
class Feature:
    name: str
    text: str
    status: str | None = None  # one of FEATURE_STATUSES, or None: not marked


@dataclass(frozen=True)
class Hardware:
    name: str
    status: str  # one of HARDWARE_STATUSES
    note: str = ""


@dataclass(frozen=True)
class Branch:
    """A code branch named by a case (for a model whose manifest is not in this repository)."""

    framework: str
    name: str
    layout: str = "two-commit"  # one of zmr.model.manifest.RELEASE_MODES


@dataclass(frozen=True)
class Case:
    """A validated ``cases/<model>/case.yaml``. Tuples keep the file's order."""

    model: str
    path: Path
    family: str
    status: str
    title: str | None = None
    short_title: str | None = None
    order: int | None = None
    rollout: str | None = None
    trainer: str | None = None
    evidence: Evidence | None = None
    overhead: Overhead | None = None
    features: tuple[Feature, ...] = ()
    feature_notes: tuple[str, ...] = ()
    hardware: tuple[Hardware, ...] = ()
    branches: tuple[Branch, ...] = ()
    branches_line: int | None = None  # where `branches:` is, for problems found against the manifests
    branch_notes: tuple[str, ...] = ()
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
# Change it together with `zmr.ops.docs` (the renderer), the format's reference and `zmr new`'s template.


def _branch_name(value: str, at: At) -> str | None:
    reason = ref_format_problem(value)
    if reason:
        at.add(f"{value!r} is not a valid branch name ({reason})", "use letters, digits, '-', '_', '.' and '/'")
        return None
    if value in RESERVED_BRANCHES or value.startswith(("refs/", "zmr/")):
        at.add(f"{value!r} is reserved", "name the branch <framework>/<model>")
        return None
    if length_problem("branch", value):
        at.add(f"branch name {value[:40]!r}... is too long ({length_problem('branch', value)})", "use a shorter name (docs/reference.md §2.4)")
        return None
    return value


# Markdown a text value may not carry into the README: raw HTML (a tag, a comment, a processing
# instruction), an autolink, and link destinations other than http(s), repository paths and anchors.
_HTML_RE = re.compile(r"<[A-Za-z/!?]")
_DESTINATION_RE = re.compile(r"\]\(\s*<?([^)\s>]*)")
_REFERENCE_DEFINITION_RE = re.compile(r"^\s{0,3}\[[^\]]*\]:")


def markdown_problem(value: str) -> str:
    """Why the Markdown snippet *value* could put a script, a tag or a foreign link into the README, or ''."""
    if _HTML_RE.search(value):
        return "raw HTML or an autolink (<...>) is not allowed"
    if _REFERENCE_DEFINITION_RE.match(value):
        return "a link reference definition ([name]: ...) is not allowed"
    for match in _DESTINATION_RE.finditer(value):
        target = match.group(1)
        if _SCHEME_RE.match(target) and not _URL_RE.match(target):
            return f"link to {target[:40]!r}: only http(s) URLs, paths in the repository and #anchors are linked"
    return ""


def _safe_markdown(value: str, at: At) -> str | None:
    problem = markdown_problem(value)
    if problem:
        at.add(problem, "write plain text, or a link [text](https://...)")
        return None
    return value


def _text(check: Check | None = None) -> Text:
    """Text taken as written (``yes`` stays "yes"), non-empty, no control characters, stripped."""
    return Text(
        "expected text, got {kind}",
        written=(int, float, bool),
        null_is_empty=True,
        control=CONTROL | {"\x7f"},
        strip=True,
        visible=True,
        check=check or _safe_markdown,
    )


def _nonblank(name: str) -> bool:
    return bool(name.strip())


_STATUS = _text(one_of(HARDWARE_STATUSES, "hardware status", suggest=True))

_LINK = Record(
    (Field("title", _text(), required=True), Field("url", _text(_url), required=True)),
    "expected a mapping with title and url, got {kind}",
    "write `- title: ...` and `url: ...`",
    make=lambda f, at: Link(f["title"], f["url"]),
)
_LINKS = ListOf(_LINK, "expected a list of links, got {kind}", "write `- title: ...` and `url: ...` entries")
_RUN = Record(
    (Field("text", _text(), required=True), Field("hardware", _text(), default=""), Field("links", _LINKS, default=())),
    "expected a mapping with text, hardware and links, got {kind}",
    "write `- text: <what the run showed>` with `hardware:` and `links:`",
    make=lambda f, at: Run(f["text"], f["hardware"], f["links"]),
)
_EVIDENCE = Record(
    (
        Field("text", _text(), default=""),
        Field("runs", ListOf(_RUN, "expected a list of runs, got {kind}", "write `- text: ...` entries"), default=()),
        Field("links", _LINKS, default=()),
    ),
    "expected a mapping with text, runs and links, got {kind}",
    "write `text: ...`, `runs: [...]` and/or `links: [...]`",
    empty=("is empty", "give it `text:`, `runs:` or `links:`, or remove it"),
    make=lambda f, at: Evidence(f["text"], f["links"], f["runs"]),
)


@dataclass(frozen=True)
class _TextItems:
    """One text, or a list of texts: always a tuple of items."""

    item: Text
    items: ListOf

    def read(self, node: Node, at: At) -> tuple[str, ...] | None:
        if isinstance(node, SequenceNode):
            return cast("tuple[str, ...] | None", self.items.read(node, at))
        value = self.item.read(node, at)
        return None if value is None else (value,)


def _notes(what: str) -> ListOf:
    return ListOf(_text(), f"expected a list of {what}, got {{kind}}", "write `- ...` entries")


_OVERHEAD = Record(
    (
        Field("figure", _text(), required=True),
        Field(
            "footnote",
            _TextItems(_text(), ListOf(_text(), "is an empty list", "write the items as `- ...` entries, or remove `footnote:`", nonempty=True)),
            default=(),
        ),
    ),
    "expected a mapping with figure and footnote, got {kind}",
    "write `figure: ...` and `footnote: <how it was measured>`",
    make=lambda f, at: Overhead(f["figure"], f["footnote"]),
)
# A feature is its text, or a mapping with text and the status the tables mark.
_FEATURE = Record(
    (Field("text", _text(), required=True), Field("status", _text(one_of(FEATURE_STATUSES, "feature status", suggest=True)))),
    "expected text or a mapping with text and status, got {kind}",
    f"write the text, or `{{text: ..., status: {FEATURE_STATUSES[0]}}}` (status: {', '.join(FEATURE_STATUSES)})",
    shorthand="text",
    make=lambda f, at: Feature(at.key.strip(), f["text"], f.get("status")),
)
# A branch is its name (two-commit), or a mapping with branch and layout.
_BRANCH = Record(
    (Field("branch", _text(_branch_name), required=True), Field("layout", _text(one_of(RELEASE_MODES, "layout", suggest=True)), default=RELEASE_MODES[0])),
    "expected a branch name or a mapping with branch and layout, got {kind}",
    f"write e.g. `vLLM: vllm/<model>`, or `{{branch: ..., layout: snapshot}}` (layout: {', '.join(RELEASE_MODES)})",
    shorthand="branch",
    make=lambda f, at: Branch(at.key.strip(), f["branch"], f["layout"]),
)
# A hardware entry is a status, or a mapping with status and note.
_HARDWARE = Record(
    (Field("status", _STATUS, required=True, deferred=True), Field("note", _text(), default="")),
    "expected a status or a mapping with status and note, got {kind}",
    f"write one of: {', '.join(HARDWARE_STATUSES)}",
    shorthand="status",
    make=lambda f, at: Hardware(at.key.strip(), f["status"], f["note"]),
)


def _unique_branches(fields: Fields, at: At) -> bool:
    """No two frameworks of a case share a branch (reported at the second one)."""
    node = fields.nodes.get("branches")
    key_nodes = {k.value: k for k, _ in node.value} if isinstance(node, MappingNode) else {}
    seen: dict[str, tuple[str, str]] = {}
    for key, branch in fields.get("branches", ()):
        folded = name_fold(branch.name)
        if folded in seen:
            first_name, framework = seen[folded]
            how = "" if first_name == branch.name else f" as {first_name!r} (names that differ only in case collide)"
            at.problems.add(
                key_nodes.get(key, node), f"branches.{key}: {branch.name!r} is already the branch of {framework}{how}", "give each framework its own branch"
            )
        seen.setdefault(folded, (branch.name, branch.framework))
    return True


def _case(fields: Fields, at: At) -> Case:
    return Case(
        model=at.ctx.model,
        path=at.ctx.path,
        family=fields["family"],
        status=fields["status"],
        title=fields.get("title"),
        short_title=fields.get("short_title"),
        order=fields.get("order"),
        rollout=fields.get("rollout"),
        trainer=fields.get("trainer"),
        evidence=fields.get("evidence"),
        overhead=fields.get("overhead"),
        features=tuple(feature for _, feature in fields["features"]),
        feature_notes=fields["feature_notes"],
        hardware=tuple(hardware for _, hardware in fields["hardware"]),
        branches=tuple(branch for _, branch in fields["branches"]),
        branches_line=line_of(fields.keys["branches"]) if "branches" in fields.keys else None,
        branch_notes=fields["branch_notes"],
        notes=fields["notes"],
    )


CASE = Record(
    (
        Field("model", _text(_model)),
        Field("title", _text()),
        Field("short_title", _text()),
        Field("order", Number("expected a whole number (the position in the tables), got {value!r}", "write e.g. `order: 10`", integer=True)),
        Field("family", _text(), required=True),
        Field("status", _text(), required=True),
        Field("rollout", _text()),
        Field("trainer", _text()),
        Field("evidence", _EVIDENCE),
        Field("overhead", _OVERHEAD),
        Field(
            "features",
            MapOf(
                _FEATURE,
                "expected a mapping of dimension -> text, got {kind}",
                "write e.g. `attention: MLA, batch-invariant split-KV`",
                key=Key(_nonblank, "{map}: empty dimension name", "name the dimension, e.g. attention"),
            ),
            default=(),
        ),
        Field("feature_notes", _notes("notes"), default=()),
        Field(
            "hardware",
            MapOf(
                _HARDWARE,
                "expected a mapping of hardware -> status, got {kind}",
                "write e.g. `H200: {status: validated, note: ...}`",
                key=Key(_nonblank, "{map}: empty hardware name", "name the hardware, e.g. H200"),
            ),
            default=(),
        ),
        Field(
            "branches",
            MapOf(
                _BRANCH,
                "expected a mapping of framework -> branch, got {kind}",
                "write e.g. `vLLM: vllm/<model>`",
                key=Key(_nonblank, "{map}: empty framework name", "name the framework, e.g. vLLM"),
            ),
            default=(),
        ),
        Field("branch_notes", _notes("notes"), default=()),
        Field("notes", _notes("notes"), default=()),
    ),
    fix="start with `family:` and `status:`",
    check=_unique_branches,
    make=_case,
)


# -- loading --------------------------------------------------------------------------


def parse_case(path: Path, root: Path) -> tuple[Case | None, list[Problem]]:
    """Parse and validate one case file; returns (case or None, problems)."""
    display = display_path(path, root)
    problems = Problems(display)
    model = path.parent.name
    if not MODEL_RE.match(model):
        problems.add(None, f"folder name {model!r} is not a valid model name", "name the folder cases/<model> with [a-z0-9][a-z0-9._-]*")
    case = read_file(path, display, CASE, problems, _Context(root, model, path), root=root, what="case file")
    if problems:
        return None, problems.items
    return case, []


def case_folders(root: Path) -> list[Path]:
    """Folders under ``cases/`` (a case folder may hold no case.yaml yet)."""
    folder = root / CASES_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_cases(root: Path, models: list[str] | None = None) -> tuple[list[Case], list[Problem]]:
    """Every valid case (of *models*, or all), sorted by model, and every problem found."""
    cases: list[Case] = []
    problems: list[Problem] = []
    for folder in case_folders(root):
        if models and folder.name not in models:
            continue
        path = folder / CASE_FILE
        wrong = folder / "case.yml"
        if wrong.is_file():
            p = Problems(display_path(wrong, root))
            p.add(None, "case files use the .yaml extension", "rename it to case.yaml")
            problems.extend(p.items)
        if not path.is_symlink() and not path.exists():  # a FIFO or a link out is read, and refused
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
            details=[
                f"known models: {', '.join(sorted(manifest_models | case_models)) or 'none'}",
                "the files are manifests/<model>.yaml and cases/<model>/case.yaml",
            ],
        )
    problems: list[Located] = []
    manifests: list[Manifest] = []
    if not wanted or any(m in manifest_models for m in wanted):
        try:
            manifests = project.manifests([m for m in wanted if m in manifest_models] or None)
        except ManifestError as err:
            problems.extend(err.problems)
    found, case_problems = load_cases(root, wanted or None)
    problems.extend(case_problems)
    for case in found:
        if case.branches and case.model in manifest_models:
            p = Problems(display_path(case.path, root))
            p.add(
                case.branches_line,
                f"branches: model {case.model!r} has a manifest (manifests/{case.model}.yaml); its branches come from there",
                "remove `branches:` (it is for models whose manifest is not in this repository)",
            )
            problems.extend(p.items)
    if problems:
        raise CaseError(problems)
    return manifests, found


def model_titles(manifests: list[Manifest], found: list[Case]) -> dict[str, str]:
    """Display name per model: the case's title, else the manifest's, else the model."""
    titles = {m.model: m.title for m in manifests}
    for case in found:
        titles[case.model] = case.title or titles.get(case.model) or case.model
    return titles


def short_titles(manifests: list[Manifest], found: list[Case]) -> dict[str, str]:
    """Column-header name per model: the case's short title, else its display name."""
    titles = model_titles(manifests, found)
    for case in found:
        if case.short_title:
            titles[case.model] = case.short_title
    return titles


def model_order(models: set[str], found: list[Case]) -> list[str]:
    """The tables' order: cases with ``order`` first (lower first, ties by name), then the rest by name."""
    order = {c.model: c.order for c in found if c.order is not None}
    return sorted(models, key=lambda m: (m not in order, order.get(m, 0), m))
