"""
bench.py --batch: engine/batched.py's samplers at several batch sizes B, plain against speculative, interleaved,
with the batch's own c and v in Theorem 3.8. What it leaves out: a draft other than a model (the batched engine
runs token-wise verification with one model draft).
"""

import json
import statistics

import torch

from benchmarks.common import SETTINGS, Progress, bench_prompts, machine
from benchmarks.theory import alpha_from_rounds, predicted
import data
from sample import parse_k, shown
from speculative import autoregressive_generate, speculative_generate


def batch_bench(args, target, draft, tmeta):
    """engine/batched.py at each batch size B: B held-out prompts of different lengths, plain and speculative, interleaved.
    Per B: tokens/s of all rows together; the plain ceiling B / (one B-row one-token target forward); c and v as
    measured at that B (a B-row draft step and a B-row (K+1)-token forward, over the B-row one-token step; means);
    the two targets' ratios on decoding alone (tokens/s with the prompt reads left out, which the step costs leave
    out too);
    Theorem 3.8 with them. At B = 1 also speculative_generate and autoregressive_generate on the same prompt,
    so that the cost of the batching machinery itself shows."""
    from engine.batched import autoregressive_generate_batch, speculative_generate_batch
    tok = data.Tokenizer(tmeta["tokenizer"])
    cut = lambda i: args.prompt_len - (i * 13) % max(1, args.prompt_len // 2)  # lengths differ between rows
    prompts = [p[0] for p in bench_prompts(args, tok, max(args.batch))]  # (T,) each
    if tok.kind != "gguf":  # held-out text: cut to lengths that differ between rows (a chat model's prompts do)
        prompts = [p[:cut(i)] for i, p in enumerate(prompts)]
    prompts = [p.to(args.device) for p in prompts]
    gen = torch.Generator(device=args.device)
    n = args.max_new_tokens
    for B in (1, 2):  # warm-up
        autoregressive_generate_batch(target, prompts[:B], 16, generator=gen.manual_seed(0))
        speculative_generate_batch(target, draft, prompts[:B], 16, k=4, generator=gen.manual_seed(0))
    rows, progress = [], Progress("--batch", len(args.settings) * len(args.batch) * args.repeats)
    for name in args.settings:
        sampling = SETTINGS[name]
        for B in args.batch:
            cols = ["plain"] + list(args.k) + (["single plain"] + [f"single {K}" for K in args.k] if B == 1 else [])
            tps, dec, stats = {c: [] for c in cols}, {c: [] for c in cols}, {c: [] for c in cols}
            for rep in range(args.repeats):  # interleaved: every column once per repeat
                for col in cols:
                    kw = dict(generator=gen.manual_seed(1000 * rep + B), **sampling)
                    if col == "plain":
                        _, s = autoregressive_generate_batch(target, prompts[:B], n, **kw)
                    elif col == "single plain":
                        _, s = autoregressive_generate(target, prompts[0][None], n, **kw)
                    elif str(col).startswith("single"):
                        K = parse_k(col.split()[1])
                        _, s = speculative_generate(target, draft, prompts[0][None], n, k=K, **kw)
                    else:
                        _, s = speculative_generate_batch(target, draft, prompts[:B], n, k=col, **kw)
                    tps[col].append(s.new_tokens / s.total_time)
                    if not str(col).startswith("single"):  # decoding alone: the prompt reads left out
                        dec[col].append(s.new_tokens / (s.total_time - sum(s.fill_times)))
                    stats[col].append(s)
                progress.step(f"{name}, B = {B}, repeat {rep + 1}")
            mean = lambda times: statistics.mean(times) if times else float("nan")  # as tok/s counts time: in full
            step = mean([t for s in stats["plain"] for t in s.target_times])  # a B-row one-token forward
            plain = statistics.median(tps["plain"])
            for K in args.k:
                rounds = [(t, k, a) for s in stats[K] for _, t, k, a in s.rounds]
                alpha = alpha_from_rounds(rounds)
                ks = sorted(k for _, k, _ in rounds)
                K_pred = K if K != "auto" else ks[len(ks) // 2]
                c = mean([t for s in stats[K] for t in s.draft_times]) / step
                v = mean([t for s in stats[K] for t in s.target_times]) / step
                spec = statistics.median(tps[K])
                row = dict(setting=name, B=B, K=K, plain_tps=plain, plain_ceiling=B / step, spec_tps=spec,
                           speedup=spec / plain, alpha=alpha, c=c, v=v, k_median=K_pred,
                           with_v=predicted(alpha, K_pred, c, v),
                           plain_decode_tps=statistics.median(dec["plain"]), spec_decode_tps=statistics.median(dec[K]),
                           tail=statistics.median(len(s.target_times) * B / len(s.rounds) for s in stats[K]))
                if B == 1:
                    row.update(single_plain_tps=statistics.median(tps["single plain"]),
                               single_spec_tps=statistics.median(tps[f"single {K}"]))
                rows.append(row)
    print(f"engine/batched.py: target {shown(args.target)} ({target.num_params() / 1e6:.2f}M), draft {shown(args.draft)} "
          f"({draft.num_params() / 1e6:.2f}M); B held-out prompts of {min(map(len, prompts))}..{args.prompt_len} "
          f"tokens x {n} new tokens, median of {args.repeats}; eager (model.py); device {args.device}; {machine()}")
    print("tok/s: all B rows' new tokens per second, together; decoding alone (prompt reads left out): "
          "plain / ceiling = plain decoding tok/s / (B / B-row one-token forward); "
          "decoding speedup / Thm 3.8 = (spec decoding tok/s / plain decoding tok/s) / Theorem 3.8 with the measured v; "
          "rounds, batch / row = the batch's rounds / a row's rounds on average (the batch waits for its slowest row)")
    print("| setting | B | K | plain tok/s | spec tok/s | speedup | alpha | c | v | Thm 3.8 with v | plain / ceiling | "
          "decoding speedup / Thm 3.8 | rounds, batch / row |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['B']} | {r['K']}{'' if r['K'] != 'auto' else ' (' + str(r['k_median']) + ')'} | "
              f"{r['plain_tps']:.0f} | {r['spec_tps']:.0f} | {r['speedup']:.2f}x | {r['alpha']:.3f} | {r['c']:.3f} | "
              f"{r['v']:.2f} | {r['with_v']:.2f}x | {r['plain_decode_tps'] / r['plain_ceiling']:.0%} | "
              f"{r['spec_decode_tps'] / r['plain_decode_tps'] / r['with_v']:.0%} | {r['tail']:.2f} |")
    for r in (r for r in rows if r["B"] == 1):
        print(f"{r['setting']}, B=1, K={r['K']}: batched / speculative_generate = {r['spec_tps']:.0f} / "
              f"{r['single_spec_tps']:.0f} tok/s = {r['spec_tps'] / r['single_spec_tps']:.0%}; batched plain / "
              f"autoregressive_generate = {r['plain_tps'] / r['single_plain_tps']:.0%}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(target=shown(args.target), draft=shown(args.draft), device=args.device, machine=machine(),
                           batch_rows=rows), fh, indent=1)
