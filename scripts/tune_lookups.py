"""
Choose the lookup drafts' settings for a BPE chat model on requests written for training (data.chat_requests),
never on the task suite's: greedy rounds simulated on the target's own greedy answers.

    python scripts/tune_lookups.py --target smollm2 --requests 24        # about 2 minutes on 2 cores

At T = 0 the output of speculative sampling is the target's greedy text whatever the draft proposes, so a round is
known without running it: from position t, a lookup proposes K tokens (its k_for and path, from the text so far),
the target keeps the longest prefix that equals the greedy text, and the round emits that prefix and one more
token. The round costs v(K + 1) one-token steps (K = 0: one plain step), v measured on the same target in the same
run; a search costs what it measures. The predicted speedup is tokens over steps, Theorem 3.8 round by round, for
every setting on the same answers. It leaves out T = 1, where the model copies less (bench.py --suite measures that).
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project's modules

import data  # noqa: E402
import pretrained  # noqa: E402
from drafts.ngram import NGramDraft  # noqa: E402
from drafts.suffix import SuffixDraft  # noqa: E402
from engine.fast import default_decoder, with_decoder  # noqa: E402
from speculative import autoregressive_generate  # noqa: E402


def greedy_answers(target, tok, requests, max_new_tokens):  # -> [(prompt ids, answer ids)], plain greedy
    out = []
    for i, request in enumerate(requests):
        prompt = tok.chat([{"role": "user", "content": request}])
        ids, _ = autoregressive_generate(target, torch.tensor([prompt]), max_new_tokens, temperature=0, stop=tok.stop)
        out.append((prompt, ids[0, len(prompt):].tolist()))
        print(f"answer {i + 1}/{len(requests)}: {len(out[-1][1])} tokens", file=sys.stderr)
    return out


@torch.no_grad()
def widths(target, prompt, n_max, repeats=7):  # -> {n: v(n)}: an n-token forward over the one-token step
    target.reset_cache()
    target(torch.tensor([prompt]), use_cache=True)
    P, times = target.cache_len, {n: [] for n in range(1, n_max + 1)}
    for _ in range(repeats):
        for n in times:
            tic = time.perf_counter()
            target(torch.tensor([prompt[-1:] * n]), use_cache=True)
            times[n].append(time.perf_counter() - tic)
            target.crop(P)
    step = statistics.median(times[1])
    return {n: statistics.median(t) / step for n, t in times.items()}, step


def simulate(make, answers, K_cap, v, step):  # -> (predicted speedup, tokens per round, share of rounds that drafted)
    tokens = cost = rounds = drafting = 0
    for prompt, answer in answers:
        draft, text, t = make(), list(prompt), 0
        while t < len(answer):
            tic = time.perf_counter()
            K = draft.k_for(text, min(K_cap, len(answer) - t - 1)) if len(answer) - t > 1 else 0
            path = draft.path(text)[:K]
            search = time.perf_counter() - tic
            kept = next((i for i, (x, y) in enumerate(zip(path, answer[t:])) if x != y), len(path))
            n = kept + 1  # the kept drafts and the token after them
            text += answer[t:t + n]
            t += n
            tokens, rounds, drafting = tokens + n, rounds + 1, drafting + (K > 0)
            cost += v[K + 1] + search / step
    return tokens / cost, tokens / rounds, drafting / rounds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--decoder", default=None, help="as sample.py's (None: auto, for a Q4_1 file on a CPU whichever "
                    "of fast-q4_1 and fast-int4 times faster here)")
    ap.add_argument("--requests", type=int, default=24, help="training requests answered (data.chat_requests)")
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1, help="which requests (data.chat_requests' shuffle)")
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model, tok = pretrained.load(args.target)
    decoder = default_decoder(model, say=print) if args.decoder in (None, "auto") else args.decoder
    target = with_decoder(decoder, model)[0]
    answers = greedy_answers(target, tok, data.chat_requests(args.requests, args.seed), args.max_new_tokens)
    v, step = widths(target, answers[0][0], 11)
    print(f"{args.target} ({getattr(target, 'about', '')}, {decoder} decoder): {len(answers)} training requests, "
          f"{sum(len(a) for _, a in answers)} greedy answer tokens; one-token step {1e3 * step:.1f} ms, v: "
          + ", ".join(f"v({n}) {v[n]:.2f}" for n in (2, 3, 5, 9)))
    settings = [(f"ngram n={n} max_path={p}", lambda n=n, p=p: NGramDraft(model.config.vocab_size, n=n, max_path=p))
                for n in (1, 2, 3, 4) for p in (4, 10)]
    settings += [(f"suffix min_match={m} min_prob={q}",
                  lambda m=m, q=q: SuffixDraft(model.config.vocab_size, min_match=m, min_prob=q, max_match=max(16, m)))
                 for m in (1, 2, 3, 4, 6) for q in (0.1, 0.3, 0.5)]
    print("| lookup | " + " | ".join(f"K <= {K}" for K in (2, 3, 4, 6, 8)) + " | tokens per round (K <= 4) | rounds that draft |")
    print("|---|" + "---|" * 7)
    for name, make in settings:
        cells = [simulate(make, answers, K, v, step) for K in (2, 3, 4, 6, 8)]
        print(f"| {name} | " + " | ".join(f"{c[0]:.2f}x" for c in cells) + f" | {cells[2][1]:.2f} | {cells[2][2]:.0%} |")


if __name__ == "__main__":
    main()
