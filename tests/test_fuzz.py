"""Fuzz: sampling_probs, accept_probability, residual and whole speculative runs on hostile random inputs.

Seeded random loops (no extra dependency): logits with -inf entries (masked tokens), ties, huge (1e38) and tiny
(1e-40) magnitudes, in float32, float64 and bfloat16; temperatures log-uniform in [1e-6, 1e6], and 0; top-k
from 1 to above V; top-p log-uniform down to 1e-12. Every distribution must be finite, non-negative, sum to 1
and be zero outside the allowed set, every drafted token must have q(x) > 0, and bad logits (NaN, +inf, every
token -inf) must end in a SamplingError that names the model and the position, and keeps the tokens so far.
A bad row that plain sampling never reaches (the target's row after a draft it gives probability 0) must not:
every verifier reads a row only when it uses it, as plain sampling does.
"""

import math
import random

import pytest
import torch

import speculative
import verifiers  # noqa: F401  (registers verify="block" and the others)
from engine.fast import FastGPT
from speculative import (SamplingError, accept_probability, autoregressive_generate, checked, context_start,
                         residual, sampling_probs, speculative_generate)
from tests.conftest import TableModel, random_gpt
from tests.test_exact_enumeration import assert_same_distribution, enumerate_branches, target_joint

NAN, INF = float("nan"), float("inf")


def random_logits(rng, V, dtype=torch.float32):  # -> (V,) finite logits, some -inf, at least one finite
    kind = rng.choice(["normal", "ties", "all tied", "huge", "tiny", "one far ahead"])
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    x = torch.randn(V, generator=g, dtype=torch.float64)
    if kind == "normal":
        x = x * 10 ** rng.uniform(-2, 2)
    elif kind == "ties":
        x = torch.randint(0, 3, (V,), generator=g).double()  # many exact ties
    elif kind == "all tied":
        x = torch.full((V,), rng.uniform(-5, 5))
    elif kind == "huge":
        x = x * 10 ** rng.uniform(30, 37.5)  # |x| up to ~1e38: float32's limit
    elif kind == "tiny":
        x = x * 10 ** rng.uniform(-42, -30)  # float32 denormals
    else:
        x[rng.randrange(V)] = 1e30
    if rng.random() < 0.5:  # masked tokens: -inf is a legitimate logit
        x[torch.rand(V, generator=g) < rng.random()] = -INF
        if torch.isneginf(x).all():
            x[rng.randrange(V)] = rng.uniform(-1, 1)
    return x.to(dtype)


def random_settings(rng, V):
    temperature = rng.choice([0.0, 1.0, 10 ** rng.uniform(-6, 6), 10 ** rng.uniform(-6, 6)])
    top_k = rng.choice([None, 1, rng.randint(1, V + 3), V, V + 5])
    top_p = rng.choice([None, 1.0, 10 ** rng.uniform(-12, 0), rng.uniform(0.5, 1.0)])
    return temperature, top_k, top_p


def assert_distribution(probs):
    assert probs.dtype in (torch.float32, torch.float64)
    assert torch.isfinite(probs).all() and (probs >= 0).all(), probs
    assert abs(probs.sum().item() - 1.0) < 1e-5, probs.sum().item()


def reference_before_top_p(logits, temperature, top_k):  # float64, from the definitions
    x = logits.double()
    if top_k is not None and top_k < len(x):
        kth = sorted(x.tolist(), reverse=True)[top_k - 1]
        x = x.masked_fill(x < kth, -INF)
    w = torch.exp((x - x.max()) / temperature)
    return w / w.sum()


@pytest.mark.parametrize("seed", range(4))
def test_sampling_probs_is_a_distribution_on_the_allowed_set(seed):
    rng = random.Random(seed)
    for _ in range(150):
        V = rng.choice([1, 2, 3, 7, 50])
        logits = random_logits(rng, V, rng.choice([torch.float32, torch.float64, torch.bfloat16]))
        temperature, top_k, top_p = random_settings(rng, V)
        probs = sampling_probs(logits, temperature, top_k, top_p)
        assert_distribution(probs)
        x = logits.double()  # exact for every dtype here
        assert (probs[torch.isneginf(x)] == 0).all(), "a masked token got probability"
        if temperature == 0:
            assert probs[x.argmax()] == 1.0 and x[x.argmax()] == x.max()
            continue
        if top_k is not None and top_k < V:  # zero below the k-th largest logit; ties with it stay
            assert (probs[x < sorted(x.tolist(), reverse=True)[top_k - 1]] == 0).all()
        before = sampling_probs(logits, temperature, top_k)  # the distribution top-p cuts
        ref = reference_before_top_p(x, temperature, top_k)
        assert (before.double() - ref).abs().max().item() < 1e-5, (logits, temperature, top_k)
        kept = probs > 0
        if top_p is None or top_p >= 1.0:
            assert torch.equal(kept, before > 0)
            continue
        b = before.double()
        least = b[kept].min()
        assert torch.equal(kept, b >= least), "top-p keeps the most probable tokens, ties together"
        assert b[kept].sum() >= top_p - 1e-5, "the kept mass reaches top_p"
        assert b[b > least].sum() < top_p + 1e-5, "and no smaller such set exists"
        assert torch.allclose(probs.double(), b * kept / b[kept].sum(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("seed", range(2))
def test_sampling_probs_does_not_depend_on_token_order(seed):
    rng = random.Random(seed)
    for _ in range(100):
        V = rng.choice([2, 5, 20])
        logits = random_logits(rng, V)
        temperature, top_k, top_p = random_settings(rng, V)
        if temperature == 0:
            continue  # greedy takes the first of tied maxima, by design
        perm = torch.tensor(rng.sample(range(V), V))
        a = sampling_probs(logits, temperature, top_k, top_p)[perm]
        b = sampling_probs(logits[perm], temperature, top_k, top_p)
        assert torch.equal(a > 0, b > 0) and torch.allclose(a, b, atol=1e-6)


BAD_ROWS = {"NaN": ([0.5, NAN, -INF], "hold NaN"), "+inf": ([0.5, INF, -INF], r"hold \+inf"),
            "all -inf": ([-INF, -INF, -INF], "every logit is -inf")}


@pytest.mark.parametrize("bad", BAD_ROWS)
def test_bad_logits_raise_a_clear_error_at_every_setting(bad):
    row, cause = BAD_ROWS[bad]
    rng = random.Random(0)
    for _ in range(60):
        temperature, top_k, top_p = random_settings(rng, 3)
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            logits = torch.tensor(row, dtype=dtype)
            probs = sampling_probs(logits, temperature, top_k, top_p)
            with pytest.raises(SamplingError, match=f"position 5 from the draft: .*{cause}") as e:
                checked(probs, logits, "draft", 5, [7, 8, 9, 1, 2, 3], 3)
            assert e.value.tokens == [7, 8, 9] and e.value.model == "draft" and e.value.position == 5
            assert isinstance(e.value, ValueError)
    # rows are independent: a bad row beside good ones spoils only itself (the target scores K+1 rows at once)
    logits = torch.stack([torch.tensor([1.0, 2.0, 3.0]), torch.tensor(row), torch.tensor([0.0, -INF, 0.0])])
    probs = sampling_probs(logits, 0.7, 2, 0.9)
    assert_distribution(probs[0])
    assert_distribution(probs[2])
    assert not math.isfinite(probs[1].sum().item())


def test_accept_probability_is_a_probability():
    rng = random.Random(0)
    values = [0.0, 5e-324, 1.4e-45, 1e-30, 1e-8, 0.5, 1 - 1e-7, 1.0]
    for _ in range(2000):
        p_x = rng.choice(values + [rng.random()])
        q_x = rng.choice(values[1:] + [rng.random() or 1.0])  # q(x) > 0: x was drawn from q
        a = accept_probability(p_x, q_x)
        assert 0.0 <= a <= 1.0 and math.isclose(a * q_x, min(p_x, q_x), rel_tol=1e-12, abs_tol=1e-300)


@pytest.mark.parametrize("seed", range(2))
def test_residual_is_a_distribution_that_makes_the_rejection_step_exact(seed):
    rng = random.Random(seed)
    for _ in range(150):
        V = rng.choice([1, 2, 5, 30])
        settings = random_settings(rng, V)
        p = sampling_probs(random_logits(rng, V), *settings)
        kind = rng.choice(["independent", "equal", "one ulp apart", "one-hot"])
        if kind == "independent":
            q = sampling_probs(random_logits(rng, V), *random_settings(rng, V))
        elif kind == "equal":
            q = p.clone()  # subtle: max(0, p - q) is all zeros
        elif kind == "one ulp apart":
            q = torch.nextafter(p, (torch.rand(V) < 0.5).float())  # a residual of a few ulps
        else:
            q = torch.nn.functional.one_hot(torch.tensor(rng.randrange(V)), V).float()
        r = residual(p, q)
        assert_distribution(r)
        assert (r[p == 0] == 0).all(), "the replacement must be a token the target allows"
        # Leviathan et al. A.1: P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum min(p, q)) r(x) = p(x)
        pd, qd, rd = p.double(), q.double(), r.double()
        rejected = 1 - torch.minimum(pd, qd).sum()
        assert (torch.minimum(pd, qd) + rejected * rd - pd).abs().max().item() < 1e-5


class CheckedDraws:
    """Wraps speculative.sample and .coin: every distribution drawn from is one, every draw has probability > 0,
    every coin's probability lies in [0, 1]."""

    def __init__(self, monkeypatch):
        sample, coin = speculative.sample, speculative.coin
        self.draws = 0

        def checked_sample(probs, generator=None):
            assert_distribution(probs)
            x = sample(probs, generator)
            assert probs[x] > 0, "drew a token of probability 0 (q(x) > 0 is what acceptance divides by)"
            self.draws += 1
            return x

        def checked_coin(prob, generator=None):
            assert 0.0 <= prob <= 1.0, prob
            return coin(prob, generator)

        monkeypatch.setattr(speculative, "sample", checked_sample)
        monkeypatch.setattr(speculative, "coin", checked_coin)


def hostile_table_model(rng, seed, V, W, bad=None):
    """A TableModel whose logits are random_logits rows (masks, ties, extremes); `bad` rows get bad logits."""
    model = TableModel(seed, vocab_size=V, block_size=W)
    dtype = rng.choice([torch.float32, torch.float64])
    model.table = torch.stack([random_logits(rng, V, dtype) for _ in range(V * V * 2)]).view(V, V, 2, V)
    for _ in range(bad or 0):
        model.table[rng.randrange(V), rng.randrange(V), rng.randrange(2)] = torch.tensor(rng.choice(
            [[NAN] + [0.0] * (V - 1), [INF] + [0.0] * (V - 1), [-INF] * V]), dtype=dtype)
    return model


def plain_probs(model, tokens, t, settings):  # the target's distribution for position t, computed directly
    W = model.config.block_size
    return sampling_probs(model.next_logits(tokens[context_start(t, W):t]), *settings)


@pytest.mark.parametrize("seed", range(4))
def test_speculative_runs_on_hostile_logits_draw_only_allowed_tokens(seed, monkeypatch):
    rng = random.Random(seed)
    draws = CheckedDraws(monkeypatch)
    for trial in range(12):
        V, W = rng.choice([2, 3, 5]), rng.choice([4, 6, 8])
        target, draft = hostile_table_model(rng, 2 * trial, V, W), hostile_table_model(rng, 2 * trial + 1, V, W)
        settings = random_settings(rng, V)
        prompt = [rng.randrange(V) for _ in range(rng.randint(1, 3))]
        out, stats = speculative_generate(target, draft, torch.tensor([prompt]), 10, k=rng.randint(1, 5),
                                          temperature=settings[0], top_k=settings[1], top_p=settings[2],
                                          generator=torch.Generator().manual_seed(trial))
        tokens = out[0].tolist()
        for t in range(len(prompt), len(tokens)):  # every emitted token is one plain sampling could emit
            assert plain_probs(target, tokens, t, settings)[tokens[t]] > 0
    assert draws.draws > 100


@pytest.mark.parametrize("seed", range(4))
def test_bad_logits_mid_run_raise_a_sampling_error_that_keeps_the_tokens(seed):
    rng = random.Random(100 + seed)
    errors = {"target": 0, "draft": 0}
    for trial in range(25):
        V, W = rng.choice([2, 3]), rng.choice([4, 8])
        target = hostile_table_model(rng, 2 * trial, V, W, bad=rng.choice([0, 1, 2]))
        draft = hostile_table_model(rng, 2 * trial + 1, V, W, bad=rng.choice([0, 1, 2]))
        settings = dict(zip(["temperature", "top_k", "top_p"], random_settings(rng, V)))
        prompt = [rng.randrange(V) for _ in range(rng.randint(1, 3))]
        for run in ("plain", "speculative"):
            streamed = list(prompt)
            try:
                if run == "plain":
                    autoregressive_generate(target, torch.tensor([prompt]), 12, stream=streamed.extend, **settings)
                else:
                    speculative_generate(target, draft, torch.tensor([prompt]), 12, k=rng.randint(1, 4),
                                         stream=streamed.extend, **settings)
                continue
            except SamplingError as e:
                err = e
            assert err.tokens[:len(streamed)] == streamed, "tokens generated before the error are kept"
            assert err.model in ("target", "draft") and (run == "speculative" or err.model == "target")
            if err.model == "target":  # the target's own distribution at that position really is bad
                assert err.position == len(err.tokens)
                assert not math.isfinite(plain_probs(target, err.tokens, err.position, settings.values()).sum())
            else:  # a draft fails before the target has kept any token of the round: only streamed ones are final
                assert err.tokens == streamed and len(err.tokens) <= err.position
            assert f"position {err.position} from the {err.model}" in str(err)
            errors[err.model] += 1
    assert errors["target"] > 0 and errors["draft"] > 0, errors


@pytest.mark.parametrize("verify", [dict(), dict(verify="block"), dict(verify="multidraft", n_drafts=2),
                                    dict(verify="lenient", lenience=0.5), dict(verify="typical")])
@pytest.mark.parametrize("broken", ["target", "draft"])
@pytest.mark.parametrize("k", [3, "auto"])
def test_a_gpt_with_nan_weights_is_named_in_the_error(broken, verify, k):
    pair = {"target": random_gpt(0), "draft": random_gpt(1, n_layer=1, n_embd=8, n_head=1)}
    with torch.no_grad():
        pair[broken].transformer.h[0].mlp.c_fc.weight[0, 0] = NAN
    if k == "auto":  # and through fast.py's decoder
        pair = {name: FastGPT(model) for name, model in pair.items()}
        k = 4 if verify.get("verify") == "multidraft" else k  # multidraft refuses k="auto"
    with pytest.raises(SamplingError, match=f"from the {broken}: its logits hold NaN.*earlier checkpoint") as e:
        speculative_generate(pair["target"], pair["draft"], torch.tensor([[1, 2]]), 8, k=k, **verify)
    assert e.value.tokens == [1, 2] and e.value.position == 2


def test_float16_overflow_is_named_in_the_error():
    target = random_gpt(0, sharpness=1.0)
    with torch.no_grad():
        target.transformer.ln_f.weight.mul_(1e6)  # logits of about 1e5 in float32, beyond float16's 65504
    with pytest.raises(SamplingError, match=r"position 2 from the target: its logits hold (NaN|\+inf).*float16"):
        autoregressive_generate(target.half(), torch.tensor([[1, 2]]), 5)


# ---- a target row that no verifier needs: the one after a draft the target gives probability 0 -----------------

DEAD_END = 2  # a token the target never emits, after which it has no distribution at all

UNREAD_ROW_VERIFIERS = [dict(verify="tokenwise"), dict(verify="block"), dict(verify="multidraft", n_drafts=2),
                        dict(verify="tree", branches=(2, 2), children="sample"),
                        dict(verify="tree", branches=(2, 2), children="top"),
                        dict(verify="typical"), dict(verify="lenient", lenience=0.5)]
VERIFIER_IDS = ["tokenwise", "block", "multidraft", "tree-sample", "tree-top", "typical", "lenient"]


def dead_end_pair(block_size=8):
    """(target, draft, rows): 3-token TableModels. The target gives DEAD_END probability 0 everywhere and, right
    after it, every logit -inf: a row plain sampling never reaches. The draft proposes DEAD_END most of the time.
    rows lists every all -inf row the target scored, so a test can show the row was really there."""
    target, draft = TableModel(seed=0, block_size=block_size), TableModel(seed=1, block_size=block_size)
    target.table[..., DEAD_END] = -INF  # p(DEAD_END) = 0 ...
    target.table[:, DEAD_END] = -INF  # ... and after DEAD_END no token at all, whichever token starts the window
    draft.table[..., DEAD_END] += 1.5  # q(DEAD_END) > 0, and the draft's top token in most contexts
    rows, next_logits = [], target.next_logits

    def recorded(context):
        logits = next_logits(context)
        if torch.isneginf(logits).all():
            rows.append(list(context))
        return logits

    target.next_logits = recorded
    return target, draft, rows


@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.0)], ids=["T=1", "greedy"])
@pytest.mark.parametrize("verify", UNREAD_ROW_VERIFIERS, ids=VERIFIER_IDS)
def test_no_verifier_reads_the_row_after_a_draft_the_target_forbids(verify, sampling, monkeypatch):
    """Every branch enumerated (tests/test_exact_enumeration.py): no SamplingError although the target scores rows
    with every logit -inf, DEAD_END never emitted, and the lossless verifiers still give the target's joint."""
    target, draft, dead_rows = dead_end_pair()
    prompt, n = [1, 0], 3
    run = lambda: speculative_generate(target, draft, torch.tensor([prompt]), n, k=2, **sampling, **verify)[0][
        0, len(prompt):].tolist()
    got = enumerate_branches(run, monkeypatch)
    assert dead_rows, "the draft should have proposed DEAD_END, so that the target scored a row after it"
    assert abs(sum(got.values()) - 1.0) < 1e-9
    assert not any(DEAD_END in seq for seq in got), "emitted a token the target gives probability 0"
    if speculative.ROUNDS[verify["verify"]].lossless:
        assert_same_distribution(got, target_joint(target, prompt, n, **sampling))


@pytest.mark.parametrize("verify", UNREAD_ROW_VERIFIERS, ids=VERIFIER_IDS)
def test_seeded_runs_past_a_forbidden_draft_never_fail_or_emit_it(verify):
    """The real draws (torch.multinomial, coins), 30 seeds x 12 tokens, window 6: it slides inside the runs."""
    target, draft, dead_rows = dead_end_pair(block_size=6)
    for seed in range(30):
        out, stats = speculative_generate(target, draft, torch.tensor([[1, 0]]), 12, k=3, **verify,
                                          generator=torch.Generator().manual_seed(seed))
        assert DEAD_END not in out[0].tolist() and stats.new_tokens == 12
    assert len(dead_rows) >= 30, "the target should have scored the row after DEAD_END in most runs"
