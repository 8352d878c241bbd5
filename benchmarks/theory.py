"""
The theory every table of bench.py stands beside: Leviathan et al. 2023, Theorem 3.8, and what follows from it.

A round drafts K tokens, each kept with probability alpha (the per-token acceptance), and stops at the first
rejection. So it emits E[tokens] = (1 - a^(K+1)) / (1 - a) tokens (K + 1 at a = 1), and costs K draft steps
(each c target steps) plus one target forward over K + 1 tokens (v target steps):

    ideal (Thm 3.8):  (1 - a^(K+1)) / ((1 - a)(K c + 1))     -- assumes scoring K+1 tokens costs one step
    with v:           (1 - a^(K+1)) / ((1 - a)(K c + v))     -- the hardware's real cost of that forward

The same law gives the share of rounds that keep j drafts: a^j (1 - a) for j < K, a^K for all K (the kept-draft
histogram), and the advice when a draft does not pay: the cost c or acceptance alpha at which it would.

Here: alpha, the per-position acceptance and the histogram from a run's rounds (each (t, K, kept) or
(t, K, kept, tested)), and those predictions. What it leaves out: trees (verifiers/tree.py predicts its own
rounds, expected_accepted_tree) and batches (every row of a batch waits for the slowest).
"""



from speculative import kept_and_tested


def tests_of(rounds):
    """-> (K, kept, tested) of each round. rounds: (t, K, kept), or (t, K, kept, tested) as with_tests() makes them;
    without `tested`, a round that kept fewer than K tested one draft more and rejected it."""
    return [(r[1], r[2], r[3] if len(r) > 3 else kept_and_tested(r[2], r[1])[1]) for r in rounds]


def with_tests(stats):  # -> the rounds of a Stats as (t, K, kept, tested): a round may stop without rejecting
    return [(t, K, kept, n) for (t, K, kept), n in zip(stats.rounds, stats.tested)]


def alpha_from_rounds(rounds):
    """Per-token acceptance, as the glossary defines alpha: drafts kept / drafts tested (kept + rejected)."""
    counts = tests_of(rounds)
    kept, tested = sum(a for _, a, _ in counts), sum(n for _, _, n in counts)
    return kept / tested if tested else float("nan")


def acceptance_by_position(rounds, n=3):
    """-> [a_1 .. a_n]: a_i = P(draft i kept | draft i tested), the rounds' counts (nan where none was tested).
    vLLM's per-position rate (v1/spec_decode/metrics.py) divides by every round instead: a_1 a_2 .. a_i in ours."""
    tested, kept = [0] * n, [0] * n
    for _, a, m in tests_of(rounds):
        for i in range(min(m, n)):
            tested[i] += 1
            kept[i] += i < a
    return [k / t if t else float("nan") for k, t in zip(kept, tested)]


def kept_histogram(rounds, K):
    """-> (rounds of length K that kept 0, 1, .., K drafts; Theorem 3.8's share of each at this alpha). The
    theorem's rounds keep j < K drafts with probability alpha^j (1 - alpha), all K with alpha^K."""
    full = [r for r in rounds if r[1] == K]  # rounds cut short by the window or the end are left out
    counts = [sum(r[2] == j for r in full) for j in range(K + 1)]
    return counts, kept_law(alpha_from_rounds(full), K)


def kept_law(a, K):  # Theorem 3.8's share of rounds that keep 0, 1, .., K drafts at acceptance a
    return [a ** j * (1 - a) for j in range(K)] + [a ** K]


def root_kept(rounds):
    """The fraction of rounds (with K >= 1) that kept their first draft: the acceptance at the root, which
    several candidates there (verify="multidraft") raise."""
    drafted = [r[2] for r in rounds if r[1] >= 1]
    return sum(a >= 1 for a in drafted) / len(drafted) if drafted else float("nan")


def expected_tokens(alpha, K):  # Theorem 3.8's tokens per round: (1 - a^(K+1)) / (1 - a), K + 1 at a = 1
    return (K + 1) if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)


def predicted(alpha, K, c, v=1.0):
    return expected_tokens(alpha, K) / (K * c + v)


def predicted_rounds(alpha, ks, c, v=1.0):
    """Theorem 3.8 round by round, for rounds whose K differs (k="auto"; drafts/suffix.py drafts only what its match
    allows): the tokens the rounds emit over what they cost, sum of (1 - a^(K+1)) / (1 - a) over sum of (K c + v),
    a round of K = 0 being one plain step (1 token, cost 1). Rounds of one K: predicted(alpha, K, c, v).
    alpha 0.8, ks [4, 0], c 0.1, v 1.2 -> (3.36 + 1) / (1.6 + 1) = 1.68."""
    if not ks:
        return float("nan")
    made = sum(expected_tokens(alpha, K) if K else 1.0 for K in ks)
    return made / sum(K * c + v if K else 1.0 for K in ks)


def why_it_does_not_pay(alpha, c, v, measured=None, K=None, k_max=16):
    """-> what Theorem 3.8 allows with this alpha, c and v, and what a draft would need to pay. A draft pays at K
    when E[tokens] = (1 - a^(K+1)) / (1 - a) exceeds K c + v: so c must stay under (E[tokens] - v) / K for some K.
    alpha 0.4, c 0.33, v 1.1 -> at most 0.98x (K = 1); c under 0.300 would pay, or alpha above 0.430.
    When the theorem already allows more than 1x, the draft is not what loses: the run's own per-round overhead
    is, and `measured` (its speedup at K) says how much of the time it takes."""
    ks = range(1, k_max + 1)
    best_K = max(ks, key=lambda K: predicted(alpha, K, c, v))
    text = (f"Theorem 3.8 with alpha {alpha:.3f}, c {c:.3f} and v {v:.2f} allows at most "
            f"{predicted(alpha, best_K, c, v):.2f}x (K = {best_K})")
    if predicted(alpha, best_K, c, v) > 1.0:
        text += ": this draft's acceptance and cost already pay, so the loss is per-round overhead (Python, sampling, "
        if measured is None or K is None or not isinstance(K, int):
            return text + "the caches), not the draft."
        at_K = predicted(alpha, K, c, v)
        text += (f"the caches): at K = {K} the run reached {measured / at_K:.0%} of the theorem's {at_K:.2f}x, so "
                 f"{1 - measured / at_K:.0%} of its time went to that overhead")
        return text + (f"; and K = {best_K} would suit this draft better than K = {K}." if at_K < 1.0 else ".")
    c_even = max((expected_tokens(alpha, K) - v) / K for K in ks)  # the most a draft step may cost at this alpha
    lo, hi = 0.0, 1.0  # the least alpha that pays at this c: bisection on a function that grows with alpha
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if max(predicted(mid, K, c, v) for K in ks) >= 1.0 else (mid, hi)
    text += (f": a draft step under {c_even:.3f} target steps would pay at this alpha" if c_even > 0 else
             ": no draft pays at this alpha, whatever its cost")
    return text + (f", or an acceptance alpha above {hi:.3f} at this c." if hi < 1.0 - 1e-9 else
                   ", and no acceptance pays at this c.")
