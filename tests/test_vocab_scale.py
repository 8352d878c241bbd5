"""The samplers at a real tokenizer's vocabulary: 50,000 tokens (GPT-2's is 50,257), and 150,000 for a
replacement draw (Qwen2's embedding has 151,936 rows). The other tests use 3 to 11 tokens; here float32 sums run
over tens of thousands of terms, most probabilities are tiny, and a residual can hold its mass on a handful of
tokens among 150,000.

What it proves: sampling_probs and residual (speculative.py) and residual_rows (engine/batched.py) give
distributions that sum to 1 at these sizes; a replacement drawn by sample or sample_rows never lands where the
residual is 0, also when the residual's whole mass is a few ulps; a row with no residual mass at all (p == q)
gives p in both samplers and still draws; speculative_generate and speculative_generate_batch with small random
GPTs of 50,000 tokens emit only tokens the target allows, and equal plain sampling when greedy.
What it leaves out: exactness (tests/test_exact_enumeration.py and tests/test_statistics.py prove it on small
vocabularies; nothing in the algorithm depends on V) and speed.
"""

import pytest
import torch

from engine.batched import residual_rows, sample_rows, speculative_generate_batch
from speculative import autoregressive_generate, residual, sample, sampling_probs, speculative_generate
from tests.conftest import random_gpt
from tests.test_fuzz import assert_distribution

V50, V150 = 50_000, 150_000
INF = float("inf")


def random_logits(V, seed, dtype=torch.float32, masked=0.0):  # -> (V,): N(0, 3^2), a fraction `masked` at -inf
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, generator=g) * 3
    x[torch.rand(V, generator=g) < masked] = -INF
    return x.to(dtype)


# ---- turning logits into p and q --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16: thousands of exact ties
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.7, 50, None), (1.0, None, 0.9),
                                                     (0.5, 1000, 0.95), (1e-3, None, None), (0.0, None, None)])
def test_sampling_probs_at_50k_tokens_is_a_distribution_on_the_allowed_set(temperature, top_k, top_p, dtype):
    logits = random_logits(V50, 0, dtype, masked=0.3)
    probs = sampling_probs(logits, temperature, top_k, top_p)
    assert_distribution(probs)  # sums to 1 within 1e-5
    x = logits.double()
    assert (probs[torch.isneginf(x)] == 0).all(), "a masked token got probability"
    if temperature == 0:
        assert probs[x.argmax()] == 1.0 and (probs > 0).sum() == 1
        return
    if top_k is not None:  # zero below the k-th largest logit; ties with it stay
        kth = torch.topk(x, top_k).values[-1]
        assert (probs[x < kth] == 0).all() and 0 < (probs > 0).sum() <= (x >= kth).sum()
    if top_p is not None:  # the smallest set of most probable tokens whose mass reaches top_p, ties together
        before = sampling_probs(logits, temperature, top_k).double()
        kept = probs > 0
        least = before[kept].min()
        assert torch.equal(kept, before >= least)
        # 1e-4: float32 cumulative sums over the ~10^4 kept tokens drift by about sqrt(n) ulps of 1, far below it
        assert before[kept].sum() >= top_p - 1e-4 and before[before > least].sum() < top_p + 1e-4


# ---- the replacement: residual and its draw -------------------------------------------------------------------

def residual_case(V, kind, seed=0):  # -> (p, q), (V,) each, float32, as a round makes them
    p = sampling_probs(random_logits(V, seed), 1.0, top_k=2000)  # zero on all but 2,000 tokens
    if kind == "independent":
        return p, sampling_probs(random_logits(V, seed + 1), 1.0, top_k=2000)
    if kind == "a few ulps":  # q = p except 3 tokens one ulp lower: the residual's whole mass is ~1e-10
        q = p.clone()
        few = p.topk(3).indices
        q[few] = torch.nextafter(p[few], torch.zeros(3))
        return p, q
    if kind == "equal":  # subtle: max(0, p - q) is 0 everywhere; residual returns p
        return p, p.clone()
    raise ValueError(kind)


@pytest.mark.parametrize("V", [V50, V150])
@pytest.mark.parametrize("kind", ["independent", "a few ulps", "equal"])
def test_residual_at_large_vocabularies_is_a_distribution_zero_where_p_does_not_exceed_q(V, kind):
    p, q = residual_case(V, kind)
    r = residual(p, q)
    assert_distribution(r)
    if kind == "equal":
        assert torch.equal(r, p), "no residual mass: the replacement comes from p (any choice is exact)"
    else:
        assert (r[p <= q] == 0).all() and (r[p > q] > 0).all()
    if kind == "a few ulps":
        assert (r > 0).sum() == 3


def test_a_replacement_drawn_from_a_150k_residual_lands_only_where_it_has_mass():
    """100 draws through speculative.sample from a residual whose mass (a few ulps) sits on 3 of 150,000 tokens.
    Each of the 3 holds at least a quarter of it (an ulp of p there), so each is drawn: a miss has probability
    < 3 * 0.75^100, about 1e-12."""
    p, q = residual_case(V150, "a few ulps")
    r = residual(p, q)
    assert r[r > 0].min() >= 0.25
    g = torch.Generator().manual_seed(0)
    drawn = {sample(r, g) for _ in range(100)}
    assert drawn == set((r > 0).nonzero().flatten().tolist())


# ---- the batched replacement: residual_rows and sample_rows -----------------------------------------------------

def test_batched_residual_rows_at_150k_equal_the_core_residual_and_draw_only_where_it_has_mass():
    """Rows of every kind in one batch; the batched residual must be the core's on each (p itself where p == q),
    and 10 exponential-race draws per row (sample_rows) must land where it is positive."""
    kinds = ["independent", "a few ulps", "equal", "independent", "equal"]
    pairs = [residual_case(V150, kind, seed) for seed, kind in enumerate(kinds)]
    p, q = torch.stack([a for a, _ in pairs]), torch.stack([b for _, b in pairs])  # (B, V) each
    r = residual_rows(p, q)
    for b, kind in enumerate(kinds):
        assert_distribution(r[b])
        core = residual(p[b], q[b])
        assert torch.allclose(r[b], core, rtol=1e-5, atol=0) and torch.equal(r[b] > 0, core > 0), kind
        if kind == "equal":
            assert torch.equal(r[b], p[b])
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        x = sample_rows(r, g)  # (B,)
        assert (r[torch.arange(len(kinds)), x] > 0).all()


def test_batched_residual_with_no_mass_is_p_and_its_draw_succeeds():
    """p == q on a row: residual_rows returns p there (as residual does), a distribution, so the draw cannot fail
    and lands where p allows; a row beside it with mass gets its own residual. A small vocabulary and many draws:
    2,000 per row, each of p's 3 tokens (>= 0.2) drawn: a miss has probability < 3 * 0.8^2000."""
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.5, 0.3, 0.2, 0.0]])
    q = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.2, 0.3, 0.5, 0.0]])
    r = residual_rows(p, q)
    assert torch.equal(r[0], p[0]) and torch.allclose(r[1], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    draws = sample_rows(r.repeat(2000, 1), torch.Generator().manual_seed(0)).view(2000, 2)
    assert set(draws[:, 0].tolist()) == {0, 1, 2} and set(draws[:, 1].tolist()) == {0}


# ---- whole runs with small random GPTs of 50,000 tokens ----------------------------------------------------------

@pytest.fixture(scope="module")
def pair_50k():
    """(target, draft): 1-layer GPTs of 8 channels and 50,000 tokens, block_size 32 (no window slides)."""
    target = random_gpt(0, vocab_size=V50, block_size=32, n_layer=1, n_head=1, n_embd=8)
    return target, random_gpt(1, vocab_size=V50, block_size=32, n_layer=1, n_head=1, n_embd=8)


def allowed(target, seq, first, **sampling):  # -> whether every token of seq from `first` on has p > 0
    with torch.no_grad():
        logits = target(torch.tensor([seq]))[0][0]  # (T, V): full, uncached forward
    return all(sampling_probs(logits[t - 1], **sampling)[seq[t]] > 0 for t in range(first, len(seq)))


def test_runs_at_50k_tokens_emit_only_tokens_the_target_allows(pair_50k):
    """top_k=5 of 50,000: a rejected draft's replacement must be one of the target's 5, in every round of both
    samplers (3 runs of 16 tokens, then a batch of 3 prompts)."""
    target, draft = pair_50k
    sampling, prompt = dict(temperature=1.0, top_k=5), [1, 49_999, 7]
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        out, stats = speculative_generate(target, draft, torch.tensor([prompt]), 16, k=4, generator=g, **sampling)
        assert allowed(target, out[0].tolist(), len(prompt), **sampling)
        assert stats.accepted < stats.drafted, "the draft should be rejected sometimes, so that replacements ran"
    prompts = [prompt, [0], [12_345, 2]]
    outs, stats = speculative_generate_batch(target, draft, prompts, 16, k=4, generator=g, **sampling)
    assert all(allowed(target, out.tolist(), len(p), **sampling) for out, p in zip(outs, prompts))
    assert stats.accepted < stats.drafted


def test_greedy_at_50k_tokens_equals_plain_greedy(pair_50k):
    target, draft = pair_50k
    prompts = [[1, 49_999, 7], [0], [12_345, 2]]
    outs, _ = speculative_generate_batch(target, draft, prompts, 16, k=4, temperature=0)
    for prompt, out in zip(prompts, outs):
        plain, _ = autoregressive_generate(target, torch.tensor([prompt]), 16, temperature=0)
        spec, _ = speculative_generate(target, draft, torch.tensor([prompt]), 16, k=4, temperature=0)
        assert torch.equal(spec, plain) and torch.equal(out, plain[0]), prompt
