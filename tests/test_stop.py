"""stop=[[ids], ...] in every sampler: generation ends right after the first stop sequence among the new tokens.

The reference is computed without the samplers: the target's joint of n tokens, each sequence cut right after its
first stop sequence, the probabilities of equal cuts added up. Plain sampling with the same stop rule, speculative
sampling (its rounds keep drafts past a stop, which must be dropped) and the batched samplers, run down every
branch of their randomness, must all give exactly that distribution.
"""

from collections import defaultdict

import pytest
import torch

import verifiers  # noqa: F401  (registers verify="block" and the others)
from engine.batched import autoregressive_generate_batch, speculative_generate_batch
from speculative import autoregressive_generate, speculative_generate, stop_end
from tests.conftest import TableModel
from tests.test_batched import patch_batched_draws, product
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint

PROMPT = [2, 0]


def cut_at_stop(joint, stop):  # {n-token tuple: prob} -> {tuple cut right after its first stop sequence: prob}
    out = defaultdict(float)
    for seq, prob in joint.items():  # the first end e at which some stop sequence is complete
        end = next((e for e in range(1, len(seq) + 1) if any(list(seq[e - len(s):e]) == s for s in stop if len(s) <= e)),
                   len(seq))
        out[seq[:end]] += prob
    return dict(out)


def test_cut_at_stop_cuts_after_the_first_complete_sequence():
    assert cut_at_stop({(1, 0, 0, 2): 1.0}, [[0, 0]]) == {(1, 0, 0): 1.0}
    assert cut_at_stop({(0, 1, 1, 0): 1.0}, [[1, 1], [0]]) == {(0,): 1.0}  # [0] completes first
    assert cut_at_stop({(2, 1, 1): 1.0}, [[0, 2, 1], [1, 1]]) == {(2, 1, 1): 1.0}
    assert stop_end([5, 0, 0, 1, 0, 0], 1, [[0, 0]], 1) == 3
    assert stop_end([0, 0, 1], 1, [[0, 0]], 1) is None  # the prompt's 0 does not count


STOPS = [[[1]], [[0, 2]], [[2, 2], [1, 0]]]  # one token; two tokens a round can split; two sequences


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("k,sampling", [(1, dict(temperature=1.0)), (3, dict(temperature=1.0)),
                                        (2, dict(temperature=0.6, top_k=2)), (2, dict(temperature=0.0))])
def test_speculative_sampling_with_a_stop_is_plain_sampling_with_the_same_stop(stop, k, sampling, monkeypatch):
    target, draft, n = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8), 4
    want = cut_at_stop(target_joint(target, PROMPT, n, **sampling), stop)
    idx = torch.tensor([PROMPT])
    spec = lambda: speculative_generate(target, draft, idx, n, k=k, stop=stop, **sampling)[0][0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(spec, monkeypatch), want)
    plain = lambda: autoregressive_generate(target, idx, n, stop=stop, **sampling)[0][0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(plain, monkeypatch), want)


@pytest.mark.parametrize("verify", ["block", "multidraft"])
def test_the_stop_rule_holds_for_the_other_lossless_verifiers(verify, monkeypatch):
    target, draft, n, stop = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8), 3, [[0, 2]]
    want = cut_at_stop(target_joint(target, PROMPT, n), stop)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), n, k=2, stop=stop, verify=verify)[0][
        0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), want)


def test_enumeration_detects_keeping_the_tokens_after_the_stop(monkeypatch):
    """The check above can fail: a sampler that stops after the round but keeps what the round drew past the
    stop gives another distribution."""
    import speculative
    target, draft, n, stop = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8), 4, [[1]]
    real = speculative.stop_end
    monkeypatch.setattr(speculative, "stop_end", lambda tokens, *a: len(tokens) if real(tokens, *a) else None)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), n, k=3, stop=stop)[0][
        0, len(PROMPT):].tolist()
    got = enumerate_branches(run, monkeypatch)
    want = cut_at_stop(target_joint(target, PROMPT, n), stop)
    assert max(abs(got.get(s, 0) - want.get(s, 0)) for s in set(got) | set(want)) > 1e-3


@pytest.mark.parametrize("spec", [True, False])
def test_batched_rows_stop_each_at_their_own_stop(spec, monkeypatch):
    target, draft = TableModel(seed=0, block_size=4), TableModel(seed=1, block_size=4)
    prompts, n, stop = [[2, 0, 1], [1]], 3, [[0, 2], [1]]  # row 0 slides its window at t = 4

    def run():
        outs, stats = (speculative_generate_batch(target, draft, prompts, n, k=1, stop=stop) if spec else
                       autoregressive_generate_batch(target, prompts, n, stop=stop))
        assert stats.new_tokens == sum(len(o) - len(p) for o, p in zip(outs, prompts))
        return tuple(tuple(out[len(p):].tolist()) for out, p in zip(outs, prompts))

    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    want = product(*(cut_at_stop(target_joint(target, p, n), stop) for p in prompts))
    assert_same_distribution(got, want)


def test_outputs_end_at_the_stop_and_stats_count_what_was_kept():
    target, draft = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8)
    g = torch.Generator().manual_seed(0)
    out, stats = speculative_generate(target, draft, torch.tensor([PROMPT]), 40, k=4, stop=[[1, 1]], generator=g)
    new = out[0, len(PROMPT):].tolist()
    assert new[-2:] == [1, 1] and stop_end(new, 0, [[1, 1]], 0) == len(new) and stats.new_tokens == len(new) < 40


@pytest.mark.parametrize("stop,message", [
    ([1], "stop must be a list of non-empty lists"), ([[]], "stop must be a list of non-empty lists"),
    ([[7]], r"token ids in \[0, 3\)"), ("\n", "stop must be a list"),
])
def test_bad_stop_sequences_are_refused_clearly(stop, message):
    target, draft = TableModel(seed=0), TableModel(seed=1)
    for run in (lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), 3, stop=stop),
                lambda: autoregressive_generate(target, torch.tensor([PROMPT]), 3, stop=stop),
                lambda: speculative_generate_batch(target, draft, [PROMPT], 3, stop=stop)):
        with pytest.raises(ValueError, match=message):
            run()
