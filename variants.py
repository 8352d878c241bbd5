"""
Beyond Chen et al.: other verifiers and drafters for speculative_generate, each a short function beside its math.

speculative.py stays the readable core (Algorithm 2, token-wise verification). These plug into it:

    speculative_generate(target, draft, idx, n, verify="block")             # lossless, >= token-wise tokens/round
    speculative_generate(target, NGramDraft(V, n=3), idx, n)                # lossless, no draft model at all
    speculative_generate(target, draft, idx, n, verify="multidraft", n_drafts=3)   # lossless, 3 root candidates
    speculative_generate(target, draft, idx, n, verify="lenient", lenience=0.5)     # LOSSY, labelled
    speculative_generate(target, draft, idx, n, verify="typical", epsilon=0.09, delta=0.3)  # LOSSY, labelled

Each registers itself in speculative.ROUNDS, whose entry says whether it is lossless; for the lossy ones the
tests and notebook 04 compute the exact total-variation distance of their output from the target's, so the
price of the speed is on the page.

Sources: block verification, Sun et al. 2024, "Block Verification Accelerates Speculative Decoding"
(arXiv:2403.10444), Algorithm 2; prompt lookup / n-gram drafting (Saxena 2023, "Prompt Lookup Decoding";
Leviathan et al. 2023 note that any q works); several drafts at the root, Miao et al. 2024, "SpecInfer"
(arXiv:2305.09781), and Jeon et al. 2024, "Recursive Speculative Decoding" (arXiv:2402.14160); lenience,
Leviathan et al. 2023 (arXiv:2211.17192), Appendix A.5; typical acceptance, Cai et al. 2024, "Medusa"
(arXiv:2401.10774), Section 2.3.1.

Every round function has speculative_round's signature (target, draft, tokens, k, probs, generator) -> kept and
takes k per call, so K may change between rounds. All randomness goes through speculative.sample() and
speculative.coin(), called as module attributes so that the tests' enumeration of every branch reaches them.
Multidraft's tree of n branches is scored in ONE target forward with a tree attention mask (tree_attention,
model.GPT's pos and mask), and the draft drafts the n branches side by side, one forward per depth.
What it leaves out: deeper trees (branching after the root), batches, and learned draft heads (Medusa's, EAGLE's).
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


def checked_probs(probs, logits, model, t, tokens, generated):  # (n, V) logits of positions t.. -> (n, V)
    return check_rows(probs(logits), logits, model, t, tokens, generated)


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


# ---- several drafts at the root: recursive rejection sampling (SpecInfer; Jeon et al. 2024) --------------

def without(q, x):  # (V,), id -> (V,): q with x removed and renormalised (all-zero once q's support is used up)
    q = q.clone()
    q[x] = 0.0
    total = q.sum()
    return q / total if total > 0 else q


def multidraft_round(target, draft, tokens, k, probs, generator, n_drafts, replacement):
    """n_drafts candidates for the first position, each with its own chain of k-1 more drafts (a tree of n
    branches), all scored by ONE target forward. Lossless. Returns how many drafts of the accepted branch it
    kept (0: no candidate accepted).

    Root, recursive rejection sampling: r_1 = p_0. Candidate j was drawn from q_j (q itself with replacement;
    without, q with c_1..c_{j-1} removed and renormalised, Jeon et al. 2024). Keep c_j with probability
    min(1, r_j(c_j) / q_j(c_j)); else r_{j+1} = norm(max(0, r_j - q_j)) and try the next; if every candidate
    fails, draw from r_{n+1}. Each step is one speculative step from q_j towards r_j, so the root token ~ p_0.
    Then plain speculative verification continues along the accepted candidate's chain.
    k="auto" is refused (its entry's auto_k=False): AutoK models token-wise rounds (Theorem 3.8) and times (K+1)-token
    target forwards, which a tree is not.
    """
    if k == 0:  # the last token of a call, or at a window change: nothing to draft
        return speculative.speculative_round(target, draft, tokens, 0, probs, generator)
    t = len(tokens)
    # 1. the candidates at the root: c_j ~ q_j
    q = speculative.draft_probs(draft.logits(tokens, t, 1)[0], probs, t, tokens, t)  # (V,): the draft at position t
    candidates, q_of = [], []  # c_j and the q_j it was drawn from
    q_j = q
    for _ in range(n_drafts):
        if q_j.sum() <= 0:  # without replacement: q's whole support already tried
            break
        candidates.append(speculative.sample(q_j, generator))
        q_of.append(q_j)
        q_j = q if replacement else without(q_j, candidates[-1])
    # 2. each candidate's chain: x_i ~ q(. | prefix, c_j, x_1..x_{i-1}), the branches side by side
    branches = draft_branches(draft, tokens, t, candidates, q, k, probs, generator)  # (k tokens, k q's) each
    # 3. the target scores every branch in ONE forward (tree attention): p_0 .. p_k of each (k+1, V)
    ps = score_tree(target, tokens, t, [branch for branch, _ in branches])
    ps = [checked_probs(probs, logits, "target", t, tokens, t) for logits in ps]
    # 4. recursive rejection sampling at the root, then token-wise along the accepted branch
    r = ps[0][0]  # p_0, the target at the root (the same in every branch)
    for j, (c, q_j, (branch, qs), p) in enumerate(zip(candidates, q_of, branches, ps)):
        if speculative.coin(accept_probability(r[c].item(), q_j[c].item()), generator):  # keep c_j: r_j / q_j
            keep_branch(target, t, j, k)
            tokens.extend(branch)  # ... and judge the rest of its chain token by token (Chen et al.)
            return judge(target, draft, tokens, t, qs, p, tokenwise_accept, residual, generator, first=1)
        r = residual(r, q_j)  # rejected: r_{j+1} = norm(max(0, r_j - q_j))
    target.rollback(t)  # no branch kept: forget them all
    tokens.append(speculative.sample(r, generator))
    return 0


def draft_branches(draft, tokens, t, candidates, q, k, probs, generator):
    """-> [(branch j's k tokens, their k q's)]: each candidate c_j (drawn from q at position t) continued by k-1
    drafts. All branches advance together, one draft forward per depth with one token per branch, each seeing the
    prefix and its own branch (tree_attention, breadth first: token i's parent is token i - n). One candidate, or
    a draft window that slides inside the round: the branches are drafted one after the other instead."""
    n, branches = len(candidates), [([c], [q]) for c in candidates]
    if n > 1 and window_end(t, draft.W) >= t + k - 1:  # several branches in one window: a tree
        P = draft.model.cache_len  # x[s:t]: the draft read x_{t-1} for q
        pos, mask = tree_attention(P, [-1] * n + list(range(n * (k - 2))), draft.device)
        for i in range(1, k):  # feed the branches' tokens at position t+i-1, get their q at t+i
            new = slice((i - 1) * n, i * n)
            logits = draft.forward([seq[-1] for seq, _ in branches], pos=pos[new], mask=mask[new, :P + i * n])[0]
            for (seq, qs), row in zip(branches, logits):  # (V,) each: branch j at t+i
                qs.append(speculative.draft_probs(row, probs, t + i, tokens, t))
                seq.append(speculative.sample(qs[i], generator))
    else:  # one branch: a chain. subtle: if the draft's window slides inside the round, draft.logits re-fills it
        for seq, qs in branches:
            for i in range(1, k):
                qs.append(speculative.draft_probs(draft.logits(tokens + seq, t + i, 1)[0], probs, t + i, tokens, t))
                seq.append(speculative.sample(qs[i], generator))
            draft.rollback(t)  # the next branch starts again from the root
    draft.rollback(t)  # the next round re-reads whatever is kept
    return branches


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


def score_tree(target, tokens, t, branches):  # CachedModel, ids, t, n lists of k ids -> n of (k+1, V) logits
    """The target's logits for n branches of drafts at positions t..t+k-1, in ONE forward: the tokens its cache
    lacks (x_{t-1} at least) in a chain, then the branches side by side, each after that chain. Branch j's rows
    are p_0 (from x_{t-1}, shared) and p_1..p_k (from its own tokens). The cache then holds all of them: keep one
    branch with keep_branch, or none with target.rollback(t)."""
    k = len(branches[0])
    prefix = target.uncached(tokens, t, k + 1)  # slides the window if needed, like target.logits
    ids, parents = list(prefix), list(range(-1, len(prefix) - 1))
    for branch in branches:  # its first token follows x_{t-1}, each later one the token before it
        parents += [len(prefix) - 1] + list(range(len(ids), len(ids) + k - 1))
        ids += branch
    pos, mask = tree_attention(target.model.cache_len, parents, target.device)
    logits = target.forward(ids, pos=pos, mask=mask)[0]  # (T, V)
    root, rows = logits[len(prefix) - 1:len(prefix)], logits[len(prefix):]  # (1, V), (n k, V)
    return [torch.cat([root, rows[j * k:(j + 1) * k]]) for j in range(len(branches))]


def keep_branch(target, t, j, k):
    """After score_tree: keep branch j's k tokens in the target's cache, right after x_{t-1}; forget the others."""
    first = t - target.start  # the cache slot of position t: the first branch starts there
    target.model.compact(first, list(range(first + j * k, first + (j + 1) * k)))


def tokenwise_accept(p, q, x):  # Chen et al.'s rule: min(1, p(x) / q(x))
    return accept_probability(p[x].item(), q[x].item())


def check_multidraft(n_drafts, replacement):
    if not isinstance(n_drafts, int) or n_drafts < 1:
        raise ValueError(f"n_drafts (candidates at the root) must be an int >= 1, got {n_drafts!r}")
    if not isinstance(replacement, bool):
        raise ValueError(f"replacement must be True (i.i.d. candidates) or False (distinct), got {replacement!r}")


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
                        doc="several drafts at the root, one tree forward (SpecInfer; Jeon et al. 2024): lossless",
                        help=dict(n_drafts="with --verify multidraft: candidates at the root",
                                  replacement="with --verify multidraft: i.i.d. candidates (default: distinct)")),
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
