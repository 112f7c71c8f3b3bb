"""JSON Schemas of manifests and zmr.yaml (`zmr schema`): generated from the declarations `zmr validate` reads with,
committed under schemas/ and kept equal to what zmr prints; they accept the files zmr accepts and refuse what it refuses
for the same reason (a missing or unknown key, a wrong type, a value outside an enum)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from conftest import REPO_ROOT, git, zmr
from zmr.ops.init import RELEASED_COMMIT

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


def test_the_manifest_schema_refuses_the_names_and_pins_validate_refuses(tmp_path):
    """One source: each name pattern, length limit and the commit's pattern come from the declarations `zmr validate`
    reads with, anchored at both ends (a JSON Schema pattern matches anywhere: "-x" passed `[A-Za-z0-9]...$`); the
    schema and validate give the same answer on each value."""
    import copy

    from zmr.model.manifest import parse_manifest

    manifest = _schema("manifest")
    good = yaml.safe_load((REPO_ROOT / "manifests" / "demo.yaml").read_text())
    (tmp_path / "manifests").mkdir()
    (tmp_path / "upstreams").symlink_to(REPO_ROOT / "upstreams")

    def answers(data: dict) -> tuple[bool, bool]:
        (tmp_path / "manifests" / "demo.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        _, problems = parse_manifest(tmp_path / "manifests" / "demo.yaml", tmp_path)
        return jsonschema.Draft202012Validator(manifest).is_valid(data), not problems

    def edited(edit) -> dict:
        data = copy.deepcopy(good)
        edit(data)
        return data

    assert answers(good) == (True, True)
    rollout = lambda data: data["components"]["rollout"]  # noqa: E731
    refused = {
        "a smoke name starting with '-'": edited(lambda d: rollout(d)["smoke"][0].update(name="-x")),
        "a smoke name of 65 characters": edited(lambda d: rollout(d)["smoke"][0].update(name="x" * 65)),
        "a branch name as the pin": edited(lambda d: rollout(d).update(commit="main")),
        "an abbreviated pin": edited(lambda d: rollout(d).update(commit=rollout(d)["commit"][:12])),
        "an upper-case pin": edited(lambda d: rollout(d).update(commit=rollout(d)["commit"].upper())),
        "an upper-case component key": edited(lambda d: d.update(components={"Rollout" if k == "rollout" else k: v for k, v in d["components"].items()})),
        "a component key with '_'": edited(lambda d: d.update(components={"roll_out" if k == "rollout" else k: v for k, v in d["components"].items()})),
        "a variable name starting with a digit": edited(lambda d: rollout(d)["smoke"][0].update(env={"1X": "y"})),
        "a model name with upper case": edited(lambda d: d.update(model="Demo")),
        "a needs entry with '/'": edited(lambda d: d["smoke"][0].update(needs=["rollout", "x/trainer"])),
    }
    for what, data in refused.items():
        assert answers(data) == (False, False), what
    accepted = edited(lambda d: rollout(d)["smoke"][0].update(name="x" * 64, env={"_X1": "y"}))
    assert answers(accepted) == (True, True)
    run = manifest["properties"]["components"]["additionalProperties"]["properties"]["smoke"]["items"]["properties"]["run"]
    assert "/bin/sh -c" in run["description"] and "bash" not in run["description"].replace("not bash", "")


def test_the_settings_schema_refuses_the_urls_validate_refuses(tmp_path):
    """`release.url`'s pattern is the one validate reads with (zmr.model.project.WEB_URL_RE, through `declared`): the schema
    had none, so an editor took "ftp://x" or "https://a b" that `zmr validate` refuses. Same answer on each value,
    white space of either regex dialect included (Python's `\\s` has U+001C, ECMAScript's U+FEFF)."""
    from zmr.infra.errors import ZmrError
    from zmr.model.project import load_settings

    settings = _schema("settings")
    assert settings["properties"]["release"]["properties"]["url"]["pattern"].startswith("^https?://")

    def answers(url: str) -> tuple[bool, bool]:
        data = {"release": {"name": "r", "email": "r@example.com", "url": url}}
        (tmp_path / "zmr.yaml").write_text(json.dumps(data))  # JSON is YAML, and spells every character
        try:
            load_settings(tmp_path)
            accepted = True
        except ZmrError:
            accepted = False
        return jsonschema.Draft202012Validator(settings).is_valid(data), accepted

    for url in ("https://github.com/OWNER/REPO", "http://example.com/a?b=c#d", "https://例え.jp/リポ"):
        assert answers(url) == (True, True), url
    for url in ("ftp://example.com", "https://", "github.com/a/b", "https://a b", "https://x/<y>", "https://x)", "https://x|y",
                "https://x\\\\y", "https://x\"y", "https://x'y", "https://x`y", " https://x", "https://x\ty", "https://x\x1cy",
                "https://x\x85y", "https://x\u00a0y", "https://x\u2028y", "https://x\u3000y", "https://x\ufeffy"):  # fmt: skip
        assert answers(url) == (False, False), url
