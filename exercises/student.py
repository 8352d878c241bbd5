"""
Exercise: write speculative sampling's verification step yourself. Copy this file (cp exercises/student.py
mine.py), fill in the bodies in order, and after each one run

    python exercises/check.py mine.py              # steps 1-3
    python exercises/check.py mine.py --stretch    # and the stretch exercise, block verification

The checker names the first step that is wrong, in words. Step 3 is checked by running your round down every
branch of its randomness on a toy model and comparing the output distribution with the target's, exactly.

Letters as in speculative.py: p is the TARGET's next-token distribution, q the DRAFT's. A round: the draft
proposes K tokens x_1..x_K, x_i drawn from q_i; the target scores all K+1 positions in one forward (p_1..p_{K+1});
keep x_i with probability min(1, p_i(x_i) / q_i(x_i)), left to right; at the first rejection draw a
replacement from norm(max(0, p_i - q_i)) and stop; if all K are kept, draw a bonus token from p_{K+1}.

Rules for your code:
- All randomness goes through speculative.sample(probs, generator) (draws a token id from a distribution) and
  speculative.coin(prob, generator) (True with probability prob), called as written here, through the module
  (`import speculative`, not `from speculative import sample`), so that the checker can follow every branch.
- Do not look at speculative.speculative_round before you are done: that is the answer.
"""

import torch  # residual's torch.clamp

import speculative


def accept_probability(p_x, q_x):  # float, float -> float
    """Step 1. The probability of keeping a draft token x that the draft proposed: min(1, p(x) / q(x)).

    p_x is the target's probability of x, q_x the draft's. q_x > 0 always, because x was drawn from q.
    0.2, 0.5 -> 0.4;  0.5, 0.2 -> 1.0 (the target likes x more than the draft does: always keep it).
    """
    raise NotImplementedError("step 1: return min(1, p(x) / q(x))")


def residual(p, q):  # (V,), (V,) -> (V,)
    """Step 2. The distribution a rejected draft token is replaced from: norm(max(0, p - q)).

    p and q are float tensors of shape (V,) that each sum to 1. Return a NEW tensor (do not change p or q in
    place): max(0, p - q) elementwise (torch.clamp(..., min=0.0)), divided by its sum so it sums to 1.
    [0.5, 0.3, 0.1, 0.1], [0.1, 0.2, 0.4, 0.3] -> [0.8, 0.2, 0.0, 0.0].
    Trap: when p == q, max(0, p - q) is all zeros and dividing by its sum gives NaN. A rejection cannot happen
    then (every p(x)/q(x) is 1), so any distribution is correct: return p.
    """
    raise NotImplementedError("step 2: return norm(max(0, p - q)), and p when that is all zeros")


def speculative_round(target, draft, tokens, k, probs, generator):
    """Step 3. One round: append 1..k+1 tokens to the list `tokens`; return how many drafts were kept (0..k).

    target, draft: speculative.CachedModel objects (a model and its KV cache); you only pass them on, and call
                   their .rollback(n) after a rejection (below).
    tokens:        the list of token ids so far (prompt included). Let t = len(tokens) before the round.
    k:             the number of draft tokens K to propose.
    probs:         a function logits -> probabilities (temperature, top-k, top-p); pass it on.
    generator:     a torch.Generator or None; pass it on to speculative.sample and speculative.coin.

    What to write, with the project's functions for steps 1-2 of the round:

        t = len(tokens)
        qs = speculative.draft_tokens(draft, tokens, k, probs, generator)
            # appends the K drafts to tokens (x_i is tokens[t + i - 1]) and returns [q_1, .., q_K], each (V,)
        logits, p = speculative.score(target, tokens, k, probs)
            # p has shape (K+1, V): row i is the target's distribution at position t + i, so with Python's
            # 0-based i = 0..k-1, draft tokens[t + i] is judged by p[i] and qs[i], and p[k] comes after them all

    Then, for i = 0..k-1, left to right, with x = tokens[t + i]:
      - keep x with probability accept_probability(p[i, x].item(), qs[i][x].item()) (your step 1), drawing the
        coin with speculative.coin(prob, generator);
      - if the coin says no: replace x and every later draft by ONE token drawn with
        speculative.sample(residual(p[i], qs[i]), generator) (your step 2), i.e. tokens[t + i:] = [new token];
        then call target.rollback(t + i) and draft.rollback(t + i) so both caches forget the rejected drafts,
        and return i. Stop here: the later drafts were drawn after the rejected token, so they are worthless.
    If all k were kept: append one bonus token drawn with speculative.sample(p[k], generator) and return k.
    """
    raise NotImplementedError("step 3: write the round's loop (see the docstring)")


def block_round(target, draft, tokens, k, probs, generator):
    """Stretch: block verification (Sun et al. 2024, arXiv:2403.10444, Algorithm 2). Same signature and
    contract as speculative_round: append 1..k+1 tokens, return how many drafts were kept.

    Draft and score as in step 3. Then carry a weight along the block, with a_0 = 1 and, for i = 1..k,
        a_i = min(1, a_{i-1} p_i(x_i) / q_i(x_i))                       (p_i is p[i - 1], q_i is qs[i - 1])
    and a stop probability for each prefix length i = 1..k:
        h_k = a_k;   h_i = R_i / (R_i + 1 - a_i) with R_i = sum over tokens of max(0, a_i p_{i+1} - q_{i+1}),
        and h_i = 0 when R_i = 0.
    Draw one coin per prefix, speculative.coin(h_i, generator), and keep the LONGEST prefix tau whose coin says
    yes (tau = 0 if none does; testing from i = k down and stopping at the first yes draws the same thing).
    Keep tokens[:t + tau]; then, if tau == k, append a bonus token from p[k]; otherwise append one token drawn
    from norm(max(0, a_tau p_{tau+1} - q_{tau+1})) (your residual(a_tau * p[tau], qs[tau]) is exactly that) and
    roll both caches back to t + tau. Return tau.
    Block verification never keeps fewer drafts on average than step 3, and is still exact; the checker tests both.
    """
    raise NotImplementedError("stretch: write block verification (see the docstring)")
