"""Log-prob dumps: what an engine writes per token and `zmr mismatch` reads (docs/reference.md §10).

`read_dump` turns a file into a `Dump` of `DumpRecord`s whose log-probs are
exact (every bit of the engine's value is kept); `write_dump` is the writer
for engines and tests; `make_record` builds one record from Python or torch
values. numpy is imported inside the functions, never at import time.

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
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from zmr.evidence.dumps import safetensors
from zmr.evidence.dumps.bits import CANONICAL_NAN, DTYPE_NAMES, DTYPES, HEX_DIGITS, SIGN_BIT, format_value, narrow_bits, numpy, widen_bits
from zmr.infra.errors import ZmrError
from zmr.infra.files import atomic_write, open_regular, parse_json

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from numpy import ndarray  # for annotations inside functions that bind a local `np`


FORMAT_VERSION = 1
"""The `zmr_dump` value written, and the newest one read."""
_HEADER_KEYS = ("zmr_dump", "provenance", "dtype")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".npz": "npz", ".safetensors": "safetensors"}
_COMMIT_RE = re.compile(r"\A[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?\Z")
MAX_LISTED_ERRORS = 20


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
        bits, _ = narrow_bits(self.logprobs.view(numpy().uint64), self.dtype)
        return bits


@dataclass(eq=False)
class Dump(Sequence[DumpRecord]):
    """The records of one dump file with its metadata; a sequence of `DumpRecord`."""

    records: list[DumpRecord]
    provenance: dict[str, Any] | None = None
    path: str | None = None
    format: str | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: Any) -> Any:
        return self.records[index]

    def __iter__(self) -> Iterator[DumpRecord]:
        return iter(self.records)


# --------------------------------------------------------------------------
# Turning Python values (floats, numpy arrays, torch tensors) into records


class _BadValue(Exception):
    """A value problem; the caller adds where it is."""


def _dtype_name(value: Any, where: str) -> str:
    if not isinstance(value, str) and value is not None:  # a numpy or torch dtype object
        value = str(getattr(value, "name", None) or value).replace("torch.", "")
    if not isinstance(value, str) or value.lower() not in DTYPE_NAMES:
        raise _BadValue(f"{where}dtype {value!r} is not one of {', '.join(DTYPES)}")
    return DTYPE_NAMES[value.lower()]


def _parse_special(text: str, dtype: str) -> int:
    """A string log-prob -> float64 bits."""
    t = text.strip().lower()
    if t in ("inf", "+inf", "infinity", "+infinity"):
        return 0x7FF0000000000000
    if t in ("-inf", "-infinity"):
        return 0xFFF0000000000000
    if t in ("nan", "+nan", "-nan"):
        native = CANONICAL_NAN[dtype] | (SIGN_BIT[dtype] if t.startswith("-") else 0)
    elif t.startswith("nan:0x"):
        digits = t[len("nan:0x") :]
        if len(digits) != HEX_DIGITS[dtype] or not re.fullmatch(r"[0-9a-f]+", digits):
            raise _BadValue(f"{text!r}: a {dtype} NaN needs exactly {HEX_DIGITS[dtype]} hex digits after 'nan:0x' (the bits in the record's dtype)")
        native = int(digits, 16)
        width = {"bfloat16": 16, "float32": 32, "float64": 64}[dtype]
        exp_bits = {"bfloat16": 8, "float32": 8, "float64": 11}[dtype]
        man_bits = width - 1 - exp_bits
        if (native >> man_bits) & ((1 << exp_bits) - 1) != (1 << exp_bits) - 1 or native & ((1 << man_bits) - 1) == 0:
            raise _BadValue(f"{text!r} is not a NaN bit pattern; write a number as a JSON number")
    else:
        raise _BadValue(f"{text!r} is not a log-prob: use a JSON number, or one of inf, -inf, nan, -nan, nan:0x<bits>")
    np = numpy()
    widened = widen_bits(np.array([native], dtype=np.uint64), dtype)
    return int(widened[0])


def _floats_from_list(values: Sequence[Any], dtype: str) -> np.ndarray:
    """JSON-style values (floats, ints, strings) -> float64 array of `dtype` values."""
    np = numpy()
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
    return cast("ndarray", out)


def _check_representable(values: np.ndarray, dtype: str) -> None:
    if dtype == "float64":
        return
    np = numpy()
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
    np = numpy()
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
    np = numpy()
    if _is_torch(obj):
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        if obj.ndim != 1 or obj.dtype.kind not in "iu":
            raise _BadValue(f"tokens must be a 1-D integer array, not {obj.ndim}-D {obj.dtype.name}")
        if obj.dtype == np.uint64 and obj.size and int(obj.max()) >= 2**63:
            raise _BadValue("tokens holds ids that do not fit int64")
        return cast("ndarray", obj.astype(np.int64))
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            if not isinstance(v, int) or isinstance(v, bool):
                if hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu":
                    continue
                raise _BadValue(f"tokens[{i}] = {v!r} is not an integer token id")
        try:
            return cast("ndarray", np.array(obj, dtype=np.int64))
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


def _check_header(obj: dict[str, Any], where: str) -> tuple[dict[str, Any] | None, str | None]:
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


def read_dump(path: str | os.PathLike[str]) -> Dump:
    """Read a dump (.jsonl/.ndjson, .npz, .safetensors); raises ZmrError naming file and line."""
    numpy()  # where it is missing, that error before any other (a line read without it is no bad line)
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
        if len(errors) >= MAX_LISTED_ERRORS:
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


def _columnar_records(p: Path, arrays: dict[str, np.ndarray], logprob_dtype: str, provenance: dict[str, Any] | None, fmt: str) -> Dump:
    """Shared by the .npz and .safetensors readers: arrays are already decoded."""
    np = numpy()

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
    np = numpy()
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
    np = numpy()
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
    np = numpy()
    data = fh.read()
    try:
        header, meta, body_start = safetensors.split(data)
    except safetensors.Malformed as err:
        raise ZmrError(f"{p}: not a .safetensors file ({err})") from None
    body = memoryview(data)[body_start:]
    itemsize = {code: np.dtype(np_dtype).itemsize for code, (np_dtype, _) in _ST_DTYPES.items()}
    arrays: dict[str, ndarray] = {}
    lp_dtype = "float64"
    for name, info in header.items():
        try:
            t = safetensors.tensor(info, len(body), itemsize)
        except safetensors.Malformed as err:
            if str(err).startswith("dtype "):
                raise ZmrError(f"{p}: tensor {name!r} has {err}, which a dump does not use") from None
            raise ZmrError(f"{p}: tensor {name!r} has {err}") from None
        # Every array of a dump is 1-D.
        if len(t.shape) != 1:
            raise ZmrError(f"{p}: tensor {name!r} has shape {list(t.shape[:8])}{'...' if len(t.shape) > 8 else ''}; a dump holds 1-D arrays only")
        code = t.code
        np_dtype, float_name = _ST_DTYPES[code]
        arr = np.frombuffer(body[t.begin : t.end], dtype=np_dtype).reshape(t.shape)
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
    path: str | os.PathLike[str],
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
        write_rendered(p, lambda fh: fh.write(payload))
    elif fmt == "npz":
        arrays = _columnar_arrays(p, recs)
        dtype = _single_dtype(p, recs)
        np = numpy()
        npz_meta: dict[str, object] = {"zmr_dump": FORMAT_VERSION, "dtype": dtype}
        if prov is not None:
            npz_meta["provenance"] = prov
        arrays["__zmr_dump__"] = np.frombuffer(json.dumps(npz_meta).encode("utf-8"), dtype=np.uint8)
        write_rendered(p, lambda fh: np.savez(fh, **arrays))
    else:
        arrays = _columnar_arrays(p, recs)
        dtype = _single_dtype(p, recs)
        header_meta = {"zmr_dump": str(FORMAT_VERSION)}
        if prov is not None:
            header_meta["provenance"] = json.dumps(prov, sort_keys=True)
        payload = _safetensors_bytes(arrays, dtype, header_meta)
        write_rendered(p, lambda fh: fh.write(payload))
    return p


def _jsonl_bytes(recs: list[DumpRecord], prov: dict[str, Any] | None) -> bytes:
    np = numpy()
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
    np = numpy()
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
    np = numpy()
    codes = {"float64": "F64", "float32": "F32", "bfloat16": "BF16"}
    tensors = []
    for name, arr in arrays.items():
        code = codes[dtype] if name == "logprobs" else {"int64": "I64", "uint8": "U8"}[arr.dtype.name]
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        tensors.append((name, code, tuple(arr.shape), raw))
    return safetensors.encode(tensors, meta)


def write_rendered(p: Path, write: Callable[[BinaryIO], object]) -> None:
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
