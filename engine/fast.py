"""
A faster decoding path for model.GPT, kept beside the readable one and tested against it (tests/test_fast.py).

FastGPT(model) computes exactly what model(idx, use_cache=True) computes, for speculative_generate and
autoregressive_generate alike, with less Python per step. A one-token step of a small model is dispatch-bound:
its time goes to the fixed cost of each operation and each nn.Module call, not to arithmetic (bench.py
--profile). So FastGPT
  - keeps every layer's weights in a plain tuple and calls torch.nn.functional directly (no module calls, no
    attribute lookups through nn.Module.__getattr__),
  - keeps the KV cache as two preallocated tensors per layer, written in place, and
  - builds the causal mask of a wide forward by one comparison with a precomputed position table.
Like model.GPT, it leaves each forward's final-block output in .features (and on the model it wraps, where a
draft that reads the target finds it). FastGPT(model, dtype=torch.bfloat16) also stores the weights in bfloat16 (opt-in): on CPUs with bf16 matrix
instructions (AVX512-BF16, AMX) the target's (K+1)-token forward gets cheaper, i.e. v falls, but the logits
change slightly, so it is another target: compare it with plain sampling from the same FastGPT. The Llama of a
GGUF file has a decoder of its own, in five weight formats: engine/llama.py's FastLlama (with_decoder picks it).

What it leaves out: torch.compile of the step (tried by hand and dropped: slow to compile for every input shape,
and no faster than this file on this CPU), batches (B > 1: batched.py runs model.GPT's per-row cache), and
training (use model.GPT).
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

from model import GPT, Features, compact_moves


class FastGPT(nn.Module):
    """model.GPT's cached decoding, with the interface speculative.py uses: config, reset_cache, crop, cache_len,
    forward(idx, use_cache=True) -> (logits (1, T, V), None). Without use_cache it runs the wrapped model."""

    def __init__(self, model, dtype=torch.float32):
        super().__init__()
        self.model, self.config, self.dtype = model, model.config, dtype
        if not model.config.bias:
            raise ValueError("FastGPT needs a model with biases (GPTConfig(bias=True)); use the model itself otherwise")
        w = lambda t: t.detach().to(dtype)
        self.layers = [tuple(w(t) for t in (b.ln_1.weight, b.ln_1.bias, b.attn.c_attn.weight, b.attn.c_attn.bias,
                                            b.attn.c_proj.weight, b.attn.c_proj.bias, b.ln_2.weight, b.ln_2.bias,
                                            b.mlp.c_fc.weight, b.mlp.c_fc.bias, b.mlp.c_proj.weight, b.mlp.c_proj.bias))
                       for b in model.transformer.h]
        tr = model.transformer
        self.wte, self.wpe, self.ln_f = w(tr.wte.weight), w(tr.wpe.weight), (w(tr.ln_f.weight), w(tr.ln_f.bias))
        self.positions = torch.arange(self.config.block_size, device=self.wte.device)  # (W,)
        self.features = None  # Features of the last cached forward (set on the wrapped model too)
        self.reset_cache()

    def reset_cache(self, batch_size=1):
        assert batch_size == 1, "FastGPT decodes one sequence at a time (B=1)"
        nh, W, C = self.config.n_head, self.config.block_size, self.config.n_embd
        self.k = [torch.zeros(1, nh, W, C // nh, dtype=self.dtype, device=self.wte.device) for _ in self.layers]
        self.v = [torch.zeros_like(k) for k in self.k]  # (1, nh, W, hs) per layer
        self.length = 0

    @property
    def cache_len(self):
        return self.length

    def crop(self, n):
        """Forget every cached position from n on. O(1): later writes overwrite them."""
        assert 0 <= n <= self.length, f"crop({n}) needs 0 <= n <= cache_len ({self.length})"
        self.length = n

    def compact(self, n, slots):
        """Keep the first n cached tokens followed by the ones at `slots` (increasing, >= n): model.GPT.compact."""
        if compact_moves(n, slots, self.length):
            for kc, vc in zip(self.k, self.v):
                kc[:, :, n:n + len(slots)] = kc[:, :, slots]  # advanced indexing copies first: overlap is safe
                vc[:, :, n:n + len(slots)] = vc[:, :, slots]
        self.length = n + len(slots)
        if self.features is not None:  # the last forward's features follow (model.Features.compacted)
            self.features = self.model.features = self.features.compacted(n, slots)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (1, T) -> (logits (1, T, V), None)
        """pos (T,), mask (T, cache_len + T): a tree of tokens, as in model.GPT.forward."""
        if not use_cache:
            return self.model(idx, targets)
        B, T = idx.size()
        C, nh, start, end = self.config.n_embd, self.config.n_head, self.length, self.length + T
        if pos is None:
            assert B == 1 and end <= self.config.block_size, (
                f"{start} cached + {T} new tokens > block_size {self.config.block_size}: crop() or reset_cache() first")
            pos = self.positions[start:end]  # (T,) positions of the new tokens
            mask = self.positions[None, :end] <= pos[:, None] if T > 1 else None  # (T, end): sees keys <= start+i
            pos_emb = self.wpe[start:end]  # (T, C): a view, no copy
        else:
            assert B == 1 and mask is not None and mask.shape == (T, end) and int(pos.max()) < self.config.block_size, (
                f"a tree needs pos (T,) below block_size {self.config.block_size} and mask (T, cache_len + T)")
            pos_emb = self.wpe[pos]  # (T, C)
            if end > self.k[0].size(2):  # subtle: a tree holds more tokens than positions: more room
                self.k = [torch.cat([kc, torch.zeros_like(kc[:, :, :end])], 2) for kc in self.k]
                self.v = [torch.cat([vc, torch.zeros_like(vc[:, :, :end])], 2) for vc in self.v]
        x = self.wte[idx] + pos_emb  # (1, T, C)
        keep, kept = self.model.keep_layers, []
        for i, ((ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b), kc, vc) in (
                enumerate(zip(self.layers, self.k, self.v))):
            q, k, v = F.linear(F.layer_norm(x, (C,), ln1_w, ln1_b), attn_w, attn_b).view(
                1, T, 3, nh, C // nh).permute(2, 0, 3, 1, 4).unbind(0)  # three (1, nh, T, hs)
            kc[:, :, start:end] = k  # into the cache, in place
            vc[:, :, start:end] = v
            y = F.scaled_dot_product_attention(q, kc[:, :, :end], vc[:, :, :end], attn_mask=mask)  # (1, nh, T, hs)
            x = x + F.linear(y.transpose(1, 2).reshape(1, T, C), proj_w, proj_b)
            x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,), ln2_w, ln2_b), fc_w, fc_b), approximate="tanh"),
                             out_w, out_b)
            if i in keep:
                kept.append(x)
        self.length = end
        self.features = self.model.features = Features(start, idx, x, tuple(kept))  # on the wrapped model too
        return F.linear(F.layer_norm(x, (C,), *self.ln_f), self.wte).float(), None  # tied output embedding


DECODERS = ["eager", "fast", "fast-bf16", "fast-int8", "fast-int4", "fast-q4_1"]  # how sample.py and bench.py run them
FORMAT_OF = {"fast": "float32", "fast-bf16": "bfloat16", "fast-int8": "int8", "fast-int4": "int4",
             "fast-q4_1": "q4_1"}  # engine/llama.py's formats
QUANTIZED = ("fast-int8", "fast-int4", "fast-q4_1")  # the decoders of a GGUF target's quantized weights, on a CPU


def with_decoder(name, target, draft=None):
    """-> (target, draft) as both samplers will run them. eager: model.py (or pretrained/llama.py) itself; for a
    model.GPT, fast: FastGPT, fast-bf16: FastGPT with a bfloat16 target; for a Llama (a GGUF target), each fast
    decoder is engine/llama.py's FastLlama in a format: fast float32, fast-bf16 bfloat16, fast-int8 int8 weights,
    fast-int4 the file's Q4_1 blocks through torch's 4-bit kernel, fast-q4_1 the same blocks and the file's Q8_0 head
    as stored, through engine/blocks.cpp; beside those three, a head runs its LM-head rows (a reduced vocabulary's) and its
    own blocks in int8 (drafts/heads.py rows_in). Plain sampling runs the same target, so a comparison stays honest."""
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}: choose from {DECODERS}")
    if hasattr(draft, "rows_in"):  # a head (drafts/heads.py): int8 beside a quantized target, as engines run drafts
        draft.rows_in("int8" if name in QUANTIZED else "float32", blocks=True)
    if name == "eager":
        return target, draft
    wrap = lambda m, dtype=torch.float32: FastGPT(m, dtype) if isinstance(m, GPT) and not getattr(
        m, "quantized", False) else m  # not None, NGramDraft, nor an int8 copy (drafts/self_drafts.py): as they are
    why = refusal(name, target) if target is not None else None
    if why:
        raise ValueError(why)
    if target is not None and not isinstance(target, GPT):  # a Llama
        from engine.llama import FastLlama
        return FastLlama(target, FORMAT_OF[name]), wrap(draft)
    return wrap(target, torch.bfloat16 if name == "fast-bf16" else torch.float32), wrap(draft)


def refusal(name, target):  # -> why decoder `name` cannot run `target`, in one line, or None
    """fast-int8 and fast-int4 run a Llama (a GGUF target) through torch's weight-only CPU kernels, fast-q4_1 through
    engine/blocks.cpp (built on first use, AVX2): with_decoder raises it, sample.py and bench.py say it before anything
    else loads."""
    if name not in QUANTIZED:
        return None
    if isinstance(target, GPT):
        return (f"--decoder {name} runs a Llama read from a GGUF file (--target smollm2) on a CPU (torch's weight-only "
                "kernels); for this model.GPT use fast or fast-bf16")
    device = next(target.parameters()).device
    if device.type != "cpu":
        return (f"--decoder {name} runs a Llama read from a GGUF file on a CPU (torch's weight-only kernels); on "
                f"{device} use fast or fast-bf16")
    if name == "fast-q4_1":
        from engine.blocks import unavailable
        return unavailable() and f"--decoder fast-q4_1: {unavailable()}"
    return None


def default_decoder(target, device="cpu", drafting=True, say=None):
    """-> the decoder a run takes when --decoder is not given (or is auto). A model.GPT: fast. A Llama on a GPU:
    fast-bf16. A Llama read from a Q4_1 GGUF file, on a CPU: measured (auto_format), fast-q4_1 or fast-int4, the
    file's own blocks either way. Any other Llama: fast (float32), whose logits are the readable model's."""
    device = str(device)
    if isinstance(target, GPT) or not device.startswith(("cpu", "cuda")):
        return "fast"
    if device.startswith("cuda"):
        return "fast-bf16"
    from engine.llama import q4_1_file
    return auto_format(target, drafting, say) if q4_1_file(target) else "fast"


# ---- --decoder auto: the format of a Q4_1 file chosen by measurement, on this machine -------------------------------
# Theorem 3.8 with v scores a format for a speculative run: a round of AUTO_K drafts, each kept with probability
# AUTO_ALPHA (the chat suite's suffix rows at T = 0 keep about 0.8 on every CPU measured), free drafts (c = 0):
# tokens/s = (1 - alpha^(K+1)) / ((1 - alpha) v(K+1) step). A plain run (no draft) is scored by 1 / step.
AUTO_ALPHA, AUTO_K = 0.8, 4


def tokens_per_second(step, v, drafting):  # (one-token step in s, v(K+1)) -> tokens/s by Theorem 3.8 with v
    if not drafting:
        return 1 / step
    a = AUTO_ALPHA
    return (1 - a ** (AUTO_K + 1)) / ((1 - a) * v * step)


def auto_format(target, drafting=True, say=None):
    """-> "fast-q4_1" or "fast-int4" for a Llama of a Q4_1 file: the one with the most tokens/s by tokens_per_second,
    each format's step and v(K+1) timed on this machine (format_times: a few seconds, once; then read from a cache
    keyed by CPU, torch, threads, file and the engine's sources). say(line): what it chose and why."""
    from engine.blocks import unavailable
    say = say or (lambda line: None)
    if unavailable():
        say(f"--decoder auto: fast-int4 (fast-q4_1 cannot run here: {unavailable()})")
        return "fast-int4"
    times, source = format_times(target, ("fast-int4", "fast-q4_1"))
    score = {d: tokens_per_second(*times[d], drafting) for d in times}
    best = max(score, key=score.get)
    other = min(score, key=score.get)
    what = (f"with a draft keeping {AUTO_ALPHA:.0%} of {AUTO_K} (Theorem 3.8 with v)" if drafting else "plain")
    say(f"--decoder auto: {best}, {score[best]:.0f} tok/s {what} against {other}'s {score[other]:.0f} "
        f"(one-token step {1e3 * times[best][0]:.1f} and {1e3 * times[other][0]:.1f} ms, v({AUTO_K + 1}) "
        f"{times[best][1]:.2f} and {times[other][1]:.2f}; {source})")
    return best


def format_cache():  # -> the file --decoder auto keeps its timings in (SPECULATIVE_CACHE, else the user's cache folder)
    import os
    folder = os.environ.get("SPECULATIVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "speculative-sampling")
    return os.path.join(folder, "formats.json")


def engine_version():  # -> a short hash of the decoders' sources: timings of an older kernel are not reused
    import hashlib
    import os
    folder = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in ("blocks.cpp", "blocks.py", "llama.py"):
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


@torch.no_grad()
def format_times(target, decoders, repeats=7):
    """-> ({decoder: (one-token step in s, v(AUTO_K + 1))}, where they came from): read from format_cache() under
    this machine's key, or timed now (each format after a 32-token prompt, interleaved, median of `repeats`) and
    written there. A cache that cannot be read or written is timed again, never an error."""
    import json
    import os
    import statistics
    import time
    from engine.cpu import cpu_name
    from engine.llama import FastLlama
    path = getattr(target, "gguf_path", "")
    key = (f"{cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads; {os.path.basename(path)}, "
           f"{os.path.getsize(path) if path and os.path.exists(path) else 0} bytes; engine {engine_version()}")
    cache_file = format_cache()
    try:
        with open(cache_file) as f:
            cache = json.load(f)
        if all(d in cache.get(key, {}) for d in decoders):
            return {d: tuple(cache[key][d]) for d in decoders}, f"timed earlier, read from {cache_file}"
    except (OSError, ValueError):
        cache = {}
    models = {d: FastLlama(target, FORMAT_OF[d]) for d in decoders}
    prompt = (torch.arange(32) * 7 % target.config.vocab_size)[None]  # which tokens does not matter for the time
    one, wide = prompt[:, -1:], prompt[:, -1:].repeat(1, AUTO_K + 1)
    times = {d: ([], []) for d in decoders}
    for model in models.values():
        model.reset_cache()
        model.fill(prompt)
        for ids in (one, wide):  # warm up both shapes
            model(ids, use_cache=True)
            model.crop(prompt.size(1))
    for _ in range(repeats):
        for d, model in models.items():
            for ids, seconds in zip((one, wide), times[d]):
                tic = time.perf_counter()
                model(ids, use_cache=True)
                seconds.append(time.perf_counter() - tic)
                model.crop(prompt.size(1))
    out = {d: (statistics.median(s1), statistics.median(s5) / statistics.median(s1)) for d, (s1, s5) in times.items()}
    try:
        os.makedirs(os.path.dirname(cache_file), exist_ok=True)
        with open(cache_file, "w") as f:
            json.dump(cache | {key: cache.get(key, {}) | {d: list(t) for d, t in out.items()}}, f, indent=1)
    except OSError:
        pass
    return out, f"timed now, median of {repeats} interleaved"
