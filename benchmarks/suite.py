"""
The task suite (bench.py --suite): which draft for which kind of text. Spec-Bench's way (Xia et al. 2024,
arXiv:2401.07851) at this project's scale: every draft on the same prompts, by category, interleaved prompt by
prompt with plain sampling in one process, at T = 0 (every output checked against plain greedy) and T = 1.

Two suites, one report: the trained pair's five kinds of Shakespeare and prose (SUITE, suite_prompts), and a
real chat model's seven kinds of request (benchmarks/chat_tasks.py; --target smollm2), where lookup drafts pay
where the model copies its prompt. docs/suite.md describes the categories and the columns.
"""

import argparse
import json
import os
import re
import statistics
import time

import torch

from benchmarks.chat_tasks import TASKS
from benchmarks.common import (SETTINGS, Memory, Progress, beyond_max_k, build_draft, cell, chat_ids, commit, cpu_name,
                               held_out_prompts, lossy, machine, runs_as, steady, wide_forwards)
from benchmarks.theory import (acceptance_by_position, alpha_from_rounds, kept_histogram, kept_law, predicted_rounds,
                               why_it_does_not_pay, with_tests)
import data
from engine.fast import with_decoder
from sample import int_or_auto, int_tuple, parse_k, shown, verify_params
from speculative import DRAFTS, ROUNDS, autoregressive_generate, check_drafts_trees, round_for, speculative_generate


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


CHAT_DRAFTS = "ngram@auto,suffix@auto,suffix:suffix_corpus=python@auto"  # the lookups, K chosen each round
COPY_RUN = 4  # a new token counts as copied when it ends a run of this many tokens that also occurs in the prompt


def chat_suite_prompts(tok, n=None):
    """-> {category: [(prompt (1, T), None)]}: the first n (None: all) of each category's conversations in
    benchmarks/chat_tasks.py, in the model's chat template, each ending where the model's turn begins."""
    return {cat: [(ids, None) for ids in chat_ids(tok, convs[:n])] for cat, (_, convs) in TASKS.items()}


def columns(args):
    """--draft's entries as the suite's columns: (label, draft name or path, its parameters, K, its round). An entry
    is NAME or a path; NAME:PARAM=VALUE:... sets that draft's own flags for this column alone, and :verify=ROUND with
    that round's parameters its own verifier (speculative.ROUNDS; default: --verify's), so chains and trees stand in
    one table; @K its K (an int or auto). 'layerskip:layerskip_layers=8@auto' -> ('layerskip:layerskip_layers=8@auto',
    'layerskip', {'layerskip_layers': 8}, 'auto', {}); 'eagle3:verify=tree:branches=4,4,4:children=top:rerank=1:
    budget=auto@3' -> (..., 'eagle3', {}, 3, {'verify': 'tree', 'branches': (4, 4, 4), 'children': 'top', 'rerank':
    True, 'budget': 'auto'}). An entry without @K runs at every --k, and says @K in its label when --k has more than one."""
    out = []
    for entry in re.split(r",(?!\d)", args.draft):  # (a comma before a digit is a tuple's: branches=4,4,4)
        head, _, at = entry.partition("@")
        name, *pairs = head.split(":") if head.split(":")[0] in DRAFTS else [head]
        rule = next((pair.partition("=")[2] for pair in pairs if pair.startswith("verify=")), None)
        if rule is not None and rule not in ROUNDS:
            raise SystemExit(f"--draft {entry}: verify= takes one of {', '.join(sorted(ROUNDS))}, e.g. "
                             "eagle3:verify=tree:branches=4,4,4:children=top@3")
        own = ROUNDS[rule].params if rule else {}
        mine = DRAFTS[name].params if name in DRAFTS else {}
        params = typed(entry, name, mine, [p for p in pairs if p.partition("=")[0] in mine or not
                                           (p.startswith("verify=") or p.partition("=")[0] in own)],
                       "e.g. layerskip:layerskip_layers=8")
        verify = dict(verify=rule, **typed(entry, rule, own, [p for p in pairs if p.partition("=")[0] in own
                                                              and p.partition("=")[0] not in mine],
                                           "e.g. eagle3:verify=tree:branches=2,2")) if rule else {}
        try:
            ks = [parse_k(at)] if at else args.k
        except argparse.ArgumentTypeError as e:
            raise SystemExit(f"--draft {entry}: @K takes an int >= 1 or auto ({e})") from e
        shown_name = entry if name in DRAFTS else os.path.basename(head).removesuffix(".pt") + (f"@{at}" if at else "")
        for K in ks:
            if verify:
                try:
                    round_for(rule, K, **{p: v for p, v in verify.items() if p != "verify"})
                except ValueError as e:
                    raise SystemExit(f"--draft {entry}: {e}") from e
            out.append((shown_name + (f"@{K}" if not at and len(args.k) > 1 else ""), name, params, K, verify))
    return out


def typed(entry, owner, defaults, pairs, example):  # ["PARAM=VALUE", ...] -> {param: value of its default's type}
    params = {}
    for pair in pairs:
        param, _, value = pair.partition("=")
        if param not in defaults or not value:
            raise SystemExit(f"--draft {entry}: {owner}'s own flags are {', '.join(defaults) or 'none'}; write "
                             f"NAME:FLAG=VALUE, {example}")
        default = defaults[param]
        try:
            params[param] = (value.lower() in ("1", "true", "yes") if isinstance(default, bool) else
                             int_tuple(value) if isinstance(default, tuple) else
                             int_or_auto(value) if isinstance(default, int) else type(default)(value))
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            raise SystemExit(f"--draft {entry}: {param} takes a {type(default).__name__} ({e})") from e
    return params


def beats_plain(row):  # -> is a column's speedup in a category a win: above 1x by more than its spread?
    """0.95x is not a win, however it ranks beside the other columns; nor is 1.04x +- 0.06. With no spread (one
    prompt, one repeat) above 1x is enough."""
    std = row["speedup_std"]
    return row["speedup"] - (0.0 if std != std else std) > 1.0


def copied(new, prompt, n=COPY_RUN):  # -> the share of new tokens that end a run of n tokens found in the prompt
    """The n-grams of the prompt; new token j is copied when the n tokens ending at it (reaching back into the prompt
    for the first ones) are one of them. [5, 6, 7, 8] after a prompt [1, 2, 5, 6, 7, 8, 9], n = 4 -> 1/4: only 8
    ends the run 5 6 7 8."""
    grams = {tuple(prompt[i:i + n]) for i in range(len(prompt) - n + 1)}
    full = prompt + new
    hits = [tuple(full[len(prompt) + j - n + 1:len(prompt) + j + 1]) in grams for j in range(len(new))]
    return sum(hits) / len(hits) if hits else float("nan")


def suite_report(args, target, tmeta):
    """Every column (a draft at its K) on the same prompts, interleaved prompt by prompt in one process, plain
    sampling beside each. Per category, setting and column: plain and speculative tok/s, the speedup's mean and
    std (over the repeats, each repeat's ratio; with one repeat, over the category's prompts), tau = tokens per
    target call (vLLM's mean acceptance length, 1 + accepted / rounds), alpha, the acceptance at draft positions
    1..3, c, v, Theorem 3.8 with v (round by round: predicted_rounds), time to the first token; at T = 0 every output
    is checked token for token against plain greedy. After the table: an overall row per column (the mean over the
    categories, Spec-Bench's headline), each column's memory against plain's, what each draft wins, and how often
    the target copies from its prompt (a chat model) or repeats the quoted passage (the shipped pair)."""
    tok = data.Tokenizer(tmeta["tokenizer"])
    chat = tok.kind == "gguf"  # a chat model: benchmarks/chat_tasks.py's requests, each answer ends with its turn
    cols = columns(args)
    mark = lossy(args.verify[0])  # every row, line and JSON entry of a lossy verifier's draft says so
    verify = verify_params(args, args.verify[0])  # a column's own (/VERIFY) replaces it
    dec = args.decoder[0]
    tgt = with_decoder(dec, target)[0]
    memory = Memory(args.device)
    made, draft_of, k_of, load_mb, verify_of = {}, {}, {}, {}, {}  # made: one draft per (name, parameters)
    for label, name, params, K, own in cols:
        entry, label, key = label, label + (lossy(own["verify"]) if own else mark), (name, tuple(params.items()))
        verify_of[label] = own or verify
        load_mb[label] = 0.0
        if key not in made:
            memory.start()
            draft = build_draft(argparse.Namespace(**{**vars(args), **params}), name, target, tmeta)
            made[key] = with_decoder(dec, None, draft)[1]
            load_mb[label] = memory.grown()
        try:  # a chains-only draft in a tree column: said before any run
            check_drafts_trees(verify_of[label]["verify"], made[key])
        except ValueError as e:
            raise SystemExit(f"--draft {entry}: {e}") from e
        draft_of[label], k_of[label] = made[key], K
        if beyond_max_k(made[key], K):
            raise SystemExit(f"--draft {entry} proposes at most {made[key].max_k} tokens per round: "
                             f"pass --k {made[key].max_k}")
    labels = list(draft_of)
    what = {cat: text for cat, (text, _) in TASKS.items()} if chat else SUITE
    tasks = chat_suite_prompts(tok, args.prompts) if chat else suite_prompts(
        tok, args.prompts, args.prompt_len, target.config.block_size, args.corpus)
    tasks = {cat: [(p.to(args.device), e) for p, e in prompts] for cat, prompts in tasks.items()}
    stop = tok.stop or None
    gen = torch.Generator(device=args.device)
    first = next(iter(tasks.values()))[0][0]
    for label in labels:  # warm-up: caches, allocator, kernels
        speculative_generate(tgt, draft_of[label], first, 16, k=k_of[label], generator=gen.manual_seed(0),
                             **verify_of[label])
    autoregressive_generate(tgt, first, 16, generator=gen.manual_seed(0))
    keys = [(cat, st, col) for cat in tasks for st in args.settings for col in [None] + labels]
    tps, per_prompt, rounds, fwd, wide, steps, ttft = ({key: [] for key in keys} for _ in range(7))
    peak_mb = {col: 0.0 for col in [None] + labels}  # the most a call of the column grew the process's memory
    divergence = {}  # (category, setting, draft) -> where its first greedy output left plain greedy
    copies = {st: [] for st in args.settings}  # (repeated characters, share equal) of plain's outputs (repeat)
    copy_share = {key: [] for key in keys if key[2] is None}  # a chat model: share of its answers' tokens copied
    progress = Progress("suite", args.repeats * len(tasks) * len(args.settings))
    for rep in range(args.repeats):
        for cat, prompts in tasks.items():
            for st in args.settings:
                sampling = dict(SETTINGS[st], stop=stop)
                seconds, tokens = {col: 0.0 for col in [None] + labels}, {col: 0 for col in [None] + labels}
                for i, (prompt, expected) in enumerate(prompts):
                    plain_out = None
                    for col in [None] + labels:  # each prompt through plain sampling and every column before the next
                        seed, shown_at = 1000 * rep + i, []
                        stream = lambda new: shown_at or shown_at.append(time.perf_counter())  # the first token's time
                        memory.start()
                        tic = time.perf_counter()
                        if col is None:
                            out, s = autoregressive_generate(tgt, prompt, args.max_new_tokens, stream=stream,
                                                             generator=gen.manual_seed(seed), **sampling)
                            plain_out = out[0, prompt.size(1):].tolist()
                            if expected is not None and rep == 0:  # and, for chance, another prompt's passage
                                other = prompts[(i + 1) % len(prompts)][1]
                                copies[st].append((*follows(plain_out, expected), follows(plain_out, other)[1]))
                            if chat and rep == 0:
                                copy_share[cat, st, None].append(copied(plain_out, prompt[0].tolist()))
                        else:
                            out, s = speculative_generate(tgt, draft_of[col], prompt, args.max_new_tokens, k=k_of[col],
                                                          stream=stream, generator=gen.manual_seed(seed), **sampling,
                                                          **verify_of[col])
                            rounds[cat, st, col] += with_tests(s)
                            steps[cat, st, col].append(steady(s.draft_times))
                            wide[cat, st, col] += wide_forwards(s)
                            new = out[0, prompt.size(1):].tolist()
                            if sampling["temperature"] == 0 and new != plain_out:
                                divergence.setdefault((cat, st, col), f"prompt {i + 1}, new token {follows(new, plain_out)[0]}")
                        peak_mb[col] = max(peak_mb[col], memory.peak())
                        ttft[cat, st, col].append(shown_at[0] - tic)
                        seconds[col] += s.total_time
                        tokens[col] += s.new_tokens
                        per_prompt[cat, st, col].append(s.new_tokens / s.total_time)
                        fwd[cat, st, col].append(steady(s.target_times))
                for col in [None] + labels:
                    tps[cat, st, col].append(tokens[col] / seconds[col])
                progress.step(f"{cat}, {st}" + (f", repeat {rep + 1}" if args.repeats > 1 else ""))
    rows = []
    for cat, st, col in keys:
        if col is None:
            continue
        step = statistics.median(fwd[cat, st, None])
        ratios = [a / b for a, b in zip(tps[cat, st, col], tps[cat, st, None])]
        spread = ratios if args.repeats > 1 else [a / b for a, b in zip(per_prompt[cat, st, col], per_prompt[cat, st, None])]
        r = rounds[cat, st, col]
        timed = [x for x in steps[cat, st, col] if x == x]  # nan: a run whose draft never stepped (suffix: no match)
        alpha, c = alpha_from_rounds(r), (statistics.median(timed) / step if timed else float("nan"))
        v = statistics.median(wide[cat, st, col]) / step if wide[cat, st, col] else float("nan")
        K = k_of[col]
        counts, theory = kept_histogram(r, K) if isinstance(K, int) else (None, None)
        rows.append(dict(category=cat, setting=st, draft=col, K=K,
                         plain_tps=statistics.mean(tps[cat, st, None]), spec_tps=statistics.mean(tps[cat, st, col]),
                         speedup=statistics.mean(ratios),
                         speedup_std=statistics.stdev(spread) if len(spread) > 1 else float("nan"),
                         repeat_speedups=ratios, tau=sum(x[2] + 1 for x in r) / len(r), alpha=alpha,
                         by_position=acceptance_by_position(r, 3), c=c, v=v, k_median=sorted(x[1] for x in r)[len(r) // 2],
                         with_v=predicted_rounds(alpha, [x[1] for x in r], c, v), kept_histogram=counts,
                         theory_histogram=theory, plain_ttft_ms=1e3 * statistics.median(ttft[cat, st, None]),
                         ttft_ms=1e3 * statistics.median(ttft[cat, st, col]),
                         greedy_equal=None if SETTINGS[st]["temperature"] != 0 else (
                             "yes" if (cat, st, col) not in divergence else "no: first at " + divergence[cat, st, col])))
    overall = [dict(setting=st, draft=col, **{key: statistics.mean(r[key] for r in rows
                                                                   if r["setting"] == st and r["draft"] == col)
                                              for key in ("speedup", "tau", "alpha", "with_v", "plain_ttft_ms", "ttft_ms")})
               for st in args.settings for col in labels]
    ks = sorted({str(K) for K in k_of.values()})
    print(f"target {shown(args.target)} ({runs_as({dec: (tgt, None)})}{target.num_params() / 1e6:.2f}M); "
          f"drafts {', '.join(labels)}; K = {', '.join(ks)}, {args.verify[0]}{mark}; "
          f"{sum(map(len, tasks.values())) // len(tasks)} prompts per category x {args.max_new_tokens} new tokens"
          f"{' at most (each answer ends with its turn)' if stop else ''}, {args.repeats} repeat(s); "
          f"device {args.device}; {machine()}")
    for cat, text in what.items():
        print(f"  {cat}: {text}")
    spread = "over repeats" if args.repeats > 1 else "over its prompts"
    print(f"| category | setting | draft | plain tok/s | spec tok/s | speedup (mean +- std {spread}) | tau | alpha | "
          "a1 a2 a3 | c | v | Thm 3.8 with v | measured / Thm 3.8 | first token ms (plain) | greedy equal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = " ".join(cell(x, ".2f") for x in r["by_position"])  # "-": no round tested a draft at that position
        print(f"| {r['category']} | {r['setting']} | {r['draft']} | {r['plain_tps']:.0f} | {r['spec_tps']:.0f} | "
              f"{r['speedup']:.2f}x +- {cell(r['speedup_std'], '.2f')} | {r['tau']:.2f} | {cell(r['alpha'], '.3f')} | "
              f"{a} | {cell(r['c'], '.3f')} | {cell(r['v'], '.2f')} | {cell(r['with_v'], '.2f', 'x')} | "
              f"{cell(r['speedup'] / r['with_v'], '.0%')} | {r['ttft_ms']:.0f} ({r['plain_ttft_ms']:.0f}) | "
              f"{r['greedy_equal'] or '-'} |")
    print(f"overall: the mean over the {len(tasks)} categories (Spec-Bench's headline)")
    print("| setting | draft | speedup | tau | alpha | Thm 3.8 with v | first token ms (plain) |")
    print("|---|---|---|---|---|---|---|")
    for r in overall:
        print(f"| {r['setting']} | {r['draft']} | {r['speedup']:.2f}x | {r['tau']:.2f} | {cell(r['alpha'], '.3f')} | "
              f"{cell(r['with_v'], '.2f', 'x')} | {r['ttft_ms']:.0f} ({r['plain_ttft_ms']:.0f}) |")
    print(f"memory: resident, plain's peak {memory.base + peak_mb[None]:.0f} MB ({memory.how}); each column's "
          "draft load, then its calls' peak growth beyond plain's: "
          + ", ".join(f"{col} +{load_mb[col]:.0f} +{max(0.0, peak_mb[col] - peak_mb[None]):.0f} MB" for col in labels))
    for st in args.settings:
        for name in labels:
            mine = {r["category"]: r for r in rows if r["setting"] == st and r["draft"] == name}
            best = {cat: max((r for r in rows if r["setting"] == st and r["category"] == cat),
                             key=lambda r: r["speedup"]) for cat in tasks}
            won = [cat for cat in tasks if best[cat]["draft"] == name and beats_plain(best[cat])]
            if won:
                def margin(cat):  # over the next best draft in that category
                    others = [r["speedup"] for r in rows if r["setting"] == st and r["category"] == cat
                              and r["draft"] != name]
                    return mine[cat]["speedup"] / max(others) - 1 if others else float("nan")
                cat = max(won, key=lambda c: mine[c]["speedup"] if len(labels) == 1 else margin(c))
                say = (f"wins {', '.join(won)}; by most in {cat}: {mine[cat]['speedup']:.2f}x, "
                       + (f"{margin(cat):+.0%} over the next draft" if len(labels) > 1 else "the only draft"))
            else:
                cat = max(mine, key=lambda c: mine[c]["speedup"])
                say = (f"wins no category (a win: the fastest column, above 1x by more than its spread); its best is "
                       f"{cat}: {mine[cat]['speedup']:.2f}x ({best[cat]['draft']} there: {best[cat]['speedup']:.2f}x)")
            print(f"{st}, {name}: {say}")
            if mine[cat]["speedup"] < 1.0 and mine[cat]["c"] == mine[cat]["c"]:  # slower everywhere: why, from its best
                r = mine[cat]
                print(f"{st}, {name}: does not pay (best {r['speedup']:.2f}x, {cat}). "
                      + why_it_does_not_pay(r["alpha"], r["c"], r["v"], r["speedup"], r["k_median"]))
    for st in args.settings:
        if copies[st]:
            firsts, shares, chance = zip(*copies[st])
            print(f"{st}, repeat: does the target itself repeat the quoted passage? Its plain output follows the "
                  f"passage for {statistics.median(firsts):.0f} characters (median; each prompt: "
                  f"{', '.join(map(str, firsts))}) and matches it at {statistics.mean(shares):.0%} of positions "
                  f"(another prompt's passage, by chance: {statistics.mean(chance):.0%})")
        if chat:
            print(f"{st}: how much the target copies from its prompt (the share of its plain answers' tokens that end a "
                  f"run of {COPY_RUN} tokens found in the prompt): "
                  + ", ".join(f"{cat} {statistics.mean(copy_share[cat, st, None]):.0%}" for cat in tasks))
    for name in labels:
        K = k_of[name]
        for st in args.settings if isinstance(K, int) else ():  # the histogram's law is per K
            pooled = [y for cat in tasks for y in rounds[cat, st, name]]
            counts, a = kept_histogram(pooled, K)[0], alpha_from_rounds(pooled)
            total, theory = sum(counts), kept_law(a, K)
            if total:
                print(f"{st}, {name}: rounds that kept 0..{K} drafts, all categories: "
                      + " ".join(f"{c / total:.2f}" for c in counts) + f"; Theorem 3.8 at alpha {a:.3f}: "
                      + " ".join(f"{t:.2f}" for t in theory))
    if chat:
        shares = {f"{cat},{st}": v for (cat, st, _), v in copy_share.items() if v}  # as the JSON keeps them
        readme_table(rows, overall, labels, list(tasks), shares, f"commit {commit()}, {cpu_name()}, "
                     f"{getattr(tgt, 'about', shown(args.target))}, {dec} decoder")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(target=shown(args.target), about=getattr(tgt, "about", None), decoder=dec, commit=commit(),
                           drafts=labels, K=ks if len(ks) > 1 else k_of[labels[0]],
                           machine=machine(), device=args.device, categories=what, rows=rows, overall=overall,
                           memory=dict(how=memory.how, plain_peak_mb=memory.base + peak_mb[None],
                                       draft_load_mb=load_mb, plain_call_peak_mb=peak_mb[None],
                                       call_peak_mb={col: mb for col, mb in peak_mb.items() if col}),
                           copies={st: [list(c) for c in copies[st]] for st in copies},
                           copied={f"{cat},{st}": v for (cat, st, _), v in copy_share.items() if v}), fh, indent=1)
    return rows


def readme_table(rows, overall, labels, cats, copied, what):
    """The README's real-model table, printed from this run (the README quotes it, regenerated by the same command):
    per setting, the share of plain's answer tokens copied from the prompt, then per draft its speedup and tau in
    each category and overall, and plain's tokens/s in the run's format. copied: the run JSON's {"cat,setting":
    [share of each answer]}, so that tests/test_numbers.py rebuilds the table from the JSON alone."""
    for st in dict.fromkeys(r["setting"] for r in rows):
        print(f"README table ({st}, {what}):")
        print("\n".join(readme_lines(rows, overall, labels, cats, copied, st)))


def readme_lines(rows, overall, labels, cats, copied, st):  # -> the README table's lines for one setting
    cell_of = {(r["category"], r["draft"]): r for r in rows if r["setting"] == st}
    lines = ["| " + st + " | " + " | ".join(cats) + " | overall |", "|---|" + "---|" * (len(cats) + 1),
             "| plain tok/s | " + " | ".join(f"{cell_of[cat, labels[0]]['plain_tps']:.0f}" for cat in cats) + " | |",
             "| answer tokens copied from the prompt | " + " | ".join(
                 f"{statistics.mean(copied[f'{cat},{st}']):.0%}" for cat in cats) + " | |"]
    for d in labels:
        total = next(r for r in overall if r["setting"] == st and r["draft"] == d)
        lines.append(f"| `{d}` | " + " | ".join(f"{cell_of[cat, d]['speedup']:.2f}x ({cell_of[cat, d]['tau']:.2f})"
                                                for cat in cats) + f" | {total['speedup']:.2f}x |")
    return lines
