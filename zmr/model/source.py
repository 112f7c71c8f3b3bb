"""The zmr that the files zmr writes for a project name: its repository and an immutable commit of it.

The workflows `zmr init` writes use the action of that commit (``uses: OWNER/REPO@<commit>``, `zmr.ops.init.zmr_action`),
which installs zmr from its own files; the ``$schema`` lines of manifests and ``zmr.yaml`` name that commit's
``schemas/`` (`zmr.model.file_schemas.schema_url`). A leaf module (the standard library only, and `zmr.infra.git`
when zmr runs from a checkout of its repository), so both can import it. `version()` is the version that ``zmr
--version`` and every ``--json`` output's ``zmr`` key report.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

_GITHUB_RE = re.compile(r"^(?:https://|ssh://git@|git@)github\.com[/:]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def github_page(url: str) -> str | None:
    """``https://github.com/OWNER/REPO`` for a GitHub remote URL, else None."""
    match = _GITHUB_RE.match(url.strip())
    return f"https://github.com/{match.group(1)}/{match.group(2)}" if match else None


# zmr's own repository: the workflows `zmr init` writes use its action (action.yml), which installs zmr from its own
# files; never a bare name from a package index, where whoever registered `zmr` would run code in the publish job.
ZMR_SOURCE = "https://github.com/Inferact/zero-mismatch-rl"


# The commit of zmr's repository that a release names (CHANGELOG.md, "Releasing"): scripts/release sets it to the
# commit its tag vX.Y.Z names, in the commit after it. An
# immutable reference (a tag can move): the written workflows' `uses:`, the pip reference and the `$schema` lines of
# the files zmr writes (zmr.model.file_schemas.schema_url) all name it. tests/test_init.py checks that it resolves in a
# clone of the repository and that its action.yml declares every input the written workflows pass;
# tests/test_file_schemas.py, that its schemas/ equal the committed ones.
RELEASED_COMMIT = "2e5ee7fc15a6095e26928d9266022a93967db737"


def zmr_source() -> tuple[str, str]:
    """(repository URL, full commit id) of the zmr that the files `zmr init` writes name.

    The GitHub repository and commit this zmr was installed from, when pip recorded them (`pip install git+URL@REF`
    writes them to the distribution's direct_url.json, PEP 610); else RELEASED_COMMIT of zmr's own repository.
    Only a GitHub repository has an action a workflow can `uses:`, so another URL counts as none.
    """
    recorded = _recorded()
    vcs = recorded.get("vcs_info", {})
    vcs = vcs if isinstance(vcs, dict) else {}
    commit, url = vcs.get("commit_id", ""), recorded.get("url", "")
    page = github_page(url) if isinstance(url, str) else None
    if vcs.get("vcs") == "git" and isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) and page:
        return page, commit
    return ZMR_SOURCE, RELEASED_COMMIT


def _recorded() -> dict[str, object]:
    """What pip recorded of where this zmr came from (PEP 610: direct_url.json of the dist-info folder it installs
    beside the package), or {}. Read as a file: importlib.metadata costs tens of milliseconds, on every --json output."""
    import json

    from zmr import __version__

    try:
        recorded = json.loads((_package_parent() / f"zmr-{__version__}.dist-info" / "direct_url.json").read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _package_parent() -> Path:
    """The folder that holds the package zmr: the root of a checkout of its repository, or site-packages."""
    import zmr

    return Path(zmr.__file__).resolve().parent.parent


def _checkout_commit(release_tag: str | None) -> tuple[str, bool] | None:
    """(HEAD, HEAD is *release_tag*'s commit) when zmr runs from a git checkout of its repository, else None."""
    root = _package_parent()
    if not ((root / ".git").exists() and (root / "pyproject.toml").is_file()):
        return None
    from zmr.infra import git
    from zmr.infra.errors import ZmrError

    try:
        repo = git.Repo.at(root)
        head = repo.resolve("HEAD")
        tagged = repo.resolve(f"refs/tags/{release_tag}") if release_tag else None
    except (ZmrError, OSError):
        return None
    return (head, tagged == head) if head else None


@functools.cache
def version() -> str:
    """zmr's version as ``zmr --version`` and the ``zmr`` key of ``--json`` outputs say it: `zmr.__version__` exactly
    when this is a release, else that with the commit it was built from (PEP 440's local label ``+g<12 hex digits>``).

    Only a release commit carries a release version X.Y.Z (scripts/release: the commit its tag vX.Y.Z names); every
    other commit's `__version__` is a development one, X.Y.Z.devN. Where the commit is known (a git checkout of zmr's
    repository, or pip's record of a ``git+URL@REF`` install) it is added to a development version, and to a release
    version unless the commit is that release's tag: ``0.2.1.dev0+g0123456789ab``, ``0.2.0+g0123456789ab`` (edits on
    top of the 0.2.0 commit). Nothing of the clock or the machine enters it, and no commit id or patch byte zmr
    computes depends on it (tests/test_release.py).
    """
    from zmr import __version__

    release = "dev" not in __version__
    checkout = _checkout_commit(f"v{__version__}" if release else None)
    if checkout is not None:
        head, is_tag = checkout
        return __version__ if is_tag else f"{__version__}+g{head[:12]}"
    if release:
        return __version__
    vcs = _recorded().get("vcs_info")
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return f"{__version__}+g{commit[:12]}" if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) else __version__
