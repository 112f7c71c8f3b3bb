"""JSON Schemas of manifests and zmr.yaml (`zmr schema`): generated from the declarations `zmr validate` reads with,
committed under schemas/ and kept equal to what zmr prints; they accept the files zmr accepts and refuse what it refuses
for the same reason (a missing or unknown key, a wrong type, a value outside an enum)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from conftest import REPO_ROOT, git, zmr
from zmr.init import RELEASED_COMMIT

SCHEMAS = REPO_ROOT / "schemas"


def _schema(name: str) -> dict:
    result = zmr("schema", name, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_committed_schemas_are_what_zmr_schema_prints():
    for name in ("manifest", "settings"):
        printed = zmr("schema", name, cwd=REPO_ROOT).stdout
        assert (SCHEMAS / f"{name}.schema.json").read_text() == printed, f"run: zmr schema {name} > schemas/{name}.schema.json"
        jsonschema.Draft202012Validator.check_schema(json.loads(printed))
    assert sorted(p.name for p in SCHEMAS.iterdir()) == ["manifest.schema.json", "settings.schema.json"]
    assert zmr("schema", "case", cwd=REPO_ROOT).returncode == 2


def test_the_schemas_accept_the_bundled_files_and_refuse_what_validate_refuses():
    manifest = _schema("manifest")
    for path in sorted((REPO_ROOT / "manifests").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), manifest)
    jsonschema.validate(yaml.safe_load((REPO_ROOT / "zmr.yaml").read_text()), _schema("settings"))
    good = yaml.safe_load((REPO_ROOT / "manifests" / "demo.yaml").read_text())
    component = next(iter(good["components"]))
    for broken in (
        {k: v for k, v in good.items() if k != "model"},  # a required key missing
        {**good, "modle": "x"},  # a typo
        {**good, "components": {component: {**good["components"][component], "release": "three-commit"}}},  # not in the enum
        {**good, "components": {component: {**good["components"][component], "smoke": [{"name": "t", "run": "true", "timeout": 0}]}}},
    ):
        assert not jsonschema.Draft202012Validator(manifest).is_valid(broken), broken
    described = manifest["properties"]["components"]["additionalProperties"]["properties"]
    assert all(spec.get("description") for spec in described.values())  # editors show what each key is


def test_new_points_the_manifest_at_the_schema(project, upstream):
    result = zmr("new", "fresh", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", cwd=project.root)
    assert result.returncode == 0, result.stderr
    text = (project.root / "manifests" / "fresh.yaml").read_text()
    first = text.splitlines()[0]
    # An immutable reference: the commit the written workflows name, never a branch (a schema change there would
    # start refusing manifests that validate with the zmr a project pinned).
    assert first == f"# yaml-language-server: $schema=https://raw.githubusercontent.com/Inferact/zero-mismatch-rl/{RELEASED_COMMIT}/schemas/manifest.schema.json"
    jsonschema.validate(yaml.safe_load(text), _schema("manifest"))
    assert zmr("validate", "fresh", cwd=project.root).returncode == 0


def test_init_points_zmr_yaml_at_the_schema(tmp_path):
    repo = tmp_path / "fresh"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    assert zmr("init", cwd=repo).returncode == 0
    text = (repo / "zmr.yaml").read_text()
    assert text.splitlines()[0] == f"# yaml-language-server: $schema=https://raw.githubusercontent.com/Inferact/zero-mismatch-rl/{RELEASED_COMMIT}/schemas/settings.schema.json"
    jsonschema.validate(yaml.safe_load(text), _schema("settings"))


def test_the_schemas_at_the_released_commit_are_the_committed_ones(tmp_path):
    """The `$schema` lines name RELEASED_COMMIT: its schemas/ must be what this zmr validates by. A schema change is
    published by a release (CHANGELOG.md, "Releasing"): until RELEASED_COMMIT moves to a commit that has it, this fails."""
    clone = tmp_path / "zmr-clone"
    git("clone", "-q", "--no-checkout", str(REPO_ROOT), str(clone), cwd=tmp_path)
    for name in ("manifest", "settings"):
        at_release = git("show", f"{RELEASED_COMMIT}:schemas/{name}.schema.json", cwd=clone)
        assert at_release == (SCHEMAS / f"{name}.schema.json").read_text().strip(), f"schemas/{name}.schema.json changed since {RELEASED_COMMIT}: release (CHANGELOG.md)"
        assert "$id" not in json.loads(at_release)  # no commit id inside: a release does not change the file
