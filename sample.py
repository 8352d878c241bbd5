"""
Sample text with speculative sampling from a target/draft pair (default: the shipped pair, on the CPU).

    python sample.py                                   # a few samples, streamed, then the statistics
    python sample.py --start "ROMEO:" --k 6 --temperature 1.0
    python sample.py --draft none                      # plain sampling from the target, for comparison
    python sample.py --draft ngram --ngram_n 3         # prompt-lookup draft: no draft model (variants.py)
    python sample.py --verify block                    # another verifier (variants.py; lenient, typical: LOSSY)
    python sample.py --start FILE:prompt.txt --top_p 0.95
    python sample.py --batch 8                         # 8 samples generated together (batched.py)
    python sample.py --init_from gpt2-xl --draft gpt2 --device cuda --start "Hello"   # pretrained GPT-2 pair

The tokenizer comes from the checkpoint (never guessed); the draft must have been trained with the same one.
"""

import argparse
import os
import sys
import time

import torch

from data import Tokenizer
from model import SHIPPED, load_checkpoint
from hf import GPT2_NAMES  # pretrained GPT-2 through transformers (optional; imported only when used)
from choose_k import AutoK
from fast import DECODERS, with_decoder
from speculative import SamplingError, Stats, autoregressive_generate, round_for, speculative_generate
from variants import VERIFIERS, NGramDraft, round_function

HERE = os.path.dirname(os.path.abspath(__file__))
HELP = argparse.ArgumentDefaultsHelpFormatter  # --help shows every default
TRAIN_THEN_SAMPLE = ("`python train_draft.py --preset cpu-quick` trains a small pair into runs/cpu-quick/ in minutes; "
                     "then `python sample.py --target runs/cpu-quick/target.pt --draft runs/cpu-quick/draft.pt`")


def shown(path):
    """A path as scripts print and store it: relative to the repository when inside it, so no machine path."""
    full = os.path.abspath(path)
    return os.path.relpath(full, HERE) if full.startswith(HERE + os.sep) else path


def get_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HELP)
    ap.add_argument("--target", default=None, help="target checkpoint; None means checkpoints/target.pt, the shipped one")
    ap.add_argument("--draft", default=None,
                    help="draft checkpoint, a GPT-2 name (gpt2, ...), 'ngram' (prompt lookup, no model; lossless), "
                         "or 'none' for plain sampling; None means checkpoints/draft.pt, or gpt2 with --init_from")
    ap.add_argument("--ngram_n", type=int, default=3, help="with --draft ngram: how many last tokens to match")
    ap.add_argument("--init_from", default=None, choices=GPT2_NAMES,
                    help="target = pretrained GPT-2 via transformers (cached or downloadable) instead of --target")
    ap.add_argument("--start", default="\n", help="the prompt: text, or FILE:path to read it from a file (default: %(default)r)")
    ap.add_argument("--num_samples", type=int, default=3, help="samples, each from the same prompt")
    ap.add_argument("--max_new_tokens", type=int, default=300, help="tokens generated per sample")
    ap.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    ap.add_argument("--top_k", type=int, default=None, help="keep the k most probable tokens; None: all")
    ap.add_argument("--top_p", type=float, default=None, help="keep the most probable tokens up to this mass; None: all")
    ap.add_argument("--k", type=parse_k, default="auto",
                    help="draft tokens per round: an int, or auto (chosen before each round from measured acceptance "
                         "and costs, choose_k.py; the tokens then depend on timings, so --seed reproduces a run only "
                         "with an int --k)")
    ap.add_argument("--decoder", choices=DECODERS, default="fast",
                    help="how both samplers run the models: fast (fast.py, same logits, less Python per step), eager "
                         "(model.py), or fast-bf16 (a bfloat16 target: cheaper wide forwards on CPUs with bf16 units)")
    ap.add_argument("--verify", default="tokenwise", choices=sorted(VERIFIERS),
                    help="how the drafts are verified (variants.py); lenient and typical are LOSSY")
    add_verify_arguments(ap)
    ap.add_argument("--batch", type=int, default=None,
                    help="generate --batch samples together, as one batch (batched.py; model.py's per-row cache, so "
                         "--decoder is not used; token-wise verification only)")
    ap.add_argument("--seed", type=int, default=1337, help="seeds the sampling (reproducible with an int --k)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    args = ap.parse_args(argv)
    check_verify_arguments(ap, args, [args.verify])
    try:  # the verifier's parameters are fine: what is left to refuse is --k (e.g. multidraft takes an int only)
        round_for(**verify_params(args, args.verify), k=args.k)
    except ValueError as e:
        ap.error(f"--verify {args.verify} needs an int --k, e.g. --k 4: {e}")
    if args.batch is not None and (args.batch < 1 or args.verify != "tokenwise"):
        ap.error("--batch takes an int >= 1 and token-wise verification (batched.py runs no other verifier)")
    if args.num_samples < 1 or args.max_new_tokens < 0:
        ap.error("--num_samples must be >= 1 and --max_new_tokens >= 0")
    if args.temperature < 0:
        ap.error("--temperature must be >= 0 (0 is greedy)")
    if args.top_k is not None and args.top_k < 1:
        ap.error("--top_k must be >= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        ap.error("--top_p must be in (0, 1]")
    if args.ngram_n < 1:
        ap.error("--ngram_n must be >= 1 (how many last tokens the n-gram draft matches)")
    args.target = args.target or SHIPPED["target"]
    if args.draft is None:
        args.draft = "gpt2" if args.init_from else SHIPPED["draft"]
    return args


def add_verify_arguments(ap):
    """The verifiers' parameters (variants.VERIFIERS), for sample.py and bench.py."""
    ap.add_argument("--n_drafts", type=int, default=2, help="with --verify multidraft: candidates at the root")
    ap.add_argument("--replacement", action="store_true", help="with --verify multidraft: i.i.d. candidates")
    ap.add_argument("--lenience", type=float, default=0.5, help="with --verify lenient (LOSSY): l in (0, 1], 1 exact")
    ap.add_argument("--epsilon", type=float, default=0.09, help="with --verify typical (LOSSY): hard threshold")
    ap.add_argument("--delta", type=float, default=0.3, help="with --verify typical (LOSSY): entropy-scaled threshold")


def verify_params(args, verify):  # -> the keyword arguments of speculative_generate for this verifier
    return dict(verify=verify, **{name: getattr(args, name) for name in VERIFIERS[verify][1]})


def check_verify_arguments(ap, args, verifiers):
    for verify in verifiers:
        try:
            round_function(**verify_params(args, verify))
        except ValueError as e:
            ap.error(str(e))


def parse_k(text):
    """--k: 'auto' or an int >= 1 (argparse turns the ValueError into a usage error)."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1 or 'auto', got {text!r}")
    return int(text)


def read_prompt(start):
    if not start.startswith("FILE:"):
        return start
    path = start[len("FILE:"):]
    if not os.path.isfile(path):
        raise SystemExit(f"--start FILE:{path}: no such file")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def load(path, device, role):
    if path in GPT2_NAMES:
        from hf import load_gpt2
        return load_gpt2(path, device)  # our GPT with GPT-2's weights, tokenizer = tiktoken gpt2
    try:
        model, meta = load_checkpoint(path, device)
    except FileNotFoundError as e:
        raise SystemExit(f"{role}: {e}. The shipped pair lives in checkpoints/ (git clone brings it); "
                         f"{TRAIN_THEN_SAMPLE}") from e
    if "tokenizer" not in meta:
        raise SystemExit(f"{path} stores no tokenizer description; retrain it with train_draft.py")
    return model, meta


def main(argv=None):
    args = get_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    target, tmeta = load(args.init_from or args.target, args.device, "target")
    tok = Tokenizer(tmeta["tokenizer"])
    draft = None
    if args.draft == "ngram":  # prompt lookup: no model, the target's vocabulary and tokenizer
        draft = NGramDraft(target.config.vocab_size, n=args.ngram_n)
    elif args.draft != "none":
        draft, dmeta = load(args.draft, args.device, "draft")
        if dmeta["tokenizer"] != tmeta["tokenizer"]:
            raise SystemExit(f"{args.draft} and {args.target} use different tokenizers; a draft must share its "
                             "target's tokenizer (train both with the same --corpus and --tokenizer)")
    try:
        prompt = tok.encode(read_prompt(args.start))
    except ValueError as e:
        raise SystemExit(f"--start: {e}") from e
    if not prompt:
        raise SystemExit("--start is empty: give at least one character, e.g. --start $'\\n'")
    print(f"target {shown(args.init_from or args.target)} ({target.num_params() / 1e6:.2f}M), draft "
          + ("none: plain sampling" if draft is None else f"{shown(args.draft)} ({draft.num_params() / 1e6:.2f}M)"))
    if args.batch:
        return sample_batch(args, target, draft, tok, prompt)
    target, draft = with_decoder(args.decoder, target, draft)
    idx = torch.tensor([prompt], dtype=torch.long, device=args.device)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=gen)

    k = AutoK() if args.k == "auto" else args.k  # one AutoK for all samples: what it measured carries over
    totals = dict(tokens=0, seconds=0.0, target_calls=0, drafted=0, accepted=0)
    ks = []  # K of every round
    for i in range(args.num_samples):
        new, stats, tic = [], Stats(), time.perf_counter()

        def stream(ids):  # print text as it is produced (decode the whole tail: BPE pieces can merge)
            before = tok.decode(new)
            new.extend(ids)
            print(tok.decode(new)[len(before):], end="", flush=True)

        print(f"---------- sample {i + 1}/{args.num_samples}\n{tok.decode(prompt)}", end="", flush=True)
        try:
            if draft is None:
                _, stats = autoregressive_generate(target, idx, args.max_new_tokens, stream=stream, **sampling)
            else:  # stats fills round by round, so Ctrl-C keeps the rounds so far
                speculative_generate(target, draft, idx, args.max_new_tokens, k=k, stream=stream, stats=stats,
                                     **sampling, **verify_params(args, args.verify))
        except SamplingError as e:  # the text so far is already printed; say what went wrong, no traceback
            raise SystemExit(f"\nstopped after {len(e.tokens) - len(prompt)} new tokens: {e}") from e
        except KeyboardInterrupt:  # Ctrl-C: the text so far is printed; count what this sample did, then stop
            stats.new_tokens, stats.total_time = len(new), time.perf_counter() - tic
            print(f"\n(interrupted: Ctrl-C after {len(new)} new tokens of sample {i + 1}; the statistics so far)")
            add_up(totals, ks, stats, calls=len(stats.rounds) if draft is not None else len(new))  # a call a round
            summary(args, draft, totals, ks)
            raise SystemExit(130)
        print()
        add_up(totals, ks, stats, stats.target_calls)
    summary(args, draft, totals, ks)


def add_up(totals, ks, stats, calls):
    totals["tokens"] += stats.new_tokens
    totals["seconds"] += stats.total_time
    totals["target_calls"] += calls
    totals["drafted"] += stats.drafted
    totals["accepted"] += stats.accepted
    ks += [K for _, K, _ in stats.rounds]


def summary(args, draft, totals, ks, decoder=None):  # the statistics line; its terms are the README's glossary
    print("----------")
    mode = "plain sampling" if draft is None else f"speculative sampling, K={args.k}"
    if args.batch:  # batched.py: tokens of all rows, forwards of all rows at once
        mode += f", batch of {args.batch}"
    if draft is not None and args.k == "auto" and ks:
        mode += f" (K per round: median {sorted(ks)[len(ks) // 2]}, {min(ks)}..{max(ks)})"
    if draft is not None and args.verify != "tokenwise":
        mode += f", verify {args.verify}" + ("" if VERIFIERS[args.verify][3] else " (LOSSY: not the target's distribution)")
    line = (f"{mode}: {totals['tokens']} tokens in {totals['seconds']:.2f} s = "
            f"{totals['tokens'] / max(totals['seconds'], 1e-9):.0f} tokens/s; "
            f"{totals['tokens'] / max(totals['target_calls'], 1):.2f} tokens per target call")
    if draft is not None and totals["drafted"]:
        line += f"; drafts kept {totals['accepted'] / totals['drafted']:.3f}"
    print(line + f" ({args.device}, {decoder or args.decoder}, temperature {args.temperature}, top_k {args.top_k}, "
                 f"top_p {args.top_p})")


def sample_batch(args, target, draft, tok, prompt):
    """--batch N: N samples of the same prompt generated together (batched.py), printed when all are done."""
    from batched import autoregressive_generate_batch, speculative_generate_batch
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=gen)
    prompts = [prompt] * args.batch
    try:
        if draft is None:
            outs, stats = autoregressive_generate_batch(target, prompts, args.max_new_tokens, **sampling)
        else:
            outs, stats = speculative_generate_batch(target, draft, prompts, args.max_new_tokens, k=args.k, **sampling)
    except SamplingError as e:
        for i, row in enumerate(e.tokens):
            print(f"---------- sample {i + 1}/{args.batch}\n{tok.decode(row)}")
        raise SystemExit(f"\nstopped: {e}") from e
    for i, out in enumerate(outs):
        print(f"---------- sample {i + 1}/{args.batch}\n{tok.decode(out.tolist())}")
    totals = dict(tokens=stats.new_tokens, seconds=stats.total_time, target_calls=stats.target_calls,
                  drafted=stats.drafted, accepted=stats.accepted)
    summary(args, draft, totals, [K for *_, K, _ in stats.rounds], decoder="eager (model.py)")


if __name__ == "__main__":
    main(sys.argv[1:])
