"""The child process of tests/test_kernel_shapes.py: a Llama whose widths are not multiples of 16 in every format of
engine/llama.py, one row and several, against the readable model its weights stand for.

    python -m tests.odd_widths 24 40    # n_embd, n_hidden -> one JSON line: {"int8 T=5": relative error, ...}

It runs apart because a torch kernel fed a shape it cannot take does not raise: it reads past a row or crashes the
process (a segmentation fault). Before each kernel call it writes the kernel and its shapes to stderr, so the parent
names the call that killed it."""

import json
import sys

import torch

from engine.blocks import can_build
from engine.llama import FastLlama, int8_rows, matmul
from tests.test_fast_llama import dequantized_twin, stored_twin
from tests.test_llama import random_llama

KERNELS = ("_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu")


def announce(name):  # torch.ops.aten.<name> -> the same kernel, first writing its shapes to stderr
    kernel = getattr(torch.ops.aten, name)

    def call(x, w, *rest):
        tensors = [tuple(t.shape) for t in (x, w, *rest) if torch.is_tensor(t)]
        print(f"{name} on shapes {tensors}", file=sys.stderr, flush=True)
        return kernel(x, w, *rest)
    return call


@torch.no_grad()
def errors(n_embd, n_hidden):  # -> {"fmt T=rows": max |logit error| / max |logit|}
    for name in KERNELS:
        setattr(torch.ops.aten, name, announce(name))
    model = random_llama(0, n_embd=n_embd, n_hidden=n_hidden, n_head=2, n_kv_head=1)
    out = {}
    for fmt in ("bfloat16", "int8", "int4", "q4_1")[:None if can_build() else 3]:  # int4, q4_1: the float model of
        # the blocks they run (q4_1 where engine/blocks.cpp can be built: tests/test_blocks.py)
        reference = dequantized_twin(model) if fmt == "int4" else stored_twin(model) if fmt == "q4_1" else model
        fast = FastLlama(model, fmt)
        for T in (1, 5):  # one row (a step), several (a verification, its rows through one kernel call)
            idx = torch.tensor([[3, 1, 4, 1, 5][:T]])
            want = reference(idx)[0]
            fast.reset_cache()
            got, _ = fast(idx, use_cache=True)
            out[f"{fmt} T={T}"] = ((got - want).abs().max() / want.abs().max()).item()
    for K in (n_embd, n_hidden):  # a head's LM-head rows in int8 (drafts/heads.py): int8_rows, then matmul
        w, x = torch.randn(7, K), torch.randn(5, K)
        out[f"int8 rows K={K}"] = ((matmul("int8", x, int8_rows(w)).float() - x @ w.T).abs().max() /
                                   (x @ w.T).abs().max()).item()
    return out


if __name__ == "__main__":
    print(json.dumps(errors(*map(int, sys.argv[1:3]))))
