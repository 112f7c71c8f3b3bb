#!/usr/bin/env python3
"""Step 5 of the skill ("decide"): read a `zmr locate --json` report, look it up in references/decisions.yaml.

    zmr locate ROLLOUT_DUMP TRAINER_DUMP --map names.yaml --json > locate.json
    python skill/scripts/decide.py locate.json [--comparison rollout-vs-trainer] [--json]
    python skill/scripts/decide.py --markdown      # the table as SKILL.md shows it

Prints what to do next: "none" (nothing differs: step 8, prove), "guide" (open the mechanism guide it names,
whose worked example it lists), "record-finer" or "record-inputs" (record more, then locate again).
Exit 0 in every case the table decides; 2 for a file that is not a `zmr locate --json` report, or a
comparison the table does not know. Needs PyYAML (a dependency of zmr) and nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

SKILL = Path(__file__).resolve().parents[1]
TABLE = SKILL / "references" / "decisions.yaml"
DEFAULT_COMPARISON = "rollout-vs-trainer"


def load_table(path: Path = TABLE) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def operation(name: str) -> str:
    """What the rules match: the last dot-separated part of a located operation's name, without its call suffix
    ('model.layers.0.self_attn.o_proj#1' -> 'o_proj')."""
    return re.sub(r"#\d+$", "", name).rsplit(".", 1)[-1]


def guide_for(table: dict, op: str, comparison: str = DEFAULT_COMPARISON) -> str | None:
    """The guide id of the first rule matching *op* (and *comparison*, where the rule names one); None: no rule."""
    for rule in table["rules"]:
        if rule.get("comparison", comparison) != comparison:
            continue
        if re.search(rule["op"], operation(op), flags=re.IGNORECASE):
            return rule["guide"]
    return None


def decide(table: dict, report: dict, comparison: str = DEFAULT_COMPARISON) -> dict:
    """The decision for one `zmr locate --json` report: {"next", "op", "verdict", "guide", "guide_file", "worked_example", "meaning"}."""
    if comparison not in table["comparisons"]:
        raise ValueError(f"comparison {comparison!r} is not one of {', '.join(table['comparisons'])}")
    if report.get("verdict") == "bitwise_equal":
        return {
            "next": "none",
            "op": None,
            "verdict": None,
            "guide": None,
            "guide_file": None,
            "worked_example": None,
            "meaning": "every recorded operation is bitwise equal: go to step 8 (prove)",
        }
    first = report["first"]
    verdict = first["inputs_verdict"]
    row = table["verdicts"][verdict]
    guide = guide_for(table, first["op"], comparison)
    decision = {"next": row["next"], "op": first["op"], "verdict": verdict, "guide": guide, "meaning": row["meaning"]}
    if row["next"] == "guide" and guide is None:
        decision |= {"next": table["fallback"]["next"], "meaning": table["fallback"]["meaning"]}
    decision["guide_file"] = f"skill/references/mechanisms/{guide}.md" if guide else None
    decision["worked_example"] = table["guides"][guide]["worked_example"] if guide else None
    return decision


def markdown(table: dict) -> str:
    """The rules as a Markdown table (SKILL.md, step 5, holds this text between its decisions markers)."""
    lines = ["| located operation (last name part, regular expression) | comparison | guide | worked example |", "| --- | --- | --- | --- |"]
    for rule in table["rules"]:
        example = table["guides"][rule["guide"]]["worked_example"] or {}
        shown = (
            ", ".join(Path(p).name[:4] + f" ({Path(p).parent.name})" for p in example.get("patches", []))
            or ", ".join(example.get("files", []))
            or "none here yet"
        )
        op = rule["op"].replace("|", "\\|")
        lines.append(f"| `{op}` | {rule.get('comparison', 'any')} | [{rule['guide']}](references/mechanisms/{rule['guide']}.md) | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", nargs="?", help="the output of `zmr locate ... --json` (a file, or - for standard input)")
    p.add_argument("--markdown", action="store_true", help="print the decision table as Markdown and exit")
    p.add_argument("--comparison", default=DEFAULT_COMPARISON, help=f"what the two dumps compare (default {DEFAULT_COMPARISON})")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    args = p.parse_args(argv)
    table = load_table()
    if args.markdown:
        sys.stdout.write(markdown(table))
        return 0
    if args.report is None:
        p.error("give the report of `zmr locate --json` (or --markdown)")
    try:
        text = sys.stdin.read() if args.report == "-" else Path(args.report).read_text(encoding="utf-8")
        report = json.loads(text)
        if "verdict" not in report or (report["verdict"] != "bitwise_equal" and "inputs_verdict" not in (report.get("first") or {})):
            raise ValueError("no verdict: not the output of `zmr locate --json`")
        decision = decide(table, report, args.comparison)
    except (OSError, ValueError) as err:
        print(f"decide.py: error: {args.report}: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(decision, indent=2))
        return 0
    if decision["next"] == "none":
        print(f"no divergence: {decision['meaning']}")
        return 0
    print(f"first divergence: {decision['op']} (inputs {decision['verdict']})")
    print(f"next: {decision['next']}: {decision['meaning']}")
    if decision["guide"]:
        print(f"guide: {decision['guide_file']}" + ("" if decision["next"] == "guide" else " (the suspect, once confirmed)"))
        example = decision["worked_example"] or {}
        if example.get("patches"):
            print("worked example (apply the needs first; each side's patches in series order):")
        for key, label in (("needs", "needs"), ("patches", "fix"), ("files", "case")):
            for path in example.get(key, []):
                print(f"  {label:<5}  {path}")
        if not example:
            print("worked example: none here yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
