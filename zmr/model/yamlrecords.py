"""The YAML records engine: zmr's YAML files (manifests, cases, ``zmr.yaml``) read against declared records into typed values.

A file's format is data: a `Record` lists its `Field`s, each with a type
(`Text`, `Number`, `Scalar`, `ListOf`, `MapOf` or a nested `Record`), whether it
is required, its default, and the hint shown when it is missing. Types carry
their own messages and an optional ``check`` for the clean value (an enum, a
path that must exist...). `read_file` parses a file with `zmr.model.yamlnodes` (line
numbers kept, hostile YAML refused) and walks the node tree once, recording
every problem as ``file:line: key.path: problem; fix`` and returning the typed
value the loader's ``make`` builds; checks that span fields run in
``Record.check``.

Problems are recorded in a fixed order (ties on one line keep it): a record
walks its keys in file order, reporting unknown keys and reading its fields,
then reports missing required fields, then reads its ``deferred`` fields in
declared order, then runs ``check``.

Every ``read`` returns the clean value, or None when the value is invalid (its
problems are recorded). A record whose required fields are not all valid
yields None; an invalid optional field takes its default.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from zmr.model.yamlnodes import Problems, join_path, kind, line_of, mapping_items, read_yaml, scalar

# Control characters refused in text (tab and newline are text).
CONTROL = frozenset(chr(c) for c in range(32)) - {"\t", "\n"}


@dataclass
class At:
    """Where a value sits: its node, key path, the file's problems and the loader's context."""

    node: Node
    path: str  # components.rollout.commit, smoke[0].name; '' for the top level
    problems: Problems
    ctx: Any = None  # whatever the loader's checks need (root, model, policy)
    key: str = ""  # the mapping key the value sits under ('' for list items and the top level)
    key_node: Node | None = None
    parent: MappingNode | None = None  # the mapping holding the value
    seen: dict[tuple[str, Any], int] | None = None  # per list: the values of `Field.unique` fields taken so far -> line
    dropped: bool = False  # its mapping entry is refused for its key already (`Key.skip` False)

    @property
    def where(self) -> str:
        return self.path or "top level"

    def add(self, text: str, fix: str = "", node: Node | None = None) -> None:
        """Record ``<path>: text; fix`` at *node* (default: this value's node)."""
        self.problems.add(self.node if node is None else node, f"{self.where}: {text}", fix)

    def child(self, node: Node, path: str, **kw: Any) -> At:
        return At(node, path, self.problems, self.ctx, **kw)


class Type(Protocol):
    def read(self, node: Node, at: At) -> Any:
        """The clean value of *node*, or None with its problems recorded at *at*."""


Check = Callable[[Any, At], Any]  # the clean value -> the value to keep, or None after at.add(...)


def _value(node: Node) -> Any:
    """A scalar's Python value; None for mappings and lists (messages show it as None)."""
    return scalar(node) if isinstance(node, ScalarNode) else None


@dataclass(frozen=True)
class Text:
    """A string scalar.

    *wrong* is the message for anything else (``{kind}``: what was found,
    ``{value}``: its value, None for a mapping or list); *empty* the message
    for blank text (None: *wrong*). *written* lists scalar types taken as
    written (``LoRA: yes`` stays "yes"; an all-digit commit id stays text).
    """

    wrong: str = "expected a string, got {kind}"
    fix: str = "write a plain string"
    empty: tuple[str, str] | None = ("must not be empty", "write a value or remove the key")
    written: tuple[type, ...] = ()
    null_is_empty: bool = False  # a YAML null (``key:``) is blank text, not a wrong type
    pattern: re.Pattern[str] | None = None  # text that does not match is *wrong*
    control: frozenset[str] | None = CONTROL  # characters refused with "control characters are not allowed"
    strip: bool = False
    visible: bool = False  # refuse invisible and bidirectional characters (text shown to readers)
    check: Check | None = None

    def read(self, node: Node, at: At) -> Any:
        value = _value(node)
        if isinstance(node, ScalarNode) and type(value) in self.written:
            value = node.value
        blank = (value is None and self.null_is_empty and isinstance(node, ScalarNode)) or (isinstance(value, str) and not value.strip())
        if blank and self.empty is not None:
            at.add(*self.empty)
            return None
        if blank or not isinstance(value, str) or (self.pattern is not None and not self.pattern.match(value)):
            at.add(self.wrong.format(kind=kind(node), value=value), self.fix)
            return None
        if self.control is not None and any(c in self.control for c in value):
            at.add("control characters are not allowed", "remove them")
            return None
        if self.visible and invisible_character(value):
            at.add(f"invisible or bidirectional character {invisible_character(value)} is not allowed", "remove it: readers would not see it")
            return None
        if self.strip:
            value = value.strip()
        return self.check(value, at) if self.check else value


# Unicode categories of characters that show as nothing or reorder text: format (zero-width,
# bidirectional controls, BOM), line and paragraph separators, spaces, private use, unassigned.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp", "Zs"})


def invisible_character(text: str) -> str:
    """The first character of *text* that is invisible or bidirectional, as ``U+XXXX``; ''."""
    for ch in text:
        if not ch.isascii() and unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
            return f"U+{ord(ch):04X}"
    return ""


@dataclass(frozen=True)
class Number:
    """A number scalar, at least *minimum* (booleans are not numbers); floats when not *integer*."""

    wrong: str  # with {value}: what was found
    fix: str
    minimum: float = 0
    integer: bool = False

    def read(self, node: Node, at: At) -> Any:
        value = _value(node)
        types = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, types) or value < self.minimum:
            at.add(self.wrong.format(value=value), self.fix)
            return None
        return value if self.integer else float(value)


@dataclass(frozen=True)
class Scalar:
    """Any non-null scalar, as text (booleans in lower case, as a shell would want them)."""

    wrong: str
    fix: str

    def read(self, node: Node, at: At) -> Any:
        value = _value(node)
        if value is None:
            at.add(self.wrong, self.fix)
            return None
        return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class ListOf:
    """A list of *item*; invalid items are reported and left out."""

    item: Type
    wrong: str  # with {kind}
    fix: str
    nonempty: bool = False  # an empty list is *wrong*
    indexed: bool = True  # item paths are ``path[i]``; False: items report under the list's own path

    def read(self, node: Node, at: At) -> Any:
        if not isinstance(node, SequenceNode) or (self.nonempty and not node.value):
            at.add(self.wrong.format(kind=kind(node)), self.fix)
            return None
        seen: dict[tuple[str, Any], int] = {}
        items = []
        for index, item in enumerate(node.value):
            value = self.item.read(item, at.child(item, join_path(at.path, index) if self.indexed else at.path, seen=seen))
            if value is not None:
                items.append(value)
        return tuple(items)


@dataclass(frozen=True)
class Key:
    """What the keys of a `MapOf` must be: *test* passes, else *text* (``{map}``, ``{entry}``, ``{key}``) at the key.

    *pattern* and *max_length*: what of *test* an editor's schema says too (``propertyNames``); *test* must refuse
    every key they refuse (tests/test_file_schemas.py holds the two to the same answers)."""

    test: Callable[[str], Any]
    text: str
    fix: str
    skip: bool = True  # False: the entry's value is still checked (its problems reported), then dropped
    pattern: re.Pattern[str] | None = None
    max_length: int | None = None


@dataclass(frozen=True)
class MapOf:
    """A mapping of free keys to *value*: ``((key, value), ...)`` in file order; invalid entries left out."""

    value: Type
    wrong: str  # with {kind}
    fix: str
    nonempty: bool = False
    key: Key | None = None
    strip_keys: bool = False

    def read(self, node: Node, at: At) -> Any:
        if not isinstance(node, MappingNode) or (self.nonempty and not node.value):
            at.add(self.wrong.format(kind=kind(node)), self.fix)
            return None
        entries = []
        for key, key_node, value_node in mapping_items(node, at.problems, at.where):
            entry = join_path(at.path, key)
            ok = self.key is None or bool(self.key.test(key))
            if not ok:
                assert self.key is not None
                at.problems.add(key_node, self.key.text.format(map=at.where, entry=entry, key=key), self.key.fix)
                if self.key.skip:
                    continue
            value = self.value.read(value_node, at.child(value_node, entry, key=key, key_node=key_node, parent=node, dropped=not ok))
            if ok and value is not None:
                entries.append((key.strip() if self.strip_keys else key, value))
        return tuple(entries)


@dataclass(frozen=True)
class Field:
    """One key of a `Record`."""

    name: str
    type: Type
    required: bool = False
    default: Any = None  # for an absent or invalid optional field
    deferred: bool = False  # read after the record's keys and missing fields, in declared order
    hint: str = ""  # the fix when a required field is missing (default: add `<name>:`)
    unique: tuple[str, str] | None = None  # unique among the items of the enclosing list: (text with {value} and {line}, fix)


@dataclass
class Fields:
    """What a record read: the valid values, and the nodes of every known key present."""

    values: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)  # value nodes, valid or not
    keys: dict[str, Node] = field(default_factory=dict)  # key nodes
    sound: bool = True  # every required field is valid and the entry's key was accepted

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __contains__(self, name: str) -> bool:
        return name in self.values


@dataclass(frozen=True)
class Record:
    """A mapping with known keys; unknown keys are errors (a typo must never pass silently)."""

    fields: tuple[Field, ...]
    wrong: str = "expected a mapping, got {kind}"
    fix: str = ""
    empty: tuple[str, str] | None = None  # the message for an empty mapping (None: allowed)
    suggest: bool = True  # unknown keys: suggest the closest allowed key
    sorted_hint: bool = False  # list the allowed keys alphabetically (else in declared order)
    refused: tuple[tuple[str, str, str], ...] = ()  # (key, text, fix): keys with their own message
    shorthand: str = ""  # a scalar in place of the mapping is this one field, reported at the mapping's path
    check: Callable[[Fields, At], bool] | None = None  # after the fields, always; False: yield None
    make: Callable[[Fields, At], Any] | None = None  # the value of a sound record (default: the Fields)

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def read(self, node: Node, at: At) -> Any:
        fields = Fields()
        if self.shorthand and isinstance(node, ScalarNode):
            spec = self.field(self.shorthand)
            fields.nodes[spec.name] = node
            self._take(spec, node, at, fields, at.seen)
        elif not isinstance(node, MappingNode):
            at.add(self.wrong.format(kind=kind(node)), self.fix)
            return None
        else:
            self._walk(node, at, fields)
            if self.empty is not None and not node.value:
                at.add(*self.empty)
                return None
        for spec in self.fields:
            if spec.name not in fields.values and not spec.required and spec.default is not None:
                fields.values[spec.name] = spec.default
        fields.sound = not at.dropped and all(f.name in fields.values for f in self.fields if f.required)
        ok = self.check(fields, at) if self.check else True
        if not ok or not fields.sound:
            return None
        return self.make(fields, at) if self.make else fields

    def _walk(self, node: MappingNode, at: At, fields: Fields) -> None:
        names = [f.name for f in self.fields]
        refused = {key: (text, fix) for key, text, fix in self.refused}
        for key, key_node, value_node in mapping_items(node, at.problems, at.where):
            if key in refused:
                at.problems.add(key_node, f"{join_path(at.path, key)}: {refused[key][0]}", refused[key][1])
                continue
            if key not in names:
                allowed = sorted(names) if self.sorted_hint else names
                close = difflib.get_close_matches(key, allowed, n=1) if self.suggest else []
                fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
                at.problems.add(key_node, f"{join_path(at.path, key)}: unknown key", fix)
                continue
            fields.keys[key], fields.nodes[key] = key_node, value_node
            spec = self.field(key)
            if not spec.deferred:
                self._read(spec, node, at, fields)
        for spec in self.fields:
            if spec.required and not spec.deferred and spec.name not in fields.nodes:
                self._missing(spec, node, at)
        for spec in self.fields:
            if spec.deferred:
                if spec.name in fields.nodes:
                    self._read(spec, node, at, fields)
                elif spec.required:
                    self._missing(spec, node, at)

    def _read(self, spec: Field, node: MappingNode, at: At, fields: Fields) -> None:
        value_node = fields.nodes[spec.name]
        child = at.child(value_node, join_path(at.path, spec.name), key=spec.name, key_node=fields.keys[spec.name], parent=node)
        self._take(spec, value_node, child, fields, at.seen)

    @staticmethod
    def _take(spec: Field, node: Node, at: At, fields: Fields, seen: dict[tuple[str, Any], int] | None) -> None:
        """Read *spec*'s value at *node*; keep it when valid (and unique in *seen*, the enclosing list's values)."""
        value = spec.type.read(node, at)
        if value is not None and spec.unique is not None and seen is not None:
            first = seen.get((spec.name, value))
            if first is not None:
                at.add(spec.unique[0].format(value=value, line=first), spec.unique[1])
                return
            seen[(spec.name, value)] = line_of(node)
        if value is not None:
            fields.values[spec.name] = value

    def _missing(self, spec: Field, node: MappingNode, at: At) -> None:
        at.problems.add(node, f"{join_path(at.path, spec.name)}: required key is missing", spec.hint or f"add `{spec.name}:`")


def one_of(choices: tuple[str, ...], what: str, suggest: bool = False) -> Check:
    """A check: the value is one of *choices* (``unknown <what> 'x'``; *suggest*: name the closest)."""

    def check(value: str, at: At) -> str | None:
        if value in choices:
            return value
        close = difflib.get_close_matches(value, choices, n=1) if suggest else []
        at.add(f"unknown {what} {value!r}", f"did you mean {close[0]!r}?" if close else f"use one of: {', '.join(choices)}")
        return None

    check.choices = choices  # type: ignore[attr-defined]  # for json_schema: an enum
    return check


def declared(check: Check, *, pattern: re.Pattern[str] | None = None, max_length: int | None = None) -> Check:
    """*check*, declaring what of it an editor's schema says too: text that *pattern* does not match (from the start,
    as `re.match`; end it with ``\\Z``), or longer than *max_length*, is refused by *check* (as `one_of` declares its
    ``choices``). `json_schema` writes them as ``pattern`` and ``maxLength``."""
    check.pattern = pattern  # type: ignore[attr-defined]
    check.max_length = max_length  # type: ignore[attr-defined]
    return check


def read_file(path: Path, display: str, schema: Record, problems: Problems, ctx: Any = None, *, root: Path | None = None, what: str = "YAML file") -> Any:
    """Parse *path* (inside *root*, if given) and read it with *schema*; None when it cannot be read or its top level is invalid."""
    node = read_yaml(path, display, problems, root=root, what=what)
    if node is None:
        return None
    return schema.read(node, At(node, "", problems, ctx))


def json_schema(record: Record, title: str, description: str, docs: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a file that *record* reads, for editors (yaml-language-server).

    Written from the same declarations `read_file` walks: keys, which are required, types, lists and maps, enums of
    `one_of` checks, defaults; *docs* maps a key path (``components.*.smoke[].run``) to its description, else the
    field's hint says what to write. Checks in code (commit ids, paths, refs that must exist) are `zmr validate`'s alone.
    """
    body = _json_type(record, "", docs or {})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "description": description, **body}


def _json_type(value_type: Any, path: str, docs: dict[str, str]) -> dict[str, Any]:
    if isinstance(value_type, Record):
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {f.name: _json_field(f, f"{path}.{f.name}" if path else f.name, docs) for f in value_type.fields},
            "additionalProperties": False,
        }
        required = [f.name for f in value_type.fields if f.required]
        if required:
            schema["required"] = required
        if value_type.shorthand:
            return {"anyOf": [schema, _json_type(value_type.field(value_type.shorthand).type, path, docs)]}
        return schema
    if isinstance(value_type, Text):
        kinds = ["string", *(["number"] if {int, float} & set(value_type.written) else [])]
        schema = {"type": kinds[0] if len(kinds) == 1 else kinds}
        choices = getattr(value_type.check, "choices", None)
        if choices:
            schema["enum"] = list(choices)
        return {
            **schema,
            **_text_limits(value_type.pattern, None),
            **_text_limits(getattr(value_type.check, "pattern", None), getattr(value_type.check, "max_length", None)),
        }
    if isinstance(value_type, Number):
        return {"type": "integer" if value_type.integer else "number", "minimum": value_type.minimum}
    if isinstance(value_type, Scalar):
        return {"type": ["string", "number", "boolean"]}
    if isinstance(value_type, ListOf):
        schema = {"type": "array", "items": _json_type(value_type.item, f"{path}[]", docs)}
        if value_type.nonempty:
            schema["minItems"] = 1
        return schema
    if isinstance(value_type, MapOf):
        schema = {"type": "object", "additionalProperties": _json_type(value_type.value, f"{path}.*", docs)}
        names = _text_limits(value_type.key.pattern, value_type.key.max_length) if value_type.key else {}
        if names:
            schema["propertyNames"] = names
        if value_type.nonempty:
            schema["minProperties"] = 1
        return schema
    return {}


def _text_limits(pattern: re.Pattern[str] | None, max_length: int | None) -> dict[str, Any]:
    """A JSON Schema's ``pattern`` (anchored at both ends: `re.match` is anchored at the start, JSON Schema's at
    neither) and ``maxLength``, for a Python pattern that ends in ``\\Z``."""
    limits: dict[str, Any] = {}
    if pattern is not None:
        assert pattern.pattern.endswith("\\Z") and not pattern.flags & re.MULTILINE, pattern.pattern  # whole text, one meaning in both
        limits["pattern"] = "^" + pattern.pattern.removeprefix("^").removesuffix("\\Z") + "$"
    if max_length is not None:
        limits["maxLength"] = max_length
    return limits


def _json_field(spec: Field, path: str, docs: dict[str, str]) -> dict[str, Any]:
    schema = _json_type(spec.type, path, docs)
    text = docs.get(path) or spec.hint
    if text:
        schema["description"] = text
    if isinstance(spec.default, (str, int, float)) and not isinstance(spec.default, bool) and spec.default != "":
        schema["default"] = spec.default
    return schema
