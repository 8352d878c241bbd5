"""Batched sampling (engine/batched.py): every row exact, rows independent, the cache per row right, errors clear.

The enumeration replaces engine/batched.py's two draws, sample_rows (one token per row) and kept_counts (how many drafts
each row keeps), by a scripted chooser that follows one branch per run, so the real batched control flow (rows
of different lengths, per-row caches, windows sliding in one row only, finished rows leaving) runs down every
branch. The joint of both rows must equal the product of the target's distributions of each prompt alone.
"""

import math
from collections import Counter

import pytest
import torch

from engine import batched
from engine.batched import autoregressive_generate_batch, kept_counts, sample_rows, speculative_generate_batch
from engine.fast import FastGPT
from model import GPT
from speculative import SamplingError, autoregressive_generate
from tests.conftest import TableModel, check_row_cache_against_full_forwards, random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_statistics import chi2_critical, chi_square, exact_joint


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_cache_logits_equal_uncached_after_ragged_appends_and_crops(seed):
    model = random_gpt(seed, vocab_size=11, block_size=24)
    check_row_cache_against_full_forwards(model, model, seed)


def patch_batched_draws(monkeypatch, choose):
    """sample_rows: one choice per row among its tokens of positive probability. kept_counts: per row, the number
    kept i <= limit, with probability a_0 .. a_{i-1} (1 - a_i) (all coins up to i pass, coin i fails)."""
    def rows(probs, generator=None):
        return torch.tensor([choose([(x, p) for x, p in enumerate(row) if p > 0]) for row in probs.tolist()])

    def kept(accept, limits, generator=None):
        out = []
        for a, limit in zip(accept.tolist(), limits.tolist()):
            options, passed = [], 1.0
            for i in range(limit):
                options.append((i, passed * (1 - a[i])))
                passed *= a[i]
            options.append((limit, passed))
            out.append(choose([(i, w) for i, w in options if w > 0]))
        return torch.tensor(out)

    monkeypatch.setattr(batched, "sample_rows", rows)
    monkeypatch.setattr(batched, "kept_counts", kept)


def product(*joints):  # independent rows: {(row 0's tokens, row 1's tokens): probability}
    out = {(): 1.0}
    for joint in joints:
        out = {key + (seq,): prob * p for key, prob in out.items() for seq, p in joint.items()}
    return out


CASES = [  # (prompts, k, n new tokens, sampling, target block_size, draft block_size)
    ([[2, 0, 1], [1]], 3, 2, dict(temperature=1.0), 4, 4),  # K = 3 > the 1 draft a round can use; row 0 slides
    ([[2, 0, 1], [1, 0, 2, 2, 1]], 2, 2, dict(temperature=1.0), 4, 4),  # both rows slide, at t=4 and t=6
    ([[2, 0, 1], [1]], 2, 2, dict(temperature=0.7, top_k=2), 4, 6),  # zeros in p and q; windows differ
    ([[2, 0, 1], [1]], 2, 3, dict(temperature=0.0), 4, 4),  # greedy
]


@pytest.mark.parametrize("prompts,k,n,sampling,w_target,w_draft", CASES)
def test_batched_speculative_joint_of_both_rows_is_exact(prompts, k, n, sampling, w_target, w_draft, monkeypatch):
    target, draft = TableModel(seed=0, block_size=w_target), TableModel(seed=1, block_size=w_draft)

    def run():
        outs, _ = speculative_generate_batch(target, draft, prompts, n, k=k, **sampling)
        return tuple(tuple(out[len(p):].tolist()) for out, p in zip(outs, prompts))

    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    want = product(*(target_joint(target, p, n, **sampling) for p in prompts))
    assert_same_distribution({key: prob for key, prob in got.items()}, want)


def test_batched_plain_joint_is_exact(monkeypatch):
    target = TableModel(seed=0, block_size=4)
    prompts = [[1, 2, 0], [2]]  # row 0 slides at t=4, row 1 never

    def run():
        outs, _ = autoregressive_generate_batch(target, prompts, 3)
        return tuple(tuple(out[len(p):].tolist()) for out, p in zip(outs, prompts))

    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    assert_same_distribution(got, product(*(target_joint(target, p, 3) for p in prompts)))


def test_enumeration_detects_a_broken_batched_residual(monkeypatch):
    """The check above can fail: resampling from p instead of norm(max(0, p - q)) changes the joint."""
    target, draft = TableModel(seed=0, block_size=4), TableModel(seed=1, block_size=4)
    monkeypatch.setattr(batched, "residual_rows", lambda p, q: p)
    prompts = [[2, 0, 1], [1]]
    run = lambda: tuple(tuple(o[len(p):].tolist()) for o, p in zip(
        speculative_generate_batch(target, draft, prompts, 2, k=2)[0], prompts))
    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    want = product(*(target_joint(target, p, 2) for p in prompts))
    assert max(abs(got.get(s, 0) - want.get(s, 0)) for s in want) > 1e-3


# ---- the draws themselves (the enumeration replaces them, so they are checked here) --------------------------

def test_sample_rows_draws_each_row_from_its_own_distribution():
    """Chi-square per row, 20,000 draws each; false-alarm rate 1e-4 per row."""
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.05, 0.05, 0.1, 0.8]])
    g, N = torch.Generator().manual_seed(0), 20_000
    draws = sample_rows(probs[None].expand(N, -1, -1).reshape(-1, 4), g).view(N, 2)
    for b in range(2):
        counts = Counter(draws[:, b].tolist())
        assert counts[3] == 0 or probs[b, 3] > 0, "a token of probability 0 was drawn"
        joint = {x: p for x, p in enumerate(probs[b].tolist()) if p > 0}
        stat, df = chi_square(counts, joint, N)
        assert stat < chi2_critical(df, 1e-4), (b, counts)


def test_kept_counts_follow_the_first_failed_coin():
    """P(kept = i) = a_0 .. a_{i-1} (1 - a_i) for i < limit, and a_0 .. a_{limit-1} for the limit: chi-square on
    40,000 rows; false-alarm rate 1e-4. A NaN probability stops the row there."""
    a, N = torch.tensor([0.9, 0.5, 0.7]), 40_000
    g = torch.Generator().manual_seed(0)
    kept = kept_counts(a.expand(N, 3), torch.full((N,), 2), g)
    want = {0: 0.1, 1: 0.9 * 0.5, 2: 0.9 * 0.5}
    stat, df = chi_square(Counter(kept.tolist()), want, N)
    assert stat < chi2_critical(df, 1e-4) and kept.max() <= 2
    assert kept_counts(torch.tensor([[1.0, float("nan"), 1.0]]), torch.tensor([3])).item() == 1


# ---- real (tiny, random) GPTs -------------------------------------------------------------------------------

@pytest.mark.parametrize("k,sampling", [(3, dict(temperature=1.0)), ("auto", dict(temperature=0.8, top_p=0.9))])
def test_batched_rows_match_the_exact_target_distribution_chi_square(k, sampling):
    """Three prompts of different lengths, each repeated 40 times in one batch of 120 rows, 25 batches: 1,000
    samples of 3 tokens per prompt. Chi-square per prompt against the exact joint; false-alarm rate 1e-3 each."""
    target, draft = random_gpt(0, block_size=6), random_gpt(1, n_layer=1, n_embd=8, n_head=1, block_size=6)
    prompts, n, reps, calls = [[1, 2, 3, 4], [0], [2, 2]], 3, 40, 25
    g = torch.Generator().manual_seed(1)
    counts = [Counter() for _ in prompts]
    for _ in range(calls):
        outs, _ = speculative_generate_batch(target, draft, prompts * reps, n, k=k, generator=g, **sampling)
        for i, out in enumerate(outs):
            counts[i % len(prompts)][tuple(out[-n:].tolist())] += 1
    for prompt, count in zip(prompts, counts):
        joint = exact_joint(target, prompt, n, **sampling)
        stat, df = chi_square(count, joint, reps * calls)
        assert stat < chi2_critical(df, 1e-3), f"prompt {prompt}: chi2 {stat:.1f} with {df} df"


def test_batched_chi_square_fails_when_the_residual_is_p(monkeypatch):
    """The statistical check can fail: with the residual replaced by p, a draft that differs from the target
    shows through. Same test as above, one prompt, 1,000 samples; the statistic must exceed the 1e-3 threshold."""
    monkeypatch.setattr(batched, "residual_rows", lambda p, q: p)
    target, draft = random_gpt(0, block_size=6), random_gpt(1, n_layer=1, n_embd=8, n_head=1, block_size=6)
    prompt, n, g = [1, 2, 3, 4], 3, torch.Generator().manual_seed(1)
    count = Counter()
    for _ in range(10):
        outs, _ = speculative_generate_batch(target, draft, [prompt] * 100, n, k=3, generator=g)
        count.update(tuple(out[-n:].tolist()) for out in outs)
    stat, df = chi_square(count, exact_joint(target, prompt, n), 1000)
    assert stat > chi2_critical(df, 1e-3)


@pytest.mark.parametrize("k", [1, 4, 7, "auto"])
def test_greedy_batched_rows_equal_plain_greedy_of_each_prompt_alone(k):
    """block_size 8 and 40 new tokens: every row slides its window several times, at different positions."""
    target, draft = random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
    prompts = [[1, 2, 3], [4], [0, 1, 2, 3, 4, 0, 1], [3, 3]]
    outs, _ = speculative_generate_batch(target, draft, prompts, 40, k=k, temperature=0)
    plain, _ = autoregressive_generate_batch(target, prompts, 40, temperature=0)
    for out, out_plain, prompt in zip(outs, plain, prompts):
        alone = autoregressive_generate(target, torch.tensor([prompt]), 40, temperature=0)[0][0]
        assert torch.equal(out, alone) and torch.equal(out_plain, alone), prompt


def test_outputs_are_each_prompt_then_exactly_max_new_tokens():
    target, draft = random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
    prompts = [torch.tensor([1, 2, 3]), [4]]
    outs, stats = speculative_generate_batch(target, draft, prompts, 13, k=5, generator=torch.Generator().manual_seed(0))
    assert [len(o) for o in outs] == [16, 14] and outs[0][:3].tolist() == [1, 2, 3] and outs[1][0] == 4
    assert stats.new_tokens == 26 and stats.rows == 2
    outs, _ = speculative_generate_batch(target, draft, prompts, 0)
    assert [o.tolist() for o in outs] == [[1, 2, 3], [4]]


def test_a_round_reads_the_host_once(monkeypatch):
    """Every host read (item, tolist, bool, int, float) during the call is counted: one per round, plus one per
    re-read of a draft window that slid inside a round (none here: block_size 64 > 4 + 40 tokens)."""
    target, draft = random_gpt(0, block_size=64), random_gpt(1, n_layer=1, n_embd=8, n_head=1, block_size=64)
    reads = Counter()
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, _name=name, **kw):
            reads[_name] += 1
            return _original(self, *a, **kw)
        monkeypatch.setattr(torch.Tensor, name, counted)
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 2, 3, 4], [0], [2, 2]]
    reads.clear()
    _, stats = speculative_generate_batch(target, draft, prompts, 40, k=4, generator=g)
    rounds = len(stats.target_times)
    assert sum(reads.values()) <= rounds + 3, f"{dict(reads)} host reads in {rounds} rounds"  # +3: input checks
    reads.clear()
    _, stats = autoregressive_generate_batch(target, prompts, 40, generator=g)
    assert sum(reads.values()) <= 40 + 3, f"{dict(reads)} host reads in 40 steps"


# ---- bad input: clear errors, nothing lost ------------------------------------------------------------------

@pytest.mark.parametrize("prompts,match", [
    ([], "non-empty list"),
    (torch.tensor([[1, 2]]), "non-empty list"),
    ([[1, 2], []], r"prompts\[1\]: the prompt is empty"),
    ([[1, 2], [7]], r"prompts\[1\]: token ids must lie in \[0, 5\)"),
    ([[1, 2], [-1]], r"prompts\[1\]: token ids must lie"),
    ([[1.5]], r"prompts\[0\]: each prompt must be"),
    ([torch.tensor([[1, 2]])], r"prompts\[0\]: a prompt tensor must be a 1-D LongTensor"),
    ([torch.tensor([1, 2], device="meta")], r"prompts\[0\]: idx is on meta but the target is on cpu"),
])
def test_bad_prompts_get_clear_errors(prompts, match):
    target, draft = random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
    with pytest.raises(ValueError, match=match):
        speculative_generate_batch(target, draft, prompts, 5)
    with pytest.raises(ValueError, match=match):
        autoregressive_generate_batch(target, prompts, 5)


def test_mismatched_vocabularies_and_bad_k_get_clear_errors():
    target, draft = random_gpt(0), random_gpt(1, vocab_size=7, n_layer=1, n_embd=8, n_head=1)
    with pytest.raises(ValueError, match="the target \\(FastGPT\\) has no per-row KV cache"):
        autoregressive_generate_batch(FastGPT(target), [[1]], 5)
    with pytest.raises(ValueError, match="vocab sizes differ"):
        speculative_generate_batch(target, draft, [[1]], 5)
    with pytest.raises(ValueError, match="k \\(draft tokens per round\\) must be"):
        speculative_generate_batch(target, random_gpt(1), [[1]], 5, k=0)


class PoisonedGPT(GPT):
    """A GPT whose logits are NaN in every row whose context contains token 4 (one row of a batch goes bad)."""

    def forward(self, idx, *args, rows=None, **kw):
        logits, loss = super().forward(idx, *args, rows=rows, **kw)
        if kw.get("use_cache") and self.row_lengths is not None:
            which = torch.arange(idx.size(0)) if rows is None else rows
            for i, r in enumerate(which.tolist()):
                if 4 in self.seen.setdefault(r, set()) | set(idx[i].tolist()):
                    logits[i] = float("nan")
                self.seen[r] |= set(idx[i].tolist())
        return logits, loss

    def reset_row_cache(self, batch_size, room=0):
        self.seen = {}
        super().reset_row_cache(batch_size, room)


@pytest.mark.parametrize("spec", [True, False])
def test_nan_logits_in_one_row_name_the_row_and_keep_every_rows_tokens(spec):
    target = random_gpt(0)
    poisoned = PoisonedGPT(target.config)
    poisoned.load_state_dict(target.state_dict())
    poisoned.eval()
    prompts = [[1, 2, 3], [0, 4], [2]]
    g = torch.Generator().manual_seed(0)
    with pytest.raises(SamplingError, match="row 1: cannot sample the token at position 2 from the target: its "
                                            "logits hold NaN") as err:
        if spec:
            speculative_generate_batch(poisoned, random_gpt(1, n_layer=1, n_embd=8, n_head=1), prompts, 10, k=3,
                                       generator=g)
        else:
            autoregressive_generate_batch(poisoned, prompts, 10, generator=g)
    assert err.value.row == 1 and err.value.model == "target"
    assert [row[:len(p)] for row, p in zip(err.value.tokens, prompts)] == prompts  # every row, prompts included
    assert err.value.tokens[1] == [0, 4]  # row 1 made nothing; the others keep what they made


# ---- a seeded call repeats ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.8, top_k=4, top_p=0.9)],
                         ids=["T=1", "top_k-top_p"])
def test_a_seeded_batched_run_repeats_exactly_and_another_seed_differs(sampling):
    """All the randomness goes through the generator: the same seed gives the same rows and the same counts, even
    with torch's global random state moved in between; another seed gives other rows. Ragged prompts, 24 tokens
    and block_size 8: the rows slide their windows at different rounds."""
    target = random_gpt(0, vocab_size=11, sharpness=2.0)
    draft = random_gpt(1, vocab_size=11, n_layer=1, n_embd=8, n_head=1, sharpness=2.0)
    prompts = [[1, 2, 3], [4], [0, 1, 2, 3, 4, 0, 1], [3, 3]]

    def run(seed, global_seed):
        torch.manual_seed(global_seed)  # must not matter
        outs, stats = speculative_generate_batch(target, draft, prompts, 24, k=3, **sampling,
                                                 generator=torch.Generator().manual_seed(seed))
        return [out.tolist() for out in outs], (stats.new_tokens, stats.drafted, stats.accepted, stats.rounds)

    first, again, other = run(0, global_seed=1), run(0, global_seed=2), run(1, global_seed=1)
    assert first == again, "the same seed must give the same rows and the same counts"
    assert first[0] != other[0], "another seed should give other rows"
    assert first[1][1] > first[1][2], "some drafts should have been rejected, so that residual draws ran"
