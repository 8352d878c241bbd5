"""engine/blocks.cpp, the q4_1 format's kernels: the blocks are read as ggml defines them, a product is the float64
product of the weights they stand for up to float32 rounding, and every row of a wide call is the one-row call's bit
for bit, at every width and position (what keeps greedy speculative equal to greedy plain); attention alike.

The kernel is built on first use; on a CPU without AVX2, or without a C++ compiler, the first test checks the
one-line refusal instead and the others do not run (nothing of the kernel is there to test)."""

import gguf
import pytest
import torch
from torch.nn import functional as F

from engine import blocks
from engine.blocks import BLOCK, attend_rows, blocks_mm, can_build, q4_1_parts, q8_0_parts, unavailable
from engine.llama import FastLlama
from tests.test_llama import random_llama

BUILDS = can_build()  # AVX2, a C++ compiler and ninja (requirements.txt): the kernel must then build and run
SHAPES = [(1, 32), (5, 64), (17, 96), (40, 576)]  # (N, K): one output row, odd counts, SmolLM2's K


def dequantized(parts):  # the kernel's (q bytes, d, m) -> the float32 weights (N, K) they stand for, read here
    q, d, m = parts
    N, B = d.shape
    if m.numel():  # Q4_1: low nibbles are weights 0..15 of a block, high nibbles 16..31
        q = q.view(N, B, 16)
        q = torch.cat([q & 0x0F, q >> 4], -1).float() * d[..., None] + m[:, :B, None]
    else:  # Q8_0
        q = q.view(torch.int8).view(N, B, BLOCK).float() * d[..., None]
    return q.view(N, B * BLOCK)


def parts_of(kind, N, K, seed=0):  # -> (parts, gguf's own dequantization (N, K)) of random weights in a block type
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(seed)).numpy()
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    raw = gguf.quants.quantize(w, qtype)
    parts = (q4_1_parts if kind == "Q4_1" else q8_0_parts)(raw, N, K)
    return parts, torch.from_numpy(gguf.quants.dequantize(raw, qtype).copy())


def test_the_kernel_builds_where_the_cpu_has_avx2_and_a_compiler_and_says_why_not_elsewhere():
    if BUILDS:
        assert unavailable() is None, unavailable()
    else:  # one line that says what is missing; the q4_1 format refuses with it, the others run
        assert unavailable() and "\n" not in unavailable() and ("AVX2" in unavailable() or "compiler" in unavailable())
        with pytest.raises(ValueError, match="q4_1 format"):
            FastLlama(random_llama(0), "q4_1")
        assert FastLlama(random_llama(0), "int4").format == "int4"


@pytest.mark.skipif(not BUILDS, reason="no AVX2 or no C++ compiler: the refusal is tested above")
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("N,K", SHAPES)
def test_a_product_is_the_weights_product_and_each_row_the_one_row_calls(kind, N, K):
    parts, ggml = parts_of(kind, N, K)
    assert torch.equal(dequantized(parts), ggml)  # the bytes read as ggml reads them
    x = torch.randn(21, K, generator=torch.Generator().manual_seed(1))
    want = x.double() @ ggml.double().T
    for M in (1, 2, 3, 5, 9, 10, 11, 17, 21):  # widths below, at and past the 10 rows the kernel takes at a time
        y = blocks_mm(x[:M], parts)
        assert y.shape == (M, N) and y.dtype == torch.float32
        assert (y.double() - want[:M]).abs().max() <= 1e-5 * want.abs().max(), (kind, M)
        for i in range(M):  # each row alone: bit for bit, wherever it sat in the wide call
            assert torch.equal(blocks_mm(x[i:i + 1], parts)[0], y[i]), (kind, M, i)
    assert torch.equal(blocks_mm(x[3:12], parts), blocks_mm(x, parts)[3:12])  # another row at the start of a group


@pytest.mark.skipif(not BUILDS, reason="no AVX2 or no C++ compiler: the refusal is tested above")
@pytest.mark.parametrize("nh,nkv,hs", [(4, 2, 16), (3, 1, 12), (9, 3, 64)])  # GQA; a head size that is not 8s
def test_attention_rows_are_each_tokens_step_and_near_torchs(nh, nkv, hs):
    g = torch.Generator().manual_seed(2)
    S, T = 23, 6
    q, k, v = (torch.randn(n, S, hs, generator=g) for n in (nh, nkv, nkv))
    k_cache = F.pad(k, (0, 0, 0, 9))[:, :S]  # the cache's layout: a view of a longer buffer (rows strided)
    v_cache = F.pad(v, (0, 0, 0, 9))[:, :S]
    new = q[:, S - T:].transpose(0, 1)  # (T, nh, hs): the T newest tokens' queries
    got = attend_rows(new, k_cache, v_cache)
    for t in range(T):  # token t alone over the keys its own step saw: bit for bit
        L = S - T + 1 + t
        assert torch.equal(attend_rows(new[t:t + 1], k_cache[:, :L], v_cache[:, :L])[0], got[t]), t
        want = F.scaled_dot_product_attention(new[t][:, None], k[:, :L], v[:, :L], enable_gqa=True)[:, 0]
        assert (got[t] - want).abs().max() < 1e-5, t


@pytest.mark.skipif(not BUILDS, reason="no AVX2 or no C++ compiler: the refusal is tested above")
def test_a_wrong_shape_is_refused_with_what_the_kernel_takes():
    parts, _ = parts_of("Q4_1", 5, 64)
    with pytest.raises(RuntimeError, match="whole blocks of 32"):
        blocks.kernel().blocks_mm(torch.randn(2, 48), *parts)
    with pytest.raises(RuntimeError, match="float32"):
        blocks.kernel().blocks_mm(torch.randn(2, 64, dtype=torch.float64), *parts)
    assert BLOCK == 32
