"""Log-prob dumps and the rollout/trainer mismatch report (docs/reference.md §10).

The pipeline: `read_dump` turns a file into a `Dump` of `DumpRecord`s whose
log-probs are exact (every bit of the engine's value is kept); `compare`
pairs the records of two dumps by (`step`, `id`), refuses when they do not
line up, and computes a `MismatchReport`; `MismatchReport.to_json` gives the
machine-readable form and `plot_report` the per-step figure. `write_dump` is
the writer for engines and tests. Nothing here prints; numpy (and, for
`plot_report`, matplotlib) is imported inside the functions, never at import
time, so `zmr --help` stays instant and torch is never imported by zmr.

Dump format, JSON Lines (`.jsonl` or `.ndjson`), one object per line
---------------------------------------------------------------------
An optional first line carries metadata::

    {"zmr_dump": 1, "provenance": {"trees": {"vllm": "<full commit id>"}, ...}, "dtype": "float32"}

- `zmr_dump`: the format version; this zmr reads 1 and refuses newer ones.
- `provenance` (optional object): where the dump came from. `trees` maps a
  component name to the full commit id (40 or 64 hex digits) of the tree that
  produced the dump (e.g. a release branch built by `zmr build`); zmr checks
  those ids and shows them in the report. Any other key (model, command,
  host, date, ...) is carried into the report verbatim.
- `dtype` (optional): the default `dtype` of the records below.

No other metadata key is allowed (a typo must not pass silently), and the
metadata line may only be the first line. Every other non-blank line is one
sequence::

    {"id": "p3-s1", "step": 0, "dtype": "float32", "tokens": [17, 4, 9], "logprobs": [-0.25, -1.5, -0.0]}

- `id`: string or integer (integers are compared as their decimal string).
- `step`: integer, the RL step the sequence belongs to.
- `tokens`: token ids (integers): the response tokens.
- `logprobs`: `logprobs[i]` is the log-probability of `tokens[i]`.
- `dtype` (optional, default the metadata line's, else `float64`): the
  floating-point type the engine produced: `float32`, `bfloat16` or
  `float64` (`fp32`, `bf16`, `fp64` are accepted too). Every value must be
  exactly representable in it, or the file is refused.
- Other keys (prompt, reward, ...) are ignored.

Values are written so that they read back to the same bits: a finite value
is the Python `repr` of its float64 widening (exact for float32 and
bfloat16, and `-0.0` keeps its sign). JSON has no NaN or infinity, so those
are strings: `"inf"`, `"-inf"`, `"nan"` (the canonical quiet NaN of the
record's dtype, sign bit clear; `"-nan"` with the sign bit set) and
`"nan:0x7fc00001"`, a NaN given by its exact bits in the record's dtype,
with exactly 4 (bfloat16), 8 (float32) or 16 (float64) hex digits. On input
the bare `NaN`, `Infinity` and `-Infinity` that Python's `json` writes by
default are accepted too (a bare `NaN` is the canonical quiet NaN).

Dump format, `.npz` and `.safetensors` (columnar, same fields)
----------------------------------------------------------------
- `step`: integers, one per record.
- `id_utf8` (uint8, the UTF-8 bytes of all ids one after another) with
  `id_offsets` (int64, records + 1 entries: id i is bytes
  `[id_offsets[i], id_offsets[i+1])`); on reading, an integer `id` array
  (and in `.npz` a unicode `id` array) is accepted instead.
- `tokens`: integers, all sequences one after another; `offsets` (int64,
  records + 1 entries starting at 0): sequence i is `[offsets[i],
  offsets[i+1])` of both `tokens` and `logprobs`.
- `logprobs`: float32, float64 or bfloat16 (one dtype per file). In
  `.safetensors` bfloat16 is the native `BF16` dtype; numpy has no
  bfloat16, so `.npz` holds its bits as uint16 and the metadata says
  `"dtype": "bfloat16"`.
- Metadata: in `.npz` a uint8 array `__zmr_dump__` holding the metadata
  line's JSON; in `.safetensors` the header's `__metadata__` with
  `"zmr_dump": "1"` and `"provenance": "<JSON>"`.
The safetensors file is written and read here directly (8-byte header
length, JSON header, little-endian data), so neither torch nor the
`safetensors` package is needed, and files written by
`safetensors.torch.save_file` read fine.

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

Figures (per step and overall), with d = lp_train - lp_rollout per token
---------------------------------------------------------------------------
- `tokens`, `bitwise_equal`, `fraction_bitwise_equal`, `sequences`,
  `sequences_diverged` (sequences with at least one token not bitwise equal),
  `signed_zero`, `nan_mismatch` (not equal, NaN on a side), `nonfinite`,
  `finite_pairs` (the tokens the figures below are computed over).
- `max_abs_diff`, `mean_abs_diff`: max and mean of |d|.
- `k1` = mean(lp_rollout - lp_train) = mean(-d); it can cancel to zero
  while tokens differ, so the verdict is always bitwise, never k1.
- `k3` = mean(exp(d) - 1 - d) (computed without cancellation).
- `ratio_max`, `ratio_median`, `ratio_max_over_median` of exp(d).
- `probs_diff_max`, `probs_diff_mean`, `probs_diff_std` of
  |exp(lp_train) - exp(lp_rollout)|; the std divides by n - 1 like
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

Report JSON (`MismatchReport.to_json`, `zmr mismatch --json`), schema_version 1
------------------------------------------------------------------------------
- `schema_version` (1), `tool` {`name`, `version`}, `verdict`
  ("bitwise_equal" or "mismatch"), `bitwise_equal` (bool).
- `rollout`, `train`: {`path`, `format`, `records`, `tokens`, `dtypes`,
  `trees` (component -> commit id, from the provenance; {} when the dump has
  none), `provenance` (verbatim, or null)}.
- `overall`: every figure above, `all_bitwise_equal`, `aliases`.
- `steps`: [{`step`, the same keys as `overall`}], ascending.
- `sequences`: [{`step`, `id`, `tokens`, `bitwise_equal`,
  `first_diverging` (position, or null), `max_abs_diff`, `mean_abs_diff`}].
- `signed_zero_tokens`: {`count`, `listed`}; `nan_tokens`: {`count`,
  `not_bitwise_equal`, `listed`}; a listed token is {`kind`, `step`, `id`,
  `position`, `rollout`, `train` (values in dump notation), `rollout_bits`,
  `train_bits` (hex, in each dump's dtype)}; at most 100 are listed.
- `notes`: sentences for a human (dtypes differ, commits differ, k1
  cancelled, ...).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import struct
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from zmr.errors import ZmrError
from zmr.files import atomic_write, open_regular, parse_json

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from numpy import ndarray  # for annotations inside functions that bind a local `np`

FORMAT_VERSION = 1
"""The `zmr_dump` value written, and the newest one read."""

SCHEMA_VERSION = 1
"""`schema_version` of `MismatchReport.to_json`; bump it when a key changes meaning or goes away."""

DTYPES = ("float32", "bfloat16", "float64")
_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
}
_HEX_DIGITS = {"bfloat16": 4, "float32": 8, "float64": 16}
_CANONICAL_NAN = {"bfloat16": 0x7FC0, "float32": 0x7FC00000, "float64": 0x7FF8000000000000}
_SIGN_BIT = {"bfloat16": 1 << 15, "float32": 1 << 31, "float64": 1 << 63}
_HEADER_KEYS = ("zmr_dump", "provenance", "dtype")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".npz": "npz", ".safetensors": "safetensors"}
_COMMIT_RE = re.compile(r"\A[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?\Z")
_MAX_ERRORS = 20

ALIASES = {
    "training/rollout_probs_diff_max": "probs_diff_max",
    "training/rollout_probs_diff_mean": "probs_diff_mean",
    "training/rollout_probs_diff_std": "probs_diff_std",
    "rollout_corr/k3_kl": "k3",
    "rollout_corr/kl": "k1",
    "train/train_rollout_logprob_abs_diff": "sample_mean_abs_diff",
}
"""Framework metric name -> `Stats` field (see the module docstring)."""


# --------------------------------------------------------------------------
# Data model


@dataclass(frozen=True, eq=False)
class DumpRecord:
    """One sequence of a dump.

    Invariant: `tokens` is a 1-D int64 array and `logprobs` a 1-D float64
    array of the same length, holding exactly the values of `dtype` (the
    exact widening of the engine's bits: see "Bitwise" in the module doc).
    `source` says where it was read ("file:line"), for messages.
    """

    id: str
    step: int
    tokens: np.ndarray
    logprobs: np.ndarray
    dtype: str = "float64"
    source: str | None = None

    def native_bits(self) -> np.ndarray:
        """The log-probs' bits in `dtype` (uint16, uint32 or uint64)."""
        bits, _ = narrow_bits(self.logprobs.view(_np().uint64), self.dtype)
        return bits


@dataclass(eq=False)
class Dump(Sequence):
    """The records of one dump file with its metadata; a sequence of `DumpRecord`."""

    records: list[DumpRecord]
    provenance: dict[str, Any] | None = None
    path: str | None = None
    format: str | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index):
        return self.records[index]

    def __iter__(self) -> Iterator[DumpRecord]:
        return iter(self.records)


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
    train: str
    rollout_bits: str
    train_bits: str


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


@dataclass(frozen=True)
class MismatchReport:
    """The result of `compare`: overall and per-step figures, per-sequence results.

    Invariant: `steps` ascend; `sequences` are in step order, then rollout
    dump order; `signed_zeros` and `nans` list at most `max_listed` tokens
    each, of `overall.signed_zero` and `nan_tokens` (NaN on either side,
    equal bits or not) in all.
    """

    rollout: DumpInfo
    train: DumpInfo
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

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (`json.dumps(report.to_json())`); see "Report JSON" in the module doc."""
        from zmr import __version__

        def stats(s: Stats) -> dict[str, Any]:
            out = {k: _json_num(v) for k, v in s.__dict__.items()}
            out["all_bitwise_equal"] = s.all_bitwise_equal
            out["aliases"] = {k: _json_num(v) for k, v in s.aliases().items()}
            return out

        def info(d: DumpInfo) -> dict[str, Any]:
            return {
                "path": d.path,
                "format": d.format,
                "records": d.records,
                "tokens": d.tokens,
                "dtypes": list(d.dtypes),
                "trees": dict(d.trees),
                "provenance": d.provenance,
            }

        def special(t: SpecialToken) -> dict[str, Any]:
            return dict(t.__dict__)

        steps = []
        for s in self.steps:
            entry = stats(s)
            del entry["step"]
            steps.append({"step": s.step, **entry})
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "zmr", "version": __version__},
            "verdict": "bitwise_equal" if self.bitwise_equal else "mismatch",
            "bitwise_equal": self.bitwise_equal,
            "rollout": info(self.rollout),
            "train": info(self.train),
            "overall": stats(self.overall),
            "steps": steps,
            "sequences": [{k: _json_num(v) for k, v in q.__dict__.items()} for q in self.sequences],
            "signed_zero_tokens": {
                "count": self.overall.signed_zero,
                "listed": [special(t) for t in self.signed_zeros],
            },
            "nan_tokens": {
                "count": self.nan_tokens,
                "not_bitwise_equal": self.overall.nan_mismatch,
                "listed": [special(t) for t in self.nans],
            },
            "notes": list(self.notes),
        }


def _json_num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


# --------------------------------------------------------------------------
# Exact bit conversions (integer arithmetic only: no rounding, no NaN
# quieting, no flush-to-zero)


def _np():
    try:
        import numpy
    except ImportError as err:  # pragma: no cover - numpy is there in tests
        raise ZmrError(
            "comparing log-prob dumps needs numpy, which is not installed",
            details=["install it: pip install numpy"],
        ) from err
    return numpy


def widen_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Bits of `dtype` values -> the bits (uint64) of the same values as float64.

    Exact and injective: NaN payloads and signs are kept, subnormals become
    the equal normal float64. `narrow_bits` is the inverse.
    """
    np = _np()
    bits = np.asarray(bits)
    if bits.dtype.kind != "u":
        raise TypeError(f"widen_bits takes unsigned integer bits, not {bits.dtype.name} values")
    if dtype == "float64":
        return bits.astype(np.uint64)
    u = bits.astype(np.uint64)
    if dtype == "bfloat16":
        u = u << np.uint64(16)
    elif dtype != "float32":
        raise ValueError(f"unknown dtype {dtype!r}")
    sign = (u >> np.uint64(31)) & np.uint64(1)
    exp = (u >> np.uint64(23)) & np.uint64(0xFF)
    man = u & np.uint64(0x7FFFFF)
    out_exp = np.where(exp == 0xFF, np.uint64(0x7FF), exp + np.uint64(896))
    out_man = man << np.uint64(29)
    zero = (exp == 0) & (man == 0)
    out_exp[zero] = 0
    sub = (exp == 0) & (man != 0)
    if sub.any():
        m = man[sub]
        _, e = np.frexp(m.astype(np.float64))  # m is an integer < 2**23: exact
        top = (e - 1).astype(np.uint64)  # index of m's highest set bit
        out_exp[sub] = top + np.uint64(874)
        out_man[sub] = (m - (np.uint64(1) << top)) << (np.uint64(52) - top)
    return (sign << np.uint64(63)) | (out_exp << np.uint64(52)) | out_man


def narrow_bits(bits64: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """float64 bits -> (bits in `dtype`, mask of the values exactly representable in it).

    Where the mask is False the returned bits are meaningless.
    """
    np = _np()
    b = np.asarray(bits64).astype(np.uint64)
    if dtype == "float64":
        return b, np.ones(b.shape, dtype=bool)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"unknown dtype {dtype!r}")
    sign = b >> np.uint64(63)
    exp = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    man = b & np.uint64((1 << 52) - 1)
    low29 = man & np.uint64((1 << 29) - 1)
    man32 = man >> np.uint64(29)
    e = exp - 1023
    special = exp == 0x7FF
    zero = (exp == 0) & (man == 0)
    normal = (exp != 0) & ~special & (e >= -126) & (e <= 127)
    subn = (exp != 0) & ~special & (e >= -149) & (e < -126)
    out = np.zeros(b.shape, dtype=np.uint64)
    out[special] = (np.uint64(0xFF) << np.uint64(23)) | man32[special]
    out[normal] = ((e[normal] + 127).astype(np.uint64) << np.uint64(23)) | man32[normal]
    ok = zero | ((special | normal) & (low29 == 0))
    if subn.any():
        full = man[subn] | np.uint64(1 << 52)
        shift = (-(e[subn] + 97)).astype(np.uint64)  # 30 ..= 52
        out[subn] = full >> shift
        ok[subn] = (full & ((np.uint64(1) << shift) - np.uint64(1))) == 0
    out |= sign << np.uint64(31)
    if dtype == "bfloat16":
        ok &= (out & np.uint64(0xFFFF)) == 0
        return (out >> np.uint64(16)).astype(np.uint16), ok
    return out.astype(np.uint32), ok


def _bits_to_float(b: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def format_value(bits64: int, dtype: str) -> str:
    """One value in dump notation: repr for finite values, else inf/-inf/nan/nan:0x...."""
    exp = (bits64 >> 52) & 0x7FF
    if exp != 0x7FF:
        return repr(_bits_to_float(bits64))
    if bits64 & ((1 << 52) - 1) == 0:
        return "-inf" if bits64 >> 63 else "inf"
    np = _np()
    native = int(narrow_bits(np.array([bits64], dtype=np.uint64), dtype)[0][0])
    if native == _CANONICAL_NAN[dtype]:
        return "nan"
    if native == _CANONICAL_NAN[dtype] | _SIGN_BIT[dtype]:
        return "-nan"
    return f"nan:0x{native:0{_HEX_DIGITS[dtype]}x}"


def _native_hex(bits64: int, dtype: str) -> str:
    np = _np()
    native = int(narrow_bits(np.array([bits64], dtype=np.uint64), dtype)[0][0])
    return f"0x{native:0{_HEX_DIGITS[dtype]}x}"


# --------------------------------------------------------------------------
# Turning Python values (floats, numpy arrays, torch tensors) into records


class _BadValue(Exception):
    """A value problem; the caller adds where it is."""


def _dtype_name(value: Any, where: str) -> str:
    if not isinstance(value, str) and value is not None:  # a numpy or torch dtype object
        value = str(getattr(value, "name", None) or value).replace("torch.", "")
    if not isinstance(value, str) or value.lower() not in _DTYPE_NAMES:
        raise _BadValue(f"{where}dtype {value!r} is not one of {', '.join(DTYPES)}")
    return _DTYPE_NAMES[value.lower()]


def _parse_special(text: str, dtype: str) -> int:
    """A string log-prob -> float64 bits."""
    t = text.strip().lower()
    if t in ("inf", "+inf", "infinity", "+infinity"):
        return 0x7FF0000000000000
    if t in ("-inf", "-infinity"):
        return 0xFFF0000000000000
    if t in ("nan", "+nan", "-nan"):
        native = _CANONICAL_NAN[dtype] | (_SIGN_BIT[dtype] if t.startswith("-") else 0)
    elif t.startswith("nan:0x"):
        digits = t[len("nan:0x") :]
        if len(digits) != _HEX_DIGITS[dtype] or not re.fullmatch(r"[0-9a-f]+", digits):
            raise _BadValue(f"{text!r}: a {dtype} NaN needs exactly {_HEX_DIGITS[dtype]} hex digits after 'nan:0x' (the bits in the record's dtype)")
        native = int(digits, 16)
        width = {"bfloat16": 16, "float32": 32, "float64": 64}[dtype]
        exp_bits = {"bfloat16": 8, "float32": 8, "float64": 11}[dtype]
        man_bits = width - 1 - exp_bits
        if (native >> man_bits) & ((1 << exp_bits) - 1) != (1 << exp_bits) - 1 or native & ((1 << man_bits) - 1) == 0:
            raise _BadValue(f"{text!r} is not a NaN bit pattern; write a number as a JSON number")
    else:
        raise _BadValue(f"{text!r} is not a log-prob: use a JSON number, or one of inf, -inf, nan, -nan, nan:0x<bits>")
    np = _np()
    widened = widen_bits(np.array([native], dtype=np.uint64), dtype)
    return int(widened[0])


def _floats_from_list(values: Sequence[Any], dtype: str) -> np.ndarray:
    """JSON-style values (floats, ints, strings) -> float64 array of `dtype` values."""
    np = _np()
    types = set(map(type, values))
    if types <= {float, int}:
        if int in types:
            for i, v in enumerate(values):
                if type(v) is int and abs(v) > 2**53:
                    raise _BadValue(f"logprobs[{i}] = {v} is not a float")
        out = np.array(values, dtype=np.float64)
    else:
        out = np.empty(len(values), dtype=np.float64)
        bits = out.view(np.uint64)
        for i, v in enumerate(values):
            tv = type(v)
            if tv is float or (tv is int and abs(v) <= 2**53):
                out[i] = v
            elif tv is str:
                try:
                    bits[i] = _parse_special(v, dtype)
                except _BadValue as err:
                    raise _BadValue(f"logprobs[{i}] = {err}") from None
            elif isinstance(v, float) and not isinstance(v, bool):  # numpy float64 and kin
                out[i] = float(v)
            else:
                raise _BadValue(f"logprobs[{i}] = {v!r} is not a number")
    return out


def _check_representable(values: np.ndarray, dtype: str) -> None:
    if dtype == "float64":
        return
    np = _np()
    _, ok = narrow_bits(values.view(np.uint64), dtype)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise _BadValue(
            f"logprobs[{i}] = {format_value(int(values.view(np.uint64)[i]), 'float64')} "
            f"is not a {dtype} value; write the engine's value exactly "
            f"(the repr of its float64 widening), or declare the dtype it has"
        )


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "dtype")


def _logprobs_from_obj(obj: Any, declared: str | None) -> tuple[np.ndarray, str]:
    """Python floats / numpy array / torch tensor -> (float64 array, dtype)."""
    np = _np()
    if _is_torch(obj):
        t = obj.detach().cpu().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if t.dim() != 1:
            raise _BadValue(f"logprobs is a {t.dim()}-D tensor; give one sequence (1-D)")
        if name == "bfloat16":
            import torch  # already imported: `obj` is a torch tensor

            bits = t.view(torch.int16).numpy().view(np.uint16)
            arr64, dtype = widen_bits(bits, "bfloat16").view(np.float64), "bfloat16"
        elif name in ("float32", "float64"):
            return _logprobs_from_obj(t.numpy(), declared)
        else:
            raise _BadValue(f"logprobs has dtype torch.{name}; zmr reads float32, bfloat16 and float64")
    elif isinstance(obj, np.ndarray):
        if obj.ndim != 1:
            raise _BadValue(f"logprobs is a {obj.ndim}-D array; give one sequence (1-D)")
        kind = obj.dtype.name
        if kind == "float32":
            bits = np.ascontiguousarray(obj).view(np.uint32)
            arr64, dtype = widen_bits(bits, "float32").view(np.float64), "float32"
        elif kind == "float64":
            arr64, dtype = np.array(obj, dtype=np.float64), "float64"
        elif kind == "bfloat16":  # ml_dtypes
            bits = np.ascontiguousarray(obj).view(np.uint16)
            arr64, dtype = widen_bits(bits, "bfloat16").view(np.float64), "bfloat16"
        elif kind == "uint16" and declared == "bfloat16":
            arr64, dtype = widen_bits(obj, "bfloat16").view(np.float64), "bfloat16"
        else:
            raise _BadValue(f"logprobs has dtype {kind}; zmr reads float32, bfloat16 and float64")
    elif isinstance(obj, (list, tuple)):
        if obj and not all(isinstance(v, (float, int, str)) for v in obj):
            try:
                arr = np.asarray(obj)
            except (TypeError, ValueError):
                raise _BadValue("logprobs holds values that are not numbers") from None
            if arr.dtype.kind == "f":
                return _logprobs_from_obj(arr, declared)
            raise _BadValue("logprobs holds values that are not numbers")
        dtype = declared or "float64"
        arr64 = _floats_from_list(obj, dtype)
        _check_representable(arr64, dtype)
        return arr64, dtype
    else:
        raise _BadValue(f"logprobs is a {type(obj).__name__}, not a list, array or tensor of floats")
    if declared is not None and declared != dtype:
        raise _BadValue(f"logprobs are {dtype} but the record declares dtype {declared}")
    return arr64, dtype


def _tokens_from_obj(obj: Any) -> np.ndarray:
    np = _np()
    if _is_torch(obj):
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        if obj.ndim != 1 or obj.dtype.kind not in "iu":
            raise _BadValue(f"tokens must be a 1-D integer array, not {obj.ndim}-D {obj.dtype.name}")
        if obj.dtype == np.uint64 and obj.size and int(obj.max()) >= 2**63:
            raise _BadValue("tokens holds ids that do not fit int64")
        return obj.astype(np.int64)
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            if not isinstance(v, int) or isinstance(v, bool):
                if hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu":
                    continue
                raise _BadValue(f"tokens[{i}] = {v!r} is not an integer token id")
        try:
            return np.array(obj, dtype=np.int64)
        except OverflowError:
            raise _BadValue("tokens holds ids that do not fit int64") from None
    raise _BadValue(f"tokens is a {type(obj).__name__}, not a list or array of integers")


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        if name not in obj:
            raise _BadValue(f"record has no {name!r}; each record needs id, step, tokens and logprobs")
        return obj[name]
    if not hasattr(obj, name):
        raise _BadValue(f"record has no {name!r}; each record needs id, step, tokens and logprobs")
    return getattr(obj, name)


def make_record(obj: Any, *, source: str | None = None, default_dtype: str | None = None) -> DumpRecord:
    """A `DumpRecord` from a DumpRecord, a dict or any object with id, step, tokens, logprobs (and dtype)."""
    if isinstance(obj, DumpRecord):
        return obj
    try:
        rid = _field(obj, "id")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise _BadValue(f"id {rid!r} is not a string or an integer")
        step = _field(obj, "step")
        if isinstance(step, bool) or not isinstance(step, int):
            if hasattr(step, "dtype") and getattr(step.dtype, "kind", "") in "iu" and getattr(step, "ndim", 0) == 0:
                step = int(step)
            else:
                raise _BadValue(f"step {step!r} is not an integer")
        declared = obj.get("dtype") if isinstance(obj, Mapping) else getattr(obj, "dtype", None)
        declared = _dtype_name(declared, "") if declared is not None else default_dtype
        tokens = _tokens_from_obj(_field(obj, "tokens"))
        logprobs, dtype = _logprobs_from_obj(_field(obj, "logprobs"), declared)
        if len(tokens) != len(logprobs):
            raise _BadValue(f"{len(tokens)} tokens but {len(logprobs)} logprobs; logprobs[i] must be the log-prob of tokens[i]")
    except _BadValue as err:
        raise ZmrError(f"{source}: {err}" if source else str(err)) from None
    return DumpRecord(id=str(rid), step=int(step), tokens=tokens, logprobs=logprobs, dtype=dtype, source=source)


# --------------------------------------------------------------------------
# Reading


def _format_of(path: Path) -> str:
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ZmrError(
            f"{path}: unknown dump format {path.suffix or '(no suffix)'!r}",
            details=["name the file .jsonl (or .ndjson), .npz or .safetensors"],
        )
    return fmt


def _check_provenance(prov: Any, where: str) -> dict[str, Any]:
    if not isinstance(prov, dict):
        raise _BadValue(f"{where}provenance must be an object, not {type(prov).__name__}")
    trees = prov.get("trees")
    if trees is not None:
        if not isinstance(trees, dict):
            raise _BadValue(f"{where}provenance.trees must map component names to commit ids")
        for name, sha in trees.items():
            if not isinstance(sha, str) or not _COMMIT_RE.match(sha):
                raise _BadValue(f"{where}provenance.trees.{name} = {sha!r} is not a full commit id (40 or 64 hex digits)")
    return prov


def _check_header(obj: dict, where: str) -> tuple[dict | None, str | None]:
    unknown = sorted(set(obj) - set(_HEADER_KEYS))
    if unknown:
        raise _BadValue(f"{where}unknown metadata key {unknown[0]!r}; the metadata line may hold {', '.join(_HEADER_KEYS)}")
    version = obj["zmr_dump"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _BadValue(f"{where}zmr_dump = {version!r} is not a format version (1)")
    if version > FORMAT_VERSION:
        raise _BadValue(f"{where}dump format {version} is newer than this zmr reads ({FORMAT_VERSION}); upgrade zmr")
    prov = _check_provenance(obj["provenance"], where) if obj.get("provenance") is not None else None
    dtype = _dtype_name(obj["dtype"], where) if obj.get("dtype") is not None else None
    return prov, dtype


def read_dump(path: str | os.PathLike) -> Dump:
    """Read a dump (.jsonl/.ndjson, .npz, .safetensors); raises ZmrError naming file and line."""
    p = Path(path)
    fmt = _format_of(p)
    if not p.is_symlink() and not p.exists():
        raise ZmrError(
            f"{p}: no such file",
            details=["give the path of a log-prob dump (.jsonl, .npz or .safetensors)"],
        )
    # A regular file only (a FIFO or /dev/zero is refused unread); dumps can be large, so no size limit.
    with open_regular(p, limit=None, what="log-prob dump") as handle:
        if fmt == "jsonl":
            dump = _read_jsonl(p, handle)
        elif fmt == "npz":
            dump = _read_npz(p, handle)
        else:
            dump = _read_safetensors(p, handle)
    if not dump.records:
        raise ZmrError(f"{p}: no records", details=["a dump holds one record per sequence; is this the right file?"])
    return dump


def _read_jsonl(p: Path, fh: BinaryIO) -> Dump:
    errors: list[str] = []
    records: list[DumpRecord] = []
    provenance = None
    default_dtype = None
    first = True
    for lineno, raw in enumerate(fh, start=1):
        if len(errors) >= _MAX_ERRORS:
            errors.append("(stopped after this many errors)")
            break
        if not raw.strip():
            continue
        where = f"{p}:{lineno}: "
        try:
            obj = parse_json(raw)
        except UnicodeDecodeError:
            errors.append(f"{where}not UTF-8 text; a dump is JSON Lines in UTF-8")
            first = False
            continue
        except json.JSONDecodeError as err:
            errors.append(f"{where}not valid JSON at column {err.colno} ({err.msg}); each line must be one JSON object")
            first = False
            continue
        except ValueError as err:  # nested too deeply
            errors.append(f"{where}not a dump record ({err})")
            first = False
            continue
        if not isinstance(obj, dict):
            errors.append(f"{where}a {type(obj).__name__}, not a JSON object; each line must be one record")
            first = False
            continue
        if "zmr_dump" in obj:
            if not first:
                errors.append(f"{where}the metadata line (zmr_dump) must be the first line of the file")
                continue
            first = False
            try:
                provenance, default_dtype = _check_header(obj, where)
            except _BadValue as err:
                errors.append(str(err))
            continue
        first = False
        try:
            records.append(make_record(obj, source=f"{p}:{lineno}", default_dtype=default_dtype))
        except ZmrError as err:
            errors.append(err.message)
    if errors:
        raise ZmrError(
            f"{p}: {len(errors)} bad line{'s' if len(errors) != 1 else ''} in the dump",
            details=errors,
        )
    return Dump(records=records, provenance=provenance, path=str(p), format="jsonl")


def _columnar_records(p: Path, arrays: dict[str, np.ndarray], logprob_dtype: str, provenance: dict | None, fmt: str) -> Dump:
    """Shared by the .npz and .safetensors readers: arrays are already decoded."""
    np = _np()

    def need(name: str) -> ndarray:
        if name not in arrays:
            raise ZmrError(
                f"{p}: no {name!r} array",
                details=[f"a {fmt} dump holds step, id_utf8 + id_offsets (or id), tokens, offsets and logprobs"],
            )
        return arrays[name]

    def ints(name: str, a: ndarray) -> ndarray:
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise ZmrError(f"{p}: {name!r} must be a 1-D integer array, not {a.ndim}-D {a.dtype.name}")
        return a.astype(np.int64)

    step = ints("step", need("step"))
    n = len(step)
    offsets = ints("offsets", need("offsets"))
    tokens = ints("tokens", need("tokens"))
    logprobs = need("logprobs")
    if logprobs.ndim != 1:
        raise ZmrError(f"{p}: 'logprobs' must be 1-D, not {logprobs.ndim}-D")

    def check_offsets(name: str, off: ndarray, total: int, what: str) -> None:
        if len(off) != n + 1 or (n + 1 and off[0] != 0) or np.any(np.diff(off) < 0) or off[-1] != total:
            raise ZmrError(
                f"{p}: {name!r} does not split the {what}",
                details=[f"it needs {n + 1} non-decreasing entries from 0 to {total} (one more than 'step')"],
            )

    check_offsets("offsets", offsets, len(tokens), "tokens")
    if len(logprobs) != len(tokens):
        raise ZmrError(f"{p}: {len(tokens)} tokens but {len(logprobs)} logprobs; they must pair one to one")
    if "id_utf8" in arrays or "id_offsets" in arrays:
        raw = need("id_utf8")
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ZmrError(f"{p}: 'id_utf8' must be 1-D uint8")
        id_off = ints("id_offsets", need("id_offsets"))
        check_offsets("id_offsets", id_off, len(raw), "id bytes")
        blob = raw.tobytes()
        try:
            ids = [blob[id_off[i] : id_off[i + 1]].decode("utf-8") for i in range(n)]
        except UnicodeDecodeError:
            raise ZmrError(f"{p}: 'id_utf8' is not UTF-8") from None
    else:
        id_arr = need("id")
        if id_arr.ndim != 1 or len(id_arr) != n or id_arr.dtype.kind not in "iuU":
            raise ZmrError(f"{p}: 'id' must be 1-D integers or strings, one per step entry")
        ids = [str(v) for v in id_arr.tolist()]
    if logprob_dtype == "float64":
        values = np.ascontiguousarray(logprobs, dtype=np.float64)
    elif logprob_dtype == "float32":
        values = widen_bits(np.ascontiguousarray(logprobs, dtype=np.float32).view(np.uint32), "float32").view(np.float64)
    else:
        values = widen_bits(np.ascontiguousarray(logprobs, dtype=np.uint16), "bfloat16").view(np.float64)
    records = [
        DumpRecord(
            id=ids[i],
            step=int(step[i]),
            tokens=tokens[offsets[i] : offsets[i + 1]],
            logprobs=values[offsets[i] : offsets[i + 1]],
            dtype=logprob_dtype,
            source=f"{p}: record {i}",
        )
        for i in range(n)
    ]
    return Dump(records=records, provenance=provenance, path=str(p), format=fmt)


# A deflated member holds at most ~1032 times its compressed size; a dump's arrays far less.
_NPZ_MAX_RATIO = 256
_NPZ_SMALL = 1 << 30


def _check_npz_sizes(p: Path, fh: BinaryIO) -> None:
    """Refuse an .npz whose headers claim more data than the file can hold, before numpy allocates it."""
    np = _np()
    size = os.fstat(fh.fileno()).st_size
    total = 0
    with zipfile.ZipFile(fh) as zf:
        for info in zf.infolist():
            stored = info.compress_type == zipfile.ZIP_STORED
            if info.compress_size > size or (stored and info.file_size != info.compress_size):
                raise ZmrError(f"{p}: {info.filename}: its zip header claims {info.file_size} bytes, which the {size}-byte file cannot hold")
            with zf.open(info) as member:
                try:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                except ValueError as err:
                    raise ZmrError(f"{p}: {info.filename}: not a .npy array ({err})") from None
                header = member.tell()
            if dtype.hasobject:
                raise ZmrError(f"{p}: {info.filename}: an object array", details=["object arrays are not read; store ids as id_utf8 + id_offsets"])
            nbytes = math.prod(shape) * dtype.itemsize
            total += nbytes
            if any(d < 0 for d in shape) or header + nbytes != info.file_size or total > max(_NPZ_SMALL, _NPZ_MAX_RATIO * size):
                raise ZmrError(
                    f"{p}: {info.filename}: claims an array of shape {list(shape)} ({nbytes} bytes), which the {size}-byte file does not hold",
                    details=["the file is damaged or not a dump; write it again"],
                )
    fh.seek(0)


def _read_npz(p: Path, fh: BinaryIO) -> Dump:
    np = _np()
    try:
        _check_npz_sizes(p, fh)
        with np.load(fh, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as err:
        raise ZmrError(f"{p}: cannot read the .npz ({err})", details=["object arrays are not read; store ids as id_utf8 + id_offsets"]) from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ZmrError(f"{p}: not a readable .npz file ({err})") from None
    provenance = None
    declared = None
    if "__zmr_dump__" in arrays:
        meta = arrays.pop("__zmr_dump__")
        try:
            obj = parse_json(meta.tobytes().decode("utf-8"))
            if not isinstance(obj, dict) or "zmr_dump" not in obj:
                raise ValueError("not a metadata object")
            provenance, declared = _check_header(obj, "")
        except _BadValue as err:
            raise ZmrError(f"{p}: __zmr_dump__: {err}") from None
        except ValueError as err:
            raise ZmrError(f"{p}: __zmr_dump__ is not the metadata JSON ({err})") from None
    lp = arrays.get("logprobs")
    if lp is None:
        dtype = "float64"
    elif lp.dtype == np.float32:
        dtype = "float32"
    elif lp.dtype == np.float64:
        dtype = "float64"
    elif lp.dtype == np.uint16 and declared == "bfloat16":
        dtype = "bfloat16"
    else:
        raise ZmrError(
            f"{p}: 'logprobs' has dtype {lp.dtype.name}",
            details=["use float32 or float64, or uint16 bits with metadata dtype bfloat16"],
        )
    if declared is not None and declared != dtype:
        raise ZmrError(f"{p}: the metadata says dtype {declared} but 'logprobs' is {dtype}")
    return _columnar_records(p, arrays, dtype, provenance, "npz")


_ST_DTYPES = {
    "F64": ("<f8", "float64"),
    "F32": ("<f4", "float32"),
    "BF16": ("<u2", "bfloat16"),
    "I64": ("<i8", None),
    "I32": ("<i4", None),
    "I16": ("<i2", None),
    "I8": ("i1", None),
    "U64": ("<u8", None),
    "U32": ("<u4", None),
    "U16": ("<u2", None),
    "U8": ("u1", None),
}


def _read_safetensors(p: Path, fh: BinaryIO) -> Dump:
    np = _np()
    size = os.fstat(fh.fileno()).st_size
    if size < 8:
        raise ZmrError(f"{p}: not a .safetensors file (too short)")
    (hlen,) = struct.unpack("<Q", fh.read(8))
    if 8 + hlen > size:
        raise ZmrError(f"{p}: not a .safetensors file (header length {hlen} past the end)")
    data = fh.read()
    try:
        header = parse_json(data[:hlen].decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except ValueError as err:
        raise ZmrError(f"{p}: not a .safetensors file (bad header: {err})") from None
    body = memoryview(data)[hlen:]
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise ZmrError(f"{p}: not a .safetensors file (__metadata__ is not an object)")
    arrays: dict[str, ndarray] = {}
    lp_dtype = "float64"
    for name, info in header.items():
        try:
            code = info["dtype"]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
            if any(s < 0 for s in shape):
                raise ValueError("negative dimension")
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ZmrError(f"{p}: tensor {name!r} has a malformed header entry") from None
        # Every array of a dump is 1-D; a shape numpy cannot even make (2**63 rows of nothing) is refused here.
        if len(shape) != 1:
            raise ZmrError(f"{p}: tensor {name!r} has shape {shape[:8]}{'...' if len(shape) > 8 else ''}; a dump holds 1-D arrays only")
        if code not in _ST_DTYPES:
            raise ZmrError(f"{p}: tensor {name!r} has dtype {code}, which a dump does not use")
        np_dtype, float_name = _ST_DTYPES[code]
        item = np.dtype(np_dtype).itemsize
        count = math.prod(shape)
        if not (0 <= begin <= end <= len(body)) or end - begin != count * item:
            raise ZmrError(f"{p}: tensor {name!r} has offsets that do not match its shape and dtype")
        arr = np.frombuffer(body[begin:end], dtype=np_dtype).reshape(shape)
        if name == "logprobs":
            if float_name is None:
                raise ZmrError(f"{p}: 'logprobs' has dtype {code}; use F32, BF16 or F64")
            lp_dtype = float_name
            arr = arr.astype(np.dtype(np_dtype).newbyteorder("="))
        elif code in ("F64", "F32", "BF16"):
            raise ZmrError(f"{p}: tensor {name!r} has dtype {code}; only 'logprobs' is floating point")
        arrays[name] = arr
    provenance = None
    if "zmr_dump" in meta:
        try:
            version = int(meta["zmr_dump"])
        except (TypeError, ValueError):
            raise ZmrError(f"{p}: __metadata__ zmr_dump = {meta['zmr_dump']!r} is not a format version") from None
        obj: dict[str, Any] = {"zmr_dump": version}
        if meta.get("provenance"):
            try:
                obj["provenance"] = parse_json(meta["provenance"])
            except ValueError as err:
                raise ZmrError(f"{p}: __metadata__ provenance is not JSON ({err})") from None
        try:
            provenance, _ = _check_header(obj, "")
        except _BadValue as err:
            raise ZmrError(f"{p}: __metadata__: {err}") from None
    return _columnar_records(p, arrays, lp_dtype, provenance, "safetensors")


# --------------------------------------------------------------------------
# Writing


def write_dump(
    path: str | os.PathLike,
    records: Iterable[Any],
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """Write records to `path` (.jsonl/.ndjson, .npz or .safetensors) so they read back bit for bit.

    `records`: dicts or objects (e.g. dataclasses) with id, step, tokens,
    logprobs and optionally dtype. logprobs may be Python floats (dtype from
    the record, default float64), numpy float32/float64 arrays or torch
    float32/bfloat16/float64 tensors. The file is written to a temporary
    name and renamed, so a crash never leaves half a dump.
    """
    p = Path(path)
    fmt = _format_of(p)
    prov = None
    if provenance is not None:
        try:
            prov = _check_provenance(dict(provenance), "")
            json.dumps(prov, allow_nan=False)
        except _BadValue as err:
            raise ZmrError(f"write_dump({p}): {err}") from None
        except (TypeError, ValueError) as err:
            raise ZmrError(f"write_dump({p}): provenance is not plain JSON ({err})") from None
    recs = []
    for i, obj in enumerate(records):
        rid = obj.get("id") if isinstance(obj, Mapping) else getattr(obj, "id", None)
        recs.append(make_record(obj, source=f"write_dump({p}): record {i} (id {rid!r})"))
    if fmt == "jsonl":
        payload = _jsonl_bytes(recs, prov)
        _atomic_write(p, lambda fh: fh.write(payload))
    elif fmt == "npz":
        arrays = _columnar_arrays(p, recs)
        dtype = _single_dtype(p, recs)
        np = _np()
        npz_meta: dict[str, object] = {"zmr_dump": FORMAT_VERSION, "dtype": dtype}
        if prov is not None:
            npz_meta["provenance"] = prov
        arrays["__zmr_dump__"] = np.frombuffer(json.dumps(npz_meta).encode("utf-8"), dtype=np.uint8)
        _atomic_write(p, lambda fh: np.savez(fh, **arrays))
    else:
        arrays = _columnar_arrays(p, recs)
        dtype = _single_dtype(p, recs)
        header_meta = {"zmr_dump": str(FORMAT_VERSION)}
        if prov is not None:
            header_meta["provenance"] = json.dumps(prov, sort_keys=True)
        payload = _safetensors_bytes(arrays, dtype, header_meta)
        _atomic_write(p, lambda fh: fh.write(payload))
    return p


def _jsonl_bytes(recs: list[DumpRecord], prov: dict | None) -> bytes:
    np = _np()
    header: dict[str, Any] = {"zmr_dump": FORMAT_VERSION}
    if prov is not None:
        header["provenance"] = prov
    lines = [json.dumps(header, allow_nan=False)]
    for r in recs:
        values = r.logprobs.tolist()
        bad = np.flatnonzero(~np.isfinite(r.logprobs))
        if len(bad):
            bits = r.logprobs.view(np.uint64)
            for i in bad.tolist():
                values[i] = format_value(int(bits[i]), r.dtype)
        rid: Any = r.id
        lines.append(
            json.dumps(
                {"id": rid, "step": r.step, "dtype": r.dtype, "tokens": r.tokens.tolist(), "logprobs": values},
                allow_nan=False,
            )
        )
    return ("\n".join(lines) + "\n").encode("utf-8")


def _single_dtype(p: Path, recs: list[DumpRecord]) -> str:
    dtypes = sorted({r.dtype for r in recs})
    if len(dtypes) > 1:
        raise ZmrError(
            f"write_dump({p}): the records mix dtypes {', '.join(dtypes)}",
            details=[".npz and .safetensors hold one dtype per file; write .jsonl, or one file per dtype"],
        )
    return dtypes[0] if dtypes else "float64"


def _columnar_arrays(p: Path, recs: list[DumpRecord]) -> dict[str, np.ndarray]:
    np = _np()
    dtype = _single_dtype(p, recs)
    lengths = np.array([len(r.tokens) for r in recs], dtype=np.int64)
    offsets = np.zeros(len(recs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    id_bytes = [r.id.encode("utf-8") for r in recs]
    id_offsets = np.zeros(len(recs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in id_bytes], out=id_offsets[1:])
    values = np.concatenate([r.logprobs for r in recs]) if recs else np.zeros(0)
    native, _ = narrow_bits(values.view(np.uint64), dtype)
    if dtype == "float32":
        logprobs = native.view(np.float32)
    elif dtype == "float64":
        logprobs = native.view(np.float64)
    else:
        logprobs = native  # uint16 bits
    return {
        "step": np.array([r.step for r in recs], dtype=np.int64),
        "id_utf8": np.frombuffer(b"".join(id_bytes), dtype=np.uint8),
        "id_offsets": id_offsets,
        "tokens": np.concatenate([r.tokens for r in recs]) if recs else np.zeros(0, dtype=np.int64),
        "offsets": offsets,
        "logprobs": logprobs,
    }


def _safetensors_bytes(arrays: dict[str, np.ndarray], dtype: str, meta: dict[str, str]) -> bytes:
    np = _np()
    codes = {"float64": "F64", "float32": "F32", "bfloat16": "BF16"}
    header: dict[str, Any] = {"__metadata__": meta}
    chunks = []
    offset = 0
    for name in sorted(arrays):
        arr = arrays[name]
        if name == "logprobs":
            code = codes[dtype]
        else:
            code = {"int64": "I64", "uint8": "U8"}[arr.dtype.name]
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": [int(s) for s in arr.shape], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


def _atomic_write(p: Path, write) -> None:
    """Render with *write* (it gets a binary file object), then replace *p* whole."""
    directory = p.parent if str(p.parent) else Path(".")
    if not directory.is_dir():
        raise ZmrError(f"{p}: the folder {directory} does not exist")
    buffer = io.BytesIO()
    write(buffer)
    try:
        atomic_write(p, buffer.getvalue())
    except OSError as err:
        raise ZmrError(f"{p}: cannot write it ({err.strerror or err})") from None


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


def _cap(lines: list[str], limit: int = _MAX_ERRORS) -> list[str]:
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


def compare(rollout_records: Any, train_records: Any, *, max_listed: int = 100) -> MismatchReport:
    """Pair the records by (step, id) and compute the mismatch report.

    Each side is a `Dump` (from `read_dump`) or an iterable of records
    (`DumpRecord`, dicts or objects, as for `write_dump`). Raises ZmrError
    when a record has no partner, a (step, id) repeats, or token ids differ.
    """
    np = _np()
    r_recs, r_info, r_label = _records_of(rollout_records, "rollout")
    t_recs, t_info, t_label = _records_of(train_records, "train")
    if not r_recs or not t_recs:
        raise ZmrError(f"{r_label if not r_recs else t_label}: no records to compare")
    r_index = _index(r_recs, r_label)
    t_index = _index(t_recs, t_label)

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

    # Pair order: by step, then in the rollout dump's order.
    keys = sorted(r_index, key=lambda k: k[0])
    pairs = [(r_index[k], t_index[k]) for k in keys]

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

    lengths = np.array([len(r.tokens) for r, _ in pairs], dtype=np.int64)
    starts = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    n_tok = int(starts[-1])
    lr = np.concatenate([r.logprobs for r, _ in pairs]) if n_tok else np.zeros(0)
    lt = np.concatenate([t.logprobs for _, t in pairs]) if n_tok else np.zeros(0)
    seg = np.repeat(np.arange(len(pairs)), lengths)

    tok = _token_arrays(lr, lt)
    neq_idx = np.flatnonzero(~tok["eq"])
    first_div = np.full(len(pairs), -1, dtype=np.int64)
    if len(neq_idx):
        segs, first = np.unique(seg[neq_idx], return_index=True)
        first_div[segs] = neq_idx[first] - starts[segs]
    n_eq = np.bincount(seg, weights=tok["eq"], minlength=len(pairs)).astype(np.int64)
    fin = tok["finite"]
    n_fin = np.bincount(seg[fin], minlength=len(pairs))
    sum_abs = np.bincount(seg[fin], weights=tok["absd"], minlength=len(pairs))
    max_abs = np.zeros(len(pairs))
    if fin.any():
        np.maximum.at(max_abs, seg[fin], tok["absd"])
    with np.errstate(invalid="ignore", divide="ignore"):
        seq_mean = np.where(n_fin > 0, sum_abs / np.maximum(n_fin, 1), np.nan)

    sequences = [
        SequenceResult(
            step=r.step,
            id=r.id,
            tokens=int(lengths[i]),
            bitwise_equal=int(n_eq[i]),
            first_diverging=None if first_div[i] < 0 else int(first_div[i]),
            max_abs_diff=float(max_abs[i]) if n_fin[i] else None,
            mean_abs_diff=float(seq_mean[i]) if n_fin[i] else None,
        )
        for i, (r, _) in enumerate(pairs)
    ]

    steps: list[StepStats] = []
    step_of = np.array([r.step for r, _ in pairs], dtype=np.int64)
    bounds = np.flatnonzero(np.diff(step_of)) + 1
    seq_lo = np.concatenate([[0], bounds])
    seq_hi = np.concatenate([bounds, [len(pairs)]])
    for a, b in zip(seq_lo.tolist(), seq_hi.tolist()):
        s = _stats(tok, slice(int(starts[a]), int(starts[b])), first_div[a:b], seq_mean[a:b])
        steps.append(StepStats(**s.__dict__, step=int(step_of[a])))
    overall = _stats(tok, slice(0, n_tok), first_div, seq_mean)

    # Tokens listed on their own.
    def listing(mask: ndarray, kind: str) -> list[SpecialToken]:
        out = []
        rb, tb = lr.view(np.uint64), lt.view(np.uint64)
        for idx in np.flatnonzero(mask)[:max_listed].tolist():
            i = int(seg[idx])
            r, t = pairs[i]
            pos = idx - int(starts[i])
            out.append(
                SpecialToken(
                    kind=kind,
                    step=r.step,
                    id=r.id,
                    position=pos,
                    rollout=format_value(int(rb[idx]), r.dtype),
                    train=format_value(int(tb[idx]), t.dtype),
                    rollout_bits=_native_hex(int(rb[idx]), r.dtype),
                    train_bits=_native_hex(int(tb[idx]), t.dtype),
                )
            )
        return out

    nan_any = tok["nan_r"] | tok["nan_t"]
    report_notes = _notes(r_info, t_info, overall, int(nan_any.sum()), int((nan_any & tok["eq"]).sum()))
    return MismatchReport(
        rollout=r_info,
        train=t_info,
        overall=overall,
        steps=steps,
        sequences=sequences,
        signed_zeros=listing(tok["signed_zero"], "signed_zero"),
        nans=listing(nan_any, "nan"),
        nan_tokens=int(nan_any.sum()),
        notes=report_notes,
    )


def _token_arrays(lr: np.ndarray, lt: np.ndarray) -> dict[str, np.ndarray]:
    """Per-token arrays over all tokens, plus per-finite-token figures (compressed)."""
    np = _np()
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
    np = _np()
    out = np.expm1(d) - d
    small = np.abs(d) < 1e-3
    if small.any():
        x = d[small]
        # d^2/2 + d^3/6 + d^4/24 + d^5/120: the first omitted term is below 1e-18 relative.
        out[small] = x * x * (0.5 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120))))
    return out


def _stats(tok: dict[str, np.ndarray], sl: slice, first_div: np.ndarray, seq_mean: np.ndarray) -> Stats:
    np = _np()
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
        notes.append(f"the rollout dump holds {'/'.join(r.dtypes)} and the train dump {'/'.join(t.dtypes)}: values are compared exactly as float64")
    for comp in sorted(set(r.trees) & set(t.trees)):
        if r.trees[comp].lower() != t.trees[comp].lower():
            notes.append(f"the dumps name different commits for {comp}: {r.trees[comp]} (rollout) and {t.trees[comp]} (train)")
    if overall.signed_zero:
        notes.append(f"{overall.signed_zero} token(s) differ only in the sign of zero (+0.0 vs -0.0)")
    if nan_tokens:
        notes.append(
            f"{nan_tokens} token(s) are NaN on at least one side ({nan_equal} with equal bits on both); "
            f"NaN and infinite tokens are left out of the numeric figures"
        )
    elif overall.nonfinite:
        notes.append(f"{overall.nonfinite} token(s) are infinite on a side and left out of the numeric figures")
    if not overall.all_bitwise_equal and overall.k1 is not None and overall.mean_abs_diff and abs(overall.k1) <= 0.01 * overall.mean_abs_diff:
        notes.append(
            f"k1 = {overall.k1:.3g} although {overall.tokens - overall.bitwise_equal} token(s) differ: "
            f"positive and negative differences cancel in k1; the verdict is bitwise"
        )
    return notes


# --------------------------------------------------------------------------
# Plot


def plot_report(report: MismatchReport, path: str | os.PathLike) -> Path:
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
    _atomic_write(p, lambda fh: fig.savefig(fh, format="png"))
    return p
