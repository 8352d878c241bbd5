"""Exactness by enumeration: run the project's own speculative_generate down EVERY branch of its randomness
(each draft token, each accept/reject coin, each resampled or bonus token), add up the probability of every
output sequence, and compare with the target's joint distribution computed directly. Equal within 1e-9.

The random draws in speculative.py go through two functions, `sample(probs)` and `coin(prob)`. Here they are
replaced by a scripted chooser that follows one branch per run and weighs it by the probability the real code
passed in, so the enumeration exercises the real control flow, caches, window handling and acceptance math.
"""

import itertools
from collections import defaultdict

import pytest
import torch

import speculative
from choose_k import AutoK
from speculative import autoregressive_generate, context_start, sampling_probs, speculative_generate
from tests.conftest import TableModel


def enumerate_branches(run, monkeypatch, patch=None):
    """-> {output tuple: total probability} over every branch of run()'s calls to sample() and coin().
    patch(monkeypatch, choose) replaces other draws instead (tests/test_batched.py: the batched ones)."""
    results = defaultdict(float)
    stack = [[]]  # scripts: the option index to take at each decision, then option 0 beyond the script
    while stack:
        script, taken, n_options, weight = stack.pop(), [], [], [1.0]

        def choose(options):  # options: [(value, probability > 0)]
            i = script[len(taken)] if len(taken) < len(script) else 0
            taken.append(i)
            n_options.append(len(options))
            weight[0] *= options[i][1]
            return options[i][0]

        (patch or patch_sample_and_coin)(monkeypatch, choose)
        results[tuple(run())] += weight[0]
        for d in range(len(script), len(taken)):  # every alternative at every new decision is a new branch
            stack.extend(taken[:d] + [alt] for alt in range(1, n_options[d]))
    return results


def patch_sample_and_coin(monkeypatch, choose):  # choose(options: [(value, probability > 0)]) -> one value
    monkeypatch.setattr(speculative, "sample",
                        lambda probs, generator=None: choose([(x, p) for x, p in enumerate(probs.tolist()) if p > 0]))
    monkeypatch.setattr(speculative, "coin",
                        lambda prob, generator=None: choose([(b, w) for b, w in ((True, prob), (False, 1 - prob)) if w > 0]))


def target_joint(model, prompt, n, **sampling):
    """The exact distribution of the n tokens after `prompt` under plain sampling from the target."""
    W, V, joint = model.config.block_size, model.config.vocab_size, {}
    for cont in itertools.product(range(V), repeat=n):
        seq, prob = list(prompt), 1.0
        for x in cont:
            t = len(seq)
            p = sampling_probs(model.next_logits(seq[context_start(t, W):t]), **sampling)
            prob *= p[x].item()
            seq.append(x)
        if prob > 0:
            joint[cont] = prob
    return joint


def assert_same_distribution(got, want, tol=1e-9):
    """got == want within tol, outcome by outcome. If not, the message names the outcome that differs most, the
    total variation distance, and the likely culprit (tests/diagnose.py's probes of speculative.py)."""
    outcomes = set(got) | set(want)
    diff = lambda seq: abs(got.get(seq, 0.0) - want.get(seq, 0.0))
    worst, total = max(outcomes, key=diff), sum(got.values())
    if abs(total - 1.0) < tol and diff(worst) < tol:
        return
    from tests.diagnose import explain  # here: diagnose.py enumerates with this file's enumerate_branches
    tv = 0.5 * sum(map(diff, outcomes))
    head = (f"probabilities sum to {total:.6g}" if abs(total - 1.0) >= tol else
            f"P{worst}: enumerated {got.get(worst, 0.0):.4g}, target {want.get(worst, 0.0):.4g}")
    raise AssertionError(f"{head} (TV {tv:.3g}). {explain(got, want, tol)}")


CASES = [  # (k, n new tokens, sampling, target block_size, draft block_size)
    *[(k, 3, dict(temperature=1.0), 8, 8) for k in range(1, 7)],  # K = 3..6 exceed the 2 drafts a round can use
    (2, 4, dict(temperature=0.5), 8, 8),
    (3, 3, dict(temperature=2.0), 8, 8),
    (2, 3, dict(temperature=0.0), 8, 8),  # greedy: one-hot p and q
    (3, 3, dict(temperature=1.0, top_k=2), 8, 8),  # zeros in p and q
    (2, 3, dict(temperature=0.8, top_p=0.7), 8, 8),
    (3, 4, dict(temperature=1.0), 4, 4),  # window W=4 crosses at positions 4 and 6
    (2, 4, dict(temperature=1.0, top_p=0.8), 4, 6),  # different windows for target and draft
    (4, 4, dict(temperature=1.0), 6, 4),
]


@pytest.mark.parametrize("k,n,sampling,w_target,w_draft", CASES)
def test_speculative_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, monkeypatch):
    target = TableModel(seed=0, block_size=w_target)
    draft = TableModel(seed=1, block_size=w_draft)
    prompt = [2, 0]
    idx = torch.tensor([prompt])
    run = lambda: speculative_generate(target, draft, idx, n, k=k, **sampling)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))


class ScriptedK(AutoK):
    """K for each round from the branch's own past: 1 + (drafts kept so far) % 3, so K changes between rounds."""

    def choose(self, limit):
        self.chosen.append(1 + self.kept % 3)
        return min(self.chosen[-1], limit)


@pytest.mark.parametrize("chooser,n,sampling,w_target", [
    (lambda: ScriptedK(), 5, dict(temperature=1.0), 8),
    (lambda: ScriptedK(), 5, dict(temperature=0.8, top_p=0.8), 4),  # and the window slides
    (lambda: AutoK(k_max=4, k_first=1, costs=(0.3, lambda K: 1 + 0.05 * K)), 5, dict(temperature=1.0), 8),
])
def test_k_chosen_from_earlier_rounds_keeps_the_output_exact(chooser, n, sampling, w_target, monkeypatch):
    target, draft = TableModel(seed=0, block_size=w_target), TableModel(seed=1, block_size=8)
    prompt, ks_seen = [2, 0], set()

    def run():
        k = chooser()
        out = speculative_generate(target, draft, torch.tensor([prompt]), n, k=k, **sampling)[0][0, len(prompt):]
        ks_seen.add(tuple(k.chosen))
        return out.tolist()

    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))
    assert any(len(set(ks)) > 1 for ks in ks_seen), "the history should make K change between rounds"


def test_plain_sampling_distribution_equals_target_exactly(monkeypatch):
    target = TableModel(seed=0, block_size=4)
    prompt, n = [1, 2, 0], 4  # positions 3..6: the window slides at 4 and 6
    run = lambda: autoregressive_generate(target, torch.tensor([prompt]), n)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n))


def test_enumeration_detects_a_broken_residual(monkeypatch):
    """The check above can fail: resampling from p instead of norm(max(0, p - q)) changes the distribution."""
    target, draft = TableModel(seed=0), TableModel(seed=1)
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), 3, k=2)[0][0, 2:].tolist()
    got, want = enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], 3)
    assert max(abs(got.get(s, 0) - want.get(s, 0)) for s in want) > 1e-3


def round_with_the_bonus_from_the_wrong_row(target, draft, tokens, k, probs, generator):
    """speculative_round with one bug: the bonus token is drawn from p[k - 1] instead of p[k]."""
    t = len(tokens)
    qs = speculative.draft_tokens(draft, tokens, k, probs, generator)
    logits, p = speculative.score(target, tokens, k, probs)
    for i in range(k):
        x = tokens[t + i]
        if not speculative.coin(speculative.accept_probability(p[i, x].item(), qs[i][x].item()), generator):
            tokens[t + i:] = [speculative.sample(speculative.residual(p[i], qs[i]), generator)]
            target.rollback(t + i)
            draft.rollback(t + i)
            return i
    tokens.append(speculative.sample(p[k - 1], generator))  # the bug: the row of the last draft
    return k


def failure_message(monkeypatch, verify="tokenwise"):  # -> the words assert_same_distribution fails with
    target, draft = TableModel(seed=0), TableModel(seed=1)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), 3, k=2, verify=verify)[0][0, 2:].tolist()
    with pytest.raises(AssertionError) as failure:
        assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], 3))
    return str(failure.value)


@pytest.mark.parametrize("name,bug,words", [
    ("accept_probability", lambda p_x, q_x: min(1.0, q_x / p_x) if p_x > 0 else 1.0,
     "accept_probability(0.2, 0.5) returned 1, expected 0.4: the acceptance test is not min(1, p(x)/q(x)): the ratio "
     "is upside down (p and q swapped)"),
    ("accept_probability", lambda p_x, q_x: p_x / q_x, "the min(1, ...) is missing"),
    ("residual", lambda p, q: torch.clamp(p - q, min=0.0), "residual(p=[0.5, 0.3, 0.1, 0.1], q=[0.1, 0.2, 0.4, 0.3]) "
     "returned [0.4, 0.1, 0, 0], expected [0.8, 0.2, 0, 0]: the replacement is not drawn from the residual "
     "norm(max(0, p - q)): max(0, p - q) is not normalised (it sums to 0.5)"),
    ("residual", lambda p, q: p, "you return p itself"),
    ("speculative_round", round_with_the_bonus_from_the_wrong_row, "it is p[k - 1], the row of the last draft"),
])
def test_enumeration_detects_a_planted_bug_and_names_it(name, bug, words, monkeypatch):
    monkeypatch.setattr(speculative, name, bug)
    message = failure_message(monkeypatch)
    assert message.startswith(("P(", "probabilities sum to")) and " (TV " in message, message
    assert f"Likely culprit: speculative.{name}: " in message and words in message, message


def test_enumeration_detects_a_bug_no_probe_knows_and_says_where_the_output_first_differs(monkeypatch):
    """verifiers/ has no probes: a block round whose replacement after a cut is drawn from p itself."""
    import verifiers.block
    monkeypatch.setattr(verifiers.block, "block_residual", lambda a, p, q: p)
    message = failure_message(monkeypatch, verify="block")
    assert "No probe of speculative.py names a culprit; output[0] is the first part of the output distributed " \
           "differently: enumerated {0: " in message and "}, target {0: " in message, message
    assert "python -m pytest -x tests/test_exact_enumeration.py -k detects" in message


def test_context_start_follows_the_spec():
    W = 8  # s(t) = 0 if t < W else (t // (W//2) - 1) * (W//2)
    assert [context_start(t, W) for t in range(20)] == [0] * 8 + [4] * 4 + [8] * 4 + [12] * 4
    for W in (2, 5, 8, 256):
        for t in range(3 * W):
            s = context_start(t, W)
            assert 0 <= s <= t and t - s < W, "the context and the token itself must fit in block_size"
