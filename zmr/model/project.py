"""The zmr repository: where manifests, series and cases live, and its settings.

``zmr.yaml`` at the repository root is optional::

    release:
      name: zmr release        # author and committer of release commits
      email: release@zmr.invalid
      url: https://github.com/OWNER/REPO   # for links in generated docs

The release identity is an input of every release commit id: change it and
every branch changes.

``Project`` knows where zmr keeps its own files: ``zmr/`` in the
repository's git directory (``state_dir``; what lives there, and where, is
``zmr.infra.state``'s list, asked through ``state_path``; no commit can put a file
there, as none can put one in git's own ``rebase-merge/``) and the default
checkout folder ``work/<model>/<component>`` in the work tree
(docs/reference.md §8.3, "What zmr trusts").

``Project.find`` only locates the project. ``zmr.ops.recovery.open_project``
(what every command calls) also finishes or undoes the work a killed zmr
left and migrates an older zmr's ``.zmr/`` (``zmr.ops.legacy``): a library
caller that reads or writes the project's files opens it that way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar, cast

from zmr.infra import git
from zmr.infra.errors import Located, ManifestError, SeriesError, SettingsError, ZmrError
from zmr.infra.files import atomic_write
from zmr.infra.wording import counted
from zmr.model.manifest import Component, Manifest, Policy, load_manifests, manifest_file, manifest_paths, series_folders_as_written
from zmr.model.yamlnodes import Problem, Problems
from zmr.model.yamlrecords import At, Check, Field, Record, Text, declared, read_file
from zmr.infra.state import JOURNAL, LOCK, POINTER, REBASE, REBASE_DIR, SMOKE, STATE, StateFile
from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.series import Series

SETTINGS_FILE = "zmr.yaml"
STATE_DIR = "zmr"  # in the git directory
LEGACY_STATE_DIR = ".zmr"  # in the work tree: where zmr kept its state before; never read
CHECKOUTS_DIR = "work"
DEFAULT_RELEASE_NAME = "zmr release"
DEFAULT_RELEASE_EMAIL = "release@zmr.invalid"


@dataclass(frozen=True)
class Settings:
    release_name: str = DEFAULT_RELEASE_NAME
    release_email: str = DEFAULT_RELEASE_EMAIL
    release_url: str | None = None


L = TypeVar("L")


@dataclass
class Project:
    """A zmr repository checked out at *root*."""

    root: Path
    settings: Settings
    policy: Policy = Policy()
    notices: list[str] = field(default_factory=list, compare=False, repr=False)  # for the user, once (the CLI prints them)
    _state_dir: Path | None = field(default=None, init=False, compare=False, repr=False)

    @classmethod
    def find(cls, start: str | os.PathLike[str] | None = None, policy: Policy = Policy()) -> "Project":
        """The project every command acts on, seen from *start* (default: the current folder).

        ``$ZMR_REPO`` when set; else, inside a ``zmr checkout`` (also one made
        with ``--dir`` outside the repository), the repository it belongs to;
        else the nearest folder upward holding ``manifests/`` or ``zmr.yaml``.

        Only locates: what a killed zmr left is not finished and an older
        zmr's ``.zmr/`` not migrated. A caller that reads or writes the
        project's files opens it with ``zmr.ops.recovery.open_project``, as
        every command does (docs/reference.md §6.3).
        """
        explicit = os.environ.get("ZMR_REPO")
        here = Path(explicit or start or os.getcwd()).resolve()
        if not explicit:
            owner = _checkout_owner(here)
            if owner is not None:
                return cls(owner, load_settings(owner), policy)
        for candidate in [here, *here.parents]:
            if (candidate / "manifests").is_dir() or (candidate / SETTINGS_FILE).is_file():
                return cls(candidate, load_settings(candidate), policy)
            if explicit:
                break
        root = git.Repo.at(here).toplevel() if here.is_dir() and not explicit else None
        if root is not None:
            # A git repository that is no zmr project yet: a fresh clone of hand-made branches, or a new one.
            raise ZmrError(
                f"{root}: not a zmr project yet (no manifests/ folder or {SETTINGS_FILE})",
                details=[
                    f"run `zmr init` in {root} to make it one (it creates manifests/, {SETTINGS_FILE}, the README markers and the CI workflow;"
                    " nothing that exists is changed)"
                ],
            )
        if explicit:  # the variable is what is wrong: saying "set ZMR_REPO" would send its user in a circle
            what = "no such folder" if not here.exists() else "not a zmr repository (no manifests/ folder or zmr.yaml there)"
            todo = "point ZMR_REPO at a zmr repository, or unset it to find the repository from the current folder"
            raise ZmrError(f"ZMR_REPO={explicit}: {what}", details=[todo])
        raise ZmrError(
            f"{here}: not inside a zmr repository (no manifests/ folder found here or above)",
            details=["run zmr from the repository root, or set ZMR_REPO"],
        )

    # -- the layout of what zmr keeps in the repository ----------------------------------------

    @property
    def state_dir(self) -> Path:
        """``<git dir>/zmr/``: zmr's own files, out of reach of any commit (none of them is an input of a release).

        The git directory of the work tree the project is in (``git rev-parse
        --git-dir``): a linked worktree has its own manifests, series and
        ``work/``, so it has its own state too. Created on first use.
        """
        if self._state_dir is None:
            self._state_dir = _state_dir_of(self.root)
        return self._state_dir

    def folders(self) -> list[Path]:
        """The work tree and, where it has one, the git directory: what a command that writes this repository writes in."""
        try:
            return [self.root, self.state_dir.parent]
        except ZmrError:
            return [self.root]

    def state_path(self, entry: StateFile, **names: str) -> Path:
        """Where the state file *entry* (``zmr.infra.state.STATE_FILES``, the one list of them) lives in this project's state folder."""
        assert entry.base == STATE
        return entry.path(self.state_dir, **names)

    def rebase_dir(self, component: Component) -> Path:
        """``zmr/rebase/<model>/<component>/``: the state of a rebase under way (``state.json`` and the saved copies)."""
        return self.state_path(REBASE_DIR, model=component.model, component=component.key)

    def rebase_state(self, component: Component) -> Path:
        """``state.json`` of ``rebase_dir``: present exactly while a rebase of *component* is under way."""
        return self.state_path(REBASE, model=component.model, component=component.key)

    def checkout_pointer(self, component: Component) -> Path:
        """``zmr/checkouts/<model>/<component>``: the checkout made with ``--dir``: JSON ``{"path", "token"}`` (zmr.ops.checkout)."""
        return self.state_path(POINTER, model=component.model, component=component.key)

    def lock_path(self, model: str, key: str) -> Path:
        """``zmr/locks/<model>/<component>.lock``: the lock of one component (zmr.infra.lock), held while a command changes it."""
        return self.state_path(LOCK, model=model, component=key)

    def journal_path(self, name: str) -> Path:
        """``zmr/transactions/<name>.json``: the journal of a multi-file write (zmr.infra.transaction) under way or interrupted."""
        return self.state_path(JOURNAL, name=name)

    def journal_folder(self) -> Path | None:
        """``zmr/transactions/``, the folder of every ``journal_path``; None where there is no git repository, so no state
        folder: nothing was ever journaled here. The one lookup of it (``transaction.finish_all`` and the opening check)."""
        try:
            return self.state_path(JOURNAL, name="-").parent
        except ZmrError:
            return None

    def smoke_artifacts(self, model: str) -> Path:
        """``zmr/smoke/<model>/``: logs and test outputs of ``zmr smoke`` when no ``--artifacts`` is given."""
        return self.state_path(SMOKE, model=model)

    def default_checkout(self, component: Component) -> Path:
        """``work/<model>/<component>``: where a checkout goes without ``--dir``."""
        return self.root / CHECKOUTS_DIR / component.model / component.key

    def exclude_checkouts(self) -> None:
        """``/work/`` in the repository's ``info/exclude`` unless git ignores ``work/`` already: checkouts stay out of ``git status``.

        Idempotent; a ``.gitignore`` (tracked or not) is never touched.
        """
        repo = git.Repo.at(self.root)
        if repo.is_ignored("work/"):
            return
        path = repo.git_path("info/exclude")
        if path is None:
            return
        old = path.read_bytes() if path.is_file() else b""
        if b"/work/" in old.split(b"\n"):
            return
        atomic_write(path, old + (b"\n" if old and not old.endswith(b"\n") else b"") + b"# zmr: checkouts (zmr checkout)\n/work/\n")

    def manifest_path(self, model: str) -> Path:
        """``manifests/<model>.yaml``: the manifest of *model* (whether or not it exists yet)."""
        return self.root / manifest_file(model)

    def series(self, component: Component, *, no_links: bool = False) -> Series:
        """*component*'s series as on disk now; a missing folder names the manifest line that sets it (``patches_origin``).

        *no_links*: the folder is refused when it is a symbolic link (``series_folder``), for a command whose work ends in writing there.
        """
        from zmr.model.series import read_series

        folder = self.series_folder(component) if no_links else self.root / component.patches
        return read_series(folder, component.patches, origin=component.patches_origin)

    def series_of(self, components: Sequence[Component]) -> dict[Component, Series]:
        """Each of *components*' series (`series`); a SeriesError names every problem of all of them at once.

        For a command that reads them all before it does anything (``build``,
        ``verify``): two broken series are reported in one run, not the second
        after the first is fixed. One broken series raises its own error.
        """
        found: dict[Component, Series] = {}
        errors: list[SeriesError] = []
        problems: list[Located] = []
        for component in components:
            try:
                found[component] = self.series(component)
            except SeriesError as err:
                errors.append(err)
                where = f"{manifest_file(component.model)}:{component.patches_line or component.line}"
                message = err.message.removeprefix(f"{where}: ")
                problems += err.problems or [Problem(manifest_file(component.model), component.patches_line or component.line, message, "; ".join(err.details))]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            problems.sort(key=lambda p: (p.path, p.line))
            files = sorted({p.path for p in problems})
            raise SeriesError(f"{counted(len(problems), 'problem')} in {', '.join(files)}", details=[str(p) for p in problems], problems=problems)
        return found

    def series_folder(self, component: Component) -> Path:
        """The folder of *component*'s series, refused when it or a folder above it in the repository is a symbolic link."""
        return self.no_links(component.patches, "a series folder")

    def no_links(self, rel: str | os.PathLike[str], what: str) -> Path:
        """``root/rel``, once no part of *rel* is a symbolic link: zmr writes and deletes there, and a link would send that elsewhere."""
        path = self.root
        for part in Path(rel).parts:
            path = path / part
            if path.is_symlink():
                shown = path.relative_to(self.root).as_posix()
                raise ZmrError(
                    f"{shown}: is a symbolic link; zmr does not follow links for {what} (it writes and deletes files there)",
                    details=[f"replace {shown} with a real folder (move what it points to there), then run again"],
                )
        return path

    @property
    def repo(self) -> git.Repo:
        if not (self.root / ".git").exists():
            raise ZmrError(f"{self.root}: not a git repository; release branches need one (run `git init`)")
        return git.Repo.discover(self.root)

    def manifests(self, models: list[str] | None = None) -> list[Manifest]:
        """The manifests of *models* (all when empty); ManifestError names every problem of theirs and of their series at once.

        A manifest with a problem stops every command, so the series of its
        model's components (read as written: `series_folders_as_written`) and
        of the other models asked for are read too, and their problems (a
        missing folder, conflict markers, a malformed hunk...) come in the
        same error: one run names all that is wrong, never one class of
        problem after another.
        """
        try:
            return load_manifests(self.root, models or None, self.policy)
        except ManifestError as err:
            more = self.series_problems(models)
            if not more:
                raise
            raise ManifestError([*err.problems, *more]) from None

    def series_problems(self, models: list[str] | None = None) -> list[Located]:
        """Every problem of the series of *models*' components (all models when empty), their manifests read as written, valid or not.

        A series folder that does not exist is a problem at the manifest line
        that names it; a series or patch file's problems are located in that
        file (`zmr.model.series.read_series`). Never raises for what it finds.
        """
        from zmr.model.series import read_series

        found: list[Located] = []
        for path in manifest_paths(self.root):
            model = path.name[: -len(".yaml")]
            if path.suffix != ".yaml" or (models and model not in models):
                continue
            display = manifest_file(model)
            for key, folder, line in series_folders_as_written(path, self.root):
                if not (self.root / folder).is_dir():
                    fix = f"fix `patches:` (or the component's name), or, for a component without patches, create {folder}/series, empty"
                    found.append(Problem(display, line, f"components.{key}: series folder {folder} does not exist", fix))
                    continue
                try:
                    read_series(self.root / folder, folder, origin=f"{display}:{line}")
                except SeriesError as err:
                    message = err.message.removeprefix(f"{display}:{line}: ")  # the origin, which the problem names anyway
                    found += err.problems or [Problem(display, line, f"components.{key}: {message}", "; ".join(err.details))]
        return found

    def reloaded(self, component: L) -> L:
        """*component* as its manifest says now: a command that waited for a lock reads what the holder wrote (a rebase's new pin), not what it read before.

        Anything that is not a component of a manifest, or one whose manifest
        no longer holds it, comes back as it is (the command's own checks
        then say what is wrong).
        """
        if not isinstance(component, Component):
            return component
        try:
            manifests = self.manifests([component.model])
        except ZmrError:
            return component
        fresh = manifests[0].components.get(component.key) if manifests else None
        return cast(L, fresh) if fresh is not None else component


def _state_dir_of(root: Path) -> Path:
    """``zmr/`` in the git directory of the work tree at *root*; an error when there is no git repository or it is not a real folder."""
    git_dir = git.Repo.at(root).absolute_git_dir() if root.is_dir() else None
    if git_dir is None:
        raise ZmrError(
            f"{root}: not a git repository; zmr keeps its working state (checkouts, rebases, the export journal, smoke logs) in the git directory",
            details=[f"run `git init` in {root} first"],
        )
    state = git_dir / STATE_DIR
    if state.is_symlink() or (state.exists() and not state.is_dir()):
        raise ZmrError(f"{state}: is not a folder (a symbolic link?); zmr keeps its working state there", details=[f"remove {state}, then run again"])
    return state


def _checkout_owner(path: Path) -> Path | None:
    """The repository of the checkout *path* lies in: ``zmr checkout`` records it as ``zmr.project`` in the checkout's git config."""
    if not path.is_dir():
        return None
    root = (git.Repo.at(path).config_get("zmr.project", local=True) or "").strip()
    if root and (Path(root) / "manifests").is_dir():
        return Path(root)
    return None


def _no_angle_brackets(value: str, at: At) -> str | None:
    """Name and e-mail go into commit headers: ``Name <email>`` on one line."""
    if any(c in value for c in "<>\n"):
        at.add("must not contain '<', '>' or a newline", "remove them")
        return None
    return value


# The repository's web address: http(s), then no white space and none of the characters that end a Markdown link or
# a table cell. White space is spelled out, the union of Python's `\s` and an editor's (ECMAScript's: U+FEFF, not
# U+001C-U+001F nor U+0085), so that the settings schema (`zmr schema settings`, from `declared`) gives validate's answer;
# no escape that an ECMAScript pattern in unicode mode refuses (`\"`).
WEB_URL_RE = re.compile(r"""https?://[^\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff<>()\[\]`|\\"']+\Z""")


def _web_url(value: str, at: At) -> str | None:
    """The repository's web address: links in the README start with it, so only http(s) is taken."""
    if not WEB_URL_RE.match(value):
        at.add(f"{value!r} is not an http(s) URL", "write the repository's web address, e.g. https://github.com/OWNER/REPO")
        return None
    return value


def _setting(check: Check | None = None) -> Text:
    return Text("expected a non-empty string", empty=None, control=None, check=check)


SETTINGS = Record(
    (
        Field(
            "release",
            Record(
                (
                    Field("name", _setting(_no_angle_brackets), default=DEFAULT_RELEASE_NAME),
                    Field("email", _setting(_no_angle_brackets), default=DEFAULT_RELEASE_EMAIL),
                    Field("url", _setting(declared(_web_url, pattern=WEB_URL_RE))),
                ),
                fix="give it name, email and url",
                suggest=False,
                make=lambda f, at: Settings(release_name=f["name"], release_email=f["email"], release_url=f.get("url")),
            ),
            default=Settings(),
        ),
    ),
    fix="write `release:` with name, email, url",
    suggest=False,
    make=lambda f, at: f["release"],
)


def load_settings(root: Path) -> Settings:
    """``zmr.yaml``'s settings, the defaults where it is absent; SettingsError lists every problem."""
    path = root / SETTINGS_FILE
    if not path.is_symlink() and not path.exists():  # anything else there (a FIFO, a link out) is read, and refused
        return Settings()
    problems = Problems(SETTINGS_FILE)
    settings: Settings = read_file(path, SETTINGS_FILE, SETTINGS, problems, root=root, what="settings file")
    if problems:
        raise SettingsError(problems.items)
    return settings


class ListedComponentJson(TypedDict):
    """A component as its manifest declares it (*track*: null when it follows no upstream ref), its series folder and
    patch count, and the patches per upstream status kind (``none``: no header)."""

    component: str
    upstream: str
    commit: str
    track: str | None
    branch: str
    release: str
    patches: int
    series: str
    upstream_status: dict[str, int]


class ListedModelJson(TypedDict):
    model: str
    title: str
    components: list[ListedComponentJson]
    smoke: list[str]


class ListJson(TypedDict):
    """Every model of the repository, as its manifest declares it."""

    models: list[ListedModelJson]


@dataclass(frozen=True)
class ModelListing:
    """One model in ``zmr list``: its manifest and the number of patches in each component's series."""

    manifest: Manifest
    patch_counts: dict[str, int]
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # component → upstream status kind (or "none") → patches

    def to_json(self) -> ListedModelJson:
        components: list[ListedComponentJson] = [
            {
                "component": c.key,
                "upstream": c.upstream,
                "commit": c.commit,
                "track": c.track,
                "branch": c.branch,
                "release": c.release,
                "patches": self.patch_counts[c.key],
                "series": c.patches,
                "upstream_status": self.statuses.get(c.key, {}),
            }
            for c in self.manifest.components.values()
        ]
        return {"model": self.manifest.model, "title": self.manifest.title, "components": components, "smoke": [t.name for t in self.manifest.smoke]}


@dataclass(frozen=True)
class Listing(Report):
    """What ``zmr list`` shows: every model of the project."""

    models: list[ModelListing]

    def to_json(self) -> ListJson:
        return {"models": [m.to_json() for m in self.models]}


def list_models(project: Project) -> Listing:
    """Every manifest of *project*, with the patch count and the upstream statuses of each series (read, so a broken series fails here)."""
    from zmr.model import upstream_status

    listed = []
    for manifest in project.manifests():
        counts, statuses = {}, {}
        for c in manifest.components.values():
            patches = project.series(c).patches
            counts[c.key] = len(patches)
            statuses[c.key] = upstream_status.counts(patches)
        listed.append(ModelListing(manifest, counts, statuses))
    return Listing(listed)
