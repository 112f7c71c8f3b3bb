"""`zmr new MODEL`: scaffold a model from the templates in ``zmr/templates/``.

Writes, for a model that does not exist yet (no manifest, no case folder,
no series folder):

- ``manifests/<model>.yaml``: the components asked for (``NAME=URL@REV``:
  a full commit id, or a branch, tag or abbreviated id resolved in the
  upstream, ``resolve_commits``; ``--track``), validated exactly like a
  manifest written by hand;
- ``patches/<model>/<component>/series``: an empty series with a comment
  header, one per component;
- ``cases/<model>/README.md`` (support status, what broke and how it was
  fixed, evidence, overhead, upstreamed changes), ``recipe.md`` (how to
  reproduce the evidence), ``case.yaml`` (the facts ``zmr docs`` renders;
  schema ``zmr.model.cases``) and ``evidence/README.md`` (the evidence layout).

The case's four templates are the skill's (``skill/templates/``, the files the
workflow of ``skill/SKILL.md`` tells a team to fill in), shipped in the
package as ``CASE_TEMPLATES`` names them; tests/test_skill.py checks that the
two copies are the same bytes, so the skill and the tool never disagree.

Everything is rendered and validated in memory first (the manifest with
``zmr.model.manifest.parse_manifest``, the case with ``zmr.model.cases.parse_case``), so
a bad component spec writes nothing. Each file is written to a temporary
name and linked into place (never over an existing file); if anything fails
on the way, the files and folders written so far are removed again.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Sequence, TypedDict

from zmr.infra.errors import ZmrError
from zmr.infra.wording import counted
from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.project import Project

NEW_TRANSACTION = "new"
# The case's templates: package file (zmr/templates) -> its path under skill/templates (which it copies) and under cases/<model>.
CASE_TEMPLATES = {"README.md.tmpl": "README.md", "recipe.md.tmpl": "recipe.md", "case.yaml.tmpl": "case.yaml", "evidence-README.md.tmpl": "evidence/README.md"}
SPEC_HELP = "NAME=URL@SHA, e.g. rollout=https://github.com/vllm-project/vllm.git@<40-hex commit id>"
# A YAML plain scalar that stays the same string (no quoting needed).
_PLAIN_RE = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./:@+~=-]*\Z")


@dataclass(frozen=True)
class ComponentSpec:
    """One ``--component NAME=URL@SHA``, split (not validated beyond its syntax)."""

    key: str
    upstream: str
    commit: str
    spec: str
    track: str | None = None


def parse_component(spec: str) -> ComponentSpec:
    """Split ``NAME=URL@SHA`` (the URL may hold '@' itself: the last one separates the commit)."""
    name, eq, rest = spec.partition("=")
    if not eq or not name.strip():
        raise ZmrError(f"--component {spec!r}: expected {SPEC_HELP}")
    upstream, at, commit = rest.rpartition("@")
    if not at or not upstream.strip() or not commit.strip():
        raise ZmrError(f"--component {spec!r}: no @SHA after the upstream", details=[f"pin a full commit id: {SPEC_HELP}"])
    return ComponentSpec(name.strip(), upstream.strip(), commit.strip(), spec)


_FULL_ID_RE = re.compile(r"(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})\Z")  # upper case: the manifest check says what to write
_SHORT_ID_RE = re.compile(r"[0-9a-fA-F]{4,39}\Z")


def with_tracks(specs: Sequence[ComponentSpec], tracks: Sequence[str]) -> list[ComponentSpec]:
    """``--track REF`` (every component) or ``--track NAME=REF`` (one) applied to *specs*."""
    keys = {c.key for c in specs}
    every: str | None = None
    one: dict[str, str] = {}
    for value in tracks:
        name, eq, ref = value.partition("=")
        if not eq:
            every = value
        elif name in keys and ref.strip():
            one[name] = ref.strip()
        else:
            raise ZmrError(
                f"--track {value!r}: " + ("no ref after '='" if name in keys else f"no component {name!r} (the components: {', '.join(sorted(keys))})"),
                details=["--track REF for every component, or --track NAME=REF for one"],
            )
    return [dataclasses.replace(c, track=one.get(c.key, every or c.track)) for c in specs]


def resolve_commits(project: "Project", specs: Sequence[ComponentSpec]) -> list[ComponentSpec]:
    """Specs with a full commit id: ``@main``, ``@v1.2`` or an abbreviated id is looked up in the upstream (fetched).

    A branch or tag becomes the component's ``track`` unless ``--track`` says otherwise.
    """
    from zmr.infra.cache import Cache, CacheError
    from zmr.model.manifest import full_id_command

    resolved = []
    cache: Cache | None = None
    for c in specs:
        if _FULL_ID_RE.match(c.commit):
            resolved.append(c)
            continue
        cache = cache or Cache()
        upstream = cache.for_upstream(c.upstream, project.root)
        where = f"find the full id (from the repository root: `{full_id_command(c.upstream, c.commit)}`) and pass it: {c.key}={c.upstream}@<40-hex id>"
        try:
            if _SHORT_ID_RE.match(c.commit):
                repo = upstream.ensure_history().repo
                found = [oid for oid in repo.commits_with_prefix(c.commit.lower()) if repo.has_object(oid, "commit")]
                if len(found) != 1:
                    what = "no commit" if not found else counted(len(found), "commit")
                    raise ZmrError(f"--component {c.spec!r}: {c.commit!r} names {what} in {c.upstream}", details=[where])
                resolved.append(dataclasses.replace(c, commit=found[0]))
            else:
                _, oid = upstream.fetch_ref(c.commit)
                resolved.append(dataclasses.replace(c, commit=oid, track=c.track or c.commit))
        except CacheError as err:
            raise ZmrError(f"--component {c.spec!r}: cannot resolve {c.commit!r} in {c.upstream}", details=[*err.details, where]) from None
    return resolved


def template_text(name: str) -> str:
    """A file of ``zmr/templates`` (package data), as text."""
    return resources.files("zmr.templates").joinpath(name).read_text(encoding="utf-8")


def _template(name: str) -> Template:
    return Template(template_text(name))


def _yaml_str(value: str) -> str:
    """*value* as a YAML scalar: plain when that is unambiguous, else double-quoted (JSON escapes)."""
    if _PLAIN_RE.match(value) and value.lower() not in ("true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"):
        try:
            float(value)
        except ValueError:
            return value
    return json.dumps(value, ensure_ascii=False)


def render(model: str, title: str, components: Sequence[ComponentSpec]) -> dict[str, str]:
    """Repository-relative path -> text of every file `zmr new` writes."""
    blocks = "".join(
        _template("component.yaml.tmpl").substitute(
            component=c.key,
            model=model,
            upstream_yaml=_yaml_str(c.upstream),
            commit=c.commit,
            track_line=f"track: {_yaml_str(c.track)}" if c.track else "# track: main",
        )
        for c in components
    ).rstrip("\n")
    from zmr.model.file_schemas import modeline

    files = {
        # The first line points editors (yaml-language-server) at the manifest's JSON Schema: completion and checks as you type.
        f"manifests/{model}.yaml": modeline("manifest")
        + "\n"
        + _template("manifest.yaml.tmpl").substitute(
            model=model, title=title.replace("\n", " "), title_yaml=_yaml_str(title), components=blocks, needs=", ".join(c.key for c in components)
        ),
    }
    for c in components:
        files[f"patches/{model}/{c.key}/series"] = _template("series.tmpl").substitute(
            model=model, component=c.key, commit_short=c.commit[:12], upstream=c.upstream
        )
    rows = "\n".join(f"| {c.key} | `{c.upstream}` | `{c.commit}` | `patches/{model}/{c.key}/` |" for c in components)
    branches = ", ".join(f"`{c.key}/{model}`" for c in components)
    for name, target in CASE_TEMPLATES.items():
        files[f"cases/{model}/{target}"] = _template(name).substitute(model=model, title=title, component_rows=rows, branches=branches)
    return files


def existing(root: Path, model: str) -> list[str]:
    """What of *model* already exists: its manifest, case folder or series folder."""
    found = []
    for rel in (f"manifests/{model}.yaml", f"manifests/{model}.yml", f"cases/{model}", f"patches/{model}"):
        if (root / rel).exists() or (root / rel).is_symlink():
            found.append(rel + ("/" if (root / rel).is_dir() else ""))
    return found


def validate(project: "Project", model: str, files: dict[str, str], components: Sequence[ComponentSpec], *, case: bool = True) -> list[str]:
    """Validate the rendered manifest (and, with *case*, the case) as `zmr validate` and `zmr docs` would; raise on any problem.

    Returns what only an untrusted validation refuses (``untrusted_warnings``)."""
    from zmr.model.cases import parse_case
    from zmr.model.manifest import parse_manifest

    with tempfile.TemporaryDirectory(prefix="zmr-new-") as tmp:
        staged = Path(tmp)
        for rel, text in files.items():
            target = staged / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        # Paths in the manifest (a bundle in the repository) resolve against the project.
        _, problems = parse_manifest(staged / f"manifests/{model}.yaml", project.root, project.policy)
        if problems:
            details = []
            for p in problems:
                spec = next((c.spec for c in components if f"components.{c.key}." in p.text or f"components.{c.key}:" in p.text), None)
                text = p.text + (f"; {p.fix}" if p.fix else "")
                details.append(f"--component {spec!r}: {text}" if spec else text)
            raise ZmrError(f"zmr new {model}: {len(problems)} problem{'s' if len(problems) != 1 else ''} with the components", details=details)
        _, problems = parse_case(staged / f"cases/{model}/case.yaml", staged) if case else (None, [])
        if problems:  # pragma: no cover - the template is tested to be valid
            raise ZmrError(f"zmr new {model}: the case template does not validate (a bug in zmr)", details=[str(p) for p in problems])
        return untrusted_warnings(project, staged / f"manifests/{model}.yaml", components)


class NewJson(TypedDict):
    """The model, the files written (repository-relative; of them, *changed* existed and were edited), and what the
    pull-request CI that ``zmr init`` writes would refuse."""

    model: str
    files: list[str]
    changed: list[str]
    warnings: list[str]


@dataclass(frozen=True)
class Scaffolded(Report):
    """What ``zmr new`` wrote: *files*, repository-relative, in order; of them, *changed* existed and were edited
    (the manifest a component was added to), the others were created. *warnings*: what the pull-request CI that
    ``zmr init`` writes would refuse (``untrusted_warnings``)."""

    model: str
    files: list[str]
    changed: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> NewJson:
        return {"model": self.model, "files": self.files, "changed": self.changed, "warnings": self.warnings}


def untrusted_warnings(project: "Project", manifest: Path, specs: Sequence[ComponentSpec]) -> list[str]:
    """What ``zmr validate --untrusted`` (the pull-request jobs of the workflow ``zmr init`` writes) refuses in
    *manifest* and a trusted validation accepted: an upstream outside the repository (``/abs/path``, ``../``,
    ``file://``) works on this machine and fails every pull request's CI."""
    from zmr.model.manifest import Policy, parse_manifest

    if project.policy.untrusted:
        return []
    _, problems = parse_manifest(manifest, project.root, Policy(untrusted=True))
    found = []
    for p in problems:
        spec = next((c.spec for c in specs if f"components.{c.key}." in p.text), None)
        if spec is not None:  # a component added to a manifest: the others were there before
            found.append(
                f"--component {spec!r}: {p.text.split(': ', 1)[-1]}, and so every pull request fails the CI `zmr init` writes"
                " (it validates them with --untrusted); use a network URL (https://...), or copy the bundle into the repository"
                " and name that path (upstreams/<name>.bundle)"
            )
    return found


def create(project: "Project", model: str, components: Sequence[str], title: str | None = None, tracks: Sequence[str] = ()) -> Scaffolded:
    """Scaffold *model*; returns the repository-relative paths written, in order."""
    from zmr.infra import transaction
    from zmr.model.manifest import MODEL_RE, load_manifests

    root = project.root
    if not MODEL_RE.match(model):
        raise ZmrError(
            f"{model!r} is not a valid model name",
            details=["use [a-z0-9][a-z0-9._-]* (lower case, digits, '.', '_', '-'): it names manifests/<model>.yaml and the branches"],
        )
    if not components:
        raise ZmrError(f"zmr new {model}: name at least one component", details=[f"--component {SPEC_HELP} (repeat it for the trainer, ...)"])
    manifest = root / f"manifests/{model}.yaml"
    if manifest.is_file() and not manifest.is_symlink():
        return add_components(project, model, components, tracks)
    there = existing(root, model)
    if there:
        raise ZmrError(f"model {model!r} already exists: {', '.join(there)}", details=["zmr new never overwrites; pick another name, or edit the files"])
    specs = _checked_specs(components, tracks)
    title = (title or model).strip() or model
    if any(ord(ch) < 32 for ch in title):
        raise ZmrError("--title: control characters (line breaks, tabs) are not allowed")
    # Upstreams are checked before anything is fetched from them (a commit still to resolve stands in as the zero id).
    unresolved = [c if _FULL_ID_RE.match(c.commit) else dataclasses.replace(c, commit="0" * 40) for c in specs]
    validate(project, model, render(model, title, unresolved), unresolved)
    specs = resolve_commits(project, specs)
    files = render(model, title, specs)
    warnings = validate(project, model, files, specs)
    with transaction.begin(project, NEW_TRANSACTION) as txn:  # every file or none, never over one that exists
        for rel, text in files.items():
            txn.create(root / rel, text.encode("utf-8"))
    try:
        # Branch names must not collide with other models' (checked across every manifest).
        load_manifests(root, [model], project.policy)
    except ZmrError:
        with transaction.begin(project, NEW_TRANSACTION) as txn:  # undone as a whole, too
            for rel in files:
                txn.remove(root / rel)
        raise
    return Scaffolded(model, list(files), warnings=warnings)


def _checked_specs(components: Sequence[str], tracks: Sequence[str]) -> list[ComponentSpec]:
    """The ``--component`` specs split, their names checked (valid, each once), ``--track`` applied."""
    from zmr.model.manifest import COMPONENT_RE

    specs = [parse_component(s) for s in components]
    seen: set[str] = set()
    for c in specs:
        if not COMPONENT_RE.match(c.key):
            raise ZmrError(
                f"--component {c.spec!r}: {c.key!r} is not a valid component name",
                details=["use [a-z0-9][a-z0-9-]* (lower case, digits, '-'), e.g. rollout, trainer, vllm, megatron"],
            )
        if c.key in seen:
            raise ZmrError(f"--component {c.spec!r}: component {c.key!r} is given twice")
        seen.add(c.key)
    return with_tracks(specs, tracks)


def add_components(project: "Project", model: str, components: Sequence[str], tracks: Sequence[str] = ()) -> Scaffolded:
    """``zmr new MODEL -c ...`` on a model that exists: each component added to its manifest (the text of the others kept), with an empty series.

    The manifest must validate first (every problem of it is reported); a
    component already there, or a series folder already there, is refused;
    the edited manifest is validated as a whole before manifest and series
    are written, together (one transaction).
    """
    from zmr.infra import transaction
    from zmr.model.manifest import parse_manifest

    root = project.root
    path = root / f"manifests/{model}.yaml"
    display = f"manifests/{model}.yaml"
    current, problems = parse_manifest(path, root, project.policy)
    if current is None or problems:
        raise ZmrError(f"{display}: fix it before adding a component", details=[str(p) for p in problems])
    specs = _checked_specs(components, tracks)
    for c in specs:
        if c.key in current.components:
            raise ZmrError(f"--component {c.spec!r}: {display} has a component {c.key!r} already", details=["edit its commit there, or pick another name"])
        folder = f"patches/{model}/{c.key}"
        if (root / folder).exists() or (root / folder).is_symlink():
            raise ZmrError(f"--component {c.spec!r}: {folder} exists already", details=["zmr new never overwrites; remove it or pick another name"])
    text = path.read_text(encoding="utf-8")
    unresolved = [c if _FULL_ID_RE.match(c.commit) else dataclasses.replace(c, commit="0" * 40) for c in specs]
    validate(project, model, {display: _with_components(text, model, unresolved, display)}, unresolved, case=False)
    specs = resolve_commits(project, specs)
    edited = _with_components(text, model, specs, display)
    warnings = validate(project, model, {display: edited}, specs, case=False)
    series = {f"patches/{model}/{c.key}/series": render(model, model, [c])[f"patches/{model}/{c.key}/series"] for c in specs}
    with transaction.begin(project, NEW_TRANSACTION) as txn:  # the manifest and every series, or nothing
        txn.write(path, edited.encode("utf-8"))
        for rel, body in series.items():
            txn.create(root / rel, body.encode("utf-8"))
    return Scaffolded(model, [display, *series], changed=[display], warnings=warnings)


def _with_components(text: str, model: str, specs: Sequence[ComponentSpec], display: str) -> str:
    """*text* with the blocks of *specs* after the last line of its ``components:`` mapping; everything else as it was."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if re.match(r"components:\s*(#.*)?$", line)), None)
    if start is None:
        raise ZmrError(f"{display}: no block `components:` mapping to add to", details=["add the component by hand (docs/reference.md §2.2)"])
    end = start
    for i in range(start + 1, len(lines)):
        if lines[i].strip() and not lines[i][0].isspace():
            break
        if lines[i].strip():  # indented: the block's (its comments too)
            end = i
    blocks = render(model, model, specs)[f"manifests/{model}.yaml"]
    ours = blocks.split("components:\n", 1)[1].split("\n# Model-level smoke tests", 1)[0].rstrip("\n").split("\n")
    return "\n".join([*lines[: end + 1], *ours, *lines[end + 1 :]])
