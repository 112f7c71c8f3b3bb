#!/usr/bin/env python3
"""Benchmark zmr against plain git scripts and against git's own plumbing floor.

Everything is measured in one run, interleaved (variant A, B, C, A, B, C,
...), several repetitions, and reported as medians, spreads and **ratios**
between variants of the same run; absolute seconds mean little across
machines, ratios do.

    python scripts/bench.py                      # synthetic upstream, defaults
    python scripts/bench.py --tiny               # seconds; what the tests run
    python scripts/bench.py --upstream ~/src/Megatron-LM --commit SHA [--onto SHA2]
    python scripts/bench.py --upstream ~/src/Megatron-LM --commit SHA --only verify-cold   # CI's cold verify
    python scripts/bench.py --only export-5000 [--export-patches N]   # a no-op export of a 5,000-patch series vs its build
    python scripts/bench.py --only long-series [--long-patches N]     # build/verify/checkout/export/publish of 20,000 patches

The synthetic upstream is generated deterministically with git fast-import:
~5,000 files in nested folders (~60 MB of text), a few hundred commits, a
30-patch series touching ~60 files (some hunks near each other), and a later
upstream commit a few hundred commits on for rebases.

Variants (each delivers the same result: release branches in a repository
that holds every object they need):

- ``zmr``: the real CLI.
- ``naive``: what a shell script does: clone the cache, check out the pin,
  orphan snapshot commit, ``git am`` the series, squash, push the branch.
- ``floor``: git plumbing as a bare shell loop: ``read-tree`` into a
  temporary index, ``apply --cached`` each patch, ``write-tree``,
  ``commit-tree``, then a local fetch + ``update-ref`` into the repository
  (``floor-core`` is the same loop without that object copy).

Figures are written to ``--out`` (default ``benchmarks/``) as
``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
    "TZ": "UTC",
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@zmr.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@zmr.invalid",
    "GIT_AUTHOR_DATE": "@1700000000 +0000",
    "GIT_COMMITTER_DATE": "@1700000000 +0000",
}
WORDS = "tensor kernel split reduce batch rollout trainer logprob invariant matmul attention norm softmax cache decode prefill shard expert router gate scale".split()


def env(extra: dict | None = None) -> dict:
    result = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    result.update(GIT_ENV)
    if extra:
        result.update(extra)
    return result


def git(*args, cwd=None, input=None, extra_env=None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, env=env(extra_env))
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(map(str, args))} failed: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


# -- measurement -------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    peak_kb: int
    cpu_seconds: float | None = None  # user + system of the command and every process it waited for (measure_mem only)


# Runs a command; writes its wall time and the peak RSS of its largest process (itself or a git it waited for) to a file.
RUSAGE = (
    "import resource, subprocess, sys, time\n"
    "start = time.perf_counter(); rc = subprocess.call(sys.argv[2:]); elapsed = time.perf_counter() - start\n"
    "open(sys.argv[1], 'w').write(f'{elapsed} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')\n"
    "sys.exit(rc)\n"
)


def measure_rusage(argv, cwd, extra_env=None) -> Sample:
    """Run argv under a fresh wrapper process: wall time, and the peak RSS from ``resource.getrusage(RUSAGE_CHILDREN)`` (KiB on Linux)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        proc = subprocess.run([sys.executable, "-c", RUSAGE, report.name, *map(str, argv)], cwd=cwd, env=env(extra_env), capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stderr.decode()[-3000:]}")
        elapsed, peak = Path(report.name).read_text().split()
    return Sample(float(elapsed), int(peak))


def measure_mem(argv, cwd, extra_env=None) -> Sample:
    """Run argv; wall time, and the peak RSS of its largest process via /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-o", rss.name, "-f", "%U %S\n%M", *argv], cwd=cwd, env=env(extra_env), capture_output=True)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stderr.decode()[-3000:]}")
        text = Path(rss.name).read_text().strip().splitlines()
        peak = int(text[-1]) if text and text[-1].isdigit() else 0
        times = text[-2].split() if len(text) > 1 else []
        cpu = sum(float(t) for t in times) if len(times) == 2 else None
    return Sample(elapsed, peak, cpu)


@dataclass
class Series:
    name: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(s.seconds for s in self.samples)

    @property
    def spread(self) -> float:
        values = [s.seconds for s in self.samples]
        return (max(values) - min(values)) / 2 if len(values) > 1 else 0.0

    @property
    def peak_mb(self) -> float:
        return max(s.peak_kb for s in self.samples) / 1024

    def as_json(self) -> dict:
        return {"median_s": round(self.median, 4), "spread_s": round(self.spread, 4), "peak_mb": round(self.peak_mb, 1), "runs": [round(s.seconds, 4) for s in self.samples]}


# -- synthetic upstream ------------------------------------------------------------------


@dataclass
class Upstream:
    path: Path
    pin: str
    onto: str
    patched_files: list[str]
    contents: dict[str, str]  # file -> text at the pin, for the patched files


def _text(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        out.append(f"    {' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))}  # {i}")
    return "\n".join(out) + "\n"


def generate_upstream(path: Path, files: int, file_lines: int, commits: int, pin_at: int, onto_at: int, seed: int = 7) -> Upstream:
    """A deterministic upstream built with git fast-import."""
    rng = random.Random(seed)
    names = [f"pkg{i % 12:02d}/sub{(i // 12) % 20:02d}/mod{(i // 240) % 30:02d}/file{i:05d}.py" for i in range(files)]
    contents = {n: _text(rng, file_lines) for n in names}
    # Upstream churn touches only the first half of the files; the series the second half.
    churn = names[: files // 2]
    patched = names[files // 2 :][:: max(1, (files // 2) // 60)][:60]
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(path))
    stream = bytearray()
    for c in range(commits):
        when = 1_600_000_000 + c * 3600
        message = f"upstream change {c}".encode()
        stream.extend(f"commit refs/heads/main\nmark :{c + 1}\nauthor Upstream <up@example.invalid> {when} +0000\ncommitter Upstream <up@example.invalid> {when} +0000\ndata {len(message)}\n".encode() + message + b"\n")
        if c == 0:
            touched = names
        else:
            touched = [churn[(c * 7 + k) % len(churn)] for k in range(3)]
            for name in touched:
                contents[name] = contents[name] + f"    churn {c}\n"
        for name in touched:
            raw = contents[name].encode()
            stream.extend(f"M 100644 inline {name}\ndata {len(raw)}\n".encode() + raw + b"\n")
        stream.extend(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=bytes(stream), check=True, env=env())
    shas = git("rev-list", "--reverse", "main", cwd=path).split()
    git("reset", "-q", "--hard", "main", cwd=path)
    pin, onto = shas[pin_at], shas[onto_at]
    at_pin = {n: git("show", f"{pin}:{n}", cwd=path) + "\n" for n in patched}
    return Upstream(path, pin, onto, patched, at_pin)


def real_upstream(path: Path, pin: str, onto: str | None, count: int = 60) -> Upstream:
    changed = set(git("diff", "--name-only", "--no-renames", pin, onto, cwd=path).split()) if onto else set()
    candidates = [n for n in git("ls-tree", "-r", "--name-only", pin, cwd=path).splitlines() if n.endswith(".py") and n not in changed]
    picked = []
    step = max(1, len(candidates) // count)
    for name in candidates[::step]:
        text = git("show", f"{pin}:{name}", cwd=path)
        if text.count("\n") >= 60:
            picked.append(name)
        if len(picked) == count:
            break
    contents = {n: git("show", f"{pin}:{n}", cwd=path) + "\n" for n in picked}
    return Upstream(path, pin, onto or pin, picked, contents)


def make_series(up: Upstream, count: int = 30) -> list[tuple[str, bytes]]:
    """*count* format-patch style mails, two files each, some hunks near earlier ones."""
    import difflib

    state = dict(up.contents)
    files = up.patched_files
    patches = []
    for i in range(count):
        touched = [files[(2 * i) % len(files)], files[(2 * i + 1) % len(files)]]
        if i % 5 == 4:
            touched.append(files[(2 * i - 2) % len(files)])  # near an earlier patch's hunk
        diff_parts = []
        for k, name in enumerate(touched):
            old = state[name]
            lines = old.splitlines(keepends=True)
            at = min(len(lines) - 1, 20 + 25 * (k == 2))
            lines.insert(at, f"# zmr bench patch {i}: batch-invariant fix\n")
            new = "".join(lines)
            state[name] = new
            diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=3))
            diff_parts.append(f"diff --git a/{name} b/{name}\n{diff}")
        date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(1_700_000_000 + i * 60))
        mail = (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: Bench Author <author@zmr.invalid>\nDate: {date}\nSubject: [PATCH] Bench fix {i:02d}\n\n"
            f"Fix number {i} of the synthetic series.\n---\n" + "".join(diff_parts) + "\n"
        )
        patches.append((f"{i + 1:04d}-bench-fix-{i:02d}.patch", mail.encode()))
    return patches


# -- projects ----------------------------------------------------------------------------


def make_template(path: Path, up: Upstream, patches, components: int) -> None:
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(path))
    lines = ["model: bench", "components:"]
    for c in range(components):
        key = f"c{c}"
        folder = path / "patches" / "bench" / key
        folder.mkdir(parents=True)
        for name, data in patches:
            (folder / name).write_bytes(data)
        (folder / "series").write_text("".join(f"{name}\n" for name, _ in patches))
        lines += [f"  {key}:", f"    upstream: {up.path}", f"    commit: {up.pin}"]
    (path / "manifests").mkdir()
    (path / "manifests" / "bench.yaml").write_text("\n".join(lines) + "\n")
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "bench project", cwd=path)


NAIVE = r"""
set -e
mirror=$1; pin=$2; project=$3; shift 3
for comp in "$@"; do
  w=$(mktemp -d)
  git init -q "$w/tree"
  cd "$w/tree"
  git fetch -q "$mirror" "$pin"
  git checkout -q "$pin"
  git checkout -q --orphan snap
  git commit -q -m "snapshot $pin"
  snap=$(git rev-parse HEAD)
  git am -q "$project/patches/bench/$comp/"*.patch
  git reset -q --soft "$snap"
  git commit -q -m "changes"
  git push -q "$project" "HEAD:refs/heads/$comp/bench"
  cd /; rm -rf "$w"
done
"""

FLOOR = r"""
set -e
mirror=$1; pin=$2; project=$3; then=$4; shift 4
idx=$(mktemp -u)
for comp in "$@"; do
  export GIT_INDEX_FILE=$idx
  git --git-dir="$mirror" read-tree "$pin"
  for p in "$project/patches/bench/$comp/"*.patch; do git --git-dir="$mirror" apply --cached "$p"; done
  tree=$(git --git-dir="$mirror" write-tree)
  unset GIT_INDEX_FILE
  snap=$(git --git-dir="$mirror" commit-tree "$pin^{tree}" -m "snapshot")
  tip=$(git --git-dir="$mirror" commit-tree "$tree" -p "$snap" -m "changes")
  case "$then" in
    copy)   # deliver the branch: objects into the repository, then the ref
      git -C "$project" fetch -q --no-write-fetch-head "$mirror" "$tip"
      git -C "$project" update-ref "refs/heads/$comp/bench" "$tip" ;;
    verify) # compare with the branch
      test "$(git -C "$project" rev-parse "refs/heads/$comp/bench")" != "$tip" || true ;;
  esac
  rm -f "$idx"
done
"""


SECTIONS = ("fetch", "build", "verify", "verify-cold", "startup", "checkout", "rebase", "update", "export-5000", "long-series")
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s != "long-series")  # minutes at 20,000 patches: only when asked for


def compile_bytecode() -> str:
    """Byte-compile the zmr package this Python imports, as a wheel install does.

    Without it, a checkout installed with ``pip install -e .`` under
    PYTHONDONTWRITEBYTECODE (set on some machines) recompiles every module on
    every run, and start-up would measure the compiler, not zmr.
    """
    code = "import compileall, os, zmr; compileall.compile_dir(os.path.dirname(zmr.__file__), quiet=1)"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return "compiled before timing"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny size for tests (seconds)")
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--file-lines", type=int, default=150, help="lines per file (~80 bytes each)")
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--export-patches", type=int, default=5000, help="length of the series of the export-5000 measurement")
    parser.add_argument("--long-patches", type=int, default=20000, help="length of the series of the long-series measurement")
    parser.add_argument("--long-reps", type=int, default=1, help="repetitions of the long-series measurement")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--upstream", type=Path, help="a real repository instead of the synthetic one")
    parser.add_argument("--commit", help="the pin in --upstream")
    parser.add_argument("--onto", help="a later commit of --upstream, for rebases")
    parser.add_argument("--components", type=int, nargs="+", default=[1, 6])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--zmr", default=None, help="zmr command (default: this Python's -m zmr)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="measure only these (default: all)")
    parser.add_argument("--label", help="how the report names --upstream (default: its path)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.files, args.file_lines, args.commits, args.patches, args.reps, args.components = 60, 40, 30, 5, 2, [1, 2]
        args.export_patches = 40
        args.long_patches = 60
    zmr = args.zmr.split() if args.zmr else [sys.executable, "-m", "zmr"]
    args.only = set(args.only or DEFAULT_SECTIONS)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="zmr-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"schema_version": 1, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "git": git("--version")}, "params": {}, "measurements": {}, "ratios": {}}
    try:
        return _run(args, zmr, work, results)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _run(args, zmr, work: Path, results: dict) -> int:
    t0 = time.perf_counter()
    if args.upstream:
        if not args.commit:
            raise SystemExit("--upstream needs --commit")
        up = real_upstream(args.upstream.resolve(), git("rev-parse", args.commit, cwd=args.upstream), git("rev-parse", args.onto, cwd=args.upstream) if args.onto else None)
        source = args.label or str(args.upstream)
    else:
        commits = args.commits
        up = generate_upstream(work / "upstream", args.files, args.file_lines, commits, pin_at=commits // 4, onto_at=commits - 1)
        source = "synthetic"
    patches = make_series(up, args.patches)
    size = sum(int(line.split()[3]) for line in git("ls-tree", "-r", "-l", up.pin, cwd=up.path).splitlines() if line.split()[3].isdigit())
    history = int(git("rev-list", "--count", up.pin, cwd=up.path))
    results["params"] = {
        "upstream": source,
        "files": len(git("ls-tree", "-r", "--name-only", up.pin, cwd=up.path).splitlines()),
        "tree_bytes": size,
        "history_commits_at_pin": history,
        "patches": len(patches),
        "patched_files": len({p for p in up.patched_files[: 2 * len(patches)]}),
        "reps": args.reps,
        "setup_s": None,
        "bytecode": compile_bytecode() if not args.zmr else "as installed",
    }
    print(f"upstream: {source}, {results['params']['files']} files, {size / 1e6:.1f} MB, {history} commits at the pin; {len(patches)} patches", flush=True)
    cache = work / "cache"
    zenv = {"ZMR_CACHE": str(cache)}

    if "fetch" in args.only:
        _cold_fetch(args, zmr, work, up, patches, results)

    # Warm the cache once; every variant below reads from it.
    for n in args.components:
        template = work / f"template-{n}"
        make_template(template, up, patches, n)
    subprocess.run([*zmr, "fetch", "bench"], cwd=work / f"template-{args.components[0]}", env=env(zenv), check=True, capture_output=True)
    mirror = next((cache / "mirrors").glob("*.git"))
    results["params"]["setup_s"] = round(time.perf_counter() - t0, 1)

    if "build" in args.only:
        _builds(args, zmr, work, up, mirror, zenv, results)
    n = args.components[-1]
    built = work / f"run-{n}-zmr"
    if "verify" in args.only:
        if not built.exists():
            shutil.copytree(work / f"template-{n}", built, symlinks=True)
            subprocess.run([*zmr, "build", "bench"], cwd=built, env=env(zenv), check=True, capture_output=True)
        _verify(args, zmr, up, mirror, zenv, built, n, results)
    if "verify-cold" in args.only:
        _verify_cold(args, zmr, work, up, patches, n, results)
    if "startup" in args.only:
        _startup(args, zmr, work / f"template-{n}", zenv, results)
    _extra_workflows(args, zmr, work, up, patches, zenv, results)
    if "export-5000" in args.only:
        _export_many(args, zmr, work, up, zenv, results)
    if "long-series" in args.only:
        _long_series(args, zmr, work, up, zenv, results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(render_markdown(results))
    print(render_markdown(results))
    return 0


def _cold_fetch(args, zmr, work: Path, up: Upstream, patches, results: dict) -> None:
    """Cold fetch of a pin: bytes and time against a full clone, both over file:// (pack protocol)."""
    m = results["measurements"]
    url = f"file://{up.path}"
    fetch_series, clone_series = Series("zmr fetch (cold)"), Series("git clone --bare (full)")
    fetch_bytes = clone_bytes = 0
    probe = work / "probe"
    for rep in range(args.reps):
        shutil.rmtree(probe, ignore_errors=True)
        make_template(probe, up, patches[:1], 1)
        (probe / "manifests/bench.yaml").write_text((probe / "manifests/bench.yaml").read_text().replace(str(up.path), url))
        fetch_cache = work / f"cold-cache-{rep}"
        fetch_series.samples.append(measure_mem([*zmr, "fetch", "bench"], probe, {"ZMR_CACHE": str(fetch_cache)}))
        fetch_bytes = _dir_bytes(fetch_cache)
        shutil.rmtree(fetch_cache)
        clone_dir = work / f"clone-{rep}"
        clone_series.samples.append(measure_mem(["git", "clone", "-q", "--bare", "--no-local", url, str(clone_dir)], work))
        clone_bytes = _dir_bytes(clone_dir)
        shutil.rmtree(clone_dir)
    m["fetch_cold"] = {"zmr": {**fetch_series.as_json(), "bytes": fetch_bytes}, "full_clone": {**clone_series.as_json(), "bytes": clone_bytes}}
    results["ratios"]["fetch_bytes_full_clone_over_zmr"] = round(clone_bytes / max(fetch_bytes, 1), 2)
    results["ratios"]["fetch_time_full_clone_over_zmr"] = round(clone_series.median / fetch_series.median, 2)


def _builds(args, zmr, work: Path, up: Upstream, mirror: Path, zenv: dict, results: dict) -> None:
    m = results["measurements"]
    for n in args.components:
        template = work / f"template-{n}"
        comps = [f"c{c}" for c in range(n)]
        variants = {
            "zmr": lambda p: measure_mem([*zmr, "build", "bench"], p, zenv),
            "naive": lambda p: measure_mem(["bash", "-c", NAIVE, "naive", str(mirror), up.pin, str(p), *comps], p),
            "floor": lambda p: measure_mem(["bash", "-c", FLOOR, "floor", str(mirror), up.pin, str(p), "copy", *comps], p),
            "floor-core": lambda p: measure_mem(["bash", "-c", FLOOR, "floor", str(mirror), up.pin, str(p), "none", *comps], p),
        }
        series = {name: Series(name) for name in variants}
        for rep in range(args.reps):
            for name, run in variants.items():
                target = work / f"run-{n}-{name}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(template, target, symlinks=True)
                series[name].samples.append(run(target))
            print(f"build N={n} rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s" for k, v in series.items()), flush=True)
        # The branches each variant made must hold the same trees.
        trees = {name: git("rev-parse", "c0/bench^{tree}", cwd=work / f"run-{n}-{name}") for name in ("zmr", "naive", "floor")}
        assert len(set(trees.values())) == 1, trees
        m[f"build_n{n}"] = {k: v.as_json() for k, v in series.items()}
        results["ratios"][f"build_n{n}_naive_over_zmr"] = round(series["naive"].median / series["zmr"].median, 2)
        results["ratios"][f"build_n{n}_zmr_over_floor"] = round(series["zmr"].median / series["floor"].median, 2)
        results["ratios"][f"build_n{n}_zmr_over_floor_core"] = round(series["zmr"].median / series["floor-core"].median, 2)



def _verify(args, zmr, up: Upstream, mirror: Path, zenv: dict, built: Path, n: int, results: dict) -> None:
    """verify --all against the floor, on the last built project."""
    m = results["measurements"]
    comps = [f"c{c}" for c in range(n)]
    verify_series = {"zmr": Series("zmr verify --all"), "floor": Series("floor verify")}
    for rep in range(args.reps):
        verify_series["zmr"].samples.append(measure_mem([*zmr, "verify", "--all"], built, zenv))
        verify_series["floor"].samples.append(measure_mem(["bash", "-c", FLOOR, "floor", str(mirror), up.pin, str(built), "verify", *comps], built))
    m[f"verify_n{n}"] = {k: v.as_json() for k, v in verify_series.items()}
    results["ratios"][f"verify_n{n}_zmr_over_floor"] = round(verify_series["zmr"].median / verify_series["floor"].median, 2)


def _verify_cold(args, zmr, work: Path, up: Upstream, patches, n: int, results: dict) -> None:
    """CI's cold path: ``zmr verify --all`` into an empty cache, the upstream served with filters allowed and not.

    The upstream is served over file:// (real upload-pack) from a bare clone that borrows its
    objects (``--shared``), so the server's ``uploadpack.allowFilter`` can be switched between
    runs without touching the repository under measurement. With it on, zmr fetches the pins
    blobless plus the blobs the series touches; with it off, the same command falls back to
    depth-1 fetches of the same pins (what every cold verify did before).
    """
    m = results["measurements"]
    served = work / "served.git"
    if not served.exists():
        git("clone", "-q", "--bare", "--shared", str(up.path), str(served))
    url = f"file://{served}"
    project = work / f"verify-cold-{n}"
    if not project.exists():
        make_template(project, up, patches, n)
        manifest = project / "manifests/bench.yaml"
        manifest.write_text(manifest.read_text().replace(str(up.path), url))
        git("commit", "-q", "-am", "served upstream", cwd=project)
        subprocess.run([*zmr, "build", "bench"], cwd=project, env=env({"ZMR_CACHE": str(work / "verify-cold-build-cache")}), check=True, capture_output=True)
    variants = {"partial": "true", "depth1": "false"}
    series = {name: Series(f"zmr verify --all (cold, {name})") for name in variants}
    sizes: dict[str, int] = {}
    for rep in range(args.reps):
        for name, allow in variants.items():
            git("config", "uploadpack.allowFilter", allow, cwd=served)
            cache = work / f"verify-cold-cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            series[name].samples.append(measure_mem([*zmr, "verify", "--all"], project, {"ZMR_CACHE": str(cache)}))
            sizes[name] = _dir_bytes(cache)
            shutil.rmtree(cache)
        print(f"verify-cold N={n} rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s {sizes[k] / 1e6:.2f} MB" for k, v in series.items()), flush=True)
    m[f"verify_cold_n{n}"] = {name: {**series[name].as_json(), "bytes": sizes[name]} for name in variants}
    results["ratios"][f"verify_cold_n{n}_bytes_depth1_over_partial"] = round(sizes["depth1"] / max(sizes["partial"], 1), 2)
    results["ratios"][f"verify_cold_n{n}_time_depth1_over_partial"] = round(series["depth1"].median / series["partial"].median, 2)


def _startup(args, zmr, project: Path, zenv: dict, results: dict) -> None:
    """Start-up; and the targets that include it: zmr within 2x of (floor + start-up)."""
    m = results["measurements"]
    startup = {"python": Series("python -c pass"), "help": Series("zmr --help"), "list": Series("zmr list")}
    # A start is short and noisy: 5 runs at least, but for the tests' --tiny (they check the figures' shape, not their size).
    for rep in range(args.reps if args.tiny else max(5, args.reps)):
        startup["python"].samples.append(measure_mem([sys.executable, "-c", "pass"], project))
        startup["help"].samples.append(measure_mem([*zmr, "--help"], project, zenv))
        startup["list"].samples.append(measure_mem([*zmr, "list"], project, zenv))
    m["startup"] = {k: v.as_json() for k, v in startup.items()}
    python_start = startup["python"].median
    for key in [k for k in m if k.startswith(("build_n", "verify_n"))]:
        floor = m[key]["floor"]["median_s"]
        results["ratios"][f"{key}_zmr_over_floor_plus_startup"] = round(m[key]["zmr"]["median_s"] / (floor + python_start), 2)


def _extra_workflows(args, zmr, work, up, patches, zenv, results) -> None:
    """checkout and rebase against plain git, when this zmr has those commands."""
    helptext = subprocess.run([*zmr, "--help"], capture_output=True, text=True).stdout
    m = results["measurements"]
    template = work / "template-1"
    mirror = next((Path(zenv["ZMR_CACHE"]) / "mirrors").glob("*.git"))

    def fresh_project(name: str, source: Path = up.path) -> Path:
        target = work / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(template, target, symlinks=True)
        manifest = target / "manifests/bench.yaml"
        manifest.write_text(manifest.read_text().replace(f"upstream: {up.path}", f"upstream: {source}"))
        return target

    if "checkout" in args.only and " checkout " in helptext:
        series = {"zmr": Series("zmr checkout"), "git": Series("git clone + git am")}
        for rep in range(args.reps):
            target = fresh_project("co-zmr")
            series["zmr"].samples.append(measure_mem([*zmr, "checkout", "bench", "-c", "c0", "--dir", str(work / "co-zmr-tree")], target, zenv))
            shutil.rmtree(work / "co-zmr-tree", ignore_errors=True)
            script = f'set -e; rm -rf "$1"; git init -q "$1"; cd "$1"; git fetch -q "{mirror}" {up.pin}; git checkout -q -b work {up.pin}; git am -q "{template}/patches/bench/c0/"*.patch'
            series["git"].samples.append(measure_mem(["bash", "-c", script, "co", str(work / "co-git")], work))
        m["checkout"] = {k: v.as_json() for k, v in series.items()}
        results["ratios"]["checkout_git_over_zmr"] = round(series["git"].median / series["zmr"].median, 2)
    if "rebase" in args.only and " rebase " in helptext and up.onto != up.pin:
        moved_source, moved = make_moved_upstream(work, up)
        scenarios = {
            # Upstream moved on without touching the series' files.
            "rebase": (up.path, up.onto),
            # One more upstream commit inserts a line above every hunk: every patch is replayed and re-exported.
            "rebase_moved": (moved_source, moved),
        }
        mirrors = Path(zenv["ZMR_CACHE"]) / "mirrors"
        for key, (source, onto) in scenarios.items():
            # Untimed: the mirror fetches the new commit (as the git side has it from its clone) and, for the
            # "zmr" variant, builds the series' commits on the old pin, as zmr upstreamed or checkout leave them.
            before = set(mirrors.glob("*.git"))
            warm = fresh_project("rb-warm", source)

            def keep_chains() -> None:
                subprocess.run([*zmr, "upstreamed", "bench", "-c", "c0", "--rev", onto], cwd=warm, env=env(zenv), check=True, capture_output=True)

            keep_chains()
            scenario_mirror = next(iter(set(mirrors.glob("*.git")) - before), mirror)
            series = {
                "zmr": Series(f"zmr rebase ({key}); the mirror keeps the series' commits on the old pin (as after zmr checkout or zmr upstreamed)"),
                "zmr-first": Series(f"zmr rebase ({key}); the first zmr command on this series and pin"),
                "git": Series("git rebase in a working tree"),
            }
            tree_dir = work / "rb-git"
            for rep in range(args.reps):
                for variant in ("zmr", "zmr-first"):
                    keep_chains() if variant == "zmr" else forget_chains(scenario_mirror)
                    target = fresh_project("rb-zmr", source)
                    series[variant].samples.append(measure_mem([*zmr, "rebase", "bench", "-c", "c0", "--onto", onto], target, zenv))
                shutil.rmtree(tree_dir, ignore_errors=True)
                git("clone", "-q", str(source), str(tree_dir))
                git("checkout", "-q", "-b", "work", up.pin, cwd=tree_dir)
                git("am", "-q", "--keep-cr", *sorted(str(p) for p in (template / "patches/bench/c0").glob("*.patch")), cwd=tree_dir)
                series["git"].samples.append(measure_mem(["git", "rebase", "-q", "--onto", onto, up.pin, "work"], tree_dir))
                print(f"{key} rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s" for k, v in series.items()), flush=True)
            # Both must arrive at the same tree.
            subprocess.run([*zmr, "build", "bench"], cwd=target, env=env(zenv), check=True, capture_output=True)
            trees = {git("rev-parse", "c0/bench^{tree}", cwd=target), git("rev-parse", "work^{tree}", cwd=tree_dir)}
            assert len(trees) == 1, (key, trees)
            m[key] = {k: v.as_json() for k, v in series.items()}
            results["ratios"][f"{key}_git_over_zmr"] = round(series["git"].median / series["zmr"].median, 2)
            results["ratios"][f"{key}_git_over_zmr_first"] = round(series["git"].median / series["zmr-first"].median, 2)
    if "update" in args.only and " update " in helptext and up.onto != up.pin:
        _update(args, zmr, work, up, template, fresh_project, zenv, results)


# Today's way to find how far a series can go: git rebase onto each first-parent commit, newest first, until one goes through.
REBASE_LOOP = r"""
set -e
pin=$1; tip=$2
tries=0
for c in $(git rev-list --first-parent "$tip" --not "$pin"); do
  tries=$((tries + 1))
  git checkout -q -B try work
  if git rebase -q --onto "$c" "$pin" try >/dev/null 2>&1; then
    echo "$c $tries"; exit 0
  fi
  git rebase --abort
done
echo "$pin $tries"
"""


def _update(args, zmr, work: Path, up: Upstream, template: Path, fresh_project, zenv: dict, results: dict) -> None:
    """zmr update (bisection) against a loop of git rebase attempts, newest first, on a history with a planted conflict."""
    source, line, target = make_conflicting_upstream(work, up)
    tip = line[-1]
    probe = fresh_project("up-warm", source)
    # Untimed: the mirror fetches the new history (the git side has it from its clone) and builds the series' commits on the pin.
    warm = subprocess.run([*zmr, "update", "bench", "-c", "c0", "--to", tip, "--json"], cwd=probe, env=env(zenv), check=True, capture_output=True, text=True)
    found = json.loads(warm.stdout)["components"][0]
    assert found["status"] == "partial" and found["target"] == target, found
    tree_dir = work / "up-git"
    shutil.rmtree(tree_dir, ignore_errors=True)
    git("clone", "-q", str(source), str(tree_dir))
    git("checkout", "-q", "-b", "work", up.pin, cwd=tree_dir)
    git("am", "-q", "--keep-cr", *sorted(str(p) for p in (template / "patches/bench/c0").glob("*.patch")), cwd=tree_dir)
    loop = subprocess.run(["bash", "-c", REBASE_LOOP, "loop", up.pin, tip], cwd=tree_dir, env=env(), check=True, capture_output=True, text=True)
    loop_target, tries = loop.stdout.split()
    assert loop_target == target, (loop_target, target)
    series = {"zmr": Series("zmr update (bisection, in memory)"), "git": Series("git rebase onto each first-parent commit, newest first, until one succeeds")}
    for rep in range(args.reps):
        series["zmr"].samples.append(measure_mem([*zmr, "update", "bench", "-c", "c0", "--to", tip], probe, zenv))
        series["git"].samples.append(measure_mem(["bash", "-c", REBASE_LOOP, "loop", up.pin, tip], tree_dir))
        print(f"update rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s" for k, v in series.items()), flush=True)
    m = results["measurements"]
    m["update"] = {k: v.as_json() for k, v in series.items()}
    m["update"]["zmr"]["replays"] = found["replays"]
    m["update"]["git"]["rebases"] = int(tries)
    results["params"]["update_range"] = len(line)
    results["ratios"]["update_git_over_zmr"] = round(series["git"].median / series["zmr"].median, 2)


def make_conflicting_upstream(work: Path, up: Upstream) -> tuple[Path, list[str], str]:
    """A bare clone of the upstream whose first-parent line pin..onto is rewritten with a conflict planted past its middle.

    Every commit keeps its tree, but from the planted one on the first patched
    file has the two lines around the first patch's insertion point changed
    (a conflict for git apply and for a 3-way merge alike). Returns the
    clone, the new line (oldest first) and the last commit before the conflict.
    """
    path = work / "upstream-conflict"
    shutil.rmtree(path, ignore_errors=True)
    git("clone", "-q", "--bare", "--shared", str(up.path), str(path))
    old_line = git("rev-list", "--first-parent", "--reverse", up.onto, "--not", up.pin, cwd=path).split()
    planted = len(old_line) // 2 + 1
    name = up.patched_files[0]
    lines = up.contents[name].splitlines(keepends=True)
    lines[19:21] = ["    # upstream reworked this\n", "    # and this\n"]
    blob = git("hash-object", "-w", "--stdin", cwd=path, input="".join(lines).encode())
    mode = git("ls-tree", up.pin, "--", name, cwd=path).split()[0]
    index = {"GIT_INDEX_FILE": str(work / "conflict.index")}
    parent, line = up.pin, []
    for k, commit in enumerate(old_line):
        tree = git("rev-parse", f"{commit}^{{tree}}", cwd=path)
        if k >= planted:
            git("read-tree", tree, cwd=path, extra_env=index)
            git("update-index", "--cacheinfo", f"{mode},{blob},{name}", cwd=path, extra_env=index)
            tree = git("write-tree", cwd=path, extra_env=index)
        message = "Rework the lines of the first patch" if k == planted else f"upstream change {k} (rewritten)"
        parent = git("commit-tree", tree, "-p", parent, "-m", message, cwd=path)
        line.append(parent)
    git("update-ref", "refs/heads/main", parent, cwd=path)
    (work / "conflict.index").unlink(missing_ok=True)
    return path, line, line[planted - 1]


def _export_many(args, zmr, work: Path, up: Upstream, zenv: dict, results: dict) -> None:
    """A no-op ``zmr export`` of a long series (5,000 generated patches by default) against ``zmr build`` of the same series.

    Exporting a checkout that equals its series writes nothing; it should cost
    about what a build of the series costs, not a git process or two per patch.
    """
    count = args.export_patches
    patches = make_series(up, count)
    project = work / "export-many"
    shutil.rmtree(project, ignore_errors=True)
    make_template(project, up, patches, 1)
    (project / ".gitignore").write_text("/work/\n/.zmr/\n")
    git("add", "-A", cwd=project)
    git("commit", "-q", "-m", "ignore checkouts", cwd=project)
    for command in (["checkout", "bench"], ["export", "bench"], ["build", "bench"]):  # untimed: the checkout, then a first export and build
        subprocess.run([*zmr, *command], cwd=project, env=env(zenv), check=True, capture_output=True)
    if git("status", "--porcelain", "--", "patches", cwd=project):
        raise SystemExit("export-5000: the first export of an unchanged checkout changed the series")
    series = {"export": Series(f"zmr export, {count} patches, nothing changed"), "build": Series(f"zmr build, {count} patches")}
    for rep in range(args.reps):
        for key, command in (("export", "export"), ("build", "build")):
            series[key].samples.append(measure_mem([*zmr, command, "bench"], project, zenv))
        print(f"export-5000 rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s" for k, v in series.items()), flush=True)
    results["params"]["export_patches"] = count
    results["measurements"]["export_noop"] = {k: v.as_json() for k, v in series.items()}
    results["ratios"]["export_noop_over_build"] = round(series["export"].median / series["build"].median, 2)


def make_long_series(count: int) -> list[tuple[str, bytes]]:
    """*count* tiny format-patch mails, each adding one file of one line (100 to a folder): the series and the tree grow with *count*."""
    patches = []
    for i in range(1, count + 1):
        name = f"generated/part{i // 100:03d}/file{i:06d}.txt"
        date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(1_700_000_000 + i))
        mail = (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: Bench Author <author@zmr.invalid>\nDate: {date}\nSubject: [PATCH] Add generated file {i}\n\n---\n"
            f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+generated line {i}\n"
        )
        patches.append((f"{i:06d}-add-generated-file-{i}.patch", mail.encode()))
    return patches


def _long_series(args, zmr, work: Path, up: Upstream, zenv: dict, results: dict) -> None:
    """build, verify, checkout, a no-op export and publish (to a local bare remote) of a ``--long-patches`` series (20,000 by default).

    Each repetition starts from a project without branches, checkout or
    remote branch, and a mirror without kept chains, so checkout replays
    every patch. Peak RSS is the largest process of each command (zmr or a
    git it ran), from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper process.
    """
    count = args.long_patches
    project = work / "long-series"
    remote = work / "long-series-remote.git"
    shutil.rmtree(project, ignore_errors=True)
    make_template(project, up, make_long_series(count), 1)
    (project / ".gitignore").write_text("/work/\n/.zmr/\n")
    git("add", "-A", cwd=project)
    git("commit", "-q", "-m", "ignore checkouts", cwd=project)
    steps = {
        "build": ["build", "bench"],
        "verify": ["verify", "bench"],
        "checkout": ["checkout", "bench"],
        "export": ["export", "bench"],
        "publish": ["publish", "bench", "--remote", str(remote)],
    }
    series = {key: Series(f"zmr {key}, {count} patches") for key in steps}
    mirror = next((Path(zenv["ZMR_CACHE"]) / "mirrors").glob("*.git"))
    for rep in range(args.long_reps):
        shutil.rmtree(project / "work", ignore_errors=True)
        shutil.rmtree(project / ".zmr", ignore_errors=True)
        shutil.rmtree(remote, ignore_errors=True)
        git("init", "-q", "--bare", str(remote))
        branches = git("for-each-ref", "--format=%(refname)", "refs/heads/c0/", cwd=project).split()
        if branches:
            git("update-ref", "--stdin", cwd=project, input="".join(f"delete {ref}\n" for ref in branches).encode())
        forget_chains(mirror)
        for key, command in steps.items():
            series[key].samples.append(measure_rusage([*zmr, *command], project, zenv))
        if git("status", "--porcelain", "--", "patches", cwd=project):
            raise SystemExit("long-series: the export of an unchanged checkout changed the series")
        if git("rev-parse", "refs/heads/c0/bench", cwd=remote) != git("rev-parse", "refs/heads/c0/bench", cwd=project):
            raise SystemExit("long-series: the remote does not hold the branch that was built")
        print(f"long-series rep {rep + 1}/{args.long_reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.1f}s" for k, v in series.items()), flush=True)
    results["params"]["long_patches"] = count
    results["params"]["long_reps"] = args.long_reps
    results["measurements"]["long_series"] = {key: value.as_json() for key, value in series.items()}


def forget_chains(mirror: Path) -> None:
    """Drop what zmr keeps about series in a mirror (their commits and patch ids), not the upstream's objects."""
    refs = git("for-each-ref", "--format=%(refname)", "refs/zmr/chains", "refs/zmr/patch-ids", cwd=mirror).split()
    if refs:
        git("update-ref", "--stdin", cwd=mirror, input="".join(f"delete {r}\n" for r in refs).encode())


def make_moved_upstream(work: Path, up: Upstream) -> tuple[Path, str]:
    """A bare clone of the upstream (sharing its objects) with one more commit on
    top of ``onto`` that inserts a line at the top of every patched file."""
    path = work / "upstream-moved"
    shutil.rmtree(path, ignore_errors=True)
    git("clone", "-q", "--bare", "--shared", str(up.path), str(path))
    index = {"GIT_INDEX_FILE": str(work / "moved.index")}
    git("read-tree", up.onto, cwd=path, extra_env=index)
    for name in up.patched_files:
        mode = git("ls-tree", up.onto, "--", name, cwd=path).split()[0]
        text = subprocess.run(["git", "cat-file", "blob", f"{up.onto}:{name}"], cwd=path, capture_output=True, check=True).stdout
        blob = git("hash-object", "-w", "--stdin", cwd=path, input=b"# moved by upstream\n" + text)
        git("update-index", "--cacheinfo", f"{mode},{blob},{name}", cwd=path, extra_env=index)
    tree = git("write-tree", cwd=path, extra_env=index)
    commit = git("commit-tree", tree, "-p", up.onto, "-m", "Move every hunk of the series", cwd=path)
    git("update-ref", "refs/heads/moved", commit, cwd=path)
    (work / "moved.index").unlink()
    return path, commit


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def render_markdown(results: dict) -> str:
    p = results["params"]
    lines = [
        "# zmr benchmark",
        "",
        f"Upstream: {p['upstream']}, {p['files']} files, {p['tree_bytes'] / 1e6:.1f} MB of tree, {p['history_commits_at_pin']} commits of history at the pin; "
        f"{p['patches']} patches. {p['reps']} interleaved repetitions; medians ± half-range. Machine: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}, {results['machine']['git']}.",
        "",
        "| measurement | variant | median (s) | ± | peak RSS (MB) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    if "long_patches" in p:
        lines[2] += f" Long series: {p['long_patches']} patches, {p.get('long_reps', 1)} run(s) of each command."
    for key, variants in results["measurements"].items():
        for name, data in variants.items():
            extra = f" ({data['bytes'] / 1e6:.1f} MB)" if "bytes" in data else ""
            extra += "".join(f" ({data[k]} {k})" for k in ("replays", "rebases") if k in data)
            lines.append(f"| {key} | {name}{extra} | {data['median_s']:.3f} | {data['spread_s']:.3f} | {data['peak_mb']:.0f} |")
    lines += ["", "| ratio | value |", "| --- | ---: |"]
    for key, value in results["ratios"].items():
        lines.append(f"| {key} | {value} |")
    lines += ["", *NOTES]
    return "\n".join(lines) + "\n"


NOTES = [
    "What the rows measure:",
    "",
    "- `build_nN`: release branches for N components. `naive`: a shell script (clone, checkout, orphan commit, `git am`, squash, push);"
    " `floor`: read-tree, `apply --cached`, write-tree and commit-tree as a bare shell loop, plus the object copy; `floor-core`: the loop alone.",
    "- `fetch_cold`: the pin into an empty cache over `file://` (pack protocol), against `git clone --bare --no-local`; bytes on disk.",
    "- `verify_cold_nN`: `zmr verify --all` into an empty cache, the upstream served over `file://` with `uploadpack.allowFilter`"
    " (`partial`: blobless pins plus the blobs the series touches) and without it (`depth1`: whole trees at depth 1); bytes of the cache.",
    "- `checkout`: `zmr checkout` against `git init` + fetch of the pin + `git am`.",
    "- `rebase`: the series onto an upstream commit a few hundred commits later that left the series' files alone.",
    "- `rebase_moved`: the same, plus one upstream commit that inserts a line above every hunk: every patch is replayed and rewritten.",
    "- In both, `git` is `git rebase` in a working tree prepared beforehand (clone and `git am` untimed); `zmr` runs with the mirror"
    " holding the series' commits on the old pin (as after `zmr checkout` or `zmr upstreamed`); `zmr-first` without them."
    " An untimed `zmr upstreamed` before each `zmr` run fetches the new upstream commit into the mirror (the git side has it from"
    " its clone) and makes those commits; `zmr-first` runs have the commit but not the series' commits.",
    (
        "- `update`: the series against a rewrite of the upstream's first-parent line from the pin on, with a commit past its middle"
        " that conflicts with the first patch. `zmr` is `zmr update --to TIP` (the tip, then a bisection: `replays`); `git` is a shell"
        " loop of `git rebase --onto C` for each first-parent commit C, newest first, until one goes through (`rebases`). Both find"
        " the same commit; the mirror and the git clone hold the history before timing."
    ),
    "- `export_noop`: `zmr export` of a checkout that equals its series (`--export-patches`, 5,000 by default; nothing to write)"
    " against `zmr build` of that series; `export_noop_over_build` is their ratio.",
    "- `long_series`: `zmr build`, `verify`, `checkout`, `export` (nothing changed) and `publish` (to a local bare remote) of a series of"
    " `--long-patches` tiny patches (20,000 by default), each adding one file; one run each (`--long-reps`), from no branch, checkout or kept chain;"
    " peak RSS of the largest process (zmr or a git it ran), from `getrusage(RUSAGE_CHILDREN)`.",
    "- zmr's bytecode is compiled before timing, as a wheel install does.",
]


if __name__ == "__main__":
    sys.exit(main())
