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
GGUF file has a decoder of its own, in four weight formats: engine/llama.py's FastLlama (with_decoder picks it).

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


def default_decoder(target, device="cpu"):
    """-> the decoder a run takes when --decoder is not given: the fastest the benchmarks back (BENCHMARKS.md, "The
    Llama's formats"). A model.GPT: fast. A Llama read from a Q4_1 GGUF file, on a CPU: fast-int4, the file's own
    blocks: a step reads under a quarter of float32's bytes, and it ran faster than float32 on every CPU measured,
    with bfloat16 units or AVX2 alone. A Llama on a GPU: fast-bf16. Any other Llama: fast (float32), whose
    logits are the readable model's."""
    device = str(device)
    if isinstance(target, GPT) or not device.startswith(("cpu", "cuda")):
        return "fast"
    if device.startswith("cuda"):
        return "fast-bf16"
    from engine.llama import q4_1_file
    return "fast-int4" if q4_1_file(target) else "fast"
