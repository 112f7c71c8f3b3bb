"""The schema engine (zmr.model.yamlrecords): typed values back, every problem located, defaults, order."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from types import SimpleNamespace

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from zmr.model.cases import CASE
from zmr.model.manifest import MANIFEST, Policy
from zmr.model.project import SETTINGS
from zmr.model.yamlrecords import Field, Key, ListOf, MapOf, Number, Record, Scalar, Text, one_of, read_file
from zmr.model.yamlnodes import Problems

COLOURS = ("red", "green")
ITEM = Record(
    (Field("id", Text(), required=True), Field("weight", Number("expected a number, got {value!r}", "write a number"), default=1.0)),
    "expected a mapping with id, got {kind}",
    "write `- id: ...`",
    make=lambda f, at: (f["id"], f["weight"]),
)
SCHEMA = Record(
    (
        Field("name", Text(), required=True),
        Field("count", Number("expected a count, got {value!r}", "write e.g. 3", minimum=1, integer=True), default=1),
        Field("colour", Text(check=one_of(COLOURS, "colour", suggest=True)), default="red"),
        Field("tags", ListOf(Text(), "expected a list of tags, got {kind}", "write `- tag`"), default=()),
        Field("items", ListOf(ITEM, "expected a list of items, got {kind}", "write `- id: ...`"), default=()),
        Field("env", MapOf(Scalar("expected a scalar value", "quote it"), "expected a mapping, got {kind}", "write `env: {A: b}`",
                           key=Key(re.compile(r"[A-Z]+\Z").match, "{map}: {key!r} is not upper case", "use A-Z")), default=()),
    ),
    fix="start with `name:`",
    make=lambda f, at: dict(f.values),
)
FIELDS = [f.name for f in SCHEMA.fields]

words = st.text(alphabet="abcdefgh-_.", min_size=1, max_size=8).filter(lambda s: s.strip() and s not in ("y", "n") and not s.startswith(("-", ".")))
upper = st.text(alphabet="ABCXYZ", min_size=1, max_size=5)
valid_doc = st.fixed_dictionaries(
    {"name": words},
    optional={
        "count": st.integers(1, 10**6),
        "colour": st.sampled_from(COLOURS),
        "tags": st.lists(words, max_size=4),
        "items": st.lists(st.fixed_dictionaries({"id": words}, optional={"weight": st.floats(0, 1e6) | st.integers(0, 1000)}), max_size=3),
        "env": st.dictionaries(upper, words | st.integers() | st.booleans(), max_size=3),
    },
)
any_yaml = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.sampled_from(FIELDS), inner, max_size=5),
    max_leaves=25,
)


def _read(text: str, schema: Record = SCHEMA, ctx=None):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.yaml"
        path.write_text(text, encoding="utf-8")
        problems = Problems("f.yaml")
        return read_file(path, "f.yaml", schema, problems, ctx), [str(p) for p in problems.items], problems.items


def _dump(doc, flow) -> str:
    return yaml.safe_dump(doc, default_flow_style=flow, sort_keys=False, allow_unicode=True)


@settings(max_examples=150, deadline=None)
@given(doc=valid_doc, flow=st.sampled_from([False, True, None]))
def test_valid_documents_come_back_typed_with_defaults(doc, flow):
    value, problems, _ = _read(_dump(doc, flow))
    assert problems == []
    assert value["name"] == doc["name"]
    assert value["count"] == doc.get("count", 1) and isinstance(value["count"], int)
    assert value["colour"] == doc.get("colour", "red")
    assert value["tags"] == tuple(doc.get("tags", ()))
    assert value["items"] == tuple((i["id"], float(i.get("weight", 1.0))) for i in doc.get("items", ()))
    assert value["env"] == tuple((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in doc.get("env", {}).items())


@settings(max_examples=150, deadline=None)
@given(doc=valid_doc, bad=st.sets(st.sampled_from(["count", "colour", "tags", "items", "env", "typo"]), min_size=1), flow=st.sampled_from([False, None]))
def test_every_problem_is_reported_at_once_with_its_path(doc, bad, flow):
    broken = dict(doc)
    wrong = {"count": 0, "colour": "blue", "tags": "not a list", "items": [{"weight": 1}], "env": {"lower": "x"}, "typo": 1}
    for key in bad:
        broken[key] = wrong[key]
    value, problems, items = _read(_dump(broken, flow))
    expected = {
        "count": "count: expected a count, got 0; write e.g. 3",
        "colour": "colour: unknown colour 'blue'; use one of: red, green",
        "tags": "tags: expected a list of tags, got a string; write `- tag`",
        "items": "items[0].id: required key is missing; add `id:`",
        "env": "env: 'lower' is not upper case; use A-Z",
        "typo": "typo: unknown key; allowed keys: name, count, colour, tags, items, env",
    }
    assert sorted(p.split(": ", 1)[1] for p in problems) == sorted(expected[key] for key in bad)
    lines = len(_dump(broken, flow).splitlines())
    assert all(1 <= p.line <= lines for p in items)
    # Invalid optional fields take their defaults; the record itself stays valid.
    assert value is not None and value["name"] == doc["name"]


def test_problems_keep_file_order_then_missing_then_deferred():
    schema = Record(
        (Field("a", Text(), required=True), Field("b", Text(), required=True), Field("c", Text(), required=True, deferred=True), Field("d", Text(), deferred=True)),
        fix="fix",
    )
    value, problems, _ = _read("d: ''\nzz: 1\nyy: 2\n", schema)
    assert value is None
    assert problems == [
        "f.yaml:2: zz: unknown key; allowed keys: a, b, c, d",
        "f.yaml:3: yy: unknown key; allowed keys: a, b, c, d",
        "f.yaml:1: a: required key is missing; add `a:`",
        "f.yaml:1: b: required key is missing; add `b:`",
        "f.yaml:1: c: required key is missing; add `c:`",
        "f.yaml:1: d: must not be empty; write a value or remove the key",
    ]


def test_unknown_keys_get_the_closest_allowed_key():
    _, problems, _ = _read("name: x\ncolor: red\n")
    assert problems == ["f.yaml:2: color: unknown key; did you mean 'colour'?"]
    _, problems, _ = _read("- 1\n")
    assert problems == ["f.yaml:1: top level: expected a mapping, got a list; start with `name:`"]


def test_unique_fields_and_shorthand():
    entry = Record((Field("id", Text(), required=True, unique=("duplicate id {value!r} (first at line {line})", "rename it")), Field("note", Text())), shorthand="id")
    schema = Record((Field("list", ListOf(entry, "expected a list, got {kind}", "write `- id`")),), make=lambda f, at: f["list"])
    value, problems, _ = _read("list:\n  - x\n  - id: y\n    note: n\n  - id: x\n", schema)
    assert problems == ["f.yaml:5: list[2].id: duplicate id 'x' (first at line 2); rename it"]
    assert [f["id"] for f in value] == ["x", "y"] and value[1]["note"] == "n"


@settings(max_examples=200, deadline=None)
@given(doc=any_yaml, flow=st.sampled_from([False, True]))
def test_any_document_reads_or_is_located(doc, flow):
    """Whatever the tree, every schema returns a value or records why not, each problem at a line of the file."""
    text = _dump(doc, flow)
    lines = len(text.splitlines())
    for schema, ctx in ((SCHEMA, None), (MANIFEST, _manifest_ctx()), (CASE, _case_ctx()), (SETTINGS, None)):
        value, problems, items = _read(text, schema, ctx)
        assert value is not None or problems
        assert all(0 <= p.line <= lines and p.path == "f.yaml" for p in items)


def _manifest_ctx():
    return SimpleNamespace(root=Path(tempfile.gettempdir()), model="f", policy=Policy(), path=Path("f.yaml"))


def _case_ctx():
    return SimpleNamespace(root=Path(tempfile.gettempdir()), model="f", path=Path("f.yaml"))
