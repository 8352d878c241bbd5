"""Probes that name the likely bug, in words, when an exactness test fails.

An enumeration (tests/test_exact_enumeration.py) can only say that P(2, 0, 2) came out 0.0408 where the target
gives 0.0432. The probes here run the pieces of speculative.py as they are now (a test may have patched them) on
tiny inputs whose right answer is a formula: the window s(t), sampling_probs, min(1, p(x)/q(x)),
norm(max(0, p - q)), then one round at K = 1 with every branch enumerated (kept with min(p, q), replaced from the
residual, bonus from the row after the draft). The first probe that disagrees is the likely culprit.
exercises/check.py runs the same accept_probability and residual probes on a student's functions.

What it leaves out: the verifiers/, drafts/ and engine/ packages have no probes of their own. When every probe
passes, explain() says which part of the output is the first to be distributed differently.
"""

import pytest
import torch

import speculative
from tests.conftest import TableModel

PROMPT = [2, 0]
PLANTED = "python -m pytest -x tests/test_exact_enumeration.py -k detects"  # planted bugs and the words they get


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol


def fmt(x):  # (V,) -> "[0.5, 0.3, 0]"
    return "[" + ", ".join(f"{v:.3g}" for v in x.tolist()) + "]"


def same(a, b):
    return a.shape == b.shape and torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=1e-9)


# ---- the pieces, one probe each: fn -> None, or what is wrong in words ----------------------------------------

def window_bug(context_start, window_end):
    """s(t) = 0 if t < W else (t // (W//2) - 1) * (W//2); window_end(t, W) is the last position sharing s(t)."""
    spec = lambda t, W: 0 if t < W else (t // (W // 2) - 1) * (W // 2)
    for W in (4, 5, 8):
        for t in range(3 * W):
            if context_start(t, W) != spec(t, W):
                return (f"context_start({t}, {W}) returned {context_start(t, W)}, expected {spec(t, W)}: the window "
                        "is s(t) = 0 if t < W else (t // (W//2) - 1) * (W//2)")
            end = max(u for u in range(t, t + W + 1) if spec(u, W) == spec(t, W))
            if window_end(t, W) != end:
                return (f"window_end({t}, {W}) returned {window_end(t, W)}, expected {end}: the last position "
                        "whose window starts where position t's does")
    return None


def sampling_probs_bug(fn):
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)  # (V,)
    top2 = torch.softmax(logits.masked_fill(logits < 1.0, float("-inf")), -1)  # [.73, .27, 0, 0]
    cases = [(dict(temperature=1.0), torch.softmax(logits, -1), "softmax(logits)"),
             (dict(temperature=0.5), torch.softmax(logits / 0.5, -1), "softmax(logits / temperature)"),
             (dict(temperature=0.0), torch.tensor([1.0, 0, 0, 0]), "a one-hot at the argmax (greedy)"),
             (dict(temperature=1.0, top_k=2), top2, "the 2 most probable tokens, renormalised"),
             (dict(temperature=1.0, top_p=0.7), top2, "the fewest most probable tokens whose mass reaches "
                                                      "0.7 (0.64 does not, 0.64 + 0.24 does), renormalised")]
    for setting, want, words in cases:
        got = fn(logits, **setting)
        if not same(got, want):
            args = ", ".join(f"{key}={value}" for key, value in setting.items())
            return (f"sampling_probs({fmt(logits)}, {args}) returned {fmt(got)} (sum {got.sum().item():.4g}), "
                    f"expected {fmt(want)}: {words}")
    return None


ACCEPT_CASES = [(0.2, 0.5), (0.5, 0.2), (0.3, 0.3), (0.0, 0.4), (1.0, 1e-3)]


def accept_probability_bug(fn):
    """fn(p_x, q_x) must be min(1, p_x / q_x). (0.5, 0.2) -> 1; q_x / p_x instead gives 0.4: 'upside down'."""
    for p_x, q_x in ACCEPT_CASES:
        got = fn(p_x, q_x)
        try:
            got = float(got)
        except (TypeError, ValueError):
            return f"accept_probability({p_x}, {q_x}) returned {got!r}: return a number"
        want = min(1.0, p_x / q_x)
        if close(got, want):
            continue
        why = "the acceptance test is not min(1, p(x)/q(x))"
        if close(got, p_x / q_x):
            why += ": the min(1, ...) is missing. p(x)/q(x) can exceed 1, a probability cannot"
        elif p_x > 0 and close(got, min(1.0, q_x / p_x)) or p_x > 0 and close(got, q_x / p_x):
            why += ": the ratio is upside down (p and q swapped). Divide the target's p(x) by the draft's q(x)"
        elif close(got, min(p_x, q_x)):
            why += (": min(p(x), q(x)) is the probability that x is proposed AND kept; once x is proposed, keep "
                    "it with min(p(x), q(x)) / q(x)")
        return f"accept_probability({p_x}, {q_x}) returned {got:.4g}, expected {want:.4g}: {why}"
    return None


def norm_residual(p, q):  # norm(max(0, p - q)), for p != q
    r = torch.clamp(p - q, min=0.0)
    return r / r.sum()


def residual_cases():
    d = lambda *xs: torch.tensor(xs, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    rand = lambda: torch.softmax(2 * torch.randn(5, generator=g, dtype=torch.float64), -1)
    return [(d(0.5, 0.3, 0.1, 0.1), d(0.1, 0.2, 0.4, 0.3)), (rand(), rand()), (d(0.6, 0.4, 0.0), d(0.0, 0.5, 0.5)),
            (d(0.25, 0.25, 0.5), d(0.25, 0.25, 0.5))]  # the last: p == q, nothing left over


def residual_bug(fn):
    """fn(p, q) must be norm(max(0, p - q)), any distribution when p == q, and leave p and q as they were."""
    for p, q in residual_cases():
        p0, q0 = p.clone(), q.clone()
        got = fn(p, q)
        args = f"residual(p={fmt(p0)}, q={fmt(q0)})"
        if not torch.equal(p, p0) or not torch.equal(q, q0):
            return (f"{args} changed its argument p or q in place: compute a new tensor (p - q makes one), do not "
                    "write into p or q; the round still needs them")
        if not torch.is_tensor(got) or got.shape != p.shape:
            return f"{args} returned {got!r}: return a torch tensor of shape (V,) = {tuple(p.shape)}"
        got = got.to(torch.float64)
        if torch.equal(p0, q0):  # any distribution is exact here: ask only for one
            if not torch.isfinite(got).all() or (got < 0).any() or not close(got.sum().item(), 1.0, 1e-6):
                return (f"{args} returned {fmt(got)}, not a distribution. When p == q, max(0, p - q) is all zeros "
                        "and dividing by its sum gives NaN. A rejection cannot happen then (every p(x)/q(x) is "
                        "1), so any distribution is correct: return p")
            continue
        want = norm_residual(p0, q0)
        if same(got, want):
            continue
        why = "the replacement is not drawn from the residual norm(max(0, p - q))"
        if same(got, p0):
            why += ": you return p itself. p would count again the mass min(p, q) that accepted drafts already give"
        elif same(got, torch.clamp(p0 - q0, min=0.0)):
            why += f": max(0, p - q) is not normalised (it sums to {got.sum().item():.3g}). Divide it by its sum"
        elif same(got, norm_residual(q0, p0)):
            why += ": p and q are swapped. It is the target's p minus the draft's q"
        elif (got < 0).any():
            why += ": it has negative entries. Clamp p - q at 0 (torch.clamp(p - q, min=0.0)) before normalising"
        return f"{args} returned {fmt(got)}, expected {fmt(want)}: {why}"
    return None


# ---- one round at K = 1, every branch -------------------------------------------------------------------------

def one_round_outcomes(mp, round_fn, k, patch=None):
    """{(drafts, kept, token after the kept drafts or None): probability} of ONE round of round_fn on the table
    models, over every branch. patch: as enumerate_branches' (exercises/check.py checks the draws in words)."""
    from tests.test_exact_enumeration import enumerate_branches  # here: that file imports this one
    target, draft = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8)
    probs = lambda logits: speculative.sampling_probs(logits, 1.0)
    drafted, draft_tokens = [], speculative.draft_tokens

    def recording(draft, tokens, k, probs, generator):  # every chain verifier drafts through draft_tokens
        qs = draft_tokens(draft, tokens, k, probs, generator)
        drafted.append(tuple(tokens[-k:]))
        return qs
    mp.setattr(speculative, "draft_tokens", recording)

    def run():
        drafted.clear()
        tgt, drf = (speculative.CachedModel(m, torch.device("cpu")) for m in (target, draft))
        tokens = list(PROMPT)
        kept = round_fn(tgt, drf, tokens, k, probs, None)
        after = tokens[len(PROMPT) + kept] if len(tokens) > len(PROMPT) + kept else None
        return tuple(drafted[:1]), kept, after
    return enumerate_branches(run, mp, patch=patch)


def round_bug(round_fn):
    """One round at K = 1, every branch, against the table models' own p and q: draft x ~ q, kept with probability
    min(1, p(x)/q(x)); if kept, a bonus token from p after x; if rejected, a token from norm(max(0, p - q))."""
    target, draft = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8)
    p0, q0 = (torch.softmax(m.next_logits(PROMPT), -1) for m in (target, draft))  # (V,) each
    with pytest.MonkeyPatch.context() as mp:
        outcomes = one_round_outcomes(mp, round_fn, 1)  # {(drafts, kept, token after them): probability}
    P = lambda match: sum(w for outcome, w in outcomes.items() if match(*outcome))  # match(drafts, n kept, after)
    V = len(p0)
    for x in range(V):
        drawn = P(lambda drafts, n, after: drafts == ((x,),))
        if not close(drawn, q0[x].item()):
            return (f"the draft proposes x = {x} with probability {drawn:.4f}, expected q(x) = {q0[x]:.4f}: draft "
                    "through speculative.draft_tokens")
        keep = P(lambda drafts, n, after: drafts == ((x,),) and n == 1) / drawn
        want = min(1.0, p0[x].item() / q0[x].item())
        if not close(keep, want):
            why = " (p and q swapped)" if close(keep, min(1.0, q0[x].item() / p0[x].item())) else ""
            return (f"at K = 1 draft x = {x} (p(x) = {p0[x]:.4f}, q(x) = {q0[x]:.4f}) is kept with probability "
                    f"{keep:.4f}, expected min(1, p(x)/q(x)) = {want:.4f}{why}")
        if P(lambda drafts, n, after: drafts == ((x,),) and n == 1 and after is None) > 0:
            return "no bonus token after all K drafts are kept: append one, drawn from p[k]"
        bonus = torch.tensor([P(lambda drafts, n, after: drafts == ((x,),) and n == 1 and after == y)
                              for y in range(V)], dtype=torch.float64) / (keep * drawn)  # (V,)
        p1 = torch.softmax(target.next_logits(PROMPT + [x]), -1)  # p[k]: the target after the draft
        if not same(bonus, p1):
            why = ": it is p[k - 1], the row of the last draft. The bonus comes from p[k], the row after it"
            return (f"after draft x = {x} is kept at K = 1 the bonus token is drawn from {fmt(bonus)}, expected p[k] "
                    f"= {fmt(p1)}{why if same(bonus, p0) else ''}")
    replaced = torch.tensor([P(lambda drafts, n, after: n == 0 and after == y) for y in range(V)],
                            dtype=torch.float64)  # (V,)
    replaced, want = replaced / replaced.sum(), norm_residual(p0, q0)
    if not same(replaced, want):
        why = ": it is p itself" if same(replaced, p0) else ": it is the draft's q" if same(replaced, q0) else ""
        return (f"after a rejection at K = 1 the token is drawn from {fmt(replaced)}, expected norm(max(0, p - q)) = "
                f"{fmt(want)}{why}")
    return None


# ---- what the failure message says ------------------------------------------------------------------------------

def likely_culprit():
    """-> 'speculative.residual: ...' for the first piece of speculative.py (as now patched) a probe finds wrong,
    or None."""
    probes = [("context_start", lambda: window_bug(speculative.context_start, speculative.window_end)),
              ("sampling_probs", lambda: sampling_probs_bug(speculative.sampling_probs)),
              ("accept_probability", lambda: accept_probability_bug(speculative.accept_probability)),
              ("residual", lambda: residual_bug(speculative.residual)),
              ("speculative_round", lambda: round_bug(speculative.speculative_round))]
    for name, probe in probes:
        try:
            bug = probe()
        except Exception as e:
            bug = f"raised {type(e).__name__}: {e}"
        if bug:
            return f"speculative.{name}: {bug}"
    return None


def marginal(joint, i):  # {output[i], or "end" where a stop sequence ended the output sooner: probability}
    out = {}
    for seq, w in joint.items():
        value = seq[i] if i < len(seq) else "end"
        out[value] = out.get(value, 0.0) + w
    return out


def first_difference(got, want, tol=1e-9):
    """-> (i, got's, want's distribution of output[i]) for the first i where they differ, or None."""
    for i in range(max(map(len, list(got) + list(want)), default=0)):
        g, w = marginal(got, i), marginal(want, i)
        if any(not close(g.get(v, 0.0), w.get(v, 0.0), tol) for v in set(g) | set(w)):
            return i, g, w
    return None


def explain(got, want, tol=1e-9):
    """got and want differ: -> 'Likely culprit: ...', or which part of the output differs first."""
    bug = likely_culprit()
    if bug:
        return f"Likely culprit: {bug}"
    show = lambda d: "{" + ", ".join(f"{v}: {d[v]:.4g}" for v in sorted(d, key=str)) + "}"
    first = first_difference(got, want, tol)
    where = (f"output[{first[0]}] is the first part of the output distributed differently: enumerated "
             f"{show(first[1])}, target {show(first[2])}" if first else
             "each part of the output is distributed as the target's, but the parts are wrongly correlated")
    return (f"No probe of speculative.py names a culprit; {where}. For planted bugs and the words they get, run "
            f"{PLANTED}")
