"""
What seeing the rounds costs: sample.py's sampling with and without show.Recorder (what --show rounds records, and
what --trace records with detail), interleaved, median of repeats; then the --trace page of a 300-token run opened
in headless Chromium (navigation to load event). The shipped pair, K = 4, temperature 1, the fast decoder.

    python scripts/show_cost.py --repeats 11
"""

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import show  # noqa: E402
from data import Tokenizer  # noqa: E402
from engine.fast import with_decoder  # noqa: E402
from model import SHIPPED, load_checkpoint  # noqa: E402
from speculative import autoregressive_generate, speculative_generate  # noqa: E402
from tests.browser import Chromium, chromium_path  # noqa: E402


def sample_line(args):
    """sample.py end to end, its statistics line's tokens/s (the stream and the colours included), with and without
    --show rounds (FORCE_COLOR=1), interleaved."""
    import io
    import re
    import sample
    speeds = {"sample.py": [], "sample.py --show rounds": []}
    os.environ["FORCE_COLOR"] = "1"
    for rep in range(args.repeats + 1):
        for mode in speeds:
            argv = ["--k", "4", "--temperature", "1.0", "--num_samples", "3", "--max_new_tokens", str(args.tokens),
                    "--seed", str(rep), "--threads", str(args.threads)] + mode.split()[1:]
            with contextlib.redirect_stdout(io.StringIO()) as out:
                sample.main(argv)
            if rep:
                speeds[mode].append(float(re.search(r"= (\d+) tokens/s", out.getvalue()).group(1)))
    ratios = sorted(a / b - 1 for a, b in zip(speeds["sample.py"], speeds["sample.py --show rounds"]))
    for mode, values in speeds.items():
        print(f"{mode:28s} {statistics.median(values):7.0f} tok/s (its statistics line, 3 samples)")
    print(f"--show rounds adds {statistics.median(ratios):+.1%} to sample.py's time (median of the repeats' ratios; "
          f"middle half {ratios[len(ratios) // 4]:+.1%} to {ratios[(3 * len(ratios)) // 4]:+.1%})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, meta = load_checkpoint(SHIPPED["target"])
    draft, _ = load_checkpoint(SHIPPED["draft"])
    target, draft = with_decoder("fast", target, draft)
    tok = Tokenizer(meta["tokenizer"])
    idx = torch.tensor([tok.encode("ROMEO:\n")])
    modes = {"no recorder": contextlib.nullcontext, "--show rounds (Recorder)": lambda: show.Recorder(),
             "--trace (Recorder, detail)": lambda: show.Recorder(detail=True)}
    seconds = {mode: [] for mode in modes}
    for rep in range(args.repeats + 1):  # the first pass warms up, and is not counted
        for mode, make in modes.items():
            with make():
                tic = time.perf_counter()
                out, stats = speculative_generate(target, draft, idx, args.tokens, k=4, temperature=1.0,
                                                  generator=torch.Generator().manual_seed(rep))
                if rep:
                    seconds[mode].append(time.perf_counter() - tic)
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), platform.processor())
    print(f"{cpu}, torch {torch.__version__}, {args.threads} threads; {args.tokens} tokens, K = 4, T = 1, "
          f"median of {args.repeats} interleaved repeats")
    base = statistics.median(seconds["no recorder"])
    for mode, times in seconds.items():
        median = statistics.median(times)
        print(f"{mode:28s} {median * 1e3:7.1f} ms  {args.tokens / median:6.0f} tok/s  {median / base - 1:+.1%}")
    sample_line(args)
    if chromium_path() is None:
        print("no Chromium: the page's open time is not measured (apt-get install -y chromium)")
        return
    with show.Recorder(detail=True) as rec:
        out, stats = speculative_generate(target, draft, idx, args.tokens, k=4, temperature=1.0,
                                          generator=torch.Generator().manual_seed(0))
    _, plain = autoregressive_generate(target, idx, 16)
    step = statistics.median(plain.target_times[1:])
    data = show.page_data(tok.decode, [(idx[0].tolist(), out[0, idx.size(1):].tolist(), rec.rounds)], "tokenwise",
                          dict(temperature=1.0, k=4), show.measured_point([stats], step))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rounds.html")
        show.write_page(path, data)
        with Chromium() as browser:
            opens = [browser.open(f"file://{path}") for _ in range(5)]
            assert not browser.errors, browser.errors
        size = os.path.getsize(path)
    print(f"the --trace page of {args.tokens} tokens ({len(data['rounds'])} rounds, {size / 1024:.0f} KiB): opened in "
          f"{statistics.median(opens):.3f} s (median of 5, headless Chromium, navigation to load event)")
    m = data["measured"]
    print(f"that run, as its page shows it: alpha {m['alpha']}, K {m['K']}, c {m['c']}, v {m['v']}, "
          f"speedup over plain sampling {m['speedup']}x (one run, not a median)")


if __name__ == "__main__":
    main()
