"""`zmr mismatch`: compare rollout and trainer log-prob dumps.

Parses arguments and renders; the work is `zmr.evidence.mismatch` (imported inside
the command, so `zmr --help` never loads numpy). A terminal gets a rich
table, a pipe plain text, `--json` the report's JSON on stdout.
"""

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zmr.cli.options import Json
from zmr.cli.render import print_report
from zmr.infra.wording import counted, verb

if TYPE_CHECKING:  # pragma: no cover
    from zmr.evidence.mismatch import MismatchReport, Stats

_COLUMNS = (
    "step",
    "tokens",
    "bitwise",
    "max |Δ|",
    "mean |Δ|",
    "k1",
    "k3",
    "ratio max",
    "diverged",
)
_LISTED = 10


def mismatch(
    rollout: Annotated[Path, typer.Argument(metavar="ROLLOUT", help="Log-prob dump of the rollout engine (.jsonl, .npz, .safetensors).")],
    trainer: Annotated[Path, typer.Argument(metavar="TRAINER", help="Log-prob dump of the trainer, same (step, id) pairs.")],
    json_out: Json = False,
    plot: Annotated[Path | None, typer.Option("--plot", metavar="FILE", help="Write a PNG of per-step max |Δ| and k3.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 unless every token is bitwise equal.")] = False,
    require_zero: Annotated[bool, typer.Option("--require-zero", hidden=True, help="The old name of --check.")] = False,
) -> None:
    """Compare rollout and trainer log-probs, bit for bit, per step and overall."""
    import zmr.evidence.mismatch
    from zmr.infra.errors import CheckFailed

    report = zmr.evidence.mismatch.compare(zmr.evidence.mismatch.read_dump(rollout), zmr.evidence.mismatch.read_dump(trainer))
    if plot is not None:
        zmr.evidence.mismatch.plot_report(report, plot)
    if json_out:
        print_report(report, allow_nan=False)
    elif sys.stdout.isatty():
        _render_rich(report)
    else:
        _render_plain(report)
    if (check or require_zero) and report.failed():
        raise CheckFailed(f"--check: {report.reason()}")


# --------------------------------------------------------------------------
# Formatting shared by both renderers


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    return f"{x:.{digits}g}"


def _fraction(s: "Stats") -> str:
    if not s.tokens:
        return "-"
    if s.all_bitwise_equal:
        return "100%"
    pct = math.floor(10000 * s.bitwise_equal / s.tokens) / 100  # never rounds up to 100%
    return f"{pct:.2f}%"


def _row(label: str, s: "Stats") -> list[str]:
    return [
        label,
        f"{s.tokens:,}",
        _fraction(s),
        _num(s.max_abs_diff),
        _num(s.mean_abs_diff),
        _num(s.k1),
        _num(s.k3),
        _num(s.ratio_max, 9),
        f"{s.sequences_diverged}/{s.sequences}",
    ]


def _rows(report: "MismatchReport") -> list[list[str]]:
    return [_row(str(s.step), s) for s in report.steps]


def _trees(trees: dict[str, str]) -> str:
    return ", ".join(f"{k}={v[:12]}" for k, v in sorted(trees.items())) or "no commit ids"


def _lines(report: "MismatchReport") -> list[str]:
    """Everything below the table, as plain lines."""
    o = report.overall
    out = [
        (
            f"importance ratio exp(lp_trainer - lp_rollout): max {_num(o.ratio_max, 9)}, "
            f"median {_num(o.ratio_median, 9)}, max/median {_num(o.ratio_max_over_median, 9)}"
        ),
        (
            f"probabilities |exp(lp_trainer) - exp(lp_rollout)|: max {_num(o.probs_diff_max)}, "
            f"mean {_num(o.probs_diff_mean)}, std {_num(o.probs_diff_std)}; "
            f"mean |Δ| per sequence {_num(o.sample_mean_abs_diff)}"
        ),
    ]
    for side, info in (("rollout", report.rollout), ("trainer", report.trainer)):
        out.append(
            f"{side}: {info.path or '-'} ({info.format or 'records'}, {info.records:,} records, "
            f"{info.tokens:,} tokens, {'/'.join(info.dtypes)}; {_trees(info.trees)})"
        )
    for title, items, total in (
        ("signed zeros", report.signed_zeros, o.signed_zero),
        ("NaN tokens", report.nans, report.nan_tokens),
    ):
        if total:
            out.append(f"{title}: {total}")
            for t in items[:_LISTED]:
                out.append(f"  step {t.step} id {t.id} position {t.position}: rollout {t.rollout} ({t.rollout_bits}), trainer {t.trainer} ({t.trainer_bits})")
            if total > min(len(items), _LISTED):
                out.append(f"  ... and {total - min(len(items), _LISTED)} more (--json lists up to {len(items)})")
    diverged = [q for q in report.sequences if q.first_diverging is not None]
    if diverged:
        out.append(f"first diverging position ({len(diverged)} of {len(report.sequences)} sequences):")
        for q in diverged[:_LISTED]:
            out.append(
                f"  step {q.step} id {q.id}: position {q.first_diverging} of {q.tokens}, "
                f"{counted(q.tokens - q.bitwise_equal, 'token')} {verb(q.tokens - q.bitwise_equal, 'differs', 'differ')}, max |Δ| {_num(q.max_abs_diff)}"
            )
        if len(diverged) > _LISTED:
            out.append(f"  ... and {len(diverged) - _LISTED} more (--json lists all)")
    for note in report.notes:
        out.append(f"note: {note}")
    out.append(_verdict(report))
    return out


def _verdict(report: "MismatchReport") -> str:
    o = report.overall
    if report.bitwise_equal:
        return f"verdict: bitwise equal, all {o.tokens:,} tokens in {counted(len(report.steps), 'step')}"
    return f"verdict: NOT bitwise equal, {o.tokens - o.bitwise_equal:,} of {o.tokens:,} tokens differ in {o.sequences_diverged} of {o.sequences} sequences"


def _render_plain(report: "MismatchReport") -> None:
    rows = [list(_COLUMNS), *_rows(report), _row("all", report.overall)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        print("  ".join(cells).rstrip())
        if n == len(rows) - 2:
            print("  ".join("-" * w for w in widths))
    for line in _lines(report):
        print(line)


def _render_rich(report: "MismatchReport") -> None:
    from rich import box
    from rich.table import Table

    from zmr.cli import render

    console = render.console()
    table = Table(
        title="zmr mismatch: rollout vs trainer log-probs",
        box=box.SIMPLE_HEAD,
        padding=0,
        pad_edge=False,
        show_edge=False,  # one blank between columns: fits 80
    )
    for i, name in enumerate(_COLUMNS):
        table.add_column(name, justify="left" if i == 0 else "right", overflow="fold")
    for r in _rows(report):
        table.add_row(*r)
    table.add_section()
    table.add_row(*_row("all", report.overall), style="bold")
    console.print(table)
    lines = _lines(report)
    for line in lines[:-1]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(lines[-1], markup=False, highlight=False, soft_wrap=True, style="bold green" if report.bitwise_equal else "bold red")
