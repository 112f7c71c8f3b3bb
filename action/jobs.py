"""Tab-separated lines for the action's shell steps, from zmr's JSON on standard input.

smoke: `zmr ci-matrix` -> model, component, smoke_args (the tests that need no GPU), for jobs that have some.
moves: `zmr update --json` -> model, component, 1 if the pin moves, the blocking patch's author email, the patch, 1 if a check
  ran for it (update-check --smoke leaves a component without smoke tests unchecked: its move is applied without one).
push BRANCH COMMIT BASE EMAIL: push the weekly pull request's branch (zmr.ops.publish.push_update_branch) to origin; exit 3,
  saying why, when the branch holds commits someone else pushed (nothing is pushed then).
upstreamed: `zmr upstreamed --json` -> an ::error:: line per patch that landed upstream; exit 1 when any did.
"""

import json
import sys


def push(branch: str, commit: str, base: str, email: str) -> int:
    from zmr.infra import git
    from zmr.infra.errors import ZmrError
    from zmr.ops.publish import REFUSED, push_update_branch

    repo = git.Repo.at(".")
    try:
        done = push_update_branch(repo, "origin", branch, repo.resolve(commit) or commit, repo.resolve(base) or base, email)
    except ZmrError as err:
        print(f"{err.message}: " + "; ".join(err.details))
        return 2
    print(done.message("origin"))
    return 3 if done.status == REFUSED else 0


def main(kind: str) -> int:
    if kind == "push":
        return push(*sys.argv[2:6])
    report = json.load(sys.stdin)
    if kind == "smoke":
        for job in report["include"]:
            if job["smoke_args"]:
                print(job["model"], job["component"], job["smoke_args"], sep="\t")
    elif kind == "moves":
        for comp in report["components"]:
            blocked = comp.get("blocked_by") or {}
            moves = "1" if comp["status"] in ("clean", "partial") else "0"
            checked = "1" if comp.get("check") is not None else "0"
            print(comp["model"], comp["component"], moves, blocked.get("author_email") or "-", blocked.get("patch") or "-", checked, sep="\t")
    elif kind == "upstreamed":
        landed = 0
        for comp in report.get("components", []):
            for patch in comp.get("upstreamed", []):
                landed += 1
                where = patch.get("upstream_commit") or "commit not identified"
                name = f"{comp['model']}/{comp['component']}"
                print(f"::error::{name}: {patch['name']} ({patch.get('subject', '')}) landed upstream in {where}; drop it with zmr rebase")
        return 1 if landed else 0
    else:
        print(f"jobs.py: unknown kind {kind!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
