"""The evidence tools: is the mismatch zero, and if not, where does it start?

- `zmr.evidence.mismatch` (``zmr mismatch``): compares two log-prob dumps bit
  for bit and reports the figures (docs/reference.md §10);
- `zmr.evidence.locate` (``zmr locate``): pairs two tensor dumps and finds the
  first operation whose outputs differ (§11);
- `zmr.evidence.dumps`: the dump formats, their readers and writers, and the
  recorders that engines call;
- `zmr.evidence.adapters`: dump records from real engines (vLLM, Hugging Face,
  Megatron-LM, verl), imported only by the code that runs those engines (§14).

These modules import nothing of the patch-set core but `zmr.infra.errors`,
`zmr.infra.files` and `zmr.model.yamlnodes`, and the core never imports them: a user can
run the evidence tools on dumps without a zero-mismatch repository.
"""
