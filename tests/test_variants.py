"""The verifiers of verifiers/ and the n-gram draft, checked by the same enumeration of every branch as
tests/test_exact_enumeration.py: lossless ones give the target's joint distribution within 1e-9, lossy ones show
their exact total-variation distance, and the expected tokens per round are computed exactly, branch by branch,
not estimated."""

import pytest
import torch

import speculative
import verifiers  # noqa: F401  (registers verify="block" and the others)
from drafts.ngram import NGramDraft
from engine.fast import FastGPT
from speculative import autoregressive_generate, speculative_generate
from verifiers import block, lossy, tree
from verifiers.lossy import total_variation
from tests.conftest import TableModel, check_tree_against_full_forwards, random_gpt
from tests.test_statistics import exact_joint
from tests.test_exact_enumeration import CASES, assert_same_distribution, enumerate_branches, target_joint

PROMPT = [2, 0]


def table_pair(w_target, w_draft):  # -> (target, draft): the toy pair the enumerations here run on
    return TableModel(seed=0, block_size=w_target), TableModel(seed=1, block_size=w_draft)


def output_distribution(monkeypatch, *, n, k, sampling, w_target=8, w_draft=8, draft=None, pair=table_pair, **verify):
    """Exact distribution of the n new tokens of speculative_generate(TableModel pair) at k drafts per round, every
    branch enumerated, beside the target's. n comes before k: name them, output_distribution(mp, n=3, k=2, ...).
    A round drafts at most n - 1 tokens (the last new token is never a draft), so k > n - 1 tests that cap only.
    pair(w_target, w_draft) -> (target, draft) builds other models (tests/test_llama_exact.py: tiny Llamas); the
    target needs next_logits(context) for target_joint."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k)) or n < 2 or k < 1:
        raise ValueError(f"output_distribution(n={n!r}, k={k!r}): n (new tokens) must be an int >= 2 and k (drafts "
                         "per round) an int >= 1; with n < 2 no round drafts a token, and the check passes for any "
                         "draft or verifier. n comes before k: pass them by keyword, e.g. n=3, k=2")
    target, paired = pair(w_target, w_draft)
    draft = draft if draft is not None else paired
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), n, k=k, **sampling, **verify)[0][
        0, len(PROMPT):].tolist()
    return enumerate_branches(run, monkeypatch), target_joint(target, PROMPT, n, **sampling)


class FirstRoundDone(Exception):
    pass


def first_round_distribution(monkeypatch, k, sampling, draft=None, **verify):
    """Exact distribution of how many tokens the first round emits (kept drafts + 1): every branch of that round,
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

    return {emitted: prob for (emitted,), prob in enumerate_branches(run, monkeypatch).items()}


def first_round_tokens(monkeypatch, k, sampling, draft=None, **verify):
    """Exact expected number of tokens the first round emits."""
    return sum(n * prob for n, prob in first_round_distribution(monkeypatch, k, sampling, draft, **verify).items())


# ---- block verification ---------------------------------------------------------------------------------

@pytest.mark.parametrize("k,n,sampling,w_target,w_draft", CASES)
def test_block_verification_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, monkeypatch):
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling,
                                    w_target=w_target, w_draft=w_draft, verify="block")
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
    monkeypatch.setattr(block, "block_residual", lambda a, p, q: block.residual(p, q))
    got, want = output_distribution(monkeypatch, n=4, k=3, sampling=dict(temperature=1.0), verify="block")
    assert total_variation(got, want) > 1e-4


# ---- the n-gram (prompt lookup) draft ---------------------------------------------------------------------

@pytest.mark.parametrize("k,n,sampling,w_target,w_draft", CASES)
def test_ngram_draft_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, monkeypatch):
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling, w_target=w_target,
                                    draft=NGramDraft(3, n=2))
    assert_same_distribution(got, want)


@pytest.mark.parametrize("verify", ["tokenwise", "block"])
def test_smoothed_ngram_draft_is_exact_under_both_lossless_verifiers(verify, monkeypatch):
    got, want = output_distribution(monkeypatch, n=3, k=3, sampling=dict(temperature=1.0),
                                    draft=NGramDraft(3, n=1, smoothing=0.3),
                                    verify=verify)
    assert_same_distribution(got, want)


def test_enumeration_detects_a_broken_residual_with_the_ngram_draft(monkeypatch):
    """With a point-mass q, resampling from p instead of norm(max(0, p - q)) can return the rejected token."""
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=dict(temperature=1.0), draft=NGramDraft(3, n=2))
    assert total_variation(got, want) > 1e-3


def test_ngram_draft_proposes_what_followed_the_longest_recent_match():
    draft = NGramDraft(10, n=3)
    assert draft.propose([5, 1, 2, 5, 1]) == 2  # "5 1" was followed by 2
    assert draft.propose([1, 2, 7, 3, 2, 8, 1, 2]) == 7  # 3-gram "8 1 2" unseen; "1 2" last followed by 7
    assert draft.propose([4, 9, 4, 6, 4]) == 6  # the most recent match of "4" wins
    assert draft.propose([1, 2, 3]) == 3  # no match at all: repeat the last token (a caller without k_for)
    logits = draft(torch.tensor([[5, 1, 2, 5, 1]]))[0][0]  # (T, V)
    assert torch.equal(speculative.sampling_probs(logits[-1]), torch.eye(10, dtype=torch.float64)[2])  # point mass


def test_ngram_draft_drafts_as_far_as_the_match_goes_and_nothing_without_one():
    draft = NGramDraft(10, n=3, max_path=4)
    assert draft.path([5, 1, 2, 5, 1]) == [2, 5, 1] and draft.k_for([5, 1, 2, 5, 1], 8) == 3
    assert draft.path([7, 1, 2, 3, 4, 5, 6, 1, 2]) == [3, 4, 5, 6]  # at most max_path
    assert draft.k_for([7, 1, 2, 3, 4, 5, 6, 1, 2], 2) == 2  # at most K
    assert draft.k_for([1, 2, 3], 4) == 0  # no match: no drafts, the round is one plain target step
    h = [1, 2, 9, 1, 2, 3, 1, 2]  # "1 2" last followed by 3, 1, 2: a round of 3 drafts them one by one
    assert draft.k_for(h, 3) == 3
    assert [draft.next_logits(h + [3, 1, 2][:i]).argmax().item() for i in range(3)] == [3, 1, 2]


def test_ngram_rounds_without_a_match_are_plain_steps_and_greedy_equals_plain():
    target = random_gpt(3, vocab_size=11, block_size=64, n_layer=1)
    idx = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3]])
    spec, stats = speculative_generate(target, NGramDraft(11, n=2), idx, 30, k=4, temperature=0)
    assert spec.tolist() == autoregressive_generate(target, idx, 30, temperature=0)[0].tolist()
    Ks = [K for _, K, _ in stats.rounds]
    assert Ks[0] >= 1 and 0 in Ks and stats.drafted == sum(Ks)


# ---- several drafts at the root -----------------------------------------------------------------------------

MULTI_CASES = [  # (k, n new tokens, sampling, target block_size, draft block_size, n_drafts, replacement)
    (1, 3, dict(temperature=1.0), 8, 8, 2, True),
    (2, 3, dict(temperature=1.0), 8, 8, 2, False),
    (2, 3, dict(temperature=1.0), 8, 8, 3, False),  # 3 distinct candidates: q's whole support of 3 tokens
    (1, 3, dict(temperature=1.0), 8, 8, 4, False),  # more candidates than tokens: stops when q is used up
    (2, 3, dict(temperature=0.7, top_k=2), 8, 8, 3, True),
    (2, 3, dict(temperature=0.0), 8, 8, 2, False),
    (2, 4, dict(temperature=1.0, top_p=0.8), 4, 6, 2, False),  # the windows slide
    (2, 3, dict(temperature=1.0), 8, 3, 2, True),  # the draft's window slides inside rounds: chains, not a tree
]


@pytest.mark.parametrize("k,n,sampling,w_target,w_draft,n_drafts,replacement", MULTI_CASES)
def test_multidraft_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, n_drafts,
                                                              replacement, monkeypatch):
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling,
                                    w_target=w_target, w_draft=w_draft, verify="multidraft",
                                    n_drafts=n_drafts, replacement=replacement)
    assert_same_distribution(got, want)


def root_acceptance(monkeypatch, **verify):
    """Exact probability that the first round keeps a draft at the root (it emits >= 2 tokens), K = 2."""
    dist = first_round_distribution(monkeypatch, 2, dict(temperature=1.0), **verify)
    return sum(prob for emitted, prob in dist.items() if emitted >= 2)


@pytest.mark.parametrize("replacement", [True, False])
def test_more_candidates_at_the_root_are_accepted_more_often(replacement, monkeypatch):
    single = root_acceptance(monkeypatch)
    target, draft = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8)
    p = speculative.sampling_probs(target.next_logits(PROMPT))
    q = speculative.sampling_probs(draft.next_logits(PROMPT))
    assert abs(single - torch.minimum(p, q).sum().item()) < 1e-12  # one draft: sum_x min(p, q) = 1 - TV(p, q)
    multi = [root_acceptance(monkeypatch, verify="multidraft", n_drafts=n, replacement=replacement) for n in (1, 2, 3)]
    assert abs(multi[0] - single) < 1e-12
    assert single < multi[1] - 1e-3 and multi[1] <= multi[2] + 1e-12, (single, multi)
    if not replacement:  # 3 distinct candidates cover all 3 tokens: the root always keeps one
        assert abs(multi[2] - 1.0) < 1e-12


def test_enumeration_detects_a_root_residual_that_is_not_updated(monkeypatch):
    """Trying the second candidate against p_0 again instead of norm(max(0, p_0 - q)) is biased."""
    monkeypatch.setattr(tree, "residual", lambda p, q: p)
    got, want = output_distribution(monkeypatch, n=3, k=1, sampling=dict(temperature=1.0),
                                    verify="multidraft", n_drafts=2,
                                    replacement=True)
    assert total_variation(got, want) > 1e-3


def test_table_models_tree_attention_gives_each_paths_own_logits():
    model = TableModel(seed=0, vocab_size=5, block_size=24)
    check_tree_against_full_forwards(model, model, seed=0, vocab_size=5)


@pytest.mark.parametrize("decoder", ["eager", "fast"])
def test_multidraft_on_real_gpts_gives_the_target_exactly(decoder, monkeypatch):
    """The same enumeration through model.py's (or fast.py's) tree attention and cache compaction: the window of
    8 slides at position 8, and 3 branches of 2 hold more tokens than the window has positions. Within 1e-5:
    float32 logits of a tree forward differ from a full forward's by rounding."""
    target, draft = random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
    prompt, sampling = [1, 4, 2, 0, 3, 1], dict(temperature=1.0)
    want = exact_joint(target, prompt, 3, **sampling)  # from full, uncached forwards
    if decoder == "fast":
        target, draft = FastGPT(target), FastGPT(draft)
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), 3, k=2, verify="multidraft",
                                       n_drafts=3, **sampling)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), want, tol=1e-5)


def test_multidraft_scores_all_branches_in_one_target_forward():
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    _, stats = speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 30, k=3, verify="multidraft",
                                    n_drafts=3, replacement=True, generator=torch.Generator().manual_seed(0))
    assert stats.target_calls == len(stats.rounds), "one target forward per round, however many branches"
    # the draft: one forward per depth for all 3 branches, or (where its window of 12 slides inside the round)
    # its root step, then k-1 steps for each branch
    one_window = lambda t, K: speculative.window_end(t, 12) >= t + K - 1
    assert stats.draft_calls == sum(K if one_window(t, K) else 1 + 3 * (K - 1) for t, K, _ in stats.rounds if K > 0)
    assert any(not one_window(t, K) for t, K, _ in stats.rounds if K > 0), "the test should cover both paths"


# ---- the lossy contrasts: the enumeration measures their bias ----------------------------------------------

def test_lenience_one_is_exact_and_lenience_below_one_is_biased(monkeypatch):
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=dict(temperature=1.0),
                                    verify="lenient", lenience=1.0)
    assert_same_distribution(got, want)
    tv = [total_variation(*output_distribution(monkeypatch, n=3, k=2, sampling=dict(temperature=1.0), verify="lenient",
                                               lenience=l)) for l in (0.8, 0.5, 0.2)]
    assert 1e-3 < tv[0] < tv[1] < tv[2], f"TV at lenience 0.8, 0.5, 0.2: {tv}"  # more lenient, more biased


def test_typical_acceptance_is_biased_when_sampling_and_exact_when_greedy(monkeypatch):
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=dict(temperature=1.0), verify="typical")
    assert total_variation(got, want) > 1e-3
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=dict(temperature=0.0), verify="typical")
    assert_same_distribution(got, want)


def test_typical_threshold_is_min_of_epsilon_and_delta_times_exp_minus_entropy():
    uniform = torch.full((4,), 0.25, dtype=torch.float64)  # H = log 4: delta exp(-H) = delta / 4
    assert abs(lossy.typical_threshold(uniform, 0.09, 0.3) - 0.075) < 1e-12
    assert abs(lossy.typical_threshold(uniform, 0.05, 0.3) - 0.05) < 1e-12
    assert lossy.typical_threshold(torch.tensor([1.0, 0.0]), 0.09, 0.3) == 0.09  # H = 0, and 0 log 0 = 0


# ---- bad arguments ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(verify="blok"), "unknown verify='blok'"),
    (dict(verify="block", lenience=0.5), "takes no parameter lenience"),
    (dict(verify="lenient", lenience=0.0), r"lenience must be in \(0, 1\]"),
    (dict(verify="lenient", lenience=1.5), r"lenience must be in \(0, 1\]"),
    (dict(verify="typical", epsilon=0.0), "typical acceptance needs 0 < epsilon <= 1"),
    (dict(verify="multidraft", n_drafts=0), "n_drafts .* must be an int >= 1"),
    (dict(verify="multidraft", k="auto"), "verify='multidraft': k='auto' chooses K for token-wise rounds"),
    (dict(draft=lambda: NGramDraft(3, n=0)), "n-gram length n must be an int >= 1"),
    (dict(draft=lambda: NGramDraft(3, n=2, smoothing=1.0)), "smoothing must be in"),
])
def test_bad_verify_arguments_are_refused_clearly(kwargs, message):
    target, make_draft = TableModel(seed=0), kwargs.pop("draft", lambda: TableModel(seed=1))
    with pytest.raises(ValueError, match=message):
        speculative_generate(target, make_draft(), torch.tensor([PROMPT]), 3, **kwargs)
