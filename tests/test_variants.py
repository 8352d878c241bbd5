"""The variants of variants.py, checked by the same enumeration of every branch as tests/test_exact_enumeration.py:
lossless ones give the target's joint distribution within 1e-9, lossy ones show their exact total-variation
distance, and the expected tokens per round are computed exactly, branch by branch, not estimated."""

import pytest
import torch

import variants
from speculative import speculative_generate
from tests.conftest import TableModel
from tests.test_exact_enumeration import CASES, assert_same_distribution, enumerate_branches, target_joint

PROMPT = [2, 0]


def output_distribution(monkeypatch, n, k, sampling, w_target=8, w_draft=8, draft=None, **verify):
    """Exact distribution of the n new tokens of speculative_generate(TableModel pair), every branch enumerated."""
    target = TableModel(seed=0, block_size=w_target)
    draft = draft if draft is not None else TableModel(seed=1, block_size=w_draft)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), n, k=k, **sampling, **verify)[0][
        0, len(PROMPT):].tolist()
    return enumerate_branches(run, monkeypatch), target_joint(target, PROMPT, n, **sampling)


class FirstRoundDone(Exception):
    pass


def first_round_tokens(monkeypatch, k, sampling, draft=None, **verify):
    """Exact expected number of tokens the first round emits (kept drafts + 1): every branch of that round,
    each weighted by its probability. The run stops after the round (stream raises), so later rounds do not
    multiply the branches."""
    target, draft = TableModel(seed=0, block_size=8), draft if draft is not None else TableModel(seed=1, block_size=8)

    def stop(ids):
        raise FirstRoundDone(len(ids))

    def run():
        try:
            speculative_generate(target, draft, torch.tensor([PROMPT]), k + 1, k=k, stream=stop, **sampling, **verify)
        except FirstRoundDone as done:
            return done.args
        raise AssertionError("speculative_generate never streamed a round")

    return sum(prob * emitted for (emitted,), prob in enumerate_branches(run, monkeypatch).items())


def total_variation(got, want):
    return 0.5 * sum(abs(got.get(s, 0.0) - want.get(s, 0.0)) for s in set(got) | set(want))


# ---- block verification ---------------------------------------------------------------------------------

@pytest.mark.parametrize("k,n,sampling,w_target,w_draft", CASES)
def test_block_verification_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, monkeypatch):
    got, want = output_distribution(monkeypatch, n, k, sampling, w_target, w_draft, verify="block")
    assert_same_distribution(got, want)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.7, top_k=2)])
def test_block_verification_emits_at_least_as_many_tokens_per_round_as_tokenwise(k, sampling, monkeypatch):
    block = first_round_tokens(monkeypatch, k, sampling, verify="block")
    tokenwise = first_round_tokens(monkeypatch, k, sampling)
    assert block >= tokenwise - 1e-12, f"K={k}: block {block:.6f} < token-wise {tokenwise:.6f} tokens per round"
    if k == 1:  # one draft: the block is the token, the two verifiers are the same algorithm
        assert abs(block - tokenwise) < 1e-12


def test_block_verification_gains_strictly_on_some_pair(monkeypatch):
    """Not a vacuous >=: on the toy pair at K = 3 the block verifier emits strictly more tokens per round."""
    block = first_round_tokens(monkeypatch, 3, dict(temperature=1.0), verify="block")
    tokenwise = first_round_tokens(monkeypatch, 3, dict(temperature=1.0))
    assert block > tokenwise + 1e-3, (block, tokenwise)


def test_enumeration_detects_a_block_residual_without_the_weight(monkeypatch):
    """The check above can fail: dropping a_tau from norm(max(0, a_tau p - q)) changes the distribution. (At K = 2
    on this pair every cut with a_tau < 1 has R = 0, so the bug needs K = 3 to show; 1e-4 is far above 1e-9.)"""
    monkeypatch.setattr(variants, "block_residual", lambda a, p, q: variants.residual(p, q))
    got, want = output_distribution(monkeypatch, 4, 3, dict(temperature=1.0), verify="block")
    assert total_variation(got, want) > 1e-4


# ---- bad arguments ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(verify="blok"), "unknown verify='blok'"),
    (dict(verify="block", lenience=0.5), "takes no parameter lenience"),
])
def test_bad_verify_arguments_are_refused_clearly(kwargs, message):
    target, draft = TableModel(seed=0), TableModel(seed=1)
    with pytest.raises(ValueError, match=message):
        speculative_generate(target, draft, torch.tensor([PROMPT]), 3, **kwargs)
