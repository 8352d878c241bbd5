"""
How many CPU threads torch should use: one per core that is idle now, not one per core.

Why: our models are small, so one forward is a few hundred microseconds of work split over threads that meet
at a barrier after every operation. If another process holds one of the cores, the thread that runs there gets
a slice of it only when the scheduler says so, and every barrier waits for it. On a 2-core machine with one
core busy, torch's default of 2 threads made sampling 5-30x slower and training 6x slower, where 1 thread
lost less than half (BENCHMARKS.md, "threads on a busy CPU"). So sample.py, bench.py and train_draft.py
count the idle cores over a short interval when they start (use_threads) unless --threads says otherwise.

    use_threads(None, "cpu")   # -> 2 on an idle 2-core machine, 1 while another process busy-loops on a core

Beside the threads, what the CPU multiplies in hardware (bf16_units): train_draft.py trains in bfloat16 only where
it can.

What it leaves out: following the load while a run goes on (it is measured once, at the start: if you start
something heavy beside a long run, pass --threads 1), and GPUs (their speed does not depend on CPU threads).
"""

import argparse
import math
import os
import time

import torch


def cpu_flags():  # -> the instruction sets /proc/cpuinfo lists ({"avx2", "amx_tile", ...}); empty off Linux
    if not os.path.exists("/proc/cpuinfo"):
        return set()
    with open("/proc/cpuinfo") as fh:
        return set(next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), []))


def cpu_name():
    """The CPU as lscpu names it, with the instruction sets that decide the speed here (from /proc/cpuinfo)."""
    import platform
    cpu, flags = platform.processor(), cpu_flags()
    if os.path.exists("/proc/cpuinfo"):
        lines = open("/proc/cpuinfo").read().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
    isa = [name for flag, name in [("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
                                   ("amx_tile", "AMX")] if flag in flags]
    return cpu + (f" ({', '.join(isa)})" if isa else "")  # none listed: none of these (or no /proc/cpuinfo)


def bf16_units():  # -> whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX)
    """Without them torch emulates bfloat16 matrix products, and training a head under bfloat16 autocast ran 27x
    slower than in float32 on an AVX2-only CPU (BENCHMARKS.md, "bfloat16 autocast without bfloat16 units")."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def busy_and_total():  # -> (busy, total) CPU time of all cores since boot, in clock ticks (Linux), or None
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]  # user nice system idle iowait irq softirq steal ...
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def idle_cores(interval=0.1):
    """-> how many cores were idle over the next `interval` seconds (a float, e.g. 1.02 of 2), or None where the
    OS does not tell (then the caller keeps torch's default). Linux: /proc/stat; elsewhere the 1-minute load."""
    cores = os.cpu_count() or 1
    before = busy_and_total()
    if before is None:
        try:
            return max(0.0, cores - os.getloadavg()[0])
        except (OSError, AttributeError):
            return None
    time.sleep(interval)
    busy, total = (b - a for a, b in zip(before, busy_and_total()))
    return cores * (1.0 - busy / total) if total > 0 else None


def choose_threads(idle, default):
    """One thread per idle core, at least 1, at most torch's default. A core counts as idle if at least 70% of
    it is: a half-busy core would still stall the barriers. 2.0 -> 2, 1.6 -> 1, 0.3 -> 1 (default 2)."""
    if idle is None:
        return default
    return max(1, min(default, math.floor(idle + 0.3)))


def thread_count(text):  # --threads' type: an int >= 1 (argparse turns the error into a usage message)
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1 (or left out: one per idle core), got {text!r}")
    return int(text)


def add_threads_argument(ap):  # --threads, the same in sample.py, bench.py and train_draft.py
    ap.add_argument("--threads", type=thread_count, default=None,
                    help="CPU threads for torch; None: one per core idle at the start (cpu.py), so a core busy with "
                         "another process cannot stall every step")


def use_threads(threads, device="cpu"):
    """torch.set_num_threads(threads), or, with threads None on a CPU, one per idle core (never more than torch
    uses already). -> the number of threads torch uses now."""
    if threads is not None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1 (or None: one per idle core), got {threads!r}")
        torch.set_num_threads(threads)
    elif str(device).startswith("cpu"):
        # at most what torch has now: its default (the physical cores), or less if the caller already chose
        torch.set_num_threads(choose_threads(idle_cores(), torch.get_num_threads()))
    return torch.get_num_threads()
