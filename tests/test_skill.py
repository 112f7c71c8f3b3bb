"""The skill (skill/): its workflow walked on the demo, its decision table, guides, templates, commands and figures.

- the drill: from the demo's upstream pins to bitwise zero, in fp32 and bf16, every decision read from
  `zmr locate --json` through skill/references/decisions.yaml (skill/scripts/decide.py), applying the
  patches the chosen guide names as its worked example, until nothing differs;
- the missing-fix test: each fix of the two demo series left out, the workflow lands on that fix's guide;
- every guide has the contract's sections, and its "Worked example" names the table's patch files;
- SKILL.md's frontmatter within the Agent Skills limits; every command block in skill/ runs on a fresh
  clone or carries a `<!-- needs: ... -->` marker; every figure in skill/ is found in the file it cites.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import demo_walk
from conftest import REPO_ROOT

SKILL = REPO_ROOT / "skill"
GUIDES = SKILL / "references" / "mechanisms"
SECTIONS = ["Symptom", "Why it breaks", "Fix pattern", "Worked example", "How to verify", "Cost", "Upstream status"]
DTYPES = ("fp32", "bf16")


decide = demo_walk.skill_decide()
TABLE = decide.load_table()


def _series_index(path: str) -> tuple[int, int]:
    """Where a repository-relative demo patch path stands: (component, place in its series)."""
    comp = Path(path).parent.name
    names = [p.name for p in demo_walk.series(comp)]
    return demo_walk.COMPONENTS.index(comp), names.index(Path(path).name)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict[str, Path]:
    return demo_walk.upstream_trees(tmp_path_factory.mktemp("skill-upstream"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory, upstream):
    """Record-and-locate on trees of the demo (upstream pins plus patches); trees built, and each pair of trees
    recorded and located, once per patch set and dtype (the walks of the tests meet at the same states)."""
    torch = pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("skill-demo")
    record = demo_walk.demo_locate().record
    threads = torch.get_num_threads()
    trees: dict[tuple[str, tuple[str, ...]], Path] = {}
    located: dict[tuple, tuple[int, dict]] = {}

    def run(patches: dict[str, list[Path]], dtype: str) -> tuple[int, dict]:
        state = (dtype, *(tuple(p.name for p in patches[comp]) for comp in demo_walk.COMPONENTS))
        if state in located:
            return located[state]
        pair = []
        for comp in demo_walk.COMPONENTS:
            key = (comp, tuple(p.name for p in patches[comp]))
            if key not in trees:
                trees[key] = demo_walk.tree_with(upstream[comp], patches[comp], base / f"{comp}-{len(trees)}")
            pair.append(trees[key])
        out = base / f"dumps-{len(located)}"
        record(*pair, out, dtype=dtype)
        located[state] = demo_walk.locate_json(out)
        return located[state]

    try:
        yield run
    finally:
        torch.set_num_threads(threads)


def _cpu_release() -> dict[str, list[Path]]:
    """Each side's series as the single-process CPU run has it: up to the first patch that shows on a GPU or in several processes."""
    release = {}
    for comp in demo_walk.COMPONENTS:
        kept = []
        for path in demo_walk.series(comp):
            if TABLE["demo_series"][comp][path.name]["shows"] not in ("cpu", "none"):
                break
            kept.append(path)
        release[comp] = kept
    return release


# ---------------------------------------------------------------------------
# the drill


def walk(demo, start: dict[str, list[Path]], dtype: str) -> tuple[list[dict], dict[str, list[Path]]]:
    """Steps 2-7 on the demo from the trees of *start*: record, locate, decide by the table, apply the chosen guide's worked
    example (its `needs`, then its `patches`, each side in series order), again, until nothing differs.
    Returns the decisions taken and the patches applied in the end."""
    applied = {comp: list(start[comp]) for comp in demo_walk.COMPONENTS}
    decisions: list[dict] = []
    for _ in range(len(TABLE["guides"]) + 1):
        code, report = demo(applied, dtype)
        decision = decide.decide(TABLE, report)
        if decisions:
            # the operation the last guide was chosen for: its worked example fixed it (no row of it differs any more)
            ops = {op["name"]: op for op in report["ops"]}
            assert ops[decisions[-1]["op"]]["rows_differ"] == 0, (decisions, ops[decisions[-1]["op"]])
        if decision["next"] == "none":
            assert code == 0 and report["verdict"] == "bitwise_equal"
            return decisions, applied
        assert code == 1, report
        # every located operation of the demo maps to a guide with a worked example to apply
        assert decision["next"] == "guide", decision
        example = decision["worked_example"]
        assert example and example.get("patches"), f"guide {decision['guide']} has no worked example to apply"
        new = [p for p in [*example.get("needs", []), *example["patches"]] if REPO_ROOT / p not in applied[Path(p).parent.name]]
        assert new, f"{decision['op']} still differs after guide {decision['guide']}'s worked example was applied"
        for path in new:
            applied[Path(path).parent.name].append(REPO_ROOT / path)
        for comp in demo_walk.COMPONENTS:  # each side's patches in series order (what `zmr export` writes)
            applied[comp].sort(key=lambda p: _series_index(str(p)))
        decisions.append(decision)
    pytest.fail(f"no bitwise zero after guides {[d['guide'] for d in decisions]}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_drill_from_the_pins_to_bitwise_zero_every_decision_from_zmr_locate(demo, dtype):
    """From the unpatched pins (which differ: step 3's negative control) to bitwise zero, every decision by the table."""
    decisions, applied = walk(demo, {comp: [] for comp in demo_walk.COMPONENTS}, dtype)
    # fp32 finds the chunked RMSNorm first, bf16 the split-K GEMM (the RMSNorm's last bit is rounded away); then attention
    assert [(d["op"], d["guide"]) for d in decisions] == [
        ("rms_norm" if dtype == "fp32" else "linear", "reductions" if dtype == "fp32" else "gemm"),
        ("attention", "attention"),
    ]
    release = _cpu_release()
    for comp in demo_walk.COMPONENTS:  # what the drill applied is the release series' own patches, in its order
        assert applied[comp] == [p for p in release[comp] if p in applied[comp]], comp


# ---------------------------------------------------------------------------
# the missing-fix test


def _demo_patches() -> list[tuple[str, str]]:
    return [(comp, path.name) for comp in demo_walk.COMPONENTS for path in demo_walk.series(comp)]


def test_the_table_classifies_every_patch_of_both_demo_series():
    for comp in demo_walk.COMPONENTS:
        assert sorted(TABLE["demo_series"][comp]) == sorted(p.name for p in demo_walk.series(comp)), comp
    named = {
        Path(p).name for g in TABLE["guides"].values() if g["worked_example"] for key in ("patches", "needs", "gpu") for p in g["worked_example"].get(key, [])
    }
    for comp, name in _demo_patches():
        entry = TABLE["demo_series"][comp][name]
        assert entry["shows"] in ("cpu", "gpu", "parallel", "none"), (comp, name)
        assert set(entry["guides"]) <= set(TABLE["guides"]), (comp, name)
        if entry["guides"]:  # a fix: some guide's worked example names it
            assert name in named, (comp, name)
        else:
            assert entry["shows"] == "none", (comp, name)


CPU_FIXES = [(comp, name) for comp, name in _demo_patches() if TABLE["demo_series"][comp][name]["shows"] == "cpu"]


@pytest.mark.parametrize("comp,name", CPU_FIXES, ids=[f"{c}-{n[:4]}" for c, n in CPU_FIXES])
def test_a_missing_fix_lands_on_its_guide(demo, comp, name):
    """The CPU release series with one fix left out of one side (and what that side stacks on it: a stacked series cannot
    lose one patch and still apply), the other side whole. The workflow finds a mismatch, decides by the table, and
    walks back to zero with every removed patch restored; on the way it lands on the fix's own guide (in bf16 alone
    the GEMM and RMSNorm of trainer 0002 happen to agree at this size: there it lands on the attention of the patch
    stacked on it first, whose worked example brings 0002 back as a need; fp32 lands on it)."""
    entry = TABLE["demo_series"][comp][name]
    release = _cpu_release()
    cut = [p.name for p in release[comp]].index(name)
    removed = {p.name for p in release[comp][cut:]}
    guides_of_removed = {g for n in removed for g in TABLE["demo_series"][comp][n]["guides"]}
    landed = set()
    for dtype in DTYPES:
        decisions, applied = walk(demo, {**release, comp: release[comp][:cut]}, dtype)
        assert decisions, f"{dtype}: nothing differs without {comp}/{name}"
        assert decisions[0]["guide"] in guides_of_removed, (dtype, decisions[0])
        assert applied == release, dtype  # the walk restored exactly what was removed
        landed |= {d["guide"] for d in decisions}
    assert landed & set(entry["guides"]), (landed, entry["guides"])


# A layout fix missing on one rank (the parallel fixes, rollout 0010-0011 and trainer 0008-0009, cannot be left out of a
# single-process walk) lands on collectives: tests/e2e/test_demo.py::test_parallel_locate_names_the_broken_rank_and_operation
# decides on the report of its run (scripts/demo_parallel.py --break-rank 1 on the release trees), one run for both.


# The MoE combine missing (each side's own combine in place of the fixed one, demo-moe's release trees) lands on moe:
# tests/e2e/test_demo_moe.py::test_locate_names_the_combine_when_its_fixed_order_is_off decides on the report of its
# scripts/demo_locate.py --moe run, one run for both.


def test_the_decision_table_routes_the_names_zmr_locate_gives():
    """The operations the demo's recorders name (single process and parallel), and module names of vLLM and Megatron-LM."""
    cases = {
        "rms_norm": "reductions",
        "linear#2": "gemm",
        "silu": "reductions",
        "attention": "attention",
        "token_logprob": "logsoftmax-sampling",
        "row_partial": "collectives",
        "row_linear": "collectives",
        "column_linear": "collectives",
        "model.layers.0.self_attn.attn": "attention",
        "model.layers.3.input_layernorm": "reductions",
        "model.layers.0.self_attn.o_proj": "gemm",
        "decoder.layers.1.self_attention.core_attention": "attention",
        "decoder.layers.0.mlp.linear_fc1": "gemm",
        "decoder.final_layernorm": "reductions",
        "model.layers.2.mlp.experts": "moe",
        "decoder.layers.0.mlp.router": "moe",
        "model.layers.0.mlp.gate": "moe",
        "model.layers.0.mlp.gate_up_proj": "gemm",
        "model.layers.1.mlp.experts_nvfp4": "quantized-experts",
        "model.layers.0.self_attn.qkv_proj.lora_b": "lora",
        "model.layers.4.mixer": "linear-attention",
        "model.layers.0.self_attn.indexer": "sparse-attention",
        "route": "moe",
        "expert_outputs": "moe",
        "combine": "moe",
        "lm_head": "gemm",
        "logits_processor": "logsoftmax-sampling",
    }
    for op, guide in cases.items():
        assert decide.guide_for(TABLE, op) == guide, op
    assert decide.guide_for(TABLE, "decoder.layers.0.mlp") is None  # a whole block: record finer (the fallback)
    assert decide.guide_for(TABLE, "linear", "layout") == "collectives" and decide.guide_for(TABLE, "rms_norm", "graph-vs-eager") == "cuda-graphs"
    assert {r["guide"] for r in TABLE["rules"]} == set(TABLE["guides"]), "every guide is reachable from some rule"
    for verdict in ("differ", "unknown"):
        report = {"verdict": "diverged", "first": {"op": "linear", "inputs_verdict": verdict}}
        assert decide.decide(TABLE, report)["next"] == TABLE["verdicts"][verdict]["next"] != "guide"


def test_decide_script_reads_a_locate_report(tmp_path):
    report = tmp_path / "locate.json"
    report.write_text('{"verdict": "diverged", "first": {"op": "attention", "inputs_verdict": "equal"}}')
    out = subprocess.run([sys.executable, str(SKILL / "scripts" / "decide.py"), str(report)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "guide: skill/references/mechanisms/attention.md" in out.stdout
    assert "  fix    patches/demo/rollout/0004-attention-decode-replays-the-prefill-math-over-the-s.patch" in out.stdout
    report.write_text('{"not": "a report"}')
    bad = subprocess.run([sys.executable, str(SKILL / "scripts" / "decide.py"), str(report)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not the output of `zmr locate --json`" in bad.stderr


# ---------------------------------------------------------------------------
# the guides, the table in SKILL.md, the templates


def _sections(text: str) -> dict[str, str]:
    """H2 heading -> its text, in order (headings inside fenced blocks are text)."""
    out: dict[str, str] = {}
    current = None
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = line[3:].strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def test_every_guide_has_the_sections_in_order_and_names_its_worked_example():
    assert (SKILL / "references" / "process.md").is_file()
    files = sorted(p.stem for p in GUIDES.glob("*.md"))
    assert files == sorted(TABLE["guides"]), "one guide per id of decisions.yaml, no other"
    for guide, entry in TABLE["guides"].items():
        text = (GUIDES / f"{guide}.md").read_text(encoding="utf-8")
        sections = _sections(text)
        assert list(sections) == SECTIONS, (guide, list(sections))
        example = sections["Worked example"]
        worked = entry["worked_example"]
        if worked is None:
            assert "none here yet" in example.lower(), guide
            continue
        for path in [*worked.get("patches", []), *worked.get("files", [])]:
            assert Path(path).name in example, f"{guide}.md, Worked example: does not name {path}"


def test_skill_md_shows_the_decision_table_as_it_is():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- decisions:begin [^\n]*-->\n(.*?)<!-- decisions:end -->", text, re.S)
    assert shown, "SKILL.md: the decisions markers"
    assert shown.group(1) == decide.markdown(TABLE), "SKILL.md is stale: paste `python skill/scripts/decide.py --markdown` between the markers"


def test_the_case_templates_of_zmr_new_are_the_skills():
    from zmr.ops.new import CASE_TEMPLATES

    shipped = sorted(p.name for p in (REPO_ROOT / "zmr" / "templates").glob("*.tmpl"))
    assert set(CASE_TEMPLATES) <= set(shipped)
    skill_files = sorted(p.relative_to(SKILL / "templates").as_posix() for p in (SKILL / "templates").rglob("*") if p.is_file())
    assert skill_files == sorted(CASE_TEMPLATES.values())
    for name, rel in CASE_TEMPLATES.items():
        assert (REPO_ROOT / "zmr" / "templates" / name).read_bytes() == (SKILL / "templates" / rel).read_bytes(), (
            f"cp skill/templates/{rel} zmr/templates/{name}"
        )


# ---------------------------------------------------------------------------
# the format: frontmatter limits, the reference validator


ALLOWED_FIELDS = {"name", "description", "license", "allowed-tools", "metadata", "compatibility"}


def _frontmatter(text: str) -> tuple[dict, str]:
    import yaml

    assert text.startswith("---\n"), "SKILL.md starts with its YAML frontmatter"
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def test_skill_md_frontmatter_within_the_formats_limits():
    meta, body = _frontmatter((SKILL / "SKILL.md").read_text(encoding="utf-8"))
    assert set(meta) <= ALLOWED_FIELDS and {"name", "description"} <= set(meta), sorted(meta)
    name = meta["name"]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and len(name) <= 64
    assert name == SKILL.name, "the name is the folder's"
    assert 0 < len(meta["description"].strip()) <= 1024, len(meta["description"])
    assert len(meta.get("compatibility", "")) <= 500
    assert len(body.splitlines()) < 500, "the format recommends a body under 500 lines; details go to references/"


SKILLS_REF = REPO_ROOT / "scripts" / "npm" / "node_modules" / ".bin" / "skills-ref"


def test_the_reference_validator_accepts_the_skill_and_refuses_a_broken_one(tmp_path):
    if not SKILLS_REF.exists():
        pytest.fail("skills-ref is not installed: run scripts/setup-test-tools (npm ci in scripts/npm)")
    ok = subprocess.run([str(SKILLS_REF), "validate", "skill"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "skill"
    broken.mkdir()
    (broken / "SKILL.md").write_text((SKILL / "SKILL.md").read_text().replace("name: skill", "name: Skill_Broken", 1))
    bad = subprocess.run([str(SKILLS_REF), "validate", str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Skill_Broken" in bad.stdout + bad.stderr


# ---------------------------------------------------------------------------
# every command block runs; every figure has a source


COMMAND_LANGS = {"sh", "bash", "shell", "console"}
NEEDS = {"gpu", "vllm", "megatron", "verl"}  # the only way out: what CI lacks
INSTALL = "python3 -m venv .venv && .venv/bin/pip install"  # the set-up line: the clone's .venv is this test's environment
FENCE = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```", re.M | re.S)  # a fence may be indented (in a list item)


def _skill_docs() -> list[Path]:
    """skill/'s Markdown in the order its commands run: SKILL.md, README.md, then the references (templates are rendered by zmr new)."""
    rest = sorted(p for p in SKILL.rglob("*.md") if "templates" not in p.relative_to(SKILL).parts and p.name not in ("SKILL.md", "README.md"))
    return [SKILL / "SKILL.md", SKILL / "README.md", *rest]


def _blocks(path: Path) -> list[tuple[str, str | None]]:
    """The command blocks of *path*: (script, the need it is marked with or None). Refuses unmarked, unlabelled commands."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent, lang = len(m.group(1)), m.group(2).strip()
        body = "".join(line[indent:] if line[:indent].isspace() else line for line in m.group(3).splitlines(keepends=True))
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = re.fullmatch(r"<!-- needs: (\S+) -->", before)
        rel = path.relative_to(REPO_ROOT)
        if not lang:
            first = body.lstrip().split("\n", 1)[0]
            assert not re.match(r"(\$ |zmr |\.venv/bin/|python3? |git |scripts/)", first), f"{rel}: a command block without a language; label it sh"
        if lang not in COMMAND_LANGS:
            assert marker is None, f"{rel}: a needs marker before a block that is no command block"
            continue
        if marker:
            assert marker.group(1) in NEEDS, f"{rel}: unknown marker needs: {marker.group(1)} (only {', '.join(sorted(NEEDS))})"
        found.append((body, marker.group(1) if marker else None))
    stray = re.findall(r"^<!--\s*needs:[^>]*-->\s*$", text, re.M)
    assert len(stray) == sum(1 for _, need in found if need), f"{path.relative_to(REPO_ROOT)}: a needs marker that marks no command block"
    return found


def _fresh_clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A clone of this repository with this skill (also before it is committed) and the test's environment as its .venv;
    the environment its blocks run in (no ZMR_REPO, no TOY_* knob, a git identity)."""
    from conftest import git

    clone = tmp_path / "zmr"
    git("clone", "-q", str(REPO_ROOT), str(clone), cwd=tmp_path)
    shutil.rmtree(clone / "skill", ignore_errors=True)
    shutil.copytree(SKILL, clone / "skill", ignore=shutil.ignore_patterns("__pycache__"))
    (clone / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO" and not k.startswith("TOY_")}
    env |= {"GIT_AUTHOR_NAME": "A User", "GIT_AUTHOR_EMAIL": "user@example.com", "GIT_COMMITTER_NAME": "A User", "GIT_COMMITTER_EMAIL": "user@example.com"}
    # The skill's set-up line installs `.[demo]`, which brings no pytest plugin; this environment has the test extra's.
    # The walk's pytest runs load none, as in the skill's environment (hypothesis's plugin imports all of hypothesis at
    # the end of every run: 1.5 s of CPU for each of the ten runs of the release trees' tests).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return clone, env


def _run_blocks(docs: list[Path], clone: Path, env: dict[str, str]) -> int:
    """Each command block of *docs* as one `bash -e` script from the clone's root, in order; returns how many ran."""
    ran = 0
    for doc in docs:
        for index, (script, need) in enumerate(_blocks(doc)):
            if need:
                continue
            script = "\n".join(line for line in script.splitlines() if not line.startswith(INSTALL))
            result = subprocess.run(["bash", "-e", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, f"{doc.relative_to(REPO_ROOT)} block {index + 1}:\n{script}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            ran += 1
    return ran


# The walk (SKILL.md, then README.md) on one clone; each reference on a fresh clone of its own: a guide is read on its own,
# so its blocks must not lean on the walk's state (and the references run in parallel under xdist).
SKILL_DOCS = _skill_docs()
REFERENCES = SKILL_DOCS[2:]


@pytest.mark.slow
def test_every_command_block_in_the_skill_runs_on_a_fresh_clone(tmp_path):
    """SKILL.md's walk, then README.md, each block as one `bash -e` script from the clone's root, in order (the walk makes the
    model its later blocks use). Only a `<!-- needs: gpu|vllm|megatron|verl -->` marker skips one."""
    pytest.importorskip("torch")
    assert SKILL_DOCS[:2] == [SKILL / "SKILL.md", SKILL / "README.md"]
    clone, env = _fresh_clone(tmp_path)
    assert _run_blocks(SKILL_DOCS[:2], clone, env) >= 10
    # what the walk says it does, done: the model's series hold the fixes (four a side), its case is on the front page
    for comp in demo_walk.COMPONENTS:
        series = [ln for ln in (clone / f"patches/mymodel/{comp}/series").read_text().splitlines() if ln and not ln.startswith("#")]
        assert len(series) == 4 and all((clone / f"patches/mymodel/{comp}" / name).is_file() for name in series), (comp, series)
    assert "cases/mymodel/README.md" in (clone / "README.md").read_text()
    assert (clone / ".claude/skills/skill/SKILL.md").is_file()


@pytest.mark.parametrize(
    "doc",
    # slow: five to ten seconds where a block runs the venv's zmr or Python (the guides whose CPU blocks only grep: half a second)
    [pytest.param(p, marks=[pytest.mark.slow] if ".venv/bin/" in p.read_text(encoding="utf-8") else []) for p in REFERENCES],
    ids=[p.relative_to(SKILL / "references").as_posix() for p in REFERENCES],
)
def test_every_command_block_of_a_reference_runs_on_a_fresh_clone(tmp_path, doc):
    """Each block of one file of skill/references as one `bash -e` script from the root of a fresh clone, in order.
    Only a `<!-- needs: gpu|vllm|megatron|verl -->` marker skips one."""
    pytest.importorskip("torch")
    if all(need for _, need in _blocks(doc)):
        return  # every block needs what CI lacks (the marker is checked by _blocks)
    clone, env = _fresh_clone(tmp_path)
    assert _run_blocks([doc], clone, env) >= 1


def test_what_the_skill_runs_is_installed_by_its_set_up_line():
    """The blocks run with the set-up line removed (this test's environment stands in for the clone's .venv): every
    `python -m X` they run must come with the extras that line installs (pytest ran there, the demo extra lacked it)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10, as tests/test_release.py reads pyproject.toml
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

    from packaging.requirements import Requirement

    texts = [doc.read_text(encoding="utf-8") for doc in _skill_docs()]
    lines = {m.group(0) for text in texts for m in re.finditer(r"python3 -m venv \.venv && \.venv/bin/pip install -q -e '\.\[([\w,]+)\]'", text)}
    assert lines, "no set-up line found"
    optional = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def installed(extras: set[str]) -> set[str]:
        names: set[str] = set()
        for extra in extras:
            for line in optional[extra]:
                req = Requirement(line)
                names |= installed(set(req.extras)) if req.name == "zmr" else {req.name.lower()}
        return names

    run = {m.group(1) for text in texts for m in re.finditer(r"\bpython3? -m ([\w.]+)", text)} - {"venv", "zmr"}
    assert "pytest" in run  # the check sees what it checks
    for line in lines:
        extras = set(re.search(r"\[([\w,]+)\]", line).group(1).split(","))  # type: ignore[union-attr]
        assert run - installed(extras) == set(), f"{line!r} does not install {sorted(run - installed(extras))}"


FIGURE = re.compile(
    r"(?<![\w.§/-])(?:"
    r"(?P<unit>\d[\d,]*(?:\.\d+)?)\s?(?:%|×|µs|ms|tok/s|GB/s|TB/s|TFLOP/s|GiB|GB)(?!\w)"
    r"|(?P<sci>\d+(?:\.\d+)?e[-+]?\d+)(?!\w)"
    r"|(?P<of>\d[\d,]* of \d[\d,]*)(?![\w.])"
    r"|(?P<ratio>\d+/\d+)(?![\w/])"
    r")"
)
CITE = re.compile(r"(?<![\w/])((?:cases|benchmarks)/[\w.+-]+(?:/[\w.+-]+)*\.(?:yaml|yml|md|json|log|txt))")


def _holds(name: str, text: str, figure: str) -> bool:
    """*figure* is in the source *text*: as written; a count "N of M" also as "N/M" and the other way round; in a JSON
    file, a count also as its two numbers, each a value there (e.g. "tokens_bitwise_equal": 84, "tokens": 84)."""
    if figure in text:
        return True
    count = re.fullmatch(r"([\d,]+)(?: of |/)([\d,]+)", figure)
    if not count:
        return False
    n, m = (x.replace(",", "") for x in count.groups())
    if f"{n} of {m}" in text or f"{n}/{m}" in text:
        return True
    return name.endswith(".json") and all(re.search(rf":\s*{x}\b", text) for x in (n, m))


def _figures_without_source(path: Path) -> list[str]:
    """Each figure of *path* must appear in a file it cites on its line or in its paragraph (a file of cases/ or benchmarks/)."""
    problems = []
    text = path.read_text(encoding="utf-8").replace("\u2212", "-")
    paragraphs = re.split(r"\n\s*\n", text)
    for para in paragraphs:
        for line in para.splitlines():
            figures = [next(v for v in m.groupdict().values() if v) for m in FIGURE.finditer(line)]
            if not figures:
                continue
            cited = {*CITE.findall(line), *CITE.findall(para)}
            sources = {c: (REPO_ROOT / c).read_text(encoding="utf-8").replace("\u2212", "-") for c in sorted(cited) if (REPO_ROOT / c).is_file()}
            for figure in figures:
                if not any(_holds(c, text, figure) for c, text in sources.items()):
                    problems.append(f"{path.relative_to(REPO_ROOT)}: {figure!r} in {line.strip()[:100]!r}: cite the file under cases/ that holds it")
    return problems


def test_every_figure_in_the_skill_has_a_source():
    problems = [p for doc in sorted(SKILL.rglob("*.md")) for p in _figures_without_source(doc)]
    assert problems == []


def test_the_figure_check_finds_an_uncited_or_a_wrong_figure(tmp_path):
    doc = SKILL / "references" / "_probe.md"  # inside skill/ for the relative path, removed at once
    try:
        doc.write_text(
            "Overhead 8.7% (cases/deepseek-v4-flash/case.yaml).\n\nOverhead 8.7%, no source.\n\nOverhead 9.9% (cases/deepseek-v4-flash/case.yaml).\n"
        )
        problems = _figures_without_source(doc)
    finally:
        doc.unlink()
    assert len(problems) == 2 and "'8.7'" in problems[0] and "'9.9'" in problems[1], problems
