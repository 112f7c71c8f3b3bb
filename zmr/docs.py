"""README generation: ``zmr docs [--check]``.

The README is the authors' text, except for sections between marker lines::

    <!-- zmr:begin support-matrix -->
    (generated)
    <!-- zmr:end support-matrix -->

Every name in ``SECTIONS`` must appear exactly once as a begin/end pair; a
marker must be a line of its own (markers inside fenced code blocks are
text). Everything outside the pairs is kept byte for byte.

Inputs, and nothing else (no clock, no machine state besides these):

- manifests (``manifests/<model>.yaml``) and cases (``cases/<model>/case.yaml``);
  a model may have either or both;
- the local release branches, for the commit ids of the code-branch table:
  a branch whose trailers (``Zmr-Upstream-Commit``, ``Zmr-Series``) do not
  match the current pin and series is stale and shown as not built. Nothing
  is computed or fetched: run ``zmr build`` first to get the ids (CI does);
- ``release.url`` in ``zmr.yaml`` for links to branches, commits and the
  "changes" view (``<url>/compare/<snapshot>...<changes>``);
- the smoke evidence ``zmr smoke --record`` wrote to
  ``cases/<model>/evidence/smoke-*.json``; absent files and missing fields
  are shown as "—".

Models are sorted by name; within a model, components, features and
hardware keep the order of their files. Footnotes (the overhead's) come from
the case data.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence
from urllib.parse import quote

from zmr.cases import Case, check_project, model_titles
from zmr.errors import CheckFailed, DocsError, ZmrError
from zmr.files import atomic_write
from zmr.yamlnodes import Problems

if TYPE_CHECKING:  # pragma: no cover
    from zmr import git
    from zmr.manifest import Component, Manifest
    from zmr.project import Project

SECTIONS = ("support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes")
README = "README.md"
EVIDENCE_GLOB = "smoke-*.json"
NONE = "—"

_MARKER_RE = re.compile(r"^ {0,3}<!--\s*zmr:(\S+)\s*(.*?)\s*-->\s*$")
_MARKER_START_RE = re.compile(r"^ {0,3}<!--\s*zmr:")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_GITHUB_RE = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class BranchState:
    """A component's local release branch as the docs show it."""

    component: "Component"
    tip: str | None = None  # None: not built (or stale)
    snapshot: str | None = None  # the root commit of a two-commit branch


@dataclass
class Inputs:
    """Everything the sections are rendered from."""

    root: Path
    manifests: list["Manifest"]
    cases: list[Case]
    titles: dict[str, str]
    branches: dict[tuple[str, str], BranchState]
    evidence: dict[str, list[tuple[str, dict]]]  # model -> [(file name, record)]
    url: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        return sorted({m.model for m in self.manifests} | {c.model for c in self.cases})


@dataclass
class Outcome:
    """What ``zmr docs`` found: the README before and after, and the sections that changed."""

    path: Path
    display: str
    old: str
    new: str
    changed: list[str]
    warnings: list[str]

    @property
    def stale(self) -> bool:
        return self.old != self.new

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(self.old.splitlines(keepends=True), self.new.splitlines(keepends=True), f"a/{self.display}", f"b/{self.display}")
        )


# -- gathering inputs ---------------------------------------------------------------------


def gather(project: "Project") -> Inputs:
    manifests, found = check_project(project)
    manifests = sorted(manifests, key=lambda m: m.model)
    warnings: list[str] = []
    branches = _branches(project, manifests, warnings)
    evidence = {}
    models = {m.model for m in manifests} | {c.model for c in found}
    folder = project.root / "cases"
    if folder.is_dir():
        models |= {p.name for p in folder.iterdir() if (p / "evidence").is_dir()}
    for model in sorted(models):
        records = read_evidence(project.root / "cases" / model / "evidence", warnings, project.root)
        if records:
            evidence[model] = records
    return Inputs(project.root, manifests, found, model_titles(manifests, found), branches, evidence, _base_url(project.settings.release_url), warnings)


def _base_url(url: str | None) -> str | None:
    if not url:
        return None
    url = url.strip().rstrip("/")
    return url[: -len(".git")] if url.endswith(".git") else url


def _branches(project: "Project", manifests: Sequence["Manifest"], warnings: list[str]) -> dict[tuple[str, str], BranchState]:
    """Tip (and snapshot) of each component's local branch, when it matches the current inputs."""
    from zmr.release import TRAILER_SERIES, TRAILER_UPSTREAM_COMMIT
    from zmr.series import read_series

    states: dict[tuple[str, str], BranchState] = {}
    repo: git.Repo | None = None
    refs: dict[str, str] = {}
    if (project.root / ".git").exists():
        repo = project.repo
        refs = repo.refs("refs/heads/")
    for manifest in manifests:
        for comp in manifest.components.values():
            key = (comp.model, comp.key)
            tip = refs.get(f"refs/heads/{comp.branch}")
            states[key] = BranchState(comp)
            if tip is None or repo is None:
                warnings.append(f"branch {comp.branch} is not built; shown without commit ids (run `zmr build {comp.model}` first)")
                continue
            info = repo.commit_info(tip)
            trailers = info.trailers()
            digest = read_series(project.root / comp.patches, comp.patches).digest()
            if trailers.get(TRAILER_SERIES) != digest or trailers.get(TRAILER_UPSTREAM_COMMIT) != comp.commit:
                warnings.append(f"branch {comp.branch} was built from another pin or series; shown as not built (run `zmr build {comp.model}`)")
                continue
            if comp.release == "snapshot":
                if info.parents:
                    warnings.append(f"branch {comp.branch} is not a single root commit; shown as not built (run `zmr verify {comp.model}`)")
                    continue
                states[key] = BranchState(comp, tip, None)
                continue
            parent = repo.commit_info(info.parents[0]) if len(info.parents) == 1 else None
            if parent is None or parent.parents:
                warnings.append(f"branch {comp.branch} does not have the two-commit layout; shown as not built (run `zmr verify {comp.model}`)")
                continue
            states[key] = BranchState(comp, tip, parent.oid)
    return states


def read_evidence(folder: Path, warnings: list[str], root: Path | None = None) -> list[tuple[str, dict]]:
    """The smoke records in *folder*, by file name; unreadable ones are skipped with a warning."""
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob(EVIDENCE_GLOB)):
        shown = path.relative_to(root).as_posix() if root is not None and path.is_relative_to(root) else str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
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
    return re.sub(r"(?<!\\)\|", r"\\|", value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url else text


def _footnote_label(kind: str, model: str) -> str:
    return f"{kind}-{re.sub(r'[^A-Za-z0-9_-]', '-', model)}"


def _model_cell(inputs: Inputs, model: str) -> str:
    title = inputs.titles.get(model, model)
    readme = inputs.root / "cases" / model / "README.md"
    return _link(title, f"cases/{model}/README.md" if readme.is_file() else None)


def render_support_matrix(inputs: Inputs) -> str:
    cases = {c.model: c for c in inputs.cases}
    if not inputs.models:
        return "_No models yet._"
    rows, notes = [], []
    for model in inputs.models:
        case = cases.get(model)
        if case is None:
            rows.append([_model_cell(inputs, model), None, None, None, None, None])
            continue
        evidence = None
        if case.evidence is not None:
            links = ", ".join(_link(link.title, link.url) for link in case.evidence.links)
            text = case.evidence.text
            evidence = f"{text} ({links})" if text and links else text or links
        overhead = None
        if case.overhead is not None:
            overhead = case.overhead.figure
            if case.overhead.footnote:
                label = _footnote_label("overhead", model)
                overhead += f"[^{label}]"
                notes.append(f"[^{label}]: {' '.join(case.overhead.footnote.split())}")
        rows.append([_model_cell(inputs, model), case.family, case.status, case.trainer, evidence, overhead])
    text = table(["Model", "Family", "Status", "Trainer", "Evidence", "Rollout overhead"], rows)
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def render_key_features(inputs: Inputs) -> str:
    cases = [c for c in sorted(inputs.cases, key=lambda c: c.model) if c.features]
    if not cases:
        return "_No key features recorded yet (`features:` in `cases/<model>/case.yaml`)._"
    dimensions: list[str] = []
    for case in cases:
        for name, _ in case.features:
            if name not in dimensions:
                dimensions.append(name)
    values = {c.model: dict(c.features) for c in cases}
    rows = [[name, *[values[c.model].get(name) for c in cases]] for name in dimensions]
    return table(["Feature", *[cell(inputs.titles.get(c.model, c.model)) for c in cases]], rows)


def render_hardware(inputs: Inputs) -> str:
    rows = []
    for case in sorted(inputs.cases, key=lambda c: c.model):
        for hw in case.hardware:
            rows.append([inputs.titles.get(case.model, case.model), hw.name, hw.status, hw.note or None])
    if not rows:
        return "_No hardware validation recorded yet (`hardware:` in `cases/<model>/case.yaml`)._"
    return table(["Model", "Hardware", "Status", "Notes"], rows)


def _upstream_cells(comp: "Component") -> tuple[str, str]:
    match = _GITHUB_RE.match(comp.upstream)
    if match:
        base = f"https://github.com/{match.group(1)}/{match.group(2)}"
        return _link(f"{match.group(1)}/{match.group(2)}", base), _link(_code(comp.commit[:12]), f"{base}/commit/{comp.commit}")
    return _code(comp.upstream), _code(comp.commit[:12])


def render_code_branches(inputs: Inputs) -> str:
    if not inputs.manifests:
        return "_No manifests yet._"
    url = inputs.url
    rows = []
    for manifest in inputs.manifests:
        for comp in manifest.components.values():
            state = inputs.branches.get((comp.model, comp.key), BranchState(comp))
            upstream, pin = _upstream_cells(comp)
            if state.tip is None:
                branch, changes = _code(comp.branch), "not built"
            else:
                branch = _link(_code(comp.branch), f"{url}/tree/{quote(comp.branch, safe='/')}" if url else None)
                if state.snapshot is not None:
                    changes = _link(_code(f"{state.snapshot[:12]}...{state.tip[:12]}"), f"{url}/compare/{state.snapshot}...{state.tip}" if url else None)
                else:
                    changes = _link(_code(state.tip[:12]), f"{url}/commit/{state.tip}" if url else None)
            rows.append([_code(comp.model), _code(comp.key), upstream, pin, branch, changes])
    return table(["Model", "Component", "Upstream", "Pin", "Branch", "Changes"], rows)


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


def _bitwise(metrics: dict, entry: dict) -> str | None:
    tokens, equal = _number(metrics.get("tokens")), metrics.get("bitwise_equal")
    if _number(equal) is not None and tokens:
        if equal == tokens:
            return f"{int(equal):,} (100%)"
        percent = math.floor(10000 * equal / tokens) / 100
        return f"{int(equal):,} ({percent:.2f}%)"
    for verdict in (equal, entry.get("bitwise_equal")):
        if isinstance(verdict, bool):
            return "yes" if verdict else "no"
    return None


def _trees(record: dict, url: str | None) -> str | None:
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


def _run(record: dict) -> str | None:
    start, duration = record.get("start"), _number(record.get("duration"))
    parts = []
    if isinstance(start, str) and re.match(r"\d{4}-\d{2}-\d{2}", start):
        parts.append(start[:10])
    if duration is not None:
        parts.append(f"{duration:.1f} s")
    return ", ".join(parts) or None


def _report_label(report: dict, test: str) -> str:
    """A mismatch report's name without the test id and the .mismatch.json suffix."""
    name = report.get("file")
    if not isinstance(name, str) or not name:
        return "report"
    for prefix in (test + "/", test + "."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = name.removesuffix(".mismatch.json")
    return name or "report"


def render_evidence(inputs: Inputs) -> str:
    rows = []
    for model in sorted(inputs.evidence):
        for name, record in inputs.evidence[model]:
            test = record.get("id") or record.get("test") or name[len("smoke-") : -len(".json")]
            status = record.get("status") if isinstance(record.get("status"), str) else None
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
                    label += f" ({_report_label(report, str(test))})"
                rows.append([_code(model), label, status, trees, _count(metrics.get("tokens")), _bitwise(metrics, report), _figure(metrics.get("max_abs_diff")), _figure(metrics.get("k3")), _run(record)])
    if not rows:
        return "_No smoke-test evidence recorded yet (`zmr smoke --record`)._"
    return table(["Model", "Test", "Status", "Trees", "Tokens", "Bitwise equal", "Max \\|Δ log-prob\\|", "k3", "Run"], rows)


def render_notes(inputs: Inputs) -> str:
    lines = []
    for case in sorted(inputs.cases, key=lambda c: c.model):
        for note in case.notes:
            lines.append(f"- **{cell(inputs.titles.get(case.model, case.model))}**: {' '.join(note.split())}")
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
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):].strip():
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
                problems.add(open_at + 1, f"section {open_name!r} is not closed before section {name!r} begins (line {number})", f"add <!-- zmr:end {open_name} --> before line {number}")
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


def readme_path(project: "Project", readme: Path | None) -> tuple[Path, str]:
    path = readme if readme is not None else project.root / README
    path = path if path.is_absolute() else Path.cwd() / path
    try:
        display = path.resolve().relative_to(project.root.resolve()).as_posix()
    except ValueError:
        display = str(path)
    return path, display


def generate(project: "Project", readme: Path | None = None) -> Outcome:
    """Render every section and splice it into the README (nothing written)."""
    path, display = readme_path(project, readme)
    try:
        old = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ZmrError(f"{display}: no such file", details=[f"create it with the marker lines of each section: {', '.join(SECTIONS)}"]) from None
    except UnicodeDecodeError:
        raise ZmrError(f"{display}: not valid UTF-8", details=["save it as UTF-8"]) from None
    find_sections(old.splitlines(keepends=True), display)  # marker errors before any other work
    inputs = gather(project)
    new, changed = update(old, render(inputs), display)
    return Outcome(path, display, old, new, changed, inputs.warnings)


def write(outcome: Outcome) -> None:
    """Replace the README (temp file then rename, mode kept) when it changed."""
    if not outcome.stale:
        return
    atomic_write(outcome.path, outcome.new.encode("utf-8"))


def stale_error(outcome: Outcome) -> CheckFailed:
    return CheckFailed(
        f"{outcome.display} is out of date: section{'s' if len(outcome.changed) != 1 else ''} {', '.join(outcome.changed) or '(layout)'} would change",
        details=["run `zmr docs` and commit the result"],
    )
