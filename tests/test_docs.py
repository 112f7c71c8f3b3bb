"""`zmr docs`: README sections from manifests, cases, branches and evidence; case.yaml problems as docs reports them.

The golden project (tests/data/docs/project) has a model with a manifest and
a case (alpha), a model with a manifest and no case (beta) and a case without
a manifest that names its branches (gamma). The README depends on no local
state: the same text before and after `zmr build`. Pins in the expected
README are placeholders (@PIN@, @PIN_12@, ...) filled in from the fixture's
upstream, so the golden file checks layout and links without depending on
how the fixture's git happens to hash.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import Project, git, make_patch, make_project, make_upstream, zmr

DATA = Path(__file__).parent / "data" / "docs"
REPO_ROOT = Path(__file__).resolve().parents[1]


def _golden_project(tmp_path: Path) -> tuple[Project, dict[str, str]]:
    upstream = make_upstream(tmp_path / "upstream")
    project = make_project(tmp_path / "project")
    shutil.copytree(DATA / "project", project.root, dirs_exist_ok=True)
    bundle = project.root / "upstreams" / "toy.bundle"
    bundle.parent.mkdir()
    git("bundle", "create", "-q", str(bundle), "main", cwd=upstream.path)
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    p1 = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split size")
    p2 = make_patch(upstream, pin, {"docs/guide.md": "guide, batch-invariant\n"}, "Document the batch-invariant path")
    project.series("alpha", "rollout", [("0001-split.patch", p1)])
    project.series("alpha", "trainer", [("0001-guide.patch", p2)])
    project.manifest(
        "alpha",
        f"""
        model: alpha
        title: Alpha (manifest title, overridden by the case)
        components:
          rollout:
            upstream: upstreams/toy.bundle
            commit: {pin}
          trainer:
            upstream: upstreams/toy.bundle
            commit: {pin}
            release: snapshot
        """,
    )
    project.manifest(
        "beta",
        f"""
        model: beta
        title: Beta
        components:
          rollout:
            upstream: https://github.com/example/toy-engine.git
            commit: {upstream.commits[2]}
            branch: engine/beta
        """,
    )
    project.commit_all("fixture")
    return project, {"PIN": pin, "BETA_PIN": upstream.commits[2]}


def _expected(ids: dict[str, str]) -> str:
    text = (DATA / "expected-README.md").read_text()
    for name, oid in ids.items():
        text = text.replace(f"@{name}_12@", oid[:12]).replace(f"@{name}@", oid)
    assert "@" not in text.replace("@example", ""), "unfilled placeholder in expected-README.md"
    return text


def test_docs_golden_then_check(tmp_path):
    project, ids = _golden_project(tmp_path)
    readme = project.root / "README.md"
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "README.md: updated support-matrix, key-features, hardware, code-branches, evidence, notes\n"
    # The unreadable evidence file is left out, with a warning.
    assert "cases/alpha/evidence/smoke-truncated.json: not readable as JSON (JSONDecodeError); left out of the evidence table" in result.stderr
    assert readme.read_text() == _expected(ids)
    # Deterministic: a second run changes nothing, and --check agrees.
    again = zmr("docs", cwd=project.root)
    assert again.returncode == 0 and again.stdout == "README.md is up to date\n"
    check = zmr("docs", "--check", cwd=project.root)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout == "README.md is up to date\n"
    # Local state is no input: building the branches, then changing a series, leaves the README as it is.
    assert zmr("build", "alpha", cwd=project.root).returncode == 0
    patch = project.root / "patches/alpha/rollout/0001-split.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Use a fixed split size", b"Use a fixed split size (v2)"))
    after = zmr("docs", "--check", cwd=project.root)
    assert after.returncode == 0 and after.stdout == "README.md is up to date\n", after.stdout + after.stderr
    assert "not built" not in after.stderr


def test_docs_check_on_a_stale_readme_shows_the_diff_and_writes_nothing(tmp_path):
    project, _ = _golden_project(tmp_path)
    assert zmr("docs", cwd=project.root).returncode == 0
    case = project.root / "cases/gamma/case.yaml"
    case.write_text(case.read_text().replace("status: in progress", "status: zero mismatch on H200"))
    before = (project.root / "README.md").read_bytes()
    result = zmr("docs", "--check", cwd=project.root)
    assert result.returncode == 1
    assert "--- a/README.md\n+++ b/README.md\n" in result.stdout
    assert "-| gamma | dense decoder-only | in progress | — | — | — | — |\n" in result.stdout
    assert "+| gamma | dense decoder-only | zero mismatch on H200 | — | — | — | — |\n" in result.stdout
    assert result.stderr.splitlines()[-2:] == [
        "zmr: error: README.md is out of date: section support-matrix would change",
        "  run `zmr docs` and commit the result",
    ]
    assert (project.root / "README.md").read_bytes() == before
    json_out = zmr("docs", "--check", "--json", cwd=project.root)
    assert json_out.returncode == 1
    assert '"up_to_date": false' in json_out.stdout and '"changed": [\n    "support-matrix"\n  ]' in json_out.stdout


def test_docs_without_release_url_or_evidence_or_git(tmp_path):
    """No zmr.yaml, no evidence, no cases, no git repository: plain names, no links."""
    project = Project(tmp_path / "plain")
    (project.root / "manifests").mkdir(parents=True)
    project.manifest(
        "solo",
        """
        model: solo
        components:
          rollout:
            upstream: https://example.org/solo.git
            commit: 0123456789abcdef0123456789abcdef01234567
        """,
    )
    readme = "# Solo\n\n" + "".join(
        f"<!-- zmr:begin {n} -->\n<!-- zmr:end {n} -->\n\n" for n in ("support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes")
    )
    project.write("README.md", readme)
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 0, result.stderr
    text = (project.root / "README.md").read_text()
    assert "| solo | — | no case yet (`cases/solo/case.yaml`) | — | — | — | — |" in text
    assert "| solo | `rollout` | `rollout/solo` | two-commit | `https://example.org/solo.git` at `0123456789ab` |" in text
    assert "_No key features recorded yet (`features:` in `cases/<model>/case.yaml`)._" in text
    assert "_No smoke-test evidence recorded yet (`zmr smoke --record`)._" in text
    assert "_No notes._" in text


def test_marker_problems_are_reported_together(tmp_path):
    project = make_project(tmp_path / "project")
    project.write(
        "README.md",
        textwrap.dedent(
            """\
            # Title
            <!-- zmr:begin support-matrix -->
            <!-- zmr:begin key-features -->
            <!-- zmr:end key-features -->
            <!-- zmr:begin hardwares -->
            <!-- zmr:end hardware -->
            <!-- zmr:stop notes -->
            <!-- zmr:begin code-branches -->
            <!-- zmr:end evidence -->
            """
        ),
    )
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "zmr: error: 6 problems in README.md",
        "  README.md: section 'notes' is missing; add the lines <!-- zmr:begin notes --> and <!-- zmr:end notes --> where it should go",
        "  README.md:2: section 'support-matrix' is not closed before section 'key-features' begins (line 3); "
        + "add <!-- zmr:end support-matrix --> before line 3",
        "  README.md:5: unknown section 'hardwares'; did you mean 'hardware'?",
        "  README.md:6: <!-- zmr:end hardware --> without a begin; add <!-- zmr:begin hardware --> before it, or remove it",
        "  README.md:7: malformed marker '<!-- zmr:stop notes -->'; write <!-- zmr:begin NAME --> or <!-- zmr:end NAME --> on a line of its own",
        "  README.md:9: <!-- zmr:end evidence --> closes section 'code-branches' (begun at line 8); write <!-- zmr:end code-branches -->",
    ], result.stderr


def test_duplicate_and_unmatched_markers(tmp_path):
    project = make_project(tmp_path / "project")
    sections = ("support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes")
    body = "".join(f"<!-- zmr:begin {n} -->\n<!-- zmr:end {n} -->\n" for n in sections)
    project.write("README.md", body + "<!-- zmr:end notes -->\n<!-- zmr:begin notes -->\n<!-- zmr:end notes -->\n")
    result = zmr("docs", "--check", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "zmr: error: 2 problems in README.md",
        "  README.md:13: <!-- zmr:end notes --> without a begin; add <!-- zmr:begin notes --> before it, or remove it",
        "  README.md:14: section 'notes' appears twice (first at line 11); keep one of them",
    ], result.stderr


def test_docs_without_readme(tmp_path):
    project = make_project(tmp_path / "project")
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.startswith("zmr: error: README.md: no such file\n")


# -- case.yaml problems through zmr docs (the library's checks: test_cases.py) ---------------


def test_case_errors_exit_2_naming_every_file(tmp_path):
    project = make_project(tmp_path / "project")
    for name in ("unknown-key", "link-targets"):
        shutil.copytree(DATA / "bad-cases" / name, project.root / "cases" / name)
    (project.root / "cases/demo").mkdir()
    (project.root / "cases/demo/README.md").write_text("# demo\n")
    shutil.copy(DATA / "project" / "README.md", project.root / "README.md")
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "zmr: error: 8 problems in cases/link-targets/case.yaml, cases/unknown-key/case.yaml"
    expected = []
    for name in ("link-targets", "unknown-key"):
        expected += ["  " + line for line in (DATA / "bad-cases" / name / "expected.txt").read_text().splitlines()]
    assert lines[1:] == expected


def _fresh_clone(tmp_path: Path) -> Path:
    """This repository as committed plus the working tree's changes, cloned anew: no branch built, an empty cache."""
    copy = tmp_path / "repo"
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO_ROOT)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    git("init", "-q", "-b", "main", cwd=copy)
    git("add", "-A", cwd=copy)
    git("commit", "-q", "-m", "copy", cwd=copy)
    git("clone", "-q", str(copy), str(tmp_path / "clone"), cwd=tmp_path)
    return tmp_path / "clone"


def test_repository_readme_is_current_on_a_fresh_clone(tmp_path):
    """What CI does on a pull request: `zmr docs --check` on a clone with nothing built or fetched."""
    clone = _fresh_clone(tmp_path)
    assert git("for-each-ref", "--format=%(refname)", "refs/heads/", cwd=clone).split() == ["refs/heads/main"]
    result = zmr("docs", "--check", cwd=clone)
    assert result.returncode == 0, "README.md is stale; run `zmr docs`\n" + result.stdout + result.stderr
    assert result.stderr == ""
    # A case value changes: the README is stale, and --check says which section.
    case = clone / "cases/kimi-k3.1/case.yaml"
    case.write_text(case.read_text().replace("figure: 17% longer RL rollout phase", "figure: 18% longer RL rollout phase"))
    stale = zmr("docs", "--check", cwd=clone)
    assert stale.returncode == 1
    assert "+| Kimi-K3.1 |" in stale.stdout and "18% longer RL rollout phase[^overhead-kimi-k3-1]" in stale.stdout
    assert "README.md is out of date: section support-matrix would change" in stale.stderr


# -- the four models of the zero-mismatch-rl front page ------------------------------------
# seed-facts.json holds what the captured front page says of them (extracted when these tests were
# written; the capture itself is not in this repository): per model the numbers of its table rows,
# footnote and hardware notes, its code branches, and the rows of the key-features, hardware and
# code-branch tables as the capture flattened them (cells joined by spaces).

SEED = json.loads((DATA / "seed-facts.json").read_text(encoding="utf-8"))
SEED_MODELS = list(SEED["models"])


def _repository_inputs():
    from zmr.ops.docs import gather
    from zmr.model.project import Project as ZmrProject

    return gather(ZmrProject.find(REPO_ROOT))


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("model", SEED_MODELS)
def test_every_number_of_the_front_page_is_in_the_case_data(model):
    from zmr.ops.docs import render

    case = _flat((REPO_ROOT / "cases" / model / "case.yaml").read_text(encoding="utf-8"))
    facts = SEED["models"][model]
    assert [n for n in facts["numbers"] if n not in case] == []
    assert [b for b in facts["branches"] if f" {b}" not in case] == []
    # ... and, generated, on the README.
    readme = _flat("\n".join(render(_repository_inputs()).values()))
    assert [n for n in facts["numbers"] if n not in readme] == []
    assert [b for b in facts["branches"] if f"`{b}`" not in readme] == []


def test_front_page_tables_from_the_case_data():
    """The key-features, hardware and code-branch rows of the front page, cell for cell, from the cases."""
    inputs = _repository_inputs()
    cases = {c.model: c for c in inputs.cases}
    seed = [cases[m] for m in SEED_MODELS]
    assert [c.model for c in inputs.ordered_cases()][:4] == SEED_MODELS
    marks = {"supported": "✅ ", "experimental": "🧪 ", None: ""}
    for row in SEED["features"]:
        dimension = next(f.name for f in seed[0].features if row.startswith(f.name + " "))
        cells = [next(f for f in c.features if f.name == dimension) for c in seed]
        assert " ".join([dimension, *[marks[f.status] + f.text for f in cells]]) == row
    shown = {"validated": "✅ Validated", "not verified": "—"}
    for row in SEED["hardware"]:
        name = next(h.name for h in seed[0].hardware if row.startswith(h.name + " "))
        assert " ".join([name, *[shown[next(h for h in c.hardware if h.name == name).status] for c in seed]]) == row
    for case, row in zip(seed, SEED["code_branches"]):
        columns = {b.framework: b.name + (" (changes)" if b.layout == "two-commit" else "") for b in case.branches}
        other = [v for k, v in columns.items() if k not in ("vLLM", "Megatron-LM (mLite)", "verl")]
        cells = [columns.get("vLLM", "—"), columns.get("Megatron-LM (mLite)", "—"), columns.get("verl", "—"), *(other or ["—"])]
        assert " ".join([case.short_title or case.title, *cells]) == row
    for case, row in zip(seed, SEED["support_matrix"]):
        assert row.startswith(f"{case.family} {case.title} {case.status} {case.trainer} ") and row.endswith(f" {case.overhead.figure}")
        assert case.rollout == "vLLM"


def test_front_page_sections_as_rendered():
    """A few rendered lines, literally: marks, links, the notes under the tables."""
    from zmr.ops.docs import render

    sections = render(_repository_inputs())
    url = "https://github.com/Inferact/zero-mismatch-rl"
    assert (
        "| Training context parallel | ✅ CP4 | ✅ CP2, CP16 | ✅ CP2 | 🧪 CP2 (experimental: bitwise vs CP1 in microbenchmarks, no RL run yet) |"
        in sections["key-features"]
    )
    assert "- **DeepSeek-V4-Flash**: Data parallel > 1 needs a DeepEP / NIXL all-to-all backend" in sections["key-features"]
    assert "| NVIDIA GB300 | not verified | not verified | not verified | ✅ validated |" in sections["hardware"]
    assert (
        "- **NVIDIA GB200**: _DeepSeek-V4-Flash_ 100 RL steps on 32 GPUs; _DeepSeek-V4.1-Flash_ every full-model run on 64 GPUs; "
        + "_Nemotron_ agentic RL on 8 nodes × 4 GPUs"
        in sections["hardware"]
    )
    assert (
        f"| Nemotron | uni-agent | [`uni-agent/nemotron`]({url}/tree/uni-agent/nemotron) ([changes]({url}/commit/uni-agent/nemotron)) "
        + "| two-commit | no manifest yet |"
        in sections["code-branches"]
    )
    assert f"| Kimi-K3.1 | vLLM | [`vllm/kimi-k3.1`]({url}/tree/vllm/kimi-k3.1) | snapshot | no manifest yet |" in sections["code-branches"]
    assert (
        f"| Demo | `rollout` | [`rollout/demo`]({url}/tree/rollout/demo) ([changes]({url}/commit/rollout/demo)) "
        + "| two-commit | `upstreams/toy-rollout.bundle` at `"
        in sections["code-branches"]
    )
    assert "[verl#8505](https://github.com/volcengine/verl/pull/8505)" in sections["support-matrix"]
    assert "[^overhead-kimi-k3-1]: " in sections["support-matrix"] and "412 s (BI on) vs 353 s (BI off)" in sections["support-matrix"]


def test_case_branches_next_to_a_manifest_are_refused(tmp_path):
    project = make_project(tmp_path / "project")
    project.manifest("alpha", "model: alpha\ncomponents:\n  rollout:\n    upstream: https://example.org/a.git\n    commit: " + "a" * 40 + "\n")
    project.write("cases/alpha/case.yaml", "family: f\nstatus: s\nbranches:\n  vLLM: vllm/alpha\n")
    shutil.copy(DATA / "project" / "README.md", project.root / "README.md")
    result = zmr("docs", cwd=project.root)
    assert result.returncode == 2
    assert result.stderr.splitlines()[1:] == [
        "  cases/alpha/case.yaml:3: branches: model 'alpha' has a manifest (manifests/alpha.yaml); its branches come from there; "
        + "remove `branches:` (it is for models whose manifest is not in this repository)"
    ]
