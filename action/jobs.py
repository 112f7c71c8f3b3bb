"""Tab-separated lines for the action's shell steps, from zmr's JSON on standard input.

smoke: `zmr ci-matrix` -> model, component, smoke_args (the tests that need no GPU), for jobs that have some.
moves: `zmr update --json` -> model, component, 1 if the pin moves, the blocking patch's author email, the patch.
upstreamed: `zmr upstreamed --json` -> an ::error:: line per patch that landed upstream; exit 1 when any did.
"""

import json
import sys


def main(kind: str) -> int:
    report = json.load(sys.stdin)
    if kind == "smoke":
        for job in report["include"]:
            if job["smoke_args"]:
                print(job["model"], job["component"], job["smoke_args"], sep="\t")
    elif kind == "moves":
        for comp in report["components"]:
            blocked = comp.get("blocked_by") or {}
            moves = "1" if comp["status"] in ("clean", "partial") else "0"
            print(comp["model"], comp["component"], moves, blocked.get("author_email") or "-", blocked.get("patch") or "-", sep="\t")
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
