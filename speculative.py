"""
Speculative sampling next to plain sampling, in one file to read beside the paper.

Sources: Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling"
(arXiv:2302.01318), Algorithm 2; Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding" (arXiv:2211.17192), Algorithm 1 and Theorem 3.8. Notation is Leviathan's: p is the TARGET's
distribution, q the DRAFT's (Chen swaps the letters: his q is the target and his p the draft).

One round (speculative_round): the draft proposes K tokens, the target scores all K+1 positions in ONE
forward, and a modified rejection step keeps or replaces them. A round emits 1..K+1 tokens, distributed
exactly as sampling from the target alone (Leviathan et al., Appendix A.1; the tests enumerate every branch).

Both samplers condition position t on the window x[s(t):t] (see context_start) and use KV caches (model.py).
What it leaves out: batches (B > 1: engine/batched.py, the same round for B rows at once), other verifiers
and tree-shaped drafts (the verifiers/ package, which registers them in ROUNDS), drafts other than a model (the
drafts/ package, which registers them in DRAFTS). k="auto" (choosing K per round) lives in choose_k.py.
"""

import time
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from choose_k import AutoK


@dataclass
class Stats:
    """What a generate call did. `rounds` holds (t, drafted, accepted) for every speculative round."""
    new_tokens: int = 0
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens kept
    total_time: float = 0.0  # seconds for the whole call
    rounds: list = field(default_factory=list)
    tested: list = field(default_factory=list)  # drafts each round tested: kept + 1 after a rejection, else kept
    target_times: list = field(default_factory=list)  # seconds of each target forward ([0]: the prompt)
    draft_times: list = field(default_factory=list)  # seconds of each draft forward ([0]: the prompt)
    target_calls = property(lambda self: len(self.target_times))  # one per round, one per token when plain
    draft_calls = property(lambda self: len(self.draft_times))
    target_time = property(lambda self: sum(self.target_times))  # seconds inside the target's forwards
    draft_time = property(lambda self: sum(self.draft_times))

    @property
    def acceptance_rate(self):
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_target_call(self):
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")


# ---- turning logits into the distribution we sample from ---------------------------------------------------

def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):  # (..., V) -> (..., V)
    """Top-k, temperature, then top-p. temperature == 0 is greedy: a one-hot at the argmax.

    The SAME function makes p and q, so q is exactly the distribution the draft token was drawn from.
    [2., 1., 0.] with top_p=0.6 -> [1., 0., 0.] (0.665 already reaches 0.6); with top_p=0.7 -> [.73, .27, 0.]
    Tokens tied at either cut stay together, so the result does not depend on token order. A -inf logit (a
    masked token) gets probability 0; a row with a NaN or +inf logit, or with every logit -inf, comes out NaN,
    so that checked() can turn it into a clear error.
    """
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # probabilities and the acceptance test in float32 or better (bf16/fp16 models)
    if temperature == 0:  # greedy, with no division by zero
        top = logits.amax(-1, keepdim=True)  # (..., 1); NaN, +inf, or -inf when every token is masked
        # subtle: argmax finds a token even among NaN logits; adding top - top (0, or NaN) keeps a bad row visible
        return F.one_hot(logits.argmax(-1), logits.size(-1)).to(logits.dtype) + (top - top)
    if top_k is not None and top_k < logits.size(-1):  # subtle: on the raw logits, where rounding made no ties
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))  # ties with the k-th token stay
    if temperature != 1.0:  # subtract the max first: logits / 1e-6 alone can overflow to inf (softmax: NaN)
        logits = (logits - logits.amax(-1, keepdim=True)) / temperature
    probs = F.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:  # the smallest set of most probable tokens whose mass reaches top_p
        sorted_p = torch.sort(probs, dim=-1, descending=True).values
        mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of the tokens ranked above each one
        last = torch.where(mass_before < top_p, sorted_p, 1.0).amin(-1, keepdim=True)  # the least probable kept
        probs = probs.masked_fill(probs < last, 0.0)  # the top token always stays, and so do ties with `last`
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


class SamplingError(ValueError):
    """A distribution we were about to sample from is not one (NaN, +inf or all -inf logits). Nothing is lost:
    .tokens holds every id generated so far, prompt included (continue with torch.tensor([err.tokens]));
    .model is "target" or "draft"; .position is the index of the token that could not be drawn."""

    def __init__(self, message, tokens=None, model=None, position=None):
        super().__init__(message)
        self.tokens, self.model, self.position = tokens, model, position


def checked(probs, logits, model, position, tokens, generated):  # probs (V,) -> probs, or SamplingError
    """The check before every draw: one sum, one sync. sampling_probs makes every bad row NaN, so the sum shows
    them all. tokens[:generated] are final (a draft's proposals are not, until the target keeps them)."""
    if abs(probs.sum().item() - 1.0) < 1e-3:  # NaN fails this test too
        return probs
    why = why_not_a_distribution(logits)
    raise SamplingError(f"cannot sample the token at position {position} from the {model}: {why}. The "
                        f"{generated} tokens generated so far (prompt included) are in this error's .tokens",
                        tokens[:generated], model, position)


def why_not_a_distribution(logits):  # (V,) -> the likely cause and fix, for the error message
    if torch.isnan(logits).any():
        return ("its logits hold NaN. Likely causes: NaN in the weights (a diverged training run: restore an "
                "earlier checkpoint, or retrain with a lower --lr) or float16 activations that overflowed (run "
                "the model in float32 or bfloat16)")
    if torch.isposinf(logits).any():
        return ("its logits hold +inf. Likely cause: activations that overflowed in float16/bfloat16 (run the "
                "model in float32), or inf in the weights (restore an earlier checkpoint)")
    if torch.isneginf(logits).all():
        return ("every logit is -inf: a mask (a logits processor, a list of banned tokens) removed every token. "
                "Leave at least one token allowed at every position")
    return (f"no token is left after top-k, temperature and top-p although the logits are finite (min "
            f"{logits.min().item():.4g}, max {logits.max().item():.4g}): a bug in sampling_probs, please report "
            "it with these logits")


def sample(probs, generator=None):  # (V,) -> int. All randomness goes through sample() and coin().
    """x ~ probs by the inverse of its distribution function: the first token whose cumulative mass exceeds one
    uniform. Exact, and a 49,152-token row costs one cumulative sum, where torch.multinomial took about 1 ms on a CPU
    (bench.py --profile). A token of probability 0 is never drawn: its cumulative mass equals the one before it."""
    cdf = probs.to(torch.float64).cumsum(-1)  # (V,); float64, so rounding cannot skip a token of small mass
    u = uniform(generator) * cdf[-1].item()  # in [0, total): probs need not sum to exactly 1
    x = int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype, device=cdf.device), right=True))
    # subtle: a token of mass 0 cannot be the first past u (its cumulative mass is the one before it), but u rounded
    # up to the total gives x = V: then the last token of positive mass
    return x if x < probs.size(-1) else int(torch.nonzero(probs).max())


def uniform(generator=None):  # -> u ~ U[0, 1), the value a coin compares
    return torch.rand((), generator=generator, device=generator.device if generator else "cpu").item()


def coin(prob, generator=None):  # -> True with probability prob
    return uniform(generator) < prob


def accept_probability(p_x, q_x):
    """min(1, p(x) / q(x)). q(x) > 0 because x was drawn from q."""
    return min(1.0, p_x / q_x)


def residual(p, q):  # (V,), (V,) -> (V,)
    """norm(max(0, p - q)): where the replacement for a rejected draft token is drawn from. From a p and q that
    checked() passed it is a distribution again, zero wherever p is (tests/test_fuzz.py), so needs no check."""
    r = torch.clamp(p - q, min=0.0)
    total = r.sum().item()
    if total <= 0.0:  # subtle: p == q leaves no residual mass. A rejection then has probability 0 (every
        return p  # p(x)/q(x) is 1), so it only happens by rounding and any choice is exact; p is natural.
    return r / total


# ---- the context window: identical in both samplers --------------------------------------------------------

def context_start(t, W):
    """s(t): the token at position t is conditioned on x[s(t):t]. Slides by W//2 once t >= W.

    W=8: t=0..7 -> 0; t=8..11 -> 4; t=12..15 -> 8. Every context holds W//2 .. W-1 tokens once t >= W.
    """
    return 0 if t < W else (t // (W // 2) - 1) * (W // 2)


def window_end(t, W):
    """The last position that shares s(t) with t. W=8: t=3 -> 7, t=9 -> 11."""
    return W - 1 if t < W else (t // (W // 2) + 1) * (W // 2) - 1


# ---- stop sequences: identical in every sampler --------------------------------------------------------------

def stop_end(tokens, first_new, stop, start):
    """-> the end (exclusive) of the first stop sequence that is complete in tokens[first_new:] and ends at or after
    position `start`, or None. Only new tokens count: a stop sequence must lie wholly after the prompt.
    stop [[0, 0]], tokens [5, 0, 0, 1, 0, 0] (prompt [5]), start 1 -> 3: generation ends after the first 0, 0."""
    for end in range(max(start, first_new), len(tokens)):
        for seq in stop:
            if end + 1 - len(seq) >= first_new and tokens[end + 1 - len(seq):end + 1] == list(seq):
                return end + 1
    return None


class CachedModel:
    """A model, its KV cache, and where the cached window starts: the cache holds x[start:start+cache_len]."""

    def __init__(self, model, device):
        self.model, self.device, self.W = model, device, model.config.block_size
        self.start, self.forwards = 0, []  # (tokens fed, seconds) of each forward
        self.filled = (0, 0.0)  # (tokens, seconds) of a prompt read apart (fill), counted with the next forward
        model.reset_cache()

    def logits(self, tokens, t, n):  # -> (n, V): position t+i predicted from x[s(t):t+i], for i < n
        return self.forward(self.uncached(tokens, t, n))[0, -n:]  # (n, V)

    def uncached(self, tokens, t, n):  # -> the ids to feed before positions t..t+n-1 can be scored
        """tokens[s(t) + cache_len : t+n-1]: what the cache lacks of the window. Empties it when s(t) changed."""
        assert window_end(t, self.W) >= t + n - 1, "a round crossed a change of s(t)"
        s = self.prefill(tokens, t)
        assert self.model.cache_len <= t - 1 - s, "stale tokens in the cache: rollback() after a rejection"
        return tokens[s + self.model.cache_len:t + n - 1]

    def slide(self, t):  # -> s(t), the cache emptied if the window slid since the last forward
        s = context_start(t, self.W)
        if s != self.start:  # subtle: the window slid, every cached key sits at a wrong position: re-fill
            self.model.crop(0)
            self.start = s
        return s

    def prefill(self, tokens, t):  # -> s(t): slide(t), then an engine's prefill of the prompt, if the cache is empty
        """An engine's prefill (engine/llama.py fill): the tokens before x_{t-1} read in one forward of their own, the
        same in every sampler, as they all score from x_{t-1} on; its time counts with the forward that follows.
        speculative_generate calls it before each round's drafts, so a draft that reads the target finds the
        prompt's features there (drafts/heads.py) instead of running the target over it again."""
        s = self.slide(t)
        if getattr(self.model, "prefills", False) and self.model.cache_len == 0 and t - 1 > s:
            tic = time.perf_counter()
            self.model.fill(torch.tensor([tokens[s:t - 1]], device=self.device))
            self.filled = (t - 1 - s, time.perf_counter() - tic)
        return s

    def forward(self, ids, **tree):  # list of T ids -> logits (1, T, V), appended to the cache and timed
        new = torch.tensor([ids], device=self.device)  # (1, T)
        tic = time.perf_counter()
        logits, _ = self.model(new, use_cache=True, **tree)  # (1, T, V); tree: pos, mask (verifiers/tree.py)
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # honest timings: wait for the GPU
        fed, seconds = self.filled
        self.filled = (0, 0.0)
        self.forwards.append((len(ids) + fed, time.perf_counter() - tic + seconds))
        return logits

    times = property(lambda self: [s for _, s in self.forwards])  # seconds of each forward

    def rollback(self, t):
        """Forget cached tokens from position t on (rejected draft tokens). O(1): model.crop moves a counter."""
        self.model.crop(max(0, min(self.model.cache_len, t - self.start)))


# ---- plain sampling: the baseline and the reference ----------------------------------------------------------

@torch.no_grad()
def autoregressive_generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None,
                            stream=None, stop=None):
    """idx (1, T) -> (idx (1, T + m), Stats). One target forward per token, KV-cached. m = max_new_tokens, or fewer
    with stop=[[ids], ...]: generation ends right after the first stop sequence among the new tokens (kept).
    stream, if given, is called with the list of new token ids as they are produced."""
    tokens = check_inputs(model, None, idx, max_new_tokens, 1, temperature, top_k, top_p, stop)
    stats, tic, first_new = Stats(), time.perf_counter(), len(tokens)
    target = CachedModel(model, idx.device)
    for t in range(len(tokens), len(tokens) + max_new_tokens):
        logits = target.logits(tokens, t, 1)[0]  # (V,)
        p = checked(sampling_probs(logits, temperature, top_k, top_p), logits, "target", t, tokens, t)
        tokens.append(sample(p, generator))
        if stream:
            stream(tokens[-1:])
        if stop and stop_end(tokens, first_new, stop, t):
            break
    stats.new_tokens, stats.target_times = len(tokens) - first_new, target.times
    stats.total_time = time.perf_counter() - tic
    return torch.tensor([tokens], dtype=torch.long, device=idx.device), stats


# ---- speculative sampling --------------------------------------------------------------------------------------

def draft_probs(logits, probs, position, tokens, final, support=None):  # the draft's logits (V,) at position -> q (V,)
    """q, the distribution the draft samples its token at `position` from, checked. Every verifier (here and in
    verifiers/, trees included) makes its q here; tokens[:final] are final (drafts are not, until kept).
    support: the ids a draft with a reduced vocabulary can propose (drafts/heads.py; its logits are -inf elsewhere):
    q is then computed over those alone and is 0 elsewhere: the same q, from 8,192 logits instead of 49,152."""
    if support is None:
        return checked(probs(logits), logits, "draft", position, tokens, final)
    inside = logits[support]  # (V',)
    q = checked(probs(inside), inside, "draft", position, tokens, final)
    return q.new_zeros(logits.shape).index_copy_(0, support, q)


def draw(q, generator, support=None):  # x ~ q, drawn among the support alone where a draft has one (draft_probs)
    """The same token sample(q) draws from the same uniform: the cumulative mass skips q's zeros either way."""
    return sample(q, generator) if support is None else int(support[sample(q[support], generator)])


def draft_tokens(draft, tokens, k, probs, generator):
    """Step 1 of a round: the draft proposes k tokens one at a time, x_i ~ q_i = q(. | x_<t+i), appended to tokens.
    -> [q_1 .. q_k], each (V,). Every verifier of a chain (here and verifiers/) drafts through this function."""
    t, qs = len(tokens), []
    support = getattr(draft.model, "support", None)  # a reduced vocabulary (drafts/heads.py), or None
    for i in range(k):
        qs.append(draft_probs(draft.logits(tokens, t + i, 1)[0], probs, t + i, tokens, t, support))  # (V,)
        tokens.append(draw(qs[i], generator, support))
    return qs


def score(target, tokens, k, probs):  # -> logits (K+1, V), p (K+1, V)
    """Step 2: the target scores the k drafts at the end of tokens, and the position after them, in ONE forward."""
    logits = target.logits(tokens, len(tokens) - k, k + 1)  # (K+1, V): p_0 .. p_k
    return logits, probs(logits)


def speculative_round(target, draft, tokens, k, probs, generator):
    """One round of Chen et al. Algorithm 2. Appends 1..k+1 tokens to `tokens`; returns how many drafts it kept."""
    t = len(tokens)
    qs = draft_tokens(draft, tokens, k, probs, generator)  # 1. x_i ~ q_i, for i = 1..k
    logits, p = score(target, tokens, k, probs)  # 2. p_0 .. p_k in one target forward
    # 3. left to right: keep x_i with probability min(1, p_i(x_i) / q_i(x_i)) ...
    for i in range(k):
        x = tokens[t + i]
        checked(p[i], logits[i], "target", t + i, tokens, t + i)  # row by row: a row after a rejection is unused
        if not coin(accept_probability(p[i, x].item(), qs[i][x].item()), generator):
            # ... and at the first rejection resample from norm(max(0, p_i - q_i)), then stop
            tokens[t + i:] = [sample(residual(p[i], qs[i]), generator)]
            target.rollback(t + i)  # forget the rejected drafts in both caches
            draft.rollback(t + i)
            return i
    # 4. all k kept: the target's forward already gave p_k, so one bonus token comes for free
    tokens.append(sample(checked(p[k], logits[k], "target", t + k, tokens, t + k), generator))
    return k


# ---- choosing the round: speculative_generate(..., verify=name) ----------------------------------------------

@dataclass(frozen=True)
class Verifier:
    """One entry of ROUNDS: what speculative_generate(..., verify=name, **params) runs, and what sample.py and
    bench.py need to offer it (a flag per parameter, a LOSSY label). A fork's verifier is one such entry:

        speculative.ROUNDS["mine"] = Verifier(my_round, params={"tau": 0.5}, lossless=False)

    round(target, draft, tokens, k, probs, generator, **params) -> drafts kept, appending 1..k+1 tokens. A round
    that can stop short of k without rejecting a draft (a cap, a confidence rule) returns (kept, tested), the
    drafts it tested; a bare `kept` < k means the draft after them was tested and rejected. alpha counts tests."""
    round: callable
    params: dict = field(default_factory=dict)  # parameter name -> default (each becomes a flag: --tau)
    lossless: bool = True  # False: the output is NOT the target's distribution, and the scripts say so
    check: callable = None  # check(**params) raises ValueError with a message for bad values
    auto_k: bool = True  # False: refuse k="auto" (AutoK models token-wise rounds, Theorem 3.8)
    trees: bool = False  # True: the draft is fed trees (pos, mask); a draft with chains_only = True is refused
    doc: str = ""  # one line for --help
    help: dict = field(default_factory=dict)  # parameter name -> one line for its flag's --help

    def bind(self, k, **params):  # -> round(target, draft, tokens, k, probs, generator), or ValueError
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"this verifier takes no parameter {', '.join(sorted(unknown))} "
                             f"(its parameters: {', '.join(sorted(self.params)) or 'none'})")
        if not self.auto_k and not isinstance(k, int):  # "auto" or an AutoK object
            raise ValueError("k='auto' chooses K for token-wise rounds (Theorem 3.8, timing (K+1)-token forwards), "
                             "which this verifier's rounds are not: pass an int k, e.g. k=4")
        bound = {**self.params, **params}
        if self.check:
            self.check(**bound)
        if not bound:
            return self.round
        return lambda target, draft, tokens, k, probs, generator: self.round(
            target, draft, tokens, k, probs, generator, **bound)


def kept_and_tested(result, K):
    """A round's return value -> (drafts kept, drafts tested): a bare `kept` < K tested one more and rejected it."""
    return result if isinstance(result, tuple) else (result, result + (result < K))


# name -> Verifier. `import verifiers` adds the others here (one file each); this file imports nothing from them.
# subtle: the lambda looks speculative_round up at each call, so a test's or notebook's patched round is run
ROUNDS = {"tokenwise": Verifier(lambda *args: speculative_round(*args),
                                doc="Chen et al.'s Algorithm 2, token by token (speculative_round)")}


def check_drafts_trees(verify, draft):
    """A verifier that feeds the draft trees (Verifier.trees) refuses a draft that drafts chains only (chains_only)."""
    if ROUNDS[verify].trees and getattr(draft, "chains_only", False):
        raise ValueError(f"verify={verify!r} feeds the draft trees of tokens, but this draft ({type(draft).__name__}) "
                         "drafts chains, not trees: use verify='tokenwise' or 'block'")


def round_for(verify, k, **params):
    """-> the round function that speculative_generate runs for verify=name, its parameters bound."""
    if verify not in ROUNDS:
        raise ValueError(f"unknown verify={verify!r}: choose from {sorted(ROUNDS)} (the verifiers/ package adds "
                         "its verifiers when imported: `import verifiers` first)")
    try:
        return ROUNDS[verify].bind(k, **params)
    except ValueError as e:
        raise ValueError(f"verify={verify!r}: {e}") from e


# ---- drafts by name: sample.py --draft ngram ------------------------------------------------------------------

@dataclass(frozen=True)
class Drafter:
    """One entry of DRAFTS: a draft that sample.py and bench.py make by name (--draft ngram). Any object with
    model.GPT's cache interface is a draft (drafts/ngram.py's NGramDraft speaks it: reset_cache, crop, cache_len,
    forward(idx, use_cache), config.vocab_size and config.block_size); an entry says how to build one for a target.
    A fork's draft: speculative.DRAFTS["mine"] = Drafter(lambda target: MyDraft(...))."""
    make: callable  # make(target, **params) -> the draft, trained where it has weights (the shipped heads)
    params: dict = field(default_factory=dict)  # parameter name -> default (each becomes a flag: --ngram_n)
    check: callable = None  # check(**params) raises ValueError with a message for bad values
    doc: str = ""
    help: dict = field(default_factory=dict)  # parameter name -> one line for its flag's --help
    untrained: callable = None  # untrained(target) -> a draft with seeded random weights; None: make, as it has none
    weights: str = ""  # the checkpoint make() loads by default, if any: bench.py --suite leaves the draft out without it
    weights_for: callable = None  # weights_for(target) -> the checkpoint make() loads for that target (default: weights)
    pretrained_only: bool = False  # shipped for pretrained targets only (drafts/small.py): the Shakespeare suite skips it

    def trained_for(self, target):  # -> the path of the weights make(target) loads ("" for a draft without weights)
        return self.weights_for(target) if self.weights_for else self.weights

    def fresh(self, target):
        """-> an untrained draft of this kind for any model.GPT or Llama target: the door tests and forks use. Weights, where
        it has them, are random but seeded (the same every call), and torch's global random state is left as it was."""
        if self.untrained is None:
            return self.make(target, **self.params)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return self.untrained(target)


# name -> Drafter. `import drafts` adds the drafts/ package's (one file each); a checkpoint needs no entry.
DRAFTS = {}


@torch.no_grad()
def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, top_k=None, top_p=None,
                         generator=None, stream=None, verify="tokenwise", stats=None, stop=None, **verify_params):
    """idx (1, T) -> (idx (1, T + max_new_tokens), Stats), distributed exactly as autoregressive_generate(target).

    k: drafts per round, an int, or "auto" (or an AutoK object) to choose it before each round (choose_k.py).
    verify names the round in ROUNDS: "tokenwise" (speculative_round) or, once `import verifiers` ran, one of its
    verifiers ("block", ...; some are lossy), with its parameters as further keyword arguments.
    stats: a Stats to fill round by round (default: a new one), so a caller interrupted mid-call keeps the rounds so far.
    stop=[[ids], ...]: end right after the first stop sequence among the new tokens, as autoregressive_generate does;
    the tokens a round emitted after it are dropped, so the output is plain sampling's with the same stop rule."""
    tokens = check_inputs(target, draft, idx, max_new_tokens, k, temperature, top_k, top_p, stop)
    first_new = len(tokens)
    one_round = round_for(verify, k, **verify_params)
    check_drafts_trees(verify, draft)  # before any token: nothing is lost
    setting = (verify, tuple(sorted(verify_params.items())), temperature, top_k, top_p)  # acceptance depends on it
    auto = AutoK.remembered(target, draft, idx.device, setting) if k == "auto" else (  # starts from earlier calls
        k if isinstance(k, AutoK) else None)
    stats, tic = Stats() if stats is None else stats, time.perf_counter()
    tgt, drf = CachedModel(target, idx.device), CachedModel(draft, idx.device)
    end = len(tokens) + max_new_tokens
    max_k = getattr(draft, "max_k", None) or max_new_tokens  # a draft may cap K (drafts/medusa.py: one per head)
    probs = lambda logits: sampling_probs(logits, temperature, top_k, top_p)
    while len(tokens) < end:
        t = len(tokens)
        # subtle: a round emits up to K+1 tokens at positions t..t+K: it must stop at max_new_tokens and must not
        # cross a change of the target's s(t), whose one forward scores them all. (The draft, one token per
        # forward, re-fills its cache wherever its own window slides.)
        limit = min(end - 1 - t, window_end(t, tgt.W) - t, max_k)  # max_k: what the draft can propose
        round_tic = time.perf_counter()  # auto times the whole round: sampling and Python cost too
        K = auto.choose(limit) if auto else min(k, limit)  # auto: from earlier rounds only, so still exact
        if K and hasattr(draft, "k_for"):  # a draft may propose fewer (drafts/suffix.py: none without a good match);
            K = draft.k_for(tokens, K)  # from the tokens so far only, as auto: still exact. K = 0: one plain step
        drf.slide(t)  # both windows first (a slid draft forgets the target's features of the old one), then the
        tgt.prefill(tokens, t)  # target's prefill, whose features of the prompt a head reads (drafts/heads.py)
        n_tgt, n_drf = len(tgt.forwards), len(drf.forwards)
        if not K:
            hand_over(draft, drf, tokens)
        kept, tested = kept_and_tested(one_round(tgt, drf, tokens, K, probs, generator), K)
        if auto:  # what this round measured: acceptance, and (tokens fed, seconds) of its forwards
            auto.update(K, kept, drf.forwards[n_drf:], tgt.forwards[n_tgt:], time.perf_counter() - round_tic)
        if not K:
            hand_over(draft, drf, tokens)
        stats.rounds.append((t, K, kept))
        stats.tested.append(tested)
        end_at = stop_end(tokens, first_new, stop, t) if stop else None
        if end_at:  # subtle: a round can keep drafts past a stop; plain sampling would never have drawn them
            del tokens[end_at:]
        if stream:
            stream(tokens[t:])
        stats.drafted += K
        stats.accepted += kept
        if end_at:
            break
    stats.new_tokens, stats.target_times, stats.draft_times = len(tokens) - first_new, tgt.times, drf.times
    stats.total_time = time.perf_counter() - tic
    return torch.tensor([tokens], dtype=torch.long, device=idx.device), stats


def hand_over(draft, drf, tokens):
    """Around a round without drafts (K = 0: k="auto" found none pays, or no room): such a round never calls the draft,
    and its target forward overwrites the features the last one left, so a head (drafts/eagle.py) would run the target
    over its window again at its next draft. Before and after it, the draft takes the tokens the target scored and
    their features (sync), running nothing."""
    if hasattr(draft, "sync") and context_start(len(tokens) - 1, drf.W) == drf.start:
        draft.sync(tokens[drf.start:len(tokens) - 1])


# ---- argument checks: clear errors instead of tracebacks from deep inside torch --------------------------------

def check_inputs(target, draft, idx, max_new_tokens, k, temperature, top_k, top_p, stop=None):
    """Validate everything up front; switch models to eval (dropout would make p and q random). -> list of ids."""
    if not torch.is_tensor(idx) or idx.dim() != 2 or idx.dtype != torch.long:
        raise ValueError("idx must be a LongTensor of shape (1, T), e.g. torch.tensor([ids], dtype=torch.long)")
    if idx.size(0) != 1:
        raise ValueError(f"idx holds {idx.size(0)} sequences; these samplers take one (B=1). For several at once "
                         "use engine/batched.py: speculative_generate_batch(target, draft, list(idx), ...)")
    if idx.size(1) == 0:
        raise ValueError("the prompt is empty: give at least one token (e.g. a newline) to condition on")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not (isinstance(k, AutoK) or (isinstance(k, str) and k == "auto")
            or (isinstance(k, int) and not isinstance(k, bool) and k >= 1)):
        raise ValueError(f"k (draft tokens per round) must be an int >= 1 or 'auto', got {k!r}")
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be >= 0 (0 means greedy) and finite, got {temperature}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p}")
    max_k = getattr(draft, "max_k", None)
    if max_k and isinstance(k, int) and k > max_k:
        raise ValueError(f"k={k}, but this draft ({type(draft).__name__}) proposes at most {max_k} tokens per round: "
                         f"pass k <= {max_k}, or k='auto' (which stays within it)")
    if draft is target:
        raise ValueError("the draft is the target object itself, but each needs its own KV cache: "
                         "pass a copy (copy.deepcopy(target)) to use a model as its own draft")
    V = target.config.vocab_size
    for name, model in [("target", target)] + ([("draft", draft)] if draft is not None else []):
        if model.config.vocab_size != V:
            raise ValueError(f"target and draft vocab sizes differ ({V} vs {model.config.vocab_size}): "
                             "the draft must use the target's tokenizer")
        if model.config.block_size < 2:
            raise ValueError(f"the {name}'s block_size must be at least 2 for the sliding window")
        param = next(model.parameters(), None)
        if param is not None and param.device != idx.device:
            raise ValueError(f"idx is on {idx.device} but the {name} is on {param.device}: move idx with idx.to(...)")
        model.eval()
    tokens = idx[0].tolist()
    if min(tokens) < 0 or max(tokens) >= V:
        raise ValueError(f"token ids must lie in [0, {V}); got min {min(tokens)}, max {max(tokens)}")
    check_stop(stop, V)
    return tokens


def check_stop(stop, V):
    if stop is None:
        return
    if not isinstance(stop, (list, tuple)) or not all(isinstance(seq, (list, tuple)) and seq for seq in stop):
        raise ValueError(f"stop must be a list of non-empty lists of token ids, e.g. [[0], [11, 11]], got {stop!r}")
    ids = [x for seq in stop for x in seq]
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < V for x in ids):
        raise ValueError(f"stop sequences must hold token ids in [0, {V}), got {stop!r}")
