#!/usr/bin/env python3
"""Time ``zmr import --find-base``'s search (``zmr.importing.findbase.find_base``) on a real upstream history.

    python scripts/bench_findbase.py --upstream PATH [--name NAME] [--age-days 400] [--repeat 3] [--out benchmarks/results-findbase.md]

PATH is a git repository (bare or not). Its branches and tags are fetched
into a scratch repository that borrows PATH's objects (alternates), under
``refs/zmr/heads/*`` and ``refs/zmr/tags/*`` as in a zmr history mirror.
The snapshot is the tree of the first first-parent commit of ``main`` (or
HEAD) at least ``--age-days`` older than the tip, plus one added file and
one edited README: a fork made long ago. The search must name that commit;
300 candidates picked at random are checked against a direct ``git
diff-tree`` of their trees. Wall and CPU seconds (zmr and its git
processes) are reported; on a loaded machine, CPU seconds are the figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zmr.infra import git  # noqa: E402
from zmr.importing.findbase import find_base, tree_distances  # noqa: E402


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _snapshot(repo: git.Repo, base: str, scratch: Path) -> str:
    """*base*'s tree plus a new file and an edited README.md (written into *repo*'s object store)."""
    env = {"GIT_INDEX_FILE": str(scratch / "index")}
    repo.run(["read-tree", base], env=env)
    added = repo.run(["hash-object", "-w", "--stdin"], input=b"KDA = 1\n").stdout.decode().strip()
    repo.run(["update-index", "--add", "--cacheinfo", f"100644,{added},zmr_bench_added.py"], env=env)
    readme = repo.run(["cat-file", "blob", f"{base}:README.md"], check=False).stdout + b"\nforked\n"
    edited = repo.run(["hash-object", "-w", "--stdin"], input=readme).stdout.decode().strip()
    repo.run(["update-index", "--add", "--cacheinfo", f"100644,{edited},README.md"], env=env)
    return repo.out(["write-tree"], env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, type=Path)
    parser.add_argument("--age-days", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--name", help="The upstream's name in the report (default: the folder's name).")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    source = git.Repo(args.upstream / ".git" if (args.upstream / ".git").exists() else args.upstream)
    with tempfile.TemporaryDirectory(prefix="zmr-findbase-") as tmp:
        scratch = Path(tmp)
        git.run(["init", "-q", "--bare", str(scratch / "mirror.git")])
        (scratch / "mirror.git/objects/info/alternates").write_text(str(Path(source.git_dir).resolve() / "objects") + "\n")
        repo = git.Repo(scratch / "mirror.git")
        repo.run(["fetch", "-q", str(source.git_dir), "+refs/heads/*:refs/zmr/heads/*", "+refs/tags/*:refs/zmr/tags/*"])
        tip = repo.resolve("refs/zmr/heads/main") or repo.resolve("HEAD")
        assert tip, "no main branch and no HEAD"
        tip_time = int(repo.out(["log", "-1", "--format=%ct", tip]))
        line = repo.out(["log", "--first-parent", "--format=%H %ct", tip]).splitlines()
        base = next(c for c, ct in (row.split() for row in line) if int(ct) <= tip_time - args.age_days * 86400)
        snapshot = _snapshot(repo, base, scratch)
        runs = []
        for _ in range(args.repeat):
            started, cpu = time.monotonic(), _cpu()
            search = find_base(repo, snapshot)
            runs.append((time.monotonic() - started, _cpu() - cpu))
        assert search.best is not None and search.best.commit == base, (search.best, base)
        sample = random.Random(0).sample(list(search.candidates), min(300, len(search.candidates)))
        trees = [repo.out(["rev-parse", f"{c.commit}^{{tree}}"]) for c in sample]
        agree = sum(d == c.distance for d, c in zip(tree_distances(repo, trees, snapshot), sample))
        assert agree == len(sample), f"{agree} of {len(sample)} distances agree with diff-tree"
        paths = len(repo.out(["ls-tree", "-r", "--name-only", snapshot]).splitlines())
        base_date = repo.out(["log", "-1", "--format=%cs", base])
    wall = statistics.median(r[0] for r in runs)
    cpu_s = statistics.median(r[1] for r in runs)
    lines = [
        "# zmr import --find-base: the search",
        "",
        f"Upstream: {args.name or args.upstream.name} (a local copy; branches and tags as a zmr history mirror holds them), tip {tip[:12]}; "
        f"snapshot: the tree of {base[:12]} ({base_date}, the first main commit {args.age_days} days before the tip) plus 2 changed paths, "
        f"{paths} paths in all. Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, Python {platform.python_version()}, "
        f"{git.out(['--version'])}.",
        "",
        "| first-parent commits searched | found | wall (s, median of %d) | CPU (s, median) |" % args.repeat,
        "| ---: | --- | ---: | ---: |",
        f"| {len(search.candidates)} | {base[:12]}, {search.best.distance} paths differ | {wall:.2f} | {cpu_s:.2f} |",
        "",
        "Closest five: " + "; ".join(search.lines()) + ".",
        f"{len(sample)} candidates at random: their distances equal a direct `git diff-tree` of their trees.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
