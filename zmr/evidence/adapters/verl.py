"""verl: write the rollout's and the actor's log-probs of a training step as two dumps.

In verl's PPO/GRPO loop (``verl/trainer/ppo/ray_trainer.py``,
``RayPPOTrainer.fit``) one step's ``DataProto`` ``batch`` holds, in
``batch.batch`` (a TensorDict, rows = samples):

- ``responses`` [B, R]: the sampled response token ids (right-padded);
- ``response_mask`` [B, R]: 1 on tokens the policy produced (0 on padding
  and, in multi-turn rollouts, on tool/observation tokens);
- ``rollout_log_probs`` [B, R]: the rollout engine's log-probs of those
  tokens; present when the rollout returns them
  (``actor_rollout_ref.rollout.calculate_log_probs=True``);
- ``old_log_probs`` [B, R]: the actor's recomputed log-probs
  (``_compute_old_log_prob``; added by ``batch = batch.union(old_log_prob)``);

and in ``batch.non_tensor_batch`` the prompt ``uid`` per row (repeated for
the ``rollout.n`` samples of one prompt). The step number is
``self.global_steps``.

Hook it right after the old log-probs are joined (where verl itself
computes its rollout-vs-actor debug metrics)::

    batch = batch.union(old_log_prob)
    if "rollout_log_probs" in batch.batch.keys():
        from zmr.evidence.adapters import verl as zmr_verl
        zmr_verl.write_step_dumps(batch, "/data/zmr-dumps", step=self.global_steps)

then ``zmr mismatch /data/zmr-dumps/rollout-step000012.jsonl
/data/zmr-dumps/train-step000012.jsonl`` (or one pair for several steps:
`write_step_dumps` appends to ``rollout.jsonl`` / ``train.jsonl`` with
``per_step=False``). In bypass mode
(``algorithm.rollout_correction.bypass_mode=True``) verl sets
``old_log_probs = rollout_log_probs``: there is nothing to compare, and
`step_records` refuses.

Only the tokens with ``response_mask == 1`` are written, on both sides.
Ids are ``"<uid>/<k>"`` (the k-th sample of that prompt in the batch's
order) when ``uid`` is there, else the row index; both dumps of one call
use the same ids, so they pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROLLOUT_KEY = "rollout_log_probs"
TRAIN_KEY = "old_log_probs"
RESPONSES_KEY = "responses"
MASK_KEY = "response_mask"

__all__ = ["step_records", "records_from_tensors", "write_step_dumps", "row_ids"]


def _get(container: Any, key: str) -> Any:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return container.get(key)
    try:
        keys = container.keys()
    except AttributeError:
        return getattr(container, key, None)
    return container[key] if key in keys else None


def row_ids(n: int, uids: Sequence[Any] | None = None) -> list[str]:
    """``"<uid>/<k>"`` per row (k counts that uid's rows so far), or the row index when there are no uids."""
    if uids is None:
        return [str(i) for i in range(n)]
    seen: dict[str, int] = {}
    out = []
    for u in list(uids)[:n]:
        key = str(u)
        k = seen.get(key, 0)
        seen[key] = k + 1
        out.append(f"{key}/{k}")
    if len(out) != n:
        raise ValueError(f"{len(out)} uids for {n} rows")
    return out


def records_from_tensors(responses: Any, response_mask: Any, logprobs: Any, *, ids: Sequence[Any], step: int = 0) -> list[dict[str, Any]]:
    """One record per row: the response tokens where the mask is 1, and their log-probs (dtype from the tensor)."""
    mask = response_mask.bool()
    out = []
    for b in range(responses.shape[0]):
        keep = mask[b]
        out.append(
            {
                "id": str(ids[b]),
                "step": int(step),
                "tokens": responses[b][keep].detach().cpu(),
                "logprobs": logprobs[b][keep].detach().cpu().contiguous(),
            }
        )
    return out


def step_records(
    batch: Any, *, step: int, ids: Sequence[Any] | None = None, rollout_key: str = ROLLOUT_KEY, train_key: str = TRAIN_KEY
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rollout records, trainer records) from a verl ``DataProto`` (or anything with ``.batch`` / a mapping)."""
    tensors = getattr(batch, "batch", batch)
    missing = [k for k in (RESPONSES_KEY, rollout_key, train_key) if _get(tensors, k) is None]
    if missing:
        hint = {
            rollout_key: "set actor_rollout_ref.rollout.calculate_log_probs=True so the rollout returns its log-probs",
            train_key: "call after `batch = batch.union(old_log_prob)` (the actor's recomputed log-probs)",
            RESPONSES_KEY: "pass the step's DataProto after generation",
        }
        raise ValueError(f"the batch has no {', '.join(missing)}; " + "; ".join(hint[k] for k in missing))
    responses = _get(tensors, RESPONSES_KEY)
    rollout = _get(tensors, rollout_key)
    train = _get(tensors, train_key)
    if rollout is train or (rollout.data_ptr() == train.data_ptr() and rollout.shape == train.shape):
        raise ValueError(f"{train_key} is {rollout_key} itself (verl's bypass mode): there is nothing to compare")
    mask = _get(tensors, MASK_KEY)
    if mask is None:  # older verl: the response part of the attention mask
        attention = _get(tensors, "attention_mask")
        if attention is None:
            raise ValueError("the batch has neither response_mask nor attention_mask")
        mask = attention[:, -responses.shape[1] :]
    if ids is None:
        uids = _get(getattr(batch, "non_tensor_batch", None), "uid")
        ids = row_ids(responses.shape[0], None if uids is None else list(uids))
    if len(ids) != responses.shape[0]:
        raise ValueError(f"{len(ids)} ids for {responses.shape[0]} rows")
    return (
        records_from_tensors(responses, mask, rollout, ids=ids, step=step),
        records_from_tensors(responses, mask, train, ids=ids, step=step),
    )


def write_step_dumps(
    batch: Any,
    folder: str | Path,
    *,
    step: int,
    per_step: bool = True,
    provenance: Mapping[str, Any] | None = None,
    ids: Sequence[Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``rollout-stepNNNNNN.jsonl`` and ``train-stepNNNNNN.jsonl`` (or append to rollout/train.jsonl).

    `provenance` goes into both files' metadata, with ``side`` set to
    ``rollout`` / ``trainer``. Returns the two paths.
    """
    from zmr.evidence.adapters import env_switches, smoke_trees
    from zmr.evidence.mismatch import read_dump, write_dump

    rollout, train = step_records(batch, step=step, ids=ids)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = (f"rollout-step{step:06d}.jsonl", f"train-step{step:06d}.jsonl") if per_step else ("rollout.jsonl", "train.jsonl")
    paths = []
    for name, recs, side in zip(names, (rollout, train), ("rollout", "trainer")):
        prov = {"source": "verl", "side": side, "env": env_switches(), **dict(provenance or {})}
        trees = smoke_trees()
        if trees and "trees" not in prov:
            prov["trees"] = trees
        path = folder / name
        if not per_step and path.exists():  # append: earlier steps first (rewritten whole: atomic)
            old = read_dump(path)
            keep: list[Any] = [r for r in old if r.step != step]
            recs = keep + list(recs)
            prov = old.provenance or prov
        write_dump(path, recs, provenance=prov)
        paths.append(path)
    return paths[0], paths[1]
