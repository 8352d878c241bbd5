"""drafts/cross_vocab.py's CrossVocabDraft: a draft with another tokenizer is exact through the token-level intersection.

Two toy tokenizers whose vocabularies overlap partly, with multi-character tokens on both sides:
the target's ['a', 'b', 'ab', 'ba'] and the draft's ['a', 'b', 'bb', 'ab']; they share 'a', 'b' and 'ab'. The
draft reads the target's text re-encoded by its own tokenizer ('aba' is target [2, 0] but draft [3, 0]).
"""

import pytest
import torch

import speculative
from drafts.cross_vocab import CrossVocabDraft, shared_mass, shared_tokens
from data import Tokenizer
from speculative import autoregressive_generate, speculative_generate
from tests.conftest import TableModel, random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_statistics import chi2_critical, chi_square, exact_joint, sample_continuations


class ToyTokenizer:
    """Greedy longest match over a list of pieces: ['a', 'b', 'ab'] encodes 'aab' as [0, 2]."""

    def __init__(self, pieces):
        self.pieces, self.vocab_size = list(pieces), len(pieces)

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            best = max((j for j, p in enumerate(self.pieces) if text.startswith(p, i)), key=lambda j: len(self.pieces[j]),
                       default=None)
            if best is None:
                raise ValueError(f"characters not in the vocabulary: {text[i]!r}")
            ids.append(best)
            i += len(self.pieces[best])
        return ids

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


TARGET_TOK, DRAFT_TOK = ToyTokenizer(["a", "b", "ab", "ba"]), ToyTokenizer(["a", "b", "bb", "ab"])
PROMPT = [2, 0]  # 'aba'


def toy_pair(w_draft=8):
    target = TableModel(seed=0, vocab_size=4, block_size=8)
    draft = CrossVocabDraft(TableModel(seed=1, vocab_size=4, block_size=w_draft), DRAFT_TOK, TARGET_TOK)
    return target, draft


def test_the_shared_tokens_are_the_strings_both_vocabularies_have():
    assert shared_tokens(DRAFT_TOK, TARGET_TOK) == ([0, 1, 3], [0, 1, 2])  # 'a', 'b', 'ab'
    char = Tokenizer({"kind": "char", "chars": "\n abc"})
    assert shared_tokens(char, ToyTokenizer(["ab", "c", "d", " "])) == ([1, 4], [3, 1])  # ' ' and 'c'


@pytest.mark.parametrize("k,n,sampling,w_draft", [
    (1, 3, dict(temperature=1.0), 8), (2, 3, dict(temperature=1.0), 8), (3, 3, dict(temperature=1.0), 8),
    (4, 3, dict(temperature=1.0), 8), (2, 3, dict(temperature=0.5), 8), (2, 3, dict(temperature=0.0), 8),
    (3, 3, dict(temperature=1.0, top_k=2), 8), (2, 3, dict(temperature=0.8, top_p=0.7), 8),
    (2, 4, dict(temperature=1.0), 4),  # the draft's own window (4 of its tokens) slides
])
def test_a_draft_with_another_tokenizer_gives_the_targets_distribution_exactly(k, n, sampling, w_draft, monkeypatch):
    target, draft = toy_pair(w_draft)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), n, k=k, **sampling)[0][
        0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, PROMPT, n, **sampling))


def test_q_lives_on_the_shared_tokens_only_and_is_the_drafts_distribution_there():
    target, draft = toy_pair()
    logits = draft(torch.tensor([PROMPT]))[0][0, -1]  # q after 'aba', over the target's ids
    q = torch.softmax(logits, -1)
    assert q[3] == 0.0  # 'ba' is not in the draft's vocabulary
    inner = torch.softmax(draft.draft.next_logits([3, 0]), -1)  # the draft model on 'aba' = its [3, 0]
    want = inner[[0, 1, 3]] / inner[[0, 1, 3]].sum()  # renormalized over 'a', 'b', 'ab'
    assert torch.allclose(q[[0, 1, 2]], want.to(q.dtype), atol=1e-12)


def test_the_drafts_cache_gives_what_a_fresh_draft_gives_after_growth_and_rollbacks():
    """The fast path (the draft model's KV cache kept across steps, rolled back to a common prefix when the
    re-encoding changes) against the naive one (a new CrossVocabDraft for every history)."""
    _, cached = toy_pair(w_draft=4)
    g, history = torch.Generator().manual_seed(0), [2, 0]
    for step in range(40):
        if step % 7 == 6:
            del history[-int(torch.randint(1, 3, (1,), generator=g)):]  # a rejection: forget the last tokens
        history.append(int(torch.randint(0, 4, (1,), generator=g)))
        _, fresh = toy_pair(w_draft=4)
        assert torch.equal(cached.next_logits(list(history)), fresh.next_logits(list(history))), history


def test_greedy_with_another_tokenizer_equals_plain_greedy():
    target = random_gpt(6, vocab_size=4, block_size=16, sharpness=3.0)  # greedy: 'a' six times, then 'ab' ...
    draft = CrossVocabDraft(random_gpt(7, vocab_size=4, block_size=12, n_layer=1, n_head=1, n_embd=8), DRAFT_TOK,
                            TARGET_TOK)
    idx = torch.tensor([PROMPT])
    plain, _ = autoregressive_generate(target, idx, 40, temperature=0)
    spec, stats = speculative_generate(target, draft, idx, 40, k=3, temperature=0)
    assert torch.equal(plain, spec) and 0 < stats.accepted < stats.drafted  # drafts both kept and rejected


def test_real_gpts_with_two_tokenizers_pass_a_chi_square_test():
    """2,000 samples of 3 tokens from two random GPTs; false-alarm rate 1e-3 (chi-square critical value)."""
    target = random_gpt(0, vocab_size=4, block_size=8)
    draft = CrossVocabDraft(random_gpt(1, vocab_size=4, block_size=8, n_layer=1), DRAFT_TOK, TARGET_TOK)
    N, joint = 2000, exact_joint(target, PROMPT, 3)
    counts = sample_continuations(target, draft, PROMPT, 3, N, seed=0, k=2)
    stat, df = chi_square(counts, joint, N)
    assert stat < chi2_critical(df, 1e-3), (stat, df)


def test_no_shared_token_and_text_the_draft_cannot_encode_are_clear_errors():
    with pytest.raises(ValueError, match="share no token"):
        CrossVocabDraft(TableModel(seed=1, vocab_size=2), ToyTokenizer(["x", "y"]), TARGET_TOK)
    target = TableModel(seed=0, vocab_size=4)
    draft = CrossVocabDraft(TableModel(seed=1, vocab_size=3), ToyTokenizer(["a", "ab", "c"]), TARGET_TOK)
    with pytest.raises(ValueError, match="cannot encode the characters 'b' of the prompt"):
        speculative_generate(target, draft, torch.tensor([[1]]), 3, k=2)  # 'b' alone: no draft token for it


def test_generated_characters_the_draft_cannot_encode_are_left_out_and_the_output_stays_exact(monkeypatch):
    """The draft's ['a', 'ab'] has no token for a 'b' that does not follow an 'a': 'abb' has no encoding, so the
    draft reads its characters one by one and leaves out the b's. Its proposals get worse, never the output."""
    target = TableModel(seed=0, vocab_size=4, block_size=8)
    draft = CrossVocabDraft(TableModel(seed=1, vocab_size=2, block_size=8), ToyTokenizer(["a", "ab"]), TARGET_TOK)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), 3, k=2)[0][0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, PROMPT, 3))
    assert draft.reencode([2, 1, 1]) == [0]  # 'abb': 'a', and both b's left out
    assert draft.reencode([2, 0]) == [1, 0]  # 'aba' has an encoding: 'ab', 'a'


def test_shared_mass_is_the_targets_probability_on_the_shared_tokens_at_each_new_position():
    """The fast path (one forward per context window) against the naive one (one per position)."""
    from tests.test_statistics import next_probs
    target = random_gpt(0, vocab_size=4, block_size=8)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 4, (30,), generator=g).tolist()  # the window slides at 8, 12, 16, ...
    for sampling in (dict(temperature=1.0), dict(temperature=0.7, top_k=3)):
        naive = [next_probs(target, tokens[:t], **sampling)[[0, 1, 2]].sum().item() for t in range(5, 30)]
        assert abs(shared_mass(target, tokens, 5, [0, 1, 2], **sampling) - sum(naive) / len(naive)) < 1e-6


def test_sample_py_refuses_a_prompt_the_drafts_tokenizer_cannot_read_with_a_usage_message():
    import sample
    with pytest.raises(SystemExit, match=r"--start: the draft's tokenizer cannot encode the characters '\$'"):
        sample.main(["--draft", "checkpoints/draft_bpe.pt", "--start", "$ and more", "--max_new_tokens", "5"])
