"""
Sampling and training speed on a quiet CPU and beside one busy process, with 2 threads, 1 thread, and the
default (--threads left out: one per idle core, engine/cpu.py). The measurement behind the default;
BENCHMARKS.md keeps its output.

    python scripts/threads_bench.py              # about 2 minutes on a 2-core CPU
    python scripts/threads_bench.py --repeats 5

Each cell is the median over --repeats runs, the conditions interleaved. "busy" runs one Python process that
spins on one core for the whole run (what a second job, an IDE's indexer or a browser tab does).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = [sys.executable, "sample.py", "--num_samples", "1", "--max_new_tokens", "300", "--seed", "0", "--k", "4"]
TRAIN = [sys.executable, "train_draft.py", "--role", "draft", "--max_iters", "40", "--eval_interval", "1000",
         "--eval_iters", "1", "--out_dir"]


def tokens_per_second(cmd):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"= (\d+) tokens/s", out).group(1))


def training_seconds(cmd):
    tic = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    return time.perf_counter() - tic


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="median over this many runs per cell")
    ap.add_argument("--out_dir", default=os.path.join("runs", "threads-bench"), help="the training runs' checkpoints")
    args = ap.parse_args()
    threads = {"2 threads": ["--threads", "2"], "1 thread": ["--threads", "1"], "default": []}
    cells = {(load, name, job): [] for load in ("quiet", "busy") for name in threads for job in ("sample", "train")}
    for _ in range(args.repeats):
        for load in ("quiet", "busy"):
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
            time.sleep(0.5 if spinner else 0.0)  # let it take its core
            try:
                for name, flag in threads.items():
                    cells[load, name, "sample"].append(tokens_per_second(SAMPLE + flag))
                    cells[load, name, "train"].append(training_seconds(TRAIN + [args.out_dir] + flag))
            finally:
                if spinner:
                    spinner.kill()
                    spinner.wait()
    print(f"median of {args.repeats}; sample.py --k 4, 300 tokens (tokens/s); train_draft.py --role draft, "
          "40 steps (seconds, start-up included)")
    print("| threads | sample quiet | sample busy | busy / quiet | train quiet | train busy | busy / quiet |")
    print("|---|---|---|---|---|---|---|")
    med = lambda *key: statistics.median(cells[key])
    for name in threads:
        sq, sb, tq, tb = med("quiet", name, "sample"), med("busy", name, "sample"), med("quiet", name, "train"), \
            med("busy", name, "train")
        print(f"| {name} | {sq:.0f} | {sb:.0f} | {sb / sq:.0%} | {tq:.1f} s | {tb:.1f} s | {tq / tb:.0%} |")
    print(f"vs 2 threads quiet: default busy keeps {med('busy', 'default', 'sample') / med('quiet', '2 threads', 'sample'):.0%} "
          f"of the sampling speed, and {med('quiet', '2 threads', 'train') / med('busy', 'default', 'train'):.0%} of "
          "the training speed")


if __name__ == "__main__":
    main()
