"""What ``zmr rebase`` does to a checkout: save it (``snapshot``), put it back (``restore``), make it the rebased branch (``place``, ``mark_rebased``).

``zmr rebase`` changes a checkout only through these and the cherry-pick
steps of ``Checkout`` (``cherry_pick``, ``skip_pick``, ``quit_pick``,
``commit_as``, ``reset_hard_to_head``); everything else it does there only
reads (``check_identity``, ``dirty``, ``sync_state``, ``Checkout.pick_in_progress``, ...).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zmr.infra import git
from zmr.infra.files import atomic_write
from zmr.model.manifest import Component
from zmr.model.project import Project
from zmr.ops.checkout.state import config_values, keep_out_of_status
from zmr.ops.checkout.worktree import (
    REFRESH_MARKER,
    TOKEN_KEY,
    Checkout,
    CheckoutError,
    branch_name,
    create_checkout,
    mark_exported,
    new_token,
    open_checkout,
    refresh,
    tmp_prefix,
    try_open,
)


def mark_rebased(co: Checkout, pin: str, tip: str, fingerprint: str) -> None:
    """A rebase that ended in the checkout moved its pin to *pin*; *tip* (its HEAD) equals the series written (``mark_exported``)."""
    co.set_config({"zmr.pin": pin})
    mark_exported(co, tip, "zmr rebase", fingerprint)


def place(project: Project, component: Component, saved: SavedCheckout, source: Path, base: str, tip: str, extra_objects: Sequence[str] = ()) -> Checkout:
    """The checkout *saved* names made the branch of *component* at *tip*, pinned at *base*.

    Created (with the saved token) when nothing is there, else refreshed (its
    tree reset to *tip*, untracked files kept) when it carries the saved
    token; anything else there is refused. *source* is the mirror holding
    the commits; *extra_objects* are more commits to copy in (for a later cherry-pick).
    """
    branch = branch_name(component)
    config = config_values(project, component, branch, base)
    path = saved.path
    co = None if path.is_symlink() else open_checkout(path)
    if co is None:
        if path.is_symlink():
            raise CheckoutError(f"{path}: is a symbolic link; zmr makes a checkout only in a real folder", details=["remove the link, then run again"])
        keep_out_of_status(project, path)
        create_checkout(path, source, branch, base, tip, {**config, TOKEN_KEY: saved.token}, extra=extra_objects)
        co = open_checkout(path)
        assert co is not None
    elif not saved.token or co.token != saved.token:
        raise CheckoutError(
            f"{path}: is not the checkout this rebase saved (its zmr.token differs); zmr leaves it alone",
            details=["undo the rebase with --abort (nothing is done there either)"],
        )
    else:
        refresh(co, source, branch, base, tip, config, clean=False, extra_objects=extra_objects)
    return co


_CONFIG_COPY = "checkout-config"  # the name of the copy of .git/config in the folder given to snapshot


@dataclass(frozen=True)
class SavedCheckout:
    """What ``restore`` needs to put a checkout back as ``snapshot`` found it.

    Invariant: when *existed*, *refs* are all its refs under ``refs/``, *head*
    is its HEAD (a ref name when *head_symbolic*, else a commit id), and the
    folder given to ``snapshot`` holds a byte copy of its ``.git/config``.
    When not, nothing was at *path*: a checkout the rebase makes there gets
    *token*. Either way zmr touches the folder only while it carries *token*
    (``zmr.token``); state without one (an older zmr's) names no checkout zmr may touch.
    """

    path: Path
    existed: bool
    head: str = ""
    head_symbolic: bool = False
    refs: dict[str, str] = field(default_factory=dict)
    token: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": str(self.path), "existed": self.existed, "token": self.token}
        if self.existed:
            data.update(head=self.head, head_symbolic=self.head_symbolic, refs=dict(self.refs))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SavedCheckout:
        return cls(
            Path(data["path"]),
            bool(data["existed"]),
            data.get("head", ""),
            bool(data.get("head_symbolic")),
            dict(data.get("refs", {})),
            str(data.get("token") or ""),
        )

    def open(self) -> Checkout | None:
        """The checkout at *path* when it carries *token*; None when it is gone or is not the one saved (zmr then leaves it alone)."""
        co = try_open(self.path)
        return co if co is not None and self.token and co.token == self.token else None


def snapshot(co: Checkout | None, path: Path, into: Path) -> SavedCheckout:
    """Save what ``restore`` needs to undo anything done to the checkout *co* at *path* (None: nothing there); files go into *into*."""
    if co is None:
        return SavedCheckout(path, False, token=new_token())
    token = co.ensure_token()  # before the copy: --abort puts back a config that still carries it
    shutil.copyfile(co.git_dir / "config", into / _CONFIG_COPY)
    symref = co.repo.head_symref()
    return SavedCheckout(path, True, symref or co.head() or "", symref is not None, co.repo.refs("refs/"), token)


def restore(saved: SavedCheckout, folder: Path) -> bool:
    """Put the checkout back as *saved* (files from *folder*): config, refs, HEAD and tree; False when it is gone.

    A checkout that did not exist is removed, half made or not, when it
    carries the saved token; anything else there is left alone. One that did
    gets its operations in progress quit, its config and refs back (refs the
    snapshot did not have deleted), HEAD back and its tree reset to HEAD;
    without the saved token it is left alone and this says it is gone.
    """
    path = saved.path
    if not saved.existed:
        made = saved.open()
        if made is not None:
            shutil.rmtree(path)
        for stale in path.parent.glob(tmp_prefix(path) + "*") if saved.token else ():
            half = try_open(stale)
            if half is not None and half.token == saved.token:
                shutil.rmtree(stale)
        return True
    co = saved.open()
    if co is None:
        return False
    for args in (["cherry-pick", "--quit"], ["rebase", "--quit"], ["am", "--quit"]):
        co.repo.run(args, check=False)
    atomic_write(co.git_dir / "config", (folder / _CONFIG_COPY).read_bytes())
    current = co.repo.refs("refs/")
    wanted = saved.refs
    updates = [git.RefUpdate(ref, wanted.get(ref), current.get(ref)) for ref in sorted(set(current) | set(wanted)) if current.get(ref) != wanted.get(ref)]
    co.repo.update_refs(updates, "zmr rebase --abort")
    if saved.head_symbolic:
        co.repo.point_head(saved.head)
    elif saved.head:
        co.repo.detach_head(saved.head)
    co.repo.run(["reset", "--quiet", "--hard", "HEAD"])
    marker = co.git_dir / REFRESH_MARKER
    if marker.exists():
        marker.unlink()
    return True
