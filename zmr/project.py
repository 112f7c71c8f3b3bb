"""The zmr repository: where manifests, series and cases live, and its settings.

``zmr.yaml`` at the repository root is optional::

    release:
      name: zmr release        # author and committer of release commits
      email: release@zmr.invalid
      url: https://github.com/OWNER/REPO   # for links in generated docs

The release identity is an input of every release commit id: change it and
every branch changes.

``Project`` is the one place that knows where zmr keeps its own files in
the repository: the git-ignored ``.zmr/`` folder (rebase state, checkout
pointers, the export journal, smoke artifacts) and the default checkout
folder ``work/<model>/<component>`` (docs/reference.md §8.3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zmr import git
from zmr.errors import SettingsError, ZmrError
from zmr.manifest import Component, Manifest, Policy, load_manifests
from zmr.schema import At, Check, Field, Record, Text, read_file
from zmr.yamlnodes import Problems

SETTINGS_FILE = "zmr.yaml"
STATE_DIR = ".zmr"
DEFAULT_RELEASE_NAME = "zmr release"
DEFAULT_RELEASE_EMAIL = "release@zmr.invalid"


@dataclass(frozen=True)
class Settings:
    release_name: str = DEFAULT_RELEASE_NAME
    release_email: str = DEFAULT_RELEASE_EMAIL
    release_url: str | None = None


@dataclass
class Project:
    """A zmr repository checked out at *root*."""

    root: Path
    settings: Settings
    policy: Policy = Policy()

    @classmethod
    def find(cls, start: str | os.PathLike[str] | None = None, policy: Policy = Policy()) -> "Project":
        """The project every command acts on, seen from *start* (default: the current folder).

        ``$ZMR_REPO`` when set; else, inside a ``zmr checkout`` (also one made
        with ``--dir`` outside the repository), the repository it belongs to;
        else the nearest folder upward holding ``manifests/`` or ``zmr.yaml``.
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
        top = git.run(["rev-parse", "--show-toplevel"], cwd=here, check=False) if here.is_dir() and not explicit else None
        if top is not None and top.returncode == 0:
            # A git repository that is no zmr project yet: a fresh clone of hand-made branches, or a new one.
            root = top.stdout.decode("utf-8", "surrogateescape").strip()
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
        """``.zmr/``: zmr's own files (git-ignored; none of them is an input of a release)."""
        return self.root / STATE_DIR

    def rebase_dir(self, component: Component) -> Path:
        """``.zmr/rebase/<model>-<component>/``: the state of a rebase under way (``state.json`` and the saved copies)."""
        return self.state_dir / "rebase" / f"{component.model}-{component.key}"

    def rebase_state(self, component: Component) -> Path:
        """``state.json`` of ``rebase_dir``: present exactly while a rebase of *component* is under way."""
        return self.rebase_dir(component) / "state.json"

    def checkout_pointer(self, component: Component) -> Path:
        """``.zmr/checkouts/<model>/<component>``: the folder of a checkout made with ``--dir``, one line."""
        return self.state_dir / "checkouts" / component.model / component.key

    def pending_removals(self, component: Component) -> Path:
        """``.zmr/pending-removals/<model>-<component>.json``: files an interrupted export still has to remove."""
        return self.state_dir / "pending-removals" / f"{component.model}-{component.key}.json"

    def smoke_artifacts(self, model: str) -> Path:
        """``.zmr/smoke/<model>/``: logs and test outputs of ``zmr smoke`` when no ``--artifacts`` is given."""
        return self.state_dir / "smoke" / model

    def default_checkout(self, component: Component) -> Path:
        """``work/<model>/<component>``: where a checkout goes without ``--dir``."""
        return self.root / "work" / component.model / component.key

    @property
    def repo(self) -> git.Repo:
        if not (self.root / ".git").exists():
            raise ZmrError(f"{self.root}: not a git repository; release branches need one (run `git init`)")
        return git.Repo.discover(self.root)

    def manifests(self, models: list[str] | None = None) -> list[Manifest]:
        return load_manifests(self.root, models or None, self.policy)

    def targets(self, models: list[str] | None, components: list[str] | None, all_models: bool) -> list[Component]:
        """The components a command acts on, in manifest order."""
        if not models and not all_models:
            raise ZmrError("name one or more models, or pass --all", details=["`zmr list` shows the models"])
        manifests = self.manifests(None if all_models else models)
        result = []
        for manifest in manifests:
            if components:
                for key in components:
                    if key in manifest.components:
                        result.append(manifest.components[key])
                    elif len(manifests) == 1:
                        manifest.component(key)  # raises with the known keys
            else:
                result.extend(manifest.components.values())
        if components and not result:
            raise ZmrError(f"no component named {', '.join(components)} in the selected models")
        return result


def _checkout_owner(path: Path) -> Path | None:
    """The repository of the checkout *path* lies in: ``zmr checkout`` records it as ``zmr.project`` in the checkout's git config."""
    if not path.is_dir():
        return None
    proc = git.run(["config", "--local", "--get", "zmr.project"], cwd=path, check=False)
    root = proc.stdout.decode("utf-8", "surrogateescape").strip()
    if proc.returncode == 0 and root and (Path(root) / "manifests").is_dir():
        return Path(root)
    return None


def _no_angle_brackets(value: str, at: At) -> str | None:
    """Name and e-mail go into commit headers: ``Name <email>`` on one line."""
    if any(c in value for c in "<>\n"):
        at.add("must not contain '<', '>' or a newline", "remove them")
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
                    Field("url", _setting()),
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
    settings = read_file(path, SETTINGS_FILE, SETTINGS, problems, root=root, what="settings file")
    if problems:
        raise SettingsError(problems.items)
    return settings
