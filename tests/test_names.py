"""Names that collide after case folding or are too long, README values that could open links or tags, a BOM in series."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import make_project, zmr
from zmr.ops.docs import _code, cell, plain, safe_url, table
from zmr.model.manifest import MAX_BRANCH_BYTES, MAX_NAME_BYTES

DATA = Path(__file__).parent / "data" / "docs"
SHA = "a" * 40


def _component(key: str, branch: str | None = None, smoke: str = "") -> str:
    text = f"  {key}:\n    upstream: https://example.invalid/{key}.git\n    commit: {SHA}\n"
    if branch:
        text += f"    branch: {branch}\n"
    return text + smoke


def _validate(project) -> tuple[int, str]:
    result = zmr("validate", cwd=project.root)
    return result.returncode, result.stderr


# -- case folding -----------------------------------------------------------------------


def test_branches_of_two_models_that_differ_only_in_case_are_refused(tmp_path):
    project = make_project(tmp_path / "p")
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + _component("rollout", "rel/demo"))
    project.write("manifests/beta.yaml", "model: beta\ncomponents:\n" + _component("rollout", "Rel/Demo"))
    rc, err = _validate(project)
    assert rc == 2
    assert "manifests/beta.yaml:3: components.rollout.branch: 'Rel/Demo' is already the branch of alpha/rollout as 'rel/demo'" in err


def test_branches_of_one_model_that_differ_only_in_case_are_refused(tmp_path):
    project = make_project(tmp_path / "p")
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + _component("rollout", "x/Alpha") + _component("trainer", "X/alpha"))
    rc, err = _validate(project)
    assert rc == 2
    assert "components.trainer.branch: 'X/alpha' collides with component 'rollout' ('x/Alpha')" in err


def test_a_branch_that_is_a_folder_of_another_models_branch_is_refused(tmp_path):
    project = make_project(tmp_path / "p")
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + _component("rollout", "vllm/alpha"))
    project.write("manifests/beta.yaml", "model: beta\ncomponents:\n" + _component("rollout", "VLLM/alpha/beta"))
    rc, err = _validate(project)
    assert rc == 2
    assert "one is a folder of the other in ref storage" in err


def test_smoke_ids_that_differ_only_in_case_are_refused(tmp_path):
    project = make_project(tmp_path / "p")
    smoke = "    smoke:\n      - name: Bitwise\n        run: 'true'\n      - name: bitwise\n        run: 'true'\n"
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + _component("rollout", smoke=smoke))
    rc, err = _validate(project)
    assert rc == 2
    assert "smoke test id 'rollout.bitwise' differs from 'rollout.Bitwise' (line 7) only in case" in err


def test_case_branches_that_differ_only_in_case_are_refused(tmp_path):
    from zmr.model.cases import load_cases

    root = tmp_path / "repo"
    (root / "cases" / "kimi").mkdir(parents=True)
    (root / "cases" / "kimi" / "case.yaml").write_text("family: MoE\nstatus: s\nbranches:\n  vLLM: vllm/kimi\n  Megatron: VLLM/Kimi\n")
    found, problems = load_cases(root)
    assert found == []
    assert [str(p) for p in problems] == [
        "cases/kimi/case.yaml:5: branches.Megatron: 'VLLM/Kimi' is already the branch of vLLM as 'vllm/kimi' (names that differ only in case collide); give each framework its own branch"
    ]


# -- lengths -----------------------------------------------------------------------------


def test_a_model_name_longer_than_the_limit_fails_validate(tmp_path):
    project = make_project(tmp_path / "p")
    long = "m" * 200
    project.write(f"manifests/{long}.yaml", f"model: {long}\ncomponents:\n" + _component("rollout"))
    rc, err = _validate(project)
    assert rc == 2
    assert f"is too long (200 bytes long; the limit is {MAX_NAME_BYTES['model']})" in err


def test_names_at_the_limits_pass_validate(tmp_path):
    project = make_project(tmp_path / "p")
    model, key = "m" * MAX_NAME_BYTES["model"], "c" * MAX_NAME_BYTES["component"]
    smoke = f"    smoke:\n      - name: {'t' * MAX_NAME_BYTES['smoke test']}\n        run: 'true'\n"
    project.write(f"manifests/{model}.yaml", f"model: {model}\ncomponents:\n" + _component(key, smoke=smoke))
    project.write(f"patches/{model}/{key}/series", "")
    rc, err = _validate(project)
    assert (rc, err) == (0, "")
    # The longest file name zmr builds from them stays well under NAME_MAX.
    test = "t" * MAX_NAME_BYTES["smoke test"]
    assert len(f".smoke-{key}.{test}.json.0123456789abcdef.zmr-tmp".encode()) < 255


@pytest.mark.parametrize(
    "what,text,expected",
    [
        ("component", _component("c" * 65), "is not a valid component key"),
        ("smoke", _component("rollout", smoke=f"    smoke:\n      - name: {'t' * 65}\n        run: 'true'\n"), "smoke test name"),
        ("branch", _component("rollout", branch="/".join(["b" * 60] * 4)), f"the limit is {MAX_BRANCH_BYTES}"),
        ("branch part", _component("rollout", branch="r/" + "b" * 101), "per part"),
    ],
)
def test_names_over_the_limits_fail_validate(tmp_path, what, text, expected):
    project = make_project(tmp_path / "p")
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + text)
    rc, err = _validate(project)
    assert rc == 2, what
    assert expected in err


# -- README generation -------------------------------------------------------------------


def _cell_separators(line: str) -> int:
    """Pipes that end a table cell: those after an even run of backslashes."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


def _case_project(tmp_path: Path, case_yaml: str, settings_yaml: str = "") -> Path:
    project = make_project(tmp_path / "p")
    shutil.copy(DATA / "project" / "README.md", project.root / "README.md")
    project.write("cases/kimi/case.yaml", case_yaml)
    if settings_yaml:
        project.write("zmr.yaml", settings_yaml)
    return project.root


def test_release_url_with_a_script_scheme_is_refused(tmp_path):
    root = _case_project(tmp_path, "family: MoE\nstatus: s\nbranches:\n  vLLM: vllm/kimi\n", "release:\n  url: javascript:alert(1)\n")
    result = zmr("docs", cwd=root)
    assert result.returncode == 2
    assert "zmr.yaml:2: release.url: 'javascript:alert(1)' is not an http(s) URL" in result.stderr
    assert "javascript" not in (root / "README.md").read_text()


@pytest.mark.parametrize(
    "value,problem",
    [
        ("see [here](javascript:alert(1))", "only http(s) URLs"),
        ("<img src=x onerror=alert(1)>", "raw HTML"),
        ("click <javascript:alert(1)>", "raw HTML or an autolink"),
        ("[x]: javascript:alert(1)", "link reference definition"),
        ("Kimi\u202eK3.1", "invisible or bidirectional character U+202E"),
    ],
)
def test_case_text_that_would_open_a_script_link_or_a_tag_is_refused(tmp_path, value, problem):
    root = _case_project(tmp_path, f"family: MoE\nstatus: {json.dumps(value)}\n")
    before = (root / "README.md").read_text()
    result = zmr("docs", cwd=root)
    assert result.returncode == 2
    assert "cases/kimi/case.yaml:2: status:" in result.stderr and problem in result.stderr
    assert (root / "README.md").read_text() == before


def test_titles_and_evidence_ids_cannot_open_links_tags_or_leave_their_cell(tmp_path):
    title = "K](https://evil.example) [x"
    root = _case_project(tmp_path, f"title: {title!r}\nfamily: MoE\nstatus: s\nbranches:\n  vLLM: vllm/kimi\n")
    evidence = root / "cases" / "kimi" / "evidence"
    evidence.mkdir()
    (evidence / "smoke-a.json").write_text('{"id": "a``b|<img src=x onerror=alert(1)>", "status": "<b>passed</b>"}')
    result = zmr("docs", cwd=root)
    assert result.returncode == 0, result.stderr
    text = (root / "README.md").read_text()
    assert "K\\](https://evil.example) \\[x" in text  # shown as written, escaped
    assert re.search(r"(?<!\\)\]\(https://evil", text) is None
    assert "<img" not in text.replace("```a``b\\|<img", "") and "<b>" not in text
    assert "```a``b\\|<img src=x onerror=alert(1)>```" in text
    for line in text.splitlines():
        if line.startswith("| `kimi` "):
            assert _cell_separators(line) == 10  # 9 cells: no value left its cell


def test_docs_refuses_a_readme_that_is_a_symbolic_link(tmp_path):
    root = _case_project(tmp_path, "family: MoE\nstatus: s\n")
    outside = tmp_path / "outside.md"
    shutil.move(root / "README.md", outside)
    os.symlink(outside, root / "README.md")
    before = outside.read_text()
    result = zmr("docs", cwd=root)
    assert result.returncode == 2
    assert "README.md: is a symbolic link" in result.stderr
    assert outside.read_text() == before and (root / "README.md").is_symlink()


_MARKDOWN = st.lists(st.sampled_from(list("ab |`*_[]()<>\\!:/#\n") + ["javascript:", "](", "<img ", "``"]), max_size=20).map("".join)


@settings(max_examples=300, deadline=None)
@given(_MARKDOWN, _MARKDOWN)
@example("]]((", "")  # found by CI: escaped, but a one-off replace of "\\](" read it as a link
def test_plain_text_and_code_spans_keep_the_table_shape(title, code):
    rendered = table(["A", "B"], [[plain(title), _code(code)]])
    body = rendered.splitlines()
    assert len(body) == 3  # no value adds a line
    assert _cell_separators(body[2]) == 3  # nor a cell
    unescaped = re.sub(r"\\.", "", plain(title))  # what Markdown reads as markup: each backslash escape taken out whole
    assert "<" not in unescaped  # no tag can open
    assert "](" not in unescaped  # no link can close and reopen (']]((' gives '\\]\\]((', safe: a one-off replace misread it)
    fence = re.match(r"`+", _code(code))
    assert fence is not None and "`" * len(fence.group(0)) not in _code(code)[len(fence.group(0)) : -len(fence.group(0))]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_safe_urls_cannot_end_a_link_or_leave_a_cell(url):
    encoded = safe_url("https://example.com/" + url)
    assert not set(encoded) & set(' ()<>|`"\\[]\n')
    assert cell(f"[x]({encoded})") == f"[x]({encoded})"


# -- series -----------------------------------------------------------------------------


def test_a_byte_order_mark_in_series_is_named(tmp_path):
    project = make_project(tmp_path / "p")
    project.write("manifests/alpha.yaml", "model: alpha\ncomponents:\n" + _component("rollout"))
    project.write("patches/alpha/rollout/0001-a.patch", "")
    (project.root / "patches/alpha/rollout/series").write_bytes(b"\xef\xbb\xbf0001-a.patch\n")
    rc, err = _validate(project)
    assert rc == 2
    assert "patches/alpha/rollout/series:1: starts with a UTF-8 byte order mark (U+FEFF); save the file as UTF-8 without a byte order mark" in err
    assert "\ufeff" not in err
