"""Strict YAML reading with line numbers, for manifests, cases and ``zmr.yaml``.

Files are parsed into PyYAML's node graph (never constructed into Python
objects first) so that every value keeps the line it came from. Anything a
hand-written manifest never needs and an attacker might use is refused:
anchors and aliases (YAML bombs), tags, duplicate keys, non-UTF-8 bytes and
oversized files; the file is read with `zmr.infra.files.read_repo_file`
(a regular file, inside the repository where a root is given). `zmr.model.yamlrecords` walks the node trees read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from zmr.infra.files import FileRefused, read_repo_file
from zmr.infra.errors import ProblemJson

MAX_FILE_BYTES = 1 << 20


@dataclass
class Problem:
    """One error (or warning) located in a file: ``file:line: text; fix``."""

    path: str
    line: int
    text: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.text}" + (f"; {self.fix}" if self.fix else "")

    def to_json(self) -> ProblemJson:
        """One problem in ``zmr validate --json``: the file (relative to the repository), its line (null: the whole file), what is wrong, what to do."""
        return {"file": self.path, "line": self.line or None, "message": self.text, "hint": self.fix}


@dataclass
class Problems:
    """Collects every problem of a file so they can be reported together."""

    path: str
    items: list[Problem] = field(default_factory=list)

    def add(self, node_or_line: Node | int | None, text: str, fix: str = "") -> None:
        self.items.append(Problem(self.path, line_of(node_or_line), text, fix))

    def __bool__(self) -> bool:
        return bool(self.items)


def display_path(path: Path, root: Path) -> str:
    """*path* relative to the repository root, as messages show it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def line_of(node_or_line: Node | int | None) -> int:
    if node_or_line is None:
        return 0
    if isinstance(node_or_line, int):
        return node_or_line
    return node_or_line.start_mark.line + 1


class _Refused(Exception):
    def __init__(self, line: int, text: str, fix: str):
        super().__init__(text)
        self.line, self.text, self.fix = line, text, fix


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and anchors while composing (no YAML bombs)."""

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(event.start_mark.line + 1 if event.start_mark else 0, f"alias *{event.anchor} is not allowed", "write the value out in full")
        if getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark.line + 1, f"anchor &{event.anchor} is not allowed", "write the value out in full")
        return super().compose_node(parent, index)


def read_yaml(path: Path, display: str, problems: Problems, *, root: Path | None = None, what: str = "YAML file") -> Node | None:
    """Parse *path* (a regular file inside *root*, if given) into a node tree; on failure, record why and return None."""
    try:
        data = read_repo_file(root, path, limit=MAX_FILE_BYTES, what=what, display=display)
    except FileRefused as refused:
        problems.add(None, refused.reason, refused.fix)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problems.add(line, f"not valid UTF-8 (byte {exc.start})", "save the file as UTF-8")
        return None
    if "\0" in text:
        problems.add(text[: text.index("\0")].count("\n") + 1, "NUL character in file", "remove it")
        return None
    try:
        node = yaml.compose(text, Loader=_StrictLoader)
    except _Refused as exc:
        problems.add(exc.line, exc.text, exc.fix)
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problems.add(line, f"invalid YAML: {exc.problem or exc.context}", "fix the syntax")
        return None
    except yaml.YAMLError as exc:
        problems.add(None, f"invalid YAML: {exc}", "fix the syntax")
        return None
    except RecursionError:
        problems.add(None, "invalid YAML: nested too deeply", "flatten the structure")
        return None
    if node is None:
        problems.add(1, "file is empty", "write the mapping described in docs/reference.md")
        return None
    if not _tags_allowed(node, problems):
        return None
    return node


_PLAIN_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


def _tags_allowed(node: Node, problems: Problems) -> bool:
    """Only plain YAML types; explicit tags such as !!python/object are refused."""
    ok = True
    stack = [node]
    while stack:
        current = stack.pop()
        if current.tag not in _PLAIN_TAGS:
            problems.add(current, f"YAML tag {current.tag!r} is not allowed", "remove the tag")
            ok = False
        if isinstance(current, MappingNode):
            for key, value in current.value:
                stack += [key, value]
        elif isinstance(current, SequenceNode):
            stack += current.value
    return ok


_SCALAR_LOADER = _StrictLoader("")


def _construct(node: Node) -> Any:
    """The Python value of a node (scalars: str, int, float, bool or None)."""
    try:
        return _SCALAR_LOADER.construct_object(node, deep=True)
    finally:
        _SCALAR_LOADER.constructed_objects = {}


scalar = _construct


def kind(node: Node) -> str:
    """A short name for the type of a node, for messages."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    value = _construct(node)
    if value is None:
        return "empty"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(type(value), "a scalar")


def mapping_items(node: MappingNode, problems: Problems, where: str) -> list[tuple[str, Node, Node]]:
    """(key, key node, value node) for each entry; duplicate and non-string keys reported."""
    seen: dict[str, int] = {}
    items: list[tuple[str, Node, Node]] = []
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or not isinstance(_construct(key_node), str):
            problems.add(key_node, f"{where}: keys must be plain strings", "quote the key")
            continue
        key = _construct(key_node)
        if key in seen:
            problems.add(key_node, f"{where}: duplicate key {key!r} (first at line {seen[key]})", "keep one of them")
            continue
        seen[key] = line_of(key_node)
        items.append((key, key_node, value_node))
    return items


def join_path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key
