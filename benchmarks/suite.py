"""
The task suite (bench.py --suite): which draft for which kind of text. Spec-Bench's way (Xia et al. 2024,
arXiv:2401.07851) at this project's scale: every draft on the same prompts, by category, interleaved prompt by
prompt with plain sampling in one process, at T = 0 (every output checked against plain greedy) and T = 1.

Two suites, one report: the trained pair's five kinds of Shakespeare and prose (SUITE, suite_prompts), and a
real chat model's seven kinds of request (benchmarks/chat_tasks.py; --target smollm2), where lookup drafts pay
where the model copies its prompt. docs/suite.md describes the categories and the columns.
"""

import json
import os
import statistics

import torch

from benchmarks.common import SETTINGS, beyond_max_k, build_draft, cell, held_out_prompts, lossy, machine, steady
from benchmarks.theory import (acceptance_by_position, alpha_from_rounds, kept_histogram, kept_law, predicted,
                               why_it_does_not_pay, with_tests)
import data
from engine.fast import with_decoder
from sample import shown, verify_params
from speculative import DRAFTS, autoregressive_generate, speculative_generate


# Out of domain: modern prose, written for this suite (the character vocabulary has no brackets, slashes or "=",
# so code cannot be written in it; prose and numbers can).
PROSE = """The train left the station eleven minutes late, which nobody on the platform seemed to mind. A woman in a
grey coat read the timetable twice, then folded it into her pocket and looked at her phone instead.
Most weather forecasts are right about tomorrow and wrong about next week. The models that make them split
the air into boxes a few kilometres wide and step the physics forward, one small interval at a time.
To reset the router, hold the button on the back for ten seconds until the light turns orange. Wait two
minutes, then connect again with the password printed on the label underneath.
Our quarterly results were better than expected: revenue rose by 8 percent, costs stayed flat, and the new
warehouse in the north opened on schedule. We thank every team for a difficult year.
She had never learned to swim, so the summer she turned forty she signed up for lessons at the public pool,
where the instructor was nineteen and very patient.
Please note that the library will be closed on Monday for repairs to the heating system. Books due that day
may be returned on Tuesday without a fine.
"""


SUITE = {  # category -> what its prompts are (suite_prompts makes them)
    "plays": "free continuation of a held-out play (the validation plays: the models never trained on them)",
    "repeat": "a held-out passage, a blank line, then the passage's first 40 characters again: does it repeat?",
    "dialogue": "a held-out play cut right after a speaker's name: the next turn of a dialogue",
    "prose": "modern prose, written for this suite: text unlike anything the models read",
    "long": "a held-out prompt of the window's length minus 16: rounds meet the window's slide",
}


QUOTED = 40  # characters of the passage the repeat prompts quote again


def suite_prompts(tok, n, length, W, corpus="shakespeare"):
    """-> {category: [(prompt (1, T), the continuation that repeats the passage, or None)]}: n prompts each, the
    first n evenly spaced places of each text (never chosen by how a draft does on them)."""
    val = data.texts(corpus)[1]
    spaced = lambda text, size, shift=0.0: [int((i + shift) * (len(text) - size) / n) for i in range(n)]
    ids = lambda text: torch.tensor([tok.encode(text)], dtype=torch.long)
    out = {"plays": [(p, None) for p in held_out_prompts(tok, n, length, corpus)]}
    passage = 120
    out["repeat"] = [(ids(val[s:s + passage] + "\n\n" + val[s:s + QUOTED]), tok.encode(val[s + QUOTED:s + passage]))
                     for s in (val.find("\n", at) + 1 for at in spaced(val, 2 * passage, 0.5))]  # at a line's start
    ends = []  # the end of every "\n\nNAME:\n": the first character of a speaker's turn
    at = val.find("\n\n", length)
    while at != -1:
        line_end = val.find("\n", at + 2)
        name = val[at + 2:line_end]
        if line_end != -1 and name.endswith(":") and name[:-1].replace(" ", "").replace("'", "").isupper():
            ends.append(line_end + 1)
        at = val.find("\n\n", at + 2)
    picked = [ends[int((i + 0.5) * len(ends) / n)] for i in range(n)]
    out["dialogue"] = [(ids(val[e - length:e]), None) for e in picked]
    out["prose"] = [(ids(PROSE[s:s + length]), None) for s in spaced(PROSE, length)]
    out["long"] = [(ids(val[s:s + W - 16]), None) for s in spaced(val, W - 16, 0.25)]
    return out


def follows(new, expected):  # -> (characters the output repeats before it first differs, share of positions equal)
    same = [a == b for a, b in zip(new, expected)]
    first = same.index(False) if False in same else len(same)
    return first, sum(same) / len(same) if same else float("nan")


def suite_report(args, target, tmeta):
    """Spec-Bench's way (Xia et al. 2024, arXiv:2401.07851) at this project's scale: every draft on the same prompts
    of five kinds of text, interleaved prompt by prompt in one process, plain sampling beside each. Per category,
    setting and draft: plain and speculative tok/s, the speedup's mean and std over the repeats (each repeat's
    ratio), tau = tokens per target call (vLLM's mean acceptance length, 1 + accepted / rounds), alpha, the
    acceptance at draft positions 1..3, c, v, Theorem 3.8 with v; at T = 0 every output is checked token for token
    against plain greedy. The repeat category also says how often the target itself repeats the quoted passage."""
    tok = data.Tokenizer(tmeta["tokenizer"])
    K = args.k[0]
    names = args.draft.split(",")
    made = {name: build_draft(args, name, target, tmeta) for name in names}
    mark = lossy(args.verify[0])  # every row, line and JSON entry of a lossy verifier's draft says so
    label = {name: (name if name in DRAFTS else os.path.basename(name).removesuffix(".pt")) + mark for name in names}
    for name, draft in made.items():
        if beyond_max_k(draft, K):
            raise SystemExit(f"--draft {name} proposes at most {draft.max_k} tokens per round: pass --k {draft.max_k}")
    dec = args.decoder[0]
    tgt = with_decoder(dec, target)[0]
    made = {name: with_decoder(dec, None, d)[1] for name, d in made.items()}
    tasks = suite_prompts(tok, args.prompts, args.prompt_len, target.config.block_size, args.corpus)
    tasks = {cat: [(p.to(args.device), e) for p, e in prompts] for cat, prompts in tasks.items()}
    gen = torch.Generator(device=args.device)
    verify = verify_params(args, args.verify[0])
    cols = [None] + names  # None: plain sampling
    for name in names:  # warm-up: caches, allocator, kernels
        speculative_generate(tgt, made[name], tasks["plays"][0][0], 16, k=K, generator=gen.manual_seed(0), **verify)
    autoregressive_generate(tgt, tasks["plays"][0][0], 16, generator=gen.manual_seed(0))
    keys = [(cat, st, col) for cat in tasks for st in args.settings for col in cols]
    tps = {key: [] for key in keys}
    rounds, fwd, steps = ({key: [] for key in keys} for _ in range(3))
    divergence = {}  # (category, setting, draft) -> where its first greedy output left plain greedy
    copies = {st: [] for st in args.settings}  # (repeated characters, share equal) of plain's outputs
    for rep in range(args.repeats):
        for cat, prompts in tasks.items():
            for st in args.settings:
                sampling = SETTINGS[st]
                seconds, tokens = {col: 0.0 for col in cols}, {col: 0 for col in cols}
                for i, (prompt, expected) in enumerate(prompts):
                    plain_out = None
                    for col in cols:  # each prompt through plain sampling and every draft before the next prompt
                        seed = 1000 * rep + i
                        if col is None:
                            out, s = autoregressive_generate(tgt, prompt, args.max_new_tokens,
                                                             generator=gen.manual_seed(seed), **sampling)
                            plain_out = out[0, prompt.size(1):].tolist()
                            if expected is not None and rep == 0:  # and, for chance, another prompt's passage
                                other = prompts[(i + 1) % len(prompts)][1]
                                copies[st].append((*follows(plain_out, expected), follows(plain_out, other)[1]))
                        else:
                            out, s = speculative_generate(tgt, made[col], prompt, args.max_new_tokens, k=K,
                                                          generator=gen.manual_seed(seed), **sampling, **verify)
                            rounds[cat, st, col] += with_tests(s)
                            steps[cat, st, col].append(steady(s.draft_times))
                            new = out[0, prompt.size(1):].tolist()
                            if sampling["temperature"] == 0 and new != plain_out:
                                divergence.setdefault((cat, st, col), f"prompt {i + 1}, new token {follows(new, plain_out)[0]}")
                        seconds[col] += s.total_time
                        tokens[col] += s.new_tokens
                        fwd[cat, st, col].append(steady(s.target_times))
                for col in cols:
                    tps[cat, st, col].append(tokens[col] / seconds[col])
    rows = []
    for cat, st, col in keys:
        if col is None:
            continue
        step = statistics.median(fwd[cat, st, None])
        ratios = [a / b for a, b in zip(tps[cat, st, col], tps[cat, st, None])]
        r = rounds[cat, st, col]
        timed = [x for x in steps[cat, st, col] if x == x]  # nan: a run whose draft never stepped (suffix: no match)
        alpha, c, v = alpha_from_rounds(r), (statistics.median(timed) / step if timed else float("nan")), \
            statistics.median(fwd[cat, st, col]) / step
        counts, theory = kept_histogram(r, K)
        rows.append(dict(category=cat, setting=st, draft=label[col], K=K,
                         plain_tps=statistics.mean(tps[cat, st, None]), spec_tps=statistics.mean(tps[cat, st, col]),
                         speedup=statistics.mean(ratios),
                         speedup_std=statistics.stdev(ratios) if len(ratios) > 1 else float("nan"),
                         repeat_speedups=ratios, tau=sum(x[2] + 1 for x in r) / len(r), alpha=alpha,
                         by_position=acceptance_by_position(r, 3), c=c, v=v,
                         with_v=predicted(alpha, K, c, v), kept_histogram=counts, theory_histogram=theory,
                         greedy_equal=None if SETTINGS[st]["temperature"] != 0 else (
                             "yes" if (cat, st, col) not in divergence else "no: first at " + divergence[cat, st, col])))
    print(f"target {shown(args.target)} ({target.num_params() / 1e6:.2f}M); drafts {', '.join(label.values())}; "
          f"K = {K}, {args.verify[0]}{mark}; {args.prompts} prompts per category x {args.max_new_tokens} new tokens, "
          f"{args.repeats} repeats; device {args.device}; {machine()}")
    for cat, what in SUITE.items():
        print(f"  {cat}: {what}")
    print("| category | setting | draft | plain tok/s | spec tok/s | speedup (mean +- std) | tau | alpha | "
          "a1 a2 a3 | c | v | Thm 3.8 with v | greedy equal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = " ".join(cell(x, ".2f") for x in r["by_position"])  # "-": no round tested a draft at that position
        print(f"| {r['category']} | {r['setting']} | {r['draft']} | {r['plain_tps']:.0f} | {r['spec_tps']:.0f} | "
              f"{r['speedup']:.2f}x +- {r['speedup_std']:.2f} | {r['tau']:.2f} | {cell(r['alpha'], '.3f')} | {a} | "
              f"{cell(r['c'], '.3f')} | {r['v']:.2f} | {cell(r['with_v'], '.2f', 'x')} | {r['greedy_equal'] or '-'} |")
    for st in args.settings:
        for name in label.values():
            mine = {r["category"]: r for r in rows if r["setting"] == st and r["draft"] == name}
            best = {cat: max((r for r in rows if r["setting"] == st and r["category"] == cat),
                             key=lambda r: r["speedup"]) for cat in tasks}
            won = [cat for cat in tasks if best[cat]["draft"] == name]
            if won:
                def margin(cat):  # over the next best draft in that category
                    others = [r["speedup"] for r in rows if r["setting"] == st and r["category"] == cat
                              and r["draft"] != name]
                    return mine[cat]["speedup"] / max(others) - 1 if others else float("nan")
                cat = max(won, key=margin)
                say = (f"wins {', '.join(won)}; by most in {cat}: {mine[cat]['speedup']:.2f}x, "
                       f"{margin(cat):+.0%} over the next draft")
            else:
                cat = max(mine, key=lambda c: mine[c]["speedup"])
                say = (f"wins no category; its best is {cat}: {mine[cat]['speedup']:.2f}x "
                       f"({best[cat]['draft']} there: {best[cat]['speedup']:.2f}x)")
            print(f"{st}, {name}: {say}")
            if mine[cat]["speedup"] < 1.0 and mine[cat]["c"] == mine[cat]["c"]:  # slower everywhere: why, from its best
                r = mine[cat]
                print(f"{st}, {name}: does not pay (best {r['speedup']:.2f}x, {cat}). "
                      + why_it_does_not_pay(r["alpha"], r["c"], r["v"], r["speedup"], K))
    for st in args.settings:
        if copies[st]:
            firsts, shares, chance = zip(*copies[st])
            print(f"{st}, repeat: does the target itself repeat the quoted passage? Its plain output follows the "
                  f"passage for {statistics.median(firsts):.0f} characters (median; each prompt: "
                  f"{', '.join(map(str, firsts))}) and matches it at {statistics.mean(shares):.0%} of positions "
                  f"(another prompt's passage, by chance: {statistics.mean(chance):.0%})")
    for name in label.values():
        for st in args.settings:
            pooled = [y for cat in tasks for col in names if label[col] == name for y in rounds[cat, st, col]]
            counts, a = kept_histogram(pooled, K)[0], alpha_from_rounds(pooled)
            total, theory = sum(counts), kept_law(a, K)
            print(f"{st}, {name}: rounds that kept 0..{K} drafts, all categories: "
                  + " ".join(f"{c / total:.2f}" for c in counts) + f"; Theorem 3.8 at alpha {a:.3f}: "
                  + " ".join(f"{t:.2f}" for t in theory))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(target=shown(args.target), drafts=list(label.values()), K=K, machine=machine(),
                           device=args.device, categories=SUITE, rows=rows,
                           copies={st: [list(c) for c in copies[st]] for st in copies}), fh, indent=1)
    return rows
