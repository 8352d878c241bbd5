"""
Lossy acceptance rules, as contrasts: faster because they keep more drafts, biased because of it. Each is labelled
LOSSY in speculative.ROUNDS, and the tests and notebook 04 compute the exact total-variation distance of its
output from the target's (total_variation), so the price of the speed is on the page.

Sources: lenience, Leviathan et al. 2023 (arXiv:2211.17192), Appendix A.5; typical acceptance, Cai et al. 2024,
"Medusa" (arXiv:2401.10774), Section 2.3.1. In Theorem 3.8's terms they raise alpha and change nothing of c, v
or K; the theorem's speedup then buys a distribution that is not the target's.

    speculative_generate(target, draft, idx, n, verify="lenient", lenience=0.5)
    speculative_generate(target, draft, idx, n, verify="typical", epsilon=0.09, delta=0.3)

rule_round is speculative_round with its two rules passed in: a fork's own rule is one call of it (docs/fork.md).
What it leaves out: Medusa's tree with typical acceptance (verifiers/tree.py verifies trees losslessly).
"""

import torch

import speculative
from speculative import Verifier, residual


def rule_round(target, draft, tokens, k, probs, generator, accept, replacement):
    """speculative_round with its two rules swapped out: keep x_i with probability accept(p_i, q_i, x_i); at the
    first rejection draw from replacement(p_i, q_i) and stop. Chen et al.'s rules make it exact; others do not."""
    t = len(tokens)
    qs = speculative.draft_tokens(draft, tokens, k, probs, generator)  # 1. x_i ~ q_i, as in speculative_round
    logits, p = speculative.score(target, tokens, k, probs)  # 2. p_0 .. p_k in one target forward
    check = lambda i: speculative.checked(p[i], logits[i], "target", t + i, tokens, t + i)  # a row, when it is read
    for i in range(k):  # 3. left to right: keep x_i with probability accept(p_i, q_i, x_i) ...
        x = tokens[t + i]
        if not speculative.coin(accept(check(i), qs[i], x), generator):  # ... or draw its replacement and stop
            tokens[t + i:] = [speculative.sample(replacement(p[i], qs[i]), generator)]
            target.rollback(t + i)
            draft.rollback(t + i)
            return i
    tokens.append(speculative.sample(check(k), generator))  # 4. all kept: the bonus token from p_k
    return k


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


def check_lenient(lenience):
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1] (1: exact, smaller: more accepted, more biased), got {lenience}")


def check_typical(epsilon, delta):
    if not 0.0 < epsilon <= 1.0 or not delta >= 0.0:
        raise ValueError(f"typical acceptance needs 0 < epsilon <= 1 and delta >= 0 (Medusa: 0.09 and 0.3), "
                         f"got epsilon={epsilon}, delta={delta}")




def total_variation(got, want):  # {outcome: probability} x2 -> 1/2 sum |got - want|
    """The exact distance of a variant's output distribution from the target's, both from the enumeration."""
    return 0.5 * sum(abs(got.get(s, 0.0) - want.get(s, 0.0)) for s in set(got) | set(want))


speculative.ROUNDS.update(
    lenient=Verifier(lenient_round, dict(lenience=0.5), lossless=False, check=check_lenient,
                     doc="LOSSY: p against l q (Leviathan et al., App. A.5)",
                     help=dict(lenience="with --verify lenient (LOSSY): l in (0, 1], 1 exact")),
    typical=Verifier(typical_round, dict(epsilon=0.09, delta=0.3), lossless=False, check=check_typical,
                     doc="LOSSY: typical acceptance (Medusa, Cai et al. 2024)",
                     help=dict(epsilon="with --verify typical (LOSSY): hard threshold",
                               delta="with --verify typical (LOSSY): entropy-scaled threshold")),
)
