"""
What every mode of bench.py shares: the sampling settings, the prompts (held-out text for the trained pair, chat
requests for a GGUF model), the machine's name and commit printed with every table, the drafts built from --draft,
and the small measurements (steady forward costs, draft time per round) that the tables turn into c and v.
"""

import os
import platform
import statistics
import sys
import time

import torch

import data
from engine.cpu import cpu_name  # noqa: F401  (the benchmarks print it with every table)
from sample import draft_from_path, make_draft
from speculative import DRAFTS, ROUNDS, round_for


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


def bench_prompts(args, tok, n):  # -> n prompts (1, T): held-out text, or a chat model's requests (or --prompt's)
    if tok.kind != "gguf":
        if args.prompt is not None:
            raise SystemExit("--prompt is for a chat model's target (--target smollm2); this target times held-out text")
        return held_out_prompts(tok, n, args.prompt_len, args.corpus)
    return chat_prompts(tok, n, [args.prompt] if args.prompt is not None else CHAT_PROMPTS)


def chat_prompts(tok, n, requests=CHAT_PROMPTS):
    """n of the requests (cycled past the last), each a user's turn in the chat template, ending where the model's
    turn begins: 'Explain in a few sentences why the sky is blue.' -> <|im_start|>system ... <|im_start|>assistant"""
    return chat_ids(tok, [[{"role": "user", "content": requests[i % len(requests)]}] for i in range(n)])


def chat_ids(tok, conversations):  # [[{"role", "content"}, ...], ...] -> [(1, T)]: each in the chat template
    try:
        return [torch.tensor([tok.gguf.chat(turns)], dtype=torch.long) for turns in conversations]
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


def commit():  # -> the checkout's short commit hash, "+ changes" if the tree differs from it; "unknown" outside git
    import subprocess
    try:
        run = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, timeout=10,
                                        cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        head = run("rev-parse", "--short", "HEAD")
        return (head + (" + changes" if run("status", "--porcelain", "--untracked-files=no") else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def runs_as(pairs):  # -> what a GGUF target's rows ran on, in the words every line prints; "" for a model.GPT
    """{decoder: (target as run, draft)} -> 'SmolLM2-135M-Instruct dequantized from Q4_1 to float32, '; with a
    fast-bf16 column beside an eager one (engine/llama.py's bfloat16 format), each decoder's: '... to float32 (eager
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


def steady(times):
    """Mean seconds per forward after the first, which reads the whole prompt into the cache: c and v are about
    decoding. (A run longer than the context window also re-reads the window when it slides; those stay in.)"""
    return statistics.mean(times[1:]) if len(times) > 1 else float("nan")


def wide_forwards(stats):
    """-> seconds of the target forwards that scored drafts (a round of K >= 1: K + 1 tokens), after the first round
    (which reads the prompt): v is their cost in target steps. A round of K = 0 (drafts/suffix.py without a match,
    k="auto" choosing none) is one plain step, left out. Where the forwards do not pair with the rounds one to one
    (a window's slide re-reads it), every forward after the first."""
    if len(stats.target_times) != len(stats.rounds):
        return stats.target_times[1:]
    return [t for t, (_, K, _) in zip(stats.target_times[1:], stats.rounds[1:]) if K]


class Memory:
    """The process's memory as a user of a real model asks about it: resident memory on a CPU (Linux: /proc/self
    status's VmRSS, and VmHWM, its peak, which writing 5 to /proc/self/clear_refs resets; proc(5)), allocated memory
    on a GPU (torch.cuda's peak). start() before a step; grown() and peak() after it, in MB beyond the start. Where
    neither can be read, every number is nan."""

    def __init__(self, device="cpu"):
        self.cuda = str(device).startswith("cuda")
        self.how = "torch.cuda.max_memory_allocated" if self.cuda else "Linux VmRSS and its peak VmHWM"
        self.base = self.now()[0]
        self.at = self.base

    def now(self):  # -> (MB held now, MB at the peak since the last reset)
        if self.cuda:
            return torch.cuda.memory_allocated() / 2 ** 20, torch.cuda.max_memory_allocated() / 2 ** 20
        try:
            status = open("/proc/self/status").read()
            kb = lambda key: int(next(line.split()[1] for line in status.splitlines() if line.startswith(key + ":")))
            return kb("VmRSS") / 1024, kb("VmHWM") / 1024
        except (OSError, StopIteration, ValueError):
            return float("nan"), float("nan")

    def start(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            try:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # the peak (VmHWM) counts from now
            except OSError:
                pass
        self.at = self.now()[0]

    def grown(self):  # -> MB held now beyond the start (a draft's weights, its tables)
        return self.now()[0] - self.at

    def peak(self):  # -> MB at the peak since the start, beyond the start (caches and activations of a call)
        return self.now()[1] - self.at


def draft_time_per_round(stats):
    """Seconds of the draft's calls per round that drafted, after the first round (which reads the prompt): K calls
    for a token-by-token draft, one forward and K - 1 answers from it for drafts/parallel.py. Window slides stay in."""
    drafting = [K for _, K, _ in stats.rounds if K]
    if len(drafting) < 2:
        return float("nan")
    return sum(stats.draft_times[drafting[0]:]) / (len(drafting) - 1)


def lossy(verify):  # -> " (LOSSY)" after a verifier's name in every table where its output is not the target's
    return "" if ROUNDS[verify].lossless else " (LOSSY)"


def cell(x, spec, unit=""):  # a table cell: "-" where nothing was measured (nan: no draft tested), else x and unit
    return "-" if x != x else format(x, spec) + unit


def build_draft(args, name, target, tmeta):
    """-> the draft of one --draft entry (main, suite_report, tree_report): a registered draft by name, or a path:
    a head's checkpoint, a model, or a model on another tokenizer (drafts/cross_vocab.py)."""
    return make_draft(args, name, target) if name in DRAFTS else draft_from_path(
        name, target, tmeta, args.device, args.decoder[0])


class Progress:
    """A long run says where it is, on stderr (the tables stay alone on stdout): 'sweep: t1.0, repeat 2 done (7/15,
    38 s)'. todo: the steps in all; step(label) after each."""

    def __init__(self, what, todo):
        self.what, self.todo, self.done, self.start = what, todo, 0, time.perf_counter()

    def step(self, label):
        self.done += 1
        print(f"{self.what}: {label} done ({self.done}/{self.todo}, {time.perf_counter() - self.start:.0f} s)",
              file=sys.stderr, flush=True)
