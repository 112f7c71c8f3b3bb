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

    from zmr.evidence import locate

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

- ``side`` (``rollout``/``trainer``/any label), ``step`` (integer, the order of
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
    trainer: {}                       # the same for the trainer's names

A mapping without the ``rollout``/``trainer`` sections is the rollout section;
``train`` (the older name of the trainer section) is read as ``trainer``.
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

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, TypedDict

# What runs inside the engines, handed on: adapters, templates and scripts import these from zmr.evidence.locate.
from zmr.evidence.dumps.bits import Figure, json_number, numpy, show_value, tensor_values
from zmr.evidence.dumps.recording import Recorder, Rows, active, dump, hook_modules, padded_rows, trace_functions
from zmr.evidence.dumps.tensors import FORMAT_VERSION, STEP_GLOB, Record, SideDump, StepFile, TensorInfo, read_side
from zmr.infra.errors import ZmrError
from zmr.infra.files import parse_json, read_repo_file
from zmr.infra.reports import Report

__all__ = [
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "STEP_GLOB",
    "Divergence",
    "InputCheck",
    "LocateReport",
    "NameMap",
    "OpResult",
    "Record",
    "Recorder",
    "Rows",
    "SideDump",
    "SideInfo",
    "StepFile",
    "TensorInfo",
    "active",
    "dump",
    "hook_modules",
    "load_name_map",
    "locate",
    "padded_rows",
    "read_side",
    "trace_functions",
]

MAX_NAME_MAP_BYTES = 1 << 20

SCHEMA_VERSION = 3
"""``schema_version`` of ``zmr locate --json`` (`LocateReport` in `zmr.infra.reports.envelope`); 3: ``tool`` is "zmr" and
``zmr`` the version (2: ``tool`` {``name``, ``version``});
2: the trainer side's keys are ``trainer`` and ``only_trainer`` (1: ``train``, ``only_train``)."""
_MAX_LISTED = 10


# ==========================================================================
# Name map


@dataclass
class NameMap:
    """Renames of op names per side: exact names, base names (before ``#k``) and ``re:`` patterns."""

    exact: dict[str, dict[str, str]] = field(default_factory=lambda: {"rollout": {}, "trainer": {}})
    patterns: dict[str, list[tuple[str, re.Pattern[str], str]]] = field(default_factory=lambda: {"rollout": [], "trainer": []})
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
        for side in ("rollout", "trainer"):
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
    from yaml.nodes import MappingNode, ScalarNode

    from zmr.model.yamlnodes import Problems, read_yaml, scalar

    problems = Problems(display)
    node = read_yaml(p, display, problems, what="name map")
    if node is None:
        raise ZmrError(f"{display}: not a valid name map", details=[str(x) for x in problems.items])

    def to_py(n: Any) -> Any:
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


# The trainer section's older name: name maps that use it still read.
_OLD_SECTIONS = {"train": "trainer"}


def _name_map_from(data: Any, display: str) -> NameMap:
    def strip(value: Any) -> Any:  # YAML values come as (value, line)
        return value if not isinstance(value, tuple) else value[0]

    def where(value: Any) -> str:
        return f"{display}:{value[1]}" if isinstance(value, tuple) else display

    if not isinstance(data, dict):
        raise ZmrError(f"{display}: a name map is a mapping", details=["write `rollout:` and `trainer:` sections of `name: other name` entries"])
    sectioned = bool(data) and all(isinstance(strip(v), dict) for v in data.values())
    sections: dict[str, dict[str, Any]] = {"rollout": {}, "trainer": {}}
    if sectioned:
        given: dict[str, str] = {}
        for key, value in data.items():
            side = _OLD_SECTIONS.get(key, key)
            if side not in sections:
                raise ZmrError(f"{where(value)}: unknown section {key!r}", details=["the sections are rollout and trainer"])
            if side in given:
                raise ZmrError(f"{where(value)}: sections {given[side]!r} and {key!r} are the same side", details=[f"keep one {side!r} section"])
            given[side] = key
            sections[side] = strip(value)
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
    trainer_value: str
    rollout_bits: str
    trainer_bits: str
    abs_diff: float | None
    rollout_step: int
    rollout_file: str
    rollout_label: str | None
    rollout_site: str | None
    rollout_name: str
    trainer_step: int
    trainer_file: str
    trainer_label: str | None
    trainer_site: str | None
    trainer_name: str
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


class SideJson(TypedDict):
    """A side's dump: its folder, which side, its files, records and rows, the operations recorded."""

    path: str
    side: str
    files: int
    records: int
    rows: int
    ops: int


class RowsJson(TypedDict):
    rows: int
    differ: int


class OpJson(TypedDict):
    """One operation recorded on both sides: rows and elements compared and differing, the largest |Δ|, non-finite
    values that differ, rows where it introduced a difference, rows whose inputs already differ, its slots, rows per
    label, notes."""

    name: str
    order: int
    rows: int
    rows_differ: int
    elements: int
    elements_differ: int
    max_abs_diff: Figure
    nonfinite_differ: int
    introduced: int
    inputs_differ_rows: int
    slots: list[str]
    rows_by_label: dict[str, RowsJson]
    notes: list[str]


class RowJson(TypedDict):
    seq_id: str
    position: int
    token: int | None


class ValueJson(TypedDict):
    """One side's value at the divergence: in dump notation and bits, the tensor's name, step, file, label and site."""

    value: str
    bits: str
    name: str
    step: int
    file: str
    label: str | None
    site: str | None


class InputJson(TypedDict):
    """An input of the diverging operation: equal, differs or not compared, how (row, whole, or why not), its largest |Δ|."""

    slot: str
    status: str
    how: str
    max_abs_diff: Figure


class DivergenceJson(TypedDict):
    """The first divergence: the operation, slot, row and element, both values, |Δ|, its *kind*, the inputs and their
    verdict (equal: this operation is at fault; differ: an earlier one that was not recorded; unknown), in words."""

    op: str
    order: int
    slot: str
    row: RowJson
    element: list[int]
    row_shape: list[int]
    rollout: ValueJson
    trainer: ValueJson
    abs_diff: Figure
    kind: str
    inputs: list[InputJson]
    inputs_verdict: str
    at_fault: str


class LocateJson(TypedDict):
    """The verdict (bitwise_equal or diverged), both sides, the first divergence (null: none), every operation compared,
    those recorded on one side only, notes."""

    verdict: Literal["diverged", "bitwise_equal"]
    rollout: SideJson
    trainer: SideJson
    first: DivergenceJson | None
    ops: list[OpJson]
    only_rollout: list[str]
    only_trainer: list[str]
    notes: list[str]


@dataclass
class LocateReport(Report):
    """What `locate` found; `first` is None when every compared bit is equal."""

    rollout: SideInfo
    trainer: SideInfo
    ops: list[OpResult]
    first: Divergence | None
    only_rollout: list[str]
    only_trainer: list[str]
    notes: list[str]

    def failed(self) -> bool:
        """The check failed: a divergence was found (`zmr locate` exits 1)."""
        return self.first is not None

    def reason(self) -> str:
        """Why it failed, in one line ('' when it did not)."""
        f = self.first
        if f is None:
            return ""
        fault = {
            "equal": "its inputs are equal: this operation is at fault",
            "differ": "an input already differs: an earlier, unrecorded operation is at fault",
            "unknown": "no input could be compared",
        }[f.inputs_verdict]
        return f"first divergence at {f.op!r} (sequence {f.seq_id!r}, position {f.position}); {fault}"

    @property
    def diverged(self) -> bool:
        return self.first is not None

    def after_first(self) -> list[OpResult]:
        """The first diverging operation and every operation after it."""
        if self.first is None:
            return []
        return [op for op in self.ops if op.order >= self.first.order]

    schema_version = SCHEMA_VERSION

    def to_json(self) -> LocateJson:
        """The report's keys; `zmr.infra.reports.envelope(report)` adds ``tool``, ``zmr`` and ``schema_version`` before them."""

        def op(o: OpResult) -> OpJson:
            return {
                "name": o.name,
                "order": o.order,
                "rows": o.rows,
                "rows_differ": o.rows_differ,
                "elements": o.elements,
                "elements_differ": o.elements_differ,
                "max_abs_diff": json_number(o.max_abs_diff),
                "nonfinite_differ": o.nonfinite_differ,
                "introduced": o.introduced,
                "inputs_differ_rows": o.inputs_differ_rows,
                "slots": list(o.slots),
                "rows_by_label": {k: {"rows": v[0], "differ": v[1]} for k, v in o.rows_by_label.items()},
                "notes": list(o.notes),
            }

        first: DivergenceJson | None = None
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
                "trainer": {
                    "value": f.trainer_value,
                    "bits": f.trainer_bits,
                    "name": f.trainer_name,
                    "step": f.trainer_step,
                    "file": f.trainer_file,
                    "label": f.trainer_label,
                    "site": f.trainer_site,
                },
                "abs_diff": json_number(f.abs_diff),
                "kind": f.kind,
                "inputs": [{"slot": i.slot, "status": i.status, "how": i.how, "max_abs_diff": json_number(i.max_abs_diff)} for i in f.inputs],
                "inputs_verdict": f.inputs_verdict,
                "at_fault": {"equal": "this operation", "differ": "an earlier operation that was not recorded", "unknown": "unknown (no input was comparable)"}[
                    f.inputs_verdict
                ],
            }

        def side(s: SideInfo) -> SideJson:
            return {"path": s.path, "side": s.side, "files": s.files, "records": s.records, "rows": s.rows, "ops": s.ops}

        return {
            "verdict": "diverged" if self.diverged else "bitwise_equal",
            "rollout": side(self.rollout),
            "trainer": side(self.trainer),
            "first": first,
            "ops": [op(o) for o in self.ops],
            "only_rollout": list(self.only_rollout),
            "only_trainer": list(self.only_trainer),
            "notes": list(self.notes),
        }


def locate(
    rollout: str | os.PathLike[str] | SideDump, trainer: str | os.PathLike[str] | SideDump, name_map: NameMap | str | os.PathLike[str] | None = None
) -> LocateReport:
    """Compare two dumps and find the first operation whose output differs in any bit (see the module doc)."""
    numpy()  # where it is missing, that error before any about the dumps
    r = rollout if isinstance(rollout, SideDump) else read_side(rollout, "rollout")
    t = trainer if isinstance(trainer, SideDump) else read_side(trainer, "trainer")
    if name_map is not None and not isinstance(name_map, NameMap):
        name_map = load_name_map(name_map)
    notes: list[str] = []
    if name_map is not None:
        for side_name, dump_ in (("rollout", r), ("trainer", t)):
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
                f"trainer: {_listing(sorted(t_ops))}",
                "if the two sides name them differently, pass a name map (--map FILE)",
            ],
        )

    def rank(name: str) -> tuple[int, int, str]:
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
        for label, keys, where in (("rollout", only_r, ru), ("trainer", only_t, tu)):
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
        listed = [f"({k[0]!r}, {k[1]}): rollout token {a}, trainer token {b}" for k, a, b in bad[:_MAX_LISTED]]
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


def _rows_view(step: StepFile, info: TensorInfo, rowset_shape: tuple[int, ...]) -> Any:
    """The stored tensor as [rows, *per-row shape] bits."""
    arr = step.array(info.key)  # type: ignore[arg-type]
    n = math.prod(rowset_shape)
    lead = len(rowset_shape) if info.aligned == "lead" else 1
    return arr.reshape((n, *info.shape[lead:]))


def _row_shape(info: TensorInfo, rowset_shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = len(rowset_shape) if info.aligned == "lead" else 1
    return tuple(info.shape[lead:])


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


@dataclass(frozen=True)
class _FirstElement:
    """The first differing element of a row: which output, where, and the two sides' bits of the whole rows."""

    slot: str
    element: int  # flat index within the row
    rollout_rows: Any  # the compared rows' bits, [n, elements per row]
    trainer_rows: Any
    rollout_info: TensorInfo
    trainer_info: TensorInfo
    row_shape: tuple[int, ...]


def _compare_op(name: str, order: int, r_recs: list[Record], t_recs: list[Record], want_first: bool) -> tuple[OpResult, Divergence | None]:
    np = numpy()
    result = OpResult(name, order)
    r_index, r_dup = _row_index(r_recs)
    t_index, t_dup = _row_index(t_recs)
    if r_dup or t_dup:
        result.notes.append(f"rows computed more than once (rollout {r_dup}, trainer {t_dup}): the first occurrence of each is compared")
    _note_unaligned(result, r_recs, t_recs)
    groups = _paired_groups(r_index, t_index)
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
        by_label = result.rows_by_label.setdefault(rrec.step.label or "-", [0, 0])
        by_label[0] += n
        row_differs, firsts, group_max = _compare_outputs(name, rrec, trec, r_rows, t_rows, result, slots_seen)
        if group_max is not None:
            max_abs = group_max if max_abs is None else max(max_abs, group_max)
        if not row_differs.any():
            continue
        # inputs of the differing rows
        in_equal, comparable, checks = _inputs_equal(rrec, trec, r_rows, t_rows)
        differing = int(row_differs.sum())
        result.rows_differ += differing
        by_label[1] += differing
        result.introduced += int((row_differs & in_equal & comparable).sum())
        result.inputs_differ_rows += int((row_differs & comparable & ~in_equal).sum())
        if want_first and first is None:
            row = int(np.flatnonzero(row_differs)[0])
            first = _divergence(name, order, rrec, trec, int(r_rows[row]), row, firsts[row], tuple(c(row) for c in checks))
    result.max_abs_diff = max_abs
    result.slots = tuple(sorted(slots_seen))
    if not slots_seen:
        result.notes.append("no output slot was row-aligned on both sides; nothing compared")
    return result, first


def _note_unaligned(result: OpResult, r_recs: list[Record], t_recs: list[Record]) -> None:
    """Outputs that are not row-aligned cannot be compared row by row: say how many, with one example."""
    unaligned = [
        (side, rec)
        for side, recs in (("rollout", r_recs), ("trainer", t_recs))
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


def _paired_groups(
    r_index: dict[tuple[str, int], tuple[int, int]], t_index: dict[tuple[str, int], tuple[int, int]]
) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """The rows both sides computed, grouped by (rollout record, trainer record): [(rollout row, trainer row), ...]."""
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, (ri, rrow) in r_index.items():
        hit = t_index.get(key)
        if hit is not None:
            groups.setdefault((ri, hit[0]), []).append((rrow, hit[1]))
    return groups


def _compare_outputs(name: str, rrec: Record, trec: Record, r_rows: Any, t_rows: Any, result: OpResult, slots_seen: set[str]) -> Any:
    """Compare every output both records hold row-aligned: (rows that differ, each row's first difference, max |diff|)."""
    np = numpy()
    n = len(r_rows)
    out_slots = sorted(s for s in rrec.tensors if s.startswith("out") and s in trec.tensors and rrec.tensors[s].aligned and trec.tensors[s].aligned)
    missing = sorted(s for s in set(rrec.tensors) ^ set(trec.tensors) if s.startswith("out"))
    if missing:
        _note_once(result, f"output slots on one side only: {', '.join(missing)}")
    row_differs = np.zeros(n, dtype=bool)
    firsts: list[_FirstElement | None] = [None] * n
    max_abs = None
    for slot in out_slots:
        slots_seen.add(slot)
        ri_info, ti_info = rrec.tensors[slot], trec.tensors[slot]
        r_shape = _row_shape(ri_info, rrec.step.rowset_shapes[rrec.rowset])
        t_shape = _row_shape(ti_info, trec.step.rowset_shapes[trec.rowset])
        if r_shape != t_shape:
            raise _shape_error(name, slot, rrec, trec, r_shape, t_shape)
        a = _rows_view(rrec.step, ri_info, rrec.step.rowset_shapes[rrec.rowset])[r_rows].reshape(n, -1)
        b = _rows_view(trec.step, ti_info, trec.step.rowset_shapes[trec.rowset])[t_rows].reshape(n, -1)
        av, bv = tensor_values(a, ri_info.dtype), tensor_values(b, ti_info.dtype)
        if ri_info.dtype == ti_info.dtype:
            neq = a != b
        else:
            _note_once(result, f"{slot}: dtype {ri_info.dtype} on the rollout side, {ti_info.dtype} on the trainer side (compared as values)")
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
            max_abs = float(dd.max()) if max_abs is None else max(max_abs, float(dd.max()))
        rows_hit = neq.any(axis=1)
        for row in np.flatnonzero(rows_hit & ~row_differs).tolist():
            firsts[row] = _FirstElement(slot, int(np.flatnonzero(neq[row])[0]), a, b, ri_info, ti_info, r_shape)
        row_differs |= rows_hit
    return row_differs, firsts, max_abs


def _note_once(result: OpResult, note: str) -> None:
    if note not in result.notes:
        result.notes.append(note)


def _shape_error(name: str, slot: str, rrec: Record, trec: Record, r_shape: tuple[int, ...], t_shape: tuple[int, ...]) -> ZmrError:
    ri_info, ti_info = rrec.tensors[slot], trec.tensors[slot]
    return ZmrError(
        f"operation {name!r}, output {slot!r}: per-row shape {list(r_shape)} on the rollout side but {list(t_shape)} on the trainer side",
        details=[
            f"rollout: {rrec.step.path} (step {rrec.step.number}, {rrec.original!r},"
            f" tensor shape {list(ri_info.shape)}, rows {list(rrec.step.rowset_shapes[rrec.rowset])})",
            f"trainer: {trec.step.path} (step {trec.step.number}, {trec.original!r},"
            f" tensor shape {list(ti_info.shape)}, rows {list(trec.step.rowset_shapes[trec.rowset])})",
            "the two operations do not compute the same thing per row: check the name map, or the rows given to the step",
        ],
    )


def _divergence(
    name: str, order: int, rrec: Record, trec: Record, r_row: int, row: int, found: _FirstElement | None, inputs: tuple[InputCheck, ...]
) -> Divergence:
    """The divergence at paired row *row* (rollout row *r_row*): its first differing element, both values, and the inputs' verdict."""
    np = numpy()
    assert found is not None  # a differing row has a first differing element
    a, b, elem = found.rollout_rows, found.trainer_rows, found.element
    rv, rb = show_value(int(a[row, elem]), found.rollout_info.dtype)
    tv, tb = show_value(int(b[row, elem]), found.trainer_info.dtype)
    fa = float(tensor_values(a[row : row + 1, elem], found.rollout_info.dtype)[0])
    fb = float(tensor_values(b[row : row + 1, elem], found.trainer_info.dtype)[0])
    seq_key = rrec.step.row_keys(rrec.rowset)[r_row]
    assert seq_key is not None  # a differing row is a real row, never padding
    tok = int(rrec.step.row_tokens(rrec.rowset)[r_row])
    compared = [i for i in inputs if i.status != "not compared"]
    verdict = "unknown" if not compared else ("equal" if all(i.status == "equal" for i in compared) else "differ")
    return Divergence(
        op=name,
        order=order,
        slot=found.slot,
        seq_id=seq_key[0],
        position=seq_key[1],
        token=tok if tok >= 0 else None,
        element=tuple(int(x) for x in np.unravel_index(elem, found.row_shape)) if found.row_shape else (),
        row_shape=found.row_shape,
        rollout_value=rv,
        trainer_value=tv,
        rollout_bits=rb,
        trainer_bits=tb,
        abs_diff=abs(fa - fb) if math.isfinite(fa) and math.isfinite(fb) else None,
        rollout_step=rrec.step.number,
        rollout_file=str(rrec.step.path),
        rollout_label=rrec.step.label,
        rollout_site=rrec.site,
        rollout_name=rrec.original,
        trainer_step=trec.step.number,
        trainer_file=str(trec.step.path),
        trainer_label=trec.step.label,
        trainer_site=trec.site,
        trainer_name=trec.original,
        inputs=inputs,
        inputs_verdict=verdict,
        kind=_difference_kind(fa, fb),
    )


def _inputs_equal(rrec: Record, trec: Record, r_rows: Any, t_rows: Any) -> Any:
    """Per paired row: all comparable inputs equal; any input comparable; and per-input checkers."""
    np = numpy()
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
            side = "trainer" if ri is not None else "rollout"
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
            av, bv = tensor_values(a, ri.dtype), tensor_values(b, ti.dtype)
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(av - bv)

            def check(row: int, short: str = short, row_eq: Any = row_eq, d: Any = d, neq: Any = neq) -> InputCheck:
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
            which = "rollout" if ri.aligned else "trainer"
            checks.append(_fixed(short, "not compared", f"row-aligned on the {which} side only"))
    return equal, comparable, checks


def _fixed(slot: str, status: str, how: str) -> Callable[[int], InputCheck]:
    value = InputCheck(slot, status, how)
    return lambda row: value
