"""engine/llama.py on widths torch's weight-only kernels were not made for (n_embd 24 and 20, n_hidden 40 and 44: not
multiples of 16). Each matrix is stored in its kernel's shape (engine/llama.py's INT8_K, INT4_N, Q4_1_BLOCK: zero padding), and a Llama of
those widths gives the readable model's logits in every format, one row and several. The second test runs the
kernels in a child process (tests/odd_widths.py): a kernel fed a shape it cannot take crashes the process instead of
raising (int8 with K not a multiple of 16 on AVX-512, of 8 on AVX2), and that crash becomes a failure here that names
the kernel, its shapes and the CPU, where it would otherwise kill a test worker."""

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from engine.llama import FastLlama, int8_rows
from tests.test_fast_llama import TOLERANCE
from tests.test_llama import random_llama

WIDTHS = [(24, 40), (20, 44)]  # (n_embd, n_hidden); 20 and 44 are not multiples of 8 either (AVX2's step)
# the kernels' rules, read from torch 2.13's source (aten/src/ATen/native/cpu/int8mm_kernel.cpp, int4mm_kernel.cpp),
# stated here apart from engine/llama.py's INT8_K, INT4_N and Q4_1_BLOCK so that a change there cannot pass unseen
INT8_K, INT4_K, INT4_N = 16, 32, 16
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu():  # -> the CPU as lscpu names it, and the instructions torch's kernels run on it
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()})"


@pytest.mark.parametrize("n_embd,n_hidden", WIDTHS)
def test_every_matrix_is_stored_in_the_shape_its_kernel_takes(n_embd, n_hidden):
    model = random_llama(0, n_embd=n_embd, n_hidden=n_hidden, n_head=2, n_kv_head=1)
    for layer in FastLlama(model, "int8").layers:
        for q, scales in layer[1:3] + layer[4:6]:  # qkv, proj, fc, down: (int8 (N, K'), scales (N,))
            assert q.size(1) % INT8_K == 0, f"an int8 matrix of inner size {q.size(1)}: _weight_int8pack_mm needs " \
                                            f"a multiple of {INT8_K} (engine/llama.py, the kernels' shape rules)"
    for layer in FastLlama(model, "int4").layers:
        for packed, scales_zeros, N in layer[1:3] + layer[4:6]:  # (packed (N', K'/2), (K'/32, N', 2), N)
            assert packed.size(0) % INT4_N == 0 and scales_zeros.size(1) == packed.size(0) >= N
            assert packed.size(1) * 2 % INT4_K == 0 and scales_zeros.size(0) * INT4_K == packed.size(1) * 2
    q, scales = int8_rows(torch.randn(7, n_embd))  # a head's LM-head rows (drafts/heads.py)
    assert q.shape == (7, -(-n_embd // INT8_K) * INT8_K) and not q[:, n_embd:].any()  # zero columns only


@pytest.mark.parametrize("n_embd,n_hidden", WIDTHS)
def test_odd_widths_give_the_readable_models_logits_in_every_format(n_embd, n_hidden):
    try:
        run = subprocess.run([sys.executable, "-m", "tests.odd_widths", str(n_embd), str(n_hidden)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the odd-width child ran past 300 s on {cpu()}; its last kernel call: "
                    f"{(e.stderr or b'').decode(errors='replace').strip().splitlines()[-1:]}")
    if run.returncode != 0:
        calls = [line for line in run.stderr.splitlines() if " on shapes " in line]
        died = f"killed by signal {-run.returncode}" if run.returncode < 0 else f"exit code {run.returncode}"
        pytest.fail(f"n_embd={n_embd}, n_hidden={n_hidden} on {cpu()}: the child process died ({died}) in its "
                    f"last kernel call, {calls[-1] if calls else 'before any kernel call'}\n{run.stderr[-3000:]}")
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    for case, err in errors.items():
        fmt = case.split()[0]
        assert err < TOLERANCE[fmt], f"{case}: logits {err:.3g} of the largest away on {cpu()} (n_embd={n_embd}, " \
                                     f"n_hidden={n_hidden}); the format's tolerance is {TOLERANCE[fmt]}"
