"""
Draw the pictures of real rounds that the README and docs show, both from the shipped pair (seeded, temperature 1):

- docs/rounds.png: a few lines, each token coloured as sample.py --show rounds colours it (show.rounds_html);
- docs/trace_page.png: the page sample.py --trace writes, opened at the run's first round with a rejection.

Headless Chromium photographs both; needs Debian's chromium (apt-get install -y chromium).

    python scripts/round_picture.py                        # writes docs/rounds.png and docs/trace_page.png
    python scripts/round_picture.py --out runs/rounds.png --page_out runs/page.png --max_new_tokens 200 --seed 4
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import show  # noqa: E402
from data import Tokenizer  # noqa: E402
from model import SHIPPED, load_checkpoint  # noqa: E402
from speculative import speculative_generate  # noqa: E402
from tests.browser import Chromium, chromium_path  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "rounds.png"), help="the PNG to write")
    ap.add_argument("--page_out", default=os.path.join(ROOT, "docs", "trace_page.png"), help="the page's PNG")
    ap.add_argument("--start", default="ROMEO:\n", help="the prompt")
    ap.add_argument("--max_new_tokens", type=int, default=150)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    if chromium_path() is None:
        raise SystemExit("no Chromium here: apt-get install -y chromium")
    torch.set_num_threads(1)
    target, meta = load_checkpoint(SHIPPED["target"])
    draft, _ = load_checkpoint(SHIPPED["draft"])
    tok = Tokenizer(meta["tokenizer"])
    prompt = tok.encode(args.start)
    with show.Recorder() as rec:
        out, stats = speculative_generate(target, draft, torch.tensor([prompt]), args.max_new_tokens, k=args.k,
                                          temperature=1.0, generator=torch.Generator().manual_seed(args.seed))
    body = show.rounds_html(tok.decode, prompt, out[0, len(prompt):].tolist(), rec.rounds)
    caption = (f"checkpoints/target.pt with checkpoints/draft.pt, K = {args.k}, temperature 1, seed {args.seed}: "
               f"{stats.new_tokens} tokens in {len(stats.rounds)} target calls")
    page = (f'<html><body style="margin:12px;font-family:sans-serif;background:white">{body}'
            f'<div style="font-size:12px;color:#656d76;margin-top:6px">{caption}</div></body></html>')
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rounds.html")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(page)
        subprocess.run([chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={os.path.join(folder, 'profile')}", f"--screenshot={os.path.abspath(args.out)}",
                        "--window-size=760,215", f"file://{path}"], check=True, capture_output=True, timeout=120)
    print(f"wrote {args.out}: {caption}")
    photograph_page(args)


def photograph_page(args):
    """sample.py --trace, as a user runs it, then the page in the browser at its first round with a rejection."""
    with tempfile.TemporaryDirectory() as folder:
        page = os.path.join(folder, "trace.html")
        subprocess.run([sys.executable, os.path.join(ROOT, "sample.py"), "--trace", page, "--num_samples", "1",
                        "--max_new_tokens", "300", "--k", str(args.k), "--seed", str(args.seed),
                        "--temperature", "1.0", "--start", args.start], check=True, capture_output=True, timeout=600)
        with Chromium(width=1024, height=768) as browser:  # the window the page is laid out for (a projector's)
            seconds = browser.open("file://" + page)
            first = browser.evaluate("R.findIndex(r => r.drafts !== null && r.kept < r.K)")
            browser.evaluate(f"show({max(first, 0)})")
            browser.screenshot(os.path.abspath(args.page_out))
            where = browser.evaluate("document.getElementById('where').textContent")
            assert browser.errors == [], browser.errors
    print(f"wrote {args.page_out}: {where}; the page of 300 tokens opened in {seconds:.3f} s")


if __name__ == "__main__":
    main()
