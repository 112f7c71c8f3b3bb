"""What runs inside the engines: recording tensors for `zmr locate` (docs/reference.md §11).

`Recorder(folder, side)` opens one step at a time (`Recorder.step`) and
writes it as a safetensors file (`zmr.evidence.dumps.tensors`); inside a step,
`dump(name, tensor)`, `trace_functions` (wrap named functions while a run
lasts) and `hook_modules` (forward hooks on matching modules) record
operations with the rows (`Rows`, `padded_rows`) that say which sequence
and position each row of a tensor is. torch is used only when the engine
hands zmr a tensor; zmr never imports it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import inspect
import json
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from zmr.evidence.dumps import safetensors
from zmr.evidence.dumps.bits import TENSOR_DTYPES, numpy
from zmr.evidence.dumps.tensors import FORMAT_VERSION, STEP_GLOB, STEP_NAME
from zmr.infra.errors import ZmrError
from zmr.infra.files import atomic_write

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
        np = numpy()
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
    np = numpy()
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


def _int_array(obj: Any, what: str) -> Any:
    np = numpy()
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

    def __exit__(self, *exc: object) -> None:
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
        path = self.folder / STEP_NAME.format(step.number)
        write_step(path, self.side, step)
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
        if dtype not in TENSOR_DTYPES:
            return None
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.resolve_conj().resolve_neg().contiguous()
        shape = tuple(int(s) for s in t.shape)
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return raw, shape, dtype
    np = numpy()
    arr = np.asarray(value)
    dtype = arr.dtype.name
    if dtype not in TENSOR_DTYPES:
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


def _wrap(func: Callable[..., Any], record_name: str) -> Callable[..., Any]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None

    def wrapper(*args: Any, **kwargs: Any) -> Any:
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


def _named_args(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
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
    pending: dict[int, list[tuple[Any, str, int, dict[str, Any]]]] = {}
    signatures: dict[int, inspect.Signature | None] = {}

    def pre_hook(module: Any, args: Any, kwargs: Any, *, _name: str) -> None:
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

    def post_hook(module: Any, args: Any, kwargs: Any, output: Any, *, _name: str) -> None:
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


def _bind(hook: Callable[..., Any], name: str) -> Callable[..., Any]:
    def bound(*args: Any) -> Any:
        return hook(*args, _name=name)

    return bound


# -- writing a step file --------------------------------------------------------------


def write_step(path: Path, side: str, step: _Step) -> None:
    """Write *step* as one safetensors file (the format `zmr.evidence.dumps.tensors` reads)."""
    np = numpy()
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
                tensors.append((key, TENSOR_DTYPES[cap.dtype][0], cap.shape, cap.data))
            else:
                entry["sha256"] = cap.digest
            entries.append(entry)
        records_meta.append({"index": rec.index, "name": rec.name, "kind": rec.kind, "site": rec.site, "rows": rec.rowset, "tensors": entries})
    index = {"side": side, "step": step.number, "label": step.label, "seq_ids": list(seq_index), "rowsets": rowsets_meta, "records": records_meta}
    meta = {"zmr_locate": str(FORMAT_VERSION), "index": json.dumps(index, separators=(",", ":"))}
    atomic_write(path, safetensors.encode(tensors, meta))
