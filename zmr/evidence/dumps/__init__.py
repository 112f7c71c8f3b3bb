"""Dumps: the files engines write and zmr compares (docs/reference.md §10, §11).

- `zmr.evidence.dumps.safetensors`: the safetensors container, read and written here
  (neither torch nor the ``safetensors`` package is needed);
- `zmr.evidence.dumps.bits`: floating-point formats as bits (exact widening, dtype
  tables, values shown with their bits);
- `zmr.evidence.dumps.logprobs`: log-prob dumps (``.jsonl``, ``.npz``,
  ``.safetensors``), read by `zmr mismatch`;
- `zmr.evidence.dumps.tensors`: tensor dumps, one safetensors file per step, read by
  `zmr locate`;
- `zmr.evidence.dumps.recording`: what runs inside the engines to write tensor dumps
  (`Recorder`, `trace_functions`, `hook_modules`).

`zmr.evidence.mismatch` and `zmr.evidence.locate` keep the comparisons and reports, and hand on
the names engines, templates and scripts import from them.
"""
