"""Manifests: ``manifests/<model>.yaml``, one per model (docs/reference.md §2).

A manifest names, per component (an upstream framework such as vLLM or
Megatron-LM), the upstream repository, the pinned commit, the release branch
and the patch series folder, plus optional smoke tests.

Validation runs before any git command and reports every problem of a file
at once as ``file:line: problem; fix`` (exit status 2). Unknown keys are
errors: a typo must never pass silently. The schema below is data: change
``_TOP_KEYS``/``_COMPONENT_KEYS``/``_SMOKE_KEYS`` together with docs/reference.md §2.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from zmr.errors import ManifestError, ZmrError
from zmr.git import FULL_OID_RE
from zmr.yamlnodes import Problems, display_path, join_path, kind, line_of, mapping_items, read_top_mapping, scalar

MODEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
COMPONENT_RE = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
SMOKE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
HEXISH_RE = re.compile(r"[0-9a-fA-F]{4,64}\Z")
RELEASE_MODES = ("two-commit", "snapshot")
DEFAULT_SMOKE_TIMEOUT = 600
# Branch names that belong to the repository itself, never to a release.
RESERVED_BRANCHES = {"main", "master", "HEAD", "trunk", "develop", "gh-pages"}
# Remote-helper transports that run commands (``ext::sh -c ...``) or read file descriptors.
_COMMAND_TRANSPORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_URL_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE_RE = re.compile(r"^[^/:]+:(?!//)")
ALLOWED_SCHEMES = {"https", "http", "ssh", "git", "file", "git+ssh", "ssh+git"}


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

    @property
    def label(self) -> str:
        return f"{self.model}/{self.key}"


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


# -- field validators ------------------------------------------------------------
# Each takes (value, node, path, problems, ctx) and returns the clean value or None.

_Validator = Callable[[object, Node, str, Problems, "_Context"], object]


@dataclass
class _Context:
    root: Path
    model: str
    policy: Policy
    component: str = ""
    upstream_hint: str = ""  # the component's upstream as written, for fix hints


def _string(value, node, path, problems, ctx, *, allow_empty=False):
    if not isinstance(value, str) or isinstance(node, (MappingNode, SequenceNode)):
        problems.add(node, f"{path}: expected a string, got {kind(node)}", "write a plain string")
        return None
    if not allow_empty and not value.strip():
        problems.add(node, f"{path}: must not be empty", "write a value or remove the key")
        return None
    if "\0" in value or any(ord(c) < 32 and c not in "\t\n" for c in value):
        problems.add(node, f"{path}: control characters are not allowed", "remove them")
        return None
    return value


def _option_like(value: str, node, path, problems) -> bool:
    if value.startswith("-"):
        problems.add(node, f"{path}: {value!r} starts with '-', which git would read as an option", "remove the leading '-'")
        return True
    return False


def _check_upstream(value, node, path, problems, ctx):
    value = _string(value, node, path, problems, ctx)
    if value is None or _option_like(value, node, path, problems):
        return None
    if _COMMAND_TRANSPORT_RE.match(value):
        problems.add(node, f"{path}: transport {value.split('::')[0]!r}:: runs commands and is not allowed", "use an https://, ssh:// or git:// URL, or a path inside the repository")
        return None
    if any(c.isspace() for c in value):
        problems.add(node, f"{path}: whitespace in URL {value!r}", "remove it")
        return None
    scheme = _URL_SCHEME_RE.match(value)
    if scheme:
        name = scheme.group(1).lower()
        if name not in ALLOWED_SCHEMES:
            problems.add(node, f"{path}: URL scheme {name!r} is not supported", "use https://, ssh://, git:// or file://")
            return None
        if name == "file" and ctx.policy.untrusted:
            problems.add(node, f"{path}: file:// URLs are refused for untrusted manifests", "use a path relative to the repository root, or a network URL")
            return None
        return value
    if _SCP_LIKE_RE.match(value) and not value.startswith(("./", "../")):
        return value  # user@host:path
    # A local path: relative to the repository root.
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts:
        if ctx.policy.untrusted:
            problems.add(node, f"{path}: path {value!r} leaves the repository, refused for untrusted manifests", "ship the upstream as a bundle inside the repository")
            return None
        return value
    local = ctx.root / value
    if not local.exists():
        problems.add(node, f"{path}: {value!r} does not exist (paths are relative to the repository root)", "fix the path, or generate the bundle")
        return None
    return value


def _check_commit(value, node, path, problems, ctx):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = node.value  # an all-digit id read as a number: keep the text
    value = _string(value, node, path, problems, ctx)
    if value is None:
        return None
    if FULL_OID_RE.match(value):
        return value
    if HEXISH_RE.match(value) and value.lower() != value:
        problems.add(node, f"{path}: {value!r} has upper-case hex digits", f"write it in lower case: {value.lower()}")
    elif HEXISH_RE.match(value) and len(value) < 40:
        problems.add(node, f"{path}: {value!r} is an abbreviated commit id", "write the full 40-hex id (git rev-parse " + value + ")")
    else:
        problems.add(
            node,
            f"{path}: {value!r} is not a full commit id (a branch or tag name is not a pin)",
            f"pin the commit: run `git ls-remote {ctx.upstream_hint or '<upstream>'} {value}` and write the 40-hex id it prints",
        )
    return None


def _check_ref_name(value, node, path, problems, ctx, *, what="branch"):
    value = _string(value, node, path, problems, ctx)
    if value is None or _option_like(value, node, path, problems):
        return None
    reason = ref_format_problem(value)
    if reason:
        problems.add(node, f"{path}: {value!r} is not a valid {what} name ({reason})", "use letters, digits, '-', '_', '.' and '/'")
        return None
    return value


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
    for part in name.split("/"):
        if part.startswith("."):
            return "a part starting with '.'"
        if part.endswith(".lock"):
            return "a part ending with '.lock'"
    return ""


def _check_release(value, node, path, problems, ctx):
    value = _string(value, node, path, problems, ctx)
    if value is None:
        return None
    if value not in RELEASE_MODES:
        problems.add(node, f"{path}: unknown release mode {value!r}", f"use one of: {', '.join(RELEASE_MODES)}")
        return None
    return value


def _check_patches(value, node, path, problems, ctx):
    value = _string(value, node, path, problems, ctx)
    if value is None:
        return None
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts or "\\" in value:
        problems.add(node, f"{path}: {value!r} must be a folder inside the repository", "write a relative path such as patches/<model>/<component>")
        return None
    resolved = (ctx.root / value).resolve()
    if not _inside(resolved, ctx.root.resolve()):
        problems.add(node, f"{path}: {value!r} resolves outside the repository", "do not point it through symbolic links")
        return None
    return value


def _check_title(value, node, path, problems, ctx):
    return _string(value, node, path, problems, ctx)


def _check_model(value, node, path, problems, ctx):
    value = _string(value, node, path, problems, ctx)
    if value is None:
        return None
    if value != ctx.model:
        problems.add(node, f"{path}: {value!r} does not match the file name {ctx.model!r}", f"write model: {ctx.model}, or rename the file to {value}.yaml")
        return None
    return value


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class _Key:
    validate: _Validator | None
    required: bool = False


_TOP_KEYS = {
    "model": _Key(_check_model, required=True),
    "title": _Key(_check_title),
    "components": _Key(None, required=True),
    "smoke": _Key(None),
}
_COMPONENT_KEYS = {
    "upstream": _Key(_check_upstream, required=True),
    "commit": _Key(_check_commit, required=True),
    "track": _Key(lambda *a: _check_ref_name(*a, what="ref")),
    "branch": _Key(_check_ref_name),
    "release": _Key(_check_release),
    "patches": _Key(_check_patches),
    "smoke": _Key(None),
}
_SMOKE_KEYS = {"name", "run", "timeout", "needs", "resources", "env"}


def _unknown_key(problems: Problems, key_node: Node, path: str, key: str, allowed) -> None:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
    problems.add(key_node, f"{join_path(path, key)}: unknown key", fix)


def _fields(node: MappingNode, schema: dict[str, _Key], path: str, problems: Problems, ctx: _Context) -> dict[str, tuple[object, Node]]:
    """Validate a mapping against *schema*; returns key -> (clean value, node)."""
    result: dict[str, tuple[object, Node]] = {}
    present: set[str] = set()
    for key, key_node, value_node in mapping_items(node, problems, path or "top level"):
        present.add(key)
        if key not in schema:
            _unknown_key(problems, key_node, path, key, schema)
            continue
        spec = schema[key]
        if spec.validate is None:
            result[key] = (None, value_node)
            continue
        if not isinstance(value_node, ScalarNode):
            problems.add(value_node, f"{join_path(path, key)}: expected a string, got {kind(value_node)}", "write a plain string")
            continue
        value = spec.validate(scalar(value_node), value_node, join_path(path, key), problems, ctx)
        if value is not None:
            result[key] = (value, value_node)
    for key, spec in schema.items():
        if spec.required and key not in present:
            problems.add(node, f"{join_path(path, key) if path else key}: required key is missing", f"add `{key}:`")
    return result


def _smoke_list(node: Node | None, path: str, problems: Problems, ctx: _Context, *, model_level: bool) -> list[SmokeTest]:
    if node is None:
        return []
    if not isinstance(node, SequenceNode):
        problems.add(node, f"{path}: expected a list of tests, got {kind(node)}", "write `- name: ...` entries")
        return []
    tests: list[SmokeTest] = []
    names: dict[str, int] = {}
    for index, item in enumerate(node.value):
        where = join_path(path, index)
        if not isinstance(item, MappingNode):
            problems.add(item, f"{where}: expected a mapping with name and run, got {kind(item)}", "write `- name: ...` and `run: ...`")
            continue
        values: dict[str, tuple[object, Node]] = {}
        for key, key_node, value_node in mapping_items(item, problems, where):
            if key not in _SMOKE_KEYS or (key == "needs" and not model_level):
                allowed = sorted(_SMOKE_KEYS - ({"needs"} if not model_level else set()))
                if key == "needs":
                    problems.add(key_node, f"{join_path(where, key)}: `needs` is only for model-level smoke tests", "move the test to the top-level `smoke:` list")
                else:
                    _unknown_key(problems, key_node, where, key, allowed)
                continue
            values[key] = (None, value_node)
        name = _smoke_name(values, item, where, problems, names)
        run = _smoke_run(values, item, where, problems)
        timeout = _smoke_timeout(values, where, problems)
        needs = _smoke_needs(values, where, problems) if model_level else ()
        resources = _smoke_resources(values, where, problems)
        env = _smoke_env(values, where, problems)
        if model_level and "needs" not in values:
            problems.add(item, f"{where}: model-level smoke tests need `needs: [component, ...]`", "list the components whose trees the test uses")
        if name is not None and run is not None:
            tests.append(SmokeTest(name, run, timeout, tuple(needs), tuple(resources), tuple(env), line_of(item)))
    return tests


def _smoke_name(values, item, where, problems, names) -> str | None:
    if "name" not in values:
        problems.add(item, f"{where}.name: required key is missing", "add `name: <test-name>`")
        return None
    node = values["name"][1]
    value = scalar(node) if isinstance(node, ScalarNode) else None
    if not isinstance(value, str) or not SMOKE_NAME_RE.match(value):
        problems.add(node, f"{where}.name: {value!r} is not a valid test name", "use letters, digits, '.', '_' and '-'")
        return None
    if value in names:
        problems.add(node, f"{where}.name: duplicate test name {value!r} (first at line {names[value]})", "give each test its own name")
        return None
    names[value] = line_of(node)
    return value


def _smoke_run(values, item, where, problems) -> str | None:
    if "run" not in values:
        problems.add(item, f"{where}.run: required key is missing", "add `run: <shell command>`")
        return None
    node = values["run"][1]
    value = scalar(node) if isinstance(node, ScalarNode) else None
    if not isinstance(value, str) or not value.strip():
        problems.add(node, f"{where}.run: expected a shell command string, got {kind(node)}", "write the command as a string")
        return None
    return value


def _smoke_timeout(values, where, problems) -> int:
    if "timeout" not in values:
        return DEFAULT_SMOKE_TIMEOUT
    node = values["timeout"][1]
    value = scalar(node) if isinstance(node, ScalarNode) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.add(node, f"{where}.timeout: expected a positive number of seconds, got {value!r}", "write e.g. `timeout: 600`")
        return DEFAULT_SMOKE_TIMEOUT
    return value


def _smoke_needs(values, where, problems) -> list[str]:
    if "needs" not in values:
        return []
    node = values["needs"][1]
    if not isinstance(node, SequenceNode) or not node.value:
        problems.add(node, f"{where}.needs: expected a non-empty list of component keys", "write e.g. `needs: [rollout, trainer]`")
        return []
    needs = []
    for entry in node.value:
        value = scalar(entry) if isinstance(entry, ScalarNode) else None
        if not isinstance(value, str) or not COMPONENT_RE.match(value):
            problems.add(entry, f"{where}.needs: {value!r} is not a component key", "list component keys of this manifest")
            continue
        needs.append(value)
    return needs


def _smoke_resources(values, where, problems) -> list[tuple[str, float]]:
    if "resources" not in values:
        return []
    node = values["resources"][1]
    if not isinstance(node, MappingNode):
        problems.add(node, f"{where}.resources: expected a mapping such as {{GPU: 8}}, got {kind(node)}", "write `resources: {GPU: 1}`")
        return []
    result = []
    for key, _key_node, value_node in mapping_items(node, problems, f"{where}.resources"):
        value = scalar(value_node) if isinstance(value_node, ScalarNode) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            problems.add(value_node, f"{where}.resources.{key}: expected a non-negative number, got {value!r}", "write e.g. `GPU: 8`")
            continue
        result.append((key, float(value)))
    return result


def _smoke_env(values, where, problems) -> list[tuple[str, str]]:
    if "env" not in values:
        return []
    node = values["env"][1]
    if not isinstance(node, MappingNode):
        problems.add(node, f"{where}.env: expected a mapping of variables, got {kind(node)}", "write `env: {NAME: value}`")
        return []
    result = []
    for key, key_node, value_node in mapping_items(node, problems, f"{where}.env"):
        value = scalar(value_node) if isinstance(value_node, ScalarNode) else None
        if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", key):
            problems.add(key_node, f"{where}.env: {key!r} is not a variable name", "use letters, digits and '_'")
            continue
        if value is None or isinstance(value, (list, dict)):
            problems.add(value_node, f"{where}.env.{key}: expected a scalar value", "quote the value")
            continue
        result.append((key, str(value).lower() if isinstance(value, bool) else str(value)))
    return result


# -- loading ------------------------------------------------------------------------


def parse_manifest(path: Path, root: Path, policy: Policy = Policy()) -> tuple[Manifest | None, list]:
    """Parse and validate one manifest; returns (manifest or None, problems)."""
    display = display_path(path, root)
    problems = Problems(display)
    model = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.stem
    if not MODEL_RE.match(model):
        problems.add(None, f"file name {path.name!r} is not a valid model name", "name it <model>.yaml with [a-z0-9][a-z0-9._-]*")
    node = read_top_mapping(path, display, problems, "start with `model: <name>`")
    if node is None:
        return None, problems.items
    ctx = _Context(root=root, model=model, policy=policy)
    top = _fields(node, _TOP_KEYS, "", problems, ctx)
    components: dict[str, Component] = {}
    comp_node = top.get("components", (None, None))[1]
    if comp_node is not None:
        if not isinstance(comp_node, MappingNode) or not comp_node.value:
            problems.add(comp_node, f"components: expected a mapping of component keys, got {kind(comp_node)}", "add e.g. `rollout:` with upstream and commit")
        else:
            for key, key_node, value_node in mapping_items(comp_node, problems, "components"):
                comp = _component(key, key_node, value_node, problems, ctx)
                if comp is not None:
                    components[key] = comp
    smoke = _smoke_list(top.get("smoke", (None, None))[1], "smoke", problems, ctx, model_level=True)
    # Components declared but invalid are reported already; do not add "unknown" for them.
    declared = {str(scalar(k)) for k, _ in comp_node.value} if isinstance(comp_node, MappingNode) else set()
    for test in smoke:
        for need in test.needs:
            if need not in components and need not in declared:
                problems.add(test.line, f"smoke.{test.name}: needs unknown component {need!r}", f"use one of: {', '.join(components) or 'none'}")
    _check_branch_collisions(components, problems)
    if problems:
        return None, problems.items
    title = top.get("title", (model, None))[0]
    return Manifest(model=model, title=str(title), path=path, components=components, smoke=tuple(smoke)), []


def _component(key: str, key_node: Node, node: Node, problems: Problems, ctx: _Context) -> Component | None:
    path = f"components.{key}"
    ok = True
    if not COMPONENT_RE.match(key):
        problems.add(key_node, f"{path}: {key!r} is not a valid component key", "use [a-z0-9][a-z0-9-]* (lower case, digits, '-')")
        ok = False
    if not isinstance(node, MappingNode):
        problems.add(node, f"{path}: expected a mapping, got {kind(node)}", "give it `upstream:` and `commit:`")
        return None
    ctx.component = key
    ctx.upstream_hint = next((str(v.value) for k, v in node.value if isinstance(k, ScalarNode) and k.value == "upstream" and isinstance(v, ScalarNode)), "")
    values = _fields(node, _COMPONENT_KEYS, path, problems, ctx)
    smoke = _smoke_list(values.get("smoke", (None, None))[1], f"{path}.smoke", problems, ctx, model_level=False)
    if not ok or "upstream" not in values or "commit" not in values:
        return None
    branch_value = values.get("branch", (f"{key}/{ctx.model}", None))[0]
    branch_node = values.get("branch", (None, key_node))[1]
    if branch_value in RESERVED_BRANCHES or str(branch_value).startswith(("refs/", "zmr/")):
        problems.add(branch_node, f"{path}.branch: {branch_value!r} is reserved", f"use the default {key}/{ctx.model}")
        return None
    return Component(
        model=ctx.model,
        key=key,
        upstream=str(values["upstream"][0]),
        commit=str(values["commit"][0]),
        branch=str(branch_value),
        release=str(values.get("release", ("two-commit", None))[0]),
        patches=str(values.get("patches", (f"patches/{ctx.model}/{key}", None))[0]),
        track=values["track"][0] if "track" in values else None,  # type: ignore[arg-type]
        smoke=tuple(smoke),
        line=line_of(key_node),
        commit_line=line_of(values["commit"][1]),
    )


def _check_branch_collisions(components: dict[str, Component], problems: Problems) -> None:
    seen: dict[str, str] = {}
    for comp in components.values():
        for other_branch, other in seen.items():
            if comp.branch == other_branch or comp.branch.startswith(other_branch + "/") or other_branch.startswith(comp.branch + "/"):
                problems.add(comp.line, f"components.{comp.key}.branch: {comp.branch!r} collides with component {other!r} ({other_branch!r})", "give each component its own branch")
        seen[comp.branch] = comp.key


def manifest_paths(root: Path) -> list[Path]:
    folder = root / "manifests"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith("."))


def load_manifests(root: Path, models: list[str] | None = None, policy: Policy = Policy()) -> list[Manifest]:
    """Load and validate manifests (all, or the named models); raise ManifestError with every problem."""
    paths = manifest_paths(root)
    by_model = {p.name.rsplit(".", 1)[0]: p for p in paths}
    problems: list = []
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


def _cross_model_problems(manifests: list[Manifest], root: Path, models: list[str] | None) -> list:
    """A branch must not take another model's branch name (a default one included)."""
    owners: dict[str, tuple[Manifest, Component]] = {}
    result = []
    for manifest in manifests:
        for comp in manifest.components.values():
            owners.setdefault(comp.branch, (manifest, comp))
    for manifest in manifests:
        if models and manifest.model not in models:
            continue
        p = Problems(display_path(manifest.path, root))
        for comp in manifest.components.values():
            owner = owners[comp.branch]
            if owner[0] is not manifest:
                p.add(comp.line, f"components.{comp.key}.branch: {comp.branch!r} is already the branch of {owner[0].model}/{owner[1].key}", "give the branch a name of this model's")
            for other in manifests:
                if other is manifest:
                    continue
                suffix = "/" + other.model
                if comp.branch.endswith(suffix) and comp.branch != f"{comp.key}/{manifest.model}":
                    p.add(comp.line, f"components.{comp.key}.branch: {comp.branch!r} is in model {other.model!r}'s namespace", f"use a name ending in /{manifest.model}")
        result.extend(p.items)
    return result
