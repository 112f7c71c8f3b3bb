#!/usr/bin/env python3
"""The kill harness at full strength: every writing command SIGKILLed at each of its fault points (or N seeded ones), then recovered.

    python scripts/kill_harness.py                 # every point of every command
    python scripts/kill_harness.py --points 10     # 10 seeded points per command (plus each commit point)
    python scripts/kill_harness.py --only export rebase-continue --seed 3
    python scripts/kill_harness.py --random 50     # 50 seeded random instants per command (SIGKILL or SIGHUP of zmr and its git)

What each trial checks: tests/killing.py. Prints, per command, how many
fault points it has and how many were tried; a command whose trial fails is
reported (the first failing kill point) and the others still run; exit 1 then.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import killing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=0, help="seeded kill points per command (0: every point)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--random", type=int, default=0, help="seeded random instants per command instead of fault points (seeds SEED..SEED+N-1)")
    parser.add_argument("--only", nargs="*", default=[], help="scenario names: " + " ".join(s.name for s in killing.SCENARIOS))
    options = parser.parse_args()
    scenarios = [s for s in killing.SCENARIOS if not options.only or s.name in options.only]
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        del os.environ[key]
    total, failed = 0, []
    with tempfile.TemporaryDirectory(prefix="zmr-kill-") as tmp:
        for scenario in scenarios:
            pick = killing.sample(options.points, options.seed) if options.points else killing.every_point
            started = time.monotonic()
            if options.random:
                trials_at = killing.run_random(scenario, Path(tmp), list(range(options.seed, options.seed + options.random)))
                bad = [t for t in trials_at if t.failed]
                total += len(trials_at)
                killed = sum(1 for t in trials_at if t.killed)
                said = sum(1 for t in trials_at if t.recovered)
                print(
                    f"{scenario.name:20} {len(trials_at):4} random instants, {killed:4} killed mid-run ({said} recovered by the next command),"
                    f" {len(bad)} failed, {time.monotonic() - started:6.1f} s",
                    flush=True,
                )
                for t in bad:
                    print(f"  FAILED: {t.failed}", flush=True)
                if bad:
                    failed.append(scenario.name)
                continue
            try:
                points, trials = killing.run_scenario(scenario, Path(tmp), pick)
            except AssertionError as err:
                failed.append(scenario.name)
                print(f"{scenario.name:16} FAILED: {err}", flush=True)
                continue
            total += len(trials)
            finished = sum(1 for t in trials if t.recovered == "finished")
            undone = sum(1 for t in trials if t.recovered == "undone")
            by = f"the next command finished {finished} and undid {undone} half-written changes, the rerun did the rest"
            print(f"{scenario.name:20} {points:4} fault points, {len(trials):4} killed and recovered ({by}), {time.monotonic() - started:6.1f} s", flush=True)
    print(f"{total} kills recovered" + (f"; FAILED: {', '.join(failed)}" if failed else ", none failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
