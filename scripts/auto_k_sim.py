"""
k="auto" against every fixed K on a simulated machine: the truth is known, so the score holds no clock noise.

bench.py measures auto against the best fixed K on the real machine, where a 2-core CPU's timings drift by
±10% within a run: a 95% ratio cannot be told from 90% with a few repeats, and the largest of several noisy
medians favours itself. This script separates the chooser from the clock. It runs choose_k.AutoK, unchanged,
on simulated rounds: each round drafts K tokens, keeps draft i with probability a_i given drafts 1..i-1 were
kept, and costs K draft steps plus one target forward of K+1 tokens, each with lognormal clock noise and now and
then a slow spell (a second job on the machine). AutoK sees only those noisy readings, as in
speculative_generate: each forward's, and the whole round's, which also holds the time no forward covers
(sampling, Python: a fixed share per round and per draft); the score counts the true mean costs. --untimed
hides the whole round from AutoK, as before it timed rounds. The calls are bench.py's: 4 prompts x 128 new
tokens, repeated, fresh calls sharing one Memory.

    python scripts/auto_k_sim.py                      # the costs and acceptance measured on an AMD EPYC
    python scripts/auto_k_sim.py --measure            # measure them on this machine first (about 40 s)
    python scripts/auto_k_sim.py --accept 0.9 --c 0.2 # what-ifs: one a for every position, a dearer draft

Left out: acceptance that changes with the text (hard and easy stretches across rounds), the window's slides,
and costs that move with the batch. Times are in target steps (one 1-token target forward).
"""

import argparse
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository's modules

from choose_k import AutoK, Memory  # noqa: E402

# Measured with --measure on "AMD EPYC" (AVX2, AVX-512, AVX512-BF16), 2 threads, the shipped pair, fast decoder
# (BENCHMARKS.md): (widths, c, overhead), in target steps. widths[n - 1]: a forward of n tokens; c: a draft step;
# overhead: the time no forward covers (sampling, Python), per round and per draft. The same machine gave both,
# in runs minutes apart: its wide forwards are cheap in some processes and dear in others.
MACHINES = {
    "cheap wide": ([1.00, 1.35, 1.51, 1.45, 1.12, 1.13, 1.23, 1.25, 1.31, 1.32, 1.31, 1.34, 1.42, 1.41, 1.50, 1.42,
                    1.51], 0.053, (0.047, 0.017)),
    "dear wide": ([1.00, 1.35, 1.53, 1.44, 1.56, 1.78, 1.93, 1.59, 1.70, 1.88, 2.00, 1.73, 1.78, 1.79, 1.92, 1.82,
                   1.96], 0.062, (0.050, 0.018)),
}
ACCEPT = {  # a_i = P(draft i kept | drafts 1..i-1 kept), i = 1..16, from rounds of K = 16 on the held-out prompts
    "t1.0": [0.77, 0.84, 0.87, 0.88, 0.88, 0.89, 0.95, 0.91, 0.86, 0.73, 0.89, 0.88, 0.92, 0.82, 0.89, 0.92],
    "t0": [0.80, 0.72, 0.89, 0.97, 0.97, 0.95, 0.92, 0.97, 0.91, 1.00, 0.69, 0.72, 0.46, 1.00, 0.67, 0.00],
}


def kept_in_round(K, accept, rng):  # -> drafts kept of K, draft i kept with probability accept[i - 1]
    n = 0
    while n < K and rng.random() < accept[n]:
        n += 1
    return n


class FixedK:  # the chooser of k=K, with AutoK's two methods
    def __init__(self, K):
        self.K = K

    def choose(self, limit):
        return min(self.K, limit)

    def update(self, *args):
        pass


def run(chooser, accept, widths, c, overhead, seed, calls=20, new_tokens=128, noise=0.1, spells=0.01, spikes=0.0,
        auto=AutoK, timed=True):
    """-> (tokens per target step over `calls` fresh calls, the K of every round). chooser: "auto" (an `auto` per
    call, one Memory for all, as speculative_generate's k="auto") or an int K. timed=False: AutoK sees the
    forwards only, not the whole round (as before it timed rounds)."""
    rng, memory = random.Random(seed), Memory()
    seconds, tokens, ks, slow, spell_left = 0.0, 0, [], 1.0, 0
    k_max = len(widths) - 1
    for _ in range(calls):
        choose = auto(k_max=k_max, memory=memory, setting="sim") if chooser == "auto" else FixedK(chooser)
        made = 0
        while made < new_tokens:
            K = choose.choose(min(k_max, new_tokens - 1 - made))  # speculative_generate's limit (no slides)
            if spell_left == 0 and rng.random() < spells:  # a second job starts: everything slower for a while
                spell_left, slow = rng.randint(20, 80), rng.uniform(1.2, 1.6)
            slow, spell_left = (slow, spell_left - 1) if spell_left else (1.0, 0)
            clock = lambda mean: mean * slow * math.exp(rng.gauss(0, noise)) * (  # what a clock reading says
                rng.uniform(10, 100) if rng.random() < spikes else 1.0)
            kept = kept_in_round(K, accept, rng)
            drafts, target = [clock(c) for _ in range(K)], clock(widths[K])
            whole = sum(drafts) + target + clock(overhead[0] + K * overhead[1])  # the round's clock, as timed
            choose.update(K, kept, [(1, s) for s in drafts], [(K + 1, target)], whole if timed else None)
            seconds += K * c + widths[K] + overhead[0] + K * overhead[1]  # the true mean cost
            tokens += kept + 1
            made += kept + 1
            ks.append(K)
    return tokens / seconds, ks


def compare(accept, widths, c, overhead, trials=40, fixed=range(1, 17), **kw):
    """-> dict: auto's mean tokens per target step over `trials` seeds, each fixed K's, the best fixed K, auto / it,
    and the spread of auto over the trials (each trial against the best fixed K's mean). auto=: another chooser
    class with AutoK's constructor, choose and update."""
    auto = [run("auto", accept, widths, c, overhead, seed, **kw) for seed in range(trials)]
    kw.pop("auto", None)
    rate = {K: statistics.mean(run(K, accept, widths, c, overhead, seed, **kw)[0] for seed in range(trials))
            for K in fixed if K < len(widths)}
    best = max(rate, key=rate.get)
    per_trial = sorted(r / rate[best] for r, _ in auto)
    return dict(auto=statistics.mean(r for r, _ in auto), fixed=rate, best=best,
                ratio=statistics.mean(r for r, _ in auto) / rate[best],
                p10=per_trial[len(per_trial) // 10], median=statistics.median(per_trial),
                k_median=statistics.median(k for _, ks in auto for k in ks))


def measure(k_max=16, repeats=60, new_tokens=128, seeds=3):
    """-> (widths, c, overhead, {setting: a_i}) of the shipped pair on this machine, fast decoder: forwards of
    1..k_max+1 tokens after a 100-token prompt (median of `repeats`, the widths interleaved); a_i from rounds of
    K = k_max on bench.py's held-out prompts (`seeds` each); the time outside the forwards, per round and per
    draft, from those calls and calls with K = k_max // 4."""
    import time
    import torch
    from benchmarks import common
    import data
    from engine.fast import with_decoder
    from model import load_checkpoint
    from speculative import speculative_generate
    target, meta = load_checkpoint("checkpoints/target.pt")
    draft, _ = load_checkpoint("checkpoints/draft.pt")
    target, draft = with_decoder("fast", target, draft)

    def forward_s(model, n):  # seconds of one forward of n tokens after a 100-token prompt
        model.reset_cache()
        model(torch.zeros(1, 100, dtype=torch.long), use_cache=True)
        tic = time.perf_counter()
        model(torch.zeros(1, n, dtype=torch.long), use_cache=True)
        return time.perf_counter() - tic
    times = {n: [] for n in range(k_max + 2)}  # n = 0: the draft's one-token step
    for _ in range(repeats):  # interleaved: a slow spell of the machine hits every width alike
        for n in times:
            times[n].append(forward_s(draft, 1) if n == 0 else forward_s(target, n))
    step = statistics.median(times[1])
    widths = [statistics.median(times[n]) / step for n in range(1, k_max + 2)]
    c = statistics.median(times[0]) / step
    prompts = common.held_out_prompts(data.Tokenizer(meta["tokenizer"]), 4, 64, "shakespeare")
    assert k_max >= 2, "measure() needs k_max >= 2: the time outside the forwards is fitted from two K"
    short = max(1, k_max // 4)  # K = 4 for the default k_max = 16
    accept, outside = {}, {}  # outside: K -> [rounds, drafts, seconds no forward covers]
    for name, temperature, K in (("t1.0", 1.0, k_max), ("t0", 0.0, k_max), ("t1.0", 1.0, short)):
        tested, passed = [0] * k_max, [0] * k_max
        totals = outside.setdefault(K, [0, 0, 0.0])
        for rep in range(seeds):
            for i, prompt in enumerate(prompts):
                gen = torch.Generator().manual_seed(100 * rep + i)
                _, stats = speculative_generate(target, draft, prompt, new_tokens, k=K, temperature=temperature,
                                                generator=gen)
                for _, k, n in stats.rounds:
                    for j in range(min(n + 1, k)):  # positions 1..n kept, n+1 rejected (if n < k)
                        tested[j] += 1
                        passed[j] += j < n
                totals[0] += len(stats.rounds)
                totals[1] += sum(k for _, k, _ in stats.rounds)
                totals[2] += stats.total_time - sum(stats.target_times) - sum(stats.draft_times)
        if K == k_max:
            accept[name] = []
            for p, t in zip(passed, tested):  # a position no round reached takes its predecessor's value
                accept[name].append(round(p / t, 2) if t else (accept[name][-1] if accept[name] else 0.5))
    (r1, d1, s1), (r2, d2, s2) = outside[k_max], outside[short]  # s = per_round * r + per_draft * d
    per_draft = max(0.0, (s1 * r2 - s2 * r1) / (d1 * r2 - d2 * r1))
    per_round = max(0.0, (s2 - per_draft * d2) / r2)
    return widths, c, (per_round / step, per_draft / step), accept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="measure widths, c and a_i on this machine first")
    ap.add_argument("--accept", default=None, help="a_1,...: acceptance by draft position, or one a for all "
                    "(default: the measured profiles at t1.0 and t0)")
    ap.add_argument("--c", type=float, default=None, help="draft step / target step (default: each machine's measured c)")
    ap.add_argument("--trials", type=int, default=40, help="seeds; each is --calls fresh calls")
    ap.add_argument("--calls", type=int, default=20, help="calls per trial (bench.py: 4 prompts x 5 repeats)")
    ap.add_argument("--noise", type=float, default=0.1, help="clock noise, the sd of log(reading / mean)")
    ap.add_argument("--spells", type=float, default=0.01, help="chance per round that a slow spell starts")
    ap.add_argument("--spikes", type=float, default=0.0, help="chance per clock reading that it is 10-100x its "
                    "mean (a thread descheduled at a barrier while a second job runs)")
    ap.add_argument("--untimed", action="store_true", help="AutoK sees the forwards only, not the whole round")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.calls < 1 or args.noise < 0 or not 0 <= args.spells <= 1:
        ap.error("--trials and --calls must be >= 1, --noise >= 0, --spells in [0, 1]")
    if args.c is not None and args.c < 0:
        ap.error(f"--c is a draft step in target steps, >= 0; got {args.c}")
    if args.accept:
        try:
            values = [float(x) for x in args.accept.split(",")]
        except ValueError:
            values = []
        if not values or not all(0 <= a <= 1 for a in values):
            ap.error(f"--accept takes probabilities in [0, 1], comma-separated (a_1,a_2,...) or one for all; "
                     f"got {args.accept!r}")
    machines, accept = dict(MACHINES), ACCEPT
    if args.measure:
        import torch
        widths, c, overhead, accept = measure()
        machines = {"measured here": (widths, c, overhead)}
        print(f"measured here ({torch.get_num_threads()} threads): widths", ", ".join(f"{w:.2f}" for w in widths),
              f"; c {c:.3f}; outside the forwards {overhead[0]:.3f} per round, {overhead[1]:.3f} per draft")
        for name, a in accept.items():
            print(f"a_i at {name}:", ", ".join(f"{x:.2f}" for x in a))
    if args.accept:  # one a for every position, or a_1..a_n with a_n for the positions after
        accept = {"--accept": values * 16 if len(values) == 1 else values + values[-1:] * (16 - len(values))}
    if args.c is not None:
        machines = {name: (widths, args.c, overhead) for name, (widths, _, overhead) in machines.items()}
    print(f"{args.trials} trials x {args.calls} calls x 128 new tokens; clock noise {args.noise}, slow spells "
          f"{args.spells} per round; auto against each fixed K = 1..16 on the same seeds")
    print("| widths | c | acceptance | best fixed K | its tokens/step | auto tokens/step | auto / best | "
          "auto / best, per trial: 10th percentile, median | auto's K: median |")
    print("|---|---|---|---|---|---|---|---|---|")
    for machine, (widths, c, overhead) in machines.items():
        for name, a in accept.items():
            r = compare(a, widths, c, overhead, trials=args.trials, calls=args.calls, noise=args.noise,
                        spells=args.spells, spikes=args.spikes, timed=not args.untimed)
            print(f"| {machine} | {c:.3f} | {name} | {r['best']} | {r['fixed'][r['best']]:.3f} | {r['auto']:.3f} | "
                  f"{r['ratio']:.0%} | {r['p10']:.0%}, {r['median']:.0%} | {r['k_median']:g} |")


if __name__ == "__main__":
    main()
