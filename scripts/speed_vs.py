"""
Is the working tree slower than another commit? Both run in one process, alternating, and a sign test says
whether the difference is beyond the machine's noise. Run it before committing a change that could cost speed.

    python scripts/speed_vs.py 380a584                   # the working tree against that commit: K = 4, T = 1
    python scripts/speed_vs.py HEAD --k 6 --rounds 16     # uncommitted changes against the last commit
    python scripts/speed_vs.py HEAD --k auto --settings t0

Why one process: on a 2-core machine the same configuration ran at 547 tokens/s in one run and 748 in another
minutes later, and one pair of runs showed a tree 5-10% slower that three alternations in one run showed equal.
So the commit is unpacked into a temporary folder (git archive), each tree's own modules (bench, speculative,
model, engine ...) are imported into a set of their own (sys.modules is swapped around every call, so neither
tree sees the other's code), each loads its own shipped pair, and then, round after round, every held-out prompt
runs with plain sampling and with speculative sampling under each tree, the trees' order alternating.

Per round and tree: the speedup (its speculative tokens/s over its own plain tokens/s, the same prompts), c (a
draft step / a target step) and v (a (K+1)-token target forward / a target step). The verdict compares the
working tree's speedup with the other's round by round: "beyond noise" when a two-sided sign test over the rounds
rejects "either is as likely to be faster" at 5% (with 12 rounds: 10 or more of 12 one way). The middle half of
the per-round ratios is the spread; a change inside it cannot be told from noise by this run, whatever the median.
"same tokens" says whether both trees drew the same tokens with the same seeds (fixed K only: auto's K follows
the clock), i.e. whether the change left the output alone.

What it leaves out: drafts other than the shipped pair's (run bench.py --draft NAME on each tree for those), and
the GPU (it times wherever torch runs: pass --device cuda there).
"""

import argparse
import atexit
import contextlib
import importlib
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the working tree
SETTINGS = {"t0": dict(temperature=0.0), "t1.0": dict(temperature=1.0)}


class Tree:
    """One version of the project, its modules imported into a set of their own. with tree.active(): code that
    imports at call time (drafts, verifiers) finds this tree's modules."""

    def __init__(self, root, label):
        self.root, self.label, self.modules = root, label, {}
        TREES.append(self)
        with self.active():
            self.bench = importlib.import_module("bench")  # bench imports the rest: speculative, model, engine ...
            self.speculative = importlib.import_module("speculative")

    def ours(self, module, root=None):  # -> is this module a file of this tree (or of root; this script aside)?
        # subtle: by its top-level name too, not its folder alone: a venv inside the checkout (CI's .venv-ci) holds
        # torch under the same folder, and torch must never be imported twice
        root = root or self.root
        path = os.path.abspath(getattr(module, "__file__", None) or os.sep)
        name = (getattr(module, "__name__", None) or "").split(".")[0]
        return (name in project_names(root) and path.startswith(root + os.sep)
                and path != os.path.abspath(__file__))

    @contextlib.contextmanager
    def active(self):
        # every tree's modules out of the way, the working tree's too: a caller (pytest) may have imported them
        away = {name: m for name, m in sys.modules.items() if self.ours(m, ROOT) or any(t.ours(m) for t in TREES)}
        for name in away:
            del sys.modules[name]
        sys.modules.update(self.modules)
        sys.path.insert(0, self.root)
        try:
            yield self
        finally:
            sys.path.remove(self.root)
            self.modules = {name: m for name, m in sys.modules.items() if self.ours(m)}
            for name in self.modules:
                del sys.modules[name]
            sys.modules.update(away)


TREES = []  # every Tree made, so each can move the others' modules out of the way


def project_names(root, known={}):  # -> the top-level modules of a tree: its .py files and packages
    if root not in known:
        entries = os.listdir(root)
        known[root] = ({e[:-3] for e in entries if e.endswith(".py")}
                       | {e for e in entries if os.path.isfile(os.path.join(root, e, "__init__.py"))})
    return known[root]


def unpack(commit):  # -> (folder holding the commit's files, its short hash); SystemExit with what to do
    if not in_git_checkout():
        raise SystemExit("speed_vs: this folder is not a git checkout (an export has no history to compare with): "
                         "run it in a clone of the repository")
    try:
        short = subprocess.run(["git", "rev-parse", "--short", commit + "^{commit}"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise SystemExit(f"speed_vs: {commit!r} is not a commit of this repository (git rev-parse failed); "
                         f"pass a hash, a tag or HEAD, e.g. 'python scripts/speed_vs.py HEAD'") from e
    folder = os.path.realpath(tempfile.mkdtemp(prefix=f"speed_vs_{short}_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    archive = subprocess.run(["git", "archive", "--format=tar", short], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return folder, short


def in_git_checkout():
    try:
        return subprocess.run(["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True).returncode == 0
    except FileNotFoundError:  # no git at all
        return False


def sign_test(wins, n):  # -> two-sided p of `wins` of n under "each round is a coin flip"
    low = min(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(low + 1)) / 2 ** n)


def quartiles(values):  # -> (first, third) quartile, or the values themselves when fewer than 4
    values = sorted(values)
    if len(values) < 4:
        return values[0], values[-1]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def steady(times):  # seconds per forward after the first (the prompt's read), as bench.py measures c and v
    return statistics.median(times[1:]) if len(times) > 1 else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("commit", help="the commit to compare the working tree with (hash, tag, HEAD)")
    ap.add_argument("--k", default="4", help="draft tokens per round: an int, or auto")
    ap.add_argument("--settings", default="t1.0", choices=sorted(SETTINGS), help="sampling setting")
    ap.add_argument("--rounds", type=int, default=12, help="alternations; each runs every prompt under both trees")
    ap.add_argument("--prompts", type=int, default=4, help="held-out prompts per round")
    ap.add_argument("--max_new_tokens", type=int, default=128, help="tokens per call")
    ap.add_argument("--decoder", default="fast", help="fast, eager or fast-bf16 (engine/fast.py), in both trees")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: one per idle core)")
    args = ap.parse_args(argv)
    if args.k != "auto" and not (args.k.isdigit() and int(args.k) >= 1):
        ap.error(f"--k takes an int >= 1 or auto, got {args.k!r}")
    if args.rounds < 2 or args.prompts < 1 or args.max_new_tokens < 2:
        ap.error("--rounds must be >= 2 (a sign test needs rounds), --prompts >= 1, --max_new_tokens >= 2")
    k = args.k if args.k == "auto" else int(args.k)
    folder, short = unpack(args.commit)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    here = f"working tree ({head}{' + changes' if dirty else ''})"
    trees = [Tree(folder, short), Tree(ROOT, here)]
    with trees[1].active():
        from engine.cpu import use_threads  # the working tree's thread policy, for both
        use_threads(args.threads, args.device)
    pairs, prompts = {}, None
    for tree in trees:
        with tree.active():
            b = tree.bench
            try:
                target, meta = b.load(os.path.join(tree.root, "checkpoints", "target.pt"), args.device, "target")
                draft, _ = b.load(os.path.join(tree.root, "checkpoints", "draft.pt"), args.device, "draft")
                target, draft = b.with_decoder(args.decoder, target, draft)
            except (SystemExit, KeyError, ValueError) as e:
                raise SystemExit(f"speed_vs: {tree.label} cannot load its shipped pair with --decoder "
                                 f"{args.decoder}: {e}") from e
            defaults = b.get_args([])  # bench.py's prompt length and corpus
            ids = b.held_out_prompts(b.data.Tokenizer(meta["tokenizer"]), args.prompts, defaults.prompt_len,
                                     defaults.corpus)
            prompts = prompts or [p.to(args.device) for p in ids]  # the same prompts for both (the first's)
            pairs[tree.label] = (target, draft)
            gen = torch.Generator(device=args.device)
            for fn, extra in ((tree.speculative.autoregressive_generate, ()), (tree.speculative.speculative_generate, (draft,))):
                fn(target, *extra, prompts[0], 16, generator=gen.manual_seed(0), **({"k": 4} if extra else {}))  # warm-up

    sampling = SETTINGS[args.settings]
    gen = torch.Generator(device=args.device)
    per = {tree.label: dict(speedup=[], c=[], v=[], plain=[], spec=[], tokens=[]) for tree in trees}
    tic = time.perf_counter()
    for r in range(args.rounds):
        seconds = {(tree.label, kind): 0.0 for tree in trees for kind in ("plain", "spec")}
        made = dict(seconds)
        steps = {tree.label: dict(draft=[], target=[], wide=[]) for tree in trees}
        for i, prompt in enumerate(prompts):
            for tree in (trees if r % 2 == 0 else trees[::-1]):  # alternate who goes first
                target, draft = pairs[tree.label]
                with tree.active():
                    _, plain = tree.speculative.autoregressive_generate(
                        target, prompt, args.max_new_tokens, generator=gen.manual_seed(1000 * r + i), **sampling)
                    out, spec = tree.speculative.speculative_generate(
                        target, draft, prompt, args.max_new_tokens, k=k, generator=gen.manual_seed(1000 * r + i),
                        **sampling)
                for kind, s in (("plain", plain), ("spec", spec)):
                    seconds[tree.label, kind] += s.total_time
                    made[tree.label, kind] += s.new_tokens
                steps[tree.label]["target"].append(steady(plain.target_times))
                steps[tree.label]["draft"].append(steady(spec.draft_times))
                steps[tree.label]["wide"].append(steady(spec.target_times))
                per[tree.label]["tokens"].append(out[0].tolist())
        for tree in trees:
            p, s = per[tree.label], steps[tree.label]
            p["plain"].append(made[tree.label, "plain"] / seconds[tree.label, "plain"])
            p["spec"].append(made[tree.label, "spec"] / seconds[tree.label, "spec"])
            p["speedup"].append(p["spec"][-1] / p["plain"][-1])
            step = statistics.median(s["target"])
            p["c"].append(statistics.median(s["draft"]) / step)
            p["v"].append(statistics.median(s["wide"]) / step)
    took = time.perf_counter() - tic

    with trees[1].active():
        machine = trees[1].bench.machine()
    print(f"{here} against {short}: the shipped pair, K = {args.k}, {args.settings}, {args.decoder} decoder, "
          f"{args.prompts} prompts x {args.max_new_tokens} tokens, {args.rounds} rounds alternating in one process "
          f"({took:.0f} s); {machine}")
    print("| tree | plain tok/s | speculative tok/s | speedup | its middle half | c | its middle half | v | "
          "its middle half |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tree in trees:
        p = per[tree.label]
        cells = [f"{statistics.median(p['plain']):.0f}", f"{statistics.median(p['spec']):.0f}"]
        for key, fmt in (("speedup", ".2f"), ("c", ".3f"), ("v", ".2f")):
            q1, q3 = quartiles(p[key])
            cells += [f"{statistics.median(p[key]):{fmt}}", f"{q1:{fmt}}-{q3:{fmt}}"]
        print(f"| {tree.label} | " + " | ".join(cells) + " |")
    mine, theirs = per[here]["speedup"], per[short]["speedup"]
    ratios = [a / b for a, b in zip(mine, theirs)]
    wins = sum(x > 1 for x in ratios)
    p_value = sign_test(wins, len(ratios))
    q1, q3 = quartiles(ratios)
    verdict = ("beyond noise: the working tree is " + ("faster" if wins > len(ratios) / 2 else "SLOWER")
               if p_value < 0.05 else "within noise")
    print(f"speedup ratio, working tree / {short}: median {statistics.median(ratios):.3f}, middle half "
          f"{q1:.3f}-{q3:.3f}; faster in {wins} of {len(ratios)} rounds (sign test p = {p_value:.2g}): {verdict}")
    if k != "auto":
        same = per[here]["tokens"] == per[short]["tokens"]
        print(f"same tokens with the same seeds: {'yes' if same else 'no (the change alters what is sampled)'}")
    return dict(ratios=ratios, p=p_value, verdict=verdict, per=per)


if __name__ == "__main__":
    main()
