"""
Draw the README's picture of real rounds: the shipped pair samples a few lines (seeded, K = 6, temperature 1), each
token coloured as sample.py --show rounds colours it (show.rounds_html), and headless Chromium photographs the
HTML. Needs Debian's chromium (apt-get install -y chromium).

    python scripts/round_picture.py                        # writes docs/rounds.png
    python scripts/round_picture.py --out runs/rounds.png --max_new_tokens 200 --seed 4
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
from tests.browser import chromium_path  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "rounds.png"), help="the PNG to write")
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


if __name__ == "__main__":
    main()
