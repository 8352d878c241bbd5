"""
Choosing K, the number of draft tokens per round, from what the earlier rounds measured: k="auto".

Source: Leviathan et al. 2023 (arXiv:2211.17192), Theorem 3.8 and Section 3.5 ("the optimal gamma"). With a
per-token acceptance rate a, a round of K drafts emits on average (1 - a^(K+1)) / (1 - a) tokens and costs K
draft steps plus one target forward over K+1 tokens. In units of one target step that is K*c + v(K), with
c = draft step / target step and v(K) = (K+1)-token target forward / target step. So the speedup of K is

    (1 - a^(K+1)) / ((1 - a) (K c + v(K)))

and the best K is its argmax. a, c and v differ by model pair, prompt and machine (the same pair has its best
K at 4 on one 2-core CPU and 7 on another), so AutoK estimates all three from the rounds so far:
  a     by draft position: a_i = P(draft i kept | drafts 1..i-1 kept), counted over the rounds so far, each
        leaning on a_(i-1) with 2 pseudo-rounds and a_0 = alpha = kept / (kept + rejections) with one pseudo-count
        of each (so it starts at 0.5); a round's expected tokens are 1 + a_1 + a_1 a_2 + ..., which is Theorem
        3.8's (1 - a^(K+1)) / (1 - a) when every a_i = a
  v     recent target forwards of each width, in units of the first draft step of their own round: a machine's
        speed drifts (a 2-core VM's one-token step moved from 2.4 to 1.6 ms within one run), and a width read in
        a slow spell would otherwise look dear for good. A straight line through the widths (v grows with K on a
        CPU): a width measured at least `own_after` times costs its own median (one width can be slower than
        wider ones, its matrix kernels differ), others are guessed from the line, and while only one width is
        known every width is assumed to cost the same -- optimism that makes it try a longer K, measure it, and
        come back if that was wrong. A width read fewer times counts its fastest reading: clock noise only adds
        time, and one slow reading must not keep auto away from a K for good.
  c, o  the rest of each round, timed whole: the K draft steps and what no forward covers (sampling the draft's
        tokens, the accept/reject loop, Python), in the same unit, a line in K fitted the same way. Counting the
        draft's forwards alone, as it once did, it took a draft step for cheaper than it is: on an Intel Xeon whose
        forwards are fast, sampling a draft token added a quarter to its forward (BENCHMARKS.md).
Only ratios matter: the argmax of (1 - a^(K+1)) / ((1 - a) (t_target(K+1) + t_rest(K))) in draft steps is the K of
Theorem 3.8 with c, v and the round's overhead.
scripts/auto_k_sim.py scores this rule against every fixed K on a simulated machine, where the truth is known.

Why this stays exact: K for a round is fixed before the round starts, from the past only (earlier tokens,
earlier accept/reject outcomes, clock readings). Given the past, the round is an ordinary Algorithm 2 round,
whose every emitted token is distributed as the target's next token whatever K is; by induction over the
rounds so is the whole output. What would break it: choosing K with this round's draws in view, e.g. redoing a
round with another K after seeing how many drafts were kept. (tests/test_exact_enumeration.py runs a history
in which K changes from round to round down every branch and gets the target's distribution.)

Right from the first round: k="auto" does not relearn in every call what the machine already showed. Each
(target, draft, device, batch size) has a Memory for the life of the process (AutoK.remembered): the measured
costs, and the acceptance per sampling setting, which a new call starts from (the acceptance counted as at
most `prior` rounds, so a new prompt soon outweighs it). Earlier calls are the past too: still exact.

What it leaves out: K per position from the draft's own confidence (also lossless, e.g. SpecDec++), and
memory across processes (pass costs=(c, v) to fix them).
Note: with measured costs, K depends on the clock, so the same seed need not give the same tokens twice. The
distribution is exact either way; pass an int k (or fixed `costs`) for bit-reproducible runs.
"""

import statistics
import weakref
from collections import defaultdict, deque


class Memory:
    """What rounds measured for one pair on one device: seconds of recent draft steps, of recent target forwards
    of each width, and [kept, rejections] per sampling setting. Shared by every AutoK made with it."""

    def __init__(self, recent=32):
        self.draft_s = deque(maxlen=recent)  # seconds of recent rounds' first draft steps (the unit of the others)
        self.target_s = defaultdict(lambda: deque(maxlen=recent))  # width n -> recent n-token forwards, in draft steps
        self.rest_s = defaultdict(lambda: deque(maxlen=recent))  # K -> rounds but their target forward, in draft steps
        self.acceptance = defaultdict(lambda: [0, 0])  # sampling setting -> [kept, rejections]
        self.depths = defaultdict(lambda: ([0] * 64, [0] * 64))  # setting -> (tested, kept) per draft position


MEMORIES = weakref.WeakKeyDictionary()  # target model -> draft model -> {(device, batch size): Memory}


class AutoK:
    """k="auto": before each round, K = argmax of Theorem 3.8 with the acceptance and costs measured so far.

    AutoK(k_max=16, k_first=4, costs=None). costs=(c, v) fixes c and a function v(K) instead of measuring
    (deterministic: for tests and what-ifs). Pass one object as k= to several calls to keep what it learned.
    refit: the measured costs are fitted again every this many rounds (1: every round).
    probe: where no K pays, K = 0 (one plain target step) for at most this many rounds in a row, then one round drafts.
    """

    def __init__(self, k_max=16, k_first=4, costs=None, recent=32, memory=None, setting=None, prior=64, own_after=4,
                 refit=8, probe=8):
        if not isinstance(k_max, int) or isinstance(k_max, bool) or k_max < 1:
            raise ValueError(f"AutoK: k_max must be an int >= 1, got {k_max!r}")
        if not isinstance(k_first, int) or isinstance(k_first, bool) or not 1 <= k_first <= k_max:
            raise ValueError(f"AutoK: k_first must be an int in [1, k_max={k_max}], got {k_first!r}")
        if not isinstance(refit, int) or isinstance(refit, bool) or refit < 1:
            raise ValueError(f"AutoK: refit must be an int >= 1 (rounds between fits of the costs), got {refit!r}")
        if costs is not None and not (len(costs) == 2 and costs[0] >= 0 and callable(costs[1])):
            raise ValueError("AutoK: costs must be (c, v) with c >= 0 and v a function K -> v(K), e.g. (0.1, lambda K: 1.0)")
        self.k_max, self.k_first, self.costs, self.own_after = k_max, k_first, costs, own_after
        self.kept, self.rejections = 0, 0
        self.memory = memory or Memory(recent)  # costs: this call's own, or shared with earlier calls
        self.draft_s, self.target_s, self.rest_s = self.memory.draft_s, self.memory.target_s, self.memory.rest_s
        self.counts = self.memory.acceptance[setting]  # [kept, rejections] of every call with this setting
        self.depth_counts = self.memory.depths[setting]  # (tested, kept) per position, of every call
        kept, rejections = self.counts
        scale = min(1.0, prior / max(1, kept + rejections))  # earlier calls weigh as at most `prior` rounds
        self.prior_kept, self.prior_rejections = kept * scale, rejections * scale
        rounds = self.depth_counts[0][0]  # rounds that tested a first draft
        scale = min(1.0, prior / max(1, rounds))
        self.tested, self.passed = ([n * scale for n in counts] for counts in self.depth_counts)  # earlier calls'
        self.chosen = []  # K chosen before each round (before clipping to the tokens and window left)
        self.refit, self.costs_of, self.since_fit = refit, None, 0  # round costs by K, fitted every `refit` rounds
        self.probe, self.zeros = probe, 0  # K = 0 (no draft) at most `probe` rounds in a row, then one round drafts

    @classmethod
    def remembered(cls, target, draft, device, setting, batch=1, **kw):
        """An AutoK that starts from what earlier calls with this target and draft on this device measured in
        this process (costs; acceptance with the same sampling `setting`), and adds to it."""
        memories = MEMORIES.setdefault(target, weakref.WeakKeyDictionary()).setdefault(draft, {})
        memory = memories.setdefault((str(device), batch), Memory())
        return cls(memory=memory, setting=setting, **kw)

    @property
    def alpha(self):  # this call's rounds, earlier calls' (as at most `prior` rounds), one pseudo-count of each
        kept, rejections = self.kept + self.prior_kept, self.rejections + self.prior_rejections
        return (kept + 1) / (kept + rejections + 2)

    def expected_tokens(self):  # -> E[1 .. K+1 tokens of a round with K drafts], for K = 0..k_max
        """1 + sum over j <= K of a_1 ... a_j, where a_i = P(draft i is kept | drafts 1..i-1 were): the acceptance
        by position, counted from the rounds so far. Theorem 3.8 takes every a_i = alpha. At temperature 0
        acceptance comes in runs (a long stretch where draft and target agree, then a miss), so a_i grows with i
        and alpha alone undervalues long rounds. Each a_i leans on a_{i-1} with 2 pseudo-rounds (a_0 = alpha), so
        a position never tested yet takes its predecessor's value."""
        a, run, total = min(self.alpha, 1 - 1e-9), 1.0, [1.0]
        for i in range(self.k_max):
            tested, kept = (self.tested[i] if i < len(self.tested) else 0), (self.passed[i] if i < len(self.passed) else 0)
            a = min((kept + 2 * a) / (tested + 2), 1 - 1e-9)
            run *= a
            total.append(total[-1] + run)
        return total

    def round_cost(self):  # -> K -> draft steps (or target steps) of a round with K drafts, or None if not known yet
        if self.costs is not None:
            c, v = self.costs
            return lambda K: K * c + v(K)
        if not self.target_s:
            return None
        # in first draft steps, each measured beside the first draft step of its own round (observe_forwards)
        target = self.fitted(self.target_s)  # one width known: every width costs as much (optimism)
        # the rest of a round: one K known, all of it per draft (caution); rounds not timed (batches): K steps
        rest = self.fitted(self.rest_s, through_zero=True) if self.rest_s else (lambda K: K)
        return lambda K: max(target(K + 1) + rest(K), 1e-9)

    def fitted(self, samples, through_zero=False):
        """samples: {x: recent seconds} -> x -> seconds. An x read at least `own_after` times costs its median;
        the others come from a line through those medians, weighted by their counts (slope >= 0, never below 0;
        flat while one x is well read, or through (0, 0) with through_zero), or their own fastest reading where
        that is lower. Before any x is read own_after times, the line goes through every x's fastest reading.
        {5: [2.0, 2.2, 2.1, 2.1]} -> every x: 2.1; with through_zero, x = 10: 4.2."""
        # subtle: clock noise only adds time (a thread descheduled, a kernel built on its first call at a new width:
        # 50x on a busy 2-core machine). So an x read a few times neither costs its one slow reading nor tilts the
        # line: otherwise that K looks dear, auto never chooses it again, and it is never measured again.
        well = {x: statistics.median(s) for x, s in samples.items() if len(s) >= self.own_after}
        fastest = {x: min(s) for x, s in samples.items() if s}
        points = well or fastest
        line = self.line(points, {x: len(samples[x]) for x in points}, through_zero)
        # a width read often enough costs what it measured: on a CPU one width can be slower than wider ones (its
        # matrix kernels differ), which a line would smooth away
        return lambda x: well[x] if x in well else min(line(x), fastest.get(x, float("inf")))

    @staticmethod
    def line(points, weights, through_zero=False):
        """{x: seconds}, {x: weight} -> x -> seconds: the weighted least-squares line, slope >= 0, never below 0;
        through one point: flat, or through (0, 0) with through_zero. {2: 1.0, 4: 2.0} -> x = 6: 3.0."""
        if len(points) == 1:
            (x0, t0), = points.items()
            slope = t0 / x0 if through_zero and x0 else 0.0
        else:  # t(x) = t0 + slope (x - x0) around the weighted means
            total = sum(weights.values())
            x0 = sum(x * w for x, w in weights.items()) / total
            t0 = sum(points[x] * w for x, w in weights.items()) / total
            var = sum(w * (x - x0) ** 2 for x, w in weights.items())
            slope = max(0.0, sum(w * (x - x0) * (points[x] - t0) for x, w in weights.items()) / var)
        return lambda x: max(t0 + slope * (x - x0), 0.0)

    def choose(self, limit):
        """-> K in [0, limit]: the draft length for the next round (limit: tokens and window left, at most k_max)."""
        limit = min(limit, self.k_max)
        # subtle: fitting the costs takes medians of every width's readings, 0.1 ms: 3% of a 3 ms round on a fast
        # CPU, paid every round. Refitted every `refit` rounds instead, from readings that change slowly.
        if self.costs_of is None or self.since_fit >= self.refit:
            cost = self.round_cost()
            self.costs_of = None if cost is None else [cost(K) for K in range(self.k_max + 1)]
            self.since_fit = 0
        self.since_fit += 1
        if self.costs_of is None:
            K = self.k_first  # nothing measured yet (the first forwards read the prompt)
        else:  # Theorem 3.8 with the acceptance by position: tokens per round / cost of the round
            tokens, cost = self.expected_tokens(), self.costs_of
            best = max(range(1, self.k_max + 1), key=lambda K: tokens[K] / cost[K])
            # K = 0, one plain target step (1 token at cost[0]), where no K pays: a draft whose first position is
            # rarely kept. subtle: a round of K = 0 tests no draft, so the acceptance would never be read again;
            # every `probe`-th such round drafts `best` instead, and a draft that starts to be kept is seen
            zero = tokens[best] / cost[best] < 1.0 / cost[0] and self.zeros < self.probe
            K = 0 if zero else best
            self.zeros = self.zeros + 1 if zero else 0
        self.chosen.append(K)
        return min(K, limit)

    def update(self, K, kept, draft_forwards, target_forwards, seconds=None):
        """After a round with K drafts of which `kept` were kept; forwards: [(tokens fed, seconds)] of that round;
        seconds: the whole round's, from before choose() to now (None: the forwards are all it costs)."""
        self.observe([K], [kept])
        self.observe_forwards(K, draft_forwards, target_forwards, seconds)

    def observe(self, Ks, kept):
        """Acceptance: rounds (one per row of a batch, engine/batched.py) that drafted Ks[b] and kept kept[b]."""
        for K, n in zip(Ks, kept):
            self.kept += n
            self.rejections += n < K
            self.counts[0] += n  # for later calls
            self.counts[1] += n < K
            for i in range(min(n + 1, K, len(self.tested))):  # positions 1..n kept, n+1 rejected (if n < K)
                self.tested[i] += 1
                self.passed[i] += i < n
                self.depth_counts[0][i] += 1  # for later calls
                self.depth_counts[1][i] += i < n

    def observe_forwards(self, K, draft_forwards, target_forwards, seconds=None):
        """Costs: [(tokens fed, seconds)] of a round's forwards, K drafts a row (all rows of a batch at once), and
        the round's own seconds if timed. Kept in units of the round's first draft step: a machine's speed drifts
        (a 2-core VM's one-token step moved from 2.4 to 1.6 ms within one run) and moves both alike, so widths read
        minutes apart stay comparable. (The first step, not the round's median: it follows the target's forward,
        which has pushed the draft's weights out of the caches, so it is dearer than the next ones, and a median
        would count K = 1 rounds in a dearer unit than longer ones.)"""
        # subtle: only decoding forwards measure c and v. A draft step feeds 1 token (2 after a round whose drafts
        # were all kept); a target forward K+1. Reading the prompt, or re-reading a slid window, feeds more.
        steps = [s for n, s in draft_forwards if n <= 2]
        self.draft_s.extend(steps[:1])  # first steps only: the unit
        if not self.draft_s:
            return
        unit = steps[0] if steps else statistics.median(self.draft_s)  # K = 0: the recent rounds' first steps
        wide = [s for n, s in target_forwards if n == K + 1]
        if wide:
            self.target_s[K + 1].extend(s / unit for s in wide)
        decoding = len(steps) == len(draft_forwards) and len(wide) == len(target_forwards) == 1
        if seconds is not None and K and decoding:  # a round that read a prompt or a slid window would count it
            self.rest_s[K].append(max(0.0, seconds - wide[0]) / unit)  # the draft's steps and what no forward covers


class AutoBudget:
    """budget="auto" for EAGLE-2's dynamic tree (verifiers/tree.py, rerank=True): how many of the grown nodes the
    target scores this round, from what the earlier rounds measured. Theorem 3.8 has no tree form; this is its rule
    with the tree's own estimate. The rerank orders the nodes by path confidence (the product of the draft's own
    probabilities along the path); the first N of that order are a tree (a child's confidence is at most its
    parent's), and EAGLE-2 takes their summed confidence as the drafts a round keeps. So N maximizes

        (1 + s * (conf_1 + ... + conf_N)) / (rest + t(width N))

    where s scales the confidences to the drafts actually kept in recent rounds (1 to start: the estimate as it
    is; a head is overconfident on text it was not trained on), t(width) is the target forward over the N nodes and
    the tokens before them, read from recent forwards of each width as AutoK reads v (a line through the widths,
    a width read `own_after` times its own median; while one width is known, cost in proportion to width, so that the
    first round, the whole tree, is followed by a narrower one and the line gets its slope), and rest the
    round's other seconds (the draft's levels, sampling, the walk). Where a tree's forward costs about one step (a
    GPU; bfloat16 with AMX) N grows to the whole grown tree; where it costs a step per node (int4 on a CPU without
    bfloat16 units) N falls towards a chain.

    Exact for the same reason as the rerank's fixed budget and as AutoK: N is chosen from the draft's outputs and
    from earlier rounds, before the target scores anything. costs: width -> seconds, fixed (deterministic, for tests
    and what-ifs), instead of the clock. Pass one object as budget= to several calls to keep what it learned;
    budget="auto" keeps one per target and draft for the process (remembered)."""

    fitted, line = AutoK.fitted, staticmethod(AutoK.line)

    def __init__(self, costs=None, recent=32, own_after=4, prior=2.0):
        if costs is not None and not callable(costs):
            raise ValueError("AutoBudget: costs must be a function width -> seconds of a target forward, e.g. "
                             "lambda width: 1.0 + 0.1 * width")
        self.costs, self.own_after, self.prior = costs, own_after, prior
        self.target_s = defaultdict(lambda: deque(maxlen=recent))  # width -> recent seconds of the tree's forward
        self.rest_s = deque(maxlen=recent)  # the rest of recent rounds, in seconds
        self.predicted, self.kept = deque(maxlen=64), deque(maxlen=64)  # per round: summed confidence scored, kept
        self.chosen = []  # (nodes grown, nodes scored) of each round

    @classmethod
    def remembered(cls, target, draft):  # -> the AutoBudget of this target and draft model for the process
        memories = BUDGETS.setdefault(target, weakref.WeakKeyDictionary())
        if draft not in memories:
            memories[draft] = cls()
        return memories[draft]

    @property
    def scale(self):  # drafts kept per unit of summed confidence in recent rounds, leaning on 1 with `prior` units
        return (sum(self.kept) + self.prior) / (sum(self.predicted) + self.prior)

    def choose(self, conf, before=1):
        """conf: the grown nodes' path confidences in the rerank's order (highest first); before: the tokens the
        forward scores ahead of the nodes -> N, how many of them the target scores (1 <= N <= len(conf))."""
        if not conf:
            return 0
        if self.costs is None and not self.target_s:
            N = len(conf)  # nothing measured yet: the whole tree, which measures the widest forward
        else:
            # subtle: with one width read, AutoK's optimism (every width as dear) would keep the whole tree and never
            # read another width; here one width means cost in proportion to width, which tries a narrower tree next
            t = self.costs or self.fitted(self.target_s, through_zero=True)
            rest = 0.0 if self.costs else statistics.median(self.rest_s) if self.rest_s else 0.0
            s, total, best, N = self.scale, 0.0, -1.0, 1
            for n, c in enumerate(conf, start=1):
                total += c
                value = (1.0 + s * total) / max(rest + t(before + n), 1e-12)
                if value > best:
                    best, N = value, n
        self.chosen.append((len(conf), N))
        return N

    def update(self, predicted, kept, width=None, seconds=None, rest=None):
        """After a round: the scored nodes' summed confidence, the drafts kept; the target forward's width and
        seconds and the round's other seconds where they were timed (a round that read a prompt passes None)."""
        self.predicted.append(predicted)
        self.kept.append(kept)
        if width is not None:
            self.target_s[width].append(seconds)
            self.rest_s.append(rest)


BUDGETS = weakref.WeakKeyDictionary()  # target model -> draft model -> AutoBudget (AutoBudget.remembered)
