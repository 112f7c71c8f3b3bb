"""Manifests: ``manifests/<model>.yaml``, one per model (docs/reference.md §2).

A manifest names, per component (an upstream framework such as vLLM or
Megatron-LM), the upstream repository, the pinned commit, the release branch
and the patch series folder, plus optional smoke tests.

Validation runs before any git command and reports every problem of a file
at once as ``file:line: problem; fix`` (exit status 2). Unknown keys are
errors: a typo must never pass silently. The format is data (``MANIFEST``,
a `zmr.model.yamlrecords.Record`); checks that span fields (smoke ``needs``, branch
collisions, within a model and across models) run after it. Change it
together with docs/reference.md §2 and `zmr new`'s templates.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import cast

from yaml.nodes import MappingNode, ScalarNode

from zmr.infra.errors import ManifestError, ZmrError
from zmr.infra.git import FULL_OID_RE
from zmr.model.yamlnodes import Problem, Problems, display_path, line_of, read_yaml, scalar
from zmr.model.yamlrecords import At, Check, Field, Fields, Key, ListOf, MapOf, Number, Record, Scalar, Text, declared, invisible_character, one_of, read_file

MODEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
COMPONENT_RE = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
SMOKE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
HEXISH_RE = re.compile(r"[0-9a-fA-F]{4,64}\Z")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RELEASE_MODES = ("two-commit", "snapshot")
DEFAULT_SMOKE_TIMEOUT = 600
# Branch names that belong to the repository itself, never to a release.
RESERVED_BRANCHES = {"main", "master", "HEAD", "trunk", "develop", "gh-pages"}
# Remote-helper transports that run commands (``ext::sh -c ...``) or read file descriptors.
_COMMAND_TRANSPORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_URL_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE_RE = re.compile(r"^[^/:]+:(?!//)")
ALLOWED_SCHEMES = {"https", "http", "ssh", "git", "file", "git+ssh", "ssh+git"}
# The longest names zmr accepts, in bytes (all are ASCII). zmr builds file names from them, such as
# ``<model>-<component>-<test>.log`` and ``.<name>.<random>.zmr-tmp`` for a staged write, and these must stay
# under NAME_MAX (255 bytes) on every file system with room to spare (docs/reference.md §2.4).
MAX_NAME_BYTES = {"model": 64, "component": 64, "smoke test": 64}
MAX_BRANCH_BYTES = 200  # a whole branch name; each part between '/' is also a file name in ref storage
MAX_BRANCH_PART_BYTES = 100


@dataclass(frozen=True)
class SmokeTest:
    """A command run in built trees: per component (cwd = its tree) or per model (``needs``)."""

    name: str
    run: str
    timeout: int = DEFAULT_SMOKE_TIMEOUT
    needs: tuple[str, ...] = ()
    resources: tuple[tuple[str, float], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Component:
    """One upstream framework of a model, pinned, with its patch series."""

    model: str
    key: str
    upstream: str  # as written: a URL, or a path relative to the repository root
    commit: str
    branch: str
    release: str = "two-commit"
    patches: str = ""  # series folder relative to the repository root
    track: str | None = None
    smoke: tuple[SmokeTest, ...] = ()
    line: int = 0
    commit_line: int = 0
    patches_line: int = 0  # the `patches:` line, else the component's

    @property
    def label(self) -> str:
        return f"{self.model}/{self.key}"

    @property
    def patches_origin(self) -> str:
        """Where the series folder is named: ``manifests/<model>.yaml:<line>``."""
        return f"{manifest_file(self.model)}:{self.patches_line or self.line}"


@dataclass(frozen=True)
class Manifest:
    """A validated ``manifests/<model>.yaml``."""

    model: str
    title: str
    path: Path
    components: dict[str, Component] = field(default_factory=dict)
    smoke: tuple[SmokeTest, ...] = ()

    def component(self, key: str) -> Component:
        try:
            return self.components[key]
        except KeyError:
            known = ", ".join(self.components) or "none"
            raise ZmrError(f"model {self.model!r} has no component {key!r} (it has: {known})") from None


@dataclass(frozen=True)
class Policy:
    """How much to trust the manifests: ``untrusted`` is for pull requests in CI."""

    untrusted: bool = False


# -- checks of single values ------------------------------------------------------
# Each takes (clean string, At) and returns the value to keep, or None after at.add(...).


@dataclass
class _Context:
    root: Path
    model: str
    policy: Policy
    path: Path


def _option_like(value: str, at: At) -> bool:
    if value.startswith("-"):
        at.add(f"{value!r} starts with '-', which git would read as an option", "remove the leading '-'")
        return True
    return False


def _check_upstream(value: str, at: At) -> str | None:
    ctx: _Context = at.ctx
    if _option_like(value, at):
        return None
    if _COMMAND_TRANSPORT_RE.match(value):
        at.add(
            f"transport {value.split('::')[0]!r}:: runs commands and is not allowed", "use an https://, ssh:// or git:// URL, or a path inside the repository"
        )
        return None
    if any(c.isspace() for c in value):
        at.add(f"whitespace in URL {value!r}", "remove it")
        return None
    scheme = _URL_SCHEME_RE.match(value)
    if scheme:
        name = scheme.group(1).lower()
        if name not in ALLOWED_SCHEMES:
            at.add(f"URL scheme {name!r} is not supported", "use https://, ssh://, git:// or file://")
            return None
        if name == "file" and ctx.policy.untrusted:
            at.add("file:// URLs are refused for untrusted manifests", "use a path relative to the repository root, or a network URL")
            return None
        return value
    if _SCP_LIKE_RE.match(value) and not value.startswith(("./", "../")):
        return value  # user@host:path
    # A local path: relative to the repository root.
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts:
        if ctx.policy.untrusted:
            at.add(f"path {value!r} leaves the repository, refused for untrusted manifests", "ship the upstream as a bundle inside the repository")
            return None
        return value
    if not (ctx.root / value).exists():
        at.add(f"{value!r} does not exist (paths are relative to the repository root)", "fix the path, or generate the bundle")
        return None
    if ctx.policy.untrusted:
        # git reads <path>.git when <path> is no repository (upload-pack's enter_repo): both are checked.
        read = [p for p in (ctx.root / value, ctx.root / (value.rstrip("/") + ".git")) if p.exists() or p.is_symlink()]
        outside = next((link for link in (_link_out_of(p, ctx.root) for p in read) if link is not None), None)
        if outside is not None:
            at.add(
                f"path {value!r} reaches outside the repository through the symbolic link {outside!r}, refused for untrusted manifests",
                "ship the upstream as a bundle inside the repository, without links",
            )
            return None
        borrowed = next((found for found in (_borrowing_file(p, ctx.root) for p in read) if found is not None), None)
        if borrowed is not None:
            where, how = borrowed
            at.add(
                f"path {value!r} reads another repository through {where!r} ({how}), refused for untrusted manifests",
                "ship the upstream as a bundle, or a bare repository with its own objects (no gitfile, alternates, commondir or config include)",
            )
            return None
    return value


# Files by which a repository reads another one: git follows each wherever it points.
_GITFILE_PREFIX = b"gitdir:"
_BORROWING = {
    "alternates": "objects/info/alternates names another object folder",
    "http-alternates": "objects/info/http-alternates names another object folder",
    "commondir": "commondir names another git directory",
}
_CONFIG_INCLUDE = rb"(?im)^\s*\[\s*include(?:If)?\b"  # compiled (and kept) by re when first used, as zmr.infra.git's patterns


def _borrowing_file(path: Path, root: Path) -> tuple[str, str] | None:
    """A file on or under *path* by which git would read outside it (relative to *root*, and how); None.

    A gitfile (``gitdir: ...``, as a ``.git`` file or the path itself),
    alternates (also of a bare repository committed deeper in the tree), a
    worktree's ``commondir``, or a config ``[include]``: each makes git take
    objects or settings from wherever it names, so none is allowed.
    """
    files = [path] if path.is_file() else [Path(folder, name) for folder, _, names in os.walk(path) for name in names]
    for file in files:
        if file.is_symlink() or not file.is_file():
            continue
        shown = file.relative_to(root).as_posix()
        if file.name == ".git" or file == path:
            if _starts_with(file, _GITFILE_PREFIX):
                return shown, "a gitfile names another git directory"
        elif file.name in _BORROWING and (file.name == "commondir" or file.parent.name == "info"):
            return shown, _BORROWING[file.name]
        elif file.name == "config" and re.search(_CONFIG_INCLUDE, _head(file)):
            return shown, "its [include] reads another config"
    return None


def _head(file: Path, limit: int = 1 << 20) -> bytes:
    """The first *limit* bytes of *file*, opened as files.open_regular does (no FIFO waits, no link followed)."""
    from zmr.infra.files import open_regular

    with open_regular(file, limit=None, what="repository file") as handle:
        return handle.read(limit)


def _starts_with(file: Path, prefix: bytes) -> bool:
    return _head(file, len(prefix)).lower() == prefix


def _link_out_of(path: Path, root: Path) -> str | None:
    """The first symbolic link on or under *path* that resolves outside *root* (relative to *root*), or None."""
    real_root = root.resolve()
    candidates = [path]
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):  # links are not followed: each is checked, not entered
            candidates += [p for p in (Path(folder, name) for name in (*dirs, *files)) if p.is_symlink()]
    for candidate in candidates:
        if not _inside(candidate.resolve(), real_root):
            return candidate.relative_to(root).as_posix() if candidate.is_relative_to(root) else str(candidate)
    return None


def full_id_command(upstream: str, rev: str) -> str:
    """A shell command, run from the repository root, that prints the full id of the commit *rev* (an abbreviated id)
    of *upstream* as a manifest writes it: the project holds no upstream commit, so ``git rev-parse`` there finds none;
    a throwaway bare clone (commits only, where the transport allows) does."""
    import shlex

    clone = f'git clone -q --bare --filter=tree:0 {shlex.quote(upstream)} "$d"'
    return f'd=$(mktemp -d) && {clone} && git -C "$d" rev-parse --verify {shlex.quote(rev + "^{commit}")}'


def _check_commit(value: str, at: At) -> str | None:
    if FULL_OID_RE.match(value):
        return value
    # The hints name the component's upstream as written, wherever it is in the mapping.
    siblings = at.parent.value if at.parent is not None else []
    upstream = next((str(v.value) for k, v in siblings if isinstance(k, ScalarNode) and k.value == "upstream" and isinstance(v, ScalarNode)), "")
    if HEXISH_RE.match(value) and value.lower() != value:
        at.add(f"{value!r} has upper-case hex digits", f"write it in lower case: {value.lower()}")
    elif HEXISH_RE.match(value) and len(value) < 40:
        at.add(
            f"{value!r} is an abbreviated commit id",
            f"write the full 40-hex id; from the repository root, `{full_id_command(upstream or '<upstream>', value)}` prints it",
        )
    else:
        at.add(
            f"{value!r} is not a full commit id (a branch or tag name is not a pin)",
            f"pin the commit: run `git ls-remote {upstream or '<upstream>'} {value}` and write the 40-hex id it prints",
        )
    return None


def _ref_name(what: str, *, ascii_only: bool = False) -> Check:
    def check(value: str, at: At) -> str | None:
        if _option_like(value, at):
            return None
        reason = ref_format_problem(value)
        if not reason and ascii_only and not value.isascii():
            first = next(c for c in value if not c.isascii())
            reason = f"non-ASCII character {first!r} (U+{ord(first):04X}), which can look like another branch's letter"
        if reason:
            at.add(f"{value!r} is not a valid {what} name ({reason})", "use letters, digits, '-', '_', '.' and '/'")
            return None
        if what == "branch":
            return cast("str | None", _short_enough("branch")(value, at))
        return value

    return check


def ref_format_problem(name: str) -> str:
    """Why git would reject ``refs/heads/<name>``, or '' (git check-ref-format rules)."""
    if not name:
        return "empty"
    if name == "@":
        return "'@' alone"
    if name.endswith("/") or name.startswith("/"):
        return "leading or trailing '/'"
    if name.endswith("."):
        return "ends with '.'"
    if "//" in name:
        return "'//'"
    if ".." in name:
        return "'..'"
    if "@{" in name:
        return "'@{'"
    for ch in name:
        if ord(ch) < 32 or ord(ch) == 127 or ch in " ~^:?*[\\":
            return f"character {ch!r}"
    invisible = invisible_character(name)
    if invisible:
        return f"invisible or bidirectional character {invisible}"
    for part in name.split("/"):
        if part.startswith("."):
            return "a part starting with '.'"
        if part.endswith(".lock"):
            return "a part ending with '.lock'"
    return ""


def name_fold(name: str) -> str:
    """*name* as a case-insensitive file system or ref store sees it (NFC, then Unicode case folding)."""
    return unicodedata.normalize("NFC", name).casefold()


def length_problem(kind: str, name: str) -> str:
    """Why *name* (a model, component or smoke test name, or a branch) is too long for zmr to use, or ''."""
    size = len(name.encode("utf-8"))
    if kind == "branch":
        if size > MAX_BRANCH_BYTES:
            return f"{size} bytes long; the limit is {MAX_BRANCH_BYTES}"
        longest = max(name.split("/"), key=lambda part: len(part.encode("utf-8")))
        if len(longest.encode("utf-8")) > MAX_BRANCH_PART_BYTES:
            return f"its part {longest[:20]!r}... is {len(longest.encode('utf-8'))} bytes long; the limit is {MAX_BRANCH_PART_BYTES} per part"
        return ""
    limit = MAX_NAME_BYTES[kind]
    return f"{size} bytes long; the limit is {limit}" if size > limit else ""


def branches_clash(a: str, b: str) -> bool:
    """Whether two branch names collide in ref storage: the same after case folding, or one a folder of the other."""
    fa, fb = name_fold(a), name_fold(b)
    return fa == fb or fa.startswith(fb + "/") or fb.startswith(fa + "/")


def _short_enough(kind: str) -> Check:
    def check(value: str, at: At) -> str | None:
        reason = length_problem(kind, value)
        if reason:
            at.add(f"{kind} name {value[:40]!r}... is too long ({reason})", "use a shorter name (docs/reference.md §2.4)")
            return None
        return value

    return declared(check, max_length=MAX_NAME_BYTES.get(kind))  # names are ASCII (their patterns): bytes are characters


def _check_patches(value: str, at: At) -> str | None:
    root = at.ctx.root
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts or "\\" in value:
        at.add(f"{value!r} must be a folder inside the repository", "write a relative path such as patches/<model>/<component>")
        return None
    if not _inside((root / value).resolve(), root.resolve()):
        at.add(f"{value!r} resolves outside the repository", "do not point it through symbolic links")
        return None
    return value


def _check_model(value: str, at: At) -> str | None:
    model = at.ctx.model
    if value != model:
        at.add(f"{value!r} does not match the file name {model!r}", f"write model: {model}, or rename the file to {value}.yaml")
        return None
    return value


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


# -- the schema -------------------------------------------------------------------------


def _smoke_test(fields: Fields, at: At) -> SmokeTest:
    return SmokeTest(fields["name"], fields["run"], fields["timeout"], fields.get("needs", ()), fields["resources"], fields["env"], line_of(at.node))


def _needs_given(fields: Fields, at: At) -> bool:
    if "needs" not in fields.nodes:
        at.add("model-level smoke tests need `needs: [component, ...]`", "list the components whose trees the test uses")
    return True


_SMOKE_FIELDS = (
    Field(
        "name",
        Text(
            "{value!r} is not a valid test name",
            "use letters, digits, '.', '_' and '-'",
            empty=None,
            pattern=SMOKE_NAME_RE,
            control=None,
            check=_short_enough("smoke test"),
        ),
        required=True,
        deferred=True,
        hint="add `name: <test-name>`",
        unique=("duplicate test name {value!r} (first at line {line})", "give each test its own name"),
    ),
    Field(
        "run",
        Text("expected a shell command string, got {kind}", "write the command as a string", empty=None, control=None),
        required=True,
        deferred=True,
        hint="add `run: <shell command>`",
    ),
    Field(
        "timeout",
        Number("expected a positive number of seconds, got {value!r}", "write e.g. `timeout: 600`", minimum=1, integer=True),
        default=DEFAULT_SMOKE_TIMEOUT,
        deferred=True,
    ),
    Field(
        "needs",
        ListOf(
            Text("{value!r} is not a component key", "list component keys of this manifest", empty=None, pattern=COMPONENT_RE, control=None),
            "expected a non-empty list of component keys",
            "write e.g. `needs: [rollout, trainer]`",
            nonempty=True,
            indexed=False,
        ),
        default=(),
        deferred=True,
    ),
    Field(
        "resources",
        MapOf(
            Number("expected a non-negative number, got {value!r}", "write e.g. `GPU: 8`"),
            "expected a mapping such as {{GPU: 8}}, got {kind}",
            "write `resources: {GPU: 1}`",
        ),
        default=(),
        deferred=True,
    ),
    Field(
        "env",
        MapOf(
            Scalar("expected a scalar value", "quote the value"),
            "expected a mapping of variables, got {kind}",
            "write `env: {NAME: value}`",
            key=Key(_ENV_NAME_RE.match, "{map}: {key!r} is not a variable name", "use letters, digits and '_'", pattern=_ENV_NAME_RE),
        ),
        default=(),
        deferred=True,
    ),
)


def _smoke_tests(model_level: bool) -> ListOf:
    """Model-level tests run in several trees and say which (``needs``); a component's run in its own tree."""
    item = Record(
        _SMOKE_FIELDS if model_level else tuple(f for f in _SMOKE_FIELDS if f.name != "needs"),
        "expected a mapping with name and run, got {kind}",
        "write `- name: ...` and `run: ...`",
        sorted_hint=True,
        refused=() if model_level else (("needs", "`needs` is only for model-level smoke tests", "move the test to the top-level `smoke:` list"),),
        check=_needs_given if model_level else None,
        make=_smoke_test,
    )
    return ListOf(item, "expected a list of tests, got {kind}", "write `- name: ...` entries")


def _branch_not_reserved(fields: Fields, at: At) -> bool:
    if not fields.sound:
        return False
    branch = fields.get("branch", f"{at.key}/{at.ctx.model}")
    if branch in RESERVED_BRANCHES or branch.startswith(("refs/", "zmr/")):
        at.problems.add(
            fields.nodes["branch"] if "branch" in fields else at.key_node,
            f"{at.path}.branch: {branch!r} is reserved",
            f"use the default {at.key}/{at.ctx.model}",
        )
        return False
    return True


def _component(fields: Fields, at: At) -> Component:
    key, model = at.key, at.ctx.model
    return Component(
        model=model,
        key=key,
        upstream=fields["upstream"],
        commit=fields["commit"],
        branch=fields.get("branch", f"{key}/{model}"),
        release=fields.get("release", "two-commit"),
        patches=fields.get("patches", f"patches/{model}/{key}"),
        track=fields.get("track"),
        smoke=fields["smoke"],
        line=line_of(at.key_node),
        commit_line=line_of(fields.nodes["commit"]),
        patches_line=line_of(fields.nodes["patches"]) if "patches" in fields.nodes else line_of(at.key_node),
    )


COMPONENT = Record(
    (
        Field("upstream", Text(check=_check_upstream), required=True),
        # An all-digit id read as a number: keep the text.
        Field("commit", Text(written=(int, float), check=declared(_check_commit, pattern=FULL_OID_RE)), required=True),
        Field("track", Text(check=_ref_name("ref"))),  # the upstream's name: any git allows
        Field("branch", Text(check=_ref_name("branch", ascii_only=True))),  # zmr's name: ASCII, so no look-alikes
        Field("release", Text(check=one_of(RELEASE_MODES, "release mode"))),
        Field("patches", Text(check=_check_patches)),
        Field("smoke", _smoke_tests(model_level=False), default=(), deferred=True),
    ),
    fix="give it `upstream:` and `commit:`",
    check=_branch_not_reserved,
    make=_component,
)


def _model_checks(fields: Fields, at: At) -> bool:
    """Checks that span components: smoke `needs`, and branches that collide."""
    components = dict(fields.get("components", ()))
    comp_node = fields.nodes.get("components")
    # Components declared but invalid are reported already; do not add "unknown" for them.
    declared = {str(scalar(k)) for k, _ in comp_node.value} if isinstance(comp_node, MappingNode) else set()
    for test in fields.get("smoke", ()):
        for need in test.needs:
            if need not in components and need not in declared:
                at.problems.add(test.line, f"smoke.{test.name}: needs unknown component {need!r}", f"use one of: {', '.join(components) or 'none'}")
    _check_branch_collisions(components, at.problems)
    _check_smoke_id_collisions(fields.get("smoke", ()), components, at.problems)
    return True


def _check_smoke_id_collisions(model_tests: tuple[SmokeTest, ...], components: dict[str, Component], problems: Problems) -> None:
    """Smoke test ids (``<component>.<name>``, or ``<name>`` for a model test) name files: unique after case folding."""
    seen: dict[str, tuple[str, int]] = {}
    tests = [(t.name, t) for t in model_tests] + [(f"{c.key}.{t.name}", t) for c in components.values() for t in c.smoke]
    for test_id, test in tests:
        first = seen.get(name_fold(test_id))
        if first is not None and first[0] != test_id:  # equal ids are reported by the list's own uniqueness check
            problems.add(
                test.line,
                f"smoke test id {test_id!r} differs from {first[0]!r} (line {first[1]}) only in case",
                "give the tests names that differ in more than case: their logs and evidence files would collide",
            )
        seen.setdefault(name_fold(test_id), (test_id, test.line))


def _manifest(fields: Fields, at: At) -> Manifest:
    ctx: _Context = at.ctx
    return Manifest(model=ctx.model, title=fields.get("title", ctx.model), path=ctx.path, components=dict(fields["components"]), smoke=fields["smoke"])


MANIFEST = Record(
    (
        # The file's name, which parse_manifest holds to MODEL_RE and MAX_NAME_BYTES.
        Field("model", Text(check=declared(_check_model, pattern=MODEL_RE, max_length=MAX_NAME_BYTES["model"])), required=True),
        Field("title", Text(visible=True)),
        Field(
            "components",
            MapOf(
                COMPONENT,
                "expected a mapping of component keys, got {kind}",
                "add e.g. `rollout:` with upstream and commit",
                nonempty=True,
                key=Key(
                    lambda key: bool(COMPONENT_RE.match(key)) and not length_problem("component", key),
                    "{entry}: {key!r} is not a valid component key",
                    f"use [a-z0-9][a-z0-9-]* (lower case, digits, '-'), at most {MAX_NAME_BYTES['component']} characters",
                    skip=False,
                    pattern=COMPONENT_RE,
                    max_length=MAX_NAME_BYTES["component"],
                ),
            ),
            required=True,
            deferred=True,
        ),
        Field("smoke", _smoke_tests(model_level=True), default=(), deferred=True),
    ),
    fix="start with `model: <name>`",
    check=_model_checks,
    make=_manifest,
)


# -- loading ------------------------------------------------------------------------


def parse_manifest(path: Path, root: Path, policy: Policy = Policy()) -> tuple[Manifest | None, list[Problem]]:
    """Parse and validate one manifest; returns (manifest or None, problems)."""
    display = display_path(path, root)
    problems = Problems(display)
    model = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.stem
    if not MODEL_RE.match(model):
        problems.add(None, f"file name {path.name!r} is not a valid model name", "name it <model>.yaml with [a-z0-9][a-z0-9._-]*")
    elif ref_format_problem(model):
        problems.add(
            None,
            f"model name {model!r} cannot be part of a branch name ({ref_format_problem(model)})",
            "rename the file: no '..', no part ending in '.lock' or '.', as for git branch names",
        )
    elif length_problem("model", model):
        problems.add(None, f"model name {model[:40]!r}... is too long ({length_problem('model', model)})", "rename the file (docs/reference.md §2.4)")
    # A manifest of the repository must lie in it; one a caller names elsewhere (zmr import's probe) is the caller's.
    inside = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))
    ctx = _Context(root=root, model=model, policy=policy, path=path)
    manifest = read_file(path, display, MANIFEST, problems, ctx, root=root if inside else None, what="manifest")
    if problems:
        return None, problems.items
    return manifest, []


def series_folders_as_written(path: Path, root: Path) -> list[tuple[str, str, int]]:
    """``(component, series folder, line)`` for each component of the manifest at *path*, read as written, problems or not.

    A manifest with a problem yields no `Manifest`, yet the series of its
    components are worth reading: `Project.manifests` reports their problems
    beside the manifest's own, in one run. The folder is ``patches:`` when it
    is a plain relative path inside *root* (the manifest's own check refuses
    any other, and it is then left out), else ``patches/<model>/<component>``;
    the line is the ``patches:`` line, else the component's.
    """
    display = display_path(path, root)
    node = read_yaml(path, display, Problems(display), root=root, what="manifest")  # as the manifest is read: no FIFO, no link out
    model = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.stem
    components = _mapping_value(node, "components")
    found: list[tuple[str, str, int]] = []
    for key_node, value in components.value if isinstance(components, MappingNode) else ():
        if not isinstance(key_node, ScalarNode) or not isinstance(value, MappingNode) or not COMPONENT_RE.match(str(key_node.value)):
            continue
        given = _mapping_value(value, "patches")
        folder = given.value if isinstance(given, ScalarNode) else f"patches/{model}/{key_node.value}"
        pure = PurePosixPath(folder)
        if not folder or pure.is_absolute() or ".." in pure.parts or "\\" in folder or not _inside((root / folder).resolve(), root.resolve()):
            continue
        found.append((key_node.value, folder, line_of(given if isinstance(given, ScalarNode) else key_node)))
    return found


def _mapping_value(node: object, name: str) -> object:
    """The value node of key *name* in a YAML mapping node, or None."""
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == name:
                return value
    return None


def _check_branch_collisions(components: dict[str, Component], problems: Problems) -> None:
    seen: dict[str, str] = {}
    for comp in components.values():
        for other_branch, other in seen.items():
            if branches_clash(comp.branch, other_branch):
                problems.add(
                    comp.line,
                    f"components.{comp.key}.branch: {comp.branch!r} collides with component {other!r} ({other_branch!r})",
                    "give each component its own branch",
                )
        seen[comp.branch] = comp.key


def manifest_file(model: str) -> str:
    """``manifests/<model>.yaml``: where the manifest of *model* is, relative to the repository root (``Project.manifest_path``)."""
    return f"manifests/{model}.yaml"


def manifest_paths(root: Path) -> list[Path]:
    folder = root / "manifests"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith("."))


def load_manifests(root: Path, models: list[str] | None = None, policy: Policy = Policy()) -> list[Manifest]:
    """Load and validate manifests (all, or the named models); raise ManifestError with every problem."""
    paths = manifest_paths(root)
    by_model = {p.name.rsplit(".", 1)[0]: p for p in paths}
    problems: list[Problem] = []
    if models:
        missing = [m for m in models if m not in by_model]
        if missing:
            known = ", ".join(sorted(by_model)) or "none"
            raise ZmrError(
                f"no manifest for model {', '.join(repr(m) for m in missing)} in {root / 'manifests'}",
                details=[f"known models: {known}", "check the name (the file is manifests/<model>.yaml)"],
            )
    manifests: list[Manifest] = []
    # Branch collisions across models need every manifest, even when only some are asked for.
    all_loaded: list[Manifest] = []
    for model, path in sorted(by_model.items()):
        if path.suffix == ".yml":
            if not models or model in models:
                wrong = Problems(display_path(path, root))
                wrong.add(None, "manifests use the .yaml extension", f"rename it to {model}.yaml")
                problems.extend(wrong.items)
            continue
        manifest, found = parse_manifest(path, root, policy)
        if not models or model in models:
            problems.extend(found)
            if manifest is not None:
                manifests.append(manifest)
        if manifest is not None:
            all_loaded.append(manifest)
    problems.extend(_cross_model_problems(all_loaded, root, models))
    if problems:
        raise ManifestError(problems)
    return manifests


def _cross_model_problems(manifests: list[Manifest], root: Path, models: list[str] | None) -> list[Problem]:
    """A branch must not take another model's branch name (a default one included), in any case, nor be a folder of one."""
    owners: dict[str, tuple[Manifest, Component]] = {}
    result = []
    for manifest in manifests:
        for comp in manifest.components.values():
            owners.setdefault(name_fold(comp.branch), (manifest, comp))
    for manifest in manifests:
        if models and manifest.model not in models:
            continue
        p = Problems(display_path(manifest.path, root))
        for comp in manifest.components.values():
            owner, owner_comp = owners[name_fold(comp.branch)]
            if owner is not manifest:
                how = "" if owner_comp.branch == comp.branch else f" as {owner_comp.branch!r}, the same name after case folding"
                p.add(
                    comp.line,
                    f"components.{comp.key}.branch: {comp.branch!r} is already the branch of {owner.model}/{owner_comp.key}{how}",
                    "give the branch a name of this model's",
                )
            for other in manifests:
                if other is manifest:
                    continue
                for other_comp in other.components.values():
                    if name_fold(comp.branch) != name_fold(other_comp.branch) and branches_clash(comp.branch, other_comp.branch):
                        p.add(
                            comp.line,
                            f"components.{comp.key}.branch: {comp.branch!r} and {other.model}/{other_comp.key}'s {other_comp.branch!r}"
                            " cannot both exist (one is a folder of the other in ref storage)",
                            "rename one of the branches",
                        )
                suffix = "/" + other.model
                if comp.branch.endswith(suffix) and comp.branch != f"{comp.key}/{manifest.model}":
                    p.add(
                        comp.line,
                        f"components.{comp.key}.branch: {comp.branch!r} is in model {other.model!r}'s namespace",
                        f"use a name ending in /{manifest.model}",
                    )
        result.extend(p.items)
    return result
