"""Drafts that read the target (drafts/eagle.py, drafts/medusa.py): EagleDraft and MedusaDraft keep speculative sampling exact.

The proofs of the core, applied to them: the enumeration of every branch on a tiny float64 GPT target (K = 1..4,
temperatures, top-k, top-p, the window sliding, both chain verifiers), a chi-square test per head, greedy equal to
plain greedy. Then the naive path against the fast one (the draft's cached, incremental q against the same q
recomputed from scratch), the checkpoint's refusal of another target, and a training smoke test.
"""

import pytest
import torch

import drafts  # noqa: F401  (registers the heads' kinds)
from drafts import heads
from drafts.eagle import EagleDraft
from drafts.eagle3 import Eagle3Draft
from drafts.medusa import MedusaDraft
import speculative
import train_draft
import verifiers  # noqa: F401  (registers verify="block")
from speculative import autoregressive_generate, speculative_generate
from tests.conftest import random_gpt, tiny_training
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_statistics import chi2_critical, chi_square, exact_joint, sample_continuations


def tiny_target(seed=0, block_size=6, vocab_size=3):
    target = random_gpt(seed, vocab_size=vocab_size, block_size=block_size, n_layer=1, n_head=2, n_embd=8).double()
    target.next_logits = lambda context: target(torch.tensor([context]))[0][0, -1]  # for target_joint
    return target


def make_head(kind, target, seed=1, scale=8.0):
    """A fresh head whose q is far from the target's p: its weights scaled up (Medusa's start at zero otherwise)."""
    torch.manual_seed(seed)
    head = {"eagle": EagleDraft, "eagle3": Eagle3Draft}[kind](target) if kind != "medusa" else MedusaDraft(target, 4)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p) * 0.02 * scale)
    return head.eval()


CASES = [  # (k, n new tokens, sampling, block_size, verify)
    *[(k, 3, dict(temperature=1.0), 6, "tokenwise") for k in (1, 2, 3, 4)],
    (2, 4, dict(temperature=0.5), 6, "tokenwise"),
    (2, 3, dict(temperature=0.0), 6, "tokenwise"),  # greedy: one-hot p and q
    (3, 3, dict(temperature=1.0, top_k=2), 6, "tokenwise"),
    (2, 3, dict(temperature=0.8, top_p=0.7), 6, "tokenwise"),
    (3, 4, dict(temperature=1.0), 4, "tokenwise"),  # the window slides at positions 4 and 6: extra reads
    (3, 3, dict(temperature=1.0), 6, "block"),
    (2, 4, dict(temperature=1.0), 4, "block"),
]


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
@pytest.mark.parametrize("k,n,sampling,block_size,verify", CASES)
def test_head_output_distribution_equals_target_exactly(kind, k, n, sampling, block_size, verify, monkeypatch):
    target = tiny_target(block_size=block_size)
    draft = make_head(kind, target)
    prompt = [2, 0]
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), n, k=k, verify=verify,
                                       **sampling)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_enumeration_with_a_head_detects_a_broken_residual(kind, monkeypatch):
    """The check can fail with these drafts too: resampling from p instead of norm(max(0, p - q)) is biased."""
    target = tiny_target()
    draft = make_head(kind, target)
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), 3, k=2)[0][0, 2:].tolist()
    got, want = enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], 3)
    assert max(abs(got.get(s, 0) - want.get(s, 0)) for s in want) > 1e-3


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_head_samples_pass_chi_square_against_exact_target(kind):
    """False-alarm rate 1e-3 per head (one chi-square test at its 0.999 quantile). The float32 real path: a
    5-token vocabulary, a window of 8 that the 3 new tokens cross (prompt of 6)."""
    torch.manual_seed(0)
    target = random_gpt(0)
    draft = make_head(kind, target)
    prompt, N = [1, 4, 2, 0, 3, 1], 1500
    joint = exact_joint(target, prompt, 3)
    counts = sample_continuations(target, draft, prompt, 3, N, seed=0, k=3)
    stat, df = chi_square(counts, joint, N)
    assert stat < chi2_critical(df, 1e-3), f"chi-square {stat:.1f} with {df} dof: not the target's distribution"


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
@pytest.mark.parametrize("k", [1, 3, 4])
def test_greedy_with_a_head_equals_greedy_plain(kind, k):
    target = random_gpt(3, vocab_size=11, block_size=16)
    draft = make_head(kind, target)
    prompt = torch.tensor([[1, 2, 3]])
    plain, _ = autoregressive_generate(target, prompt, 40, temperature=0)  # crosses the window 4 times
    spec, stats = speculative_generate(target, draft, prompt, 40, k=k, temperature=0)
    assert spec.tolist() == plain.tolist()
    assert draft.extra_reads == 1 + 4, "one read at the call's start and one at each slide of the window"


@torch.no_grad()
def uncached_features(target, tokens, head=None):  # -> (T, F) as head reads them, leaving target.features as it was
    last = target.features
    target(torch.tensor([tokens]))
    f, target.features = (head.feature(target.features) if head else target.features.x)[0], last
    return f


@torch.no_grad()
def reference_q(head, tokens, n_true):
    """The naive path: q for the token after `tokens`, recomputed from scratch, when the target's features are known
    for positions < n_true and the rest are the draft's own predictions, one position at a time."""
    f = uncached_features(head.target, tokens, head)  # (T, F): the target's features, uncached
    if isinstance(head, MedusaDraft):
        j, m = n_true - 1, len(tokens) - n_true  # the last known position; head m
        return head.target_head(f[len(tokens) - 1] if m <= 0 else head.heads[m - 1](f[j]))
    f = head.from_target(f)  # (T, C): what predict() reads (eagle3: the three blocks, fused)
    inputs = [torch.zeros_like(f[0])] + [f[i] for i in range(min(n_true, len(tokens) - 1))]
    while len(inputs) < len(tokens):  # chain the predictions, each from a full, uncached forward
        inputs.append(head.predict(torch.stack(inputs)[None], torch.tensor([tokens[:len(inputs)]]))[0, -1])
    return head.target_head(head.predict(torch.stack(inputs)[None], torch.tensor([tokens]))[0, -1])


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
@pytest.mark.parametrize("k,temperature", [(2, 1.0), (4, 1.0), (3, 0.0)])
def test_cached_head_equals_its_naive_path(kind, k, temperature, monkeypatch):
    """Every q the draft gives during real rounds (rollbacks, bonus tokens, window slides) equals reference_q. A flat
    target (sharpness 1) keeps most drafts, so rounds end with drafts kept and their predictions replaced."""
    target = random_gpt(4, vocab_size=11, block_size=16, sharpness=1.0)
    draft = make_head(kind, target, scale=4.0)
    real, checked = draft.forward, []

    def spy(idx, **kw):
        logits, _ = real(idx, **kw)
        tokens = list(draft.ids)
        n_true = draft.n_known()  # the later drafts of a round chain the draft's own predictions
        want = reference_q(draft, tokens, n_true)
        assert (logits[0, -1] - want).abs().max().item() < 1e-4, f"position {len(tokens)}, {n_true} features known"
        known = draft.known
        assert (known - uncached_features(target, tokens)[:len(known)]).abs().max().item() < 1e-4, "wrong features"
        checked.append(len(tokens))
        return logits, None
    monkeypatch.setattr(draft, "forward", spy)
    _, stats = speculative_generate(target, draft, torch.tensor([[5, 1, 2]]), 40, k=k, temperature=temperature,
                         generator=torch.Generator().manual_seed(0))
    assert len(checked) > 20
    if temperature:
        assert stats.accepted > stats.drafted / 2, "too few drafts kept to exercise the recomputation"


def test_medusa_refuses_k_beyond_its_heads_and_auto_stays_within():
    target = random_gpt(0)
    draft = MedusaDraft(target, n_heads=2)
    with pytest.raises(ValueError, match="at most 2 tokens per round"):
        speculative_generate(target, draft, torch.tensor([[1]]), 5, k=3)
    _, stats = speculative_generate(target, draft, torch.tensor([[1]]), 30, k="auto")
    assert max(K for _, K, _ in stats.rounds) <= 2


def test_heads_refuse_batches_clearly():
    from engine import batched
    target = random_gpt(0)
    draft = EagleDraft(target)
    with pytest.raises(ValueError, match="one sequence at a time"):
        batched.speculative_generate_batch(target, draft, [[1], [2]], 5)


def test_a_draft_given_another_target_is_refused_clearly():
    target, other = random_gpt(0), random_gpt(1)
    for draft in (EagleDraft(target), MedusaDraft(target, n_heads=2)):
        with pytest.raises(ValueError, match="another target"):
            speculative_generate(other, draft, torch.tensor([[1, 2]]), 20, k=2)


def test_load_refuses_a_head_trained_for_another_target(tmp_path):
    target, other = random_gpt(0), random_gpt(1)
    for kind in ("eagle", "medusa"):
        head = make_head(kind, target)
        path = str(tmp_path / f"{kind}.pt")
        heads.save(path, head, {"note": "test"})
        loaded = heads.load(path, target)
        assert type(loaded) is type(head) and loaded.meta == {"note": "test"}
        for (name, a), b in zip(head.state_dict().items(), loaded.state_dict().values()):
            assert (a - b).abs().max().item() < 1e-3, name  # float16 on disk
        with pytest.raises(ValueError, match="trained for another target"):
            heads.load(path, other)
    with pytest.raises(FileNotFoundError, match="train_draft.py --head"):
        heads.load(str(tmp_path / "missing.pt"), target)
    with pytest.raises(ValueError, match="writes the heads of KINDS"):  # a ReadsTarget of a fork's own
        heads.save(str(tmp_path / "other.pt"), heads.ReadsTarget(target))


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_training_a_head_on_a_tiny_corpus(kind, tmp_path, capsys):
    """train_draft.py --head trains the head only, the target frozen, and writes a loadable checkpoint."""
    common = tiny_training(tmp_path)
    target_path = str(tmp_path / "target.pt")
    before = torch.load(target_path, weights_only=True)["state_dict"]
    train_draft.main(["--head", kind, "--target", target_path, "--max_iters", "6", "--eval_interval", "3",
                      "--head_pool", "8", *common])
    out = capsys.readouterr().out
    assert "val alpha (T=1, teacher-forced) by draft position" in out
    target, _ = train_draft.load_checkpoint(target_path)
    head = heads.load(str(tmp_path / f"{kind}.pt"), target)
    assert head.meta["iter"] == 6 and len(head.meta["val_alpha"]) == (2 if kind == "eagle" else 4)
    after = torch.load(target_path, weights_only=True)["state_dict"]
    assert all(torch.equal(before[k], after[k]) for k in before), "the target must stay frozen"


def test_sample_py_and_bench_py_run_the_shipped_heads(capsys):
    """--draft eagle and --draft medusa load checkpoints/eagle.pt and medusa.pt for the shipped target."""
    import bench
    import sample
    sample.main(["--draft", "eagle", "--num_samples", "1", "--max_new_tokens", "20", "--threads", "1"])
    assert "draft eagle (2.07M)" in capsys.readouterr().out
    bench.main(["--draft", "eagle,medusa", "--k", "2,6", "--settings", "t1.0", "--prompts", "1",
                "--max_new_tokens", "8", "--repeats", "1", "--threads", "1"])
    out = capsys.readouterr().out
    assert "--draft medusa proposes at most 4 tokens per round: its rows for K = 6 are left out" in out
    rows = [line.split(" | ")[1:3] for line in out.splitlines() if line.startswith("| t1.0")]
    assert ["2", "eagle tokenwise"] in rows and ["6", "eagle tokenwise"] in rows and ["2", "medusa tokenwise"] in rows
    assert ["6", "medusa tokenwise"] not in rows


@pytest.mark.parametrize("argv,message", [
    (["--draft", "medusa", "--k", "6"], "--draft medusa proposes at most 4 tokens per round: pass --k 4 or less"),
    (["--draft", "eagle", "--batch", "2"], "--draft eagle reads the target's features one sequence at a time"),
])
def test_sample_py_refuses_what_a_head_cannot_do(argv, message):
    import sample
    with pytest.raises(SystemExit, match=message):
        sample.main(argv + ["--num_samples", "1", "--max_new_tokens", "5", "--threads", "1"])


def test_sample_py_refuses_a_shipped_head_for_another_target(tmp_path):
    import sample
    from model import save_checkpoint
    save_checkpoint(str(tmp_path / "t.pt"), random_gpt(0, vocab_size=78, block_size=16),
                    {"tokenizer": torch.load(sample.SHIPPED["target"], weights_only=True)["meta"]["tokenizer"]})
    with pytest.raises(SystemExit, match="--draft eagle: .* was trained for another target"):
        sample.main(["--target", str(tmp_path / "t.pt"), "--draft", "eagle", "--max_new_tokens", "5"])


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_a_head_reads_the_features_fast_py_leaves(kind):
    """With fast.py's FastGPT as the target, the features land on the GPT the head reads: greedy output equals plain
    greedy, and the head reads the target itself only at the call's start and at the window's slides."""
    from engine.fast import FastGPT
    target = random_gpt(3, vocab_size=11, block_size=16)
    draft = make_head(kind, target)
    prompt = torch.tensor([[1, 2, 3]])
    plain, _ = autoregressive_generate(target, prompt, 40, temperature=0)
    spec, _ = speculative_generate(FastGPT(target), draft, prompt, 40, k=3, temperature=0)
    assert spec.tolist() == plain.tolist()
    assert draft.extra_reads == 1 + 4


# ---- heads drafting trees (verifiers/tree.py): each level one forward, tree attention over the head's own cache ----

T1 = dict(temperature=1.0)
TREE_CASES = [  # (k, n new tokens, sampling, block_size, tree keywords)
    (1, 3, T1, 6, dict(branches=(2,), children="sample")),
    (2, 3, T1, 6, dict(branches=(2, 2), children="sample")),
    (2, 3, T1, 6, dict(branches=(1, 2), children="sample", replacement=True)),
    (2, 3, T1, 6, dict(branches=(2, 2), children="top")),
    (3, 3, dict(temperature=1.0, top_k=2), 6, dict(branches=(2, 2), children="sample")),  # depth 3 (4 new tokens:
    # 8,000 branches for eagle; the bonus after a kept depth-3 path is enumerated by the next cases)
    (3, 4, T1, 6, dict(branches=(2, 2), children="top")),
    (3, 4, dict(temperature=1.0, top_k=2), 6, dict(branches=(2, 2), children="sample", budget=5)),
    (3, 4, T1, 6, dict(branches=(3, 3, 3), children="top", budget=5, rerank=True)),  # EAGLE-2's dynamic tree
    (3, 3, dict(temperature=0.0), 6, dict(branches=(2, 2, 2), children="top", budget=4, rerank=True)),
    (2, 4, dict(temperature=0.8, top_p=0.8), 4, dict(branches=(2, 2), children="top")),  # the window slides
]


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "medusa"])
@pytest.mark.parametrize("k,n,sampling,block_size,tree", TREE_CASES)
def test_a_head_drafting_a_tree_gives_the_target_exactly(kind, k, n, sampling, block_size, tree, monkeypatch):
    target = tiny_target(block_size=block_size)
    draft = make_head(kind, target)
    prompt = [2, 0]
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), n, k=k, verify="tree", **tree,
                                       **sampling)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, prompt, n, **sampling))


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_enumeration_of_a_head_tree_detects_a_residual_not_updated(kind, monkeypatch):
    import verifiers.tree
    target = tiny_target()
    draft = make_head(kind, target)
    monkeypatch.setattr(verifiers.tree, "residual", lambda p, q: p)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), 3, k=2, verify="tree", branches=(2, 2),
                                       children="top")[0][0, 2:].tolist()
    got, want = enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], 3)
    assert max(abs(got.get(s, 0) - want.get(s, 0)) for s in want) > 1e-3


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
@pytest.mark.parametrize("tree", [dict(branches=(2, 2), children="sample"),
                                  dict(branches=(3, 3, 3), children="top", budget=8, rerank=True)])
def test_head_trees_pass_chi_square_against_exact_target(kind, tree):
    """False-alarm rate 1e-3 per case (one chi-square test at its 0.999 quantile); the window of 8 slides."""
    torch.manual_seed(0)
    target = random_gpt(0)
    draft = make_head(kind, target)
    prompt, N = [1, 4, 2, 0, 3, 1], 1500
    counts = sample_continuations(target, draft, prompt, 3, N, seed=0, k=3, verify="tree", **tree)
    stat, df = chi_square(counts, exact_joint(target, prompt, 3), N)
    assert stat < chi2_critical(df, 1e-3), f"chi-square {stat:.1f} with {df} dof: not the target's distribution"


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "medusa"])
@pytest.mark.parametrize("tree", [dict(branches=(2, 2), children="top"),
                                  dict(branches=(4, 4, 4), children="top", budget=10, rerank=True)])
def test_greedy_head_trees_equal_greedy_plain_and_read_the_target_only_at_slides(kind, tree):
    """The kept branch's features come from the target's tree forward (model.Features.compacted): had they not,
    the head would read the target again (extra_reads) or draft from wrong features."""
    target = random_gpt(3, vocab_size=11, block_size=16)
    draft = make_head(kind, target)
    prompt = torch.tensor([[1, 2, 3]])
    plain, _ = autoregressive_generate(target, prompt, 40, temperature=0)
    spec, stats = speculative_generate(target, draft, prompt, 40, k=3, temperature=0, verify="tree", **tree)
    assert spec.tolist() == plain.tolist()
    assert draft.extra_reads == 1 + 4, "one read at the call's start and one at each slide of the window"


@torch.no_grad()
def check_head_tree(head, tokens, tree, n_true):
    """Every node's path confidence against the naive path: conf[i] = conf[parent] * softmax(reference logits
    after the parent's path)[token], the reference recomputed from scratch (reference_q); with sampled children
    drawn with replacement, its q is that softmax too."""
    for i, x in enumerate(tree.tokens):
        path = [tree.tokens[j] for j in tree.path(i)[:-1]]
        own = torch.softmax(reference_q(head, tokens + path, n_true).float(), -1)
        parent = tree.confidence(tree.parents[i])
        assert abs(tree.conf[i] - parent * own[x].item()) < 1e-4, f"node {i} of {tree.parents}"
        if tree.qs[i].max() < 1:  # drawn from q (not a point mass): at T = 1, q is the draft's softmax
            assert (tree.qs[i] - own).abs().max().item() < 1e-4


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "medusa"])
@pytest.mark.parametrize("tree", [dict(branches=(2, 2), children="sample", replacement=True),
                                  dict(branches=(3, 3, 3), children="top", budget=9, rerank=True)])
def test_a_head_trees_nodes_equal_its_naive_path(kind, tree, monkeypatch, seed=0):
    """The head's side of the tree against the naive path: each node's q and path confidence, and the features the
    head holds after each round equal the target's uncached ones (the accepted branch's came from the tree forward)."""
    import verifiers.tree
    target = random_gpt(4, vocab_size=11, block_size=16, sharpness=1.0)
    draft = make_head(kind, target, scale=4.0)
    real, grown = verifiers.tree.draft_tree, []

    def draft_tree_checked(drf, tokens, t, k, *args):
        out = real(drf, tokens, t, k, *args)
        known = draft.known
        assert len(known) == len(draft.ids) - 1, "features missing: every token's but the newest come with the rounds"
        assert (known - uncached_features(target, draft.ids, draft)[:-1]).abs().max().item() < 1e-4, "wrong features"
        check_head_tree(draft, list(draft.ids), out[0], draft.n_known())  # the window's tokens
        grown.append(len(out[0].tokens))
        return out

    monkeypatch.setattr(verifiers.tree, "draft_tree", draft_tree_checked)
    _, stats = speculative_generate(target, draft, torch.tensor([[5, 1, 2]]), 40, k=3, verify="tree", **tree,
                                    generator=torch.Generator().manual_seed(seed))
    assert len(grown) > 5 and sum(kept >= 1 for _, _, kept in stats.rounds) >= 5, "too few branches kept"


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_the_checks_catch_features_not_following_the_kept_branch(kind, monkeypatch):
    """The planted bug: the target's tree forward record left as it was (every node, not the kept branch): the
    head finds no features for the kept branch (a sibling sits where it looks). EAGLE reads the target again,
    Medusa drafts from an older feature; both checks see it."""
    import model
    monkeypatch.setattr(model.Features, "compacted", lambda self, n, slots: self)
    if kind == "medusa":  # the check sees the missing features, or Medusa, asked to draft from a feature more than
        # its heads behind the newest token, refuses (which comes first depends on the sampled branches)
        with pytest.raises((AssertionError, ValueError), match="features missing|drafts at most 4 tokens"):
            test_a_head_trees_nodes_equal_its_naive_path(kind, dict(branches=(2, 2), children="sample",
                                                                    replacement=True), monkeypatch)
    else:
        with pytest.raises(AssertionError, match="one read at the call's start"):
            test_greedy_head_trees_equal_greedy_plain_and_read_the_target_only_at_slides(kind, dict(
                branches=(2, 2), children="top"))
