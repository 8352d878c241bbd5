"""
The GGUF file's blocks multiplied as they are stored, by a kernel of our own (engine/blocks.cpp): engine/llama.py's
"q4_1" format, whose rows of a (K+1)-token forward are the one-token step's bit for bit by construction.

    parts = q4_1_parts(raw, N, K)       # the file's Q4_1 bytes (N, K/32 * 20) -> (q bytes, d, m), as the kernel reads
    y = blocks_mm(x, parts)             # x (M, K) float32 -> (M, N) float32: x @ W.T, W = d q + m exactly
    x = layer_rows(x, layer, k, v, ...)  # a whole Llama block of the newest tokens in one call (run_layers' fast path)

Why: torch's weight-only kernels round scales and activations to bfloat16 and unpack a tile of weights for every 4
rows of activations, so a verification of K+1 tokens costs about (K+1)/4 steps. The LM head, kept in bfloat16 beside
them, costs one more read of its 57 MB for every row. Here each block is unpacked once per call, then multiplied by
every row in float32: the file's Q8_0 head (half the bytes) grows by each row's multiply-adds only.

The kernel is compiled on first use (torch.utils.cpp_extension, about 40 s; then cached by torch under
~/.cache/torch_extensions) for CPUs with AVX2 and FMA. unavailable() says in one line why it cannot run where it
cannot (another instruction set, no C++ compiler): the q4_1 format then refuses and the int4 format still runs.

What it leaves out: other block types (Q4_0, K-quants), other instruction sets, 8-bit activations (llama.cpp's).
"""

import functools
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

BLOCK = 32  # weights per block, Q4_1 and Q8_0 alike
NAME = "speculative_blocks"  # the compiled module's name: torch rebuilds it when blocks.cpp changes


def has_avx2():  # -> does torch see AVX2 (and FMA) here? AVX-512 CPUs have both
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@functools.lru_cache(maxsize=1)
def _built():  # -> (the compiled module, None) or (None, why not): built once a process
    if not has_avx2():
        return None, (f"engine/blocks.cpp needs a CPU with AVX2 and FMA (x86-64, 2013 on); this one offers "
                      f"{torch.backends.cpu.get_cpu_capability()}: use --decoder fast-int4")
    try:
        from torch.utils.cpp_extension import load
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blocks.cpp")
        if not _compiled():
            print("engine/blocks.cpp: compiling the q4_1 kernels, once for this machine (about 40 s on 2 cores)",
                  file=sys.stderr, flush=True)
        # -ffp-contract=off: no a * b + c fused where the source does not say so, so a loop's vectorized body and
        # its scalar tail round alike (a row's numbers must not depend on where the row sits).
        # -fopenmp: at::parallel_for splits the output rows among torch's threads only when compiled with OpenMP
        # (without it the pragma is dropped and the kernel runs on one core: BENCHMARKS.md, "the file's blocks by a
        # kernel of our own")
        return load(name=NAME, sources=[source], extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp", "-ffp-contract=off"],
                    extra_ldflags=["-fopenmp"], verbose=False), None
    except Exception as e:  # no compiler, no ninja, a failed build: one line, the rest of the project runs
        text = str(e).strip()
        why = "the C++ compiler failed, its output above" if "Error building extension" in text else (
            text.splitlines()[0][:160] if text else type(e).__name__)
        return None, (f"could not build engine/blocks.cpp ({why}): it needs a C++ compiler (g++) and ninja "
                      "(requirements.txt); use --decoder fast-int4")


def _compiled():  # -> has torch's extension cache a build of the kernel (maybe of an older blocks.cpp)?
    try:
        from torch.utils.cpp_extension import _get_build_directory  # (torch's own, not public: only for the notice)
        return os.path.exists(os.path.join(_get_build_directory(NAME, False), NAME + ".so"))
    except Exception:
        return False


def can_build():  # -> does this machine have what a build needs (AVX2, a C++ compiler, ninja)? Cheap: nothing is built
    import shutil
    return has_avx2() and bool(shutil.which("c++")) and bool(shutil.which("ninja"))


def unavailable():  # -> None where the kernel runs, else why not, in one line
    return _built()[1]


def kernel():
    module, why = _built()
    if module is None:
        raise RuntimeError(why)
    return module


def float16s(blocks, at):  # (..., block bytes) uint8 -> (...) float32: the float16 at byte `at` of each block
    return torch.from_numpy(blocks[..., at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32))


def q4_1_parts(raw, N, K):  # the file's Q4_1 bytes (N, K/32 * 20) -> (q bytes (N, K/2), d (N, K/32), m (N, B8))
    """A block is 20 bytes: d and m (float16), then 16 bytes of q, low nibbles first (engine/llama.py q4_1_from_bytes).
    The kernel reads q's bytes as stored, d and m in float32 (float16 to float32 is exact), m padded with zeros to a
    multiple of 8 blocks (B8: it is summed 8 blocks at a time)."""
    blocks = np.ascontiguousarray(raw).reshape(N, K // BLOCK, 20)
    q = torch.from_numpy(blocks[..., 4:].reshape(N, K // 2).copy())
    B = K // BLOCK
    return q, float16s(blocks, 0).contiguous(), F.pad(float16s(blocks, 2), (0, -(-B // 8) * 8 - B)).contiguous()


def q8_0_parts(raw, N, K):  # the file's Q8_0 bytes (N, K/32 * 34) -> (q bytes (N, K), d (N, K/32), no m)
    """A block is 34 bytes: d (float16), then 32 int8 q: w = d q (ggml's dequantize_row_q8_0)."""
    blocks = np.ascontiguousarray(raw).reshape(N, K // BLOCK, 34)
    return torch.from_numpy(blocks[..., 2:].reshape(N, K).copy()), float16s(blocks, 0).contiguous(), torch.empty(0)


def blocks_mm(x, parts):  # x (M, K) float32 -> (M, N) float32: x @ W.T, W the blocks in parts, each row on its own
    return kernel().blocks_mm(x.contiguous(), *parts)


def attend_rows(q, k, v):  # (T, nh, hs), (nkv, S, hs) x2 -> (T, nh, hs): the T newest tokens, each alone over its keys
    return kernel().attend_rows(q.contiguous(), k, v, q.size(-1) ** -0.5)


def layer_rows(x, layer, k, v, start, cos, sin, nh, eps):
    """x (T, C) float32, the T newest tokens at slots start.. -> x after one Llama block, in one call (blocks.cpp).
    layer: run_layers' (ln1, qkv, proj, ln2, fc, down), its matrices q4_1_parts'; k, v (nkv, W, hs): the layer's cache,
    written at slots start..start+T-1; cos, sin (W, hs): engine/llama.py rope_tables'."""
    ln1, qkv, proj, ln2, fc, down = layer
    return kernel().layer_rows(x.contiguous(), ln1, qkv, proj, ln2, fc, down, k, v, start, cos, sin, nh, eps)
