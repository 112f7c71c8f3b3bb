"""``zmr init``: make the current git repository a zmr project.

Works in a new repository and in one that already has content (such as a
repository of hand-made release branches about to adopt zmr): nothing
that exists is changed, except that missing lines are appended to
``.gitignore``. What is missing is created:

- ``manifests/`` (the folder ``zmr`` looks for);
- ``zmr.yaml`` with the release identity (``--name``, ``--email``, ``--url``;
  the URL defaults to the GitHub page of ``origin``), which is what a fresh
  clone finds, as ``manifests/`` stays empty until the first model;
- ``.gitignore`` lines for ``work/`` (checkouts) and ``.zmr/`` (where an
  older zmr kept its state; it now lives in the git directory), so they
  never show in ``git status``;
- ``README.md`` with the marker sections ``zmr docs`` fills (an existing
  README is left alone; zmr says which markers it lacks);
- ``.github/workflows/zmr.yml``, the CI workflow, and
  ``.github/workflows/zmr-diff-comment.yml``, which posts its ``zmr diff``
  of a pull request as a comment (a ``workflow_run`` workflow must be a file of its own):
  each job one use of zmr's action (action.yml) by a full commit id (`zmr_action`);
- with ``--skill``, ``skill/``: the zero-mismatch skill (the workflow from a
  new model to bitwise zero, its mechanism guides, process rules and
  templates), copied from the folder beside the zmr package (a source
  checkout or editable install of zmr's repository). Without it, a note says
  how to add it when the repository has none.

A second run finds everything there and changes nothing.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, TypedDict

from zmr.infra import git
from zmr.infra.errors import ZmrError
from zmr.infra.files import os_error
from zmr.model.source import RELEASED_COMMIT, ZMR_SOURCE, github_page, zmr_source
from zmr.ops.new import template_text
from zmr.infra.reports import Report

__all__ = ["RELEASED_COMMIT", "ZMR_SOURCE", "github_page", "zmr_source"]  # kept here too: zmr.model.source is their home

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.transaction import Transaction
    from zmr.model.project import Settings

IGNORED = ("work/", ".zmr/")
WORKFLOW = ".github/workflows/zmr.yml"
DIFF_COMMENT_WORKFLOW = ".github/workflows/zmr-diff-comment.yml"
README = "README.md"
INIT_TRANSACTION = "init"
SKILL = "skill"


class InitJson(TypedDict):
    """The repository's root, whether anything changed, the files created (repository-relative), the lines added to
    .gitignore, and notes for the engineer."""

    root: str
    changed: bool
    created: list[str]
    gitignore_added: list[str]
    notes: list[str]


@dataclass
class InitResult(Report):
    root: Path
    created: list[str] = field(default_factory=list)  # repository-relative paths
    appended: list[str] = field(default_factory=list)  # lines added to .gitignore
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.appended)

    def to_json(self) -> InitJson:
        return {"root": str(self.root), "changed": self.changed, "created": self.created, "gitignore_added": self.appended, "notes": self.notes}


def repository_root(start: Path) -> Path:
    """The top level of the git repository *start* is in."""
    top = git.Repo.at(start).toplevel()
    if top is None:
        raise ZmrError(
            f"{start}: not inside a git repository", details=["zmr keeps release branches in a git repository: run `git init` (or clone one), then `zmr init`"]
        )
    return Path(top)


def init(
    start: Path, *, name: str | None = None, email: str | None = None, url: str | None = None, readme_sections: bool = False, skill: bool = False
) -> InitResult:
    """Create what is missing of a zmr project in the repository holding *start*.

    *readme_sections*: append the marker sections an existing README lacks
    (at its end; move them where they belong). *skill*: add ``skill/`` (`skill_source`).
    """
    from zmr.infra import transaction
    from zmr.model.project import Project, Settings

    root = repository_root(start)
    result = InitResult(root)
    project = Project(root, Settings())
    try:
        with transaction.begin(project, INIT_TRANSACTION) as txn:  # every file or none (zmr.infra.transaction)
            _init(root, txn, result, name, email, url, readme_sections)
            _skill(root, txn, result, skill)
    except OSError as err:  # a read-only repository is said so (the CLI knows no project yet to tell)
        raise os_error(err, project.folders()) from None
    return result


def _init(root: Path, txn: Transaction, result: InitResult, name: str | None, email: str | None, url: str | None, readme_sections: bool) -> None:
    from zmr.model.project import DEFAULT_RELEASE_EMAIL, DEFAULT_RELEASE_NAME, SETTINGS_FILE, Settings, load_settings

    settings_path = root / SETTINGS_FILE
    if settings_path.exists():
        current = load_settings(root)
        wanted = {"name": (name, current.release_name), "email": (email, current.release_email), "url": (url, current.release_url)}
        differing = [f"release.{key} is {have!r}, --{key} says {want!r}" for key, (want, have) in wanted.items() if want is not None and want != have]
        if differing:
            raise ZmrError(
                f"{SETTINGS_FILE} exists with another release identity; zmr init does not change it",
                details=[*differing, f"edit {SETTINGS_FILE} by hand (every release commit id changes with it)"],
            )
        settings = current
    else:
        if url is None:
            origin = git.Repo.at(root).config_get("remote.origin.url") or ""
            url = github_page(origin)
        text = settings_text(Settings(name or DEFAULT_RELEASE_NAME, email or DEFAULT_RELEASE_EMAIL, url))
        with tempfile.TemporaryDirectory(prefix="zmr-init-") as tmp:
            (Path(tmp) / SETTINGS_FILE).write_text(text, encoding="utf-8")
            settings = load_settings(Path(tmp))  # refuses a bad --name/--email/--url before anything is written
        _create(txn, SETTINGS_FILE, text, result)
    if not (root / "manifests").is_dir():
        txn.mkdir(root / "manifests")
        result.created.append("manifests/")
    _ignore(root, txn, result)
    readme = root / README
    if readme.exists():
        missing = _missing_sections(readme)
        if missing and readme_sections:
            txn.write(readme, _with_sections(readme, missing))
            result.appended += [f"{README}: section {s}" for s in missing]
        elif missing:
            result.notes.append(
                f"{README} exists and was left alone; it lacks the marker sections `zmr docs` fills ({', '.join(missing)}): "
                "run `zmr init --readme-sections` to append them, then move them where the tables belong"
            )
    else:
        from zmr.model.project import Project
        from zmr.ops import docs

        template = Template(template_text("project-README.md.tmpl")).substitute(title=root.name)
        filled, _ = docs.update(template, docs.render(docs.gather(Project(root, settings))), README)  # so `zmr docs --check` passes at once
        _create(txn, README, filled, result)
    if not (root / WORKFLOW).exists():
        _create(txn, WORKFLOW, workflow_text("workflow.yml.tmpl"), result)
    if not (root / DIFF_COMMENT_WORKFLOW).exists():
        _create(txn, DIFF_COMMENT_WORKFLOW, workflow_text("workflow-diff-comment.yml.tmpl"), result)


def skill_source() -> Path | None:
    """The skill folder of zmr's repository beside the running package (a source checkout or editable install), or None."""
    import zmr

    folder = Path(zmr.__file__).resolve().parents[1] / SKILL
    return folder if (folder / "SKILL.md").is_file() else None


def _skill(root: Path, txn: Transaction, result: InitResult, add: bool) -> None:
    """``skill/`` copied into the repository (*add*), or a note on how to add it; one that is there is left alone."""
    if (root / SKILL).exists() or (root / SKILL).is_symlink():
        return
    source = skill_source()
    if source is None:
        url, commit = zmr_source()
        how = f"copy the folder {SKILL}/ of {url} at {commit} into this repository"
        if add:
            raise ZmrError("this zmr was installed without its skill folder; zmr init --skill has nothing to copy", details=[how])
        result.notes.append(f"no {SKILL}/ here: the zero-mismatch skill (workflow, mechanism guides, templates) is not in this repository; {how}")
        return
    if not add:
        result.notes.append(f"no {SKILL}/ here: run `zmr init --skill` to add the zero-mismatch skill (workflow, mechanism guides, templates)")
        return
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
            txn.create(root / SKILL / rel, path.read_bytes())
    result.created.append(f"{SKILL}/")


def workflow_text(template: str) -> str:
    """A workflow `zmr init` writes: the template with zmr's action named by `zmr_action()`."""
    return template_text(template).replace("@ZMR_ACTION@", zmr_action())


def zmr_requirement() -> str:
    """zmr as a pip direct reference by a full commit id: what the action of `zmr_action()` installs."""
    url, commit = zmr_source()
    return f"zmr @ git+{url}@{commit}"


def zmr_action() -> str:
    """``OWNER/REPO@<full commit id>``: the action the workflows `zmr init` writes name in `uses:` (zmr_source())."""
    url, commit = zmr_source()
    return f"{url.removeprefix('https://github.com/')}@{commit}"


def settings_text(settings: Settings) -> str:
    from zmr.model.file_schemas import modeline
    from zmr.ops.new import _yaml_str

    lines = [
        modeline("settings"),
        "# zmr settings (written by `zmr init`). The release identity is an input of",
        "# every release commit id: change it and every release branch changes.",
        "release:",
        f"  name: {_yaml_str(settings.release_name)}",
        f"  email: {_yaml_str(settings.release_email)}",
    ]
    if settings.release_url:
        lines.append(f"  url: {_yaml_str(settings.release_url)}   # links in the generated README")
    else:
        lines.append("  # url: https://github.com/OWNER/REPO   # links in the generated README")
    return "\n".join(lines) + "\n"


def _create(txn: Transaction, rel: str, text: str, result: InitResult) -> None:
    txn.create(txn.root / rel, text.encode("utf-8"))
    result.created.append(rel)


def _ignore(root: Path, txn: Transaction, result: InitResult) -> None:
    """Append the ignore lines git does not already apply (asked with check-ignore, so any existing rule counts)."""
    repo = git.Repo.at(root)
    missing = [entry for entry in IGNORED if not repo.is_ignored(f"{entry}zmr-probe", no_index=True)]
    if not missing:
        return
    path = root / ".gitignore"
    old = path.read_bytes() if path.exists() else b""
    text = b"" if not old or old.endswith(b"\n") else b"\n"
    text += b"# zmr: checkouts (work/) and rebase/smoke state (.zmr/)\n" + "".join(f"/{entry}\n" for entry in missing).encode()
    txn.write(path, old + text)
    if not old:
        result.created.append(".gitignore")
    result.appended += [f"/{entry}" for entry in missing]


def _with_sections(readme: Path, missing: list[str]) -> bytes:
    """The README's bytes with the *missing* marker sections appended."""
    from zmr.ops.docs import SECTIONS

    template = template_text("project-README.md.tmpl")
    if len(missing) == len(SECTIONS):
        block = template[template.index("## Models") :]
    else:
        block = "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n\n" for s in missing)
    old = readme.read_bytes()
    return old + (b"" if old.endswith(b"\n\n") else b"\n" if old.endswith(b"\n") else b"\n\n") + block.rstrip("\n").encode() + b"\n"


def _missing_sections(readme: Path) -> list[str]:
    from zmr.ops.docs import SECTIONS

    text = readme.read_text(encoding="utf-8", errors="replace")
    return [s for s in SECTIONS if not re.search(rf"^ {{0,3}}<!--\s*zmr:begin {re.escape(s)}\s*-->", text, re.M)]
