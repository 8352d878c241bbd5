"""drafts/suffix.py and drafts/self_drafts.py: what is particular to each (tests/test_drafts.py enumerates every
registered draft's fresh() through the round). The suffix draft's proposals, its datastore against a brute-force
search, K chosen per round from the text so far (enumerated down every branch), bad input."""

import random

import pytest
import torch

import drafts  # noqa: F401
import sample
from drafts.self_drafts import early_exit
from drafts.suffix import Datastore, SuffixDraft
from speculative import autoregressive_generate, speculative_generate
from tests.conftest import random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_heads import tiny_target


def test_the_path_follows_the_longest_match_and_its_most_frequent_continuation():
    d = SuffixDraft(20, min_match=1, min_prob=0.0)
    assert d.path([1, 2, 3, 9, 1, 2, 3]) == [9, 1, 2, 3]
    # the suffix 4, 5 occurs twice followed by 6 and once by 7: 6 first, with probability 2/3
    h = [4, 5, 6, 0, 4, 5, 6, 1, 4, 5, 7, 2, 4, 5]
    assert d.path(h)[0] == 6 and SuffixDraft(20, min_match=1, min_prob=0.7).path(h) == []
    assert SuffixDraft(20, min_match=3).path([1, 2, 9, 1, 2]) == []  # a match of 2 < min_match: nothing
    assert SuffixDraft(20, min_match=1, min_prob=0.0).k_for([1, 2, 9, 1, 2], 1) == 1  # at most K


def test_the_indexed_search_equals_the_scan_as_the_text_grows_and_is_cropped():
    rng = random.Random(1)
    d = SuffixDraft(3, min_match=2, max_match=7)  # three tokens: many matches of every length
    history = []
    for step in range(400):
        if rng.random() < 0.15 and history:  # a rejection: the text loses its last few tokens
            del history[-rng.randrange(1, min(6, len(history)) + 1):]
        else:
            history.append(rng.randrange(3))
        if history:
            assert d.matches(list(history)) == d.matches_naive(history), step
    fresh = SuffixDraft(3, min_match=2, max_match=7)  # and a history that is not the last one's continuation
    assert fresh.matches(history) == d.matches_naive(history) and fresh.matches([1, 1, 1]) == d.matches_naive([1, 1, 1])


def test_the_datastore_finds_what_a_brute_force_search_finds():
    rng = random.Random(0)
    corpus = [rng.randrange(4) for _ in range(3000)]
    store = Datastore(corpus, 4, max_match=9)
    for _ in range(50):
        history = [rng.randrange(4) for _ in range(12)]
        m, after = store.lookup(history, 1)
        best = max(k for k in range(0, 10) if k == 0 or any(
            corpus[i - k:i] == history[-k:] for i in range(k, len(corpus))))
        assert m == best
        assert after == [i for i in range(m, len(corpus)) if corpus[i - m:i] == history[-m:]][:store.limit]


def test_the_datastore_proposes_where_the_text_has_no_match_or_a_shorter_one():
    d = SuffixDraft(10, min_match=2, corpus=[3, 5, 6, 7, 8, 9, 5, 6, 7, 4])
    assert d.path([1, 5, 6]) == [7, 4]  # 5, 6 -> 7 twice (1), then 8 or 4 once each (1/2, the tie to the smaller id)
    assert SuffixDraft(10, min_match=2, min_prob=0.0, corpus=[3, 5, 6, 7, 8, 9]).path([1, 5, 6]) == [7, 8, 9]
    assert SuffixDraft(10, min_match=2, min_prob=0.0).path([1, 5, 6]) == []  # without the corpus: nothing


@pytest.mark.parametrize("corpus", [None, [0, 1, 2, 0, 1, 1, 2, 0]])
@pytest.mark.parametrize("k,sampling", [(2, dict(temperature=1.0)), (3, dict(temperature=0.7, top_k=2))])
def test_suffix_rounds_of_varying_k_keep_the_output_exact(corpus, k, sampling, monkeypatch):
    target = tiny_target()
    draft = SuffixDraft(target.config.vocab_size, min_match=1, min_prob=0.3, corpus=corpus)
    prompt = [2, 0, 2, 0]
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), 4, k=k, **sampling)[0][
        0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, 4, **sampling))


def test_a_round_without_a_match_is_one_plain_step_and_greedy_equals_plain():
    target = random_gpt(3, vocab_size=11, block_size=64, n_layer=1)
    idx = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3]])
    draft = SuffixDraft(11, min_match=3, min_prob=0.0)
    spec, stats = speculative_generate(target, draft, idx, 30, k=4, temperature=0)
    plain, _ = autoregressive_generate(target, idx, 30, temperature=0)
    assert spec.tolist() == plain.tolist()
    Ks = [K for _, K, _ in stats.rounds]
    assert Ks[0] >= 1 and 0 in Ks  # the prompt's 1, 2, 3 matched; later rounds found nothing to propose


def test_a_k_for_that_ignores_its_limit_is_caught(monkeypatch):
    monkeypatch.setattr(SuffixDraft, "k_for", lambda self, tokens, K: K + 2)  # a planted bug: past the round's room
    target = tiny_target()
    with pytest.raises(AssertionError):
        speculative_generate(target, SuffixDraft(3, min_match=1, min_prob=0.0), torch.tensor([[2, 0, 2, 0]]), 3, k=2)


def test_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        sample.main(["--draft", "suffix", "--suffix_corpus", str(tmp_path / "nosuch.txt"), "--num_samples", "1"])
    assert "no such file" in str(e.value)
    odd = tmp_path / "odd.txt"
    odd.write_text("x = {1}\n")
    with pytest.raises(SystemExit) as e:
        sample.main(["--draft", "suffix", "--suffix_corpus", str(odd), "--num_samples", "1"])
    assert "does not fit the target's tokenizer" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        sample.main(["--draft", "layerskip", "--layerskip_layers", "6", "--num_samples", "1"])
    assert "takes 0 to 5 of the target's 6 layers" in str(e.value)


def test_the_early_exit_is_the_targets_first_layers():
    target = random_gpt(4, vocab_size=9, block_size=16, n_layer=3)
    draft = early_exit(target, 2)
    idx = torch.tensor([[1, 2, 3]])
    x = target.transformer.wte(idx) + target.transformer.wpe(torch.arange(3))
    for block in target.transformer.h[:2]:
        x = block(x) if not isinstance(block(x), tuple) else block(x)[0]
    want = target.lm_head(target.transformer.ln_f(x))
    assert torch.allclose(draft(idx)[0], want, atol=1e-5)


@pytest.mark.parametrize("per_round", [True, False])  # False: a caller without k_for, each position decides
@pytest.mark.parametrize("k,sampling", [(2, dict(temperature=1.0)), (3, dict(temperature=0.7, top_k=2))])
def test_suffix_over_a_model_draft_keeps_the_output_exact(k, sampling, per_round, monkeypatch):
    from drafts.suffix import StackedDraft
    if not per_round:
        monkeypatch.delattr(StackedDraft, "k_for")
    target = tiny_target()
    model = random_gpt(5, vocab_size=target.config.vocab_size, block_size=target.config.block_size, n_layer=1).double()
    draft = StackedDraft(SuffixDraft(target.config.vocab_size, min_match=2, min_prob=0.5), model)
    asked = []  # which of the two answered: both must, for the enumeration to cover both
    path = draft.suffix.path
    monkeypatch.setattr(draft.suffix, "path", lambda h: asked.append(bool(path(h))) or path(h))
    prompt = [0, 1, 0, 1]  # a path at the first round (0, 1 came before), and rounds without one after it
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), 4, k=k, **sampling)[0][
        0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, 4, **sampling))
    assert True in asked and False in asked
    plain, _ = autoregressive_generate(target, torch.tensor([prompt]), 6, temperature=0)
    spec, _ = speculative_generate(target, draft, torch.tensor([prompt]), 6, k=k, temperature=0)
    assert spec.tolist() == plain.tolist()


def test_suffix_over_a_missing_checkpoint_is_one_line():
    with pytest.raises(SystemExit) as e:
        sample.main(["--draft", "suffix", "--suffix_over", "nosuch.pt", "--num_samples", "1"])
    assert "no such checkpoint" in str(e.value) and "\n" not in str(e.value)
