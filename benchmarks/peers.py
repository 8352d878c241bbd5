"""
bench.py --target smollm2 --suite --hf / --peer llamacpp: another engine beside ours on the suite's requests, the same
GGUF file, prompt ids and sampling, interleaved prompt by prompt (suite_against_peer). A peer is an object with

    name       the columns' prefix ("HF", "llama.cpp")
    lookups    its prompt-lookup columns' names ("HF lookup@4", ...)
    caption    what it runs, for the table's first line
    record()   -> a dict for the run's JSON (versions, build)
    generate(col, prompt ids, n, eos ids, sampling, seed) -> (new token ids, seconds)

benchmarks/hf.py makes transformers one (in this process); LlamaCppPeer below talks to llama.cpp's Python binding
in a venv of its own (scripts/setup_llamacpp.sh), where benchmarks/llamacpp_peer.py serves it a JSON line at a time:
the project never imports llama_cpp.

Columns: ours plain, the peer's plain, our ngram and suffix drafts (k="auto"), the peer's lookups. Per category and
setting: tokens/s of each (total tokens / total seconds over the category's prompts, prompt reads included), and at
T = 0 three agreements: each output against its own side's plain greedy (ours: the exactness we prove; the peer's:
whether its verification computes the rows its plain steps do), and the peer's plain greedy against ours (the same
file through two engines' arithmetic).
"""

import json
import os
import statistics
import subprocess
import sys

import torch

import data
from benchmarks.common import SETTINGS, Progress, machine
from sample import shown
from speculative import autoregressive_generate, speculative_generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMACPP_VENV = os.path.join(ROOT, ".peers", "llamacpp")  # scripts/setup_llamacpp.sh's default


def suite_against_peer(args, target, tmeta, peer):
    """-> rows {category, setting, tps {column: tokens/s}, greedy_equal {column: bool} or None, same_as_ours: prompts
    whose peer plain greedy equals ours, prompts}; prints the table and writes --json's stem + peer.suffix."""
    from benchmarks.suite import chat_suite_prompts
    from engine.fast import with_decoder
    from sample import make_draft
    target = with_decoder(args.decoder[0], target)[0]  # ours as the suite ran it
    tok = data.Tokenizer(tmeta["tokenizer"])
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

    def run(col, prompt, seed, sampling):
        if col.startswith("ours"):
            return ours(col, prompt, seed, sampling)
        return peer.generate(col, prompt[0].tolist(), n, eos, sampling, seed)

    plain = f"{peer.name} plain"
    cols = ["ours plain", plain, "ours ngram@auto", "ours suffix@auto", *peer.lookups]
    first = next(iter(tasks.values()))[0][0]
    for col in cols:  # warm-up: kernels, allocator
        run(col, first[:, :32], 0, SETTINGS["t0"])
    rows, progress = [], Progress(f"--{peer.flag}", len(tasks) * len(args.settings))
    for cat, prompts in tasks.items():
        for st in args.settings:
            sampling = SETTINGS[st]
            tokens, seconds, equal = {c: 0 for c in cols}, {c: 0.0 for c in cols}, {c: True for c in cols}
            same = 0
            for i, (prompt, _) in enumerate(prompts):
                prompt = prompt.to(args.device)
                outs = {}
                for col in cols:
                    new, sec = run(col, prompt, 1000 + i, sampling)
                    outs[col] = new
                    tokens[col] += len(new)
                    seconds[col] += sec
                for col in cols:  # greedy: every output is its own side's plain greedy
                    equal[col] = equal[col] and outs[col] == outs["ours plain" if col.startswith("ours") else plain]
                same += outs[plain] == outs["ours plain"]
            greedy = sampling["temperature"] == 0
            rows.append(dict(category=cat, setting=st, tps={c: tokens[c] / seconds[c] for c in cols},
                             greedy_equal={c: equal[c] for c in cols} if greedy else None,
                             same_as_ours=same if greedy else None, prompts=len(prompts)))
            progress.step(f"{cat}, {st}")
    print(f"\n{peer.caption} against ours ({target.about}, {args.decoder[0]} decoder), the suite's requests, answers "
          f"of at most {n} tokens ending with their turn, one pass, interleaved prompt by prompt; device {args.device}; "
          f"{machine()}")
    print_table(rows, cols, peer.name, peer.lookups, args.settings)
    if args.json:
        path = os.path.splitext(args.json)[0] + peer.suffix + ".json"
        with open(path, "w") as fh:
            json.dump(dict(target=shown(args.target), decoder=args.decoder[0], about=target.about, machine=machine(),
                           **peer.record(), rows=rows), fh, indent=1)
    return rows


def print_table(rows, cols, name, lookups, settings):
    """The comparison as one markdown table (a row per category and setting, then the means): tokens/s of every
    column, ours over the peer's, and at T = 0 the agreements."""
    best = lambda t: max(t[c] for c in lookups)  # the peer's faster lookup in this row
    print("| category | setting | " + " | ".join(f"{c} tok/s" for c in cols)
          + f" | ours plain / {name} plain | ours ngram / best {name} lookup | ours suffix / best {name} lookup "
            f"| greedy equal | {name} plain = ours plain |")
    print("|---|---|" + "---|" * (len(cols) + 5))
    means = [dict(category="overall (mean)", setting=st, greedy_equal=None, same_as_ours=None, tps={
        c: statistics.mean(x["tps"][c] for x in rows if x["setting"] == st) for c in cols}) for st in settings]
    for r in rows + means:
        t = r["tps"]
        eq = "-" if r["greedy_equal"] is None else (
            "yes" if all(r["greedy_equal"].values()) else "NO: " + ", ".join(c for c, e in r["greedy_equal"].items() if not e))
        same = "-" if r["same_as_ours"] is None else f"{r['same_as_ours']} of {r['prompts']}"
        print(f"| {r['category']} | {r['setting']} | " + " | ".join(f"{t[c]:.1f}" for c in cols)
              + f" | {t['ours plain'] / t[f'{name} plain']:.2f}x | {t['ours ngram@auto'] / best(t):.2f}x | "
              f"{t['ours suffix@auto'] / best(t):.2f}x | {eq} | {same} |")


class LlamaCppPeer:
    """llama.cpp through its Python binding, in the venv scripts/setup_llamacpp.sh makes (or $LLAMACPP_PYTHON): one
    process for the run (benchmarks/llamacpp_peer.py), the file loaded once as plain and once per prompt-lookup width
    (llama-cpp-python's LlamaPromptLookupDecoding, num_pred_tokens = k), each request read whole (no prompt cache,
    as ours), the same threads. Its plain and its lookup drafts run the file's Q4_1 blocks with 8-bit activations
    (ggml's CPU kernels), so its greedy text need not equal ours."""
    name, flag, suffix = "llama.cpp", "peer llamacpp", "_llamacpp"

    def __init__(self, model_path, threads, ks=(4, 10), python=None):
        python = python or os.environ.get("LLAMACPP_PYTHON") or os.path.join(LLAMACPP_VENV, "bin", "python")
        if not os.path.exists(python):
            raise SystemExit(f"--peer llamacpp: no llama.cpp here ({os.path.relpath(python, ROOT)} is missing): "
                             "bash scripts/setup_llamacpp.sh builds it (about 13 minutes), or set LLAMACPP_PYTHON to "
                             "a Python that imports llama_cpp")
        server = os.path.join(ROOT, "benchmarks", "llamacpp_peer.py")
        self.proc = subprocess.Popen([python, server], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lookups = [f"llama.cpp lookup@{k}" for k in ks]
        self.info = self.call(dict(op="load", model=model_path, threads=threads, lookups=list(ks)))
        self.caption = (f"llama.cpp through llama-cpp-python {self.info['version']} ({self.info['system_info']}) on "
                        "the same file, its own Q4_1 kernels; lookup@k = LlamaPromptLookupDecoding(num_pred_tokens=k)")

    def call(self, message):  # -> the server's reply to one message; its error as one line
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise SystemExit(f"--peer llamacpp: its process ended (exit code {self.proc.wait()}); its error is above")
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"--peer llamacpp: {reply['error']}")
        return reply

    def generate(self, col, prompt, n, eos, sampling, seed):  # -> (new token ids, seconds)
        reply = self.call(dict(op="generate", col=col.split()[-1], tokens=prompt, n=n, eos=eos, seed=seed,
                               temperature=sampling["temperature"], top_p=sampling.get("top_p") or 1.0,
                               top_k=sampling.get("top_k") or 0))
        return reply["tokens"], reply["seconds"]

    def record(self):
        return dict(peer="llama.cpp", llama_cpp_python=self.info["version"], system_info=self.info["system_info"],
                    lookups=self.lookups, python=sys.version.split()[0])
