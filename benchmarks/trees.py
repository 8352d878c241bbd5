"""
bench.py --tree_shapes: draft trees (verifiers/tree.py) of each shape at each K, for each draft, beside plain
sampling; tokens per round measured and predicted from the acceptance by depth and sibling rank (Theorem 3.8 has
no tree form), and EAGLE-2's calibration for dynamic trees (SHAPE@N).
"""

import argparse
import json
import statistics

import torch

from benchmarks.common import SETTINGS, Progress, bench_prompts, build_draft, lossy, machine, steady
import data
from engine.fast import with_decoder
from sample import int_tuple, shown
from speculative import autoregressive_generate, speculative_generate
from verifiers import tree


def tree_shape(text):  # --tree_shapes: "2,2" -> ((2, 2), 0); "4,4,4,4@16" -> ((4, 4, 4, 4), 16): a dynamic tree
    """ "4,4,4@auto" -> ((4, 4, 4), "auto"): the dynamic tree whose size each round chooses (choose_k.AutoBudget)."""
    shape, _, budget = text.partition("@")
    if budget and not (budget.isdigit() or budget == "auto"):
        raise argparse.ArgumentTypeError(f"expected a shape, then @ and a node budget or auto, e.g. 4,4,4,4@16, got "
                                         f"{text!r}")
    return int_tuple(shape), budget if budget == "auto" else int(budget or 0)


def shape_name(shape, budget):  # -> "2,2" or "4,4,4,4@16"
    return ",".join(map(str, shape)) + (f"@{budget}" if budget else "")


def calibration(grown, bins=10):  # [(parent, path confidence, kept?)] -> [[low, high, nodes, kept]] per bin
    """EAGLE-2's calibration: the nodes binned by the draft's path confidence, and how many ended on the kept path.
    A calibrated draft keeps about `confidence` of the nodes in each bin."""
    rows = [[b / bins, (b + 1) / bins, 0, 0] for b in range(bins)]
    for _, conf, kept in grown:
        row = rows[min(int(conf * bins), bins - 1)]
        row[2] += 1
        row[3] += kept
    return rows


def tree_report(args, target, tmeta):
    """Draft trees (verifiers/tree.py's tree_round), each --tree_shapes shape at each fixed K, for each --draft
    (a model, or a head that reads the target), beside plain sampling, interleaved as in main. The shape 1 is the
    chain; SHAPE@N is a dynamic tree of at most N nodes: EAGLE-2's (expansion and rerank) with children "top", its
    expansion by path confidence alone with "sample" (the rerank of sampled children is not exact); SHAPE@auto
    EAGLE-2's with N chosen each round from the measured costs (choose_k.AutoBudget; "top" only). Per row: tree
    nodes per round; tokens per target call; tokens per round, measured on the rounds of the full depth K and
    predicted from their acceptance by depth and sibling rank (tree.expected_accepted_tree, each round's own
    shape: Theorem 3.8 has no tree form), its own and, for fixed shapes, the widest fixed tree's (out of sample);
    for dynamic trees also the draft's own estimate, 1 + the sum of its path confidences; v(nodes), the tree
    forward's cost in target steps; c, one draft forward (a whole level), in target steps; tok/s, speedup, and
    the speedup that the prediction gives with this v and with v = 1 (a GPU, where a forward of up to ~64 tokens
    costs about one step): tokens per round / (K c + v)."""
    prompts = [p.to(args.device) for p in
               bench_prompts(args, data.Tokenizer(tmeta["tokenizer"]), args.prompts)]
    names = args.draft.split(",")
    built = {name: build_draft(args, name, target, tmeta) for name in names}
    sizes = ", ".join(f"{shown(name)} ({built[name].num_params() / 1e6:.2f}M)" for name in names)
    sizes = f"({target.num_params() / 1e6:.2f}M), drafts {sizes}"
    fast = {name: with_decoder(args.decoder[0], None, draft)[1] for name, draft in built.items()}
    target = with_decoder(args.decoder[0], target)[0]  # a head reads the GPT it was built for: FastGPT leaves it
    #                                                    the features too
    children = getattr(args, "children", None)  # registry flags are absent unless given
    rules = [children] if children else ["sample", "top"]
    replacement = bool(getattr(args, "replacement", False))
    cols = [None] + [(name, K, shape, budget, rule) for name in names for K in args.k if K != "auto"
                     for rule in rules for shape, budget in args.tree_shapes if budget != "auto" or rule == "top"]
    gen, n, rows = torch.Generator(device=args.device), args.max_new_tokens, []
    progress = Progress("--tree_shapes", len(args.settings) * args.repeats)
    run = lambda col, prompt, seed, sampling: (
        autoregressive_generate(target, prompt, n, generator=gen.manual_seed(seed), **sampling) if col is None else
        speculative_generate(target, fast[col[0]], prompt, n, k=col[1], verify="tree", branches=col[2],
                             budget=col[3], rerank=bool(col[3]) and col[4] == "top", children=col[4],
                             replacement=replacement, generator=gen.manual_seed(seed), **sampling))[1]
    for name in args.settings:
        sampling = SETTINGS[name]
        for col in cols:  # warm-up
            run(col, prompts[0], 0, sampling)
        stats, traces = {col: [] for col in cols}, {col: [] for col in cols}
        tps = {col: [] for col in cols}
        for rep in range(args.repeats):  # interleaved: each prompt through every column before the next prompt
            done = {col: [0, 0.0] for col in cols}  # new tokens, seconds
            for i, prompt in enumerate(prompts):
                for col in cols:
                    tree.tree_trace = []
                    s = run(col, prompt, 1000 * rep + i, sampling)
                    stats[col].append(s)
                    traces[col] += tree.tree_trace
                    done[col][0] += s.new_tokens
                    done[col][1] += s.total_time
            for col in cols:
                tps[col].append(done[col][0] / done[col][1])
            progress.step(f"{name}, repeat {rep + 1}")
        tree.tree_trace = None
        step = statistics.median(steady(s.target_times) for s in stats[None])  # one target step, from plain sampling
        plain = statistics.median(tps[None])
        for col in cols[1:]:
            draft, K, shape, budget, rule = col
            full = [entry for entry in traces[col] if entry[0] == K]  # rounds of the full depth K
            mean = lambda values: statistics.mean(values) if full else float("nan")  # none: --max_new_tokens <= K
            measured = mean([1 + sum(kept for _, _, kept in tested) for _, _, tested, _ in full])
            acceptance = tree.acceptance_by_depth_and_rank(full)
            predicted_tokens = mean([1 + tree.expected_accepted_tree([g[0] for g in grown], acceptance)
                                     for _, _, _, grown in full])
            c = statistics.median(steady(s.draft_times) for s in stats[col]) / step  # one draft forward: a level
            v = statistics.median(steady(s.target_times) for s in stats[col]) / step
            spec = statistics.median(tps[col])
            rows.append(dict(setting=name, draft=shown(draft) + lossy("tree"), K=K, branches=shape, budget=budget,
                             children=rule, replacement=replacement, nodes=mean([nodes for _, nodes, _, _ in full]),
                             tokens_per_call=sum(s.new_tokens for s in stats[col]) / sum(s.target_calls for s in stats[col]),
                             measured=measured, predicted=predicted_tokens, v=v, c=c, plain_tps=plain, spec_tps=spec,
                             confidence=mean([1 + sum(g[1] for g in grown) for _, _, _, grown in full]),
                             calibration=calibration([g for entry in traces[col] for g in entry[3]]),
                             speedup=spec / plain, with_v=predicted_tokens / (K * c + v),
                             gpu=predicted_tokens / (K * c + 1.0),
                             acceptance={f"{d},{j}": a for (d, j), a in sorted(acceptance.items())}))
    same = lambda a, b: all(a[key] == b[key] for key in ("setting", "draft", "K", "children"))
    for r in rows:  # out of sample: every fixed shape predicted from the acceptance of the widest fixed tree
        widest = max((w for w in rows if same(w, r) and not w["budget"]), key=lambda w: w["nodes"], default=None)
        r["from_widest"] = float("nan") if r["budget"] or widest is None else 1 + tree.expected_accepted(
            {tuple(map(int, key.split(","))): a for key, a in widest["acceptance"].items()},
            [tree.width(r["branches"], d) for d in range(r["K"])])
    print(f"draft trees: target {shown(args.target)} {sizes}; {args.prompts} held-out prompts x {n} new tokens, "
          f"median of {args.repeats}; decoder {args.decoder[0]}; children without replacement unless replacement=True "
          f"({replacement}); device {args.device}; {machine()}")
    print("tokens/round: on the rounds of the full depth K. predicted: from the acceptance by depth and sibling rank "
          "of these rounds, over each round's own shape (equal to the measurement when every node of a depth has as "
          "many children: the rates telescope); from widest: from the acceptance of the widest fixed tree of the same "
          "draft, K and rule, out of sample; confidence: 1 + the sum of the draft's path confidences (EAGLE-2's "
          "estimate). SHAPE@N: a dynamic tree of at most N nodes. c: one draft forward (a whole level), in target "
          "steps. Speedups predicted: predicted tokens/round / (K c + v), and with v = 1 (a GPU)")
    print("| setting | draft | K | branches | children | nodes | tok/call | tokens/round | predicted | from widest | "
          "confidence | v(nodes) | c | plain tok/s | tree tok/s | speedup | predicted, this v | predicted, v = 1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['draft']} | {r['K']} | {shape_name(r['branches'], r['budget'])} | {r['children']} | "
              f"{r['nodes']:.1f} | {r['tokens_per_call']:.2f} | {r['measured']:.3f} | {r['predicted']:.3f} | "
              f"{r['from_widest']:.3f} | {r['confidence']:.3f} | {r['v']:.2f} | {r['c']:.3f} | "
              f"{r['plain_tps']:.0f} | {r['spec_tps']:.0f} | {r['speedup']:.2f}x | {r['with_v']:.2f}x | {r['gpu']:.2f}x |")
    for r in rows:  # each tree against the chain of the same depth: tokens per target call, same forwards per round
        chain = next((c for c in rows if same(c, r) and c["branches"] == (1,) and not c["budget"]), None)
        if chain and r is not chain:
            print(f"{r['setting']}, {r['draft']}, K={r['K']}, {r['children']}, {shape_name(r['branches'], r['budget'])}: "
                  f"{r['tokens_per_call'] / chain['tokens_per_call'] - 1:+.1%} tokens per target call against the chain "
                  f"({r['tokens_per_call']:.2f} against {chain['tokens_per_call']:.2f}), v {r['v']:.2f} against "
                  f"{chain['v']:.2f}; acceptance by depth,rank: "
                  + ", ".join(f"{key} {a:.2f}" for key, a in r["acceptance"].items()))
    for r in rows:  # EAGLE-2's calibration, where it decides: the dynamic trees
        if r["budget"]:
            print(f"{r['setting']}, {r['draft']}, K={r['K']}, {r['children']}, {shape_name(r['branches'], r['budget'])}: "
                  "kept share of the nodes by path confidence: " + ", ".join(
                      f"{low:.1f}-{high:.1f} {kept / nodes:.2f} ({nodes})" for low, high, nodes, kept in r["calibration"]
                      if nodes))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(target=shown(args.target), draft=shown(args.draft), device=args.device, machine=machine(),
                           tree_rows=[{**r, "branches": list(r["branches"])} for r in rows]), fh, indent=1)
