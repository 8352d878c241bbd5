"""
Block verification: judge a round's drafts as one block instead of one by one. Lossless, and never fewer tokens
per round than token-wise verification.

Source: Sun et al. 2024, "Block Verification Accelerates Speculative Decoding" (arXiv:2403.10444), Algorithm 2
and Theorem 2. In Theorem 3.8's terms (Leviathan et al.) it changes nothing of c, v or K: the same drafts and the
same one target forward per round; it raises the expected tokens per round above (1 - alpha^(K+1)) / (1 - alpha).

    speculative_generate(target, draft, idx, n, verify="block")

What it leaves out: block verification of trees (the paper's Section 5 leaves it open), and batches.
"""

import torch

import speculative
from speculative import Verifier, residual


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
    qs = speculative.draft_tokens(draft, tokens, k, probs, generator)  # 1. x_i ~ q_i, as in speculative_round
    logits, p = speculative.score(target, tokens, k, probs)  # 2. p_0 .. p_k in one target forward
    check = lambda i: speculative.checked(p[i], logits[i], "target", t + i, tokens, t)  # a row, when it is read
    a, weights, stop = 1.0, [1.0], []  # weights[i] = a_i; stop[i-1] = h_i
    for i in range(k):  # draft x_{i+1} sits at tokens[t + i], judged by p[i] and qs[i]
        check(i)
        x = tokens[t + i]
        a = min(1.0, a * p[i, x].item() / qs[i][x].item())  # a_i = min(1, a_{i-1} p_i(x_i) / q_i(x_i))
        weights.append(a)
        if a == 0.0:  # subtle: a_j = 0 and h_j = 0 for every j >= i: no later prefix can be kept, and the rows
            weights += [0.0] * (k - 1 - i)  # after this one are never read (a target that gives x_i probability
            stop += [0.0] * (k - i)  # 0 may have no distribution after it, and plain sampling never goes there)
            break
        if i == k - 1:
            stop.append(a)  # h_K = a_K
        else:  # h_i = R_i / (R_i + 1 - a_i), R_i = sum_x max(0, a_i p_{i+1}(x) - q_{i+1}(x))
            check(i + 1)
            R = torch.clamp(a * p[i + 1] - qs[i + 1], min=0.0).sum().item()
            stop.append(R / (R + 1.0 - a) if R > 0 else 0.0)  # subtle: R = 0 leaves nothing to correct: h_i = 0
    # one uniform per position, eta_i <= h_i; keep the LONGEST prefix whose test passes (tau = 0 if none does).
    # The coins are independent, so testing from the longest prefix down and stopping at the first pass is the
    # same distribution with fewer draws.
    tau = next((i for i in range(k, 0, -1) if speculative.coin(stop[i - 1], generator)), 0)
    del tokens[t + tau:]
    if tau == k:  # the whole block kept: the bonus token comes from p_{K+1}, as in token-wise verification
        tokens.append(speculative.sample(check(k), generator))
    else:  # the token after the kept prefix comes from norm(max(0, a_tau p_{tau+1} - q_{tau+1}))
        tokens.append(speculative.sample(block_residual(weights[tau], p[tau], qs[tau]), generator))
        target.rollback(t + tau)
        draft.rollback(t + tau)
    return tau


speculative.ROUNDS["block"] = Verifier(
    block_round, doc="block verification (Sun et al. 2024): lossless, >= token-wise tokens per round")
