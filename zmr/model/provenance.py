"""Did zmr build this commit? For build and publish, before they replace a branch.

A release tip is zmr's when it has both the trailers and the shape of one:

- its last paragraph names the component (``Zmr-Model``, ``Zmr-Component``),
  the pin (``Zmr-Upstream-Commit``) and the series (``Zmr-Series``);
- author and committer are one identity with one date (zmr writes both
  alike; ``git commit --amend`` or a rebase changes the committer);
- two-commit layout: its one parent is a root commit naming the same pin;
  snapshot layout: it is the root and names its upstream (``Zmr-Upstream``).

Copying trailers into a hand-made commit can fool this; it is meant to
catch mistakes (a hand-made branch, a commit added on top), not forgery.
A branch whose tip is not zmr's is replaced only on request, and its old
tip is kept under ``refs/zmr/replaced/<branch>/<old-id>``.
"""

from __future__ import annotations

from zmr.infra import git

REPLACED_PREFIX = "refs/zmr/replaced/"
TRAILER_UPSTREAM = "Zmr-Upstream"
TRAILER_UPSTREAM_COMMIT = "Zmr-Upstream-Commit"
TRAILER_SERIES = "Zmr-Series"
TRAILER_MODEL = "Zmr-Model"
TRAILER_COMPONENT = "Zmr-Component"


def replaced_ref(branch: str, old: str) -> str:
    """Where a replaced tip is kept (locally by build, on the remote by publish)."""
    return f"{REPLACED_PREFIX}{branch}/{old}"


def not_built_by_zmr(repo: git.Repo, tip: str, model: str, key: str) -> str:
    """'' when *tip* (present in *repo*) is a release commit zmr builds for *model*/*key*, else why not (fits "which ...")."""
    info = repo.commit_info(tip)
    trailers = info.trailers()
    if trailers.get(TRAILER_MODEL) != model or trailers.get(TRAILER_COMPONENT) != key:
        return f"is not a release commit of {model}/{key} (no {TRAILER_MODEL}/{TRAILER_COMPONENT} trailers naming it)"
    pin = trailers.get(TRAILER_UPSTREAM_COMMIT)
    if not pin or not trailers.get(TRAILER_SERIES):
        return f"has no {TRAILER_UPSTREAM_COMMIT}/{TRAILER_SERIES} trailers (not a release commit zmr built)"
    if len(info.parents) > 1 or (info.parents and not repo.has_object(info.parents[0], "commit")):
        return "has commits on top of or below a release layout (expected a snapshot and a changes commit)"
    if info.parents:
        parent = repo.commit_info(info.parents[0])
        if parent.parents:
            return "has commits on top of or below a release layout (expected a snapshot and a changes commit)"
        if parent.trailers().get(TRAILER_UPSTREAM_COMMIT) != pin:
            return f"sits on a snapshot that does not name {pin[:12]} (not a snapshot zmr built)"
    elif not trailers.get(TRAILER_UPSTREAM):
        return f"is a single commit without a {TRAILER_UPSTREAM} trailer (not a snapshot release zmr built)"
    if info.author != info.committer:
        return "was committed by someone other than its author (amended or rebased after zmr built it)"
    return ""
