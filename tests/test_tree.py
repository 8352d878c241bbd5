"""Draft trees (verifiers/tree.py's tree_round): every branch of the real code enumerated, as in
tests/test_variants.py, for both children rules (sampled, i.i.d. or without replacement; the draft's top tokens as
point masses), depths 1..3, temperatures, top-k, top-p, sliding windows and K larger than the tokens left; then real GPTs (eager and fast,
the tree in both caches), a chi-square test, greedy trees against plain greedy, and planted bugs the checks catch."""

import json

import pytest
import torch

import speculative
import verifiers.tree  # registers verify="tree" and the others
from engine.fast import FastGPT
from speculative import SamplingError, autoregressive_generate, speculative_generate
from tests.conftest import TableModel, random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint
from tests.test_statistics import chi2_critical, chi_square, exact_joint, next_probs, sample_continuations
from tests.test_stop import cut_at_stop
from tests.test_variants import first_round_tokens, output_distribution
from drafts.ngram import NGramDraft
from verifiers.lossy import total_variation
from verifiers.tree import Tree, expected_accepted, expected_accepted_tree

T1, K2 = dict(temperature=1.0), dict(temperature=1.0, top_k=2)  # K2: q's support has 2 tokens, fewer branches

CASES = [  # (k, n new tokens, sampling, target block_size, draft block_size, branches, children, replacement)
    (1, 3, T1, 8, 8, (2,), "sample", False),
    (2, 3, T1, 8, 8, (2, 2), "sample", False),
    (2, 3, T1, 8, 8, (1, 2), "sample", True),  # i.i.d. children: the same token can be tried twice
    (2, 3, T1, 8, 8, (3, 2), "top", False),
    (3, 4, K2, 8, 8, (2, 2), "sample", False),  # depth 3
    (3, 4, T1, 8, 8, (2, 2), "top", False),
    (2, 3, dict(temperature=2.0), 8, 8, (2,), "top", False),
    (2, 3, dict(temperature=0.5, top_k=2), 8, 8, (2, 2), "sample", True),
    (2, 3, dict(temperature=0.0), 8, 8, (2, 2), "top", False),  # greedy: one-hot p and q
    (2, 3, dict(temperature=0.0), 8, 8, (2, 2), "sample", False),
    (2, 4, dict(temperature=0.8, top_p=0.8), 4, 6, (2, 2), "sample", False),  # the windows slide
    (2, 4, dict(temperature=1.0, top_p=0.8), 4, 6, (2, 2), "top", False),
    (3, 3, T1, 8, 3, (2, 2), "top", False),  # the draft's window slides inside rounds: node by node
    (3, 2, T1, 8, 8, (2, 2), "top", False),  # K larger than the tokens left (n = 2: K = 1)
]


@pytest.mark.parametrize("k,n,sampling,w_target,w_draft,branches,children,replacement", CASES)
def test_tree_output_distribution_equals_target_exactly(k, n, sampling, w_target, w_draft, branches, children,
                                                        replacement, monkeypatch):
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling,
                                    w_target=w_target, w_draft=w_draft, verify="tree", branches=branches,
                                    children=children, replacement=replacement)
    assert_same_distribution(got, want)


@pytest.mark.parametrize("k,n,sampling,branches,children,budget", [
    (3, 4, K2, (2, 2), "sample", 5),  # shares 2, 2, 1: only the likelier depth-1 node branches
    (3, 4, T1, (2, 2), "top", 5),
    (3, 4, K2, (2,), "sample", 4),  # shares 2, 1, 1: depths 2 and 3 along the likelier path only
])
def test_tree_with_a_budget_is_exact(k, n, sampling, branches, children, budget, monkeypatch):
    """budget=N: which nodes get children depends on the draft's path probabilities, fixed before they are drawn."""
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling,
                                    verify="tree", branches=branches, children=children,
                                    budget=budget)
    assert_same_distribution(got, want)


@pytest.mark.parametrize("k,n,sampling,branches,budget", [
    (2, 3, T1, (2, 2), 3),  # the root's 2 children, then the likelier one's better child
    (3, 4, T1, (3, 2, 2), 5),
    (3, 4, K2, (2, 2, 2), 0),  # rerank without a budget: every grown node stays
    (2, 3, dict(temperature=0.0), (3, 3), 4),
    (2, 4, dict(temperature=1.0, top_p=0.8), (2, 2), 3),  # the windows slide
])
def test_eagle_2s_dynamic_tree_is_exact(k, n, sampling, branches, budget, monkeypatch):
    """rerank=True: which nodes are expanded and which are kept depends on the draft's outputs alone (its top
    tokens, each a point mass, ranked by the product of its probabilities along the path)."""
    got, want = output_distribution(monkeypatch, n=n, k=k, sampling=sampling, verify="tree", branches=branches,
                                    children="top", budget=budget, rerank=True)
    assert_same_distribution(got, want)


def test_eagle_2s_dynamic_tree_expands_and_keeps_the_likeliest_nodes(monkeypatch):
    """Each depth expands the branches[d] nodes of highest path confidence; the budget likeliest of all grown nodes
    are kept, with their ancestors (a child is never more likely than its parent); the target sees only those."""
    target = random_gpt(0, vocab_size=11, block_size=32, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=32, n_layer=1, n_head=1, n_embd=8, sharpness=1.0)
    grown, real = [], Tree.subtree
    monkeypatch.setattr(Tree, "subtree", lambda tree, keep: (lambda sub: grown.append((tree, keep, sub)) or sub)(
        real(tree, keep)))
    _, stats = speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 30, k=3, verify="tree",
                                    branches=(3, 3, 3), children="top", budget=7, rerank=True,
                                    generator=torch.Generator().manual_seed(0))
    assert len(grown) >= 5
    for tree, keep, sub in grown:
        assert len(sub.tokens) == min(7, len(tree.tokens)) and all(p in keep or p < 0 for i in keep
                                                                    for p in [tree.parents[i]])
        assert min(tree.conf[i] for i in keep) >= max([tree.conf[i] for i in range(len(tree.tokens)) if i not in keep],
                                                      default=0.0)
        assert all(c <= tree.confidence(p) + 1e-12 for c, p in zip(tree.conf, tree.parents))
        for d in range(1, max(tree.depth)):  # only the 3 likeliest nodes of depth d have children (K < 3 near the end)
            parents = {p for p, dp in zip(tree.parents, tree.depth) if dp == d + 1}
            level = sorted((i for i, dp in enumerate(tree.depth) if dp == d), key=lambda i: -tree.conf[i])
            assert parents <= set(level[:3]) and len(parents) == min(3, len(level))


def test_the_tree_prediction_of_any_shape():
    """expected_accepted_tree equals expected_accepted on a shape with as many children at every node of a depth,
    and on a lopsided one sums each node's chance to be kept."""
    a = {(1, 0): 0.6, (1, 1): 0.3, (2, 0): 0.5, (2, 1): 0.2, (3, 0): 0.4}
    full = [-1, -1, 0, 0, 1, 1, 2, 4]  # depth 3 under one node of each pair only: not uniform
    assert abs(expected_accepted_tree([-1, -1, 0, 0, 1, 1], a) - expected_accepted(a, [2, 2])) < 1e-12
    reach = {0: 0.6, 1: 0.4 * 0.3}
    reach.update({2: reach[0] * 0.5, 3: reach[0] * 0.5 * 0.2, 4: reach[1] * 0.5, 5: reach[1] * 0.5 * 0.2})
    reach.update({6: reach[2] * 0.4, 7: reach[4] * 0.4})
    assert abs(expected_accepted_tree(full, a) - sum(reach.values())) < 1e-12


def test_enumeration_detects_sampled_children_dropped_by_their_own_probability(monkeypatch):
    """Why a budget decides before the draw: keeping only the sampled children the draft finds likely (a rerank
    after drawing, as EAGLE-2 does with its top tokens) leaves children that no longer follow q. Biased."""
    real = verifiers.tree.draw_children
    rerank = lambda q, *args: (lambda drawn: [c for c in drawn if q[c[0]] >= 0.3] or drawn[:1])(real(q, *args))
    monkeypatch.setattr(verifiers.tree, "draw_children", rerank)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1, verify="tree", branches=(2,))
    assert total_variation(got, want) > 1e-3, total_variation(got, want)


def test_a_budget_caps_the_nodes_and_grows_the_likeliest_paths(monkeypatch):
    target = random_gpt(0, vocab_size=11, block_size=32, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=32, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    grown = []
    real = verifiers.tree.draft_tree
    monkeypatch.setattr(verifiers.tree, "draft_tree", lambda *args: (lambda out: grown.append(out[0]) or out)(real(*args)))
    speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 20, k=4, verify="tree", branches=(2, 2, 2),
                         children="top", budget=7, generator=torch.Generator().manual_seed(0))
    for tree in grown:
        assert len(tree.tokens) <= 7
        if max(tree.depth) == 4:  # shares of 7/4, 5/3, 3/2 and 1 nodes: 2 at each level but the last
            assert tree.depth == [1, 1, 2, 2, 3, 3, 4] and len(set(tree.parents[2:4])) == 1  # one node branches
    assert any(max(tree.depth) == 4 for tree in grown)


@pytest.mark.parametrize("children", ["sample", "top"])
def test_tree_with_the_ngram_draft_is_exact(children, monkeypatch):
    """A point-mass q: "sample" draws its one token once, "top" adds the draft's next guesses (ties at q = 0)."""
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1,
                                    draft=NGramDraft(3, n=2), verify="tree", branches=(2, 2),
                                    children=children)
    assert_same_distribution(got, want)


@pytest.mark.parametrize("children,replacement", [("sample", False), ("sample", True), ("top", False)])
def test_enumeration_detects_a_residual_not_updated_after_a_rejected_sibling(children, replacement, monkeypatch):
    """The planted bug, once per rule: the next sibling tested against p again instead of norm(max(0, p - q_j))."""
    monkeypatch.setattr(verifiers.tree, "residual", lambda p, q: p)
    branches = (2, 2) if children == "top" else (1, 2)  # siblings at depth 2 (the root's are multidraft's test)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1,
                                    verify="tree", branches=branches, children=children,
                                    replacement=replacement)
    assert total_variation(got, want) > 1e-3, total_variation(got, want)


def test_enumeration_detects_top_children_tested_against_the_drafts_q(monkeypatch):
    """A top child is chosen, not drawn from q: testing it with min(1, p/q) instead of its point mass is biased."""
    monkeypatch.setattr(verifiers.tree, "point_mass", lambda q, x: q)
    got, want = output_distribution(monkeypatch, n=3, k=2, sampling=T1, verify="tree", branches=(2, 2), children="top")
    assert total_variation(got, want) > 1e-3


def test_multidraft_is_the_tree_with_branches_n():
    """Same seed, same tokens: multidraft runs the tree code, not a second implementation."""
    target, draft = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0), random_gpt(
        1, vocab_size=11, block_size=16, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    run = lambda **verify: speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 40, k=3,
                                                generator=torch.Generator().manual_seed(0), **verify)[0].tolist()
    assert run(verify="multidraft", n_drafts=3, replacement=True) == run(
        verify="tree", branches=(3,), children="sample", replacement=True)


def test_a_tree_keeps_more_tokens_per_round_than_a_chain(monkeypatch):
    """Exact expected tokens of the first round on the toy pair, K = 2: more guesses at each depth, more kept."""
    chain = first_round_tokens(monkeypatch, 2, T1)
    for children in ("sample", "top"):
        tree = first_round_tokens(monkeypatch, 2, T1, verify="tree", branches=(2, 2), children=children)
        assert tree > chain + 1e-3, (children, tree, chain)
    assert abs(first_round_tokens(monkeypatch, 2, T1, verify="tree", branches=(1,)) - chain) < 1e-12  # a chain


@pytest.mark.parametrize("decoder", ["eager", "fast"])
@pytest.mark.parametrize("children,sampling", [("top", T1), ("sample", dict(temperature=1.0, top_k=2))])
def test_tree_on_real_gpts_gives_the_target_exactly(decoder, children, sampling, monkeypatch):
    """Through model.py's (or engine/fast.py's) tree attention in BOTH caches and their compaction: the window of 8
    slides at position 8, and a tree of 2 x 2 holds more tokens than the window has positions. Within 1e-5:
    float32 logits of a tree forward differ from a full forward's by rounding."""
    target, draft = random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
    prompt = [1, 4, 2, 0, 3]
    want = exact_joint(target, prompt, 4, **sampling)  # from full, uncached forwards
    if decoder == "fast":
        target, draft = FastGPT(target), FastGPT(draft)
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), 4, k=2, verify="tree", branches=(2, 2),
                                       children=children, **sampling)[0][0, len(prompt):].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), want, tol=1e-5)


def test_tree_samples_pass_chi_square_against_exact_target(gpt_pair):
    """Real GPTs, sampled children, depth 2: false-alarm rate 1e-3 (one chi-square test at its 0.999 quantile)."""
    target, draft = gpt_pair
    prompt, N = [1, 4, 2, 0, 3, 1], 1500
    joint = exact_joint(target, prompt, 3)
    counts = sample_continuations(target, draft, prompt, 3, N, seed=0, k=2, verify="tree", branches=(2, 2))
    stat, df = chi_square(counts, joint, N)
    assert stat < chi2_critical(df, 1e-3), f"chi-square {stat:.1f} with {df} dof: not the target's distribution"


@pytest.mark.parametrize("children", ["top", "sample"])
def test_greedy_tree_equals_greedy_plain(children):
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=16, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(target, prompt, 40, temperature=0.0)
    tree, stats = speculative_generate(target, draft, prompt, 40, k=3, temperature=0.0, verify="tree",
                                       branches=(2, 2), children=children)
    assert tree.tolist() == plain.tolist()
    assert stats.target_calls == len(stats.rounds), "one target forward per round, however large the tree"


def test_the_draft_grows_the_tree_one_forward_per_level():
    """K draft forwards per round (the root, then one per level) where the draft's window holds the round, and
    node by node where it slides inside it."""
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    _, stats = speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 30, k=3, verify="tree",
                                    branches=(2, 2), children="top", generator=torch.Generator().manual_seed(0))
    one_window = lambda t, K: speculative.window_end(t, 12) >= t + K - 1
    nodes_fed = lambda K: sum(2 ** min(d, 2) for d in range(1, K))  # top: exactly 2, 4, 4, ... nodes per level
    assert stats.draft_calls == sum(K if one_window(t, K) else 1 + nodes_fed(K) for t, K, _ in stats.rounds if K)
    assert any(not one_window(t, K) for t, K, _ in stats.rounds if K > 1), "the test should cover both paths"


@pytest.mark.parametrize("decoder", ["eager", "fast"])
def test_every_nodes_q_equals_the_drafts_full_forward_over_its_path(decoder, monkeypatch):
    """The draft's side of the tree, against the naive path: each node was drawn from q at its parent, which must
    equal the draft's uncached forward over the window and the parent's path. Rounds after the first read their
    root q from the cache that compact() left, and the window of 12 slides inside some rounds (node by node)."""
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    model = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    draft, real, trees = (FastGPT(model) if decoder == "fast" else model), verifiers.tree.draft_tree, []

    def draft_tree_checked(drf, tokens, t, k, *args):
        tree, cached = real(drf, tokens, t, k, *args)
        for i in range(len(tree.tokens)):
            want = next_probs(model, tokens + [tree.tokens[j] for j in tree.path(i)[:-1]])
            assert (tree.qs[i] - want).abs().max().item() < 1e-5, f"node {i} of {tree.parents} at t={t}"
        trees.append(len(tree.tokens))
        return tree, cached

    monkeypatch.setattr(verifiers.tree, "draft_tree", draft_tree_checked)
    speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 30, k=3, verify="tree", branches=(2, 2),
                         replacement=True, generator=torch.Generator().manual_seed(0))
    assert len(trees) > 5


def test_expected_accepted_is_theorem_3_8_for_a_chain_and_grows_with_siblings():
    alpha, K = 0.7, 4
    chain = expected_accepted({(d, 0): alpha for d in range(1, K + 1)}, [1] * K)
    assert abs(chain - ((1 - alpha ** (K + 1)) / (1 - alpha) - 1)) < 1e-12
    tree = expected_accepted({(d, j): alpha for d in range(1, K + 1) for j in range(2)}, [2, 2, 1, 1])
    beta = 1 - 0.3 ** 2  # two tries at depths 1 and 2
    assert abs(tree - (beta + beta ** 2 + beta ** 2 * alpha + beta ** 2 * alpha ** 2)) < 1e-12


@pytest.mark.parametrize("children", ["sample", "top"])
def test_the_stop_rule_holds_for_trees(children, monkeypatch):
    """A tree round can keep drafts past a stop sequence; the core drops them, as for a chain."""
    target, draft, n, stop = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8), 3, [[0, 2]]
    want = cut_at_stop(target_joint(target, [2, 0], n), stop)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), n, k=2, stop=stop, verify="tree",
                                       branches=(2,) if children == "sample" else (2, 2), children=children)[0][
        0, 2:].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), want)


@pytest.mark.parametrize("broken", ["target", "draft"])
@pytest.mark.parametrize("children", ["sample", "top"])
def test_a_gpt_with_nan_weights_is_named_in_the_error(broken, children):
    pair = {"target": random_gpt(0), "draft": random_gpt(1, n_layer=1, n_embd=8, n_head=1)}
    with torch.no_grad():
        pair[broken].transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(SamplingError, match=f"from the {broken}: its logits hold NaN") as e:
        speculative_generate(pair["target"], pair["draft"], torch.tensor([[1, 2]]), 8, k=3, verify="tree",
                             children=children)
    assert e.value.tokens == [1, 2] and e.value.position == 2


def test_tree_path_and_children_follow_the_parents():
    tree = Tree()
    for x, parent in [(5, -1), (7, -1), (2, 0), (4, 1), (9, 2)]:
        tree.add(x, parent, None)
    assert tree.children(-1) == [0, 1] and tree.children(0) == [2] and tree.path(4) == [0, 2, 4]
    assert tree.depth == [1, 1, 2, 2, 3]


def test_bench_reports_trees_beside_the_chain(capsys, tmp_path):
    import bench
    bench.main(["--tree_shapes", "1", "2,2", "2,2@auto", "--k", "2", "--settings", "t1.0", "--prompts", "1",
                "--prompt_len", "16", "--max_new_tokens", "12", "--repeats", "1", "--json", str(tmp_path / "tree.json")])
    out = capsys.readouterr().out
    rows = [line.split(" | ")[3:5] for line in out.splitlines() if line.startswith("| t1.0")]
    assert rows == [["1", "sample"], ["2,2", "sample"], ["1", "top"], ["2,2", "top"], ["2,2@auto", "top"]]
    assert ", K=2, sample, 2,2: " in out and "tokens per target call against the chain" in out
    assert len(json.load(open(tmp_path / "tree.json"))["tree_rows"]) == 5


@pytest.mark.parametrize("kwargs,message", [
    (dict(branches=(2, 0)), "branches must be a tuple of ints >= 1"),
    (dict(branches=2), "branches must be a tuple of ints >= 1"),
    (dict(children="best"), "children must be 'sample'"),
    (dict(replacement=1), "replacement must be True"),
    (dict(budget=-1), "budget must be an int >= 0"),
    (dict(budget="auto"), "budget='auto' chooses how many of EAGLE-2's reranked nodes"),
    (dict(rerank=1), "rerank must be True"),
    (dict(rerank=True, budget=4), "exact only for children='top'"),  # children="sample" by default
    (dict(k="auto"), "verify='tree': k='auto' chooses K for token-wise rounds"),
])
def test_bad_tree_arguments_are_refused_clearly(kwargs, message):
    k = kwargs.pop("k", 2)
    with pytest.raises(ValueError, match=message):
        speculative_generate(TableModel(seed=0), TableModel(seed=1), torch.tensor([[2, 0]]), 3, k=k, verify="tree",
                             **kwargs)


# ---- budget="auto": the dynamic tree's size from the measured costs (choose_k.AutoBudget) ---------------------------

def test_the_auto_budget_scores_the_whole_tree_where_width_is_free_and_a_chain_where_each_node_costs_a_step():
    """(1 + s * summed confidence) / cost of the forward over the N likeliest nodes: with every width as dear as a
    step (a GPU) all 6 nodes; with a step per token (int4 on a CPU without bfloat16 units) the first one alone,
    since the next node's confidence (0.4) adds less than its step; s, the kept drafts per unit of confidence, comes
    from the rounds so far (an overconfident draft is believed less)."""
    from choose_k import AutoBudget
    conf = [0.9, 0.4, 0.3, 0.2, 0.1, 0.05]
    assert AutoBudget(costs=lambda width: 1.0).choose(conf) == 6
    assert AutoBudget(costs=lambda width: float(width)).choose(conf) == 1
    moderate = AutoBudget(costs=lambda width: 1.0 + 0.1 * width)  # the forward after x_{t-1}: width 1 + N
    assert moderate.choose(conf) == 4  # (1 + 1.8) / 1.5 = 1.87 beats N = 3's 1.86 and N = 5's 1.81
    for _ in range(32):  # rounds that kept a fifth of what the draft's confidence promised
        moderate.update(predicted=2.0, kept=0.4)
    assert abs(moderate.scale - (32 * 0.4 + 2) / (32 * 2.0 + 2)) < 1e-12 and moderate.choose(conf) == 1  # 1.002 > 0.993
    clock = AutoBudget()
    assert clock.choose(conf) == 6  # nothing measured: the whole tree, whose forward is then measured
    clock.update(2.0, 1, 7, 7.0, 0.0)
    assert clock.choose(conf) < 6  # one width read: cost in proportion to width, so a narrower tree is read next
    clock = AutoBudget()
    for width, seconds in ((7, 7.0), (2, 2.0)) * 4:
        clock.update(1.0, 1, width, seconds, 0.0)
    assert clock.choose(conf) == 1  # the fitted line costs a step per token


@pytest.mark.parametrize("k,n,sampling,costs", [
    (2, 3, T1, lambda width: 1.0 + 0.3 * width),
    (3, 4, K2, lambda width: float(width)),
    (2, 4, dict(temperature=1.0, top_p=0.8), lambda width: 1.0),  # the windows slide
])
def test_the_auto_budget_keeps_the_dynamic_tree_exact(k, n, sampling, costs, monkeypatch):
    """N comes from the draft's confidences and from earlier rounds (the calibration s), never from this round's
    draws: every branch enumerated, with a new AutoBudget each run (fixed costs, so the branches replay)."""
    from choose_k import AutoBudget
    made = []
    target, draft = TableModel(seed=0, block_size=8 if n < 4 else 4), TableModel(seed=1, block_size=8)
    run = lambda: speculative_generate(target, draft, torch.tensor([[2, 0]]), n, k=k, verify="tree",
                                       branches=(2, 2, 2), children="top", rerank=True,
                                       budget=made.append(AutoBudget(costs=costs)) or made[-1], **sampling)[0][0, 2:].tolist()
    assert_same_distribution(enumerate_branches(run, monkeypatch), target_joint(target, [2, 0], n, **sampling))
    sizes = {N for budget in made for _, N in budget.chosen}
    assert sizes and (len(sizes) > 1 or costs(1) == 1.0), sizes


def test_budget_auto_runs_with_the_clock_and_remembers_per_pair(capsys):
    from choose_k import AutoBudget
    target, draft = random_gpt(0, vocab_size=11, block_size=32), random_gpt(1, vocab_size=11, block_size=32, n_layer=1)
    out, stats = speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 20, k=3, verify="tree",
                                      branches=(3, 3, 3), children="top", rerank=True, budget="auto",
                                      generator=torch.Generator().manual_seed(0))
    memory = AutoBudget.remembered(target, draft)
    assert out.size(1) == 23 and memory.chosen and memory.target_s, memory.chosen
    assert AutoBudget.remembered(target, draft) is memory and AutoBudget.remembered(draft, target) is not memory
    with pytest.raises(ValueError, match="budget='auto' chooses how many of EAGLE-2's reranked nodes"):
        speculative_generate(target, draft, torch.tensor([[3]]), 4, k=2, verify="tree", budget="auto")
