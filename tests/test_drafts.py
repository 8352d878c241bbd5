"""Every draft that speculative.DRAFTS names: its entry's fresh(target) gives an untrained draft of that kind for
any model.GPT target, with seeded weights, and the core round stays exact with it (every branch enumerated).
A new draft in drafts/ is covered here by its entry alone; its own test file proves what is particular to it."""

import pytest
import torch

import drafts  # noqa: F401  (fills speculative.DRAFTS)
import speculative
from speculative import DRAFTS, autoregressive_generate, speculative_generate
from tests.conftest import random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_heads import tiny_target

NAMES = sorted(DRAFTS)


def test_the_registry_holds_the_drafts_of_the_drafts_package():
    assert {"ngram", "eagle", "medusa"} <= set(NAMES)
    for name in NAMES:
        assert isinstance(DRAFTS[name], speculative.Drafter) and DRAFTS[name].doc, name


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("k,n,sampling", [(2, 3, dict(temperature=1.0)), (3, 3, dict(temperature=0.7, top_k=2))])
def test_a_fresh_draft_of_every_kind_keeps_the_output_exact(name, k, n, sampling, monkeypatch):
    target = tiny_target()
    draft = DRAFTS[name].fresh(target)
    prompt = [2, 0]
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), n, k=k, **sampling)[0][
        0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))


TREES = [name for name in NAMES if not getattr(DRAFTS[name].fresh(tiny_target()), "chains_only", False)]


SAMPLED_TREE, TOP_TREE = dict(branches=(2, 2), children="sample"), dict(branches=(2, 2), children="top", budget=3,
                                                                      rerank=True)
HEAD_TREES = {"eagle", "eagle3", "medusa"}  # tests/test_heads.py enumerates SAMPLED_TREE on them, in this very setting


def test_the_drafts_that_draft_trees_include_the_heads():
    from tests.test_heads import TREE_CASES
    assert {"ngram", "eagle", "eagle3", "medusa"} <= set(TREES) and "parallel" not in TREES
    assert (2, 3, dict(temperature=1.0), 6, SAMPLED_TREE) in TREE_CASES, "the heads' sampled trees are enumerated there"


@pytest.mark.parametrize("name,tree", [pytest.param(name, TOP_TREE, id=f"{name}-top") for name in TREES] + [
    pytest.param(name, SAMPLED_TREE, id=f"{name}-sampled") for name in TREES if name not in HEAD_TREES])
def test_a_fresh_draft_that_drafts_trees_keeps_the_output_exact(name, tree, monkeypatch):
    """verify="tree" feeds the draft levels of a tree (pos, mask): every draft that does not refuse them. The heads'
    sampled trees are enumerated in tests/test_heads.py (same target, prompt, k and n), with q further from p."""
    target = tiny_target()
    draft = DRAFTS[name].fresh(target)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), 3, k=2, verify="tree", **tree)[0][
        0, 2:].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], 3))


@pytest.mark.parametrize("name", NAMES)
def test_fresh_is_seeded_and_leaves_torch_random_state_as_it_was(name):
    target = random_gpt(0, vocab_size=7, block_size=16, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(123)
    a = DRAFTS[name].fresh(target)
    after = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(3)), "fresh() changed torch's global random state"
    b = DRAFTS[name].fresh(target)
    sa, sb = a.state_dict(), b.state_dict()
    def same(x, y):  # tensors, or what an int8 draft also stores: tuples of them, dtypes
        if isinstance(x, (tuple, list)):
            return len(x) == len(y) and all(map(same, x, y))
        return torch.equal(x.dequantize() if x.is_quantized else x, y.dequantize() if y.is_quantized else y) \
            if torch.is_tensor(x) else x == y
    assert sa.keys() == sb.keys() and all(same(sa[key], sb[key]) for key in sa)


def test_an_int8_copy_counts_as_many_parameters_as_its_target():
    """quantize_dynamic packs the Linear weights out of parameters(): the copy must still count them (bench.py and
    sample.py print draft sizes with num_params)."""
    target = random_gpt(0, vocab_size=7, block_size=16, n_layer=2, n_head=2, n_embd=16)
    assert DRAFTS["int8"].fresh(target).num_params() == target.num_params()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [dict(vocab_size=5, block_size=8, n_embd=16), dict(vocab_size=11, block_size=32, n_embd=24)])
def test_a_fresh_draft_fits_any_gpt_target_and_greedy_equals_plain_greedy(name, shape):
    target = random_gpt(1, n_layer=1, n_head=2, **shape)
    draft = DRAFTS[name].fresh(target)
    idx = torch.tensor([[1, 2, 3]])
    plain, _ = autoregressive_generate(target, idx, 12, temperature=0)
    spec, _ = speculative_generate(target, draft, idx, 12, k=3, temperature=0)
    assert spec.tolist() == plain.tolist()


@pytest.mark.parametrize("name", NAMES)
def test_a_fresh_draft_of_every_kind_passes_chi_square_on_a_real_gpt_across_the_window_slide(name):
    """2,000 samples of 3 tokens after a prompt of 6 (block_size 8: the window slides at position 8) against the
    exact target joint. False-alarm rate 1e-3 per draft (one chi-square test at its 0.999 quantile; fixed seed)."""
    from tests.test_statistics import chi2_critical, chi_square, exact_joint, sample_continuations
    target = random_gpt(4, vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=16)
    prompt, n, N = [1, 4, 2, 0, 3, 1], 3, 2000
    counts = sample_continuations(target, DRAFTS[name].fresh(target), prompt, n, N, seed=5, k=2)
    stat, df = chi_square(counts, exact_joint(target, prompt, n), N)
    assert stat < chi2_critical(df, 1e-3), f"{name}: chi-square {stat:.1f} with {df} dof"


@pytest.mark.parametrize("name", ["ngram", "parallel"])
def test_that_chi_square_catches_resampling_from_p_with_these_drafts(name, monkeypatch):
    """The check above can fail: with the residual replaced by p (a planted bug), the same samples are rejected."""
    from tests.test_statistics import chi2_critical, chi_square, exact_joint, sample_continuations
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    target = random_gpt(4, vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=16)
    prompt, n, N = [1, 4, 2, 0, 3, 1], 3, 2000
    counts = sample_continuations(target, DRAFTS[name].fresh(target), prompt, n, N, seed=5, k=2)
    stat, df = chi_square(counts, exact_joint(target, prompt, n), N)
    assert stat > chi2_critical(df, 1e-3), f"{name}: chi-square {stat:.1f} with {df} dof: the bug went unnoticed"
