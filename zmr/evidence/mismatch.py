"""Log-prob dumps and the rollout/trainer mismatch report (docs/reference.md §10).

The pipeline: `read_dump` (`zmr.evidence.dumps.logprobs`) turns a file into a `Dump`
of `DumpRecord`s whose log-probs are exact (every bit of the engine's value
is kept); `compare`
pairs the records of two dumps by (`step`, `id`), refuses when they do not
line up, and computes a `MismatchReport`; `MismatchReport.to_json` gives the
machine-readable form and `plot_report` the per-step figure. `write_dump` is
the writer for engines and tests; it and the other dump names are handed on
from `zmr.evidence.dumps` so ``from zmr.evidence.mismatch import write_dump`` keeps working. Nothing here prints; numpy (and, for
`plot_report`, matplotlib) is imported inside the functions, never at import
time, so `zmr --help` stays instant and torch is never imported by zmr.

The dump formats are `zmr.evidence.dumps.logprobs`'s; the bits, `zmr.evidence.dumps.bits`'s.

Bitwise
-------
Values are held as float64 obtained from the engine's dtype by an exact,
injective widening done in integer arithmetic (NaN payloads and the
signalling bit survive, subnormals survive even where the CPU flushes them),
so two values are bitwise equal exactly when their float64 bits are equal:
for two dumps of the same dtype that is "the engine's bits are equal".
`-0.0` against `0.0` is not equal; NaNs are equal only with identical bits.
Both are also counted and listed on their own. A NaN or infinity on either
side leaves that token out of the numeric figures (it is counted as
`nonfinite`); it still counts for the bitwise verdict.

Figures (per step and overall), with d = lp_trainer - lp_rollout per token
---------------------------------------------------------------------------
- `tokens`, `bitwise_equal`, `fraction_bitwise_equal`, `sequences`,
  `sequences_diverged` (sequences with at least one token not bitwise equal),
  `signed_zero`, `nan_mismatch` (not equal, NaN on a side), `nonfinite`,
  `finite_pairs` (the tokens the figures below are computed over).
- `max_abs_diff`, `mean_abs_diff`: max and mean of |d|.
- `k1` = mean(lp_rollout - lp_trainer) = mean(-d); it can cancel to zero
  while tokens differ, so the verdict is always bitwise, never k1.
- `k3` = mean(exp(d) - 1 - d) (computed without cancellation).
- `ratio_max`, `ratio_median`, `ratio_max_over_median` of exp(d).
- `probs_diff_max`, `probs_diff_mean`, `probs_diff_std` of
  |exp(lp_trainer) - exp(lp_rollout)|; the std divides by n - 1 like
  `torch.std`.
- `sample_mean_abs_diff`: mean over sequences of each sequence's mean |d|.
All in float64; a figure over no tokens is null. In `to_json`, an infinite
or NaN figure is the string `"inf"`, `"-inf"` or `"nan"`.

`aliases` (in `to_json`, per step and overall) repeat figures under the
names RL frameworks log, to hold zmr's numbers against a dashboard:
`training/rollout_probs_diff_{max,mean,std}` (verl) = `probs_diff_*`;
`rollout_corr/k3_kl` (verl) = `k3`; `rollout_corr/kl` (verl) = `k1`;
`train/train_rollout_logprob_abs_diff` (slime) = `sample_mean_abs_diff`.
verl and slime compute in the tensors' dtype, zmr in float64, so the last
digits can differ.

Report JSON (`zmr mismatch --json`: `zmr.infra.reports.envelope(report)`), schema_version 3
------------------------------------------------------------------------------------
- the envelope: `tool` ("zmr"), `zmr` (its version), `schema_version` (3; 2 had `tool` {`name`, `version`}; 1 named
  the trainer side `train`); then `MismatchReport.to_json`'s keys: `verdict`
  ("bitwise_equal" or "mismatch"), `bitwise_equal` (bool).
- `rollout`, `trainer`: {`path`, `format`, `records`, `tokens`, `dtypes`,
  `trees` (component -> commit id, from the provenance; {} when the dump has
  none), `provenance` (verbatim, or null)}.
- `overall`: every figure above, `all_bitwise_equal`, `aliases`.
- `steps`: [{`step`, the same keys as `overall`}], ascending.
- `sequences`: [{`step`, `id`, `tokens`, `bitwise_equal`,
  `first_diverging` (position, or null), `max_abs_diff`, `mean_abs_diff`}].
- `signed_zero_tokens`: {`count`, `listed`}; `nan_tokens`: {`count`,
  `not_bitwise_equal`, `listed`}; a listed token is {`kind`, `step`, `id`,
  `position`, `rollout`, `trainer` (values in dump notation), `rollout_bits`,
  `trainer_bits` (hex, in each dump's dtype)}; at most 100 are listed.
- `notes`: sentences for a human (dtypes differ, commits differ, k1
  cancelled, ...).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast
from zmr.infra.wording import counted, verb

# The dump side, handed on: engines, templates and scripts import these from zmr.evidence.mismatch.
from zmr.evidence.dumps.bits import DTYPES, Figure, format_value, json_number, narrow_bits, native_hex, numpy, widen_bits
from zmr.evidence.dumps.logprobs import FORMAT_VERSION, MAX_LISTED_ERRORS, Dump, DumpRecord, make_record, read_dump, write_dump, write_rendered
from zmr.infra.errors import ZmrError
from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from numpy import ndarray  # for annotations inside functions that bind a local `np`

__all__ = [
    "ALIASES",
    "DTYPES",
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "Dump",
    "DumpInfo",
    "DumpRecord",
    "MismatchReport",
    "SequenceResult",
    "SpecialToken",
    "StepStats",
    "Stats",
    "compare",
    "format_value",
    "make_record",
    "narrow_bits",
    "plot_report",
    "read_dump",
    "widen_bits",
    "write_dump",
]


SCHEMA_VERSION = 3
"""`schema_version` of `MismatchReport.to_json`; bump it when a key changes meaning or goes away.

3: `tool` is "zmr" and `zmr` the version (2: `tool` {`name`, `version`}).
2: the trainer side's keys are `trainer` and `trainer_bits` (1: `train`, `train_bits`).
"""

ALIASES = {
    "training/rollout_probs_diff_max": "probs_diff_max",
    "training/rollout_probs_diff_mean": "probs_diff_mean",
    "training/rollout_probs_diff_std": "probs_diff_std",
    "rollout_corr/k3_kl": "k3",
    "rollout_corr/kl": "k1",
    "train/train_rollout_logprob_abs_diff": "sample_mean_abs_diff",
}
"""Framework metric name -> `Stats` field (see the module docstring)."""


@dataclass(frozen=True)
class Stats:
    """Figures over a set of token pairs; see "Figures" in the module doc."""

    tokens: int
    bitwise_equal: int
    fraction_bitwise_equal: float | None
    sequences: int
    sequences_diverged: int
    signed_zero: int
    nan_mismatch: int
    nonfinite: int
    finite_pairs: int
    max_abs_diff: float | None
    mean_abs_diff: float | None
    k1: float | None
    k3: float | None
    ratio_max: float | None
    ratio_median: float | None
    ratio_max_over_median: float | None
    probs_diff_max: float | None
    probs_diff_mean: float | None
    probs_diff_std: float | None
    sample_mean_abs_diff: float | None

    @property
    def all_bitwise_equal(self) -> bool:
        return self.bitwise_equal == self.tokens

    def aliases(self) -> dict[str, float | None]:
        return {name: getattr(self, attr) for name, attr in ALIASES.items()}


@dataclass(frozen=True)
class StepStats(Stats):
    """`Stats` of the sequences of one step."""

    step: int = 0


@dataclass(frozen=True)
class SequenceResult:
    """One paired sequence: `first_diverging` is the first position whose bits differ, or None."""

    step: int
    id: str
    tokens: int
    bitwise_equal: int
    first_diverging: int | None
    max_abs_diff: float | None
    mean_abs_diff: float | None


@dataclass(frozen=True)
class SpecialToken:
    """A token listed on its own: `kind` is "signed_zero" or "nan"; values in dump notation."""

    kind: str
    step: int
    id: str
    position: int
    rollout: str
    trainer: str
    rollout_bits: str
    trainer_bits: str


@dataclass(frozen=True)
class DumpInfo:
    """What the report says about one input."""

    path: str | None
    format: str | None
    records: int
    tokens: int
    dtypes: tuple[str, ...]
    provenance: dict[str, Any] | None
    trees: dict[str, str]


class StatsJson(TypedDict):
    """Figures over a set of token pairs (see "Figures" in the module doc), with the names RL frameworks log (*aliases*)."""

    tokens: int
    bitwise_equal: int
    fraction_bitwise_equal: Figure
    sequences: int
    sequences_diverged: int
    signed_zero: int
    nan_mismatch: int
    nonfinite: int
    finite_pairs: int
    max_abs_diff: Figure
    mean_abs_diff: Figure
    k1: Figure
    k3: Figure
    ratio_max: Figure
    ratio_median: Figure
    ratio_max_over_median: Figure
    probs_diff_max: Figure
    probs_diff_mean: Figure
    probs_diff_std: Figure
    sample_mean_abs_diff: Figure
    all_bitwise_equal: bool
    aliases: dict[str, Figure]


class _StepKeyJson(TypedDict):
    step: int


class StepStatsJson(_StepKeyJson, StatsJson):
    """The figures of the sequences of one step."""


class SequenceJson(TypedDict):
    """One sequence: its step and id, its tokens and how many are bitwise equal, the first position that differs (null:
    none), and the largest and mean |Δ|."""

    step: int
    id: str
    tokens: int
    bitwise_equal: int
    first_diverging: int | None
    max_abs_diff: Figure
    mean_abs_diff: Figure


class SpecialTokenJson(TypedDict):
    """A listed token (a signed zero, a NaN): the values in dump notation and their bits (hex, in each dump's dtype)."""

    kind: str
    step: int
    id: str
    position: int
    rollout: str
    trainer: str
    rollout_bits: str
    trainer_bits: str


class DumpInfoJson(TypedDict):
    """A dump: its file and format (null: given in memory), records, tokens and dtypes, the commit of each component its
    provenance names (*trees*: {} when it has none) and the provenance itself, verbatim (null: none)."""

    path: str | None
    format: str | None
    records: int
    tokens: int
    dtypes: list[str]
    trees: dict[str, str]
    provenance: dict[str, Any] | None


class SignedZerosJson(TypedDict):
    count: int
    listed: list[SpecialTokenJson]


class NanTokensJson(TypedDict):
    count: int
    not_bitwise_equal: int
    listed: list[SpecialTokenJson]


class MismatchJson(TypedDict):
    """The verdict (bitwise_equal or mismatch), both dumps, the figures overall, per step and per sequence, the signed
    zeros and NaNs (at most 100 listed of each), and notes for a human."""

    verdict: Literal["bitwise_equal", "mismatch"]
    bitwise_equal: bool
    rollout: DumpInfoJson
    trainer: DumpInfoJson
    overall: StatsJson
    steps: list[StepStatsJson]
    sequences: list[SequenceJson]
    signed_zero_tokens: SignedZerosJson
    nan_tokens: NanTokensJson
    notes: list[str]


def _stats_json(s: Stats) -> StatsJson:
    n = json_number
    return {
        "tokens": s.tokens,
        "bitwise_equal": s.bitwise_equal,
        "fraction_bitwise_equal": n(s.fraction_bitwise_equal),
        "sequences": s.sequences,
        "sequences_diverged": s.sequences_diverged,
        "signed_zero": s.signed_zero,
        "nan_mismatch": s.nan_mismatch,
        "nonfinite": s.nonfinite,
        "finite_pairs": s.finite_pairs,
        "max_abs_diff": n(s.max_abs_diff),
        "mean_abs_diff": n(s.mean_abs_diff),
        "k1": n(s.k1),
        "k3": n(s.k3),
        "ratio_max": n(s.ratio_max),
        "ratio_median": n(s.ratio_median),
        "ratio_max_over_median": n(s.ratio_max_over_median),
        "probs_diff_max": n(s.probs_diff_max),
        "probs_diff_mean": n(s.probs_diff_mean),
        "probs_diff_std": n(s.probs_diff_std),
        "sample_mean_abs_diff": n(s.sample_mean_abs_diff),
        "all_bitwise_equal": s.all_bitwise_equal,
        "aliases": {k: n(v) for k, v in s.aliases().items()},
    }


def _special_json(t: SpecialToken) -> SpecialTokenJson:
    return {
        "kind": t.kind,
        "step": t.step,
        "id": t.id,
        "position": t.position,
        "rollout": t.rollout,
        "trainer": t.trainer,
        "rollout_bits": t.rollout_bits,
        "trainer_bits": t.trainer_bits,
    }


def _dump_json(d: DumpInfo) -> DumpInfoJson:
    return {
        "path": d.path,
        "format": d.format,
        "records": d.records,
        "tokens": d.tokens,
        "dtypes": list(d.dtypes),
        "trees": dict(d.trees),
        "provenance": d.provenance,
    }


@dataclass(frozen=True)
class MismatchReport(Report):
    """The result of `compare`: overall and per-step figures, per-sequence results.

    Invariant: `steps` ascend; `sequences` are in step order, then rollout
    dump order; `signed_zeros` and `nans` list at most `max_listed` tokens
    each, of `overall.signed_zero` and `nan_tokens` (NaN on either side,
    equal bits or not) in all.
    """

    rollout: DumpInfo
    trainer: DumpInfo
    overall: Stats
    steps: list[StepStats]
    sequences: list[SequenceResult]
    signed_zeros: list[SpecialToken]
    nans: list[SpecialToken]
    nan_tokens: int
    notes: list[str] = field(default_factory=list)

    @property
    def bitwise_equal(self) -> bool:
        """The verdict: every token's log-prob bits are equal."""
        return self.overall.all_bitwise_equal

    schema_version = SCHEMA_VERSION

    def failed(self) -> bool:
        """Not every token is bitwise equal (what ``zmr mismatch --check`` exits 1 on; without it, a mismatch is a report)."""
        return not self.bitwise_equal

    def reason(self) -> str:
        o = self.overall
        if not self.failed():
            return ""
        return f"{o.tokens - o.bitwise_equal} of {o.tokens} tokens are not bitwise equal ({o.sequences_diverged} of {o.sequences} sequences diverge)"

    def to_json(self) -> MismatchJson:
        """The report's keys (see "Report JSON" in the module doc); `zmr.infra.reports.envelope(report)` adds ``tool``, ``zmr``
        and ``schema_version`` before them, as ``zmr mismatch --json`` prints it."""
        return {
            "verdict": "bitwise_equal" if self.bitwise_equal else "mismatch",
            "bitwise_equal": self.bitwise_equal,
            "rollout": _dump_json(self.rollout),
            "trainer": _dump_json(self.trainer),
            "overall": _stats_json(self.overall),
            "steps": [{"step": s.step, **_stats_json(s)} for s in self.steps],
            "sequences": [
                {
                    "step": q.step,
                    "id": q.id,
                    "tokens": q.tokens,
                    "bitwise_equal": q.bitwise_equal,
                    "first_diverging": q.first_diverging,
                    "max_abs_diff": json_number(q.max_abs_diff),
                    "mean_abs_diff": json_number(q.mean_abs_diff),
                }
                for q in self.sequences
            ],
            "signed_zero_tokens": {"count": self.overall.signed_zero, "listed": [_special_json(t) for t in self.signed_zeros]},
            "nan_tokens": {"count": self.nan_tokens, "not_bitwise_equal": self.overall.nan_mismatch, "listed": [_special_json(t) for t in self.nans]},
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------
# Comparing


def _records_of(side: Any, name: str) -> tuple[list[DumpRecord], DumpInfo, str]:
    if isinstance(side, Dump):
        records = list(side.records)
        label = side.path or name
        prov, path, fmt = side.provenance, side.path, side.format
    else:
        records = [make_record(r, source=f"{name} record {i}") for i, r in enumerate(side)]
        label, prov, path, fmt = name, None, None, None
    info = DumpInfo(
        path=path,
        format=fmt,
        records=len(records),
        tokens=sum(len(r.tokens) for r in records),
        dtypes=tuple(sorted({r.dtype for r in records})),
        provenance=prov,
        trees=dict((prov or {}).get("trees") or {}),
    )
    return records, info, label


def _cap(lines: list[str], limit: int = MAX_LISTED_ERRORS) -> list[str]:
    if len(lines) <= limit:
        return lines
    return lines[:limit] + [f"... and {len(lines) - limit} more"]


def _key_text(key: tuple[int, str]) -> str:
    return f"step {key[0]} id {key[1]!r}"


def _index(records: list[DumpRecord], label: str) -> dict[tuple[int, str], DumpRecord]:
    index: dict[tuple[int, str], DumpRecord] = {}
    dups = []
    for r in records:
        key = (r.step, r.id)
        if key in index:
            dups.append(f"{_key_text(key)}: {index[key].source or label} and {r.source or label}")
        else:
            index[key] = r
    if dups:
        raise ZmrError(
            f"{label}: {len(dups)} duplicate (step, id) pair{'s' if len(dups) != 1 else ''}",
            details=_cap(dups) + ["each sequence may appear once per step; give resampled sequences distinct ids"],
        )
    return index


def compare(rollout_records: Any, trainer_records: Any, *, max_listed: int = 100) -> MismatchReport:
    """Pair the records by (step, id) and compute the mismatch report.

    Each side is a `Dump` (from `read_dump`) or an iterable of records
    (`DumpRecord`, dicts or objects, as for `write_dump`). Raises ZmrError
    when a record has no partner, a (step, id) repeats, or token ids differ.
    """
    r_recs, r_info, r_label = _records_of(rollout_records, "rollout")
    t_recs, t_info, t_label = _records_of(trainer_records, "trainer")
    if not r_recs or not t_recs:
        raise ZmrError(f"{r_label if not r_recs else t_label}: no records to compare")
    pairs = _pairs(_index(r_recs, r_label), _index(t_recs, t_label), r_label, t_label)
    _check_tokens(pairs, r_label, t_label)
    flat = _Flat.of(pairs)
    tok = _token_arrays(flat.rollout, flat.trainer)
    sequences, first_div, seq_mean = _sequence_results(flat, tok)
    overall = _stats(tok, slice(0, flat.tokens), first_div, seq_mean)
    nan_any = tok["nan_r"] | tok["nan_t"]
    return MismatchReport(
        rollout=r_info,
        trainer=t_info,
        overall=overall,
        steps=_step_stats(flat, tok, first_div, seq_mean),
        sequences=sequences,
        signed_zeros=_listing(flat, tok["signed_zero"], "signed_zero", max_listed),
        nans=_listing(flat, nan_any, "nan", max_listed),
        nan_tokens=int(nan_any.sum()),
        notes=_notes(r_info, t_info, overall, int(nan_any.sum()), int((nan_any & tok["eq"]).sum())),
    )


def _pairs(
    r_index: dict[tuple[int, str], DumpRecord], t_index: dict[tuple[int, str], DumpRecord], r_label: str, t_label: str
) -> list[tuple[DumpRecord, DumpRecord]]:
    """The records paired by (step, id), by step and then in the rollout dump's order; every record needs a partner."""
    only_r = [k for k in r_index if k not in t_index]
    only_t = [k for k in t_index if k not in r_index]
    if only_r or only_t:
        details = [f"{_key_text(k)} is in {r_label} but not in {t_label}" for k in only_r]
        details += [f"{_key_text(k)} is in {t_label} but not in {r_label}" for k in only_t]
        raise ZmrError(
            f"{len(only_r) + len(only_t)} record{'s' if len(only_r) + len(only_t) != 1 else ''} "
            f"without a partner: both dumps must hold the same (step, id) pairs",
            details=_cap(details) + ["dump the same steps and sequences on both sides (or cut both to the same ones)"],
        )
    return [(r_index[k], t_index[k]) for k in sorted(r_index, key=lambda k: k[0])]


def _check_tokens(pairs: list[tuple[DumpRecord, DumpRecord]], r_label: str, t_label: str) -> None:
    """Both sides must score the same token ids, sequence by sequence."""
    np = numpy()
    bad_tokens = []
    for r, t in pairs:
        if len(r.tokens) != len(t.tokens):
            bad_tokens.append(f"{_key_text((r.step, r.id))}: {len(r.tokens)} tokens in {r_label}, {len(t.tokens)} in {t_label}")
            continue
        diff = np.flatnonzero(r.tokens != t.tokens)
        if len(diff):
            i = int(diff[0])
            bad_tokens.append(
                f"{_key_text((r.step, r.id))}: token ids differ at position {i} "
                f"({int(r.tokens[i])} vs {int(t.tokens[i])}), {len(diff)} position{'s' if len(diff) != 1 else ''} in all"
            )
    if bad_tokens:
        raise ZmrError(
            f"token ids differ in {len(bad_tokens)} sequence{'s' if len(bad_tokens) != 1 else ''} of {r_label} and {t_label}",
            details=_cap(bad_tokens)
            + [
                "the trainer must score exactly the tokens the rollout sampled: check both dumps come from the same batch (no re-tokenization, same truncation)"
            ],
        )


@dataclass(frozen=True)
class _Flat:
    """The paired sequences' tokens one after another: sequence i is ``[starts[i], starts[i + 1])``, ``seg`` its index per token."""

    pairs: list[tuple[DumpRecord, DumpRecord]]
    lengths: Any
    starts: Any
    rollout: Any  # float64 log-probs
    trainer: Any
    seg: Any

    @property
    def tokens(self) -> int:
        return int(self.starts[-1])

    @classmethod
    def of(cls, pairs: list[tuple[DumpRecord, DumpRecord]]) -> _Flat:
        np = numpy()
        lengths = np.array([len(r.tokens) for r, _ in pairs], dtype=np.int64)
        starts = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        n_tok = int(starts[-1])
        lr = np.concatenate([r.logprobs for r, _ in pairs]) if n_tok else np.zeros(0)
        lt = np.concatenate([t.logprobs for _, t in pairs]) if n_tok else np.zeros(0)
        return cls(pairs, lengths, starts, lr, lt, np.repeat(np.arange(len(pairs)), lengths))


def _sequence_results(flat: _Flat, tok: dict[str, ndarray]) -> tuple[list[SequenceResult], ndarray, ndarray]:
    """Per sequence: its figures, the first diverging position (-1: none) and its mean |d| (NaN: no finite pair)."""
    np = numpy()
    n, seg, starts = len(flat.pairs), flat.seg, flat.starts
    neq_idx = np.flatnonzero(~tok["eq"])
    first_div = np.full(n, -1, dtype=np.int64)
    if len(neq_idx):
        segs, first = np.unique(seg[neq_idx], return_index=True)
        first_div[segs] = neq_idx[first] - starts[segs]
    n_eq = np.bincount(seg, weights=tok["eq"], minlength=n).astype(np.int64)
    fin = tok["finite"]
    n_fin = np.bincount(seg[fin], minlength=n)
    sum_abs = np.bincount(seg[fin], weights=tok["absd"], minlength=n)
    max_abs = np.zeros(n)
    if fin.any():
        np.maximum.at(max_abs, seg[fin], tok["absd"])
    with np.errstate(invalid="ignore", divide="ignore"):
        seq_mean = np.where(n_fin > 0, sum_abs / np.maximum(n_fin, 1), np.nan)
    sequences = [
        SequenceResult(
            step=r.step,
            id=r.id,
            tokens=int(flat.lengths[i]),
            bitwise_equal=int(n_eq[i]),
            first_diverging=None if first_div[i] < 0 else int(first_div[i]),
            max_abs_diff=float(max_abs[i]) if n_fin[i] else None,
            mean_abs_diff=float(seq_mean[i]) if n_fin[i] else None,
        )
        for i, (r, _) in enumerate(flat.pairs)
    ]
    return sequences, first_div, seq_mean


def _step_stats(flat: _Flat, tok: dict[str, ndarray], first_div: ndarray, seq_mean: ndarray) -> list[StepStats]:
    """The figures per step, ascending (pairs are sorted by step)."""
    np = numpy()
    steps: list[StepStats] = []
    step_of = np.array([r.step for r, _ in flat.pairs], dtype=np.int64)
    bounds = np.flatnonzero(np.diff(step_of)) + 1
    seq_lo = np.concatenate([[0], bounds])
    seq_hi = np.concatenate([bounds, [len(flat.pairs)]])
    for a, b in zip(seq_lo.tolist(), seq_hi.tolist()):
        s = _stats(tok, slice(int(flat.starts[a]), int(flat.starts[b])), first_div[a:b], seq_mean[a:b])
        steps.append(StepStats(**s.__dict__, step=int(step_of[a])))
    return steps


def _listing(flat: _Flat, mask: ndarray, kind: str, max_listed: int) -> list[SpecialToken]:
    """The first *max_listed* tokens of *mask*, listed on their own with both values and bits."""
    np = numpy()
    out = []
    rb, tb = flat.rollout.view(np.uint64), flat.trainer.view(np.uint64)
    for idx in np.flatnonzero(mask)[:max_listed].tolist():
        i = int(flat.seg[idx])
        r, t = flat.pairs[i]
        out.append(
            SpecialToken(
                kind=kind,
                step=r.step,
                id=r.id,
                position=idx - int(flat.starts[i]),
                rollout=format_value(int(rb[idx]), r.dtype),
                trainer=format_value(int(tb[idx]), t.dtype),
                rollout_bits=native_hex(int(rb[idx]), r.dtype),
                trainer_bits=native_hex(int(tb[idx]), t.dtype),
            )
        )
    return out


def _token_arrays(lr: np.ndarray, lt: np.ndarray) -> dict[str, np.ndarray]:
    """Per-token arrays over all tokens, plus per-finite-token figures (compressed)."""
    np = numpy()
    eq = lr.view(np.uint64) == lt.view(np.uint64)
    nan_r, nan_t = np.isnan(lr), np.isnan(lt)
    finite = np.isfinite(lr) & np.isfinite(lt)
    signed_zero = (lr == 0) & (lt == 0) & ~eq
    d = lt[finite] - lr[finite]
    with np.errstate(over="ignore", invalid="ignore"):
        absd = np.abs(d)
        ratio = np.exp(d)
        k3 = _k3_terms(d)
        pdiff = np.abs(np.exp(lt[finite]) - np.exp(lr[finite]))
    # Cumulative index of finite tokens, so a token slice maps to a finite slice.
    fin_cum = np.zeros(len(lr) + 1, dtype=np.int64)
    np.cumsum(finite, out=fin_cum[1:])
    return {
        "eq": eq,
        "nan_r": nan_r,
        "nan_t": nan_t,
        "finite": finite,
        "signed_zero": signed_zero,
        "nan_mismatch": (nan_r | nan_t) & ~eq,
        "d": d,
        "absd": absd,
        "ratio": ratio,
        "k3": k3,
        "pdiff": pdiff,
        "fin_cum": fin_cum,
    }


def _k3_terms(d: np.ndarray) -> np.ndarray:
    """exp(d) - 1 - d without cancellation: a series for small |d|, expm1(d) - d otherwise."""
    np = numpy()
    out = np.expm1(d) - d
    small = np.abs(d) < 1e-3
    if small.any():
        x = d[small]
        # d^2/2 + d^3/6 + d^4/24 + d^5/120: the first omitted term is below 1e-18 relative.
        out[small] = x * x * (0.5 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120))))
    return cast("ndarray", out)


def _stats(tok: dict[str, np.ndarray], sl: slice, first_div: np.ndarray, seq_mean: np.ndarray) -> Stats:
    np = numpy()
    n = sl.stop - sl.start
    eq = int(tok["eq"][sl].sum())
    f0, f1 = int(tok["fin_cum"][sl.start]), int(tok["fin_cum"][sl.stop])
    nf = f1 - f0
    absd, d, ratio = tok["absd"][f0:f1], tok["d"][f0:f1], tok["ratio"][f0:f1]
    k3, pdiff = tok["k3"][f0:f1], tok["pdiff"][f0:f1]
    if nf:
        med = float(np.median(ratio))
        rmax = float(ratio.max())
        with np.errstate(divide="ignore", invalid="ignore"):
            over = rmax / med if med != 0 else math.inf
        figures = dict(  # "+ 0.0" turns a -0.0 figure into 0.0
            max_abs_diff=float(absd.max()),
            mean_abs_diff=float(absd.mean()),
            k1=float(-d.mean()) + 0.0,
            k3=float(k3.mean()) + 0.0,
            ratio_max=rmax,
            ratio_median=med,
            ratio_max_over_median=float(over),
            probs_diff_max=float(pdiff.max()),
            probs_diff_mean=float(pdiff.mean()),
            probs_diff_std=float(pdiff.std(ddof=1)) if nf > 1 else None,
        )
    else:
        figures = dict.fromkeys(
            (
                "max_abs_diff",
                "mean_abs_diff",
                "k1",
                "k3",
                "ratio_max",
                "ratio_median",
                "ratio_max_over_median",
                "probs_diff_max",
                "probs_diff_mean",
                "probs_diff_std",
            ),
        )
    sm = seq_mean[~np.isnan(seq_mean)]
    return Stats(
        tokens=n,
        bitwise_equal=eq,
        fraction_bitwise_equal=(eq / n) if n else None,
        sequences=len(first_div),
        sequences_diverged=int((first_div >= 0).sum()),
        signed_zero=int(tok["signed_zero"][sl].sum()),
        nan_mismatch=int(tok["nan_mismatch"][sl].sum()),
        nonfinite=n - nf,
        finite_pairs=nf,
        sample_mean_abs_diff=float(sm.mean()) if len(sm) else None,
        **figures,
    )


def _notes(r: DumpInfo, t: DumpInfo, overall: Stats, nan_tokens: int, nan_equal: int) -> list[str]:
    notes = []
    if r.dtypes != t.dtypes:
        notes.append(f"the rollout dump holds {'/'.join(r.dtypes)} and the trainer dump {'/'.join(t.dtypes)}: values are compared exactly as float64")
    for comp in sorted(set(r.trees) & set(t.trees)):
        if r.trees[comp].lower() != t.trees[comp].lower():
            notes.append(f"the dumps name different commits for {comp}: {r.trees[comp]} (rollout) and {t.trees[comp]} (trainer)")
    if overall.signed_zero:
        notes.append(f"{counted(overall.signed_zero, 'token')} {verb(overall.signed_zero, 'differs', 'differ')} only in the sign of zero (+0.0 vs -0.0)")
    if nan_tokens:
        notes.append(
            f"{counted(nan_tokens, 'token')} {verb(nan_tokens, 'is', 'are')} NaN on at least one side ({nan_equal} with equal bits on both); "
            f"NaN and infinite tokens are left out of the numeric figures"
        )
    elif overall.nonfinite:
        notes.append(f"{counted(overall.nonfinite, 'token')} {verb(overall.nonfinite, 'is', 'are')} infinite on a side and left out of the numeric figures")
    if not overall.all_bitwise_equal and overall.k1 is not None and overall.mean_abs_diff and abs(overall.k1) <= 0.01 * overall.mean_abs_diff:
        differing = overall.tokens - overall.bitwise_equal
        notes.append(
            f"k1 = {overall.k1:.3g} although {counted(differing, 'token')} {verb(differing, 'differs', 'differ')}: "
            f"positive and negative differences cancel in k1; the verdict is bitwise"
        )
    return notes


# --------------------------------------------------------------------------
# Plot


def plot_report(report: MismatchReport, path: str | os.PathLike[str]) -> Path:
    """Write a PNG: per-step max |Δ logprob| and k3 on symlog axes (zero is drawn at zero)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ZmrError(
            "--plot needs matplotlib, which is not installed",
            details=["install it: pip install matplotlib (or pip install 'zmr[plot]')"],
        ) from err
    p = Path(path)
    steps = [s.step for s in report.steps]
    fig = Figure(figsize=(8, 5.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, sharex=True)
    equal_steps = [s.step for s in report.steps if s.all_bitwise_equal]
    for ax, attr, label in ((axes[0], "max_abs_diff", "max |Δ logprob|"), (axes[1], "k3", "k3 KL")):
        ys = [math.nan if getattr(s, attr) is None else getattr(s, attr) for s in report.steps]
        positive = [y for y in ys if y > 0 and math.isfinite(y)]
        linthresh = min(positive) / 2 if positive else 1e-12
        ax.set_yscale("symlog", linthresh=linthresh, linscale=0.5)
        ax.axhspan(0, linthresh, color="0.92", zorder=0)
        ax.axhline(0, color="0.4", linewidth=0.8, zorder=1)
        ax.plot(steps, ys, marker="o", markersize=4, linewidth=1.2, zorder=2, label=label)
        if equal_steps:
            ax.plot(
                equal_steps,
                [0.0] * len(equal_steps),
                linestyle="none",
                marker="s",
                markersize=6,
                color="tab:green",
                zorder=3,
                clip_on=False,
                label="bitwise equal (0)",
            )
        top = max(positive) if positive else linthresh
        ax.set_ylim(0, top * 10)
        ax.set_ylabel(f"{label}\n(symlog, linear below {linthresh:.1e})")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    axes[1].set_xlabel("step")
    verdict = "bitwise equal" if report.bitwise_equal else (f"{report.overall.tokens - report.overall.bitwise_equal} of {report.overall.tokens} tokens differ")
    fig.suptitle(f"zmr mismatch: {verdict}")
    write_rendered(p, lambda fh: fig.savefig(fh, format="png"))
    return p
