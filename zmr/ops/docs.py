"""README generation: ``zmr docs [--check]``.

The README is the authors' text, except for sections between marker lines::

    <!-- zmr:begin support-matrix -->
    (generated)
    <!-- zmr:end support-matrix -->

Every name in ``SECTIONS`` must appear exactly once as a begin/end pair; a
marker must be a line of its own (markers inside fenced code blocks are
text). Everything outside the pairs is kept byte for byte.

Inputs, and nothing else (no clock, no git state, no cache, no network):

- manifests (``manifests/<model>.yaml``) and cases (``cases/<model>/case.yaml``);
  a model may have either or both. A case names the code branches of a model
  whose manifest is not here (``branches:``); a manifest's come from it;
- ``release.url`` in ``zmr.yaml`` for links to branches and to the "changes"
  view of a two-commit branch (``<url>/commit/<branch>``: the branch's tip,
  its changes commit). The table shows no commit ids: they are a pure
  function of the inputs, but computing them needs every upstream fetched,
  and ``zmr verify`` already checks them; the README stays true on a fresh
  clone with nothing built or fetched;
- the smoke evidence ``zmr smoke --record`` wrote to
  ``cases/<model>/evidence/smoke-*.json``; absent files and missing fields
  are shown as "—".

Models are in the cases' ``order`` (then by name); within a model, components,
features and hardware keep the order of their files. Every fact, footnote
and note comes from the case data; the code adds only headers and layout.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote

from zmr.infra.errors import DocsError, ZmrError
from zmr.infra.files import MAX_JSON_BYTES, FileRefused, atomic_write, parse_json, read_repo_file
from zmr.model.cases import Case, check_project, model_order, model_titles, short_titles
from zmr.model.yamlnodes import Problems
from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Component, Manifest
    from zmr.model.project import Project

SECTIONS = ("support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes")
README = "README.md"
EVIDENCE_GLOB = "smoke-*.json"
NONE = "—"

_MARKER_RE = re.compile(r"^ {0,3}<!--\s*zmr:(\S+)\s*(.*?)\s*-->\s*$")
_MARKER_START_RE = re.compile(r"^ {0,3}<!--\s*zmr:")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_GITHUB_RE = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass
class Inputs:
    """Everything the sections are rendered from."""

    root: Path
    manifests: list[Manifest]
    cases: list[Case]
    titles: dict[str, str]
    short: dict[str, str]  # column-header names
    evidence: dict[str, list[tuple[str, dict[str, Any]]]]  # model -> [(file name, record)]
    url: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        """Every model with a manifest or a case, in the tables' order."""
        return model_order({m.model for m in self.manifests} | {c.model for c in self.cases}, self.cases)

    def ordered_cases(self) -> list[Case]:
        cases = {c.model: c for c in self.cases}
        return [cases[m] for m in self.models if m in cases]


class DocsJson(TypedDict):
    """The README, whether this was ``--check`` (nothing written), whether it is up to date, the sections that change,
    whether it was written, and the warnings."""

    readme: str
    check: bool
    up_to_date: bool
    changed: list[str]
    written: bool
    warnings: list[str]


@dataclass
class Outcome(Report):
    """What ``zmr docs`` found: the README before and after, and the sections that changed; *check*: ``--check`` was
    given (nothing is written, and a stale README fails the check)."""

    path: Path
    display: str
    old: str
    new: str
    changed: list[str]
    warnings: list[str]
    check: bool = False

    @property
    def stale(self) -> bool:
        return self.old != self.new

    def failed(self) -> bool:
        """The check failed: the README is out of date (`zmr docs --check` exits 1)."""
        return self.check and self.stale

    def reason(self) -> str:
        """Why it failed, in one line ('' when it did not)."""
        if not self.failed():
            return ""
        return f"{self.display} is out of date: section{'s' if len(self.changed) != 1 else ''} {', '.join(self.changed) or '(layout)'} would change"

    def to_json(self) -> DocsJson:
        """The report of ``zmr docs --json``."""
        return {
            "readme": self.display,
            "check": self.check,
            "up_to_date": not self.stale,
            "changed": self.changed,
            "written": self.stale and not self.check,
            "warnings": self.warnings,
        }

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.old.splitlines(keepends=True), self.new.splitlines(keepends=True), f"a/{self.display}", f"b/{self.display}"))


# -- gathering inputs ---------------------------------------------------------------------


def gather(project: Project) -> Inputs:
    manifests, found = check_project(project)
    manifests = sorted(manifests, key=lambda m: m.model)
    warnings: list[str] = []
    evidence = {}
    models = {m.model for m in manifests} | {c.model for c in found}
    folder = project.root / "cases"
    if folder.is_dir():
        models |= {p.name for p in folder.iterdir() if (p / "evidence").is_dir()}
    for model in sorted(models):
        records = read_evidence(project.root / "cases" / model / "evidence", warnings, project.root)
        if records:
            evidence[model] = records
    titles, short = model_titles(manifests, found), short_titles(manifests, found)
    return Inputs(project.root, manifests, found, titles, short, evidence, _base_url(project.settings.release_url), warnings)


def _base_url(url: str | None) -> str | None:
    if not url:
        return None
    url = url.strip().rstrip("/")
    return url.removesuffix(".git")


def read_evidence(folder: Path, warnings: list[str], root: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The smoke records in *folder*, by file name; unreadable ones are skipped with a warning."""
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob(EVIDENCE_GLOB)):
        shown = path.relative_to(root).as_posix() if root is not None and path.is_relative_to(root) else str(path)
        try:
            data = parse_json(read_repo_file(root, path, limit=MAX_JSON_BYTES, what="smoke record", display=shown).decode("utf-8"))
        except FileRefused as refused:
            warnings.append(f"{shown}: {refused.reason}; left out of the evidence table")
            continue
        except (UnicodeDecodeError, ValueError) as exc:
            warnings.append(f"{shown}: not readable as JSON ({exc.__class__.__name__}); left out of the evidence table")
            continue
        if not isinstance(data, dict):
            warnings.append(f"{shown}: not a smoke record (expected a JSON object); left out of the evidence table")
            continue
        records.append((path.name, data))
    return records


# -- rendering ----------------------------------------------------------------------------


def cell(text: Any) -> str:
    """A table cell: whitespace folded, pipes escaped, empty shown as —."""
    if text is None:
        return NONE
    value = " ".join(str(text).split())
    if not value:
        return NONE
    # A pipe after an even run of backslashes (none, or escaped backslashes) would end the cell: escape it.
    return re.sub(r"(?<!\\)((?:\\\\)*)\|", r"\1\\|", value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)


def _code(text: str) -> str:
    """A code span that holds *text* whatever backticks it has: fenced by a longer run than any inside."""
    text = " ".join(text.split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"


# Characters that would make plain text (a title, a table key) open a link, an emphasis, a code span or a tag.
_PLAIN_SPECIALS = re.compile(r"([\\`*_\[\]<>])")


def plain(text: str) -> str:
    """*text* shown as written: Markdown's special characters escaped."""
    return _PLAIN_SPECIALS.sub(r"\\\1", text)


# A link destination keeps only characters that cannot end it early or leave its table cell.
_URL_UNSAFE = re.compile(r"[^A-Za-z0-9\-._~:/?#@!$&'*+,;=%]")


def safe_url(url: str) -> str:
    """*url* for a Markdown link: characters outside RFC 3986's set (spaces, parentheses, '<', '|') percent-encoded."""
    return _URL_UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode("utf-8")), url)


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({safe_url(url)})" if url else text


def _footnote_label(kind: str, model: str) -> str:
    return f"{kind}-{re.sub(r'[^A-Za-z0-9_-]', '-', model)}"


def _model_cell(inputs: Inputs, model: str) -> str:
    title = plain(inputs.titles.get(model, model))
    readme = inputs.root / "cases" / model / "README.md"
    return _link(title, f"cases/{model}/README.md" if readme.is_file() else None)


def _links(links: Iterable[Any]) -> str:
    return ", ".join(_link(plain(link.title), link.url) for link in links)


def _evidence_cell(case: Case) -> str | None:
    evidence = case.evidence
    if evidence is None:
        return None
    parts = [evidence.text] if evidence.text else []
    for run in evidence.runs:
        where = "; ".join(p for p in (run.hardware, _links(run.links)) if p)
        parts.append(f"{run.text} ({where})" if where else run.text)
    text, links = "; ".join(parts), _links(evidence.links)
    return f"{text} ({links})" if text and links else text or links


def _notes_below(inputs: Inputs, notes: Iterable[tuple[str, str]]) -> str:
    """Notes under a table: one item per (model, note), the model's short name first."""
    lines = [f"- **{cell(plain(inputs.short.get(model, model)))}**: {' '.join(note.split())}" for model, note in notes]
    return "\n\n" + "\n".join(lines) if lines else ""


def render_support_matrix(inputs: Inputs) -> str:
    cases = {c.model: c for c in inputs.cases}
    if not inputs.models:
        return "_No models yet._"
    rows, notes = [], []
    for model in inputs.models:
        case = cases.get(model)
        if case is None:
            rows.append([_model_cell(inputs, model), None, f"no case yet ({_code(f'cases/{model}/case.yaml')})", None, None, None, None])
            continue
        overhead = None
        if case.overhead is not None:
            overhead = case.overhead.figure
            if case.overhead.footnote:
                label = _footnote_label("overhead", model)
                overhead += f"[^{label}]"
                notes.append(f"[^{label}]: {' '.join(' '.join(case.overhead.footnote).split())}")
        rows.append([_model_cell(inputs, model), case.family, case.status, case.rollout, case.trainer, _evidence_cell(case), overhead])
    text = table(["Model", "Family", "Status", "Rollout", "Trainer", "Evidence", "Rollout overhead"], rows)
    return text + ("\n\n" + "\n".join(notes) if notes else "")


FEATURE_MARKS = {"supported": "✅", "experimental": "🧪"}


def render_key_features(inputs: Inputs) -> str:
    cases = [c for c in inputs.ordered_cases() if c.features]
    if not cases:
        return "_No key features recorded yet (`features:` in `cases/<model>/case.yaml`)._"
    dimensions: list[str] = []
    for case in cases:
        for feature in case.features:
            if feature.name not in dimensions:
                dimensions.append(feature.name)
    values = {c.model: {f.name: f for f in c.features} for c in cases}

    def shown(model: str, name: str) -> str | None:
        feature = values[model].get(name)
        if feature is None:
            return None
        return f"{FEATURE_MARKS[feature.status]} {feature.text}" if feature.status else feature.text

    rows = [[plain(name), *[shown(c.model, name) for c in cases]] for name in dimensions]
    text = table(["Dimension", *[cell(plain(inputs.short.get(c.model, c.model))) for c in cases]], rows)
    return text + _notes_below(inputs, ((c.model, note) for c in inputs.ordered_cases() for note in c.feature_notes))


HARDWARE_MARKS = {"validated": "✅ validated"}


def render_hardware(inputs: Inputs) -> str:
    cases = [c for c in inputs.ordered_cases() if c.hardware]
    if not cases:
        return "_No hardware validation recorded yet (`hardware:` in `cases/<model>/case.yaml`)._"
    names: list[str] = []
    for case in cases:
        for hw in case.hardware:
            if hw.name not in names:
                names.append(hw.name)
    values = {c.model: {hw.name: hw for hw in c.hardware} for c in cases}
    rows = []
    for name in names:
        row: list[Any] = [plain(name)]
        for case in cases:
            entry = values[case.model].get(name)
            row.append(None if entry is None else HARDWARE_MARKS.get(entry.status, entry.status))
        rows.append(row)
    text = table(["Hardware", *[cell(plain(inputs.short.get(c.model, c.model))) for c in cases]], rows)
    notes = []
    for name in names:
        runs = [
            f"_{cell(plain(inputs.short.get(c.model, c.model)))}_ {' '.join(values[c.model][name].note.split())}"
            for c in cases
            if name in values[c.model] and values[c.model][name].note
        ]
        if runs:
            notes.append(f"- **{cell(plain(name))}**: " + "; ".join(runs))
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def _upstream_cell(comp: Component) -> str:
    match = _GITHUB_RE.match(comp.upstream)
    if match:
        base = f"https://github.com/{match.group(1)}/{match.group(2)}"
        return _link(f"{match.group(1)}/{match.group(2)}", base) + " at " + _link(_code(comp.commit[:12]), f"{base}/commit/{comp.commit}")
    return f"{_code(comp.upstream)} at {_code(comp.commit[:12])}"


def _branch_cell(url: str | None, branch: str, layout: str) -> str:
    """The branch, linked to its tree; a two-commit branch also links its tip, the changes commit."""
    if not url:
        return _code(branch)
    ref = quote(branch, safe="/")
    text = _link(_code(branch), f"{url}/tree/{ref}")
    return text + f" ([changes]({url}/commit/{ref}))" if layout == "two-commit" else text


def render_code_branches(inputs: Inputs) -> str:
    if not inputs.models:
        return "_No models yet._"
    manifests = {m.model: m for m in inputs.manifests}
    cases = {c.model: c for c in inputs.cases}
    url = inputs.url
    rows: list[list[str | None]] = []
    for model in inputs.models:
        name = plain(inputs.short.get(model, model))
        manifest = manifests.get(model)
        if manifest is not None:
            for comp in manifest.components.values():
                rows.append([name, _code(comp.key), _branch_cell(url, comp.branch, comp.release), comp.release, _upstream_cell(comp)])
            continue
        branches = cases[model].branches
        for branch in branches:
            rows.append([name, plain(branch.framework), _branch_cell(url, branch.name, branch.layout), branch.layout, "no manifest yet"])
        if not branches:
            rows.append([name, None, None, None, "no manifest yet"])
    text = table(["Model", "Framework", "Branch", "Layout", "Pinned upstream"], rows)
    return text + _notes_below(inputs, ((c.model, note) for c in inputs.ordered_cases() for note in c.branch_notes))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def _figure(value: Any) -> str | None:
    number = _number(value)
    if number is None:
        return None
    if number == 0:
        return "0"
    return f"{number:.3g}"


def _count(value: Any) -> str | None:
    number = _number(value)
    if number is None or number != int(number):
        return None
    return f"{int(number):,}"


def _bitwise(metrics: dict[str, Any], entry: dict[str, Any]) -> str | None:
    tokens, equal = _number(metrics.get("tokens")), metrics.get("bitwise_equal")
    count = _number(equal)
    if count is not None and tokens:
        if count == tokens:
            return f"{int(count):,} (100%)"
        percent = math.floor(10000 * count / tokens) / 100
        return f"{int(count):,} ({percent:.2f}%)"
    for verdict in (equal, entry.get("bitwise_equal")):
        if isinstance(verdict, bool):
            return "yes" if verdict else "no"
    return None


def _trees(record: dict[str, Any], url: str | None) -> str | None:
    commits = record.get("commits")
    if not isinstance(commits, dict):
        trees = record.get("trees")
        commits = {}
        if isinstance(trees, list):
            for tree in trees:
                if isinstance(tree, dict) and isinstance(tree.get("component"), str) and isinstance(tree.get("commit"), str):
                    commits[tree["component"]] = tree["commit"]
    parts = []
    for component in sorted(k for k in commits if isinstance(k, str)):
        sha = commits[component]
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{7,64}", sha):
            continue
        parts.append(f"{component} " + _link(_code(sha[:12]), f"{url}/commit/{sha}" if url and len(sha) >= 40 else None))
    return ", ".join(parts) or None


def _run(record: dict[str, Any]) -> str | None:
    start, duration = record.get("start"), _number(record.get("duration"))
    parts = []
    if isinstance(start, str) and re.match(r"\d{4}-\d{2}-\d{2}", start):
        parts.append(start[:10])
    if duration is not None:
        parts.append(f"{duration:.1f} s")
    return ", ".join(parts) or None


def _report_label(report: dict[str, Any], test: str) -> str:
    """A mismatch report's name without the test id and the .mismatch.json suffix."""
    name = report.get("file")
    if not isinstance(name, str) or not name:
        return "report"
    for prefix in (test + "/", test + "."):
        name = name.removeprefix(prefix)
    name = name.removesuffix(".mismatch.json")
    return name or "report"


def render_evidence(inputs: Inputs) -> str:
    rows = []
    for model in model_order(set(inputs.evidence), inputs.cases):
        for name, record in inputs.evidence[model]:
            test = record.get("id") or record.get("test") or name[len("smoke-") : -len(".json")]
            status = plain(record["status"]) if isinstance(record.get("status"), str) else None
            reports = record.get("mismatch")
            if isinstance(reports, dict):
                reports = [reports]
            reports = [r for r in reports if isinstance(r, dict)] if isinstance(reports, list) else []
            trees = _trees(record, inputs.url)
            if not reports:
                rows.append([_code(model), _code(str(test)), status, trees, None, None, None, None, _run(record)])
            for report in reports:
                metrics = report.get("overall") if isinstance(report.get("overall"), dict) else report
                label = _code(str(test))
                if len(reports) > 1:
                    label += f" ({plain(_report_label(report, str(test)))})"
                rows.append(
                    [
                        _code(model),
                        label,
                        status,
                        trees,
                        _count(metrics.get("tokens")),
                        _bitwise(metrics, report),
                        _figure(metrics.get("max_abs_diff")),
                        _figure(metrics.get("k3")),
                        _run(record),
                    ]
                )
    if not rows:
        return "_No smoke-test evidence recorded yet (`zmr smoke --record`)._"
    return table(["Model", "Test", "Status", "Trees", "Tokens", "Bitwise equal", "Max \\|Δ log-prob\\|", "k3", "Run"], rows)


def render_notes(inputs: Inputs) -> str:
    lines = []
    for case in inputs.ordered_cases():
        for note in case.notes:
            lines.append(f"- **{cell(plain(inputs.titles.get(case.model, case.model)))}**: {' '.join(note.split())}")
    return "\n".join(lines) if lines else "_No notes._"


RENDERERS = {
    "support-matrix": render_support_matrix,
    "key-features": render_key_features,
    "hardware": render_hardware,
    "code-branches": render_code_branches,
    "evidence": render_evidence,
    "notes": render_notes,
}
assert tuple(RENDERERS) == SECTIONS


def render(inputs: Inputs) -> dict[str, str]:
    return {name: RENDERERS[name](inputs) for name in SECTIONS}


# -- the README ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    name: str
    begin: int  # index of the begin line
    end: int  # index of the end line


def find_sections(lines: Sequence[str], display: str) -> dict[str, Span]:
    """The marker pairs of a README (lines with their endings); every problem at once."""
    problems = Problems(display)
    spans: dict[str, Span] = {}
    open_name: str | None = None
    open_at = 0
    duplicate = False
    mentioned: set[str] = set()
    fence: str | None = None
    for index, line in enumerate(lines):
        number = index + 1
        fence_match = _FENCE_RE.match(line)
        if fence_match:
            mark = fence_match.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark) :].strip():
                fence = None
            continue
        if fence is not None or not _MARKER_START_RE.match(line):
            continue
        match = _MARKER_RE.match(line.rstrip("\r\n"))
        if not match or match.group(1) not in ("begin", "end") or not match.group(2) or " " in match.group(2):
            problems.add(number, f"malformed marker {line.strip()!r}", "write <!-- zmr:begin NAME --> or <!-- zmr:end NAME --> on a line of its own")
            continue
        verb, name = match.group(1), match.group(2)
        if name not in SECTIONS:
            close = difflib.get_close_matches(name, SECTIONS, n=1)
            problems.add(number, f"unknown section {name!r}", f"did you mean {close[0]!r}?" if close else f"known sections: {', '.join(SECTIONS)}")
            continue
        if verb == "begin":
            if open_name is not None:
                problems.add(
                    open_at + 1,
                    f"section {open_name!r} is not closed before section {name!r} begins (line {number})",
                    f"add <!-- zmr:end {open_name} --> before line {number}",
                )
                mentioned.add(open_name)
            duplicate = name in spans
            if duplicate:
                problems.add(number, f"section {name!r} appears twice (first at line {spans[name].begin + 1})", "keep one of them")
            open_name, open_at = name, index
        elif open_name is None:
            problems.add(number, f"<!-- zmr:end {name} --> without a begin", f"add <!-- zmr:begin {name} --> before it, or remove it")
            mentioned.add(name)
        elif name != open_name:
            problems.add(number, f"<!-- zmr:end {name} --> closes section {open_name!r} (begun at line {open_at + 1})", f"write <!-- zmr:end {open_name} -->")
            mentioned.update((name, open_name))
            open_name = None
        else:
            if not duplicate:
                spans[name] = Span(name, open_at, index)
            open_name = None
    if open_name is not None:
        problems.add(open_at + 1, f"section {open_name!r} is not closed", f"add <!-- zmr:end {open_name} --> after it")
        mentioned.add(open_name)
    for name in SECTIONS:
        if name not in spans and name not in mentioned:
            problems.add(None, f"section {name!r} is missing", f"add the lines <!-- zmr:begin {name} --> and <!-- zmr:end {name} --> where it should go")
    if problems:
        raise DocsError(problems.items)
    return spans


def update(text: str, sections: dict[str, str], display: str = README) -> tuple[str, list[str]]:
    """*text* with each marked section's body replaced; returns (new text, changed section names)."""
    lines = text.splitlines(keepends=True)
    spans = find_sections(lines, display)
    out: list[str] = []
    changed: list[str] = []
    position = 0
    for span in sorted(spans.values(), key=lambda s: s.begin):
        out.extend(lines[position : span.begin + 1])
        begin = lines[span.begin]
        if not begin.endswith("\n"):
            begin += "\n"
            out[-1] = begin
        body = "\n" + sections[span.name].rstrip("\n") + "\n\n"
        if "".join(lines[span.begin + 1 : span.end]) != body:
            changed.append(span.name)
        out.append(body)
        position = span.end
    out.extend(lines[position:])
    return "".join(out), changed


def readme_path(project: Project, readme: Path | None) -> tuple[Path, str]:
    path = readme if readme is not None else project.root / README
    path = path if path.is_absolute() else Path.cwd() / path
    try:
        display = path.resolve().relative_to(project.root.resolve()).as_posix()
    except ValueError:
        display = str(path)
    return path, display


def generate(project: Project, readme: Path | None = None, check: bool = False) -> Outcome:
    """Render every section and splice it into the README (nothing written)."""
    path, display = readme_path(project, readme)
    _refuse_unless_regular(path, display)
    try:
        old = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ZmrError(f"{display}: no such file", details=[f"create it with the marker lines of each section: {', '.join(SECTIONS)}"]) from None
    except UnicodeDecodeError:
        raise ZmrError(f"{display}: not valid UTF-8", details=["save it as UTF-8"]) from None
    find_sections(old.splitlines(keepends=True), display)  # marker errors before any other work
    inputs = gather(project)
    new, changed = update(old, render(inputs), display)
    return Outcome(path, display, old, new, changed, inputs.warnings, check)


def _refuse_unless_regular(path: Path, display: str) -> None:
    """The README is replaced by a rename: a link (its target would be rewritten) or a device is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise ZmrError(f"{display}: is a symbolic link; zmr docs only rewrites a regular file", details=["replace the link with the file itself"])
    if not stat.S_ISREG(mode):
        raise ZmrError(f"{display}: not a regular file", details=["point --readme at the README file"])


def write(outcome: Outcome) -> None:
    """Replace the README (temp file then rename, mode kept) when it changed; a link or device there is refused."""
    if not outcome.stale:
        return
    _refuse_unless_regular(outcome.path, outcome.display)
    atomic_write(outcome.path, outcome.new.encode("utf-8"))
