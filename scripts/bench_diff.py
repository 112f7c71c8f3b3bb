#!/usr/bin/env python3
"""Benchmark ``zmr diff`` against ``zmr verify`` of the same components, on a real upstream.

    python scripts/bench_diff.py --upstream ~/src/Megatron-LM --commit SHA --onto SHA2 --label NVIDIA/Megatron-LM

The project is the one scripts/bench.py's cold verify uses: N components
(default 6) pinned to SHA with the same 30-patch series, the upstream served
over file:// with ``uploadpack.allowFilter`` (blobless pins plus the blobs
the series touches). Every run starts from an empty cache (CI's case).

Over file:// the upstream's git (``upload-pack``, its ``pack-objects``) runs
on the machine's CPUs beside zmr. ``--serve daemon --client-cpus 0,1
--server-cpus 2-15`` serves it with ``git daemon`` (git://) on CPUs of its
own instead, as GitHub's runs elsewhere, and runs every measured command on
the client's CPUs only (``taskset``): what a 2-CPU CI runner fetching from a
remote upstream sees.
Measured, interleaved, medians of --reps runs:

- ``verify``: ``zmr verify --all`` of the base side (its branches built
  beforehand, untimed);
- ``diff_one_patch``: ``zmr diff BASE HEAD`` where HEAD changes the code of
  one patch (the last one's added lines) in every component, on the same pin;
- ``diff_series``: ``zmr diff BASE HEAD`` where HEAD edits every
  component's series (one message, the last patch's code, one patch dropped,
  one added) on the same pin;
- ``diff_pin``: HEAD moves every pin from SHA to SHA2, series unchanged
  (the series touch files upstream left alone between them): lines counted
  and the release trees' unified diff made (the new side's blobs of the
  files that differ are fetched; the old side's are copied from the
  project, which holds the base side's release branches that verify
  compares with); ``diff_pin_stat`` the same with ``--stat`` (counts, no
  unified diff);
- ``diff_unchanged``: HEAD changes only a file zmr does not read.

Prints, and writes with the rest into ``results-diff-<name>.json`` and ``.md``
in --out, the two ratios issue #37 sets bounds for: the one-patch change ÷
verify (≤ 2) and the pin move ÷ verify (≤ 3; give --onto 400 first-parent
commits after --commit for the issue's case).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402 - scripts/bench.py: the same helpers, series and project layout

ROOT = Path(__file__).resolve().parents[1]


def _edit_series(project: Path, n: int, extra: bytes) -> None:
    """In each component: patch 5's message reworded, the last patch's added lines changed, patch 20 dropped, one patch added.

    The code change is the last patch's: a later patch may hold an earlier one's line as context (the
    series wraps around the upstream's files when fewer than 60 qualify: 38 on Megatron-LM at 82e9dc69).
    """
    _edit_one_patch(project, n)
    for c in range(n):
        folder = project / "patches" / "bench" / f"c{c}"
        names = (folder / "series").read_text().split()
        p5, p20 = (folder / names[i] for i in (4, 19))
        p5.write_bytes(p5.read_bytes().replace(b"Fix number 4 of", b"Fix number 4 (reworded) of"))
        p20.unlink()
        (folder / "9999-bench-extra.patch").write_bytes(extra)
        names = [x for x in names if x != p20.name] + ["9999-bench-extra.patch"]
        (folder / "series").write_text("".join(f"{x}\n" for x in names))


def _edit_one_patch(project: Path, n: int) -> None:
    """In each component: only the last patch's added lines changed (its code; no later patch has them as context)."""
    for c in range(n):
        folder = project / "patches" / "bench" / f"c{c}"
        names = (folder / "series").read_text().split()
        last = folder / names[-1]
        k = len(names) - 1
        last.write_bytes(
            last.read_bytes().replace(f"# zmr bench patch {k}: batch-invariant fix".encode(), f"# zmr bench patch {k}: batch-invariant fix, v2".encode())
        )


def _extra_patch(up: bench.Upstream) -> bytes:
    name = up.patched_files[-1]
    text = up.contents[name]
    lines = text.splitlines(keepends=True)
    import difflib

    new = "".join(lines[:-1] + ["# zmr bench: an extra patch at the end\n", lines[-1]])
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=3))
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Bench Author <author@zmr.invalid>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\nSubject: [PATCH] Bench extra\n\n"
        f"An extra patch.\n---\ndiff --git a/{name} b/{name}\n{diff}\n"
    ).encode()


def _project(work: Path, up: bench.Upstream, patches, n: int, url: str, zmr: list[str]) -> tuple[Path, dict[str, str]]:
    """The project with its revisions: base, and one head commit per scenario (on branches)."""
    project = work / "project"
    bench.make_template(project, up, patches, n)
    manifest = project / "manifests/bench.yaml"
    manifest.write_text(manifest.read_text().replace(str(up.path), url))
    bench.git("commit", "-q", "-am", "served upstream", cwd=project)
    revs = {"base": bench.git("rev-parse", "HEAD", cwd=project)}
    _edit_series(project, n, _extra_patch(up))
    bench.git("add", "-A", cwd=project)
    bench.git("commit", "-q", "-m", "edit the series", cwd=project)
    revs["series"] = bench.git("rev-parse", "HEAD", cwd=project)
    bench.git("checkout", "-q", revs["base"], cwd=project)
    _edit_one_patch(project, n)
    bench.git("commit", "-q", "-am", "change one patch", cwd=project)
    revs["one_patch"] = bench.git("rev-parse", "HEAD", cwd=project)
    bench.git("checkout", "-q", revs["base"], cwd=project)
    manifest.write_text(manifest.read_text().replace(up.pin, up.onto))
    bench.git("commit", "-q", "-am", "move the pins", cwd=project)
    revs["pin"] = bench.git("rev-parse", "HEAD", cwd=project)
    bench.git("checkout", "-q", revs["base"], cwd=project)
    (project / "NOTES.md").write_text("not read by zmr\n")
    bench.git("add", "-A", cwd=project)
    bench.git("commit", "-q", "-m", "notes", cwd=project)
    revs["unchanged"] = bench.git("rev-parse", "HEAD", cwd=project)
    # verify compares with branches: build the base side's, untimed, into a cache of its own.
    bench.git("checkout", "-q", revs["base"], cwd=project)
    subprocess.run([*zmr, "build", "--all"], cwd=project, env=bench.env({"ZMR_CACHE": str(work / "build-cache")}), check=True, capture_output=True)
    return project, revs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--onto", required=True, help="a later first-parent commit: the pin-move scenario's new pin")
    parser.add_argument("--label", required=True)
    parser.add_argument("--name", required=True, help="results-diff-<name>.{json,md}")
    parser.add_argument("--components", type=int, default=6)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--serve", choices=("file", "daemon"), default="file", help="the upstream over file:// (its git on zmr's CPUs) or git daemon")
    parser.add_argument("--client-cpus", help="taskset CPU list for every measured command (with --serve daemon)")
    parser.add_argument("--server-cpus", help="taskset CPU list for git daemon (with --serve daemon)")
    args = parser.parse_args(argv)
    # zmr's bytecode up to date, as an installed zmr has it (pip compiles at install): a shell with PYTHONDONTWRITEBYTECODE
    # and an edited checkout would compile the changed modules in every run, more of them for diff than for verify.
    compileall.compile_dir(str(ROOT / "zmr"), quiet=1)
    zmr = [sys.executable, "-m", "zmr"]
    if args.client_cpus:
        zmr = ["taskset", "-c", args.client_cpus, *zmr]
    work = Path(tempfile.mkdtemp(prefix="zmr-bench-diff-"))
    try:
        return _run(args, zmr, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args, zmr: list[str], work: Path) -> int:
    path = args.upstream.resolve()
    pin, onto = bench.git("rev-parse", args.commit, cwd=path), bench.git("rev-parse", args.onto, cwd=path)
    up = bench.real_upstream(path, pin, onto)
    patches = bench.make_series(up, args.patches)
    served = work / "served.git"
    bench.git("clone", "-q", "--bare", "--shared", str(path), str(served))
    bench.git("config", "uploadpack.allowFilter", "true", cwd=served)
    # Wants by id answered without a walk of all history (GitHub answers them from bitmaps): the pin move's diff stat asks for ~1,000 blobs.
    bench.git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=served)
    daemon = _daemon(work, args.server_cpus) if args.serve == "daemon" else None
    url = f"git://127.0.0.1:{daemon[1]}/served.git" if daemon else f"file://{served}"
    try:
        return _measure(args, zmr, work, path, pin, onto, up, patches, url)
    finally:
        if daemon:
            daemon[0].terminate()
            daemon[0].wait()


def _daemon(work: Path, cpus: str | None) -> tuple[subprocess.Popen, int]:
    """``git daemon`` serving *work* on a free port of 127.0.0.1 (on *cpus* with taskset); it and its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={work}", "--listen=127.0.0.1", f"--port={port}", str(work)]
    proc = subprocess.Popen([*(["taskset", "-c", cpus] if cpus else []), *argv], env=bench.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):  # until it answers
        if subprocess.run(["git", "ls-remote", f"git://127.0.0.1:{port}/served.git"], env=bench.env(), capture_output=True).returncode == 0:
            return proc, port
        time.sleep(0.05)
    proc.terminate()
    raise SystemExit("git daemon did not start")


def _measure(args, zmr: list[str], work: Path, path: Path, pin: str, onto: str, up, patches, url: str) -> int:
    project, revs = _project(work, up, patches, args.components, url, zmr)
    runs = {
        "verify": [*zmr, "verify", "--all"],
        "diff_one_patch": [*zmr, "diff", "--json", revs["base"], revs["one_patch"]],
        "diff_series": [*zmr, "diff", "--json", revs["base"], revs["series"]],
        "diff_pin": [*zmr, "diff", "--json", revs["base"], revs["pin"]],
        "diff_pin_stat": [*zmr, "diff", "--json", "--stat", revs["base"], revs["pin"]],
        "diff_unchanged": [*zmr, "diff", "--json", revs["base"], revs["unchanged"]],
    }
    series = {name: bench.Series(name) for name in runs}
    sizes: dict[str, int] = {}
    reports: dict[str, dict] = {}
    for rep in range(args.reps):
        for name, argv in runs.items():
            cache = work / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            series[name].samples.append(bench.measure_mem(argv, project, {"ZMR_CACHE": str(cache)}))
            sizes[name] = bench._dir_bytes(cache) if cache.exists() else 0
            if rep == 0 and name.startswith("diff"):
                out = subprocess.run(argv, cwd=project, env=bench.env({"ZMR_CACHE": str(cache)}), capture_output=True, check=True)
                reports[name] = json.loads(out.stdout)
            shutil.rmtree(cache, ignore_errors=True)
        print(f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v.samples[-1].seconds:.2f}s {sizes[k] / 1e6:.2f} MB" for k, v in series.items()), flush=True)
    first = {name: report["components"][0] for name, report in reports.items()}
    results = {
        "schema_version": 1,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "git": bench.git("--version")},
        "params": {
            "upstream": args.label,
            "commit": pin,
            "onto": onto,
            "first_parent_commits_pin_to_onto": int(bench.git("rev-list", "--first-parent", "--count", f"{pin}..{onto}", cwd=path)),
            "files": len(bench.git("ls-tree", "-r", "--name-only", pin, cwd=path).splitlines()),
            "components": args.components,
            "patches": len(patches),
            "reps": args.reps,
            "served": url.split(":", 1)[0] + (f" (git daemon on CPUs {args.server_cpus})" if args.serve == "daemon" else ""),
            "client_cpus": args.client_cpus or "all",
        },
        "measurements": {name: {**series[name].as_json(), "cpu_s": round(_cpu(series[name]), 3), "cache_bytes": sizes[name]} for name in runs},
        "ratios": {
            **{f"{name}_over_verify": round(series[name].median / series["verify"].median, 2) for name in runs if name != "verify"},
            # CPU seconds (user + system, git children and the local upstream's upload-pack included): what a busy machine changes least.
            **{f"{name}_over_verify_cpu": round(_cpu(series[name]) / _cpu(series["verify"]), 2) for name in runs if name != "verify"},
            # The machine is shared: the ratio within each repetition (interleaved runs) is steadier than a ratio of medians.
            **{
                f"{name}_over_verify_per_rep_median": round(
                    statistics.median(a.seconds / b.seconds for a, b in zip(series[name].samples, series["verify"].samples)), 2
                )
                for name in runs
                if name != "verify"
            },
        },
        "checks": {
            name: {
                "status": c["status"],
                "pin": c["pin"],
                "patches": {k: (len(v) if isinstance(v, list) else v) for k, v in c["patches"].items()},
                "tree": c["tree"] and {k: c["tree"][k] for k in ("files_changed", "insertions", "deletions")},
            }
            for name, c in first.items()
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"results-diff-{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / f"results-diff-{args.name}.md").write_text(render(results))
    print(render(results))
    print(headline(results))
    return 0


def _cpu(series: bench.Series) -> float:
    """Median CPU seconds (user + system, children included) of a series' runs."""
    return statistics.median(s.cpu_seconds or 0.0 for s in series.samples)


def headline(results: dict) -> str:
    """The two ratios of issue #37, per repetition (interleaved runs on a shared machine), with the bounds it sets."""
    r, p = results["ratios"], results["params"]
    return (
        f"one-patch change / verify: {r['diff_one_patch_over_verify_per_rep_median']:.2f} wall, {r['diff_one_patch_over_verify_cpu']:.2f} CPU (bound 2)\n"
        f"pin move of {p['first_parent_commits_pin_to_onto']} first-parent commits / verify: "
        f"{r['diff_pin_over_verify_per_rep_median']:.2f} wall, {r['diff_pin_over_verify_cpu']:.2f} CPU (bound 3)"
    )


def render(results: dict) -> str:
    p = results["params"]
    m = results["measurements"]
    lines = [
        "# zmr diff benchmark",
        "",
        f"Upstream: {p['upstream']}, {p['files']} files; {p['components']} components pinned to {p['commit'][:12]}, {p['patches']} patches each;"
        f" the pin move goes to {p['onto'][:12]} ({p['first_parent_commits_pin_to_onto']} first-parent commits)."
        f" Cold cache every run, upstream served over {p.get('served', 'file')} with uploadpack.allowFilter; zmr on CPUs {p.get('client_cpus', 'all')}."
        f" {p['reps']} interleaved repetitions, medians ± half-range."
        f" Machine: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}, {results['machine']['git']}.",
        "",
        "| measurement | median (s) | ± | CPU (s) | cache (MB) | peak RSS (MB) | ÷ verify (medians) | ÷ verify (median per repetition) | ÷ verify (CPU) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in m.items():
        ratio = results["ratios"].get(f"{name}_over_verify", 1.0)
        per_rep = results["ratios"].get(f"{name}_over_verify_per_rep_median", 1.0)
        cpu = results["ratios"].get(f"{name}_over_verify_cpu", 1.0)
        lines.append(
            f"| {name} | {row['median_s']:.3f} | {row['spread_s']:.3f} | {row.get('cpu_s', 0):.2f} | {row['cache_bytes'] / 1e6:.2f} | {row['peak_mb']:.0f}"
            f" | {ratio:.2f} | {per_rep:.2f} | {cpu:.2f} |"
        )
    lines += ["", "What each diff reported for the first component:", ""]
    for name, check in results["checks"].items():
        lines.append(f"- `{name}`: {json.dumps(check)}")
    lines += ["", "Issue #37's ratios (median per repetition):", "", *(f"- {line}" for line in headline(results).splitlines())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
