"""Tensor dumps of rollout and trainer, and `zmr locate`: the first operation whose output differs.

Making a model zero-mismatch is a hunt: run the rollout engine and the
trainer on the same tokens, dump the intermediate tensors of both, find the
first operation whose output differs in any bit, fix that kernel, repeat.
This module is both halves of it:

- **recording** (runs inside the engines, needs torch only for torch
  tensors): a `Recorder` writes one safetensors file per *step* (one forward
  pass); inside a step, operations are recorded by forward hooks on an
  `nn.Module` tree (`hook_modules`), by wrapping named functions of a module
  or class without editing them (`trace_functions`), or by explicit
  `dump(name, tensor)` calls in functional code;
- **locating** (`locate`, the `zmr locate` command; numpy only): pair the rows
  of both sides by (sequence id, position), walk the operations in execution
  order, and report the first one whose output differs in any bit, whether
  its inputs were equal (then it is at fault) or not (then something earlier,
  not recorded, is), and max |Δ| per operation after it.

Nothing here imports torch at import time: `zmr locate` never needs it, and the
recording helpers import it only when they meet a torch tensor or module.

Rows
----
Every step declares its *rows*: for each row of the tensors it will see, the
sequence id, the position in the sequence (prompt and response counted
together, 0-based) and, ideally, the token id at that position. A tensor is
*row-aligned* when its leading dimensions equal the rows' shape (e.g. rows
``[B, T]`` and hidden states ``[B, T, H]``), or its first dimension is the
number of rows (``[B*T, H]``). Row-aligned tensors are stored whole and
compared row by row; any other tensor (weights, a KV cache, lengths) is
stored as shape, dtype and SHA-256 of its bytes, and compared whole.

- a rollout engine's rows are the tokens of a forward pass: a prefill of
  sequence ``s`` has rows ``(s, 0) .. (s, n-1)``; a decode step has one row
  per batch slot, ``(s_b, p_b)``;
- a trainer's rows are ``(s_b, t)`` for every sequence ``b`` of the batch and
  position ``t``; padding gets the sequence id ``None`` (`padded_rows`).
  Label only the positions the rollout also computes: the last token of a
  sequence is never fed through the rollout engine, so leave it out.

When a call inside a step sees fewer rows (a prefill that computes logits for
its last position only), wrap that call in ``recorder.rows(...)``. Both sides
must cover the same (sequence id, position) pairs with the same token ids,
or `locate` refuses (the dumps are of different runs).

Recording: the toy engines of the demo (plain functions)
--------------------------------------------------------
::

    from zmr import locate

    with locate.Recorder("dumps/rollout", side="rollout") as rec, \\
         locate.trace_functions(toy_rollout.ops, ["linear", "rms_norm", "silu"]), \\
         locate.trace_functions(toy_rollout.attention, ["prefill_attention", "decode_attention"]):
        with rec.step(seq_ids="req-7", positions=range(n), tokens=prompt, label="prefill"):
            model.prefill(ids, cache, slot)
        ...

`trace_functions(target, names)` replaces each named function of a module
(or class) by a recording wrapper, in that module and in every module of the
same top-level package that imported it by name (``from .ops import
linear``), and puts them all back on exit. Each call inside a step records
its tensor arguments (named by the function's parameters: ``in.x``,
``in.weight``) and its tensor results (``out``, or ``out.0``, ``out.1``...
for tuples). A name given as a mapping ``{"prefill_attention": "attention"}``
records under another name.

Recording: vLLM and Megatron-LM (nn.Module trees)
-------------------------------------------------
``with locate.hook_modules(model, include=["*.layers.*"]):`` registers a
forward pre-hook and a forward hook on every submodule whose name (from
``named_modules()``) matches; each call records the module's tensor inputs
and outputs under that name. Then open one step per forward pass:

- **vLLM**: run the model in the driver process and eagerly
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``enforce_eager=True``: hooks do
  not run inside captured CUDA graphs), hook
  ``llm.llm_engine.model_executor.driver_worker.model_runner.model`` (the
  path moves between versions; any handle on the ``nn.Module`` works), and
  wrap the model runner's ``execute_model`` so that each forward opens
  ``rec.step(seq_ids, positions, tokens)`` with one row per scheduled token
  (request id, position, token id: the runner's input batch has them);
  padded rows of a CUDA-graph-sized batch get ``None``.
- **Megatron-LM**: hook the ``GPTModel`` (``decoder.layers.N.self_attention``,
  ``...mlp``, ``output_layer``) and open a step around each forward with
  `padded_rows`; activations are ``[s, b, h]``, so use ``layout="tb"``.
  With tensor or sequence parallelism, dump rank 0 of a run with TP=1 (or
  gather before dumping): sharded tensors do not pair with full ones.
- The two sides name their modules differently (vLLM
  ``model.layers.0.self_attn.qkv_proj``, Megatron
  ``decoder.layers.0.self_attention.linear_qkv``): write a name map
  (``zmr locate --map names.yaml``, below) instead of renaming anything.
- A fused module on one side (vLLM's ``qkv_proj``, ``gate_up_proj``) has no
  single counterpart on the other; compare at the boundaries both sides share
  (the decoder layer, the attention block, the MLP, the final norm), and go
  finer with `dump` inside the kernel being fixed.

Dump format (one safetensors file per step: ``<folder>/step-NNNNNN.safetensors``)
------------------------------------------------------------------------------
The file is an ordinary safetensors file (the ``safetensors`` package reads
it); ``__metadata__`` holds ``"zmr_locate": "1"`` and ``"index"``: JSON with

- ``side`` (``rollout``/``train``/any label), ``step`` (integer, the order of
  steps on this side), ``label`` (free text: ``prefill``, ``decode``...),
  ``seq_ids`` (the sequence ids used in this file, strings);
- ``rowsets``: ``[{"shape": [...]}]``; row set ``k`` is the tensors
  ``rows.k.seq`` (I64: index into ``seq_ids``, -1 for padding),
  ``rows.k.pos`` (I64 positions) and ``rows.k.tok`` (I64 token ids, -1 when
  unknown), each of that shape;
- ``records``: the operations in execution order, each
  ``{"index", "name", "kind" (function|module|dump), "site", "rows" (row set),
  "tensors": [{"slot", "shape", "dtype", "aligned", "key" | "sha256"}]}``.
  ``index`` is the execution order inside the step (a record is numbered
  when its outputs exist, so an inner call comes before its caller);
  ``name`` is the function or module name, with ``#k`` added for the k-th
  call (from 0, ``#0`` left out) of the same name in the step; ``aligned``
  is ``lead`` (leading dims are the rows), ``flat`` (first dim is the
  number of rows) or null (stored as ``sha256`` only); ``key`` names the
  tensor in the file (``op.<index>.<slot>``), in its own dtype (F64, F32,
  F16, BF16, F8_E4M3, F8_E5M2, integer and BOOL codes).

Name map (``zmr locate --map FILE``, YAML or JSON)
--------------------------------------------------
::

    rollout:                          # rollout op name -> the name it is compared under
      prefill_attention: attention    # a base name: prefill_attention#1 -> attention#1
      decode_attention: attention
      're:model\\.layers\\.(\\d+)\\.self_attn': 'decoder.layers.\\1.self_attention'
    train: {}                         # the same for the trainer's names

A mapping without the ``rollout``/``train`` sections is the rollout section.
A key matches a whole name, else the name without ``#k``; ``re:`` keys are
regular expressions matched against the whole name (``\\1`` in the value).
Entries that match nothing are listed as notes (a typo must not pass
silently); two operations of one step mapped to one name are an error.

The locate algorithm
--------------------
1. Rows: the (sequence id, position) pairs of each side (all its steps);
   unpaired rows and rows whose token ids differ are errors naming them.
2. Operations present on both sides (after the name map) are put in
   execution order: by their smallest op index on the rollout side, then on
   the trainer side. Operations on one side only are listed.
3. For each operation, every row present on both sides (first occurrence per
   side) is compared on every output slot both sides have, bit for bit
   (``-0.0`` against ``0.0`` and NaN payloads are differences; different
   dtypes are compared as values and noted). A per-row shape difference is
   an error. The first operation with a differing row is *the* divergence;
   its first differing row is the earliest in the rollout's execution order.
4. For that row, each input both sides recorded is compared (row-aligned:
   that row; otherwise the whole tensor by digest). Inputs equal: this
   operation introduces the difference. An input differs: the fault is
   earlier, in code that was not recorded. Per operation, ``introduced``
   counts the differing rows whose inputs were all equal.

Exit status of ``zmr locate``: 0 no divergence, 1 a divergence (the report
says where), 2 bad input (unpaired rows, shapes, unreadable dumps).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import inspect
import json
import math
import mmap
import os
import re
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from zmr.errors import CheckFailed, ZmrError
from zmr.files import atomic_write, open_regular, parse_json, read_repo_file

if TYPE_CHECKING:  # pragma: no cover
    pass

FORMAT_VERSION = 1
"""``zmr_locate`` in a dump's metadata; this zmr reads 1 and refuses newer ones."""
MAX_NAME_MAP_BYTES = 1 << 20

SCHEMA_VERSION = 1
"""``schema_version`` of `LocateReport.to_json`."""

STEP_GLOB = "step-*.safetensors"
_STEP_NAME = "step-{:06d}.safetensors"
_MAX_LISTED = 10

# dtype name (torch/numpy spelling) -> (safetensors code, bytes per element)
_DTYPES: dict[str, tuple[str, int]] = {
    "float64": ("F64", 8),
    "float32": ("F32", 4),
    "float16": ("F16", 2),
    "bfloat16": ("BF16", 2),
    "float8_e4m3fn": ("F8_E4M3", 1),
    "float8_e5m2": ("F8_E5M2", 1),
    "int64": ("I64", 8),
    "int32": ("I32", 4),
    "int16": ("I16", 2),
    "int8": ("I8", 1),
    "uint64": ("U64", 8),
    "uint32": ("U32", 4),
    "uint16": ("U16", 2),
    "uint8": ("U8", 1),
    "bool": ("BOOL", 1),
}
_CODES = {code: name for name, (code, _) in _DTYPES.items()}
_FLOATS = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def _np():
    try:
        import numpy
    except ImportError as err:  # pragma: no cover - numpy is a dependency
        raise ZmrError("zmr locate needs numpy, which is not installed", details=["install it: pip install numpy"]) from err
    return numpy


# ==========================================================================
# Rows


@dataclass(frozen=True, eq=False)
class Rows:
    """Row labels of the tensors of a step: sequence id, position and token per row.

    Invariant: `seq` (object array of str or None), `pos` and `tok` (int64,
    -1 for unknown tokens) have the same shape, the rows' shape.
    """

    seq: Any
    pos: Any
    tok: Any

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.pos.shape)

    @property
    def size(self) -> int:
        return int(self.pos.size)

    @classmethod
    def make(cls, seq_ids: Any, positions: Any, tokens: Any = None) -> "Rows":
        """Rows from sequence ids (one per row, or one for all), positions and token ids.

        Any of them may be a list, a numpy array or a torch tensor; a sequence
        id of None marks a padding row.
        """
        np = _np()
        pos = _int_array(positions, "positions")
        if pos.ndim == 0:
            raise ZmrError("rows: positions must be a list (one per row), not a single number")
        if isinstance(seq_ids, (str, int)) and not isinstance(seq_ids, bool):
            seq = np.empty(pos.shape, dtype=object)
            seq.fill(str(seq_ids))
        else:
            raw = _to_list(seq_ids)
            seq = np.empty(pos.shape, dtype=object)
            try:
                flat = list(_flatten(raw))
            except TypeError:
                raise ZmrError("rows: seq_ids must be a string, or a list of them shaped like positions") from None
            if len(flat) != pos.size:
                raise ZmrError(f"rows: {len(flat)} sequence ids for {pos.size} positions; give one per row (shape {list(pos.shape)})")
            seq.reshape(-1)[:] = [None if s is None else str(s) for s in flat]
        if tokens is None:
            tok = np.full(pos.shape, -1, dtype=np.int64)
        else:
            tok = _int_array(tokens, "tokens")
            if tok.shape != pos.shape:
                raise ZmrError(f"rows: tokens have shape {list(tok.shape)}, positions {list(pos.shape)}; give one token per row")
        return cls(seq, pos, tok)

    def narrow(self, index: Any) -> "Rows":
        """The rows at *index* (numpy indexing), e.g. ``rows.narrow(slice(-1, None))``."""
        return Rows(self.seq[index], self.pos[index], self.tok[index])


def padded_rows(seq_ids: Sequence[Any], lengths: Sequence[int], width: int, tokens: Any = None, layout: str = "bt") -> Rows:
    """Rows of a right-padded batch: sequence b has positions 0..lengths[b]-1, the rest is padding.

    *tokens*: the ``[B, width]`` ids (``[width, B]`` for layout ``tb``);
    *layout*: ``bt`` (batch first: HF, verl, the demo trainer) or ``tb``
    (sequence first: Megatron's ``[s, b, h]``).
    """
    np = _np()
    lengths = [int(x) for x in _to_list(lengths)]
    if len(lengths) != len(seq_ids):
        raise ZmrError(f"padded_rows: {len(seq_ids)} sequence ids but {len(lengths)} lengths")
    seq = np.empty((len(lengths), width), dtype=object)
    pos = np.tile(np.arange(width, dtype=np.int64), (len(lengths), 1))
    for b, (sid, n) in enumerate(zip(seq_ids, lengths)):
        if n > width:
            raise ZmrError(f"padded_rows: sequence {sid!r} has length {n}, more than the width {width}")
        seq[b, :n] = str(sid)
    tok = None
    if tokens is not None:
        tok = _int_array(tokens, "tokens")
        if layout == "tb":
            tok = tok.T
        if tok.shape != pos.shape:
            raise ZmrError(f"padded_rows: tokens have shape {list(tok.shape)}, expected {[len(lengths), width]} for layout {layout!r}")
    if layout == "tb":
        seq, pos = seq.T.copy(), pos.T.copy()
        tok = tok.T.copy() if tok is not None else None
    elif layout != "bt":
        raise ZmrError(f"padded_rows: layout {layout!r} is not 'bt' or 'tb'")
    return Rows.make(seq.tolist(), pos, tok)


def _to_list(obj: Any) -> Any:
    if hasattr(obj, "detach"):  # torch
        return obj.detach().cpu().tolist()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, range):
        return list(obj)
    return obj


def _flatten(obj: Any) -> Iterator[Any]:
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _flatten(item)
    elif obj is None or isinstance(obj, (str, int)):
        yield obj
    else:
        raise TypeError(type(obj).__name__)


def _int_array(obj: Any, what: str):
    np = _np()
    try:
        arr = np.asarray(_to_list(obj))
    except (TypeError, ValueError):
        raise ZmrError(f"rows: {what} must be integers") from None
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ZmrError(f"rows: {what} must be integers, got {arr.dtype.name}")
    return arr.astype(np.int64)


# ==========================================================================
# Recording


_LOCK = threading.RLock()
_ACTIVE: list["Recorder"] = []


def active() -> "Recorder | None":
    """The innermost active recorder (``with Recorder(...)``), or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def dump(name: str, output: Any = None, *, inputs: Mapping[str, Any] | None = None, rows: Rows | None = None) -> None:
    """Record *output* (a tensor, array, or a tuple/dict of them) as operation *name*.

    Goes to the active recorder's open step; does nothing when no step is
    open, so dump calls can stay in functional code. *inputs* (name ->
    tensor) are recorded as the operation's inputs; *rows* overrides the
    step's rows for this record.
    """
    rec = active()
    if rec is not None:
        rec.dump(name, output, inputs=inputs, rows=rows)


@dataclass
class _Captured:
    slot: str
    shape: tuple[int, ...]
    dtype: str
    aligned: str | None
    data: bytes | None
    digest: str | None


@dataclass
class _PendingRecord:
    index: int
    name: str
    kind: str
    site: str | None
    rowset: int
    tensors: list[_Captured]


class _Step:
    def __init__(self, number: int, rows: Rows, label: str | None):
        self.number = number
        self.label = label
        self.rowsets: list[Rows] = [rows]
        self.rows_stack: list[int] = [0]
        self.records: list[_PendingRecord] = []
        self.calls: dict[str, int] = {}
        self.next_index = 0

    def call_name(self, base: str) -> str:
        k = self.calls.get(base, 0)
        self.calls[base] = k + 1
        return base if k == 0 else f"{base}#{k}"


class Recorder:
    """Writes one safetensors file per step into *folder* (see the module doc).

    ``with Recorder(folder, side) as rec:`` makes it the active recorder (the
    one `dump`, `trace_functions` and `hook_modules` record into); inside,
    ``with rec.step(seq_ids, positions, tokens, label=...):`` is one forward
    pass. *inputs*: record operations' tensor inputs (True), only the
    row-aligned ones ("aligned"), or none (False). A folder that already holds
    step files is refused unless *overwrite* (they are removed first): steps
    of two runs must not mix.
    """

    def __init__(self, folder: str | os.PathLike[str], side: str = "rollout", *, inputs: bool | str = True, overwrite: bool = False):
        if inputs not in (True, False, "aligned"):
            raise ZmrError(f"Recorder: inputs={inputs!r}; use True, False or 'aligned'")
        self.folder = Path(folder)
        self.side = side
        self.inputs = inputs
        self.folder.mkdir(parents=True, exist_ok=True)
        old = sorted(self.folder.glob(STEP_GLOB))
        if old and not overwrite:
            raise ZmrError(f"{self.folder}: already holds {len(old)} step files", details=["use an empty folder, or Recorder(..., overwrite=True)"])
        for path in old:
            path.unlink()
        self._steps = 0
        self._step: _Step | None = None
        self.files: list[Path] = []

    # -- activation ---------------------------------------------------------
    def __enter__(self) -> "Recorder":
        with _LOCK:
            _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _LOCK:
            if self._step is not None:
                self._finish(write=exc[0] is None)
            if self in _ACTIVE:
                _ACTIVE.remove(self)

    # -- steps and rows -------------------------------------------------------
    @contextlib.contextmanager
    def step(self, seq_ids: Any, positions: Any = None, tokens: Any = None, *, label: str | None = None) -> Iterator["Recorder"]:
        """One forward pass: its rows, given as `Rows` or as (seq_ids, positions, tokens)."""
        rows = seq_ids if isinstance(seq_ids, Rows) else Rows.make(seq_ids, positions, tokens)
        with _LOCK:
            if self._step is not None:
                raise ZmrError("Recorder.step: a step is already open; steps do not nest (use rows() to narrow)")
            self._step = _Step(self._steps, rows, label)
            self._steps += 1
        ok = False
        try:
            yield self
            ok = True
        finally:
            with _LOCK:
                if self._step is not None:
                    self._finish(write=ok)

    @contextlib.contextmanager
    def rows(self, seq_ids: Any, positions: Any = None, tokens: Any = None) -> Iterator["Recorder"]:
        """Other rows for the calls inside (e.g. the last row of a prefill, for its logits)."""
        rows = seq_ids if isinstance(seq_ids, Rows) else Rows.make(seq_ids, positions, tokens)
        with _LOCK:
            step = self._require_step("rows")
            step.rowsets.append(rows)
            step.rows_stack.append(len(step.rowsets) - 1)
        try:
            yield self
        finally:
            with _LOCK:
                if self._step is step:
                    step.rows_stack.pop()

    def _require_step(self, what: str) -> _Step:
        if self._step is None:
            raise ZmrError(f"Recorder.{what}: no step is open; wrap the forward pass in `with recorder.step(...)`")
        return self._step

    # -- records --------------------------------------------------------------
    def dump(self, name: str, output: Any = None, *, inputs: Mapping[str, Any] | None = None, rows: Rows | None = None) -> None:
        """Record an operation explicitly (see the module-level `dump`)."""
        with _LOCK:
            step = self._step
            if step is None:
                return
            if rows is not None:
                step.rowsets.append(rows)
                rowset = len(step.rowsets) - 1
            else:
                rowset = step.rows_stack[-1]
            captured = self._capture_inputs(dict(inputs or {}), step.rowsets[rowset])
            captured += _capture_outputs(output, step.rowsets[rowset])
            self._add(step, step.call_name(name), "dump", _site(), rowset, captured)

    def _capture_inputs(self, named: Mapping[str, Any], rows: Rows) -> list[_Captured]:
        if self.inputs is False:
            return []
        out = []
        for key, value in named.items():
            if _is_tensor(value):
                cap = _capture(f"in.{key}", value, rows)
                if cap is not None and (self.inputs is True or cap.aligned):
                    out.append(cap)
        return out

    def _add(self, step: _Step, name: str, kind: str, site: str | None, rowset: int, tensors: list[_Captured]) -> None:
        step.records.append(_PendingRecord(step.next_index, name, kind, site, rowset, tensors))
        step.next_index += 1

    def _finish(self, write: bool) -> None:
        step, self._step = self._step, None
        if step is None or not write:
            return
        path = self.folder / _STEP_NAME.format(step.number)
        _write_step(path, self.side, step)
        self.files.append(path)


def _is_tensor(obj: Any) -> bool:
    mod = type(obj).__module__.split(".")[0]
    if mod == "torch":
        return hasattr(obj, "dtype") and hasattr(obj, "shape") and hasattr(obj, "detach")
    return mod == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape") and not isinstance(obj, type)


def _capture(slot: str, value: Any, rows: Rows) -> _Captured | None:
    """A copy of a tensor's bytes (row-aligned) or its digest (not aligned)."""
    converted = _tensor_bytes(value)
    if converted is None:
        return None
    raw, shape, dtype = converted
    # A parameter (a weight) is never per row, whatever its shape.
    aligned = None if type(value).__name__ == "Parameter" else _alignment(shape, rows)
    if aligned is None:
        digest = hashlib.sha256(raw).hexdigest()
        return _Captured(slot, shape, dtype, None, None, digest)
    return _Captured(slot, shape, dtype, aligned, raw, None)


def _alignment(shape: tuple[int, ...], rows: Rows) -> str | None:
    lead = rows.shape
    if len(shape) >= len(lead) and tuple(shape[: len(lead)]) == lead:
        return "lead"
    if len(lead) > 1 and len(shape) >= 2 and shape[0] == rows.size:
        return "flat"
    return None


def _tensor_bytes(value: Any) -> tuple[bytes, tuple[int, ...], str] | None:
    """(raw little-endian bytes, shape, dtype name) of a torch tensor or numpy array; None for other dtypes."""
    if type(value).__module__.split(".")[0] == "torch":
        import torch  # already imported: value is a torch tensor

        t = value.detach()
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            return None
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.resolve_conj().resolve_neg().contiguous()
        shape = tuple(int(s) for s in t.shape)
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return raw, shape, dtype
    np = _np()
    arr = np.asarray(value)
    dtype = arr.dtype.name
    if dtype not in _DTYPES:
        return None
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes(), tuple(int(s) for s in arr.shape), dtype


def _capture_outputs(output: Any, rows: Rows) -> list[_Captured]:
    result: list[_Captured] = []
    for slot, value in _output_slots(output):
        cap = _capture(slot, value, rows)
        if cap is not None:
            result.append(cap)
    return result


def _output_slots(output: Any, prefix: str = "out", depth: int = 0) -> Iterator[tuple[str, Any]]:
    if _is_tensor(output):
        yield prefix, output
    elif depth < 3 and isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            yield from _output_slots(item, f"{prefix}.{i}", depth + 1)
    elif depth < 3 and isinstance(output, Mapping):
        for key, item in output.items():
            yield from _output_slots(item, f"{prefix}.{key}", depth + 1)


_HERE = os.path.abspath(__file__)


def _site() -> str | None:
    """``pkg/file.py:LINE in func`` of the nearest caller outside this module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == _HERE:
        frame = frame.f_back
    if frame is None:
        return None
    parts = Path(frame.f_code.co_filename).parts
    return f"{'/'.join(parts[-2:])}:{frame.f_lineno} in {frame.f_code.co_name}"


# -- tracing functions ----------------------------------------------------------


@contextlib.contextmanager
def trace_functions(target: Any, names: Iterable[str] | Mapping[str, str], *, everywhere: bool = False) -> Iterator[None]:
    """Record every call of the named functions of *target* (a module or a class) inside a step.

    *names*: function names, or a mapping function name -> record name. For
    a module, the function is also replaced in every module of the same
    top-level package that bound it under any name (``from .ops import
    linear as _linear``); *everywhere* widens that to every loaded module.
    Everything is restored on exit. Calls outside an open step run untouched.
    """
    mapping = dict(names) if isinstance(names, Mapping) else {n: n for n in names}
    patches: list[tuple[Any, str, Any]] = []
    try:
        for fname, record_name in mapping.items():
            original = getattr(target, fname, None) if not inspect.isclass(target) else target.__dict__.get(fname)
            if original is None:
                raise ZmrError(f"trace_functions: {getattr(target, '__name__', target)!r} has no function {fname!r}")
            func = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
            if not callable(func):
                raise ZmrError(f"trace_functions: {getattr(target, '__name__', target)}.{fname} is not a function")
            wrapper: Any = _wrap(func, record_name)
            if isinstance(original, staticmethod):
                wrapper = staticmethod(wrapper)
            elif isinstance(original, classmethod):
                wrapper = classmethod(wrapper)
            if inspect.isclass(target):
                patches.append((target, fname, original))
                setattr(target, fname, wrapper)
                continue
            for module in _binding_modules(target, everywhere):
                for attr, value in list(vars(module).items()):
                    if value is original:
                        patches.append((module, attr, original))
                        setattr(module, attr, wrapper)
        yield
    finally:
        for obj, attr, original in reversed(patches):
            setattr(obj, attr, original)


def _binding_modules(target: Any, everywhere: bool) -> list[Any]:
    top = getattr(target, "__name__", "").split(".")[0]
    result = [target]
    for name, module in list(sys.modules.items()):
        if module is None or module is target:
            continue
        if everywhere or name == top or name.startswith(top + "."):
            result.append(module)
    return result


def _wrap(func: Callable, record_name: str) -> Callable:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    def wrapper(*args, **kwargs):
        rec = active()
        if rec is None or rec._step is None:
            return func(*args, **kwargs)
        with _LOCK:
            step = rec._step
            if step is None:
                return func(*args, **kwargs)
            name = step.call_name(record_name)
            rowset = step.rows_stack[-1]
            site = _site()
            captured = rec._capture_inputs(_named_args(signature, args, kwargs), step.rowsets[rowset])
        result = func(*args, **kwargs)
        with _LOCK:
            if rec._step is step:
                captured += _capture_outputs(result, step.rowsets[rowset])
                rec._add(step, name, "function", site, rowset, captured)
        return result

    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(func, "__name__", record_name)
    wrapper.__doc__ = getattr(func, "__doc__", None)
    return wrapper


def _named_args(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> dict[str, Any]:
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            bound = None
        if bound is not None:
            named: dict[str, Any] = {}
            for key, value in bound.arguments.items():
                kind = signature.parameters[key].kind
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    named.update({f"{key}.{i}": v for i, v in enumerate(value)})
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    named.update({f"{key}.{k}": v for k, v in value.items()})
                else:
                    named[key] = value
            return named
    named = {str(i): v for i, v in enumerate(args)}
    named.update(kwargs)
    return named


# -- hooking nn.Modules -----------------------------------------------------------


@contextlib.contextmanager
def hook_modules(
    model: Any, include: Sequence[str] | None = None, exclude: Sequence[str] = (), *, root: str = "model", params: bool = False
) -> Iterator[list[str]]:
    """Record the tensor inputs and outputs of the submodules of *model* (a torch ``nn.Module``).

    Names come from ``named_modules()`` (the root module is named *root*);
    *include*/*exclude* are fnmatch patterns over them (default: every
    module). Inputs are named after ``forward``'s parameters. *params*: also
    record each module's own parameters as inputs (by digest: hashing them
    costs time on every call). Yields the names hooked; the hooks are
    removed on exit.
    """
    handles = []
    hooked: list[str] = []
    pending: dict[int, list[tuple[Any, str, int, dict]]] = {}
    signatures: dict[int, inspect.Signature | None] = {}

    def pre_hook(module, args, kwargs, *, _name):
        rec = active()
        if rec is None or rec._step is None:
            return None
        with _LOCK:
            step = rec._step
            if step is None:
                return None
            rowset = step.rows_stack[-1]
            if id(module) not in signatures:
                try:
                    signatures[id(module)] = inspect.signature(module.forward)
                except (TypeError, ValueError):
                    signatures[id(module)] = None
            named = _named_args(signatures[id(module)], tuple(args), dict(kwargs or {}))
            if params:
                named.update({k: v for k, v in module.named_parameters(recurse=False) if k not in named})
            captured = rec._capture_inputs(named, step.rowsets[rowset])
            pending.setdefault(id(module), []).append((step, step.call_name(_name), rowset, {"captured": captured, "rec": rec}))
        return None

    def post_hook(module, args, kwargs, output, *, _name):
        stack = pending.get(id(module))
        if not stack:
            return None
        step, name, rowset, extra = stack.pop()
        rec = extra["rec"]
        with _LOCK:
            if rec._step is step:
                captured = extra["captured"] + _capture_outputs(output, step.rowsets[rowset])
                rec._add(step, name, "module", f"{type(module).__module__}.{type(module).__qualname__}", rowset, captured)
        return None

    try:
        for name, module in model.named_modules():
            shown = name or root
            if include is not None and not any(fnmatch.fnmatchcase(shown, p) for p in include):
                continue
            if any(fnmatch.fnmatchcase(shown, p) for p in exclude):
                continue
            handles.append(module.register_forward_pre_hook(_bind(pre_hook, shown), with_kwargs=True))
            handles.append(module.register_forward_hook(_bind(post_hook, shown), with_kwargs=True))
            hooked.append(shown)
        yield hooked
    finally:
        for handle in handles:
            handle.remove()


def _bind(hook: Callable, name: str) -> Callable:
    def bound(*args):
        return hook(*args, _name=name)

    return bound


# -- writing a step file --------------------------------------------------------------


def _write_step(path: Path, side: str, step: _Step) -> None:
    np = _np()
    seq_index: dict[str, int] = {}
    tensors: list[tuple[str, str, tuple[int, ...], bytes]] = []  # key, code, shape, bytes
    rowsets_meta = []
    for k, rows in enumerate(step.rowsets):
        seq = np.array([-1 if s is None else seq_index.setdefault(s, len(seq_index)) for s in rows.seq.reshape(-1)], dtype="<i8").reshape(rows.shape)
        for part, arr in (("seq", seq), ("pos", rows.pos), ("tok", rows.tok)):
            tensors.append((f"rows.{k}.{part}", "I64", rows.shape, np.ascontiguousarray(arr, dtype="<i8").tobytes()))
        rowsets_meta.append({"shape": list(rows.shape)})
    records_meta = []
    for rec in step.records:
        entries = []
        for cap in rec.tensors:
            entry: dict[str, Any] = {"slot": cap.slot, "shape": list(cap.shape), "dtype": cap.dtype, "aligned": cap.aligned}
            if cap.data is not None:
                key = f"op.{rec.index:06d}.{cap.slot}"
                entry["key"] = key
                tensors.append((key, _DTYPES[cap.dtype][0], cap.shape, cap.data))
            else:
                entry["sha256"] = cap.digest
            entries.append(entry)
        records_meta.append({"index": rec.index, "name": rec.name, "kind": rec.kind, "site": rec.site, "rows": rec.rowset, "tensors": entries})
    index = {"side": side, "step": step.number, "label": step.label, "seq_ids": list(seq_index), "rowsets": rowsets_meta, "records": records_meta}
    meta = {"zmr_locate": str(FORMAT_VERSION), "index": json.dumps(index, separators=(",", ":"))}
    payload = _safetensors_bytes(tensors, meta)
    atomic_write(path, payload)


_MAX_DIMENSION = 2**62


def _safetensors_bytes(tensors: list[tuple[str, str, tuple[int, ...], bytes]], meta: dict[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": meta}
    chunks = []
    offset = 0
    for key, code, shape, data in sorted(tensors, key=lambda t: t[0]):
        header[key] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


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

    def array(self, key: str):
        """The stored tensor *key* as an array of its bits (unsigned ints of the element's width)."""
        np = _np()
        code, shape, begin, end = self._entries[key]
        dtype = _CODES[code]
        width = _DTYPES[dtype][1]
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

    def row_tokens(self, rowset: int):
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
            raise ZmrError(f"{p}: no step files ({STEP_GLOB}) in this folder", details=[f"is it the folder a zmr.locate.Recorder wrote the {label} dump to?"])
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
                raise ZmrError(f"{bad} (too short for safetensors)")
            # Mapped, not read: tensors are paged in only when compared.
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as err:
        raise ZmrError(f"{path}: cannot read it ({err.strerror or err})") from None
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise ZmrError(f"{bad} (safetensors header length {hlen} past the end)")
    try:
        header = parse_json(bytes(data[8 : 8 + hlen]).decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except ValueError as err:
        raise ZmrError(f"{bad} (bad safetensors header: {err})") from None
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or "zmr_locate" not in meta:
        raise ZmrError(f"{bad} (no zmr_locate metadata)", details=["write dumps with zmr.locate.Recorder"])
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
        body_start = 8 + hlen
        for key, info in header.items():
            code = info["dtype"]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
            if any(s < 0 for s in shape):
                raise ValueError(f"tensor {key!r} has a negative dimension")
            # numpy makes at most 32 dimensions of at most 2**63 - 1 each (empty or not): refuse what it cannot hold.
            if len(shape) > 32 or any(s > _MAX_DIMENSION for s in shape):
                raise ValueError(f"tensor {key!r} has a shape numpy cannot hold ({len(shape)} dimensions, largest {max(shape, default=0)})")
            if code not in _CODES:
                raise ValueError(f"tensor {key!r} has dtype {code}")
            if end - begin != math.prod(shape) * _DTYPES[_CODES[code]][1] or not 0 <= begin <= end <= len(data) - body_start:
                raise ValueError(f"tensor {key!r} has offsets that do not match its shape")
            step._entries[key] = (code, shape, body_start + begin, body_start + end)
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
                if info.dtype not in _DTYPES or info.aligned not in (None, "lead", "flat"):
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


# ==========================================================================
# Name map


@dataclass
class NameMap:
    """Renames of op names per side: exact names, base names (before ``#k``) and ``re:`` patterns."""

    exact: dict[str, dict[str, str]] = field(default_factory=lambda: {"rollout": {}, "train": {}})
    patterns: dict[str, list[tuple[str, Any, str]]] = field(default_factory=lambda: {"rollout": [], "train": []})
    used: set[tuple[str, str]] = field(default_factory=set)
    source: str = ""

    def apply(self, side: str, name: str) -> str:
        exact = self.exact[side]
        if name in exact:
            self.used.add((side, name))
            return exact[name]
        base, sep, suffix = name.partition("#")
        if sep and base in exact:
            self.used.add((side, base))
            return f"{exact[base]}#{suffix}"
        for key, regex, repl in self.patterns[side]:
            match = regex.fullmatch(name)
            if match:
                self.used.add((side, key))
                return match.expand(repl)
            match = regex.fullmatch(base) if sep else None
            if match:
                self.used.add((side, key))
                return f"{match.expand(repl)}#{suffix}"
        return name

    def unused(self) -> list[str]:
        result = []
        for side in ("rollout", "train"):
            keys = list(self.exact[side]) + [k for k, _, _ in self.patterns[side]]
            result += [f"{side}: {k}" for k in keys if (side, k) not in self.used]
        return result


def load_name_map(path: str | os.PathLike[str]) -> NameMap:
    """Read a name map (YAML or JSON; see the module doc)."""
    p = Path(path)
    display = str(p)
    if not p.exists() and not p.is_symlink():
        raise ZmrError(f"{display}: no such name map file")
    if p.suffix.lower() == ".json":
        try:
            data = parse_json(read_repo_file(None, p, limit=MAX_NAME_MAP_BYTES, what="name map").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise ZmrError(f"{display}: not valid JSON ({err})") from None
        return _name_map_from(data, display)
    from zmr.yamlnodes import Problems, read_yaml, scalar
    from yaml.nodes import MappingNode, ScalarNode

    problems = Problems(display)
    node = read_yaml(p, display, problems, what="name map")
    if node is None:
        raise ZmrError(f"{display}: not a valid name map", details=[str(x) for x in problems.items])

    def to_py(n):
        if isinstance(n, MappingNode):
            out = {}
            for k, v in n.value:
                key = scalar(k) if isinstance(k, ScalarNode) else None
                if not isinstance(key, str):
                    raise ZmrError(f"{display}:{k.start_mark.line + 1}: keys must be strings")
                if key in out:
                    raise ZmrError(f"{display}:{k.start_mark.line + 1}: duplicate key {key!r}")
                out[key] = (to_py(v), k.start_mark.line + 1)
            return out
        if isinstance(n, ScalarNode):
            return scalar(n)
        raise ZmrError(f"{display}:{n.start_mark.line + 1}: expected a mapping of names or a name")

    data = to_py(node)
    return _name_map_from(data, display)


def _name_map_from(data: Any, display: str) -> NameMap:
    def strip(value):  # YAML values come as (value, line)
        return value if not isinstance(value, tuple) else value[0]

    def where(value):
        return f"{display}:{value[1]}" if isinstance(value, tuple) else display

    if not isinstance(data, dict):
        raise ZmrError(f"{display}: a name map is a mapping", details=["write `rollout:` and `train:` sections of `name: other name` entries"])
    sectioned = bool(data) and all(isinstance(strip(v), dict) for v in data.values())
    sections: dict[str, dict[str, Any]] = {"rollout": {}, "train": {}}
    if sectioned:
        for key, value in data.items():
            if key not in sections:
                raise ZmrError(f"{where(value)}: unknown section {key!r}", details=["the sections are rollout and train"])
            sections[key] = strip(value)
    else:
        sections["rollout"] = data
    result = NameMap(source=display)
    for side, entries in sections.items():
        for key, value in entries.items():
            target = strip(value)
            if not isinstance(target, str) or not target.strip():
                raise ZmrError(f"{where(value)}: {side}.{key}: expected an operation name, got {target!r}")
            if key.startswith("re:"):
                try:
                    regex = re.compile(key[3:])
                except re.error as err:
                    raise ZmrError(f"{where(value)}: {side}.{key}: not a regular expression ({err})") from None
                result.patterns[side].append((key, regex, target))
            else:
                result.exact[side][key] = target
    return result


# ==========================================================================
# Comparing


@dataclass(frozen=True)
class InputCheck:
    """One input of the first diverging operation, at the first differing row."""

    slot: str
    status: str  # equal | differs | not compared
    how: str  # "row" (row-aligned, this row) | "whole" (whole tensor by digest) | reason not compared
    max_abs_diff: float | None = None


@dataclass(frozen=True)
class Divergence:
    """Where the first diverging operation first differs."""

    op: str
    order: int
    slot: str
    seq_id: str
    position: int
    token: int | None
    element: tuple[int, ...]
    row_shape: tuple[int, ...]
    rollout_value: str
    train_value: str
    rollout_bits: str
    train_bits: str
    abs_diff: float | None
    rollout_step: int
    rollout_file: str
    rollout_label: str | None
    rollout_site: str | None
    rollout_name: str
    train_step: int
    train_file: str
    train_label: str | None
    train_site: str | None
    train_name: str
    inputs: tuple[InputCheck, ...]
    inputs_verdict: str  # equal | differ | unknown
    kind: str  # "value" | "signed zero" | "nan payload" | "nan vs number" ...


@dataclass
class OpResult:
    """The comparison of one operation over its paired rows."""

    name: str
    order: int
    rows: int = 0
    rows_differ: int = 0
    elements: int = 0
    elements_differ: int = 0
    max_abs_diff: float | None = None
    nonfinite_differ: int = 0
    introduced: int = 0
    inputs_differ_rows: int = 0
    slots: tuple[str, ...] = ()
    rows_by_label: dict[str, list[int]] = field(default_factory=dict)  # label -> [rows, differ]
    notes: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.rows_differ == 0


@dataclass
class SideInfo:
    path: str
    side: str
    files: int
    records: int
    rows: int
    ops: int


@dataclass
class LocateReport:
    """What `locate` found; `first` is None when every compared bit is equal."""

    rollout: SideInfo
    train: SideInfo
    ops: list[OpResult]
    first: Divergence | None
    only_rollout: list[str]
    only_train: list[str]
    notes: list[str]

    @property
    def diverged(self) -> bool:
        return self.first is not None

    def after_first(self) -> list[OpResult]:
        """The first diverging operation and every operation after it."""
        if self.first is None:
            return []
        return [op for op in self.ops if op.order >= self.first.order]

    def to_json(self) -> dict[str, Any]:
        from zmr import __version__

        def num(x):
            if x is None:
                return None
            if isinstance(x, float) and not math.isfinite(x):
                return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
            return x

        def op(o: OpResult) -> dict[str, Any]:
            return {
                "name": o.name,
                "order": o.order,
                "rows": o.rows,
                "rows_differ": o.rows_differ,
                "elements": o.elements,
                "elements_differ": o.elements_differ,
                "max_abs_diff": num(o.max_abs_diff),
                "nonfinite_differ": o.nonfinite_differ,
                "introduced": o.introduced,
                "inputs_differ_rows": o.inputs_differ_rows,
                "slots": list(o.slots),
                "rows_by_label": {k: {"rows": v[0], "differ": v[1]} for k, v in o.rows_by_label.items()},
                "notes": list(o.notes),
            }

        first = None
        if self.first is not None:
            f = self.first
            first = {
                "op": f.op,
                "order": f.order,
                "slot": f.slot,
                "row": {"seq_id": f.seq_id, "position": f.position, "token": f.token},
                "element": list(f.element),
                "row_shape": list(f.row_shape),
                "rollout": {
                    "value": f.rollout_value,
                    "bits": f.rollout_bits,
                    "name": f.rollout_name,
                    "step": f.rollout_step,
                    "file": f.rollout_file,
                    "label": f.rollout_label,
                    "site": f.rollout_site,
                },
                "train": {
                    "value": f.train_value,
                    "bits": f.train_bits,
                    "name": f.train_name,
                    "step": f.train_step,
                    "file": f.train_file,
                    "label": f.train_label,
                    "site": f.train_site,
                },
                "abs_diff": num(f.abs_diff),
                "kind": f.kind,
                "inputs": [{"slot": i.slot, "status": i.status, "how": i.how, "max_abs_diff": num(i.max_abs_diff)} for i in f.inputs],
                "inputs_verdict": f.inputs_verdict,
                "at_fault": {"equal": "this operation", "differ": "an earlier operation that was not recorded", "unknown": "unknown (no input was comparable)"}[
                    f.inputs_verdict
                ],
            }

        def side(s: SideInfo) -> dict[str, Any]:
            return {"path": s.path, "side": s.side, "files": s.files, "records": s.records, "rows": s.rows, "ops": s.ops}

        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "zmr", "version": __version__},
            "verdict": "diverged" if self.diverged else "bitwise_equal",
            "rollout": side(self.rollout),
            "train": side(self.train),
            "first": first,
            "ops": [op(o) for o in self.ops],
            "only_rollout": list(self.only_rollout),
            "only_train": list(self.only_train),
            "notes": list(self.notes),
        }


def locate(
    rollout: str | os.PathLike[str] | SideDump, train: str | os.PathLike[str] | SideDump, name_map: NameMap | str | os.PathLike[str] | None = None
) -> LocateReport:
    """Compare two dumps and find the first operation whose output differs in any bit (see the module doc)."""
    r = rollout if isinstance(rollout, SideDump) else read_side(rollout, "rollout")
    t = train if isinstance(train, SideDump) else read_side(train, "train")
    if name_map is not None and not isinstance(name_map, NameMap):
        name_map = load_name_map(name_map)
    notes: list[str] = []
    if name_map is not None:
        for side_name, dump_ in (("rollout", r), ("train", t)):
            for step in dump_.steps:
                seen: dict[str, str] = {}
                for rec in step.records:
                    rec.name = name_map.apply(side_name, rec.original)
                    if rec.name in seen:
                        raise ZmrError(
                            f"{step.path}: after the name map, operations {seen[rec.name]!r} and {rec.original!r} are both named {rec.name!r}",
                            details=[f"map them to different names in {name_map.source}"],
                        )
                    seen[rec.name] = rec.original
        for entry in name_map.unused():
            notes.append(f"name map entry {entry!r} matched no operation")
    r_rows = _check_rows(r, t)
    r_ops = _ops_by_name(r)
    t_ops = _ops_by_name(t)
    common = [n for n in r_ops if n in t_ops]
    if not common:
        raise ZmrError(
            "no operation is in both dumps",
            details=[
                f"rollout: {_listing(sorted(r_ops))}",
                f"train: {_listing(sorted(t_ops))}",
                "if the two sides name them differently, pass a name map (--map FILE)",
            ],
        )

    def rank(name: str) -> tuple:
        return (min(rec.index for rec in r_ops[name]), min(rec.index for rec in t_ops[name]), name)

    ordered = sorted(common, key=rank)
    results: list[OpResult] = []
    first: Divergence | None = None
    for order, name in enumerate(ordered):
        result, div = _compare_op(name, order, r_ops[name], t_ops[name], want_first=first is None)
        results.append(result)
        if first is None and div is not None:
            first = div
        notes.extend(f"{name}: {n}" for n in result.notes)
    only_r = sorted((n for n in r_ops if n not in t_ops), key=lambda n: min(rec.index for rec in r_ops[n]))
    only_t = sorted((n for n in t_ops if n not in r_ops), key=lambda n: min(rec.index for rec in t_ops[n]))
    info_r = SideInfo(str(r.path), r.side, len(r.steps), sum(len(s.records) for s in r.steps), r_rows, len(r_ops))
    info_t = SideInfo(str(t.path), t.side, len(t.steps), sum(len(s.records) for s in t.steps), r_rows, len(t_ops))
    return LocateReport(info_r, info_t, results, first, only_r, only_t, notes)


def _listing(names: Sequence[str], limit: int = _MAX_LISTED) -> str:
    if not names:
        return "(none)"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _row_universe(dump_: SideDump) -> dict[tuple[str, int], tuple[int, StepFile]]:
    """(seq, pos) -> (token, first file) over every row set of every step; tokens must agree within a side."""
    rows: dict[tuple[str, int], tuple[int, StepFile]] = {}
    for step in dump_.steps:
        for k in range(len(step.rowset_shapes)):
            keys = step.row_keys(k)
            toks = step.row_tokens(k).tolist()
            for key, tok in zip(keys, toks):
                if key is None:
                    continue
                old = rows.get(key)
                if old is None:
                    rows[key] = (tok, step)
                elif old[0] != tok and tok >= 0 and old[0] >= 0:
                    raise ZmrError(
                        f"{dump_.path}: sequence {key[0]!r} position {key[1]} has token {old[0]} in {old[1].path.name} but {tok} in {step.path.name}",
                        details=["one dump must be of one run; record each run into its own folder"],
                    )
                elif old[0] < 0 <= tok:
                    rows[key] = (tok, old[1])
    return rows


def _check_rows(r: SideDump, t: SideDump) -> int:
    ru, tu = _row_universe(r), _row_universe(t)
    only_r = sorted(k for k in ru if k not in tu)
    only_t = sorted(k for k in tu if k not in ru)
    if only_r or only_t:
        details = []
        for label, keys, where in (("rollout", only_r, ru), ("train", only_t, tu)):
            if keys:
                shown = ", ".join(f"({k[0]!r}, {k[1]}) in {where[k][1].path.name}" for k in keys[:_MAX_LISTED])
                more = f", ... ({len(keys)} in all)" if len(keys) > _MAX_LISTED else ""
                details.append(f"only in {label}: {shown}{more}")
        details.append(
            "both dumps must cover the same (sequence id, position) rows: label the same prompts and responses on both sides,"
            " and leave out rows one side never computes (e.g. the trainer's last position of each sequence)"
        )
        raise ZmrError(f"{len(only_r) + len(only_t)} unpaired rows (sequence id, position)", details=details)
    bad = [(k, ru[k][0], tu[k][0]) for k in ru if ru[k][0] >= 0 and tu[k][0] >= 0 and ru[k][0] != tu[k][0]]
    if bad:
        bad.sort()
        listed = [f"({k[0]!r}, {k[1]}): rollout token {a}, train token {b}" for k, a, b in bad[:_MAX_LISTED]]
        raise ZmrError(
            f"{len(bad)} rows have different token ids on the two sides", details=[*listed, "both sides must run the same tokens (the rollout's sampled ones)"]
        )
    return len(ru)


def _ops_by_name(dump_: SideDump) -> dict[str, list[Record]]:
    ops: dict[str, list[Record]] = {}
    for step in dump_.steps:
        for rec in sorted(step.records, key=lambda x: x.index):
            ops.setdefault(rec.name, []).append(rec)
    return ops


def _row_index(records: list[Record]) -> tuple[dict[tuple[str, int], tuple[int, int]], int]:
    """(seq, pos) -> (record number in *records*, row) for the first occurrence; also the duplicate count."""
    index: dict[tuple[str, int], tuple[int, int]] = {}
    dup = 0
    for i, rec in enumerate(records):
        if not any(ti.slot.startswith("out") and ti.aligned for ti in rec.tensors.values()):
            continue
        for row, key in enumerate(rec.step.row_keys(rec.rowset)):
            if key is None:
                continue
            if key in index:
                dup += 1
                continue
            index[key] = (i, row)
    return index, dup


# -- bits and values ---------------------------------------------------------------------


def _rows_view(step: StepFile, info: TensorInfo, rowset_shape: tuple[int, ...]):
    """The stored tensor as [rows, *per-row shape] bits."""
    arr = step.array(info.key)  # type: ignore[arg-type]
    n = math.prod(rowset_shape)
    lead = len(rowset_shape) if info.aligned == "lead" else 1
    return arr.reshape((n, *info.shape[lead:]))


def _row_shape(info: TensorInfo, rowset_shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = len(rowset_shape) if info.aligned == "lead" else 1
    return tuple(info.shape[lead:])


_F8_TABLES: dict[str, Any] = {}


def _values(bits, dtype: str):
    """float64 values of bits of *dtype* (exact for every float type; integers converted)."""
    np = _np()
    if dtype == "float64":
        return bits.view("<f8")
    if dtype == "float32":
        return bits.view("<f4").astype(np.float64)
    if dtype == "float16":
        return bits.view("<f2").astype(np.float64)
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view("<f4").astype(np.float64)
    if dtype in ("float8_e4m3fn", "float8_e5m2"):
        table = _F8_TABLES.get(dtype)
        if table is None:
            table = _F8_TABLES[dtype] = _f8_table(dtype)
        return table[bits]
    if dtype == "bool":
        return bits.astype(np.float64)
    signed = {"int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1"}
    if dtype in signed:
        return bits.view(signed[dtype]).astype(np.float64)
    return bits.astype(np.float64)


def _f8_table(dtype: str):
    np = _np()
    exp_bits, man_bits, bias = (4, 3, 7) if dtype == "float8_e4m3fn" else (5, 2, 15)
    out = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b >> 7 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        if dtype == "float8_e4m3fn" and e == 15 and m == 7:
            out[b] = math.nan
        elif dtype == "float8_e5m2" and e == 31:
            out[b] = sign * math.inf if m == 0 else math.nan
        elif e == 0:
            out[b] = sign * m * 2.0 ** (1 - bias - man_bits)
        else:
            out[b] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


def _format(bits_value: int, dtype: str) -> tuple[str, str]:
    """(value text, hex bits) of one element."""
    np = _np()
    width = _DTYPES[dtype][1]
    hex_bits = f"0x{bits_value:0{2 * width}x}"
    value = float(_values(np.array([bits_value], dtype=f"<u{width}"), dtype)[0])
    if dtype not in _FLOATS:
        return str(int(value)) if dtype != "bool" else str(bool(value)), hex_bits
    if math.isnan(value):
        return ("-nan" if bits_value >> (8 * width - 1) else "nan"), hex_bits
    return repr(value), hex_bits


def _difference_kind(a: float, b: float) -> str:
    if math.isnan(a) and math.isnan(b):
        return "nan payload"
    if math.isnan(a) or math.isnan(b):
        return "nan vs number"
    if a == b:
        return "signed zero" if a == 0 else "same value, other bits"
    if math.isinf(a) or math.isinf(b):
        return "infinity"
    return "value"


# -- one operation -----------------------------------------------------------------------


def _compare_op(name: str, order: int, r_recs: list[Record], t_recs: list[Record], want_first: bool) -> tuple[OpResult, Divergence | None]:
    np = _np()
    result = OpResult(name, order)
    r_index, r_dup = _row_index(r_recs)
    t_index, t_dup = _row_index(t_recs)
    if r_dup or t_dup:
        result.notes.append(f"rows computed more than once (rollout {r_dup}, train {t_dup}): the first occurrence of each is compared")
    unaligned = [
        (side, rec)
        for side, recs in (("rollout", r_recs), ("train", t_recs))
        for rec in recs
        if any(ti.slot.startswith("out") and not ti.aligned for ti in rec.tensors.values())
    ]
    if unaligned:
        side, rec = unaligned[0]
        info = next(ti for ti in rec.tensors.values() if ti.slot.startswith("out") and not ti.aligned)
        result.notes.append(
            f"{len(unaligned)} records have outputs that are not row-aligned and were not compared "
            f"(e.g. {side} {rec.step.path.name}: {info.slot} of shape {list(info.shape)}, rows {list(rec.step.rowset_shapes[rec.rowset])}); "
            "narrow the rows around that call with Recorder.rows()"
        )
    # group paired rows by (rollout record, train record)
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, (ri, rrow) in r_index.items():
        hit = t_index.get(key)
        if hit is None:
            continue
        groups.setdefault((ri, hit[0]), []).append((rrow, hit[1]))
    if not groups:
        result.notes.append("no row was computed by this operation on both sides")
        return result, None
    slots_seen: set[str] = set()
    max_abs = None
    first: Divergence | None = None
    for (ri, ti), pairs in sorted(groups.items(), key=lambda g: (r_recs[g[0][0]].step.number, r_recs[g[0][0]].index, g[0][1])):
        pairs.sort()
        rrec, trec = r_recs[ri], t_recs[ti]
        r_rows = np.array([p[0] for p in pairs], dtype=np.int64)
        t_rows = np.array([p[1] for p in pairs], dtype=np.int64)
        n = len(pairs)
        result.rows += n
        label = rrec.step.label or "-"
        by_label = result.rows_by_label.setdefault(label, [0, 0])
        by_label[0] += n
        out_slots = sorted(s for s in rrec.tensors if s.startswith("out") and s in trec.tensors and rrec.tensors[s].aligned and trec.tensors[s].aligned)
        missing = sorted(s for s in set(rrec.tensors) ^ set(trec.tensors) if s.startswith("out"))
        if missing:
            note = f"output slots on one side only: {', '.join(missing)}"
            if note not in result.notes:
                result.notes.append(note)
        row_differs = np.zeros(n, dtype=bool)
        first_slot_elem: list[Any] = [None] * n
        for slot in out_slots:
            slots_seen.add(slot)
            ri_info, ti_info = rrec.tensors[slot], trec.tensors[slot]
            r_shape = _row_shape(ri_info, rrec.step.rowset_shapes[rrec.rowset])
            t_shape = _row_shape(ti_info, trec.step.rowset_shapes[trec.rowset])
            if r_shape != t_shape:
                raise ZmrError(
                    f"operation {name!r}, output {slot!r}: per-row shape {list(r_shape)} on the rollout side but {list(t_shape)} on the train side",
                    details=[
                        f"rollout: {rrec.step.path} (step {rrec.step.number}, {rrec.original!r},"
                        f" tensor shape {list(ri_info.shape)}, rows {list(rrec.step.rowset_shapes[rrec.rowset])})",
                        f"train: {trec.step.path} (step {trec.step.number}, {trec.original!r},"
                        f" tensor shape {list(ti_info.shape)}, rows {list(trec.step.rowset_shapes[trec.rowset])})",
                        "the two operations do not compute the same thing per row: check the name map, or the rows given to the step",
                    ],
                )
            a = _rows_view(rrec.step, ri_info, rrec.step.rowset_shapes[rrec.rowset])[r_rows].reshape(n, -1)
            b = _rows_view(trec.step, ti_info, trec.step.rowset_shapes[trec.rowset])[t_rows].reshape(n, -1)
            av, bv = _values(a, ri_info.dtype), _values(b, ti_info.dtype)
            if ri_info.dtype == ti_info.dtype:
                neq = a != b
            else:
                note = f"{slot}: dtype {ri_info.dtype} on the rollout side, {ti_info.dtype} on the train side (compared as values)"
                if note not in result.notes:
                    result.notes.append(note)
                neq = av.view(np.uint64) != bv.view(np.uint64)
            result.elements += neq.size
            ndiff = int(neq.sum())
            if not ndiff:
                continue
            result.elements_differ += ndiff
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(av - bv)
            finite = np.isfinite(av) & np.isfinite(bv)
            result.nonfinite_differ += int((neq & ~finite).sum())
            dd = d[neq & finite]
            if dd.size:
                m = float(dd.max())
                max_abs = m if max_abs is None else max(max_abs, m)
            rows_hit = neq.any(axis=1)
            for row in np.flatnonzero(rows_hit & ~row_differs).tolist():
                first_slot_elem[row] = (slot, int(np.flatnonzero(neq[row])[0]), a, b, ri_info, ti_info, r_shape)
            row_differs |= rows_hit
        if not row_differs.any():
            continue
        # inputs of the differing rows
        in_equal, comparable, checks = _inputs_equal(rrec, trec, r_rows, t_rows)
        differing = int(row_differs.sum())
        result.rows_differ += differing
        by_label[1] += differing
        introduced = row_differs & in_equal & comparable
        result.introduced += int(introduced.sum())
        result.inputs_differ_rows += int((row_differs & comparable & ~in_equal).sum())
        if want_first and first is None:
            row = int(np.flatnonzero(row_differs)[0])
            slot, elem, a, b, ri_info, ti_info, r_shape = first_slot_elem[row]
            av_bits, bv_bits = int(a[row, elem]), int(b[row, elem])
            rv, rb = _format(av_bits, ri_info.dtype)
            tv, tb = _format(bv_bits, ti_info.dtype)
            fa = float(_values(a[row : row + 1, elem], ri_info.dtype)[0])
            fb = float(_values(b[row : row + 1, elem], ti_info.dtype)[0])
            abs_diff = abs(fa - fb) if math.isfinite(fa) and math.isfinite(fb) else None
            seq_key = rrec.step.row_keys(rrec.rowset)[int(r_rows[row])]
            assert seq_key is not None  # a differing row is a real row, never padding
            tok = int(rrec.step.row_tokens(rrec.rowset)[int(r_rows[row])])
            inputs = tuple(c(row) for c in checks)
            compared = [i for i in inputs if i.status != "not compared"]
            verdict = "unknown" if not compared else ("equal" if all(i.status == "equal" for i in compared) else "differ")
            element = tuple(int(x) for x in np.unravel_index(elem, r_shape)) if r_shape else ()
            first = Divergence(
                op=name,
                order=order,
                slot=slot,
                seq_id=seq_key[0],
                position=seq_key[1],
                token=tok if tok >= 0 else None,
                element=element,
                row_shape=r_shape,
                rollout_value=rv,
                train_value=tv,
                rollout_bits=rb,
                train_bits=tb,
                abs_diff=abs_diff,
                rollout_step=rrec.step.number,
                rollout_file=str(rrec.step.path),
                rollout_label=rrec.step.label,
                rollout_site=rrec.site,
                rollout_name=rrec.original,
                train_step=trec.step.number,
                train_file=str(trec.step.path),
                train_label=trec.step.label,
                train_site=trec.site,
                train_name=trec.original,
                inputs=inputs,
                inputs_verdict=verdict,
                kind=_difference_kind(fa, fb),
            )
    result.max_abs_diff = max_abs
    result.slots = tuple(sorted(slots_seen))
    if not slots_seen:
        result.notes.append("no output slot was row-aligned on both sides; nothing compared")
    return result, first


def _inputs_equal(rrec: Record, trec: Record, r_rows, t_rows):
    """Per paired row: all comparable inputs equal; any input comparable; and per-input checkers."""
    np = _np()
    n = len(r_rows)
    equal = np.ones(n, dtype=bool)
    comparable = np.zeros(n, dtype=bool)
    checks: list[Callable[[int], InputCheck]] = []
    slots = sorted(set(s for s in rrec.tensors if s.startswith("in.")) | set(s for s in trec.tensors if s.startswith("in.")))
    pairs = [(s, rrec.tensors.get(s), trec.tensors.get(s), s[3:]) for s in slots]
    # One row-aligned input on each side under different names (x and hidden_states): the same input.
    lone_r = [p for p in pairs if p[1] is not None and p[2] is None and p[1].aligned]
    lone_t = [p for p in pairs if p[2] is not None and p[1] is None and p[2].aligned]
    if len(lone_r) == 1 and len(lone_t) == 1:
        pairs = [p for p in pairs if p not in (lone_r[0], lone_t[0])]
        pairs.append((lone_r[0][0], lone_r[0][1], lone_t[0][2], f"{lone_r[0][3]}~{lone_t[0][3]}"))
    for _slot, ri, ti, short in pairs:
        if ri is None or ti is None:
            side = "train" if ri is not None else "rollout"
            checks.append(_fixed(short, "not compared", f"not recorded on the {side} side"))
            continue
        if ri.aligned and ti.aligned:
            r_shape = _row_shape(ri, rrec.step.rowset_shapes[rrec.rowset])
            t_shape = _row_shape(ti, trec.step.rowset_shapes[trec.rowset])
            if r_shape != t_shape or ri.dtype != ti.dtype:
                why = f"per-row shape {list(r_shape)} vs {list(t_shape)}" if r_shape != t_shape else f"dtype {ri.dtype} vs {ti.dtype}"
                checks.append(_fixed(short, "not compared", why))
                continue
            a = _rows_view(rrec.step, ri, rrec.step.rowset_shapes[rrec.rowset])[r_rows].reshape(n, -1)
            b = _rows_view(trec.step, ti, trec.step.rowset_shapes[trec.rowset])[t_rows].reshape(n, -1)
            neq = a != b
            row_eq = ~neq.any(axis=1)
            equal &= row_eq
            comparable[:] = True
            av, bv = _values(a, ri.dtype), _values(b, ti.dtype)
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(av - bv)

            def check(row, short=short, row_eq=row_eq, d=d, neq=neq):
                if row_eq[row]:
                    return InputCheck(short, "equal", "row")
                dd = d[row][neq[row] & np.isfinite(d[row])]
                return InputCheck(short, "differs", "row", float(dd.max()) if dd.size else None)

            checks.append(check)
        elif not ri.aligned and not ti.aligned:
            if ri.shape != ti.shape or ri.dtype != ti.dtype:
                checks.append(_fixed(short, "not compared", f"whole tensors of shape {list(ri.shape)} {ri.dtype} vs {list(ti.shape)} {ti.dtype}"))
                continue
            same = ri.digest == ti.digest
            equal &= same
            comparable[:] = True
            checks.append(_fixed(short, "equal" if same else "differs", "whole"))
        else:
            which = "rollout" if ri.aligned else "train"
            checks.append(_fixed(short, "not compared", f"row-aligned on the {which} side only"))
    return equal, comparable, checks


def _fixed(slot: str, status: str, how: str) -> Callable[[int], InputCheck]:
    value = InputCheck(slot, status, how)
    return lambda row: value


def check(report: LocateReport) -> None:
    """Raise `CheckFailed` (exit 1) when the report found a divergence."""
    f = report.first
    if f is None:
        return
    fault = {
        "equal": "its inputs are equal: this operation is at fault",
        "differ": "an input already differs: an earlier, unrecorded operation is at fault",
        "unknown": "no input could be compared",
    }[f.inputs_verdict]
    raise CheckFailed(f"first divergence at {f.op!r} (sequence {f.seq_id!r}, position {f.position}); {fault}")
