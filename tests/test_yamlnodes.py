"""zmr.model.yamlnodes: YAML read as a node tree, every problem with its file and line; no aliases, anchors or tags."""

from __future__ import annotations

import pytest

from zmr.model.yamlnodes import Problems, join_path, kind, mapping_items, read_yaml


def _read(tmp_path, text: str | bytes):
    path = tmp_path / "m.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    problems = Problems("manifests/m.yaml")
    return read_yaml(path, "manifests/m.yaml", problems, root=tmp_path), [str(p) for p in problems.items]


def test_a_mapping_reads_into_nodes_with_lines(tmp_path):
    node, problems = _read(tmp_path, "model: toy\ncomponents:\n  rollout: {commit: abc}\n")
    assert problems == []
    found = Problems("manifests/m.yaml")
    items = mapping_items(node, found, "")
    assert [(key, key_node.start_mark.line + 1, kind(value)) for key, key_node, value in items] == [("model", 1, "a string"), ("components", 2, "a mapping")]
    assert not found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x 1\nb: *x\n", "manifests/m.yaml:1: anchor &x is not allowed; write the value out in full"),
        ("a: 1\nb: !!python/object:os.system x\n", "manifests/m.yaml:2: YAML tag 'tag:yaml.org,2002:python/object:os.system' is not allowed; remove the tag"),
        ("a: [1, 2\n", "manifests/m.yaml:2: invalid YAML: expected ',' or ']', but got '<stream end>'; fix the syntax"),
        ("", "manifests/m.yaml:1: file is empty; write the mapping described in docs/reference.md"),
        (b"a: 1\nb: \xff\n", "manifests/m.yaml:2: not valid UTF-8 (byte 8); save the file as UTF-8"),
        ("a: 1\n\0", "manifests/m.yaml:2: NUL character in file; remove it"),
    ],
)
def test_what_is_refused_is_named_with_its_line(tmp_path, text, expected):
    node, problems = _read(tmp_path, text)
    assert node is None
    assert problems == [expected]


def test_duplicate_and_non_string_keys_are_reported_once_each(tmp_path):
    node, problems = _read(tmp_path, "a: 1\n? [x]\n: 2\na: 3\n")
    assert problems == []
    found = Problems("manifests/m.yaml")
    items = mapping_items(node, found, "top")
    assert [key for key, _, _ in items] == ["a"]
    assert [str(p) for p in found.items] == [
        "manifests/m.yaml:2: top: keys must be plain strings; quote the key",
        "manifests/m.yaml:4: top: duplicate key 'a' (first at line 1); keep one of them",
    ]


def test_join_path_names_where_a_value_is():
    assert join_path("", "components") == "components"
    assert join_path("components", "rollout") == "components.rollout"
    assert join_path("smoke", 2) == "smoke[2]"
