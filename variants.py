"""
Beyond Chen et al.: other verifiers and drafters for speculative_generate, each a short function beside its math.

speculative.py stays the readable core (Algorithm 2, token-wise verification). These plug into it:

    speculative_generate(target, draft, idx, n, verify="block")             # lossless, >= token-wise tokens/round
    speculative_generate(target, NGramDraft(V, n=3), idx, n)                # lossless, no draft model at all
    speculative_generate(target, draft, idx, n, verify="multidraft", n_drafts=3)   # lossless, 3 root candidates
    speculative_generate(target, draft, idx, n, k=3, verify="tree", branches=(2, 2), children="top")  # lossless
    speculative_generate(target, draft, idx, n, verify="lenient", lenience=0.5)     # LOSSY, labelled
    speculative_generate(target, draft, idx, n, verify="typical", epsilon=0.09, delta=0.3)  # LOSSY, labelled

Each registers itself in speculative.ROUNDS, whose entry says whether it is lossless; for the lossy ones the
tests and notebook 04 compute the exact total-variation distance of their output from the target's, so the
price of the speed is on the page.

Sources: block verification, Sun et al. 2024, "Block Verification Accelerates Speculative Decoding"
(arXiv:2403.10444), Algorithm 2; prompt lookup / n-gram drafting (Saxena 2023, "Prompt Lookup Decoding";
Leviathan et al. 2023 note that any q works); several drafts at the root, Miao et al. 2024, "SpecInfer"
(arXiv:2305.09781), and Jeon et al. 2024, "Recursive Speculative Decoding" (arXiv:2402.14160); draft trees of
any depth, SpecInfer, Sequoia (Chen et al. 2024, arXiv:2402.12374) and EAGLE-2 (Li et al. 2024); lenience,
Leviathan et al. 2023 (arXiv:2211.17192), Appendix A.5; typical acceptance, Cai et al. 2024, "Medusa"
(arXiv:2401.10774), Section 2.3.1.

Every round function has speculative_round's signature (target, draft, tokens, k, probs, generator) -> kept and
takes k per call, so K may change between rounds. All randomness goes through speculative.sample() and
speculative.coin(), called as module attributes so that the tests' enumeration of every branch reaches them.
A draft tree (tree_round; multidraft is its special case branches=(n,)) is grown by the draft one forward per
level and scored in ONE target forward with a tree attention mask (tree_attention, model.GPT's pos and mask);
both caches then keep the accepted path (compact). Children are sampled without replacement by default (Jeon et
al. 2024; replacement=True: i.i.d., SpecInfer) or are the draft's top tokens, each tested as a point mass.
budget=N grows at most N nodes where the draft's path probability is highest (after EAGLE-2's dynamic trees).
What it leaves out: EAGLE-2's reranking of the grown tree (it would drop sampled nodes by their own values, which
is not exact), trees in batches (batched.py), and learned draft heads (Medusa's, EAGLE's).
"""

from dataclasses import dataclass, field

import torch
import torch.nn as nn

import speculative
from model import GPTConfig, compact_moves
from speculative import Verifier, accept_probability, residual, window_end


def check_rows(p, logits, model, t, tokens, generated):  # (n, V) probabilities of positions t.. -> (n, V)
    """speculative.checked on every row (stricter than the core round, which checks a row only when it uses it):
    non-finite logits end in the same SamplingError, with tokens[:generated] (final before this round) kept."""
    for i in range(p.size(0)):
        speculative.checked(p[i], logits[i], model, t + i, tokens, generated)
    return p


def propose_and_score(target, draft, tokens, k, probs, generator):
    """Steps 1 and 2 of speculative_round, through the same functions: k drafts x_i ~ q_i appended to tokens
    (speculative.draft_tokens), then p_0..p_k in ONE forward (speculative.score), every row checked."""
    t = len(tokens)
    qs = speculative.draft_tokens(draft, tokens, k, probs, generator)  # k x (V,)
    logits, p = speculative.score(target, tokens, k, probs)  # (K+1, V)
    check_rows(p, logits, "target", t, tokens, t)
    return qs, p


# ---- block verification (Sun et al. 2024, Algorithm 2): lossless and optimal ---------------------------

def block_residual(a, p, q):  # float, (V,), (V,) -> (V,)
    """norm(max(0, a p - q)): the distribution of the token after a block cut at weight a (a = 1: the usual)."""
    return residual(a * p, q)


def block_round(target, draft, tokens, k, probs, generator):
    """Judge the drafts as one block instead of one by one. Appends 1..k+1 tokens; returns how many drafts it kept.

    Token-wise verification stops at the first rejected draft. Block verification carries a joint weight
    a_i = min(1, a_{i-1} p_i(x_i) / q_i(x_i)) (a_0 = 1) along the block, and may keep x_1..x_i although some
    p_j(x_j) / q_j(x_j) < 1 on the way, as long as later drafts make up for it. Among all verifiers that keep
    the output distributed as the target's, it emits the most tokens per round in expectation (Sun et al.,
    Theorem 2), so never fewer than token-wise verification.
    """
    t = len(tokens)
    qs, p = propose_and_score(target, draft, tokens, k, probs, generator)
    a, weights, stop = 1.0, [1.0], []  # weights[i] = a_i; stop[i-1] = h_i
    for i in range(k):  # draft x_{i+1} sits at tokens[t + i], judged by p[i] and qs[i]
        x = tokens[t + i]
        a = min(1.0, a * p[i, x].item() / qs[i][x].item())  # a_i = min(1, a_{i-1} p_i(x_i) / q_i(x_i))
        weights.append(a)
        if i == k - 1:
            stop.append(a)  # h_K = a_K
        else:  # h_i = R_i / (R_i + 1 - a_i), R_i = sum_x max(0, a_i p_{i+1}(x) - q_{i+1}(x))
            R = torch.clamp(a * p[i + 1] - qs[i + 1], min=0.0).sum().item()
            stop.append(R / (R + 1.0 - a) if R > 0 else 0.0)  # subtle: R = 0 leaves nothing to correct: h_i = 0
    # one uniform per position, eta_i <= h_i; keep the LONGEST prefix whose test passes (tau = 0 if none does).
    # The coins are independent, so testing from the longest prefix down and stopping at the first pass is the
    # same distribution with fewer draws.
    tau = next((i for i in range(k, 0, -1) if speculative.coin(stop[i - 1], generator)), 0)
    del tokens[t + tau:]
    if tau == k:  # the whole block kept: the bonus token comes from p_{K+1}, as in token-wise verification
        tokens.append(speculative.sample(p[k], generator))
    else:  # the token after the kept prefix comes from norm(max(0, a_tau p_{tau+1} - q_{tau+1}))
        tokens.append(speculative.sample(block_residual(weights[tau], p[tau], qs[tau]), generator))
        target.rollback(t + tau)
        draft.rollback(t + tau)
    return tau


# ---- lossy contrasts: faster because they accept more, biased because of it ------------------------------

def rule_round(target, draft, tokens, k, probs, generator, accept, replacement):
    """speculative_round with its two rules swapped out: keep x_i with probability accept(p_i, q_i, x_i); at the
    first rejection draw from replacement(p_i, q_i) and stop. Chen et al.'s rules make it exact; others do not."""
    t = len(tokens)
    qs, p = propose_and_score(target, draft, tokens, k, probs, generator)
    return judge(target, draft, tokens, t, qs, p, accept, replacement, generator)


def judge(target, draft, tokens, t, qs, p, accept, replacement, generator, first=0):
    """tokens[t:] are K drafts, drawn from qs (K of (V,)) and scored p (K+1, V). Left to right from draft `first`:
    keep x_i with probability accept(p_i, q_i, x_i), or draw its replacement and stop; all kept: a bonus from p_K."""
    for i in range(first, len(qs)):
        x = tokens[t + i]
        if not speculative.coin(accept(p[i], qs[i], x), generator):
            tokens[t + i:] = [speculative.sample(replacement(p[i], qs[i]), generator)]
            target.rollback(t + i)
            draft.rollback(t + i)
            return i
    tokens.append(speculative.sample(p[len(qs)], generator))
    return len(qs)


def lenient_round(target, draft, tokens, k, probs, generator, lenience):
    """LOSSY. Leviathan et al. 2023, Appendix A.5: compare p with l q instead of q (lenience 0 < l <= 1).
    Keep x with probability min(1, p(x) / (l q(x))), else draw from norm(max(0, p - l q)). l = 1 is exact;
    l < 1 keeps more drafts and moves the output towards q."""
    return rule_round(target, draft, tokens, k, probs, generator,
                      accept=lambda p, q, x: min(1.0, p[x].item() / (lenience * q[x].item())),
                      replacement=lambda p, q: residual(p, lenience * q))


def typical_threshold(p, epsilon, delta):  # (V,) -> float: min(epsilon, delta exp(-H(p)))
    return min(epsilon, delta * torch.exp(-torch.special.entr(p).sum()).item())  # entr: -p log p, 0 at p = 0


def typical_round(target, draft, tokens, k, probs, generator, epsilon, delta):
    """LOSSY. Typical acceptance, Cai et al. 2024 (Medusa), Section 2.3.1: keep x whenever the target finds it
    plausible enough, p(x) > min(epsilon, delta exp(-H(p))), with no coin at all; at the first failure draw from p
    itself. Greedy (one-hot p) stays exact; otherwise the draft's choices among plausible tokens show through."""
    return rule_round(target, draft, tokens, k, probs, generator,  # coin(1.0) always passes, coin(0.0) never
                      accept=lambda p, q, x: 1.0 if p[x].item() > typical_threshold(p, epsilon, delta) else 0.0,
                      replacement=lambda p, q: p)


# ---- draft trees: several guesses at every depth, one target forward (SpecInfer; Sequoia; EAGLE-2) -----------

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

    def add(self, x, parent, q):  # -> the new node's index
        self.tokens.append(x)
        self.parents.append(parent)
        self.depth.append(1 if parent < 0 else self.depth[parent] + 1)
        self.qs.append(q)
        return len(self.tokens) - 1

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


def draft_tree(draft, tokens, t, k, branches, children, replacement, probs, generator, budget=0):
    """Step 1 of a tree round: the draft grows a tree of depth k above position t, level by level, ONE draft
    forward per level over all of that level's nodes (tree attention in the draft's cache, as in the target's).
    budget=N (0: none): at most N nodes, each level spending at most its share of what is left (so the tree
    reaches depth k), its nodes getting their children best first by the draft's path probability (the product
    of q along the path, after EAGLE-2): the likely paths grow deeper. Still exact: how many children a node gets
    is fixed before they are drawn, from tokens already drawn.
    -> (Tree, how many nodes the draft's cache holds after x_{t-1}, or 0). If the draft's window slides inside
    the round, each node is read on its own instead (draft.logits re-fills the window)."""
    tree, level, reach = Tree(), [-1], {-1: 1.0}  # level: the nodes whose children come next; reach: path probability
    logits = draft.logits(tokens, t, 1)  # (1, V): the draft at the root, after x_{t-1}
    one_window = window_end(t, draft.W) >= t + k - 1
    P, fed = draft.model.cache_len, 0  # x[s:t]; node i goes to slot P + i
    for d in range(k):  # the children of the nodes at depth d sit at position t + d
        new, order = [], sorted(range(len(level)), key=lambda i: -reach[level[i]]) if budget else range(len(level))
        share = -(-(budget - len(tree.tokens)) // (k - d))  # this level's share of the budget left, rounded up
        for i in order:  # logits[i] (V,): the draft after level[i]'s path
            m = width(branches, d) if not budget else min(width(branches, d), share - len(new))
            if m <= 0:  # this level's share is spent
                break
            q = speculative.draft_probs(logits[i], probs, t + d, tokens, t)
            for x, q_x in draw_children(q, logits[i], m, children, replacement, generator):
                new.append(tree.add(x, level[i], q_x))
                reach[new[-1]] = reach[level[i]] * q[x].item()
        level = sorted(new)  # breadth first: the order the draft's cache and the target's forward hold them in
        if d == k - 1 or not level or (budget and len(tree.tokens) >= budget):  # no level after this one
            break
        if one_window:  # level d+1 in one forward: each node sees the prefix and its own ancestors
            pos, mask = tree_attention(P, tree.parents, draft.device)  # (nodes,), (nodes, P + nodes)
            logits = draft.forward([tree.tokens[i] for i in level], pos=pos[fed:], mask=mask[fed:])[0]
            fed = len(tree.tokens)
        else:  # subtle: the window slides inside the round: every node reads its own path from x[s(t+d+1):]
            rows = []
            for i in level:
                draft.rollback(t)
                rows.append(draft.logits(tokens + [tree.tokens[j] for j in tree.path(i)], t + d + 1, 1)[0])
            logits = torch.stack(rows)  # (len(level), V)
    if not one_window:
        draft.rollback(t)  # the next round re-reads whatever is kept
    return tree, fed


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


def walk_tree(tree, p, generator):  # Tree, p (1 + nodes, V) -> (kept nodes, the token after them, what was tested)
    """Step 3: from the root down. At a node, r = p there; try its children in the order they were drawn: keep
    child c_j with probability min(1, r(c_j) / q_j(c_j)) and go down to it; else r = norm(max(0, r - q_j)), the
    next child. All rejected: the next token ~ r. A leaf: the bonus token ~ p there. Each try is one speculative
    step from q_j towards r, so the token after the kept path is distributed as p (SpecInfer, Jeon et al.).
    tested: (depth, sibling rank, kept?) for every child tried, for the acceptance by depth and rank."""
    node, path, tested = -1, [], []
    while True:
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


def keep_path(model, t, path, cached):  # CachedModel, kept nodes, nodes its cache holds after x_{t-1}
    """After a tree forward: keep the kept nodes in the cache, right after x_{t-1}; forget the other nodes."""
    first = t - model.start  # the cache slot of position t: node 0 sits there
    model.model.compact(first, [first + i for i in path if i < cached])


tree_trace = None  # a list to append each tree round's (K, nodes, tested) to (bench.tree_report); None: nothing kept


def tree_round(target, draft, tokens, k, probs, generator, branches, children, replacement, budget=0):
    """A tree of drafts of depth k (SpecInfer, Miao et al. 2024; Sequoia; EAGLE-2): each node at depth d-1 (the
    root: depth 0) has branches[d-1] children at depth d, 1 beyond len(branches). The draft grows it one
    forward per level, the target scores every node in ONE forward, walk_tree keeps a path, and both caches keep
    that path only. budget=N: at most N nodes, grown where the draft's path probability is highest (draft_tree).
    Appends 1..k+1 tokens; returns how many drafts it kept. Lossless for children="sample" and "top" alike, with
    or without a budget (the shape and the guesses depend only on the draft's outputs). k="auto" is refused (its
    entry's auto_k=False): AutoK models token-wise rounds (Theorem 3.8) and times (K+1)-token forwards; a tree's
    forwards are wider.
    """
    if k == 0:  # the last token of a call, or at a window change: nothing to draft
        return speculative.speculative_round(target, draft, tokens, 0, probs, generator)
    t = len(tokens)
    tree, draft_cached = draft_tree(draft, tokens, t, k, branches, children, replacement, probs, generator,
                                    budget)  # 1.
    logits = score_tree(target, tokens, t, tree, k)  # 2. (1 + nodes, V), ONE target forward
    p = probs(logits)
    for i, d in enumerate([0] + tree.depth):  # every row checked, as the variants do: row i at position t + d
        speculative.checked(p[i], logits[i], "target", t + d, tokens, t)
    path, after, tested = walk_tree(tree, p, generator)  # 3.
    keep_path(target, t, path, len(tree.tokens))
    if draft_cached:  # else the draft's cache holds x[s:t] at most (rolled back, or no level fed)
        keep_path(draft, t, path, draft_cached)
    tokens += [tree.tokens[i] for i in path] + [after]
    if tree_trace is not None:
        tree_trace.append((k, len(tree.tokens), tested))
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


def acceptance_by_depth_and_rank(trace):  # tree_trace's entries -> {(depth, rank): kept / tested}
    tried, kept = {}, {}
    for _, _, tested in trace:
        for d, j, ok in tested:
            tried[d, j] = tried.get((d, j), 0) + 1
            kept[d, j] = kept.get((d, j), 0) + ok
    return {key: kept[key] / tried[key] for key in tried}


def check_tree(branches, children, replacement, budget=0):
    if not isinstance(branches, tuple) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                                  for b in branches):
        raise ValueError(f"branches must be a tuple of ints >= 1, the children of each node at depth 0, 1, ... "
                         f"(e.g. (2, 2); --branches 2,2), got {branches!r}")
    if children not in ("sample", "top"):
        raise ValueError(f"children must be 'sample' (drawn from the draft's q) or 'top' (its most likely tokens, "
                         f"each a point mass), got {children!r}")
    if not isinstance(replacement, bool):
        raise ValueError(f"replacement must be True (i.i.d. children) or False (distinct), got {replacement!r}")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"budget must be an int >= 0, the most nodes a tree may have (0: the fixed shape of "
                         f"branches), got {budget!r}")


def check_multidraft(n_drafts, replacement):
    if not isinstance(n_drafts, int) or n_drafts < 1:
        raise ValueError(f"n_drafts (candidates at the root) must be an int >= 1, got {n_drafts!r}")
    check_tree((n_drafts,), "sample", replacement)


def check_lenient(lenience):
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1] (1: exact, smaller: more accepted, more biased), got {lenience}")


def check_typical(epsilon, delta):
    if not 0.0 < epsilon <= 1.0 or not delta >= 0.0:
        raise ValueError(f"typical acceptance needs 0 < epsilon <= 1 and delta >= 0 (Medusa: 0.09 and 0.3), "
                         f"got epsilon={epsilon}, delta={delta}")


# ---- a draft with no model: prompt lookup / n-gram (Saxena 2023) -----------------------------------------

class TokenListCache(nn.Module):
    """A "KV cache" that is just the list of token ids seen, with model.GPT's interface (for models without
    weights: this draft, and the tests' table models). A subclass gives next_logits(history) -> (V,), where
    history is every token the new one sees, itself last; trees of tokens (pos, mask) work as in model.GPT."""

    def __init__(self):
        super().__init__()
        self.cache = []
        self.row_lengths = None  # with a per-row cache (reset_row_cache): tokens each row holds

    def reset_cache(self, batch_size=1):
        self.cache, self.row_lengths = [], None

    @property
    def cache_len(self):
        return len(self.cache)

    def crop(self, n):
        assert 0 <= n <= len(self.cache), f"crop({n}) needs 0 <= n <= cache_len ({len(self.cache)})"
        del self.cache[n:]

    def compact(self, n, slots):  # keep the first n tokens, then those at `slots`: model.GPT.compact
        compact_moves(n, slots, len(self.cache))  # the argument check
        self.cache[n:] = [self.cache[a] for a in slots]

    # ---- model.GPT's per-row cache (batched.py): one list of ids per row ----
    def reset_row_cache(self, batch_size, room=0):
        self.rows, self.row_lengths = [[] for _ in range(batch_size)], torch.zeros(batch_size, dtype=torch.long)

    def crop_rows(self, lengths):
        self.row_lengths = torch.as_tensor(lengths, dtype=torch.long).cpu().clone()

    def keep_rows(self, index):
        index = torch.as_tensor(index, dtype=torch.long).cpu()
        self.rows, self.row_lengths = [self.rows[i] for i in index.tolist()], self.row_lengths[index]

    def row_forward(self, idx, rows=None):  # (B', T) -> logits (B', T, V), as model.GPT.row_forward
        which = range(len(self.rows)) if rows is None else rows.tolist()
        out = []
        for r, ids in zip(which, idx.tolist()):
            seen, W = self.rows[r][:self.row_lengths[r]], self.config.block_size  # stale tokens forgotten
            logits = []
            for x in ids:  # subtle: past the window sit only tokens the caller discards: any logits do
                seen.append(x)
                logits.append(self.next_logits(seen) if len(seen) <= W else torch.zeros(self.config.vocab_size))
            self.rows[r] = seen
            self.row_lengths[r] += len(ids)
            out.append(torch.stack(logits).to(torch.float64))
        return torch.stack(out).to(idx.device)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, rows=None, span=None):  # -> (logits, None)
        if use_cache and self.row_lengths is not None:
            return self.row_forward(idx, rows), None
        seen, out = self.cache if use_cache else [], []  # the cache grows in place, token by token
        for i, x in enumerate(idx[0].tolist()):  # token i sees everything so far, or where its mask row says (a tree)
            seen.append(x)
            assert mask is None or not mask[i, len(seen):].any(), "a token cannot see tokens fed after it"
            history = seen if mask is None else [y for y, m in zip(seen, mask[i].tolist()) if m]
            assert pos is None or pos[i] == len(history) - 1, "a tree token's position must be its depth"
            out.append(self.next_logits(history))
        return torch.stack(out)[None].to(idx.device), None


class NGramDraft(TokenListCache):
    """A draft without weights: find the last n tokens earlier in the prompt or the text so far, propose what
    followed them (the most recent match; shorter suffixes down to 1 token when none; else repeat the last token).

    q is a point mass on that token, so the acceptance test min(1, p(x)/q(x)) becomes p(x), and a rejection
    resamples from norm(max(0, p - q)) = p with x removed: still exactly the target's distribution, because the
    draft token is drawn from the very q the test uses. smoothing=e mixes in the uniform distribution,
    q = (1 - e) onehot + e / V (before temperature, top-k and top-p, which apply to q's logits as to any draft's).

    It speaks model.GPT's cache interface (forward(idx, use_cache=True), reset_cache, crop, cache_len), so it is
    passed as the `draft` of speculative_generate. Its window is unbounded: it looks through everything so far.
    [5, 1, 2, 5, 1] with n=2 -> proposes 2 (the suffix 5, 1 occurred at 0..1, followed by 2).
    """

    def __init__(self, vocab_size, n=3, smoothing=0.0):
        super().__init__()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the n-gram length n must be an int >= 1 (tokens to match), got {n!r}")
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1) (0: a point mass), got {smoothing}")
        self.n, self.smoothing = n, smoothing
        self.config = GPTConfig(block_size=2 ** 62, vocab_size=vocab_size, n_layer=0)  # no window: never slides

    def num_params(self):
        return 0

    def propose(self, history):  # list of ids -> the id that followed the longest recent match of its suffix
        for m in range(min(self.n, len(history) - 1), 0, -1):
            suffix, last = history[-m:], history[-1]
            for j in range(len(history) - 2, m - 2, -1):  # j: where an earlier copy of the suffix ends
                if history[j] == last and history[j - m + 1:j + 1] == suffix:
                    return history[j + 1]
        return history[-1]

    def next_logits(self, history):  # -> (V,) float64: log q
        V, x = self.config.vocab_size, self.propose(history)
        q = torch.full((V,), self.smoothing / V, dtype=torch.float64)
        q[x] += 1.0 - self.smoothing
        # subtle: a point mass as a large finite negative rather than -inf, so checks for finite logits pass;
        # exp(-1e30 / temperature) is exactly 0 for any temperature above 1e-278
        return torch.log(q).clamp(min=-1e30)


# ---- the registry: speculative_generate(..., verify=name, **params) ----------------------------------------

# speculative_generate finds these in speculative.ROUNDS, the one registry (speculative.py never imports us);
# sample.py and bench.py make --verify choices and flags from the same entries.
speculative.ROUNDS.update(
    block=Verifier(block_round, doc="block verification (Sun et al. 2024): lossless, >= token-wise tokens per round"),
    lenient=Verifier(lenient_round, dict(lenience=0.5), lossless=False, check=check_lenient,
                     doc="LOSSY: p against l q (Leviathan et al., App. A.5)",
                     help=dict(lenience="with --verify lenient (LOSSY): l in (0, 1], 1 exact")),
    typical=Verifier(typical_round, dict(epsilon=0.09, delta=0.3), lossless=False, check=check_typical,
                     doc="LOSSY: typical acceptance (Medusa, Cai et al. 2024)",
                     help=dict(epsilon="with --verify typical (LOSSY): hard threshold",
                               delta="with --verify typical (LOSSY): entropy-scaled threshold")),
    multidraft=Verifier(multidraft_round, dict(n_drafts=2, replacement=False), check=check_multidraft, auto_k=False,
                        doc="several drafts at the root, one tree forward (SpecInfer; Jeon et al. 2024): lossless; "
                            "the tree with branches=(n_drafts,)",
                        help=dict(n_drafts="with --verify multidraft: candidates at the root",
                                  replacement="with --verify multidraft or tree: i.i.d. candidates (default: distinct)")),
    tree=Verifier(tree_round, dict(branches=(2, 2), children="sample", replacement=False, budget=0), check=check_tree,
                  auto_k=False, doc="a draft tree of depth K, one target forward (SpecInfer, Sequoia, EAGLE-2): lossless",
                  help=dict(branches="with --verify tree: children of each node at depth 0, 1, ..., then 1 (e.g. 2,2)",
                            children="with --verify tree: sample (drawn from the draft's q) or top (its most likely "
                                     "tokens, each a point mass)",
                            budget="with --verify tree: at most this many nodes, grown best first by the draft's path "
                                   "probability (EAGLE-2); 0: the fixed shape")),
)


def check_ngram(ngram_n):
    if not isinstance(ngram_n, int) or ngram_n < 1:
        raise ValueError(f"ngram_n (how many last tokens the n-gram draft matches) must be an int >= 1, got {ngram_n!r}")


@dataclass(frozen=True)
class Drafter:
    """One entry of DRAFTS: a draft that sample.py and bench.py make by name (--draft ngram). Any object with
    model.GPT's cache interface is a draft (NGramDraft's: reset_cache, crop, cache_len, forward(idx, use_cache),
    config.vocab_size and config.block_size); an entry says how to build one for a target:
    make(target, **params) -> the draft. A fork's draft: DRAFTS["mine"] = Drafter(lambda target: MyDraft(...))."""
    make: callable
    params: dict = field(default_factory=dict)  # parameter name -> default (each becomes a flag: --ngram_n)
    check: callable = None  # check(**params) raises ValueError with a message for bad values
    doc: str = ""
    help: dict = field(default_factory=dict)  # parameter name -> one line for its flag's --help


DRAFTS = {  # name -> Drafter; drafts from a checkpoint file need no entry (sample.py --draft PATH)
    "ngram": Drafter(lambda target, ngram_n: NGramDraft(target.config.vocab_size, n=ngram_n), dict(ngram_n=3),
                     check=lambda ngram_n: check_ngram(ngram_n), doc="prompt lookup, no model: lossless",
                     help=dict(ngram_n="with --draft ngram: how many last tokens to match")),
}


def total_variation(got, want):  # {outcome: probability} x2 -> 1/2 sum |got - want|
    """The exact distance of a variant's output distribution from the target's, both from the enumeration."""
    return 0.5 * sum(abs(got.get(s, 0.0) - want.get(s, 0.0)) for s in set(got) | set(want))
