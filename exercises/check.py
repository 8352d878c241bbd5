"""
Checks a student's file (a filled-in copy of exercises/student.py) step by step, and says in words what is wrong.

    python exercises/check.py mine.py              # step 1 accept_probability, step 2 residual, step 3 the round
    python exercises/check.py mine.py --stretch    # then the stretch exercise: block verification

There is no second copy of the answer. Steps 1 and 2 run tests/diagnose.py's probes, which compare with the
formulas min(1, p(x)/q(x)) and norm(max(0, p - q)) (the same probes name the likely culprit when an exactness test
of speculative.py fails). The round is compared with the target's exact distribution, as
tests/test_exact_enumeration.py checks speculative.py: speculative.sample and speculative.coin are replaced by
a scripted chooser that runs the round down EVERY branch of its randomness, on two tiny table models
(tests/conftest.py), and the probability of every output sequence must equal the target's within 1e-9; the stretch
is compared with verifiers/block.py's block_round too. The student's round runs through the project's one registry,
as speculative_generate(..., verify="student"). When it is not exact, the checker finds the likely bug by swapping
the student's pieces for the project's one at a time, and by running the student's round and speculative_round side
by side on scripted coins.
Exit code 0 when every check passes, 1 otherwise.
"""

import argparse
import importlib.util
import math
import os
import random
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pytest  # noqa: E402  (MonkeyPatch: every patch is undone when a check ends)
import torch  # noqa: E402

import speculative  # noqa: E402
from verifiers import block  # noqa: E402
from tests.conftest import TableModel  # noqa: E402
from tests.diagnose import accept_probability_bug, one_round_outcomes, residual_bug  # noqa: E402
from tests.test_exact_enumeration import enumerate_branches, target_joint  # noqa: E402

TEMPLATE = os.path.join(ROOT, "exercises", "student.py")
TOL = 1e-9
PROMPT = [2, 0]
ROUND_CASES = [  # (k, n new tokens, sampling, target block_size, draft block_size): small, so each runs in < 1 s
    (2, 3, dict(temperature=1.0), 8, 8),
    (3, 4, dict(temperature=1.0), 4, 4),  # K = 3 and a window that slides at positions 4 and 6
    (2, 3, dict(temperature=1.0, top_k=2), 8, 8),  # zeros in p and q
]


class Wrong(Exception):
    """A check failed; the message says what is wrong and what to do."""


class Unfinished(Wrong):
    pass


class OtherRandomness(Wrong):
    pass


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="Check your filled-in copy of exercises/student.py.")
    parser.add_argument("path", nargs="?", default=TEMPLATE, help="your file (default: the unfilled template)")
    parser.add_argument("--stretch", action="store_true", help="also check the stretch exercise, block_round")
    return parser.parse_args(argv)


# ---- running the student's code, with errors in words ------------------------------------------------------------

def load(path):
    if not os.path.exists(path):
        raise Wrong(f"there is no file {path}: copy the template first (cp exercises/student.py mine.py) and pass "
                    "its path")
    spec = importlib.util.spec_from_file_location(f"student_{abs(hash(os.path.abspath(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise Wrong(f"{path} does not parse: {e.msg} at line {e.lineno}. Fix that line and run the check again")
    except Exception as e:
        raise Wrong(f"importing {path} failed: {in_words(e, path)}")
    return module


def in_words(error, path):  # an exception -> "ValueError: ... (line 12 of mine.py: `x = ...`)", no traceback
    mine = os.path.abspath(path)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == mine]
    where = f" (line {frames[-1].lineno} of {os.path.basename(path)}: `{frames[-1].line}`)" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def student_function(module, name, path):  # -> the student's function `name`, or Wrong if the file lacks it
    fn = getattr(module, name, None)
    if not callable(fn):
        raise Wrong(f"{path} has no function {name}: keep the template's names and signatures")
    return fn


def call(module, name, path, *args):
    fn = student_function(module, name, path)
    try:
        return fn(*args)
    except NotImplementedError:
        raise Unfinished(f"{name} is not written yet (NotImplementedError): fill in its body")
    except Wrong:
        raise
    except Exception as e:
        raise Wrong(f"{name} raised {in_words(e, path)}")


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol


# ---- steps 1 and 2: accept_probability and residual, by tests/diagnose.py's probes -----------------------------------

def check_accept_probability(module, path):
    bug = accept_probability_bug(lambda p_x, q_x: call(module, "accept_probability", path, p_x, q_x))
    if bug:
        raise Wrong(bug)


def check_residual(module, path):
    bug = residual_bug(lambda p, q: call(module, "residual", path, p, q))
    if bug:
        raise Wrong(bug)


# ---- step 3: the round, by enumerating every branch ------------------------------------------------------------------

def no_other_randomness(mp):
    """The round must draw through speculative.sample and .coin; any other random draw would escape the checker."""
    def refuse(*args, **kwargs):
        raise OtherRandomness("your round drew a random number without speculative.sample or speculative.coin. "
                    "Call them through the module, speculative.sample(...) and speculative.coin(...) after `import "
                    "speculative` (not `from speculative import sample`), so the checker can follow every branch")
    for name in ("multinomial", "rand", "bernoulli", "randint", "rand_like"):
        mp.setattr(torch, name, refuse)
    mp.setattr(random, "random", refuse)


def patch_draws(mp, choose):  # as tests/test_exact_enumeration.patch_sample_and_coin, with checks in words
    def sample(probs, generator=None):
        if not torch.is_tensor(probs) or probs.dim() != 1:
            raise Wrong(f"speculative.sample was given {type(probs).__name__} of shape "
                        f"{tuple(getattr(probs, 'shape', ()))}: give it one distribution, a tensor of shape (V,)")
        total = probs.sum().item()
        if not math.isfinite(total) or abs(total - 1.0) > 1e-6 or (probs < 0).any():
            raise Wrong(f"speculative.sample was given weights that sum to {total:.4g} (or are negative), not a "
                        "distribution: pass p[i], qs[i] or residual(...), which each sum to 1")
        return choose([(x, p) for x, p in enumerate(probs.tolist()) if p > 0])

    def coin(prob, generator=None):
        prob = float(prob)
        if math.isnan(prob):
            raise Wrong("speculative.coin was given NaN: check the probability you pass it")
        prob = min(1.0, max(0.0, prob))  # as speculative.coin: rand() < prob is always True for prob >= 1
        return choose([(b, w) for b, w in ((True, prob), (False, 1 - prob)) if w > 0])

    mp.setattr(speculative, "sample", sample)
    mp.setattr(speculative, "coin", coin)


def checked(fn, name, path):
    """-> fn, with its errors in words and a check of what each round appends and returns."""
    def checked_round(target, draft, tokens, k, probs, generator):
        t = len(tokens)
        try:
            kept = fn(target, draft, tokens, k, probs, generator)
        except NotImplementedError:
            raise Unfinished(f"{name} is not written yet (NotImplementedError): fill in its body")
        except Wrong:
            raise
        except AssertionError as e:  # CachedModel's checks: the caches and `tokens` no longer agree
            raise Wrong(f"your {name} left the target's or the draft's cache out of step with `tokens` "
                        f"(speculative.py's check says: {e})")
        except Exception as e:
            raise Wrong(f"{name} raised {in_words(e, path)}")
        new = len(tokens) - t
        if not 1 <= new <= k + 1:
            raise Wrong(f"with k = {k} your {name} appended {new} tokens to `tokens`; a round appends 1..k+1: the "
                        "kept drafts, then one replacement or bonus token")
        if not isinstance(kept, int) or isinstance(kept, bool) or not 0 <= kept <= k:
            raise Wrong(f"your {name} returned {kept!r}; return how many drafts were kept, an int in 0..k")
        return kept
    return checked_round


def registered(fn, name, path):
    """-> a ROUNDS entry for fn, so that speculative_generate(..., verify=...) runs it like any verifier."""
    return speculative.Verifier(checked(fn, name, path), doc=f"the student's {name} (exercises/check.py)")


def enumerate_round(mp, k, n, sampling, w_target, w_draft, verify):
    """{n new tokens: probability} of speculative_generate(..., verify=verify) over every branch."""
    target, draft = TableModel(seed=0, block_size=w_target), TableModel(seed=1, block_size=w_draft)
    idx = torch.tensor([PROMPT])
    run = lambda: speculative.speculative_generate(target, draft, idx, n, k=k, verify=verify,
                                                   **sampling)[0][0, len(PROMPT):].tolist()
    return enumerate_branches(run, mp, patch=patch_draws)


def worst(got, want):  # -> (outcome, got, want) with the largest difference
    seq = max(set(got) | set(want), key=lambda s: abs(got.get(s, 0.0) - want.get(s, 0.0)))
    return seq, got.get(seq, 0.0), want.get(seq, 0.0)


def exact(got, want):
    _, g, w = worst(got, want)
    return abs(g - w) < TOL and abs(sum(got.values()) - 1.0) < TOL


def round_mismatch(fn, name, path):
    """-> None if fn, run as verify="student", is exact on every case, else (case, got, want)."""
    for case in ROUND_CASES:
        k, n, sampling, w_target, w_draft = case
        with pytest.MonkeyPatch.context() as mp:
            no_other_randomness(mp)
            mp.setitem(speculative.ROUNDS, "student", registered(fn, name, path))
            got = enumerate_round(mp, k, n, sampling, w_target, w_draft, verify="student")
        want = target_joint(TableModel(seed=0, block_size=w_target), PROMPT, n, **sampling)
        if not exact(got, want):
            return case, got, want
    return None


def describe(case, got, want):
    k, n, sampling, w_target, _ = case
    seq, g, w = worst(got, want)
    setting = ", ".join(f"{key}={value}" for key, value in sampling.items())
    return (f"K = {k}, {n} new tokens after the prompt {tuple(PROMPT)}, {setting}, window {w_target}:\n"
            f"    P{tuple(seq)}: your sampler gives {g:.4f}, the target {w:.4f}")


# ---- finding the bug: the student's round beside speculative_round, on scripted coins --------------------------------

def trace(fn, k, coins):
    """Run one round of fn on the table models with coins scripted (then True) and every token the most likely
    one. -> (events, tokens, kept, target cache_len, draft cache_len, p);
    events: ("sample", probs) or ("coin", prob)."""
    target, draft = TableModel(seed=0, block_size=8), TableModel(seed=1, block_size=8)
    tgt, drf = speculative.CachedModel(target, torch.device("cpu")), speculative.CachedModel(draft, torch.device("cpu"))
    tokens, events, script, scored = list(PROMPT), [], iter(coins), []
    probs = lambda logits: speculative.sampling_probs(logits, 1.0)
    score = speculative.score

    def sample(probs, generator=None):
        events.append(("sample", probs.detach().to(torch.float64).clone()))
        return int(probs.argmax())

    def coin(prob, generator=None):
        events.append(("coin", min(1.0, max(0.0, float(prob)))))  # what speculative.coin does with it
        return next(script, True)

    def scoring(*args):
        logits, p = score(*args)
        scored.append(p.detach().clone())
        return logits, p

    with pytest.MonkeyPatch.context() as mp:
        no_other_randomness(mp)
        mp.setattr(speculative, "sample", sample)
        mp.setattr(speculative, "coin", coin)
        mp.setattr(speculative, "score", scoring)
        try:
            kept = fn(tgt, drf, tokens, k, probs, None)
        except Exception as e:  # shown by the enumeration already; here we only compare what happened before it
            kept = e
    return events, tokens, kept, target.cache_len, draft.cache_len, (scored[0] if scored else None)


def same(a, b):
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-9)


def diagnose_round(fn, path):
    """-> the likely bug in words, from the first difference between fn and speculative_round on scripted coins."""
    for k in (2, 3):
        scripts = [[True] * k] + [[True] * i + [False] for i in range(k)]
        for coins in scripts:
            ours, our_tokens, our_kept, our_tc, our_dc, p = trace(speculative.speculative_round, k, coins)
            theirs, their_tokens, their_kept, their_tc, their_dc, _ = trace(fn, k, coins)
            qs = [probs for _, probs in ours[:k]]
            when = (f"when all {k} drafts are kept" if all(coins) else
                    f"when draft {len(coins)} of {k} is rejected")
            for j, mine in enumerate(ours):
                other = theirs[j] if j < len(theirs) else None
                if j < k:  # the draft phase
                    if other is None or other[0] != "sample" or not same(other[1], mine[1]):
                        return ("the drafts are not proposed as speculative.draft_tokens proposes them: call "
                                "qs = speculative.draft_tokens(draft, tokens, k, probs, generator) for step 1")
                    continue
                if mine[0] == "coin":
                    i = j - k  # the draft being tested
                    x = our_tokens[len(PROMPT) + i] if i < len(our_tokens) - len(PROMPT) else None
                    if other is None:
                        return (f"{when}, your round stops testing before draft {i + 1}: test every draft left to "
                                "right until the first rejection")
                    if other[0] == "sample":
                        return (f"{when}, your round draws a token where it should test draft {i + 1}: test "
                                "every draft left to right with speculative.coin(accept_probability(...)) until "
                                "the first rejection")
                    if not close(other[1], mine[1]):
                        draft_x = their_tokens[len(PROMPT) + i] if len(their_tokens) > len(PROMPT) + i else x
                        px, qx = p[i, draft_x].item(), qs[i][draft_x].item()
                        why = "the acceptance test is not min(1, p(x)/q(x))"
                        if close(other[1], qx / px) or close(other[1], min(1, qx / px)):
                            why += " (the ratio is upside down: target p(x) over draft q(x))"
                        return (f"{why}: for draft {i + 1}, p(x) = {px:.4f} and q(x) = {qx:.4f}, so it should be "
                                f"kept with probability {mine[1]:.4f}; your round keeps it with {other[1]:.4f}. "
                                "Use accept_probability(p[i, x].item(), qs[i][x].item()) with x = tokens[t + i]")
                    continue
                # a sample after the coins: the replacement or the bonus
                if all(coins):
                    if other is None:
                        return ("no bonus token after all K drafts are kept: when every draft passes, append one "
                                "more token, speculative.sample(p[k], generator). The target's forward already "
                                "computed p[k], so it comes for free")
                    if other[0] != "sample" or not same(other[1], mine[1]):
                        return ("the bonus token after all K drafts are kept is not drawn from p[k], the target's "
                                "distribution after the last draft: use speculative.sample(p[k], generator)")
                    continue
                i = len(coins) - 1  # the rejected draft
                if other is None:
                    return (f"{when}, your round draws no replacement: the replacement is not drawn from the "
                            "residual. Draw it with speculative.sample(residual(p[i], qs[i]), generator)")
                if other[0] == "coin":
                    return (f"the round does not stop at the first rejection: {when}, your round tests the next "
                            "draft. The later drafts were drawn after the rejected token, so they are worthless: "
                            "draw the replacement from residual(p[i], qs[i]), put it in place of the rejected "
                            "draft and everything after it, and return i")
                if not same(other[1], mine[1]):
                    why = "the replacement is not drawn from the residual norm(max(0, p - q))"
                    if same(other[1], p[i]):
                        why += ": it is drawn from p[i] itself"
                    elif same(other[1], qs[i]):
                        why += ": it is drawn from the draft's q"
                    elif any(same(other[1], speculative.residual(p[m], qs[m])) for m in range(k) if m != i):
                        why += " of the rejected draft's position: use p[i] and qs[i] for draft i"
                    return f"{why} ({when}). Use speculative.sample(residual(p[i], qs[i]), generator)"
            if len(theirs) > len(ours):
                extra = theirs[len(ours)]
                if all(coins):
                    return (f"{when}, your round draws more than one bonus token: append exactly one, from p[k]")
                return (f"the round does not stop at the first rejection: {when}, your round goes on to draw "
                        f"{'another coin' if extra[0] == 'coin' else 'another token'} after the replacement. The "
                        "later drafts were drawn after the rejected token, so they are worthless: return i "
                        "right after appending the replacement")
            if isinstance(their_kept, Exception) and not isinstance(our_kept, Exception):
                hint = ("; everything matched speculative_round until then, so the round does not stop at the "
                        "first rejection: return i right after appending the replacement"
                        if not all(coins) and len(theirs) == len(ours) else "")
                return f"{when}, your round raised {in_words(their_kept, path)}{hint}"
            if their_tokens != our_tokens:
                return (f"{when}, your round leaves tokens {their_tokens[len(PROMPT):]} after the prompt where "
                        f"{our_tokens[len(PROMPT):]} are expected: after a rejection at draft i, drop the rejected "
                        "draft and all later ones (tokens[t + i:] = [replacement]); after all are kept, append "
                        "the bonus token")
            if their_kept != our_kept:
                return (f"{when}, your round returns {their_kept}, but {our_kept} drafts were kept: return i at a "
                        "rejection of draft i (0-based), and k when all are kept")
            if (their_tc, their_dc) != (our_tc, our_dc):
                return (f"{when}, the caches still hold tokens the round threw away: after a rejection at draft "
                        "i, call target.rollback(t + i) and draft.rollback(t + i)")
    return None


def check_round(module, path):
    fn = student_function(module, "speculative_round", path)
    try:
        bad = round_mismatch(fn, "speculative_round", path)
        error = None
    except (Unfinished, OtherRandomness):
        raise
    except Wrong as e:
        bad, error = None, e
    if bad is None and error is None:
        return
    # which piece is wrong? the student's round with one of the project's pieces in place of the student's
    likely = None
    for name in ("accept_probability", "residual"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(module, name, getattr(speculative, name))
            try:
                fixed = round_mismatch(fn, "speculative_round", path) is None
            except Wrong:
                fixed = False
        if fixed:
            likely = (f"Likely bug: your {name}. It passed the checker's examples, but with speculative.{name} in "
                      f"its place your round is exact: check your {name} on other inputs (tensors, float32)")
            break
    if likely is None:
        diagnosis = diagnose_round(fn, path)
        likely = f"Likely bug: {diagnosis}." if diagnosis else None
    if bad:  # the evidence first, then what it points to
        likely = likely or ("Likely bug: not found by comparing your round with speculative_round on scripted "
                            "coins; compare your loop line by line with the template's docstring")
        raise Wrong(f"your round is not exact.\n  {describe(*bad)}\n  {likely}")
    # subtle: an error's words are a symptom that guesses at a cause (the caches' check says "rollback() after a
    # rejection" for a missing bonus token too, where nothing was rejected), so the likely bug replaces them
    raise Wrong(likely or f"{error}")


# ---- stretch: block verification ------------------------------------------------------------------------------

def block_outcomes(mp, fn, path, k):
    """{(drafts, kept, next token): probability} of ONE round (K = k) of fn, over every branch."""
    return one_round_outcomes(mp, checked(fn, "block_round", path), k, patch=patch_draws)


def kept_distribution(outcomes, k):
    dist = [0.0] * (k + 1)
    for (_, kept, _), prob in outcomes.items():
        dist[kept] += prob
    return dist


def check_block(module, path):
    fn = student_function(module, "block_round", path)
    try:
        bad = round_mismatch(fn, "block_round", path)
    except Unfinished:
        raise Unfinished("block_round is not written yet (NotImplementedError): fill in its body")
    if bad:
        raise Wrong(f"your block_round is not exact.\n  {describe(*bad)}\n  Likely bug: "
                    + diagnose_block(fn, path))
    for k in (2, 3):
        dists = {}
        for label, round_fn in (("yours", fn), ("block", block.block_round),
                                ("tokenwise", speculative.speculative_round)):
            with pytest.MonkeyPatch.context() as mp:
                no_other_randomness(mp)
                dists[label] = kept_distribution(block_outcomes(mp, round_fn, path, k), k)
        mean = {label: sum(i * w for i, w in enumerate(d)) for label, d in dists.items()}
        if not all(close(a, b) for a, b in zip(dists["yours"], dists["block"])):
            same_as_tokenwise = all(close(a, b) for a, b in zip(dists["yours"], dists["tokenwise"]))
            raise Wrong(f"your block_round is exact, but it does not keep as many drafts as block verification: "
                        f"with K = {k}, drafts kept per round on average: yours {mean['yours']:.4f}, block "
                        f"verification {mean['block']:.4f}, token-wise {mean['tokenwise']:.4f}. "
                        + ("It keeps exactly what token-wise verification keeps: carry the weight a_i along the "
                           "block instead of stopping at the first p(x)/q(x) < 1, and keep the longest prefix "
                           "whose coin (probability h_i) says yes" if same_as_tokenwise else
                           "Check the stop probabilities h_i (h_k = a_k; h_i = R_i / (R_i + 1 - a_i)) and that "
                           "you keep the LONGEST prefix whose coin says yes"))


def diagnose_block(fn, path):
    """-> words: does the cut tau come out as in verifiers/block.py's block_round, and the token after it?"""
    for k in (2, 3):
        joint = {}
        for label, round_fn in (("yours", fn), ("block", block.block_round)):
            with pytest.MonkeyPatch.context() as mp:
                no_other_randomness(mp)
                try:
                    joint[label] = block_outcomes(mp, round_fn, path, k)
                except Wrong as e:
                    return str(e)
        cut = lambda d: {key[:2]: sum(w for other, w in d.items() if other[:2] == key[:2]) for key in d}
        if not exact(cut(joint["yours"]), cut(joint["block"])):
            return ("the number of drafts kept (the cut tau) is not distributed as in block verification: check "
                    "the weights a_i = min(1, a_{i-1} p_i(x_i) / q_i(x_i)), the stop probabilities h_k = a_k and "
                    "h_i = R_i / (R_i + 1 - a_i), and that you keep the LONGEST prefix whose coin says yes")
    return ("the cut tau is right, but the token after it is not: after a cut at tau < k draw it from "
            "norm(max(0, a_tau p[tau] - qs[tau])) (residual(a_tau * p[tau], qs[tau])), after tau == k from p[k]; "
            "and keep only tokens[:t + tau] before appending it")


# ---- the steps in order ---------------------------------------------------------------------------------------

STEPS = [("step 1: accept_probability", check_accept_probability),
         ("step 2: residual", check_residual),
         ("step 3: speculative_round, every branch enumerated, run as verify='student'", check_round)]


def main(argv=None):
    args = get_args(argv)
    print(f"checking {os.path.relpath(args.path)}")
    try:
        module = load(args.path)
    except Wrong as e:
        print(f"  {e}")
        return 1
    steps = STEPS + ([("stretch: block_round (block verification), exact and as many drafts kept as Sun et al.",
                       check_block)] if args.stretch else [])
    failed = False
    for label, check in steps:
        if failed and check in (check_round, check_block):
            print(f"{label}: skipped until the steps above pass (the round uses them)")
            continue
        try:
            check(module, args.path)
            print(f"{label}: ok")
        except Wrong as e:
            print(f"{label}: FAILED\n  {e}")
            failed = True
    if failed:
        print("not yet: fix the first FAILED step above and run the check again")
        return 1
    print("all checks passed" + ("" if args.stretch else " (for the stretch exercise add --stretch)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
