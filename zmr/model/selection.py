"""Which components a command acts on: one rule (docs/reference.md §6.4), in `components`.

A read-only command acts on every model when none is named; one that
writes branches, pushes or runs code needs MODEL or ``--all``
(`acts_on_all`). Commands that act on one model (``checkout``, ``export``)
and on one component (``rebase``, `one_component`) choose through the same
function. ``zmr update``'s exception is `UPDATE_WRITES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from zmr.infra.errors import ZmrError

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Component
    from zmr.model.project import Project

# `zmr update --apply` writes the pins and series of the working tree (what the scheduled job proposes as one
# pull request, reviewed before it lands), never a branch, a remote or code: for this rule it is read-only,
# so `zmr update --apply` with no model moves every model's tracked components, as the job runs it.
UPDATE_WRITES = False


def acts_on_all(models: Sequence[str] | None, all_models: bool, *, writes: bool) -> bool:
    """Whether a command acts on every model: with --all, or, for a read-only command, when no model is named.

    A command that writes branches, pushes or runs code (*writes*) never
    defaults to every model: it needs MODEL or --all.
    """
    if all_models or models:
        return all_models
    if writes:
        raise ZmrError(
            "name one or more models, or pass --all",
            details=["`zmr list` shows the models; commands that write branches, push or run code act on every model only with --all"],
        )
    return True


def components(project: Project, models: Sequence[str] | None, keys: Sequence[str] | None, all_models: bool = False, *, writes: bool) -> list[Component]:
    """The components a command acts on, in manifest order (in the order of *keys* when given): the one rule of §6.4.

    *keys* (``-c``) picks components of the chosen models; a key no chosen
    model has is an error (naming the known keys when one model is chosen).
    """
    every = acts_on_all(models, all_models, writes=writes)
    manifests = project.manifests(None if every else list(models or ()))
    result = []
    for manifest in manifests:
        if keys:
            for key in keys:
                if key in manifest.components:
                    result.append(manifest.components[key])
                elif len(manifests) == 1:
                    manifest.component(key)  # raises with the known keys
        else:
            result.extend(manifest.components.values())
    if keys and not result:
        raise ZmrError(f"no component named {', '.join(keys)} in the selected models")
    return result


def one_component(project: Project, model: str | None, keys: Sequence[str] | None, in_progress: bool = False, command: str = "rebase") -> Component:
    """The one component a rebase (or *command*, which names it in the errors) acts on: -c, the model's only one, or
    (with *in_progress*) the one being rebased.

    Without *model* (``--continue``, ``--skip``, ``--abort``, as git takes them): the one rebase under way.
    """
    if model is None:
        going = [c for c in components(project, None, None, writes=False) if project.rebase_state(c).is_file()] if in_progress else []
        going = [c for c in going if not keys or c.key in keys]
        if len(going) == 1:
            return going[0]
        if not in_progress:
            raise ZmrError("name the model to rebase", details=["e.g. zmr rebase MODEL -c COMPONENT --onto REV (`zmr list` shows the models)"])
        if not going:
            raise ZmrError("no rebase in progress", details=["start one with `zmr rebase MODEL -c COMPONENT --onto REV`"])
        raise ZmrError("several rebases are in progress; name the model (and -c)", details=[f"zmr rebase {c.model} -c {c.key} ..." for c in going])
    if keys and len(keys) > 1:
        raise ZmrError(f"{command} one component at a time", details=[f"e.g. zmr {command} {model} -c {keys[0]} ..."])
    chosen = components(project, [model], keys, writes=True)
    if not keys and in_progress:
        going = [c for c in chosen if project.rebase_state(c).is_file()]
        if len(going) == 1:
            return going[0]
    if len(chosen) == 1:
        return chosen[0]
    raise ZmrError(f"model {model!r} has several components; name one with -c", details=[f"components: {', '.join(c.key for c in chosen)}"])
