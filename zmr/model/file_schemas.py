"""`zmr schema`: JSON Schemas of manifests and ``zmr.yaml`` for editors, from the declarations `zmr validate` reads with.

`manifest_schema` and `settings_schema` walk `zmr.model.manifest.MANIFEST` and `zmr.model.project.SETTINGS` with
`zmr.model.yamlrecords.json_schema`; the descriptions are here, by key path. Copies are committed under ``schemas/`` (a test keeps
them equal to what this module writes), and `zmr new` points a manifest at the published one with a
``# yaml-language-server: $schema=`` line.

Where editors fetch them: the copies of zmr's repository at an immutable commit (`schema_url`: the commit of
`zmr.model.source.zmr_source()`, by default `zmr.model.source.RELEASED_COMMIT`), never a branch that moves under a file that names it.
So the schemas carry no ``$id`` with that commit in it (a release would change them), and a change of a schema is
published by a release: tests/test_file_schemas.py requires the files at RELEASED_COMMIT to equal the committed ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from zmr.infra.reports import Report

# The raw files of a GitHub repository at a commit.
RAW_BASE = "https://raw.githubusercontent.com"
NAMES = ("manifest", "settings")

_SMOKE = {
    "name": "The test's name: letters, digits, '.', '_', '-'; unique in its list.",
    "run": "The shell command, run as /bin/sh -c RUN (POSIX sh, not bash) in the test's tree; exit 0 passes.",
    "timeout": "Seconds before the test is stopped (SIGTERM, then SIGKILL); default 600.",
    "resources": "What the test needs, e.g. {GPU: 1}: Ray resources, and the local executor's limits.",
    "env": "Environment variables for the test: {NAME: value}.",
}
MANIFEST_DOCS: dict[str, str] = {
    "model": "The model's name: the file is manifests/<model>.yaml; [a-z0-9][a-z0-9._-]*.",
    "title": "The model's title in generated docs (default: the model name).",
    "components": "The pinned upstreams, by component key (e.g. rollout, trainer): [a-z0-9][a-z0-9-]*.",
    "components.*.upstream": "The upstream repository: a git URL or a path (e.g. https://github.com/vllm-project/vllm.git).",
    "components.*.commit": "The pin: the upstream commit id the series applies to (40 hex digits).",
    "components.*.track": "The upstream branch `zmr update` moves the pin towards (e.g. main).",
    "components.*.branch": "The release branch's name (default <component>/<model>).",
    "components.*.release": "The release branch's layout: two-commit (pin, then one commit of the series) or snapshot.",
    "components.*.patches": "The series folder (default patches/<model>/<component>).",
    "components.*.smoke": "Smoke tests run in this component's release tree (`zmr smoke`).",
    "smoke": "Model-level smoke tests, run with the trees they need.",
    "smoke[].needs": "The components whose release trees the test needs.",
    **{f"smoke[].{k}": v for k, v in _SMOKE.items()},
    **{f"components.*.smoke[].{k}": v for k, v in _SMOKE.items()},
}
SETTINGS_DOCS: dict[str, str] = {
    "release": "The release identity: an input of every release commit id (change it and every release branch changes).",
    "release.name": "Author and committer name of release commits.",
    "release.email": "Author and committer email of release commits.",
    "release.url": "The repository's web address (https), for links in the generated README.",
}


def manifest_schema() -> dict[str, Any]:
    from zmr.model.manifest import MANIFEST
    from zmr.model.yamlrecords import json_schema

    schema = json_schema(MANIFEST, "zmr manifest", "manifests/<model>.yaml: a model's pinned upstreams and smoke tests (docs/reference.md §2).", MANIFEST_DOCS)
    return schema


def settings_schema() -> dict[str, Any]:
    from zmr.model.project import SETTINGS
    from zmr.model.yamlrecords import json_schema

    schema = json_schema(SETTINGS, "zmr settings", "zmr.yaml: the project's settings (docs/reference.md §1.1).", SETTINGS_DOCS)
    return schema


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema called *name* (one of NAMES)."""
    return {"manifest": manifest_schema, "settings": settings_schema}[name]()


def schema_text(name: str) -> str:
    """*name*'s schema as the committed file holds it."""
    import json

    return json.dumps(schema(name), indent=2, ensure_ascii=False) + "\n"


def schema_url(name: str) -> str:
    """Where *name*'s committed schema is published: ``schemas/<name>.schema.json`` of zmr's repository at the commit
    the workflows `zmr init` writes name too (`zmr.model.source.zmr_source()`)."""
    from zmr.model.source import zmr_source

    url, commit = zmr_source()
    return f"{RAW_BASE}/{url.removeprefix('https://github.com/')}/{commit}/schemas/{name}.schema.json"


class SchemaJson(TypedDict):
    """The schema's *name*, where it is published (*url*), and the JSON Schema itself."""

    name: str
    url: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class PublishedSchema(Report):
    """What `zmr schema NAME --json` reports: the schema, and where it is published (`schema_url`)."""

    name: str
    url: str
    schema: dict[str, Any]

    def to_json(self) -> SchemaJson:
        return {"name": self.name, "url": self.url, "schema": self.schema}


def published(name: str) -> PublishedSchema:
    """*name*'s schema (one of NAMES) with the address editors fetch it from."""
    return PublishedSchema(name, schema_url(name), schema(name))


def modeline(name: str) -> str:
    """The first line of a YAML file that points yaml-language-server (VS Code's YAML extension, ...) at the schema."""
    return f"# yaml-language-server: $schema={schema_url(name)}"
