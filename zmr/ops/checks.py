"""Checks of a release built on an upstream commit, and the search with skips that uses them (``zmr update --test``, ``zmr bisect``).

A *check* (``--test CMD``, ``--smoke``, ``--bitwise``) judges the release of a component built on one
upstream commit::

    upstream commit c ──SeriesAtPin.trial (zmr.ops.update: the series replayed in memory)──▶ release commit
        ──git.Repo.write_tree_to (a throwaway index, a temporary folder)──▶ tree
        ──each command of the check, cwd = the tree (zmr.infra.procgroup.run_command)──▶ good | bad | skip

Exit 0 is good; 125 is skip (as ``git bisect run``); any other exit, a
timeout or a command that cannot start is bad. A commit the series does not
replay onto is skip, and so is one whose tree cannot be written.

Results are kept in zmr's state, ``<git dir>/zmr/checks/<model>/<component>/<check key>.json``
(``Results``), keyed by the upstream commit and the tree of the release:
a re-run with the same series and the same check reuses them (nothing is
re-tested); a changed patch gives another tree and is tested again. Where
the series was replayed onto a commit is kept there too, keyed by the
commit and the series (``Results.replayed``): the tree it gave, or that it
does not replay (a skip), so a re-run neither replays nor tests again. Each
result is written (whole file, atomically) as soon as it is known, so an
interrupted search resumes where it stopped.

The search (``bisect_line``) is over positions of a first-parent line:
position ``lo`` is good and ``hi`` bad (by assumption or by a check); it
tries the untested position nearest the middle of (lo, hi), moves lo or hi,
and sets aside skips, until no untested position is left between them.
With no skip that is ⌈log2 (hi - lo)⌉ checks. The result: lo (the newest
good), hi (the first bad, when no skipped position lies between them),
and the skipped positions in between (then the first bad is one of those
or hi).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from zmr.infra import git
from zmr.infra.errors import ZmrError
from zmr.infra.procgroup import PASSED, run_command
from zmr.infra.state import CHECKS, StateVersion
from zmr.model.manifest import Component, SmokeTest
from zmr.model.project import Project

if TYPE_CHECKING:
    from zmr.infra.cache import Cache

GOOD, BAD, SKIP = "good", "bad", "skip"
SKIP_EXIT = 125  # as git bisect run
DEFAULT_TIMEOUT = 3600.0
OUTPUT_LIMIT = 4000  # characters of a check's output kept in a result (its end)


class CheckError(ZmrError):
    """A check cannot be set up: no command, no smoke test declared, a tree that cannot be made."""


# -- what a check runs ----------------------------------------------------------------------------


class CommandJson(TypedDict):
    name: str
    run: str
    timeout: float


class CheckJson(TypedDict):
    """The check: its kind (test, smoke, bitwise), the key its results are kept under, its commands."""

    kind: str
    key: str
    commands: list[CommandJson]


class TriedJson(TypedDict):
    """The check at one upstream commit: good, bad or skip, why, the release tree it ran in (null: none, the series does
    not replay there or the commit was not tested), the end of its output, whether an earlier run's answer was taken."""

    commit: str
    verdict: str
    reason: str
    tree: str | None
    output: str
    cached: bool


@dataclass(frozen=True)
class Command:
    """One command of a check: ``/bin/sh -c RUN`` with cwd = the tree (or *in_root*: the repository root)."""

    name: str
    run: str
    timeout: float = DEFAULT_TIMEOUT
    env: tuple[tuple[str, str], ...] = ()
    trees: tuple[tuple[str, str], ...] = ()  # other components' release commits a model test needs: (component, commit)
    in_root: bool = False

    def to_json(self) -> CommandJson:
        return {"name": self.name, "run": self.run, "timeout": self.timeout}


@dataclass(frozen=True)
class Check:
    """What decides whether a release is good: ``test`` (one command), ``smoke`` (the component's smoke tests), ``bitwise``."""

    kind: str  # test | smoke | bitwise
    commands: tuple[Command, ...]

    @property
    def key(self) -> str:
        """Names the check in the results: the kind and every command with its environment (not the timeouts)."""
        text = json.dumps([self.kind, [[c.name, c.run, list(c.env), list(c.trees), c.in_root] for c in self.commands]])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]

    @property
    def label(self) -> str:
        if self.kind == "test":
            return f"--test {self.commands[0].run}"
        return f"--{self.kind} ({', '.join(c.name for c in self.commands)})"

    def to_json(self) -> CheckJson:
        return {"kind": self.kind, "key": self.key, "commands": [c.to_json() for c in self.commands]}


def command_check(command: str) -> Check:
    if not command.strip():
        raise CheckError("--test needs a command", details=["for example --test 'python -m pytest -x tests/unit'"])
    return Check("test", (Command("test", command),))


def smoke_check(component: Component) -> Check:
    """The component's own smoke tests (``components.<c>.smoke``), each in the tree."""
    if not component.smoke:
        raise CheckError(
            f"{component.label}: --smoke needs smoke tests, and the component declares none",
            details=[f"add `smoke:` to the component in manifests/{component.model}.yaml, or pass --test CMD"],
        )
    return Check("smoke", tuple(Command(t.name, t.run, float(t.timeout), t.env) for t in component.smoke))


def bitwise_check(project: Project, component: Component, tests: Sequence[SmokeTest], components: dict[str, Component], cache: Cache | None = None) -> Check:
    """The model's mismatch check: its model-level smoke tests that need *component* (the demo's ``bitwise-logprobs``).

    Such a test runs in the repository root with a tree per component it
    needs (``ZMR_TREE_<COMPONENT>``): the tried release for *component*, the
    built release branch for the others. It exits non-zero when any token
    differs, which makes the commit bad. Another component's branch must be
    what its manifest and series give now (``zmr.ops.build.compute``): a stale
    one would answer for a release nobody ships, so it is refused (exit 2).
    """
    chosen = [t for t in tests if component.key in t.needs]
    if not chosen:
        raise CheckError(
            f"{component.label}: --bitwise needs a model smoke test that needs {component.key} (the model's mismatch check)",
            details=[f"add one under `smoke:` in manifests/{component.model}.yaml with `needs: [{component.key}, ...]`, or pass --test CMD"],
        )
    repo = project.repo
    commands = []
    for t in chosen:
        trees = []
        for key in t.needs:
            if key == component.key:
                continue
            other = components.get(key)
            commit = repo.resolve(f"refs/heads/{other.branch}") if other else None
            if other is None or commit is None:
                raise CheckError(f"{component.label}: --bitwise needs the release branch of {key}", details=[f"run `zmr build {component.model}` first"])
            _refuse_stale(project, component, other, commit, cache)
            trees.append((key, commit))
        commands.append(Command(t.name, t.run, float(t.timeout), t.env, tuple(trees), in_root=True))
    return Check("bitwise", tuple(commands))


def _refuse_stale(project: Project, component: Component, other: Component, commit: str, cache: Cache | None) -> None:
    """*other*'s release branch (at *commit*) is what its manifest and series give now, or a CheckError says it is not."""
    import zmr.ops.build
    from zmr.infra.cache import Cache as NewCache

    release = zmr.ops.build.compute(project, other, cache or NewCache(), partial=True)
    if release.tip != commit:
        raise CheckError(
            f"{component.label}: --bitwise would compare with {other.branch}, a stale release branch of {other.key}",
            details=[
                f"{other.branch}: at {commit[:12]}, the manifest and series of {other.label} give {release.tip[:12]}",
                f"run `zmr build {component.model}` first, then --bitwise again",
            ],
        )


# -- one result -----------------------------------------------------------------------------------


@dataclass
class Tried:
    """The check at one upstream *commit*: good, bad or skip, why, the release tree it ran in, the end of its output."""

    commit: str
    verdict: str
    reason: str
    tree: str | None = None
    output: str = ""
    cached: bool = False

    def to_json(self) -> TriedJson:
        return {"commit": self.commit, "verdict": self.verdict, "reason": self.reason, "tree": self.tree, "output": self.output, "cached": self.cached}


class Results:
    """The results of one check for one component, in zmr's state (see the module docstring)."""

    def __init__(self, project: Project, component: Component, check: Check):
        self.path = project.state_path(CHECKS, model=component.model, component=component.key, key=check.key)
        self.check = check
        self._data: dict[str, dict[str, Any]] = {}
        try:
            loaded = CHECKS.load(self.path)
        except StateVersion:
            loaded = None  # another zmr's results: tested again (and written in this zmr's format)
        if loaded is not None:
            if not isinstance(loaded.get("results"), dict):
                raise CHECKS.refused(self.path, "no results object, as zmr writes")
            self._data = loaded["results"]

    @staticmethod
    def _key(commit: str, tree: str) -> str:
        return f"{commit}:{tree}"

    def get(self, commit: str, tree: str) -> Tried | None:
        item = self._data.get(self._key(commit, tree))
        if not isinstance(item, dict) or item.get("verdict") not in (GOOD, BAD, SKIP):
            return None
        return Tried(commit, item["verdict"], str(item.get("reason", "")), tree, str(item.get("output", "")), cached=True)

    def put(self, tried: Tried) -> None:
        assert tried.tree is not None
        self._data[self._key(tried.commit, tried.tree)] = {"verdict": tried.verdict, "reason": tried.reason, "output": tried.output}
        self._write()

    def replayed(self, commit: str, series: str) -> tuple[str | None, str] | None:
        """What replaying *series* (its key) onto *commit* gave, when kept: (the release's tree, "") or (None, why it does not replay)."""
        item = self._data.get(f"{commit}:replay:{series}")
        if not isinstance(item, dict) or item.get("verdict") != "replay":
            return None
        tree, reason = item.get("tree"), item.get("reason")
        if tree is not None and not (isinstance(tree, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", tree)):
            return None  # not what zmr wrote: replayed again
        return tree, str(reason or "")

    def keep_replay(self, commit: str, series: str, tree: str | None, reason: str = "") -> None:
        """Keep what replaying *series* onto *commit* gave (``replayed``)."""
        self._data[f"{commit}:replay:{series}"] = {"verdict": "replay", "tree": tree, "reason": reason}
        self._write()

    def _write(self) -> None:
        CHECKS.save(self.path, {"check": self.check.to_json(), "results": self._data})


# -- running a check -------------------------------------------------------------------------------


def _environment(model: str, component: str, tree: Path, upstream_commit: str, release_commit: str) -> dict[str, str]:
    # Git variables of the caller would redirect git inside the tree; the running interpreter's folder first on PATH (as zmr smoke).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PATH"] = os.path.dirname(sys.executable) + (os.pathsep + env["PATH"] if env.get("PATH") else "")
    env.update(
        {
            "ZMR_MODEL": model,
            "ZMR_COMPONENT": component,
            "ZMR_TREE": str(tree),
            "ZMR_UPSTREAM_COMMIT": upstream_commit,
            "ZMR_COMMIT": release_commit,
        }
    )
    return env


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-OUTPUT_LIMIT:].decode("utf-8", "replace")


def run_check(project: Project, component: Component, check: Check, repo: git.Repo, upstream_commit: str, release_commit: str) -> tuple[str, str, str]:
    """Write the tree of *release_commit* (in *repo*) to a temporary folder and run *check* there: (verdict, reason, output)."""
    with tempfile.TemporaryDirectory(prefix="zmr-check-") as tmp:
        root = Path(tmp)
        tree_dir = root / component.key
        try:
            repo.write_tree_to(repo.tree_of(release_commit), tree_dir)
        except git.GitError as err:
            return SKIP, f"the tree could not be written: {err.message}", ""
        base_env = _environment(component.model, component.key, tree_dir, upstream_commit, release_commit)
        outputs = []
        for command in check.commands:
            env = {**base_env, **dict(command.env)}
            cwd = tree_dir
            if command.in_root:
                cwd = project.root
                artifacts = root / "artifacts" / command.name
                artifacts.mkdir(parents=True)
                env.update({"ZMR_ARTIFACTS": str(artifacts), f"ZMR_TREE_{_env_key(component.key)}": str(tree_dir)})
                for key, commit in command.trees:
                    other = root / "others" / key
                    project.repo.write_tree_to(project.repo.tree_of(commit), other)
                    env[f"ZMR_TREE_{_env_key(key)}"] = str(other)
            log = root / f"{command.name}.log"
            outcome = run_command(command.run, cwd=cwd, env=env, timeout=command.timeout, log_path=log)
            text = _tail(log)
            outputs.append(f"$ {command.run}\n{text}" if len(check.commands) > 1 else text)
            if outcome.status == PASSED:
                continue
            if outcome.exit_code == SKIP_EXIT:
                return SKIP, f"{command.name}: exit {SKIP_EXIT} (skip)", "".join(outputs)[-OUTPUT_LIMIT:]
            return BAD, f"{command.name}: {outcome.message or outcome.status}", "".join(outputs)[-OUTPUT_LIMIT:]
        shutil.rmtree(tree_dir, ignore_errors=True)
        return GOOD, "exit 0", "".join(outputs)[-OUTPUT_LIMIT:]


def _env_key(component: str) -> str:
    return component.upper().replace("-", "_")


# -- the search ------------------------------------------------------------------------------------


@dataclass
class LineSearch:
    """What ``bisect_line`` found: *lo* good, *hi* bad, *skipped* the positions set aside between them."""

    lo: int
    hi: int
    skipped: list[int] = field(default_factory=list)


def bisect_line(lo: int, hi: int, verdict: Callable[[int], str], skipped: Sequence[int] = ()) -> LineSearch:
    """Positions lo (good) < hi (bad): narrow them to neighbours but for skips (see the module docstring)."""
    aside = set(skipped)
    while True:
        candidates = [i for i in range(lo + 1, hi) if i not in aside]
        if not candidates:
            return LineSearch(lo, hi, sorted(i for i in aside if lo < i < hi))
        mid = (lo + hi) // 2
        pick = min(candidates, key=lambda i: (abs(i - mid), i))
        found = verdict(pick)
        if found == GOOD:
            lo = pick
        elif found == BAD:
            hi = pick
        else:
            aside.add(pick)


def expected_checks(n: int) -> int:
    """Checks of ``bisect_line`` over *n* untested positions between a good and a bad one, with no skip."""
    return math.ceil(math.log2(n + 1)) if n > 0 else 0
