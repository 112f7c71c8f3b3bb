"""`zmr locate`: the first operation whose output differs between rollout and trainer tensor dumps.

Parses arguments and renders; the work is `zmr.evidence.locate`, imported inside the
command so that `zmr --help` does not load numpy.
"""

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Json
from zmr.cli.render import print_report, table

if TYPE_CHECKING:  # pragma: no cover
    from zmr.evidence.locate import LocateReport

_TABLE_LIMIT = 40


def locate(
    rollout: Annotated[
        Path,
        typer.Argument(
            metavar="ROLLOUT_DUMP", help="The rollout side's tensor dump: a folder of step-*.safetensors (zmr.evidence.locate.Recorder) or one step file."
        ),
    ],
    trainer: Annotated[Path, typer.Argument(metavar="TRAINER_DUMP", help="The trainer side's tensor dump, on the same tokens.")],
    name_map: Annotated[
        Path | None, typer.Option("--map", metavar="FILE", help="YAML or JSON name map, when the two sides name operations differently.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", help="Operations shown after the first divergence (0: all); --json lists all.")] = _TABLE_LIMIT,
    json_out: Json = False,
) -> None:
    """First operation whose output differs in any bit between rollout and trainer. Exit 1 when one is found."""
    import zmr.evidence.locate

    report = zmr.evidence.locate.locate(rollout, trainer, name_map)
    if json_out:
        print_report(report, allow_nan=False)
    else:
        _render(report, limit)
    if report.failed():
        from zmr.infra.errors import CheckFailed

        raise CheckFailed(report.reason())


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if x == 0:
        return "0"
    return f"{x:.3g}"


def _render(report: "LocateReport", limit: int) -> None:
    r, t = report.rollout, report.trainer
    print(f"rollout: {r.path} ({r.files} steps, {r.records} records, {r.ops} operations)")
    print(f"trainer: {t.path} ({t.files} steps, {t.records} records, {t.ops} operations)")
    print(f"rows paired: {r.rows} (sequence id, position); operations in both: {len(report.ops)}")
    f = report.first
    if f is None:
        rows = sum(o.rows for o in report.ops)
        print(f"no divergence: every output of {len(report.ops)} operations is bitwise equal ({rows} row comparisons)")
    else:
        print()
        before = "the first one" if f.order == 0 else f"the {f.order} before it {'is' if f.order == 1 else 'are'} bitwise equal"
        print(f"first divergence: {f.op}  (operation {f.order + 1} of {len(report.ops)} in execution order; {before})")
        print(
            f"  rollout: {f.rollout_name}"
            + (f" at {f.rollout_site}" if f.rollout_site else "")
            + f", step {f.rollout_step}"
            + (f" ({f.rollout_label})" if f.rollout_label else "")
        )
        print(
            f"  trainer: {f.trainer_name}"
            + (f" at {f.trainer_site}" if f.trainer_site else "")
            + f", step {f.trainer_step}"
            + (f" ({f.trainer_label})" if f.trainer_label else "")
        )
        token = f", token {f.token}" if f.token is not None else ""
        print(f"  row:     sequence {f.seq_id!r}, position {f.position}{token}")
        where = f"[{', '.join(map(str, f.element))}] of {list(f.row_shape)}" if f.row_shape else "the scalar"
        print(
            f"  element: {f.slot} {where}: rollout {f.rollout_value} ({f.rollout_bits}), trainer {f.trainer_value} ({f.trainer_bits})"
            + (f", |Δ| {_num(f.abs_diff)}" if f.abs_diff is not None else "")
            + (f" [{f.kind}]" if f.kind != "value" else "")
        )
        for check in f.inputs:
            extra = f", max |Δ| {_num(check.max_abs_diff)}" if check.max_abs_diff is not None else ""
            how = {"row": "this row", "whole": "whole tensor"}.get(check.how, check.how)
            print(f"  input {check.slot}: {check.status} ({how}{extra})")
        verdict = {
            "equal": "inputs equal: this operation introduces the difference; fix it",
            "differ": "an input already differs: the fault is earlier, in code that was not recorded; record more of it",
            "unknown": "no input could be compared: record the inputs on both sides",
        }[f.inputs_verdict]
        print(f"  verdict: {verdict}")
        first_op = next(o for o in report.ops if o.order == f.order)
        if len(first_op.rows_by_label) > 1 or first_op.rows_differ:
            parts = [f"{k} {v[1]} of {v[0]}" for k, v in first_op.rows_by_label.items()]
            print(f"  differing rows: {first_op.rows_differ} of {first_op.rows}" + (f" (by rollout step: {', '.join(parts)})" if parts else ""))
        print()
        after = report.after_first()
        shown = after if limit <= 0 else after[:limit]
        op_rows = [[o.order + 1, o.name, f"{o.rows_differ}/{o.rows}", _num(o.max_abs_diff), o.introduced or "-"] for o in shown]
        table(
            ["#", "operation", "rows differ", "max |Δ|", "introduced"],
            op_rows,
            title="from the first divergence on (introduced: rows that differ although every input is equal)",
        )
        if len(shown) < len(after):
            print(f"... {len(after) - len(shown)} more (--limit 0 shows all)")
    for label, names in (("rollout", report.only_rollout), ("trainer", report.only_trainer)):
        if names:
            shown_names = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
            print(f"only in {label} (not compared): {shown_names}")
    for note in report.notes:
        print(f"note: {note}")
