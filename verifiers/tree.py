"""
Draft trees: several guesses at every depth, every node scored in ONE target forward. Lossless.

Sources: Miao et al. 2024, "SpecInfer" (arXiv:2305.09781), tree attention and multi-step verification; Jeon et
al. 2024, "Recursive Speculative Decoding" (arXiv:2402.14160), children drawn without replacement; Sequoia (Chen
et al. 2024, arXiv:2402.12374) and EAGLE-2 (Li et al. 2024, arXiv:2406.16858), trees shaped by the draft's
confidence. In Theorem 3.8's terms a tree raises the expected tokens per round above a chain's, at a wider target
forward (v grows with the nodes) and one draft forward per level (c per level, not per node); expected_accepted is
the theorem's analogue for a fixed shape.

    speculative_generate(target, draft, idx, n, k=3, verify="tree", branches=(2, 2), children="top")
    speculative_generate(target, draft, idx, n, verify="multidraft", n_drafts=3)   # branches=(3,): the root only

A tree (tree_round) is grown by the draft one forward per level and scored in ONE target forward with a tree
attention mask (tree_attention, model.GPT's pos and mask); both caches then keep the accepted path (compact).
Children are sampled without replacement by default (Jeon et al. 2024; replacement=True: i.i.d., SpecInfer) or
are the draft's top tokens, each tested as a point mass. budget=N grows at most N nodes where the draft's path
probability is highest (after EAGLE-2's dynamic trees). rerank=True (children="top") is EAGLE-2's dynamic tree
itself: each depth expands its likeliest nodes, and the budget likeliest nodes of the whole grown tree are kept;
budget="auto" chooses that number each round from the costs and acceptance measured so far (choose_k.AutoBudget).

What it leaves out: EAGLE-2's rerank of sampled children (it would drop sampled nodes by their own values, which
is not exact: docs/variants.md), trees in batches (engine/batched.py), and k="auto" (its entry's auto_k=False:
AutoK models token-wise rounds).
"""

import time
from dataclasses import dataclass, field

import torch

import speculative
from choose_k import AutoBudget
from speculative import Verifier, accept_probability, residual, window_end


def without(q, x):  # (V,), id -> (V,): q with x removed and renormalised (all-zero once q's support is used up)
    q = q.clone()
    q[x] = 0.0
    total = q.sum()
    return q / total if total > 0 else q


def point_mass(q, x):  # (V,), id -> (V,): the q of a token chosen, not drawn (children="top")
    q = torch.zeros_like(q)
    q[x] = 1.0
    return q


def width(branches, d):  # children of each node at depth d (the root is depth 0): branches[d], then 1
    return branches[d] if d < len(branches) else 1


@dataclass
class Tree:
    """A round's draft tree above position t, stored level by level (breadth first: a parent before its children).
    Node i holds a draft token at position t + depth[i] - 1; parents[i] is its parent node, or -1: it follows
    x_{t-1} (the root). qs[i] is the q it was tested against: the one it was drawn from, or a point mass on it.
    tokens [5, 7, 2], parents [-1, -1, 0]: 5 and 7 are guesses for position t, and 2 a guess after 5."""
    tokens: list = field(default_factory=list)
    parents: list = field(default_factory=list)
    depth: list = field(default_factory=list)
    qs: list = field(default_factory=list)
    conf: list = field(default_factory=list)  # path confidence: the product of the draft's probabilities on the path

    def add(self, x, parent, q, conf=1.0):  # -> the new node's index
        self.tokens.append(x)
        self.parents.append(parent)
        self.depth.append(1 if parent < 0 else self.depth[parent] + 1)
        self.qs.append(q)
        self.conf.append(conf)
        return len(self.tokens) - 1

    def confidence(self, i):  # node i's path confidence; the root's (-1) is 1
        return 1.0 if i < 0 else self.conf[i]

    def subtree(self, keep):  # increasing node indices, with their parents among them -> the Tree of those nodes
        new = {-1: -1}
        sub = Tree()
        for i in keep:
            new[i] = sub.add(self.tokens[i], new[self.parents[i]], self.qs[i], self.conf[i])
        return sub

    def children(self, i):  # -> the nodes after node i (-1: the root), in the order they were drawn
        return [j for j, parent in enumerate(self.parents) if parent == i]

    def path(self, i):  # -> the nodes from the root to node i, i included
        return (self.path(self.parents[i]) if self.parents[i] >= 0 else []) + [i]


def draw_children(q, logits, m, children, replacement, generator):  # q (V,), logits (V,) -> [(token, its q)]
    """The m guesses after one node. children="sample": drawn from the draft's q there, i.i.d. (replacement=True,
    SpecInfer) or without replacement (Jeon et al. 2024: q_j is q with c_1..c_{j-1} removed; fewer than m once q's
    support is used up). children="top": the draft's m most likely tokens (by its logits, whose order is q's and
    still ranks the tokens q gives 0, as at T = 0), each tested against a point mass on itself."""
    if children == "top":
        return [(x, point_mass(q, x)) for x in torch.topk(logits, min(m, logits.size(-1))).indices.tolist()]
    drawn, q_j = [], q
    for _ in range(m):
        if q_j.sum() <= 0:  # without replacement: q's whole support already drawn
            break
        drawn.append((speculative.sample(q_j, generator), q_j))
        q_j = q if replacement else without(q_j, drawn[-1][0])
    return drawn


def draft_tree(draft, tokens, t, k, branches, children, replacement, probs, generator, budget=0, rerank=False):
    """Step 1 of a tree round: the draft grows a tree of depth k above position t, level by level, ONE draft
    forward per level over the nodes whose children come next (tree attention in the draft's cache, as in the
    target's). A node's path confidence is the product along its path of the draft's own probabilities (softmax
    of its logits, before temperature, top-k or top-p: at T = 0 the q sampled from is one-hot), EAGLE-2's.
    budget=N (0: none): at most N nodes, each level spending at most its share of what is left (so the tree
    reaches depth k), its nodes getting their children best first by path confidence: the likely paths grow
    deeper. Still exact: how many children a node gets is fixed before they are drawn, from tokens already drawn.
    rerank=True (children="top" only; EAGLE-2's dynamic tree): at depth d the branches[d] nodes of highest path
    confidence get branches[d] top children each, and only they go through the draft; after depth k the budget
    nodes of highest path confidence are kept (0: all), which keeps each kept node's ancestors (a child's
    confidence is at most its parent's). Exact: every choice is made from the draft's outputs, none by a draw.
    -> (Tree, slots): slots[i] is node i's offset in the draft's cache after x_{t-1}, None if it was never fed.
    If the draft's window slides inside the round, each node is read on its own instead (draft.logits re-fills
    the window) and no node stays in its cache."""
    tree, level, fed = Tree(), [-1], []  # level: the nodes whose children come next; fed: the nodes in the cache
    logits = draft.logits(tokens, t, 1)  # (1, V): the draft at the root, after x_{t-1}
    one_window = window_end(t, draft.W) >= t + k - 1
    P = draft.model.cache_len  # x[s:t]; fed[j] goes to slot P + j
    for d in range(k):  # the children of the nodes at depth d sit at position t + d
        new = []
        share = -(-(budget - len(tree.tokens)) // (k - d))  # this level's share of the budget left, rounded up
        order = range(len(level))
        if budget and not rerank:  # the likelier paths get their children first
            order = sorted(order, key=lambda i: -tree.confidence(level[i]))
        for i in order:  # logits[i] (V,): the draft after level[i]'s path
            m = width(branches, d) if not budget or rerank else min(width(branches, d), share - len(new))
            if m <= 0:  # this level's share is spent
                break
            q = speculative.draft_probs(logits[i], probs, t + d, tokens, t, getattr(draft.model, "support", None))
            own = torch.softmax(logits[i].float(), -1)  # the draft's own probabilities: its confidence (EAGLE-2's)
            for x, q_x in draw_children(q, logits[i], m, children, replacement, generator):
                new.append(tree.add(x, level[i], q_x, tree.confidence(level[i]) * own[x].item()))
        # breadth first: the order the draft's cache and the target's forward hold them in
        level = sorted(sorted(new, key=lambda i: -tree.conf[i])[:width(branches, d + 1)]) if rerank else new
        if d == k - 1 or not level or (budget and not rerank and len(tree.tokens) >= budget):  # no level after this
            break
        if one_window:  # level d+1 in one forward: each node sees the prefix and its own ancestors
            index = {node: j for j, node in enumerate(fed + level)}
            pos, mask = tree_attention(P, [index.get(tree.parents[i], -1) for i in fed + level], draft.device)
            logits = draft.forward([tree.tokens[i] for i in level], pos=pos[len(fed):], mask=mask[len(fed):])[0]
            fed += level
        else:  # subtle: the window slides inside the round: every node reads its own path from x[s(t+d+1):]
            rows = []
            for i in level:
                draft.rollback(t)
                rows.append(draft.logits(tokens + [tree.tokens[j] for j in tree.path(i)], t + d + 1, 1)[0])
            logits = torch.stack(rows)  # (len(level), V)
    if not one_window:
        draft.rollback(t)  # the next round re-reads whatever is kept
    slot = {node: j for j, node in enumerate(fed)}
    kept = range(len(tree.tokens))
    if rerank and budget:  # EAGLE-2's rerank: the budget likeliest nodes, ties to the earlier (a parent first)
        kept = sorted(sorted(kept, key=lambda i: (-tree.conf[i], i))[:budget])
        tree = tree.subtree(kept)
    return tree, [slot.get(i) for i in kept]


def tree_attention(P, parents, device):  # P cached tokens, T parent indices -> pos (T,), mask (T, P+T)
    """Positions and attention mask for T new tokens that form a tree on top of P cached ones (SpecInfer's tree
    attention). parents[i] is the index of token i's parent among the new tokens, or -1: it follows the cache.
    Token i sits one position after its parent and sees every cached token, its ancestors, and itself.
    P=2, parents [-1, 0, 0] (a token, then two candidates after it) -> pos [2, 3, 3],
    mask [[1 1 1 0 0], [1 1 1 1 0], [1 1 1 0 1]]."""
    pos, seen = [], []  # seen[i]: the new tokens that token i sees
    for i, parent in enumerate(parents):
        assert -1 <= parent < i, f"token {i}'s parent must be -1 or an earlier token, got {parent}"
        pos.append(P if parent < 0 else pos[parent] + 1)
        seen.append((seen[parent] if parent >= 0 else []) + [i])
    T = len(parents)
    mask = torch.zeros(T, P + T, dtype=torch.bool)
    mask[:, :P] = True  # the cache holds the shared prefix
    mask[[i for i, s in enumerate(seen) for _ in s], [P + j for s in seen for j in s]] = True
    return torch.tensor(pos, device=device), mask.to(device)


def score_tree(target, tokens, t, tree, k):  # CachedModel, ids, t, Tree of depth <= k -> logits (1 + nodes, V)
    """Step 2: the target's logits at every node in ONE forward: the tokens its cache lacks (x_{t-1} at least) in a
    chain, then the tree after them. Row 0 is p at the root (position t, after x_{t-1}), row 1 + i p after node i.
    The cache then holds them all: keep_path keeps the accepted ones."""
    prefix = target.uncached(tokens, t, k + 1)  # slides the window if needed, like target.logits
    parents = list(range(-1, len(prefix) - 1)) + [len(prefix) + j if j >= 0 else len(prefix) - 1 for j in tree.parents]
    pos, mask = tree_attention(target.model.cache_len, parents, target.device)
    return target.forward(prefix + tree.tokens, pos=pos, mask=mask)[0, len(prefix) - 1:]  # (1 + nodes, V)


def walk_tree(tree, p, generator, check=lambda row: None):  # Tree, p (1 + nodes, V) -> (kept nodes, next, tested)
    """Step 3: from the root down. At a node, r = p there; try its children in the order they were drawn: keep
    child c_j with probability min(1, r(c_j) / q_j(c_j)) and go down to it; else r = norm(max(0, r - q_j)), the
    next child. All rejected: the next token ~ r. A leaf: the bonus token ~ p there. Each try is one speculative
    step from q_j towards r, so the token after the kept path is distributed as p (SpecInfer, Jeon et al.).
    tested: (depth, sibling rank, kept?) for every child tried, for the acceptance by depth and rank.
    check(row) is called before row `row` of p is read: a node the walk never reaches may have no distribution."""
    node, path, tested = -1, [], []
    while True:
        check(node + 1)
        r = p[node + 1]  # the target after the path so far
        for rank, child in enumerate(tree.children(node)):
            x, q = tree.tokens[child], tree.qs[child]
            kept = speculative.coin(accept_probability(r[x].item(), q[x].item()), generator)
            tested.append((tree.depth[child], rank, kept))
            if kept:
                break
            r = residual(r, q)  # rejected: the next sibling is tested against what is left of p
        else:  # every child rejected, or none (a leaf)
            return path, speculative.sample(r, generator), tested
        node = child
        path.append(node)


def keep_path(model, t, offsets):  # CachedModel, the kept nodes' offsets in its cache after x_{t-1}
    """After a tree forward: keep the kept nodes in the cache, right after x_{t-1}; forget the other nodes."""
    first = t - model.start  # the cache slot of position t
    model.model.compact(first, [first + i for i in offsets])


# a list to append each tree round's (K, nodes, tested, grown) to (bench.tree_report); None: nothing kept.
# grown: (parent, path confidence, on the kept path?) for every node: the shape, and EAGLE-2's calibration
tree_trace = None


def tree_round(target, draft, tokens, k, probs, generator, branches, children, replacement, budget=0, rerank=False):
    """A tree of drafts of depth k (SpecInfer, Miao et al. 2024; Sequoia; EAGLE-2): each node at depth d-1 (the
    root: depth 0) has branches[d-1] children at depth d, 1 beyond len(branches). The draft grows it one
    forward per level, the target scores every node in ONE forward, walk_tree keeps a path, and both caches keep
    that path only. budget=N: at most N nodes, grown where the draft's path probability is highest (draft_tree);
    rerank=True: EAGLE-2's dynamic tree (draft_tree).
    Appends 1..k+1 tokens; returns how many drafts it kept. Lossless for children="sample" and "top" alike, with
    or without a budget (the shape and the guesses depend only on the draft's outputs). k="auto" is refused (its
    entry's auto_k=False): AutoK models token-wise rounds (Theorem 3.8) and times (K+1)-token forwards; a tree's
    forwards are wider.
    """
    if k == 0:  # the last token of a call, or at a window change: nothing to draft
        return speculative.speculative_round(target, draft, tokens, 0, probs, generator)
    t, tic = len(tokens), time.perf_counter()
    auto = budget if isinstance(budget, AutoBudget) else (
        AutoBudget.remembered(target.model, draft.model) if budget == "auto" else None)
    tree, slots = draft_tree(draft, tokens, t, k, branches, children, replacement, probs, generator,
                             0 if auto else budget, rerank)  # 1.
    if auto:  # budget="auto": the N nodes of highest confidence, N from the measured costs (choose_k.AutoBudget)
        order = sorted(range(len(tree.tokens)), key=lambda i: (-tree.conf[i], i))
        before = len(target.uncached(tokens, t, k + 1))  # the tokens the target's forward scores ahead of the nodes
        kept = sorted(order[:auto.choose([tree.conf[i] for i in order], before)])
        tree, slots = tree.subtree(kept), [slots[i] for i in kept]
    logits = score_tree(target, tokens, t, tree, k)  # 2. (1 + nodes, V), ONE target forward
    p, depth = probs(logits), [0] + tree.depth  # row i: the target at position t + depth[i]
    check = lambda i: speculative.checked(p[i], logits[i], "target", t + depth[i], tokens, t)
    path, after, tested = walk_tree(tree, p, generator, check)  # 3.
    keep_path(target, t, path)
    if any(a is not None for a in slots):  # else the draft's cache holds x[s:t] at most (rolled back, or no level fed)
        keep_path(draft, t, [slots[i] for i in path if slots[i] is not None])  # (a fed node's ancestors were fed)
    tokens += [tree.tokens[i] for i in path] + [after]
    if auto:  # what this round measured; its forward only where it read no prompt (its width is the tree's)
        width, seconds = target.forwards[-1]
        timed = width == before + len(tree.tokens)
        auto.update(sum(tree.conf), len(path), width if timed else None, seconds,
                    time.perf_counter() - tic - seconds)
    if tree_trace is not None:
        tree_trace.append((k, len(tree.tokens), tested, [(parent, c, i in path) for i, (parent, c) in
                                                         enumerate(zip(tree.parents, tree.conf))]))
    return len(path)


def multidraft_round(target, draft, tokens, k, probs, generator, n_drafts, replacement):
    """n_drafts candidates at the root, each continued by a chain of k-1 drafts: the tree of branches=(n_drafts,)
    with sampled children. At the root this is recursive rejection sampling (r_1 = p_0; keep c_j with probability
    min(1, r_j(c_j) / q_j(c_j)), else r_{j+1} = norm(max(0, r_j - q_j))), then token-wise along the kept chain."""
    return tree_round(target, draft, tokens, k, probs, generator, (n_drafts,), "sample", replacement)


def expected_accepted(acceptance, widths):  # {(depth, rank): a}, children per node at depth 1..K -> E[kept]
    """Theorem 3.8 has no tree form; this is its analogue for a fixed shape, from acceptance measured by depth d and
    sibling rank j: a_{d,j} = P(the j-th child is kept | its parent was kept, siblings 0..j-1 were not). The walk
    goes below depth d-1 with beta_d = 1 - prod_j (1 - a_{d,j}), so E[drafts kept] = sum_d prod_{i <= d} beta_i.
    A chain (widths all 1, a_{d,0} = alpha) gives alpha + ... + alpha^K, Theorem 3.8's E[tokens] - 1."""
    total, reach = 0.0, 1.0
    for d, m in enumerate(widths, start=1):
        miss = 1.0
        for j in range(m):
            miss *= 1.0 - acceptance.get((d, j), 0.0)
        reach *= 1.0 - miss
        total += reach
    return total


def expected_accepted_tree(parents, acceptance):  # one tree's parents (-1: the root), {(depth, rank): a} -> E[kept]
    """expected_accepted for any shape (a dynamic tree's): node j, the rank-th child of its parent, is kept with
    probability P(parent kept) * prod_{i < rank} (1 - a_{d,i}) * a_{d,rank}; E[drafts kept] is their sum."""
    reach, seen, total = {-1: 1.0}, {}, 0.0  # seen[parent]: (children so far, P(all of them rejected))
    depth = {-1: 0}
    for j, parent in enumerate(parents):
        depth[j] = depth[parent] + 1
        rank, missed = seen.get(parent, (0, 1.0))
        a = acceptance.get((depth[j], rank), 0.0)
        reach[j] = reach[parent] * missed * a
        seen[parent] = (rank + 1, missed * (1.0 - a))
        total += reach[j]
    return total


def acceptance_by_depth_and_rank(trace):  # tree_trace's entries -> {(depth, rank): kept / tested}
    tried, kept = {}, {}
    for _, _, tested, _ in trace:
        for d, j, ok in tested:
            tried[d, j] = tried.get((d, j), 0) + 1
            kept[d, j] = kept.get((d, j), 0) + ok
    return {key: kept[key] / tried[key] for key in tried}



def check_tree(branches, children, replacement, budget=0, rerank=False):
    if not isinstance(branches, tuple) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                                  for b in branches):
        raise ValueError(f"branches must be a tuple of ints >= 1, the children of each node at depth 0, 1, ... "
                         f"(e.g. (2, 2); --branches 2,2), got {branches!r}")
    if children not in ("sample", "top"):
        raise ValueError(f"children must be 'sample' (drawn from the draft's q) or 'top' (its most likely tokens, "
                         f"each a point mass), got {children!r}")
    if not isinstance(replacement, bool):
        raise ValueError(f"replacement must be True (i.i.d. children) or False (distinct), got {replacement!r}")
    if budget == "auto" or isinstance(budget, AutoBudget):
        if not rerank:
            raise ValueError("budget='auto' chooses how many of EAGLE-2's reranked nodes the target scores: pass "
                             "rerank=True and children='top' (--rerank --children top)")
    elif not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"budget must be an int >= 0, the most nodes a tree may have (0: the fixed shape of "
                         f"branches), or 'auto' with rerank=True, got {budget!r}")
    if not isinstance(rerank, bool):
        raise ValueError(f"rerank must be True (EAGLE-2's dynamic tree) or False, got {rerank!r}")
    if rerank and children != "top":
        raise ValueError("rerank=True keeps the nodes of highest path confidence after they are drawn: exact only "
                         "for children='top' (chosen from the draft's logits, each a point mass); a sampled child "
                         "kept by its own probability no longer follows q (docs/variants.md). Pass children='top'")


def check_multidraft(n_drafts, replacement):
    if not isinstance(n_drafts, int) or n_drafts < 1:
        raise ValueError(f"n_drafts (candidates at the root) must be an int >= 1, got {n_drafts!r}")
    check_tree((n_drafts,), "sample", replacement)



speculative.ROUNDS.update(
    multidraft=Verifier(multidraft_round, dict(n_drafts=2, replacement=False), check=check_multidraft, auto_k=False,
                        trees=True,
                        doc="several drafts at the root, one tree forward (SpecInfer; Jeon et al. 2024): lossless; "
                            "the tree with branches=(n_drafts,)",
                        help=dict(n_drafts="with --verify multidraft: candidates at the root",
                                  replacement="with --verify multidraft or tree: i.i.d. candidates (default: distinct)")),
    tree=Verifier(tree_round, dict(branches=(2, 2), children="sample", replacement=False, budget=0, rerank=False),
                  check=check_tree,
                  auto_k=False, trees=True,
                  doc="a draft tree of depth K, one target forward (SpecInfer, Sequoia, EAGLE-2): lossless",
                  help=dict(branches="with --verify tree: children of each node at depth 0, 1, ..., then 1 (e.g. 2,2)",
                            children="with --verify tree: sample (drawn from the draft's q) or top (its most likely "
                                     "tokens, each a point mass)",
                            budget="with --verify tree: at most this many nodes, grown best first by the draft's path "
                                   "probability (EAGLE-2); 0: the fixed shape; auto (with --rerank): chosen each round "
                                   "from the measured costs",
                            rerank="with --verify tree --children top: EAGLE-2's dynamic tree: expand the branches[d] "
                                   "likeliest nodes of each depth, keep the budget likeliest of all")),
)
