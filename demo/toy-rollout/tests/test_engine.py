import torch

from toy_rollout import Engine, ModelConfig, Request, ToyModel, random_weights


def _model(dtype=torch.float32):
    cfg = ModelConfig()
    return ToyModel(cfg, random_weights(cfg, seed=0), dtype=dtype)


def _requests():
    return [Request(f"r{i}", list(range(1, 3 + 2 * i)), max_new_tokens=2 + i) for i in range(5)]


def test_every_request_gets_its_tokens():
    out = Engine(_model(), max_running=2).generate(_requests())
    assert [c.id for c in out] == [f"r{i}" for i in range(5)]
    for i, c in enumerate(out):
        assert len(c.tokens) == len(c.logprobs) == 2 + i
        assert all(lp <= 0.0 for lp in c.logprobs)


def test_sampling_is_seeded():
    a = Engine(_model(), max_running=2, seed=1).generate(_requests())
    b = Engine(_model(), max_running=3, seed=1).generate(_requests())
    assert [c.tokens for c in a] == [c.tokens for c in b]


def test_bf16_runs():
    out = Engine(_model(torch.bfloat16), max_running=4).generate(_requests())
    assert all(len(c.tokens) == c_len for c, c_len in zip(out, range(2, 7)))
