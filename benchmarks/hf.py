"""
bench.py --hf: transformers beside ours on the same model (engine/hf.py): its assisted generation against ours on
the exported pair, or its plain generate() on the same GGUF file against our plain sampling; with --suite, on a
chat model's requests by category, also its prompt lookup against our lookup drafts (suite_against_hf).
"""

import json
import os
import statistics
import time

import torch

import data
import pretrained
from benchmarks.common import SETTINGS, Progress, machine
from sample import is_gguf, shown
from speculative import autoregressive_generate, speculative_generate


def compare_with_hf(args, target, draft, prompts):
    """transformers beside ours on the same model, the same prompts (token ids) and sampling, interleaved prompt by
    prompt; greedy runs check that both give the same tokens. Both make exactly --max_new_tokens per prompt (no end
    of turn, no stop), timed from the prompt's ids to the last token; tokens/s is the median over --repeats.
    - model.GPT pair (exported by engine/hf.py): transformers' assisted generation against speculative_generate, at
      each fixed K (HF's constant schedule: exactly K drafts per round).
    - GGUF target: transformers loads the same file itself (engine/hf.load_gguf: float32, as ours) and its plain
      generate() runs against autoregressive_generate (K = 0): an independent implementation of the same model,
      so the table says how our eager Llama's speed compares, and its greedy tokens check ours."""
    from engine.hf import load_gguf, to_hf
    if is_gguf(args.target):
        hf_target, hf_draft, ks = load_gguf(pretrained.find(args.target)), None, [0]  # 0: plain sampling
        what = f"generate() vs our plain sampling, both loading the same file ({target.about}, eager decoder)"
    else:
        hf_target, hf_draft = to_hf(target), to_hf(draft).to(args.device)
        gc = hf_draft.generation_config
        gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = "constant", 0.0  # exactly K drafts
        ks = [k for k in args.k if k != "auto"]  # HF's constant schedule needs a fixed K
        what = "assisted generation vs ours, same pair, same K (constant)"
    hf_target, n = hf_target.to(args.device), args.max_new_tokens

    def ours(prompt, K, gen, sampling):  # -> (prompt and new tokens (1, T + n), seconds)
        if K == 0:
            out, s = autoregressive_generate(target, prompt, n, generator=gen, **sampling)
        else:
            out, s = speculative_generate(target, draft, prompt, n, k=K, generator=gen, **sampling)
        return out, s.total_time

    def theirs(prompt, K, hf_kw):  # -> (prompt and new tokens (1, T + n), seconds)
        tic = time.perf_counter()
        out = hf_target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                 pad_token_id=0, eos_token_id=None,  # None: no end of turn, so n tokens
                                 **(dict(assistant_model=hf_draft) if K else {}), **hf_kw)
        return out, time.perf_counter() - tic

    rows = []
    for name in args.settings:
        sampling = SETTINGS[name]
        hf_kw = dict(do_sample=False) if sampling["temperature"] == 0 else dict(
            do_sample=True, temperature=sampling["temperature"], top_p=sampling.get("top_p", 1.0), top_k=0)
        for K in ks:
            if K:
                hf_draft.generation_config.num_assistant_tokens = K
            ours(prompts[0][:, :8], K, torch.Generator(device=args.device), sampling)  # warm-up: kernels, allocator
            theirs(prompts[0][:, :8], K, hf_kw)
            ours_tps, hf_tps, same = [], [], True
            for rep in range(args.repeats):
                t_ours = t_hf = 0.0
                for i, prompt in enumerate(prompts):
                    out, seconds = ours(prompt, K, torch.Generator(device=args.device).manual_seed(1000 * rep + i),
                                        sampling)
                    t_ours += seconds
                    torch.manual_seed(1000 * rep + i)
                    hf_out, seconds = theirs(prompt, K, hf_kw)
                    t_hf += seconds
                    same = same and (sampling["temperature"] != 0 or torch.equal(out, hf_out))
                ours_tps.append(n * len(prompts) / t_ours)
                hf_tps.append(n * len(prompts) / t_hf)
            rows.append(dict(setting=name, K=K, ours_tps=statistics.median(ours_tps), hf_tps=statistics.median(hf_tps),
                             greedy_outputs_equal=same if sampling["temperature"] == 0 else None))
    import transformers
    print(f"\nHF transformers {transformers.__version__} {what}; {len(prompts)} prompts x {n} new tokens, median of "
          f"{args.repeats}; device {args.device}; {machine()}:")
    print("| setting | K | ours tok/s | HF tok/s | ours / HF | greedy outputs equal |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        eq = "" if r["greedy_outputs_equal"] is None else ("yes" if r["greedy_outputs_equal"] else "NO")
        print(f"| {r['setting']} | {r['K'] or 'plain'} | {r['ours_tps']:.0f} | {r['hf_tps']:.0f} | "
              f"{r['ours_tps'] / r['hf_tps']:.2f}x | {eq} |")
    return rows


def suite_against_hf(args, target, tmeta, ks=(4, 10)):
    """bench.py --target smollm2 --suite --hf: the suite's requests (benchmarks/chat_tasks.py) through transformers
    and through ours, on the same GGUF file, the same prompt ids and sampling, each answer ending with its turn (the
    file's end-of-turn ids are HF's eos_token_id and our stop), interleaved prompt by prompt in one process:
    HF's plain generate() against our plain sampling in --decoder's format, and HF's prompt lookup
    (generate(prompt_lookup_num_tokens=k) for each k in ks, its default max_matching_ngram_size) against our ngram
    and suffix drafts with k="auto". transformers runs the file dequantized to float32 (its GGUF loader's; it has no
    kernel for the file's Q4_1 blocks on a CPU). Per category and setting: tokens/s of each (total tokens / total
    seconds over the category's prompts), the ratios, and at T = 0 whether every output equals its own side's plain
    greedy (ours in its format, theirs in float32)."""
    import transformers
    from benchmarks.suite import chat_suite_prompts
    from engine.fast import with_decoder
    from engine.hf import load_gguf
    from sample import make_draft
    target = with_decoder(args.decoder[0], target)[0]  # ours as the suite ran it
    tok = data.Tokenizer(tmeta["tokenizer"])
    hf_target = load_gguf(pretrained.find(args.target)).to(args.device)
    drafts = {"ngram": make_draft(args, "ngram", target), "suffix": make_draft(args, "suffix", target)}
    tasks = chat_suite_prompts(tok, args.prompts)
    eos = [ids[0] for ids in tok.stop]
    n = args.max_new_tokens

    def ours(col, prompt, seed, sampling):  # -> (new tokens, seconds)
        gen = torch.Generator(device=args.device).manual_seed(seed)
        if col == "ours plain":
            out, s = autoregressive_generate(target, prompt, n, generator=gen, stop=tok.stop, **sampling)
        else:
            name = col.split()[1].split("@")[0]
            out, s = speculative_generate(target, drafts[name], prompt, n, k="auto", generator=gen, stop=tok.stop,
                                          **sampling)
        return out[0, prompt.size(1):].tolist(), s.total_time

    def theirs(col, prompt, seed, sampling):  # -> (new tokens, seconds)
        hf_kw = dict(do_sample=False) if sampling["temperature"] == 0 else dict(
            do_sample=True, temperature=sampling["temperature"], top_p=sampling.get("top_p", 1.0), top_k=0)
        if col.startswith("HF lookup"):
            hf_kw["prompt_lookup_num_tokens"] = int(col.split("@")[1])
        torch.manual_seed(seed)
        tic = time.perf_counter()
        out = hf_target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                 eos_token_id=eos, pad_token_id=eos[0], **hf_kw)
        return out[0, prompt.size(1):].tolist(), time.perf_counter() - tic

    lookups = [f"HF lookup@{k}" for k in ks]
    cols = ["ours plain", "HF plain", "ours ngram@auto", "ours suffix@auto", *lookups]
    first = next(iter(tasks.values()))[0][0]
    for col in cols:  # warm-up: kernels, allocator
        (ours if col.startswith("ours") else theirs)(col, first[:, :32], 0, SETTINGS["t0"])
    rows, progress = [], Progress("--hf", len(tasks) * len(args.settings))
    for cat, prompts in tasks.items():
        for st in args.settings:
            sampling = SETTINGS[st]
            tokens, seconds, equal = {c: 0 for c in cols}, {c: 0.0 for c in cols}, {c: True for c in cols}
            for i, (prompt, _) in enumerate(prompts):
                prompt = prompt.to(args.device)
                outs = {}
                for col in cols:
                    new, sec = (ours if col.startswith("ours") else theirs)(col, prompt, 1000 + i, sampling)
                    outs[col] = new
                    tokens[col] += len(new)
                    seconds[col] += sec
                for col in cols:  # greedy: every output is its own side's plain greedy
                    equal[col] = equal[col] and outs[col] == outs["ours plain" if col.startswith("ours") else "HF plain"]
            tps = {c: tokens[c] / seconds[c] for c in cols}
            rows.append(dict(category=cat, setting=st, tps=tps,
                             greedy_equal=({c: equal[c] for c in cols} if sampling["temperature"] == 0 else None)))
            progress.step(f"{cat}, {st}")
    print(f"\nHF transformers {transformers.__version__} on the same file (float32, its GGUF loader's) against ours "
          f"({target.about}, {args.decoder[0]} decoder), the suite's requests, answers of at most {n} tokens ending "
          f"with their turn, one pass, interleaved prompt by prompt; HF lookup@k = "
          f"generate(prompt_lookup_num_tokens=k); device {args.device}; {machine()}")
    best = lambda t: max(t[c] for c in lookups)  # HF's faster lookup in this row
    print("| category | setting | " + " | ".join(f"{c} tok/s" for c in cols)
          + " | ours plain / HF plain | ours ngram / best HF lookup | ours suffix / best HF lookup | greedy equal |")
    print("|---|---|" + "---|" * (len(cols) + 4))
    for r in rows + [dict(category="overall (mean)", setting=st, greedy_equal=None, tps={
            c: statistics.mean(x["tps"][c] for x in rows if x["setting"] == st) for c in cols}) for st in args.settings]:
        t = r["tps"]
        eq = "-" if r["greedy_equal"] is None else (
            "yes" if all(r["greedy_equal"].values()) else "NO: " + ", ".join(c for c, e in r["greedy_equal"].items() if not e))
        print(f"| {r['category']} | {r['setting']} | " + " | ".join(f"{t[c]:.1f}" for c in cols)
              + f" | {t['ours plain'] / t['HF plain']:.2f}x | {t['ours ngram@auto'] / best(t):.2f}x | "
              f"{t['ours suffix@auto'] / best(t):.2f}x | {eq} |")
    if args.json:
        path = os.path.splitext(args.json)[0] + "_hf.json"
        with open(path, "w") as fh:
            json.dump(dict(target=shown(args.target), decoder=args.decoder[0], about=target.about, machine=machine(),
                           transformers=transformers.__version__, ks=list(ks), rows=rows), fh, indent=1)
    return rows
