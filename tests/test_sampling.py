"""speculative.py: the sampling distribution, greedy equivalence, reproducibility and argument errors."""

import copy

import pytest
import torch

from speculative import (accept_probability, autoregressive_generate, residual, sampling_probs,
                         speculative_generate)
from tests.conftest import random_gpt


def test_temperature_zero_is_a_one_hot_argmax():
    assert sampling_probs(torch.tensor([0.1, 3.0, -1.0]), temperature=0).tolist() == [0.0, 1.0, 0.0]


def test_top_k_keeps_the_k_largest():
    p = sampling_probs(torch.tensor([1.0, 3.0, 2.0, 0.0]), top_k=2)
    assert (p[[0, 3]] == 0).all() and torch.allclose(p[[1, 2]], torch.softmax(torch.tensor([3.0, 2.0]), 0))


@pytest.mark.parametrize("top_p,kept", [(0.6, [1, 0, 0]), (0.7, [1, 1, 0]), (0.95, [1, 1, 1]), (1e-9, [1, 0, 0])])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    p = sampling_probs(torch.tensor([2.0, 1.0, 0.0]), top_p=top_p)  # softmax: .665, .245, .090
    assert [int(x > 0) for x in p.tolist()] == kept and abs(p.sum().item() - 1) < 1e-6


def test_tiny_temperature_with_huge_logits_gives_the_argmax_limit_not_nan():
    # logits / 1e-6 alone would overflow to inf (and softmax to NaN): the max is subtracted first
    assert sampling_probs(torch.tensor([2e33, 1e33, float("-inf")]), temperature=1e-6).tolist() == [1.0, 0.0, 0.0]
    assert sampling_probs(torch.tensor([3e33, 3e33, 0.0]), temperature=1e-6).tolist() == [0.5, 0.5, 0.0]


@pytest.mark.parametrize("cut", [dict(top_k=2), dict(top_p=0.3), dict(top_k=1, top_p=1e-12)])
def test_tokens_tied_at_the_cut_stay_together(cut):
    p = sampling_probs(torch.tensor([0.0, 1.0, 1.0, 1.0]), **cut)  # softmax: .096, .301, .301, .301
    assert torch.allclose(p, torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))


def test_half_precision_logits_give_float32_probabilities():
    p = sampling_probs(torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16))
    assert p.dtype == torch.float32


def test_residual_of_equal_distributions_is_not_nan():
    p = torch.tensor([0.2, 0.3, 0.5])
    r = residual(p, p.clone())  # subtle: max(0, p - q) sums to zero
    assert not torch.isnan(r).any() and abs(r.sum().item() - 1) < 1e-6


def test_residual_and_acceptance_on_a_worked_example():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.6, 0.2])
    assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0]))  # max(0, p - q) = [.3, 0, 0]
    assert accept_probability(0.3, 0.6) == 0.5 and accept_probability(0.5, 0.2) == 1.0


@pytest.mark.parametrize("k", [1, 3, 7])
def test_greedy_speculative_equals_greedy_plain(k):
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    idx = torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(target, idx, 70, temperature=0)  # crosses the window 7 times
    spec, stats = speculative_generate(target, draft, idx, 70, k=k, temperature=0)
    assert torch.equal(plain, spec)
    spec_self, stats_self = speculative_generate(target, copy.deepcopy(target), idx, 70, k=k, temperature=0)
    assert torch.equal(plain, spec_self) and stats_self.acceptance_rate == 1.0


def test_result_length_and_zero_new_tokens(gpt_pair):
    target, draft = gpt_pair
    idx = torch.tensor([[1, 2]])
    for n in (0, 1, 2, 13):
        out, stats = speculative_generate(target, draft, idx, n, k=4)
        assert out.shape == (1, 2 + n) and torch.equal(out[:, :2], idx) and stats.new_tokens == n
    assert torch.equal(autoregressive_generate(target, idx, 0)[0], idx)


def test_stats_add_up(gpt_pair):
    target, draft = gpt_pair
    out, s = speculative_generate(target, draft, torch.tensor([[1, 2]]), 40, k=3, generator=torch.Generator().manual_seed(0))
    assert s.target_calls == len(s.rounds) and s.draft_calls == s.drafted
    assert sum(kept + 1 for _, _, kept in s.rounds) == 40 == s.new_tokens
    assert s.drafted == sum(d for _, d, _ in s.rounds) and s.accepted == sum(a for _, _, a in s.rounds)
    assert 0 <= s.acceptance_rate <= 1 and s.target_time > 0 and s.draft_time > 0


def test_a_seed_reproduces_a_run(gpt_pair):
    target, draft = gpt_pair
    idx = torch.tensor([[1, 2, 3]])
    runs = [speculative_generate(target, draft, idx, 30, k=3, top_p=0.9, generator=torch.Generator().manual_seed(7))[0]
            for _ in range(2)]
    other = speculative_generate(target, draft, idx, 30, k=3, top_p=0.9, generator=torch.Generator().manual_seed(8))[0]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], other)


def test_models_in_train_mode_are_switched_to_eval():
    target, draft = random_gpt(0), random_gpt(1)
    target.train(), draft.train()
    speculative_generate(target, draft, torch.tensor([[1]]), 3)
    assert not target.training and not draft.training


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=0), "k .draft tokens"),
    (dict(k=-1), "must be an int >= 1 or 'auto'"),
    (dict(k="fast"), "must be an int >= 1 or 'auto'"),
    (dict(k=2.5), "must be an int >= 1 or 'auto'"),
    (dict(k=True), "must be an int >= 1 or 'auto'"),
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(temperature=float("nan")), "temperature must be >= 0"),
    (dict(temperature=float("inf")), "and finite"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(idx=torch.tensor([[1, 2], [3, 4]])), "idx holds 2 sequences; these samplers take one"),
    (dict(idx=torch.zeros(1, 0, dtype=torch.long)), "prompt is empty"),
    (dict(idx=torch.tensor([[1, 9]])), r"token ids must lie in \[0, 5\)"),
    (dict(idx=torch.tensor([[1.0]])), "LongTensor"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(draft=random_gpt(2, vocab_size=6)), "vocab sizes differ"),
    (dict(draft=None), "draft is the target object itself"),
])
def test_bad_arguments_get_clear_errors(gpt_pair, kwargs, message):
    target, draft = gpt_pair
    args = dict(target=target, draft=draft, idx=torch.tensor([[1, 2]]), max_new_tokens=5)
    args.update(kwargs)
    args["draft"] = args["draft"] or target
    with pytest.raises(ValueError, match=message):
        speculative_generate(**args)


@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.7, top_k=3), dict(temperature=1.3,
                                      top_p=0.8), dict(temperature=0.0)])
def test_q_over_a_drafts_support_is_q_over_the_whole_vocabulary_and_draws_the_same_token(sampling):
    """A draft with a reduced vocabulary (drafts/heads.py) has logits -inf outside it: draft_probs computes q over the
    support alone and draw() samples there; the same q, and the same token from the same generator state."""
    import speculative
    torch.manual_seed(0)
    V, support = 50, torch.tensor([1, 4, 7, 8, 20, 33, 49])
    logits = torch.full((V,), float("-inf"))
    logits[support] = torch.randn(len(support)) * 2
    probs = lambda l: sampling_probs(l, **sampling)
    dense = speculative.draft_probs(logits, probs, 0, [], 0)
    sparse = speculative.draft_probs(logits, probs, 0, [], 0, support)
    assert torch.allclose(dense, sparse, atol=1e-6) and sparse[logits == float("-inf")].eq(0).all()
    for seed in range(20):
        x = speculative.draw(sparse, torch.Generator().manual_seed(seed), support)
        assert x == speculative.sample(dense, torch.Generator().manual_seed(seed)), seed
