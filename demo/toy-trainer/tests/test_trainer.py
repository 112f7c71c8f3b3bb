import torch

from toy_trainer import ModelConfig, ToyPolicy, random_weights, response_logprobs, train_step


def _policy(dtype=torch.float32):
    cfg = ModelConfig()
    return ToyPolicy(cfg, random_weights(cfg, seed=0), dtype=dtype)


PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
RESPONSES = [[10, 11], [12], [13, 14, 15, 16]]


def test_logprobs_shapes():
    with torch.no_grad():
        out = response_logprobs(_policy(), PROMPTS, RESPONSES)
    assert [t.numel() for t in out] == [2, 1, 4]
    assert all(bool((t <= 0).all()) for t in out)


def test_train_step_moves_the_policy():
    policy = _policy()
    before = policy.weight("lm_head.weight").detach().clone()
    loss = train_step(policy, PROMPTS, RESPONSES, advantages=[1.0, -0.5, 0.25], lr=1e-2)
    assert loss == loss  # not NaN
    assert not torch.equal(before, policy.weight("lm_head.weight").detach())
