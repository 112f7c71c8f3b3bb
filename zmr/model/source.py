"""The zmr that the files zmr writes for a project name: its repository and an immutable commit of it.

The workflows `zmr init` writes use the action of that commit (``uses: OWNER/REPO@<commit>``, `zmr.ops.init.zmr_action`),
which installs zmr from its own files; the ``$schema`` lines of manifests and ``zmr.yaml`` name that commit's
``schemas/`` (`zmr.model.file_schemas.schema_url`). A leaf module (the standard library only), so both can import it.
"""

from __future__ import annotations

import re

_GITHUB_RE = re.compile(r"^(?:https://|ssh://git@|git@)github\.com[/:]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def github_page(url: str) -> str | None:
    """``https://github.com/OWNER/REPO`` for a GitHub remote URL, else None."""
    match = _GITHUB_RE.match(url.strip())
    return f"https://github.com/{match.group(1)}/{match.group(2)}" if match else None


# zmr's own repository: the workflows `zmr init` writes use its action (action.yml), which installs zmr from its own
# files; never a bare name from a package index, where whoever registered `zmr` would run code in the publish job.
ZMR_SOURCE = "https://github.com/Inferact/zero-mismatch-rl"


# The commit of zmr's repository that a release names (CHANGELOG.md, "Releasing"): the release step sets it. An
# immutable reference (a tag can move): the written workflows' `uses:`, the pip reference and the `$schema` lines of
# the files zmr writes (zmr.model.file_schemas.schema_url) all name it. tests/test_init.py checks that it resolves in a
# clone of the repository and that its action.yml declares every input the written workflows pass;
# tests/test_file_schemas.py, that its schemas/ equal the committed ones.
RELEASED_COMMIT = "4a38c603613033e1bc9036f62c4304b68b00c7f5"


def zmr_source() -> tuple[str, str]:
    """(repository URL, full commit id) of the zmr that the files `zmr init` writes name.

    The GitHub repository and commit this zmr was installed from, when pip recorded them (`pip install git+URL@REF`
    writes them to the distribution's direct_url.json, PEP 610); else RELEASED_COMMIT of zmr's own repository.
    Only a GitHub repository has an action a workflow can `uses:`, so another URL counts as none.
    """
    import json
    from importlib import metadata

    try:
        recorded = json.loads(metadata.distribution("zmr").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        recorded = None
    vcs = recorded.get("vcs_info", {}) if isinstance(recorded, dict) else {}
    commit, url = vcs.get("commit_id", ""), recorded.get("url", "") if isinstance(recorded, dict) else ""
    page = github_page(url) if isinstance(url, str) else None
    if vcs.get("vcs") == "git" and isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) and page:
        return page, commit
    return ZMR_SOURCE, RELEASED_COMMIT
