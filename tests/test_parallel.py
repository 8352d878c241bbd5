"""drafts/parallel.py: what is particular to the parallel draft (tests/test_drafts.py enumerates every registered
draft's fresh() through the round and chi-squares it). One forward per round, each q from the text before the
round only and equal to the model's uncached forward over the text and the masks; the training sequence's mask
(no mask sees a token at or after the one it learns); k_for starting a block every round, enumerated; bad input."""

import pytest
import torch

import drafts  # noqa: F401
import sample
import train_draft
import verifiers  # noqa: F401  (block verification)
from drafts import parallel
from drafts.parallel import ParallelDraft, training_batch, training_logits
from engine.fast import FastGPT
from model import GPT, GPTConfig
from speculative import CachedModel, autoregressive_generate, speculative_generate
from tests.conftest import random_gpt, tiny_training
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_heads import tiny_target


def fresh_parallel(V=7, block_size=24, max_k=4, seed=3, scale=4.0):
    """A parallel draft whose q is far from uniform: its random weights scaled up."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(block_size=block_size, vocab_size=V + 1, n_layer=1, n_head=2, n_embd=16))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return ParallelDraft(model.eval(), max_k)


def uncached_rows(model, seen, k):  # the naive path: the whole window and k - 1 masks, one forward, no cache
    mask_id = model.config.vocab_size - 1
    return model(torch.tensor([seen + [mask_id] * (k - 1)]))[0][0, len(seen) - 1:, :mask_id].double()


@pytest.mark.parametrize("fast", [False, True])
def test_every_q_is_the_uncached_forward_over_the_text_before_the_round_and_its_masks(fast):
    draft = fresh_parallel()
    if fast:
        draft.model = FastGPT(draft.model)
    draft.reset_cache()
    tokens, k = [1, 2, 3, 4, 5], 3
    model = CachedModel(draft, torch.device("cpu"))
    for start in (5, 8):  # two rounds, the second after the first kept everything
        assert draft.k_for(tokens, k) == k
        want = uncached_rows(draft.model.model if fast else draft.model, tokens[:start], k)
        for i in range(k):
            got = model.logits(tokens, start + i, 1)[0]
            assert torch.allclose(got, want[i], atol=1e-5), (start, i)
            tokens.append([6, 0, 2][i])  # the round's drafts: they change no later row
        tokens = tokens[:start + k]


def test_q_of_a_later_draft_does_not_depend_on_the_rounds_earlier_drafts():
    rows = []
    for drafted in (0, 6):
        draft = fresh_parallel()
        draft.reset_cache()
        draft.k_for([1, 2, 3], 3)
        draft(torch.tensor([[1, 2, 3]]), use_cache=True)
        rows.append(draft(torch.tensor([[drafted]]), use_cache=True)[0][0, -1])
    assert torch.equal(rows[0], rows[1])


def test_one_model_forward_per_round_whatever_k():
    target = random_gpt(2, vocab_size=7, block_size=24, n_layer=1)
    draft = fresh_parallel()
    calls = []
    draft.model.register_forward_hook(lambda *args: calls.append(1))
    for k in (2, 4):
        calls.clear()
        _, stats = speculative_generate(target, draft, torch.tensor([[1, 2, 3]]), 12, k=k)
        assert len(calls) == sum(1 for _, K, _ in stats.rounds if K), (k, len(calls), stats.rounds)


@pytest.mark.parametrize("verify,k,n,sampling", [("tokenwise", 3, 4, dict(temperature=1.0)),
                                                  ("block", 2, 3, dict(temperature=0.7, top_k=2)),
                                                  ("tokenwise", "auto", 3, dict(temperature=1.0))])
def test_parallel_rounds_across_a_window_slide_keep_the_output_exact(verify, k, n, sampling, monkeypatch):
    target = tiny_target()  # block_size 6: the prompt of 4 and n new tokens cross a slide of the window
    draft = fresh_parallel(V=3, block_size=5 + 3, max_k=4).double()  # its own window of 5 slides too
    prompt = [2, 0, 1, 1]
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), n, k=k, verify=verify, **sampling)[0][
        0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))


def test_greedy_equals_plain_greedy_with_the_fast_decoder():
    target = random_gpt(1, vocab_size=7, block_size=16, n_layer=1)
    draft = fresh_parallel(block_size=16)
    draft.model = FastGPT(draft.model)
    idx = torch.tensor([[1, 2, 3]])
    plain, _ = autoregressive_generate(target, idx, 30, temperature=0)
    spec, stats = speculative_generate(target, draft, idx, 30, k=4, temperature=0)
    assert spec.tolist() == plain.tolist() and max(K for _, K, _ in stats.rounds) == 4


def leaks(batch, T):
    """-> the first mask row that sees more than its anchor's text x_0 .. x_a and its own block's masks up to itself
    (positions a+1 .. its own), or None. A mask that saw x_(a+1) or later would read tokens the draft does not know
    when it drafts (and, at its own target, the answer): the loss would fall in training and alpha would not rise."""
    idx, pos, mask, targets = batch
    for r in range(T, len(pos)):
        real = [c for c in range(T) if mask[r, c]]
        a = real[-1]
        masks = [int(pos[c]) for c in range(T, len(pos)) if mask[r, c]]
        if real != list(range(a + 1)) or masks != list(range(a + 1, int(pos[r]) + 1)):
            return r
    return None


def test_the_training_sequence_masks_see_only_their_anchor_and_learn_the_token_after_their_position():
    x = torch.arange(10, 17)[None]  # (1, T+1): T = 6 real tokens 10..15, then 16
    idx, pos, mask, targets = training_batch(x, [0, 2], 3, mask_id=99)
    assert idx.tolist() == [[10, 11, 12, 13, 14, 15, 99, 99, 99, 99]]
    assert pos.tolist() == [0, 1, 2, 3, 4, 5, 1, 2, 3, 4]  # anchor 0: positions 1, 2; anchor 2: positions 3, 4
    assert targets.tolist() == [[11, 12, 13, 14, 15, 16, 12, 13, 14, 15]]  # the token at position pos + 1
    sees = lambda r: [c for c in range(10) if mask[r, c]]
    assert sees(2) == [0, 1, 2] and sees(6) == [0, 6] and sees(7) == [0, 6, 7] and sees(9) == [0, 1, 2, 8, 9]
    assert leaks((idx, pos, mask, targets), 6) is None


def test_a_mask_that_sees_its_answer_is_caught():  # a planted bug: anchor a's masks also see x_(a+1)
    x = torch.arange(10, 17)[None]
    idx, pos, mask, targets = training_batch(x, [0, 2], 3, mask_id=99)
    mask[6, 1] = True  # anchor 0's first mask (position 1) sees x_1, the token it stands in for
    assert leaks((idx, pos, mask, targets), 6) == 6


def test_mask_rows_depend_only_on_what_they_may_see():
    """The model through training_logits: changing the real tokens after an anchor leaves its masks' logits alone."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=12, vocab_size=8, n_layer=2, n_head=2, n_embd=16)).eval()
    x = torch.randint(0, 7, (1, 13))
    y = x.clone()
    y[0, 4:] = (y[0, 4:] + 1) % 7  # every token after anchor 3 changes
    a, b = (training_logits(model, *training_batch(z, [3], 4, 7)[:3]) for z in (x, y))
    assert torch.allclose(a[0, 12:], b[0, 12:], atol=1e-6) and not torch.allclose(a[0, 4:12], b[0, 4:12])
    # and the real rows are the plain causal forward's
    assert torch.allclose(a[0, :12], model(x[:, :12])[0][0], atol=1e-5)


def test_training_a_parallel_draft_on_a_tiny_corpus(tmp_path, capsys):
    common = tiny_training(tmp_path, "both")
    train_draft.main(["--parallel", "4", "--init", str(tmp_path / "draft.pt"), "--max_iters", "4",
                      "--eval_interval", "2", "--anchors", "3", *common])
    assert "val cross-entropy by draft position" in capsys.readouterr().out
    target, _ = train_draft.load_checkpoint(str(tmp_path / "target.pt"))
    draft = parallel.make(target, str(tmp_path / "parallel.pt"))
    assert draft.max_k == 4 and draft.config.vocab_size == target.config.vocab_size
    out, stats = speculative_generate(target, draft, torch.tensor([[1, 2]]), 10, k=4)
    assert out.size(1) == 12 and stats.drafted > 0
    with pytest.raises(SystemExit, match="an autoregressive draft"):
        train_draft.main(["--parallel", "4", "--init", str(tmp_path / "parallel.pt"), "--max_iters", "1", *common])


def test_bad_input_is_one_line(tmp_path, capsys):
    for flags, words in [(["--parallel_ckpt", str(tmp_path / "none.pt")], "no such checkpoint"),
                         (["--parallel_ckpt", "checkpoints/draft.pt"], "is not a parallel draft"),
                         (["--verify", "tree", "--k", "4"], "not trees"),
                         (["--batch", "2"], "drop --batch")]:
        with pytest.raises(SystemExit) as e:
            sample.main(["--draft", "parallel", "--num_samples", "1", "--max_new_tokens", "5", "--threads", "1", *flags])
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    draft = fresh_parallel()
    with pytest.raises(ValueError, match="at most 4 tokens per round"):
        speculative_generate(random_gpt(0, vocab_size=7, block_size=16), draft, torch.tensor([[1]]), 5, k=6)
    with pytest.raises(SystemExit):
        train_draft.get_args(["--parallel", "1"])
    assert "--parallel K: K is the tokens one forward proposes, at least 2" in capsys.readouterr().err


def test_a_chains_only_draft_is_refused_by_tree_verifiers_before_any_token():
    target = random_gpt(0, vocab_size=7, block_size=16)
    for verify in ("tree", "multidraft"):
        with pytest.raises(ValueError, match="chains, not trees"):
            speculative_generate(target, fresh_parallel(), torch.tensor([[1]]), 5, k=2, verify=verify)
