"""Statistics on real (small, random) GPTs: what the enumeration proves for toy tables must hold for the
real model with its real KV cache.

Thresholds come from the sample size. Chi-square critical values use the Wilson-Hilferty approximation
(accurate to about 1% for the degrees of freedom here); each check's false-alarm rate is stated at its test.
"""

import itertools
import math
from statistics import NormalDist

import pytest
import torch

import speculative
from speculative import context_start, sampling_probs, speculative_generate
from tests.conftest import random_gpt


def chi2_critical(df, false_alarm):
    z = NormalDist().inv_cdf(1 - false_alarm)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@torch.no_grad()
def next_probs(model, seq, **sampling):  # exact p(. | x[s(t):t]) from a full, uncached forward
    t = len(seq)
    window = torch.tensor([seq[context_start(t, model.config.block_size):t]])
    return sampling_probs(model(window)[0][0, -1].double(), **sampling)


def exact_joint(model, prompt, n, **sampling):
    """{continuation: probability} for every n-token continuation, by walking the tree of prefixes."""
    joint = {(): 1.0}
    for _ in range(n):
        joint = {cont + (x,): prob * px for cont, prob in joint.items()
                 for x, px in enumerate(next_probs(model, list(prompt) + list(cont), **sampling).tolist())}
    return joint


def chi_square(counts, joint, N):
    """Pearson's statistic; cells expected below 5 are pooled into one. -> (statistic, degrees of freedom)."""
    big = [c for c in joint if joint[c] * N >= 5]
    stat = sum((counts.get(c, 0) - N * joint[c]) ** 2 / (N * joint[c]) for c in big)
    small_exp = N * (1 - sum(joint[c] for c in big))
    small_obs = N - sum(counts.get(c, 0) for c in big)
    if small_exp >= 5:
        stat += (small_obs - small_exp) ** 2 / small_exp
        return stat, len(big)
    return stat, len(big) - 1


def sample_continuations(target, draft, prompt, n, N, seed, **kw):
    g = torch.Generator().manual_seed(seed)
    counts = {}
    for _ in range(N):
        out, _ = speculative_generate(target, draft, torch.tensor([prompt]), n, generator=g, **kw)
        key = tuple(out[0, len(prompt):].tolist())
        counts[key] = counts.get(key, 0) + 1
    return counts


RUNS = 24  # long runs for the acceptance checks
N = 2000  # samples; block_size 8 and a prompt of 6 make the 3 new tokens cross the window at position 8
PROMPT = [1, 4, 2, 0, 3, 1]


def test_speculative_samples_pass_chi_square_against_exact_target(gpt_pair):
    """False-alarm rate 1e-3 (one chi-square test at its 0.999 quantile)."""
    target, draft = gpt_pair
    joint = exact_joint(target, PROMPT, 3)
    counts = sample_continuations(target, draft, PROMPT, 3, N, seed=0, k=2)
    stat, df = chi_square(counts, joint, N)
    assert stat < chi2_critical(df, 1e-3), f"chi-square {stat:.1f} with {df} dof: not the target's distribution"


def test_chi_square_rejects_resampling_from_p_instead_of_the_residual(gpt_pair, monkeypatch):
    """The same test with the classic bug (resample from p, not norm(max(0, p - q))) must fail."""
    target, draft = gpt_pair
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    joint = exact_joint(target, PROMPT, 3)
    counts = sample_continuations(target, draft, PROMPT, 3, N, seed=0, k=2)
    stat, df = chi_square(counts, joint, N)
    assert stat > chi2_critical(df, 1e-3), f"chi-square {stat:.1f} with {df} dof: the broken variant went unnoticed"


def expected_first_acceptance(target, draft, tokens, rounds):
    """Sum over rounds of alpha = sum_x min(p, q) at each round's first draft position, and of its variance."""
    total, var = 0.0, 0.0
    for t, drafted, _ in rounds:
        if drafted:
            alpha = torch.minimum(next_probs(target, tokens[:t]), next_probs(draft, tokens[:t])).sum().item()
            total, var = total + alpha, var + alpha * (1 - alpha)
    return total, var


def first_acceptance_z(target, draft, seed):
    g = torch.Generator().manual_seed(seed)
    expected = observed = var = 0.0
    for _ in range(RUNS):  # runs of 120 tokens: each crosses the 8-token window many times
        out, stats = speculative_generate(target, draft, torch.tensor([PROMPT]), 120, k=3, generator=g)
        e, v = expected_first_acceptance(target, draft, out[0].tolist(), stats.rounds)
        expected, var = expected + e, var + v
        observed += sum(1 for _, drafted, kept in stats.rounds if drafted and kept >= 1)
    return (observed - expected) / math.sqrt(var)


def test_first_position_acceptance_matches_sum_of_min_p_q(gpt_pair):
    """Each round accepts its first draft with probability alpha = sum_x min(p(x), q(x)) for that context, so
    accepted-first-drafts minus the summed alphas is a martingale: |z| < 4.4 has false-alarm rate 1e-5.
    A draft-cache bug keeps the output exact (the target corrects it) but conditions q on the wrong tokens."""
    target, draft = gpt_pair
    z = first_acceptance_z(target, draft, seed=0)
    assert abs(z) < 4.4, f"first-position acceptance is {z:.1f} standard deviations off sum(min(p, q))"


def test_acceptance_check_catches_a_draft_reading_the_wrong_row(gpt_pair):
    """A draft-side bug: when several tokens are fed at once (the prompt, or the last draft plus the bonus
    token), q is read from the FIRST row of the cached forward instead of the last. Samples stay exact (the
    target corrects every mistake) but q belongs to the wrong context; the check above must notice."""
    target, draft = gpt_pair
    forward = draft.forward

    def first_row_forward(idx, targets=None, use_cache=False):
        logits, _ = forward(idx, use_cache=use_cache)  # the uncached forward (expected alphas) stays right
        return (logits[:, :1].expand_as(logits) if use_cache else logits), None

    draft.forward = first_row_forward
    assert abs(first_acceptance_z(target, draft, seed=0)) > 4.4
