"""
A fast decoder for pretrained/llama.py's Llama, kept beside the readable model and tested against it
(tests/test_fast_llama.py): how an engine (gpt-fast, llama.cpp) runs a real model on a CPU.

    fast = FastLlama(model, "int4")      # the file's own Q4_1 blocks, bfloat16 activations
    logits, _ = fast(idx, use_cache=True)   # model.GPT's cached interface: every sampler and verifier runs on it

Why: a one-token step of SmolLM2-135M reads every weight once, so its time is the bytes of the weights over the
memory's read bandwidth (the roof), plus the fixed cost of each operation. The readable model pays for float32
weights (4 bytes each, 538 MB a step) and for an nn.Module call per layer and per norm. This file
  - keeps every layer's weights as plain tensors in one FORMAT (below) and calls torch's kernels directly,
  - keeps model.py's preallocated ChainCache, written in place (crop, compact and trees work as in the Llama),
  - rotates by a precomputed table in two multiplications (RoPE on adjacent pairs: x cos + swap(x) sin),
  - keeps the residual stream, RoPE, the KV cache and attention in float32 in every format; only the matrix
    products' inputs are cast to the format's activations (torch's CPU attention kernel in bfloat16 took 82-562 us
    a layer where float32's took 13-76, on an AMD EPYC with AVX512-BF16; BENCHMARKS.md).

The formats (FORMATS), each another target, named on every printed line (FastLlama.about):
  float32   the readable model's weights and arithmetic: logits within 1e-5 of it, greedy equal
  bfloat16  weights and the matrix products' inputs rounded to bfloat16 (8 bits of mantissa)
  int8      each weight row quantized to int8 with one scale (torch's _weight_int8pack_mm), bfloat16 activations
  int4      the GGUF file's own Q4_1 blocks (32 weights, w = d q + m) run by torch's 4-bit kernel, whose blocks are
            w = (q - 8) scale + zero: scale = d, zero = m + 8 d, both rounded to bfloat16 (the kernel's dtype);
            the Q8_0 LM head in bfloat16. A model not read from a Q4_1 file is quantized to Q4_1 here, as
            llama.cpp's llama-quantize does (gguf.quants), and its `about` says so.
  q4_1      the same Q4_1 blocks and the file's Q8_0 LM head exactly as stored, times float32 activations, by a
            kernel of our own (engine/blocks.cpp, built on first use, AVX2): every row of a wide forward is the
            one-token step's by construction, and a wider forward adds only each row's multiply-adds.
A model of any width runs in every format: the matrices are padded with zeros to the shapes torch's kernels take
(below, "the kernels' shape rules"; tests/test_kernel_shapes.py), which changes no product.
In bfloat16 and below, a row of a (K+1)-token forward need not equal the one-token step bit for bit: see
docs/exactness.md, "Low precision". Speculative sampling stays exact for the p its verification computes. In those
formats a prompt is read apart (fill, called by speculative.CachedModel in every sampler) through the float32
weights in one batched forward, as an engine's prefill: the weight-only kernels are made for one row.

What it leaves out: batches (engine/batched.py runs the readable model's per-row cache), torch.compile (measured
in BENCHMARKS.md, "The Llama's formats"), and training (use the Llama).
"""

import functools

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

from engine.blocks import attend_rows, blocks_mm, float16s, layer_rows, q4_1_parts, q8_0_parts, unavailable
from model import GPT, ChainCache, Features

FORMATS = ("float32", "bfloat16", "int8", "int4", "q4_1")
Q4_1_BLOCK = 32  # weights per Q4_1 block


def runnable_formats():  # -> the FORMATS this machine runs: q4_1 only where engine/blocks.cpp builds
    return tuple(f for f in FORMATS if f != "q4_1" or not unavailable())


# ---- the formats: prepare a weight once, multiply by it every step ----------------------------------------------

# ---- the kernels' shape rules -------------------------------------------------------------------------------
# torch's weight-only CPU kernels were written for the sizes of real LLMs (aten/src/ATen/native/cpu/int8mm_kernel.cpp,
# int4mm_kernel.cpp in torch 2.13), and only some of their rules are checked:
#   _weight_int8pack_mm           walks a row's K inputs 16 at a time on AVX-512 (8 on AVX2) with aligned vector
#                                 loads, and checks nothing: any other K reads past the row (wrong numbers for one
#                                 row) and, from the second row on, loads from an unaligned address (a segmentation
#                                 fault). So K is a multiple of 16, and the rows start on aligned addresses.
#   _weight_int4pack_mm_for_cpu   blocks of 32 weights along K, output rows N in tiles of 16: both checked (an error).
# Every matrix is therefore stored with K (and for int4 N) padded with zeros up to those multiples, and the
# activations get as many zero columns before the product: a zero adds nothing to a sum, so the product is the
# same; the padded outputs are cut. SmolLM2's sizes (576, 1536, 2 x 1536) need none of it.
INT8_K = 16  # _weight_int8pack_mm: the inner size's multiple (AVX-512's step; AVX2's, 8, divides it)
INT4_N = 16  # _weight_int4pack_mm_for_cpu: the output size's multiple (its inner size's is its group, Q4_1_BLOCK)


def padded(n, multiple):  # the least multiple of `multiple` that holds n: padded(24, 16) = 32, padded(32, 16) = 32
    return -(-n // multiple) * multiple


def fit(x, K):  # x (M, k) bfloat16 -> (M, K): zero columns up to the stored weights' inner size, rows aligned
    if x.size(1) != K:
        x = F.pad(x, (0, K - x.size(1)))
    x = x.contiguous()
    return x if x.data_ptr() % 64 == 0 else x.clone()  # subtle: the int8 kernel's aligned loads need it


def int8_rows(w):  # (N, K) float -> (int8 (N, padded(K, 16)), scales (N,) bfloat16): w ~ q * scale, one scale per row
    scale = w.abs().amax(1).clamp(min=1e-12) / 127.0  # symmetric: the largest weight of a row maps to +-127
    q = torch.round(w / scale[:, None]).to(torch.int8)
    return F.pad(q, (0, padded(w.size(1), INT8_K) - w.size(1))), scale.to(torch.bfloat16)  # zero columns: INT8_K


def q4_1_from_bytes(raw, N, K):  # GGUF's Q4_1 bytes (N, K/32 * 20) -> q (N, K) uint8, d (N, K/32), m (N, K/32) float32
    """A Q4_1 block is 20 bytes: d (float16), m (float16), then 16 bytes of 4-bit q; weight j of the block is the low
    nibble of byte j for j < 16, the high nibble of byte j - 16 after. w = d * q + m (ggml's dequantize_row_q4_1)."""
    blocks = np.ascontiguousarray(raw).reshape(N, K // Q4_1_BLOCK, 20)
    qs = blocks[..., 4:]  # (N, K/32, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(N, K)  # (N, K) in 0..15
    return torch.from_numpy(q.astype(np.uint8)), float16s(blocks, 0), float16s(blocks, 2)  # q, d, m (N, K/32)


def q4_1_quantized(w):  # (N, K) float32 -> its Q4_1 bytes (N, padded(K, 32) / 32 * 20), as llama-quantize computes them
    """A row whose K is not a multiple of 32 (no GGUF file holds one) is padded with zero weights first, to whole
    blocks: the int4 kernel's groups, and activations padded alike (matmul) multiply them by zero."""
    import gguf
    w = F.pad(w.detach().float(), (0, padded(w.size(1), Q4_1_BLOCK) - w.size(1)))
    return gguf.quants.quantize(w.contiguous().numpy(), gguf.GGMLQuantizationType.Q4_1)


def q4_1_dequantized(q, d, m):  # the float32 weights the blocks stand for: w = d * q + m
    N, K = q.shape
    return (q.view(N, K // Q4_1_BLOCK, Q4_1_BLOCK).float() * d[..., None] + m[..., None]).view(N, K)


def q4_1_rounded(w):  # (N, K) float -> (N, K) float32: the weights its Q4_1 blocks stand for (padding cut)
    N, K = w.shape
    return q4_1_dequantized(*q4_1_from_bytes(q4_1_quantized(w), N, padded(K, Q4_1_BLOCK)))[:, :K]


def int4_packed(q, d, m):  # Q4_1's (q, d, m) -> (packed weights, scales and zeros, N) for _weight_int4pack_mm_for_cpu
    """The kernel computes w = (q - 8) * scale + zero per block of 32: Q4_1's d * q + m with scale = d and
    zero = m + 8 d. N rows are padded to a multiple of 16 (INT4_N) with blocks of zeros (d = m = 0: w = 0), whose
    outputs matmul cuts; N is kept for that."""
    N, rows = q.size(0), padded(q.size(0), INT4_N) - q.size(0)
    q, d, m = (F.pad(t, (0, 0, 0, rows)) for t in (q, d, m))  # zero rows at the end
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 8)  # 8 inner k-tiles
    scales_zeros = torch.stack([d.T, (m + 8 * d).T], dim=-1).to(torch.bfloat16).contiguous()  # (K/32, N', 2)
    return packed, scales_zeros, N


def matmul(fmt, x, w):  # x (..., K) -> (..., N): x @ W.T with W as `fmt` stores it
    if fmt == "float32":
        return F.linear(x, w)
    if fmt == "q4_1":
        return blocks_matmul(x, w)
    if fmt == "bfloat16" or fmt == "head":  # (the LM head of int4, kept in bfloat16)
        return F.linear(x.to(torch.bfloat16), w)
    x2 = x.to(torch.bfloat16).reshape(-1, x.size(-1))  # the quantized kernels take (M, K)
    K = w[0].size(1) if fmt == "int8" else w[1].size(0) * Q4_1_BLOCK  # the stored (padded) inner size
    if K != x2.size(1) or x.dtype == torch.bfloat16:  # (float activations cast above are a fresh, aligned copy)
        x2 = fit(x2, K)  # subtle: checked here, not in fit, so that a model needing no padding pays no call
    if fmt == "int8":
        y = torch.ops.aten._weight_int8pack_mm(x2, *w)  # (M, N)
    else:  # int4
        packed, scales_zeros, N = w
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, packed, Q4_1_BLOCK, scales_zeros)  # (M, N')
        if y.size(1) != N:
            y = y[:, :N].contiguous()  # the padded rows' outputs cut
    return y.view(*x.shape[:-1], y.size(-1))


def blocks_matmul(x, parts):  # x (..., K) float -> (..., N) float32: engine/blocks.cpp's kernel, the q4_1 format
    x2 = x.float().reshape(-1, x.size(-1))
    K = parts[0].size(1) * (2 if parts[2].numel() else 1)  # the stored (padded) inner size: Q4_1 packs 2 a byte
    if K != x2.size(1):
        x2 = F.pad(x2, (0, K - x2.size(1)))
    y = blocks_mm(x2, parts)  # (M, N)
    return y.view(*x.shape[:-1], y.size(-1))


def weight_bytes(w):  # bytes a matrix product reads: the tensors it holds
    return sum(t.numel() * t.element_size() for t in (w if isinstance(w, tuple) else (w,)) if torch.is_tensor(t))


# ---- the decoder ------------------------------------------------------------------------------------------------

class FastLlama(nn.Module):
    """pretrained/llama.py's cached decoding, with the interface speculative.py uses: config, reset_cache, crop,
    compact, cache_len, features, forward(idx, use_cache=True, pos=None, mask=None) -> (logits (1, T, V) float32,
    None). Without use_cache it runs the same arithmetic over a cache of its own (the format's model, uncached)."""

    def __init__(self, model, fmt="float32"):
        super().__init__()
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: choose from {FORMATS}")
        if not (hasattr(model, "rope") and hasattr(model.transformer, "h")):
            raise ValueError(f"FastLlama runs pretrained/llama.py's Llama, not a {type(model).__name__} "
                             "(engine/fast.py's FastGPT runs model.GPT)")
        if fmt == "q4_1" and unavailable():
            raise ValueError(f"the q4_1 format: {unavailable()}")
        self.model, self.config, self.format = model, model.config, fmt
        c = model.config
        self.hs = c.n_embd // c.n_head
        # subtle: packing the int4 blocks takes seconds; a model keeps each format's weights it was given, so a
        # script that wraps it again (each sample, each benchmark column) pays once. A model whose weights change
        # after (training) must not be wrapped before: its formats would keep the old weights
        made = model.__dict__.setdefault("fast_weights", {})
        if fmt not in made:
            made[fmt] = prepared(model, fmt)
        self.layers, self.head, quantized = made[fmt]
        self.wte = model.transformer.wte.weight.detach()  # (V, C) float32: a row per token, read, not multiplied
        self.ln_f = model.transformer.ln_f.weight.detach()
        self.head_format = "head" if fmt == "int4" else fmt  # int4: the file's Q8_0 LM head, in bfloat16; q4_1: as stored
        self.cos, self.sin = rope_tables(model.rope)  # (W, hs) each
        self.cache = None
        self.features = None  # Features of the last cached forward (set on the wrapped model too)
        self.row_invariant = fmt != "float32"  # a chain's wide forward computes each row as the one-token step does
        # q4_1: a block in one call of engine/blocks.cpp (layer_rows); False runs the same block as torch operations
        # around the kernel's products and attention (the readable path the fused one is tested against)
        self.fused = True
        # a prompt is read in a forward of its own (speculative.CachedModel calls fill): the weight-only formats'
        # kernels are made for one row, so the prompt's rows go through the float32 weights, which for a Q4_1 file
        # are its blocks dequantized (the same numbers), in one batched forward
        self.prefills = fmt != "float32"
        if self.prefills and "float32" not in made:
            made["float32"] = prepared(model, "float32")  # the model's own tensors: no copy
        self.fill_layers = made["float32"][0] if self.prefills else None
        about = getattr(model, "about", type(model).__name__)
        self.about = about if fmt == "float32" else (
            f"{about}, then cast to bfloat16" if fmt == "bfloat16" else
            f"{about}, then quantized to int8 per row" if fmt == "int8" else
            f"{about.replace(' dequantized from Q4_1 to float32', '')} as its Q4_1 blocks (int4 kernel, bfloat16 "
            "scales and activations)" if fmt == "int4" and not quantized else
            f"{about}, then quantized to Q4_1 here (int4 kernel)" if fmt == "int4" else
            f"{about.replace(' dequantized from Q4_1 to float32', '')} as its Q4_1 blocks and Q8_0 head (our kernel, "
            "float32 activations)" if not quantized else f"{about}, then quantized to Q4_1 and Q8_0 here (our kernel)")
        self.name = getattr(model, "name", None)  # drafts trained for the model find their weights by it
        self.reset_cache()

    def num_params(self):  # the model's parameters, in whichever format they run (a draft's size, sample.py prints it)
        return self.model.num_params()

    def weight_bytes(self):  # -> bytes of weights one step reads: the roof's numerator
        per_layer = sum(weight_bytes(w) for layer in self.layers for w in layer)
        return per_layer + weight_bytes(self.head)

    # ---- the cache: model.py's ChainCache, float32 in every format; the rollback is model.GPT's -------------------

    def reset_cache(self, batch_size=1):
        assert batch_size == 1, "FastLlama decodes one sequence at a time (B=1): engine/batched.py runs batches"
        c = self.config
        self.cache = ChainCache(c.n_layer, 1, c.n_kv_head, c.block_size, self.hs, self.wte.device, torch.float32)

    cache_len, crop = GPT.cache_len, GPT.crop

    def compact(self, n, slots):
        self.cache.compact(n, slots)
        if self.features is not None:  # the last forward's features follow (model.Features.compacted)
            self.features = self.model.features = self.features.compacted(n, slots)

    # ---- one forward ------------------------------------------------------------------------------------------

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (B, T) -> (logits (B, T, V), None)
        if targets is not None:
            raise ValueError("FastLlama decodes; for a loss run the Llama itself (FastLlama.model)")
        c, (B, T) = self.config, idx.size()
        cache = self.cache if use_cache else ChainCache(c.n_layer, B, c.n_kv_head, T, self.hs, self.wte.device,
                                                        torch.float32)  # uncached: a cache of its own, as long as idx
        assert use_cache or (pos is None and mask is None), "a tree of tokens (pos, mask) needs use_cache=True"
        assert B == 1 or not use_cache, "FastLlama decodes one sequence at a time (B=1)"
        pos, mask = cache.place(T, pos, mask)  # where the new tokens sit (slice or (T,)), what each sees
        # subtle: in bfloat16, torch's attention kernel rounds a query row differently with other rows beside it, so
        # the (K+1)-token verification would not compute the one-token step's p (greedy outputs part at near-ties).
        # A chain's rows then attend one at a time, each over the keys its own step sees: the same call, bit for bit
        rows = self.row_invariant and use_cache and T > 1 and isinstance(pos, slice)
        x, kept = self.blocks(idx, cache, pos, mask, rows, self.layers, self.format)
        features = Features(cache.start, idx, x, tuple(kept))
        if use_cache:
            self.features = self.model.features = features  # on the wrapped model too: the heads read it there
        logits = matmul(self.head_format, F.rms_norm(x, (c.n_embd,), self.ln_f, c.norm_eps), self.head)
        return logits.float(), None

    def fill(self, idx):  # (1, T): a prompt's tokens into the empty cache, in one batched float32 forward, no logits
        """The prefill of an engine: speculative.CachedModel reads the tokens before the first scored position
        here when the cache is empty (a call's start, a slid window), in plain and speculative sampling alike, so both
        go on from the same cache. It leaves the prompt's features (model.Features) as a forward does: a head reads
        them before the round's first drafts (drafts/heads.py absorb) instead of running the target over the prompt."""
        assert self.cache.length == 0, "fill reads a prompt into an empty cache"
        pos, mask = self.cache.place(idx.size(1), None, None)
        x, kept = self.blocks(idx, self.cache, pos, mask, False, self.fill_layers, "float32")
        self.features = self.model.features = Features(0, idx, x, tuple(kept))

    def blocks(self, idx, cache, pos, mask, rows, layers, fmt):  # (B, T) -> (residual (B, T, C), kept layers' outputs)
        x = self.wte[idx]  # (B, T, C) float32: the residual stream stays float32
        return run_layers(self.config, x, layers, fmt, cache, pos, mask, self.cos, self.sin, rows,
                          self.model.keep_layers, self.fused)


def rope_tables(rope):  # pretrained/llama.py's rope (W, hs/2, 2) -> (cos, sin), (W, hs) each
    """RoPE as two tables of full head width: out = x * cos2 + swap(x) * sin2, swap exchanging each pair's channels,
    sin2 = (-sin, +sin) per pair: (x1 cos - x2 sin, x1 sin + x2 cos), model.rotate's arithmetic."""
    cos, sin = rope.float().unbind(-1)  # (W, hs/2) each
    return cos.repeat_interleave(2, -1), torch.stack((-sin, sin), -1).flatten(-2)


def run_layers(c, x, layers, fmt, cache, pos, mask, cos, sin, rows=False, keep=(), fused=True):
    """The Llama's blocks over the residual stream x (B, T, C) (float32 in FastLlama), their matrices as `fmt` stores
    them (layers: prepared's, or block_weights'), the new keys and values written to `cache` at pos -> (x, the outputs
    of the blocks in keep). FastLlama runs its target's blocks here; a head (drafts/eagle.py) its own beside it."""
    B, T, _ = x.size()
    nh, nkv, hs, eps = c.n_head, c.n_kv_head, c.n_embd // c.n_head, c.norm_eps
    # q4_1 runs a step and a chain's rows through its own kernels (the same functions for both: rows equal): a whole
    # block in one call (engine/blocks.cpp layer_rows) where fused, else its products and attention
    own = fmt == "q4_1" and B == 1 and isinstance(pos, slice) and (T == 1 or rows)
    if own and fused and isinstance(cache, ChainCache):
        kept, x = [], x[0]
        for i, layer in enumerate(layers):
            x = layer_rows(x, layer, cache.k[i][0], cache.v[i][0], pos.start, cos, sin, nh, eps)
            if i in keep:
                kept.append(x[None])
        return x[None], kept
    cos, sin = cos[pos], sin[pos]  # (T, hs) each
    kept = []
    for i, (ln1, qkv_w, proj_w, ln2, fc_w, down_w) in enumerate(layers):
        qkv = matmul(fmt, F.rms_norm(x, (c.n_embd,), ln1, eps), qkv_w).to(x.dtype)  # q, k, v in the stream's dtype
        qkv = qkv.view(B, T, nh + 2 * nkv, hs).transpose(1, 2)  # (B, nh + 2 nkv, T, hs)
        qk = qkv[:, :nh + nkv]  # (B, nh + nkv, T, hs): queries and keys turn by their positions; values do not
        qk = qk * cos + qk.unflatten(-1, (-1, 2)).flip(-1).flatten(-2) * sin  # RoPE on adjacent pairs
        k, v = cache.write(i, qk[:, nh:], qkv[:, nh + nkv:])  # (B, nkv, S, hs) each: cached and new
        if own:  # engine/blocks.cpp: each new token alone over its keys, (T, nh, hs) -> (1, T, C)
            y = attend_rows(qk[0, :nh].transpose(0, 1), k[0], v[0]).view(B, T, c.n_embd)
        else:
            y = attention(qk[:, :nh], k, v, mask, rows).transpose(1, 2).reshape(B, T, c.n_embd)  # (B, nh, T, hs) in
        x = x + matmul(fmt, y, proj_w)
        gate, up = matmul(fmt, F.rms_norm(x, (c.n_embd,), ln2, eps), fc_w).chunk(2, dim=-1)
        x = x + matmul(fmt, F.silu(gate) * up, down_w)  # SwiGLU
        if i in keep:
            kept.append(x)
    return x, kept


@functools.lru_cache(maxsize=2)
def gguf_tensors(path):  # -> {GGUF name: the reader's tensor (type, bytes memory-mapped)}: the file parsed once (2.6 s)
    import gguf
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def prepared(model, fmt):  # -> (per layer (ln_1, qkv, proj, ln_2, fc, down), LM head, quantized here?) in format fmt
    blocks = q4_1_blocks(model) if fmt in ("int4", "q4_1") else None  # {state_dict name: Q4_1 bytes}
    quantized = bool(blocks) and blocks.pop("quantized here")
    of_block = lambda i: {name: blocks[f"transformer.h.{i}.{name}"] for name in MATRICES} if blocks else None
    layers = [block_weights(block, fmt, of_block(i)) for i, block in enumerate(model.transformer.h)]
    if fmt == "q4_1":  # the file's Q8_0 head as stored (or quantized to Q8_0 here, as the blocks are)
        w = model.lm_head.weight
        return layers, q8_0_parts(q8_0_head(model), w.size(0), padded(w.size(1), Q4_1_BLOCK)), quantized
    head = format_weight(model.lm_head.weight.detach(), "bfloat16" if fmt == "int4" else fmt)  # int4: the Q8_0 head
    return layers, head, quantized


def format_weight(w, fmt):  # a float matrix (N, K) -> what matmul(fmt, x, .) takes, for fmt float32, bfloat16, int8
    return w if fmt == "float32" else w.to(torch.bfloat16) if fmt == "bfloat16" else int8_rows(w.float())


MATRICES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")  # a Block's


def block_weights(block, fmt, q4_1=None):  # a pretrained/llama.py Block -> run_layers' tuple for it
    """(ln_1, qkv, proj, ln_2, fc, down): the norms' weights as they are, the matrices in fmt (format_weight); for
    int4 and q4_1, q4_1 holds each matrix's Q4_1 bytes by its name in MATRICES (prepared: the file's own blocks)."""
    def matrix(name):
        w = block.get_parameter(name).detach()
        if fmt not in ("int4", "q4_1"):
            return format_weight(w, fmt)
        K = padded(w.size(1), Q4_1_BLOCK)
        return q4_1_parts(q4_1[name], w.size(0), K) if fmt == "q4_1" else int4_packed(*q4_1_from_bytes(q4_1[name],
                                                                                                   w.size(0), K))
    qkv, proj, fc, down = map(matrix, MATRICES)
    return block.ln_1.weight.detach(), qkv, proj, block.ln_2.weight.detach(), fc, down


def attention(q, k, v, mask, rows=False):  # (B, nh, T, hs), (B, nkv, S, hs) x2 -> (B, nh, T, hs)
    """Causal attention over the cached and new keys (GQA: query head h reads key/value head h // (nh // nkv)).
    rows: a chain's T new tokens at the cache's end, each computed alone over the keys up to its own, as a one-token
    step computes it, no mask (T - 1 more kernel calls: what a verification pays for the step's exact numbers)."""
    if not rows:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    T, S = q.size(2), k.size(2)
    return torch.cat([F.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :S - T + 1 + i],
                                                     v[:, :, :S - T + 1 + i], enable_gqa=True) for i in range(T)], 2)


def q4_1_file(model):  # -> is model read from a GGUF file whose blocks are all Q4_1 (the int4 format runs them)?
    import gguf
    path = getattr(model, "gguf_path", None)
    tensors = gguf_tensors(path) if path else {}
    return bool(tensors) and all(p in tensors and tensors[p].tensor_type == gguf.GGMLQuantizationType.Q4_1
                                 for parts in block_names(model.config).values() for p in parts)


def block_names(c):  # -> {the Llama's name of a block matrix: the GGUF names stacked into it}
    return {f"transformer.h.{i}.{ours}.weight": [f"blk.{i}.{p}.weight" for p in parts]
            for i in range(c.n_layer) for ours, parts in {"attn.c_attn": ("attn_q", "attn_k", "attn_v"),
                                                         "attn.c_proj": ("attn_output",),
                                                         "mlp.c_fc": ("ffn_gate", "ffn_up"),
                                                         "mlp.c_proj": ("ffn_down",)}.items()}


def q4_1_blocks(model):  # -> {state_dict name: Q4_1 bytes (N, K/32 * 20)}, and "quantized here": bool
    """The int4 format's weights: a model read from a GGUF file whose blocks are Q4_1 (pretrained.load keeps the
    path in model.gguf_path) gives the file's own bytes, q, k and v stacked as the Llama stacks them (and gate with
    up); any other model is quantized to Q4_1 here (q4_1_quantized)."""
    names = block_names(model.config)
    if q4_1_file(model):
        tensors = gguf_tensors(model.gguf_path)
        return {ours: np.concatenate([tensors[p].data for p in parts]) for ours, parts in names.items()} | {
            "quantized here": False}
    state = model.state_dict()
    return {ours: q4_1_quantized(state[ours]) for ours in names} | {"quantized here": True}


def q8_0_head(model):  # -> the LM head's Q8_0 bytes (V, padded(C, 32) / 32 * 34): the file's own, or quantized here
    import gguf
    tensors = gguf_tensors(model.gguf_path) if getattr(model, "gguf_path", None) else {}
    name = "output.weight" if "output.weight" in tensors else "token_embd.weight"  # a tied head is the embedding
    if name in tensors and tensors[name].tensor_type == gguf.GGMLQuantizationType.Q8_0:
        return tensors[name].data
    w = model.lm_head.weight.detach().float()
    w = F.pad(w, (0, padded(w.size(1), Q4_1_BLOCK) - w.size(1)))
    return gguf.quants.quantize(w.contiguous().numpy(), gguf.GGMLQuantizationType.Q8_0)
