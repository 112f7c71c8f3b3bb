"""Tensor dumps: one safetensors file per step, written by `zmr.evidence.dumps.recording`, read by `zmr locate` (docs/reference.md §11).

`read_side` reads a folder of ``step-*.safetensors`` (or one file) into a
`SideDump` of `StepFile`s, each with its `Record`s (one per recorded
operation) and the row sets that say which (sequence, position) each row of
a tensor is. Files are mapped, not read: tensors are paged in only when
compared. `write_step` is the writer the recorder uses.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zmr.evidence.dumps import safetensors
from zmr.evidence.dumps.bits import TENSOR_CODES, TENSOR_DTYPES, numpy
from zmr.infra.errors import ZmrError
from zmr.infra.files import open_regular, parse_json

FORMAT_VERSION = 1
"""``zmr_locate`` in a dump's metadata; this zmr reads 1 and refuses newer ones."""

STEP_GLOB = "step-*.safetensors"
STEP_NAME = "step-{:06d}.safetensors"


# ==========================================================================
# Reading dumps


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a record: stored (``key``) when row-aligned, else only its digest."""

    slot: str
    shape: tuple[int, ...]
    dtype: str
    aligned: str | None
    key: str | None
    digest: str | None


@dataclass(eq=False)
class Record:
    """One recorded operation of a step; ``name`` is after the name map."""

    index: int
    name: str
    original: str
    kind: str
    site: str | None
    rowset: int
    tensors: dict[str, TensorInfo]
    step: "StepFile"


@dataclass(eq=False)
class StepFile:
    """One step file: its rows and records, tensors read on demand."""

    path: Path
    side: str
    number: int
    label: str | None
    seq_ids: list[str]
    rowset_shapes: list[tuple[int, ...]]
    records: list[Record] = field(default_factory=list)
    _data: Any = None  # the file's bytes (an mmap)
    _entries: dict[str, tuple[str, tuple[int, ...], int, int]] = field(default_factory=dict)
    _keys: dict[int, list[tuple[str, int] | None]] = field(default_factory=dict)

    def array(self, key: str) -> Any:
        """The stored tensor *key* as an array of its bits (unsigned ints of the element's width)."""
        np = numpy()
        code, shape, begin, end = self._entries[key]
        dtype = TENSOR_CODES[code]
        width = TENSOR_DTYPES[dtype][1]
        assert self._data is not None
        bits = np.frombuffer(self._data, dtype=f"<u{width}", count=(end - begin) // width, offset=begin)
        return bits.reshape(shape)

    def row_keys(self, rowset: int) -> list[tuple[str, int] | None]:
        """(sequence id, position) per row of *rowset* (flattened), None for padding."""
        cached = self._keys.get(rowset)
        if cached is None:
            seq = self.array(f"rows.{rowset}.seq").reshape(-1).view("<i8")
            pos = self.array(f"rows.{rowset}.pos").reshape(-1).view("<i8")
            cached = [None if s < 0 else (self.seq_ids[s], int(p)) for s, p in zip(seq.tolist(), pos.tolist())]
            self._keys[rowset] = cached
        return cached

    def row_tokens(self, rowset: int) -> Any:
        return self.array(f"rows.{rowset}.tok").reshape(-1).view("<i8")


@dataclass(eq=False)
class SideDump:
    """All step files of one side, in step order."""

    path: Path
    side: str
    steps: list[StepFile]


def read_side(path: str | os.PathLike[str], label: str) -> SideDump:
    """The dump at *path*: a folder of step files, or one step file."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob(STEP_GLOB))
        if not files:
            files = sorted(p.glob("*.safetensors"))
        if not files:
            raise ZmrError(
                f"{p}: no step files ({STEP_GLOB}) in this folder", details=[f"is it the folder a zmr.evidence.locate.Recorder wrote the {label} dump to?"]
            )
    elif p.exists() or p.is_symlink():
        files = [p]  # a FIFO or a device is refused by _read_step, unread
    else:
        raise ZmrError(f"{p}: no such file or folder ({label} dump)")
    steps = [_read_step(f) for f in files]
    sides = sorted({s.side for s in steps})
    steps.sort(key=lambda s: (s.number, str(s.path)))
    numbers = [s.number for s in steps]
    if len(set(numbers)) != len(numbers):
        dup = next(n for n in numbers if numbers.count(n) > 1)
        raise ZmrError(f"{p}: two files are step {dup} (of different runs?)", details=["record each run into its own folder"])
    if len(sides) > 1:
        raise ZmrError(f"{p}: the files come from different sides ({', '.join(sides)})", details=["keep each side's dump in its own folder"])
    return SideDump(p, sides[0], steps)


def _read_step(path: Path) -> StepFile:
    bad = f"{path}: not a zmr locate dump"
    try:
        with open_regular(path, limit=None, what="locate dump") as handle:
            if os.fstat(handle.fileno()).st_size < 8:
                raise ZmrError(f"{bad} (safetensors: too short)")
            # Mapped, not read: tensors are paged in only when compared.
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as err:
        raise ZmrError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        header, meta, body_start = safetensors.split(data)
    except safetensors.Malformed as err:
        raise ZmrError(f"{bad} (safetensors: {err})") from None
    if "zmr_locate" not in meta:
        raise ZmrError(f"{bad} (no zmr_locate metadata)", details=["write dumps with zmr.evidence.locate.Recorder"])
    try:
        version = int(meta["zmr_locate"])
    except (TypeError, ValueError):
        raise ZmrError(f"{path}: zmr_locate = {meta['zmr_locate']!r} is not a format version") from None
    if version > FORMAT_VERSION:
        raise ZmrError(f"{path}: dump format {version} is newer than this zmr reads ({FORMAT_VERSION})", details=["update zmr"])
    try:
        index = parse_json(meta["index"])
        step = StepFile(
            path=path,
            side=str(index["side"]),
            number=int(index["step"]),
            label=index.get("label"),
            seq_ids=[str(s) for s in index["seq_ids"]],
            rowset_shapes=[tuple(int(x) for x in r["shape"]) for r in index["rowsets"]],
        )
        itemsize = {code: TENSOR_DTYPES[name][1] for code, name in TENSOR_CODES.items()}
        for key, info in header.items():
            try:
                t = safetensors.tensor(info, len(data) - body_start, itemsize)
            except safetensors.Malformed as err:
                raise ValueError(f"tensor {key!r} has {err}") from None
            step._entries[key] = (t.code, t.shape, body_start + t.begin, body_start + t.end)
        step._data = data
        for k, shape in enumerate(step.rowset_shapes):
            for part in ("seq", "pos", "tok"):
                entry = step._entries.get(f"rows.{k}.{part}")
                if entry is None or entry[1] != shape or entry[0] != "I64":
                    raise ValueError(f"row set {k}: rows.{k}.{part} is missing or not I64 of shape {list(shape)}")
        for r in index["records"]:
            tensors = {}
            for t in r["tensors"]:
                info = TensorInfo(str(t["slot"]), tuple(int(s) for s in t["shape"]), str(t["dtype"]), t.get("aligned"), t.get("key"), t.get("sha256"))
                if any(s < 0 for s in info.shape):
                    raise ValueError(f"record {r['name']!r}: tensor {info.slot!r} has a negative dimension")
                if info.dtype not in TENSOR_DTYPES or info.aligned not in (None, "lead", "flat"):
                    raise ValueError(f"record {r['name']!r}: tensor {info.slot!r} has dtype {info.dtype!r}, alignment {info.aligned!r}")
                if info.key is not None and info.key not in step._entries:
                    raise ValueError(f"record {r['name']!r}: tensor {info.key!r} is missing")
                if (info.key is None) == (info.digest is None):
                    raise ValueError(f"record {r['name']!r}: tensor {info.slot!r} needs a key or a sha256")
                tensors[info.slot] = info
            rowset = int(r["rows"])
            if not 0 <= rowset < len(step.rowset_shapes):
                raise ValueError(f"record {r['name']!r}: row set {rowset} does not exist")
            name = str(r["name"])
            step.records.append(Record(int(r["index"]), name, name, str(r.get("kind", "")), r.get("site"), rowset, tensors, step))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
        raise ZmrError(f"{bad} (malformed index: {err})") from None
    return step
