"""The demo model: deterministic upstreams and series, a real mismatch, removed bit for bit.

(1) scripts/make_demo.py builds the upstreams from demo/ into the same commits
    and manifest on every run, the same as the files in the repository, and the
    checked-in series (patches/demo/) applies on the pins and, less what landed
    upstream, on upstream main;
(2) on the upstream trees the rollout and trainer log-probs differ; on the
    release trees (pin + series) they are bitwise identical for batch sizes
    1, 3 and 8 in fp32 and bf16, with 1 and 2 CPU threads, while the negative
    control (TOY_BATCH_INVARIANT=0) still differs;
(3) the trainer's backward pass runs (upstream kernels and batch-invariant ones).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import demo_walk
from conftest import zmr

ROOT = Path(__file__).resolve().parents[2]
MAKE_DEMO = ROOT / "scripts" / "make_demo.py"
DEMO_BITWISE = ROOT / "scripts" / "demo_bitwise.py"
COMPONENTS = ("rollout", "trainer")


def _git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0",
        HOME=str(home), LC_ALL="C", TZ="UTC",
        GIT_AUTHOR_NAME="zmr test", GIT_AUTHOR_EMAIL="test@zmr.example",
        GIT_COMMITTER_NAME="zmr test", GIT_COMMITTER_EMAIL="test@zmr.example",
        GIT_COMMITTER_DATE="2025-03-01T00:00:00+00:00",
    )
    return env


def _git(cwd: Path, *args: str, env: dict[str, str], input: str | None = None) -> str:
    proc = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def _pins(manifest: Path) -> dict[str, str]:
    """component -> pinned commit, read from manifests/demo.yaml."""
    pins, current = {}, None
    for line in manifest.read_text().splitlines():
        m = re.match(r"^  ([a-z0-9][a-z0-9-]*):\s*$", line)
        if m:
            current = m.group(1)
        m = re.match(r"^    commit:\s*([0-9a-f]{40})\s*$", line)
        if m and current:
            pins[current] = m.group(1)
    return pins


def _series(folder: Path) -> list[Path]:
    names = [ln.split()[0] for ln in (folder / "series").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    return [folder / n for n in names]


def _snapshot(root: Path, env: dict[str, str]) -> dict[str, object]:
    """What make_demo writes: bundle refs (commit ids) and manifest bytes."""
    snap: dict[str, object] = {}
    for comp in COMPONENTS:
        bundle = root / "upstreams" / f"toy-{comp}.bundle"
        snap[f"bundle:{comp}"] = _git(root, "bundle", "list-heads", str(bundle), env=env)
    snap["manifests/demo.yaml"] = (root / "manifests" / "demo.yaml").read_bytes()
    return snap


def _patch_id(repo: Path, diff: str, env: dict[str, str]) -> str:
    return _git(repo, "patch-id", "--stable", env=env, input=diff).split()[0]


def _run(cmd: list[str], timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TOY_BATCH_INVARIANT", "PYTHONPATH")}
    env.update(kw.pop("env", {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


# ---------------------------------------------------------------------------
# (1) generation is deterministic and matches the repository
# ---------------------------------------------------------------------------

def test_make_demo_is_deterministic(tmp_path):
    env = _git_env(tmp_path)
    snaps = []
    for name in ("a", "b"):
        out = tmp_path / name
        proc = _run([sys.executable, str(MAKE_DEMO), "--out", str(out), "-q"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        snaps.append(_snapshot(out, env))
    assert snaps[0] == snaps[1]
    committed = _snapshot(ROOT, env)
    assert sorted(committed) == sorted(snaps[0])
    for key in committed:
        assert committed[key] == snaps[0][key], f"{key} differs from a fresh run of scripts/make_demo.py"
    # the pins are full commit ids, not the newest commit of main
    pins = _pins(ROOT / "manifests" / "demo.yaml")
    assert set(pins) == set(COMPONENTS)
    for comp, pin in pins.items():
        heads = committed[f"bundle:{comp}"]
        assert "refs/heads/main" in heads and pin not in heads


def test_rollout_history_has_the_first_patch_upstream(tmp_path):
    """A later upstream commit lands the same change as a rollout patch (for zmr upstreamed)."""
    env = _git_env(tmp_path)
    repo = tmp_path / "rollout"
    _git(tmp_path, "clone", "-q", str(ROOT / "upstreams" / "toy-rollout.bundle"), str(repo), env=env)
    pin = _pins(ROOT / "manifests" / "demo.yaml")["rollout"]
    later = _git(repo, "rev-list", "--reverse", f"{pin}..main", env=env).split()
    assert len(later) >= 2

    def pid(text: str) -> str:
        proc = subprocess.run(["git", "patch-id", "--stable"], input=text, capture_output=True, text=True,
                              env=env, cwd=repo)
        return proc.stdout.split()[0] if proc.stdout else ""

    upstream = {pid(_git(repo, "show", sha, env=env)) for sha in later}
    patches = _series(ROOT / "patches" / "demo" / "rollout")
    landed = [p.name for p in patches if pid(p.read_text()) in upstream]
    assert landed == [patches[0].name]


def test_series_applies_on_the_pin_and_on_upstream_main(tmp_path):
    """Each series applies on its pin, and what did not land upstream applies on main (for zmr rebase)."""
    env = _git_env(tmp_path)
    pins = _pins(ROOT / "manifests" / "demo.yaml")
    for comp in COMPONENTS:
        repo = tmp_path / comp
        _git(tmp_path, "clone", "-q", str(ROOT / "upstreams" / f"toy-{comp}.bundle"), str(repo), env=env)
        later = _git(repo, "rev-list", f"{pins[comp]}..main", env=env).split()
        upstream = {_patch_id(repo, _git(repo, "show", sha, env=env), env) for sha in later}
        patches = _series(ROOT / "patches" / "demo" / comp)
        landed = {p for p in patches if _patch_id(repo, p.read_text(), env) in upstream}
        for base, todo in ((pins[comp], patches), ("main", [p for p in patches if p not in landed])):
            _git(repo, "checkout", "-q", "--detach", base, env=env)
            _git(repo, "am", "-q", "--no-3way", *map(str, todo), env=env)


def test_make_demo_check_passes_and_detects_drift(tmp_path):
    proc = _run([sys.executable, str(MAKE_DEMO), "--check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "out"
    proc = _run([sys.executable, str(MAKE_DEMO), "--out", str(out), "-q"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = out / "manifests" / "demo.yaml"
    pin = _pins(manifest)["trainer"]
    manifest.write_text(manifest.read_text().replace(pin, "0" * 40))
    proc = _run([sys.executable, str(MAKE_DEMO), "--check", "--out", str(out)])
    assert proc.returncode == 1 and "differs: manifests/demo.yaml" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------
# trees
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def demo_trees(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """{"upstream": {comp: tree}, "release": {comp: tree}} for rollout and trainer.

    upstream: the bundle cloned and checked out at the manifest's pin;
    release: the same plus the component's series applied with git am.
    """
    base = tmp_path_factory.mktemp("demo-trees")
    env = _git_env(base)
    pins = _pins(ROOT / "manifests" / "demo.yaml")
    trees: dict[str, dict[str, Path]] = {"upstream": {}, "release": {}}
    for kind in trees:
        for comp in COMPONENTS:
            tree = base / kind / comp
            _git(base, "clone", "-q", str(ROOT / "upstreams" / f"toy-{comp}.bundle"), str(tree), env=env)
            _git(tree, "checkout", "-q", "--detach", pins[comp], env=env)
            if kind == "release":
                patches = _series(ROOT / "patches" / "demo" / comp)
                _git(tree, "am", "-q", "--no-3way", *map(str, patches), env=env)
            trees[kind][comp] = tree
    return trees


def _bitwise(trees: dict[str, Path], artifacts: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = _run([sys.executable, str(DEMO_BITWISE), "--rollout", str(trees["rollout"]),
                 "--trainer", str(trees["trainer"]), "--artifacts", str(artifacts), *extra], cwd=ROOT)
    summary = json.loads((artifacts / "summary.json").read_text())
    return proc, summary


# ---------------------------------------------------------------------------
# (2) a real mismatch upstream, bitwise zero with the series
# ---------------------------------------------------------------------------

def test_upstream_trees_mismatch(demo_trees, tmp_path):
    pytest.importorskip("torch")  # the demo extra: the toy engines run on torch
    proc, summary = _bitwise(demo_trees["upstream"], tmp_path, "--expect-mismatch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["zero_mismatch_switch"] is False
    for dtype in ("fp32", "bf16"):
        res = summary["results"][dtype]["after"]
        assert res["differ"] > 0, (dtype, res)
        assert "mismatch before:" in proc.stdout
    # without --expect-mismatch the same trees fail the check
    proc2, _ = _bitwise(demo_trees["upstream"], tmp_path / "strict", "--dtypes", "fp32", "--batch-sizes", "3")
    assert proc2.returncode == 1, proc2.stdout + proc2.stderr


# Two threads: shorter sequences, to keep the test quick on a busy 2-core machine
# (OpenMP barriers stall when the other core is taken); same batch sizes and dtypes.
@pytest.mark.parametrize("threads,extra", [(1, ()), (2, ("--prompt-len", "2:20", "--new-tokens", "4:12"))],
                         ids=["1-thread", "2-threads"])
def test_release_trees_bitwise(demo_trees, tmp_path, threads, extra):
    pytest.importorskip("torch")  # the demo extra: the toy engines run on torch
    proc, summary = _bitwise(demo_trees["release"], tmp_path, "--threads", str(threads), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["ok"] is True and summary["zero_mismatch_switch"] is True
    assert summary["threads"] == threads
    for dtype in ("fp32", "bf16"):
        after = summary["results"][dtype]["after"]
        before = summary["results"][dtype]["before"]
        assert after["tokens"] >= 50 and after["differ"] == 0, (dtype, after)
        assert before["differ"] > 0, (dtype, before)  # the negative control
        assert sorted(after["per_batch"]) == ["bs1", "bs3", "bs8"]
        assert all(v["differ"] == 0 and v["tokens"] > 0 for v in after["per_batch"].values())
    # the dumps read back bit for bit
    line = (tmp_path / "after" / "bf16" / "rollout.jsonl").read_text().splitlines()
    assert any('"logprobs"' in ln for ln in line)
    assert "after: 0 of" in proc.stdout


def test_both_trees_share_the_invariant_kernels(demo_trees):
    r = demo_trees["release"]["rollout"] / "toy_rollout" / "batch_invariant.py"
    t = demo_trees["release"]["trainer"] / "toy_trainer" / "batch_invariant.py"
    assert r.read_bytes() == t.read_bytes()


# ---------------------------------------------------------------------------
# (3) the trainer is a trainer: backward runs
# ---------------------------------------------------------------------------

BACKWARD = r"""
import os, sys, torch
from toy_trainer import ModelConfig, ToyPolicy, random_weights, train_step
flag = {"on": True, "off": False, "upstream": None}[sys.argv[1]]
cfg = ModelConfig()
kw = {} if flag is None else {"batch_invariant": flag}
policy = ToyPolicy(cfg, random_weights(cfg, seed=3), **kw)
before = {n: p.detach().clone() for n, p in policy.named_parameters()}
loss = train_step(policy, [[1, 2, 3], [4, 5, 6, 7, 8]], [[9, 10, 11], [12]], advantages=[1.0, -0.5], lr=1e-2)
assert loss == loss and abs(loss) < 1e4, loss
grads = [p.grad for p in policy.parameters()]
assert all(g is not None and torch.isfinite(g).all() for g in grads)
moved = [n for n, p in policy.named_parameters() if not torch.equal(before[n], p.detach())]
assert "lm_head__weight" in moved and "layers__0__attn__q_proj__weight" in moved, moved
print("ok", loss)
"""


@pytest.mark.parametrize("kind,flag", [("upstream", "upstream"), ("release", "on"), ("release", "off")])
def test_trainer_backward(demo_trees, kind, flag):
    pytest.importorskip("torch")  # the demo extra: the toy engines run on torch
    tree = demo_trees[kind]["trainer"]
    proc = _run([sys.executable, "-c", BACKWARD, flag], cwd=tree, env={"PYTHONPATH": str(tree)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")


# ---------------------------------------------------------------------------
# (4) the throughput script: three arms, the standard arm computes the same model
# ---------------------------------------------------------------------------

DEMO_THROUGHPUT = ROOT / "scripts" / "demo_throughput.py"

STANDARD_IS_THE_MODEL = r"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("demo_throughput", sys.argv[1])
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
from toy_rollout.model import ToyModel
from toy_rollout.weights import ModelConfig, random_weights
cfg = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=96)
weights = random_weights(cfg, seed=1)
models = {"upstream": ToyModel(cfg, weights, batch_invariant=False), "zero_mismatch": ToyModel(cfg, weights, batch_invariant=True),
          "standard": script.standard_model_class(ToyModel)(cfg, weights, "cpu", torch.float32),
          "standard_gather": script.standard_model_class(ToyModel, gather=True)(cfg, weights, "cpu", torch.float32)}
logits = {}
for name, model in models.items():
    cache = model.new_cache(2, 16)
    a, b = cache.alloc(), cache.alloc()
    first = [model.prefill(torch.tensor(p), cache, s) for p, s in (([3, 5, 7, 9], a), ([11, 2], b))]
    logits[name] = torch.cat([torch.stack(first), model.decode(torch.tensor([4, 6]), [a, b], cache)])
for name in ("standard", "standard_gather", "zero_mismatch"):
    assert torch.allclose(logits[name], logits["upstream"], atol=1e-4, rtol=1e-4), (name, (logits[name] - logits["upstream"]).abs().max())
print("ok")
"""


def test_throughput_script_standard_arm_is_the_same_model(demo_trees):
    pytest.importorskip("torch")
    tree = demo_trees["release"]["rollout"]
    proc = _run([sys.executable, "-c", STANDARD_IS_THE_MODEL, str(DEMO_THROUGHPUT)], cwd=tree, env={"PYTHONPATH": str(tree)}, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_throughput_script_measures_three_arms(demo_trees):
    pytest.importorskip("torch")
    tree = demo_trees["release"]["rollout"]
    args = ["--rollout", str(tree), "--hidden", "32", "--heads", "2", "--layers", "1", "--vocab", "64", "--requests", "3",
            "--max-running", "2", "--prompt-len", "4", "--new-tokens", "3", "--reps", "1"]
    proc = _run([sys.executable, str(DEMO_THROUGHPUT), *args], cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["tokens_per_s"]) == {"upstream", "standard", "zero_mismatch"} and all(v > 0 for v in result["tokens_per_s"].values())
    tps = result["tokens_per_s"]
    # against the fastest standard path (tokens/s are rounded to 0.1 in the output, the overhead is not)
    assert abs(result["overhead_vs_standard_percent"] - 100 * (1 - tps["zero_mismatch"] / tps["standard"])) < 1
    assert "overhead_vs_upstream_percent" in result and len(result["runs"]["standard"]) == 1
    bad = _run([sys.executable, str(DEMO_THROUGHPUT), *args, "--arms", "standard,fastest"], cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "--arms" in bad.stderr


def _throughput_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo_throughput", DEMO_THROUGHPUT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_throughput_script_roofline_arithmetic():
    """Bytes and FLOPs of a decode step counted by hand for the GPU-bound model; the peak table by device name."""
    script = _throughput_module()

    class Cfg:
        hidden_size, intermediate_size, vocab_size, num_layers = 4096, 12288, 32000, 8

    cost = script.step_cost(Cfg, batch=128, context=63, elem=2)
    per_layer = 4 * 4096 * 4096 + 3 * 4096 * 12288  # q, k, v, o and gate, up, down
    assert cost["weight_bytes"] == 2 * (8 * per_layer + 32000 * 4096 + 17 * 4096)
    assert cost["kv_bytes"] == 2 * 128 * 64 * 8 * 2 * 4096  # 64 keys and values of 4096 per layer per sequence
    assert cost["flops"] == 2 * 128 * (8 * per_layer + 32000 * 4096) + 8 * 128 * 4 * 64 * 4096
    assert script.device_peaks("NVIDIA H100 80GB HBM3")["hbm_GBps"] == 3350
    assert script.device_peaks("NVIDIA H100 PCIe")["hbm_GBps"] == 2000
    assert script.device_peaks("NVIDIA H200")["hbm_GBps"] == 4800
    assert script.device_peaks("NVIDIA A100-SXM4-80GB") is None
    peaks = script.device_peaks("NVIDIA H200")
    at_peak = cost["bytes"] / 4.8e12  # a step that moves its bytes at exactly the peak bandwidth
    line = script.roofline(cost, at_peak, peaks, "bf16")
    assert line["bound"] == "memory" and line["hbm_percent"] == line["roofline_percent"] == 100.0
    assert script.roofline(cost, 2 * at_peak, peaks, "bf16")["roofline_percent"] == 50.0
    assert script.roofline(cost, at_peak, peaks, "fp32")["bound"] == "compute"  # 128 rows of FMA work outrun the bytes


def test_throughput_script_configs_step_and_graph_option(demo_trees):
    """Several dtypes and batches in one run; the decode-step measurement (eager on a CPU) over the same function."""
    pytest.importorskip("torch")
    tree = demo_trees["release"]["rollout"]
    args = ["--rollout", str(tree), "--hidden", "32", "--heads", "2", "--layers", "1", "--vocab", "64", "--requests", "3",
            "--max-running", "2,3", "--dtype", "fp32,bf16", "--prompt-len", "4", "--new-tokens", "3", "--reps", "1",
            "--arms", "standard,standard_varlen,standard_gather,zero_mismatch", "--step", "1", "--step-iters", "2"]
    proc = _run([sys.executable, str(DEMO_THROUGHPUT), *args], cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(c["dtype"], c["batch"]) for c in result["configs"]] == [("fp32", 2), ("fp32", 3), ("bf16", 2), ("bf16", 3)]
    assert result["cuda_graphs"] is False and "fastest standard" in result["baseline"]
    assert result["dropped"] == {"fp32/standard_varlen": "needs a GPU", "bf16/standard_varlen": "needs a GPU"}
    for config in result["configs"]:
        assert not any(config["graphs"].values())
        assert set(config["engine"]["tokens_per_s"]) == {"standard", "standard_gather", "zero_mismatch"}
        step = config["step"]
        assert set(step["arms"]) == {"standard", "zero_mismatch"}  # the gathering arm has no capturable step
        assert step["logits_rel_diff"] < (1e-5 if config["dtype"] == "fp32" else 2e-2)
        assert all(arm["us_per_step"] > 0 and arm["GBps"] >= 0 for arm in step["arms"].values())
        assert step["best_standard_arm"] == "standard" and config["engine"]["best_standard_arm"] in ("standard", "standard_gather")
    assert "zero_mismatch" in proc.stderr and "roofline %" in proc.stderr  # the table
    bad = _run([sys.executable, str(DEMO_THROUGHPUT), *args, "--cuda-graphs", "1"], cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "--cuda-graphs" in bad.stderr


def test_the_overhead_figure_is_the_committed_evidence(tmp_path):
    """case.yaml's overhead block is what scripts/demo_overhead_figure.py makes of the evidence it names."""
    script = ROOT / "scripts" / "demo_overhead_figure.py"
    proc = _run([sys.executable, str(script), "--check"], cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    case = (ROOT / "cases" / "demo" / "case.yaml").read_text(encoding="utf-8")
    figure = re.search(r'^  figure: "(.*)"$', case, re.M).group(1)
    evidence = re.search(r"Generated from (cases/demo/evidence/\S+\.json)", case).group(1)
    result = json.loads((ROOT / evidence).read_text(encoding="utf-8").strip().splitlines()[-1])
    step = next(c["step"] for c in result["configs"] if (c["dtype"], c["batch"]) == ("bf16", 128))
    over = step["overhead_vs_best_standard_percent"] if "overhead_vs_best_standard_percent" in step else step["overhead_vs_standard_percent"]
    assert figure.startswith(f"{over} % vs the fastest standard path (H100, bf16, batch 128")
    assert ("CUDA graphs on both arms" in figure) == result["cuda_graphs"]


GEMM_CHUNKS = ROOT / "scripts" / "demo_gemm_chunks.py"
GEMM_CHUNKS_EVIDENCE = ROOT / "cases" / "demo" / "evidence" / "h100-2026-12-06b-d-gemm-chunks.json"


def test_gemm_rows_of_the_release_trees_are_the_committed_choice(demo_trees, tmp_path):
    """The trees' GEMM_ROWS is what demo_gemm_chunks.py chooses from the committed H100 run; a C that failed a check is never chosen."""
    evidence = json.loads(GEMM_CHUNKS_EVIDENCE.read_text(encoding="utf-8").strip().splitlines()[-1])
    # the run checked what it claims: every C, shape and dtype kept a row's bits (batches, graph replay, two processes)
    assert evidence["two_processes"]["compared"] == 200 and evidence["two_processes"]["differ"] == []
    for rec in evidence["shapes"].values():
        for inv in rec["invariant"].values():
            assert inv["rows_differ_in_batches"] == [] and all(inv["graph_equals_eager"].values())
    proc = _run([sys.executable, str(GEMM_CHUNKS), "--choose-from", str(GEMM_CHUNKS_EVIDENCE)], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)["table"]
    committed = json.loads((ROOT / "cases" / "demo" / "evidence" / "h100-2026-12-06b-gemm-rows-choice.json").read_text(encoding="utf-8"))
    assert committed["table"] == table
    code = "import json, sys; from toy_{0} import batch_invariant as bi; print(json.dumps(bi.GEMM_ROWS))"
    for comp in COMPONENTS:
        rows = _run([sys.executable, "-c", code.format(comp)], cwd=demo_trees["release"][comp], timeout=120)
        assert rows.returncode == 0, rows.stderr
        assert json.loads(rows.stdout) == table, comp
    # the negative control: one shape of one dtype differing at C = 64 in one batch rules C = 64 out for that dtype
    broken = dict(evidence)
    broken["shapes"] = json.loads(json.dumps(evidence["shapes"]))
    broken["shapes"]["small/fp32/o"]["invariant"]["64"]["rows_differ_in_batches"] = [9]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    proc = _run([sys.executable, str(GEMM_CHUNKS), "--choose-from", str(path)], cwd=ROOT, timeout=120)
    choice = json.loads(proc.stdout)
    assert 64 not in choice["why"]["fp32"]["valid"] and 64 not in [c for k, c in choice["table"].items() if k.startswith("ieee")]
    assert choice["table"]["tensor"] == table["tensor"]


@pytest.mark.slow
def test_release_trees_graph_and_tile_tests_pass_on_cpu(demo_trees):
    """The release trees' own CPU tests of rollout 0008 (padded buckets, the option) and of the tile table (both trees)."""
    pytest.importorskip("torch")
    tile_test = "tests/test_batch_invariant_kernels.py::test_gemm_tile_table_by_shape_then_kind"
    for comp, files, passed in (("rollout", ["tests/test_graphs.py", tile_test], 8), ("trainer", [tile_test], 1)):
        tree = demo_trees["release"][comp]
        # no plugin of the test environment (the demo extra has none; hypothesis's imports all of hypothesis at the end)
        env = {"PYTHONPATH": str(tree), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        proc = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files], cwd=tree, env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert f"{passed} passed" in proc.stdout, proc.stdout[-2000:]  # the GPU tests skip without a GPU, nothing else


# ---------------------------------------------------------------------------
# (5) parallel layouts: the rollout at TP 2 against the trainer at TP 1 and CP 2, two gloo processes
# ---------------------------------------------------------------------------

DEMO_PARALLEL = ROOT / "scripts" / "demo_parallel.py"
# tiny and short: two processes on a 2-core machine; the same dtypes and comparisons as the evidence
PARALLEL_SMALL = ("--batch-sizes", "3,8", "--max-running", "4", "--prompt-len", "2:20", "--new-tokens", "4:12", "--timeout", "240")


def _parallel(trees: dict[str, Path], *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return _run([sys.executable, str(DEMO_PARALLEL), "--rollout", str(trees["rollout"]), "--trainer", str(trees["trainer"]), *extra],
                cwd=ROOT, timeout=timeout)


@pytest.mark.slow
def test_parallel_layouts_bitwise_tp2_cp2(demo_trees, tmp_path):
    """Layout-invariant: 0 differing tokens between rollout TP 2, trainer TP 1 and trainer CP 2; standard: they differ."""
    pytest.importorskip("torch")
    proc = _parallel(demo_trees["release"], "--tp", "2", "--cp", "2", "--artifacts", str(tmp_path), *PARALLEL_SMALL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is True and summary["problems"] == [] and (summary["tp"], summary["cp"]) == (2, 2)
    comparisons = {"rollout-tp2_vs_trainer-tp1", "rollout-tp2_vs_trainer-cp2", "trainer-cp2_vs_trainer-tp1"}
    for dtype in ("fp32", "bf16"):
        invariant, standard = summary["results"][dtype]["invariant"], summary["results"][dtype]["standard"]
        assert set(invariant) == set(standard) == comparisons
        for name in comparisons:
            assert invariant[name]["tokens"] >= 50 and invariant[name]["differ"] == 0, (dtype, name, invariant[name])
            assert sorted(invariant[name]["per_batch"]) == ["bs3", "bs8"]
            if name.startswith("rollout") or dtype == "fp32":  # the negative control (CP alone: bf16 rounding may absorb it)
                assert standard[name]["differ"] > 0, (dtype, name, standard[name])
            assert invariant[name]["zmr_mismatch_exit"] == 0  # zmr mismatch agrees with the script's own comparison
            assert standard[name]["zmr_mismatch_exit"] == (1 if standard[name]["differ"] else 0)
    # the dumps are there and read back: every rollout token was scored by both trainers
    rollout = (tmp_path / "invariant" / "bf16" / "rollout-tp2.jsonl").read_text()
    assert '"logprobs"' in rollout and (tmp_path / "invariant" / "bf16" / "trainer-cp2.jsonl").is_file()
    assert "rollout-tp2 vs trainer-cp2: 0 of" in proc.stdout


@pytest.mark.slow
def test_parallel_locate_names_the_broken_rank_and_operation(demo_trees, tmp_path):
    """zmr locate per rank: rank 1, whose row-parallel partials are computed the standard way, is where it starts."""
    pytest.importorskip("torch")
    small = ("--batch-sizes", "4", "--max-running", "3", "--prompt-len", "2:12", "--new-tokens", "3:8", "--dtypes", "fp32", "--timeout", "240")
    proc = _parallel(demo_trees["release"], "--locate", str(tmp_path / "broken"), "--break-rank", "1", *small)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "broken" / "summary.json").read_text())
    first = summary["first"]
    assert (first["rank"], first["op"], first["inputs_verdict"]) == (1, "row_partial", "equal"), summary
    by_rank = {r["rank"]: r["first"] for r in summary["ranks"]}
    # rank 0 computes its own partials right; it diverges only where rank 1's partial is added in (later)
    assert by_rank[0]["op"] == "row_linear" and by_rank[0]["order"] > by_rank[1]["order"]
    assert "first differing operation: row_partial" in proc.stdout and "on rank 1" in proc.stdout
    # zmr locate itself (in this process), on rank 1's dumps: exit 1 and the same operation
    loc = zmr("locate", str(tmp_path / "broken" / "rollout-rank1"), str(tmp_path / "broken" / "trainer-rank1"), cwd=ROOT)
    assert loc.returncode == 1 and "first divergence: row_partial" in loc.stdout, loc.stdout + loc.stderr
    # the skill's decision on its JSON report (this run is the parallel fixes missing on one rank: they cannot be left out
    # of a single-process walk): collectives, whose worked example names every fix of both series that shows in parallel
    code, report = demo_walk.locate_json(tmp_path / "broken", "rollout-rank1", "trainer-rank1", name_map=None)
    decide = demo_walk.skill_decide()
    table = decide.load_table()
    decision = decide.decide(table, report)
    assert code == 1 and (decision["op"], decision["verdict"], decision["guide"]) == ("row_partial", "equal", "collectives"), decision
    names = {Path(p).name for p in decision["worked_example"]["patches"]}
    for comp in COMPONENTS:
        assert {n for n, e in table["demo_series"][comp].items() if e["shows"] == "parallel"} <= names, comp
    # the same run without the break: no divergence on any rank
    proc = _parallel(demo_trees["release"], "--locate", str(tmp_path / "ok"), *small)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(r["first"] is None for r in json.loads((tmp_path / "ok" / "summary.json").read_text())["ranks"])


def test_parallel_run_fails_whole_when_a_rank_fails(demo_trees, tmp_path):
    """A rank that raises ends the run: the error is reported, and no rank is left behind."""
    pytest.importorskip("torch")
    # TP 3 does not divide the 4 heads: every rank raises while sharding the model
    proc = _parallel(demo_trees["release"], "--tp", "3", "--cp", "1", "--artifacts", str(tmp_path), *PARALLEL_SMALL, timeout=120)
    assert proc.returncode != 0
    assert "the distributed run failed: rank" in proc.stderr + proc.stdout and "heads 4 is not a multiple of 3" in proc.stderr + proc.stdout
    assert not list(tmp_path.glob("run-*")), "the run folder is removed"
