#!/usr/bin/env python3
"""Build the demo's two upstream repositories from demo/ as git bundles, and pin them.

Reads (demo/README.md says more):

  demo/<upstream>/                           the source tree at the commit the manifest pins
  demo/history/<upstream>/root.mail          the first commit: author, date, message (no diff)
  demo/history/<upstream>/before-pin/*.patch the commits after the first, up to the pin
  demo/history/<upstream>/after-pin/*.patch  the commits after the pin (for zmr upstreamed/rebase)

and writes, under --out (default: the repository root):

  upstreams/<upstream>.bundle   branch main and HEAD, the whole history
  manifests/demo.yaml           the repository's manifest with each component's `commit:` set to its pin
  manifests/demo-moe.yaml       the MoE demo's, each `commit:` set to the upstream's main (the MoE commits
                                are the last after-pin mails), where that manifest exists

For each upstream: copy the tree, reverse-apply the before-pin mails newest first
to reach the first commit's tree, commit it, `git am` the before-pin mails (which
must give the tree folder back exactly), then the after-pin mails. An upstream has
one author, who also commits, at each commit's author date; git runs isolated from
user and system configuration, so the commit ids are the same on every machine.
An unchanged output file is not rewritten (nor is a bundle whose refs already
point at the same commits).

The demo's own series (patches/demo/) is not generated: it is edited with
`zmr checkout` / `zmr export` like any model's.

  python scripts/make_demo.py             # regenerate in the repository
  python scripts/make_demo.py --out DIR   # somewhere else
  python scripts/make_demo.py --check     # exit 1 if the repository differs
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
MANIFEST = "manifests/demo.yaml"
MOE_MANIFEST = "manifests/demo-moe.yaml"  # pinned at each upstream's main: the MoE commits come last
UPSTREAMS = {"rollout": "toy-rollout", "trainer": "toy-trainer"}  # manifest component -> upstream

GIT_OPTS = [
    "-c", "init.defaultBranch=main",
    "-c", "core.autocrlf=false",
    "-c", "core.fileMode=true",
    "-c", "commit.gpgSign=false",
    "-c", "pack.threads=1",
    "-c", "am.threeWay=false",
]


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0",
               HOME=str(home), LC_ALL="C", LANG="C", TZ="UTC")
    return env


def git(cwd: Path, *args: str, env: dict[str, str], input: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(["git", *GIT_OPTS, *args], cwd=cwd, env=env, input=input, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def build_upstream(name: str, work: Path, env: dict[str, str]) -> tuple[Path, str]:
    """Build upstream *name* in work/name; return the repository and the pinned commit."""
    history = DEMO / "history" / name
    before = sorted((history / "before-pin").glob("*.patch"))
    after = sorted((history / "after-pin").glob("*.patch"))
    repo = work / name
    shutil.copytree(DEMO / name, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"))
    git(repo, "init", "-q", env=env)
    git(repo, "add", "-A", env=env)
    pin_tree = git(repo, "write-tree", env=env).strip()
    for mail in reversed(before):
        git(repo, "apply", "-R", "--index", str(mail), env=env)

    (work / "msg").unlink(missing_ok=True)
    info = git(repo, "mailinfo", str(work / "msg"), str(work / "diff"), env=env,
               input=(history / "root.mail").read_text(encoding="utf-8"))
    head = dict(line.split(": ", 1) for line in info.splitlines() if line)
    env = dict(env, GIT_AUTHOR_NAME=head["Author"], GIT_AUTHOR_EMAIL=head["Email"], GIT_AUTHOR_DATE=head["Date"],
               GIT_COMMITTER_NAME=head["Author"], GIT_COMMITTER_EMAIL=head["Email"], GIT_COMMITTER_DATE=head["Date"])
    message = head["Subject"] + "\n\n" + (work / "msg").read_text(encoding="utf-8")
    git(repo, "commit", "-q", "--no-verify", "--cleanup=verbatim", "-F", "-", env=env, input=message)

    am = ["am", "-q", "--no-3way", "--committer-date-is-author-date"]
    if before:
        git(repo, *am, *map(str, before), env=env)
    if git(repo, "rev-parse", "HEAD^{tree}", env=env).strip() != pin_tree:
        raise SystemExit(f"demo/history/{name}/before-pin does not lead from the first commit to demo/{name}/")
    pin = git(repo, "rev-parse", "HEAD", env=env).strip()
    if after:
        git(repo, *am, *map(str, after), env=env)
    return repo, pin


def write_if_changed(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def bundle_heads(path: Path, env: dict[str, str]) -> str:
    return git(path.parent, "bundle", "list-heads", str(path), env=env, check=False) if path.exists() else ""


def pin_manifest(text: str, pins: dict[str, str]) -> str:
    """*text* with the `commit:` line of each component in *pins* set to its pin."""
    lines, component = [], None
    for line in text.splitlines(keepends=True):
        m = re.match(r"^  ([a-z0-9][a-z0-9-]*):\s*$", line)
        if m:
            component = m.group(1)
        elif component in pins and re.match(r"^    commit:", line):
            line = f"    commit: {pins[component]}\n"
        lines.append(line)
    return "".join(lines)


def generate(out: Path, quiet: bool = False) -> None:
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="zmr-make-demo-") as tmpdir:
        work = Path(tmpdir)
        (work / "home").mkdir()
        env = git_env(work / "home")
        pins, mains = {}, {}
        for component, name in UPSTREAMS.items():
            repo, pins[component] = build_upstream(name, work, env)
            mains[component] = git(repo, "rev-parse", "main", env=env).strip()
            bundle, tmp = out / "upstreams" / f"{name}.bundle", work / f"{name}.bundle"
            git(repo, "bundle", "create", "-q", str(tmp), "HEAD", "main", env=env)
            if bundle_heads(bundle, env) != bundle_heads(tmp, env):
                bundle.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tmp, bundle)
            if not quiet:
                print(f"{component}: pin {pins[component]}, upstream main {mains[component]}")
    for rel, commits in ((MANIFEST, pins), (MOE_MANIFEST, mains)):
        if rel == MANIFEST or (ROOT / rel).exists():
            manifest = pin_manifest((ROOT / rel).read_text(encoding="utf-8"), commits)
            write_if_changed(out / rel, manifest.encode("utf-8"))


def check(root: Path) -> int:
    """Regenerate into a temporary folder and compare with *root*: bundle refs and manifest bytes; 0 if equal."""
    with tempfile.TemporaryDirectory(prefix="zmr-make-demo-check-") as tmpdir:
        tmp = Path(tmpdir)
        generate(tmp / "out", quiet=True)
        env = git_env(tmp)
        bad = []
        for name in UPSTREAMS.values():
            rel = f"upstreams/{name}.bundle"
            if bundle_heads(root / rel, env) != bundle_heads(tmp / "out" / rel, env):
                bad.append(rel)
        for rel in (MANIFEST, MOE_MANIFEST):
            fresh = tmp / "out" / rel
            if fresh.exists() and (not (root / rel).exists() or (root / rel).read_bytes() != fresh.read_bytes()):
                bad.append(rel)
    for rel in bad:
        print(f"differs: {rel} (run python scripts/make_demo.py)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repository)")
    p.add_argument("--check", action="store_true", help="compare a fresh generation with --out; exit 1 on difference")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.check:
        return check(args.out.resolve())
    generate(args.out, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
