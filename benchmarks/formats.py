"""
bench.py --target smollm2 --profile: the Llama's weight formats (engine/llama.py) against the memory's roof.

For each format: the one-token step in ms after a prompt, v at 2, 3, 5, 9 and 17 tokens (a forward of n tokens over
the one-token step: what a round's verification costs), the bytes of weights a step reads, and the roof, those
bytes over this CPU's read bandwidth measured in the same run: no step can beat one read of its weights. The
readable Llama (eager, float32) is the first row. Formats are timed interleaved, a round of every format per
repeat, so a slow spell of a shared machine hits them alike; each number is the median. Last, a prompt of READ
tokens read two ways: in one forward of the format's own kernels, and as the samplers read it (a weight-only format
fills the cache through the float32 weights, then scores the last token in its own: engine/llama.py's fill).
"""

import statistics
import time

import torch

from engine.llama import FastLlama, int8_rows, runnable_formats

WIDTHS = (2, 3, 5, 9, 17)  # forwards of n tokens: a round of K = n - 1 drafts
READ = 256  # a prompt's tokens, for the time of its read


def read_bandwidth(mb=512, repeats=5):  # -> bytes per second this CPU reads: a sum over a tensor larger than its caches
    x = torch.ones(mb * 2 ** 20 // 4)
    x.sum()
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - tic)
    return x.numel() * 4 / min(times)


def weight_bytes_eager(model):  # the readable model reads every parameter once per step (the tied head once)
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.no_grad()
def format_table(target, prompt, repeats=7, formats=None):
    """-> rows (dict per format: step_ms, v at WIDTHS, bytes, roof_ms, roof share) and the bandwidth, printed."""
    formats = formats or runnable_formats()
    bandwidth = read_bandwidth()
    models = {"eager float32": target} | {f: FastLlama(target, f) for f in formats}
    times = {name: {n: [] for n in (1, *WIDTHS)} for name in models}
    P = prompt.size(1)
    for model in models.values():  # warm up every shape once: the first call of a kernel sets it up
        model.reset_cache()
        model(prompt, use_cache=True)
        for n in (1, *WIDTHS):
            model(prompt[:, :1].repeat(1, n), use_cache=True)
            model.crop(P)
    for _ in range(repeats):
        for name, model in models.items():
            for n in (1, *WIDTHS):
                tokens = prompt[:, -1:].repeat(1, n)  # which tokens does not matter for the time
                tic = time.perf_counter()
                model(tokens, use_cache=True)
                times[name][n].append(time.perf_counter() - tic)
                model.crop(P)
    reads = {name: ([], []) for name in models}  # seconds: one forward of the format's own; as the samplers read
    ids = prompt[:, -1:].repeat(1, READ)
    for _ in range(3):
        for name, model in models.items():
            for way, seconds in zip(("own", "samplers"), reads[name]):
                model.reset_cache()
                tic = time.perf_counter()
                if way == "samplers" and getattr(model, "prefills", False):
                    model.fill(ids[:, :-1])
                    model(ids[:, -1:], use_cache=True)
                else:
                    model(ids, use_cache=True)
                seconds.append(time.perf_counter() - tic)
    rows = []
    for name, model in models.items():
        step = statistics.median(times[name][1])
        nbytes = weight_bytes_eager(model) if name == "eager float32" else model.weight_bytes()
        rows.append(dict(format=name, step_ms=1e3 * step, tok_s=1 / step,
                         v={n: statistics.median(times[name][n]) / step for n in WIDTHS},
                         weight_mb=nbytes / 1e6, roof_ms=1e3 * nbytes / bandwidth,
                         roof_share=nbytes / bandwidth / step, read_own_ms=1e3 * statistics.median(reads[name][0]),
                         read_ms=1e3 * statistics.median(reads[name][1])))
    print(f"\nthe target's formats (engine/llama.py), after a {P}-token prompt, median of {repeats} interleaved; "
          f"read bandwidth {bandwidth / 1e9:.1f} GB/s, {torch.get_num_threads()} threads")
    print("| format | one-token step | tok/s | " + " | ".join(f"v({n})" for n in WIDTHS) +
          f" | weights read per step | roof (weights / bandwidth) | share of the roof | a {READ}-token prompt read in one "
          "forward of its kernels | as the samplers read it |")
    print("|---|---|---|" + "---|" * len(WIDTHS) + "---|---|---|---|---|")
    for r in rows:
        print(f"| {r['format']} | {r['step_ms']:.1f} ms | {r['tok_s']:.1f} | " +
              " | ".join(f"{r['v'][n]:.2f}" for n in WIDTHS) +
              f" | {r['weight_mb']:.0f} MB | {r['roof_ms']:.1f} ms | {100 * r['roof_share']:.0f}% | "
              f"{r['read_own_ms']:.0f} ms | {r['read_ms']:.0f} ms |")
    return rows, bandwidth


def int8_both(w):  # (N, K) float -> (int8 (K, N), scales (N,)): the weights of the w8a8 route, int8_rows' rounding
    q, scale = int8_rows(w)
    return q[:, :w.size(1)].t().contiguous(), scale.float()  # _int_mm takes (K, N), unpadded


def w8a8(x, w):  # x (M, K) float, int8_both's w -> (M, N): activations quantized per row, integers summed (_int_mm)
    q, scale = w
    a = x.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127.0  # one scale per row of activations
    return torch._int_mm(torch.round(x / a).to(torch.int8), q).float() * a * scale  # exact integer sums per row


def kernel_routes(target):  # -> ({route: (every block matrix in it, product(x, w)) or why this CPU lacks it}, K's)
    from torch.nn import functional as F
    from engine.llama import matmul
    of = lambda fmt: [w for layer in FastLlama(target, fmt).layers for w in (layer[1], layer[2], layer[4], layer[5])]
    floats = of("float32")  # (N, K) each: qkv, proj, gate and up, down, layer after layer
    routes = {"int4 (_weight_int4pack_mm_for_cpu)": (of("int4"), lambda x, w: matmul("int4", x, w)),
              "int8 weights (_weight_int8pack_mm)": (of("int8"), lambda x, w: matmul("int8", x, w)),
              "int8 weights and activations (_int_mm)": ([int8_both(w) for w in floats], w8a8),
              "bfloat16 (F.linear)": ([w.to(torch.bfloat16) for w in floats],
                                      lambda x, w: F.linear(x.to(torch.bfloat16), w)),
              "float32 (F.linear)": (floats, F.linear)}
    from engine.blocks import unavailable
    name = "q4_1 (engine/blocks.cpp)"  # the file's Q4_1 blocks as stored, float32 activations: our kernel
    routes[name] = unavailable() or (of("q4_1"), lambda x, w: matmul("q4_1", x, w))
    name = "bfloat16 prepacked (mkldnn._linear_pointwise)"
    try:  # oneDNN's prepacked bfloat16 weights: CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT
        packed = [torch.ops.mkldnn._reorder_linear_weight(w.to(torch.bfloat16), None) for w in floats]
        routes[name] = (packed, lambda x, w: torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), w, None, "none",
                                                                                [], ""))
    except RuntimeError as e:
        routes[name] = str(e).splitlines()[0]
    return routes, [w.size(1) for w in floats]


@torch.no_grad()
def kernel_table(target, widths=(1, *WIDTHS), repeats=5):
    """The matrix products alone, by route: every block matrix of the target (4 a layer) for a forward of n rows,
    the one-row time and v(n) = n rows over one, and whether each row of a 9-row product equals that row's one-row
    product bit for bit (what keeps greedy speculative equal to greedy plain). Interleaved, median of `repeats`.
    What a route costs beyond its products (attention, norms, casts) is format_table's. -> rows, printed."""
    routes, inners = kernel_routes(target)
    ready = {name: r for name, r in routes.items() if not isinstance(r, str)}
    x = {n: torch.randn(n, max(inners)) for n in widths}  # each matrix reads the first K columns

    def run(name, n):
        weights, product = ready[name]
        for w, K in zip(weights, inners):
            product(x[n][:, :K], w)
    times = {name: {n: [] for n in widths} for name in ready}
    for name in ready:  # warm up every shape once
        for n in widths:
            run(name, n)
    for _ in range(repeats):
        for name in ready:
            for n in widths:
                tic = time.perf_counter()
                run(name, n)
                times[name][n].append(time.perf_counter() - tic)
    rows = []
    for name, route in routes.items():
        if isinstance(route, str):
            rows.append(dict(route=name, unavailable=route))
            continue
        weights, product = route
        nine = x[9]
        equal = all(torch.equal(product(nine[i:i + 1, :K], w), product(nine[:, :K], w)[i:i + 1])
                    for w, K in zip(weights[:4], inners) for i in range(9))  # the first layer's four matrices
        step = statistics.median(times[name][1])
        rows.append(dict(route=name, step_ms=1e3 * step, rows_equal=equal,
                         v={n: statistics.median(times[name][n]) / step for n in widths if n > 1}))
    print(f"\nthe matrix products alone, by route: the {len(inners)} block matrices of a forward, median of {repeats} "
          f"interleaved, {torch.get_num_threads()} threads")
    print("| route | one row | " + " | ".join(f"v({n})" for n in widths if n > 1) + " | rows equal to one-row products |")
    print("|---|---|" + "---|" * (len(widths) - 1) + "---|")
    for r in rows:
        if "unavailable" in r:
            print(f"| {r['route']} | not on this CPU: {r['unavailable']} |" + " |" * len(widths))
        else:
            print(f"| {r['route']} | {r['step_ms']:.1f} ms | " + " | ".join(f"{v:.2f}" for v in r["v"].values())
                  + f" | {'yes' if r['rows_equal'] else 'no'} |")
    return rows


@torch.no_grad()
def step_ops(target, prompt, fmt="int4", steps=20, top=12):
    """Where one cached step of a format goes, by torch operation: torch's profiler over `steps` one-token steps after
    the prompt, each operation's own time (self CPU) and calls per step, the `top` dearest, then the rest summed, beside
    the step's wall time unprofiled (the profiler adds its own cost to every call). -> dict, printed."""
    from torch.profiler import ProfilerActivity, profile
    fast, P = FastLlama(target, fmt), prompt.size(1)
    fast.reset_cache()
    fast(prompt, use_cache=True)
    token = prompt[:, -1:]

    def run():
        for _ in range(steps):
            fast(token, use_cache=True)
            fast.crop(P)
    run()  # warm up
    tic = time.perf_counter()
    run()
    wall = (time.perf_counter() - tic) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    ops = sorted(((e.key, e.self_cpu_time_total / 1e3 / steps, e.count / steps) for e in prof.key_averages()),
                 key=lambda r: -r[1])
    rest = ops[top:]
    out = dict(format=fmt, wall_ms=1e3 * wall, profiled_ms=sum(r[1] for r in ops), ops=[
        dict(op=name, ms=ms, calls=calls) for name, ms, calls in ops[:top]],
        rest_ms=sum(r[1] for r in rest), rest_calls=sum(r[2] for r in rest), rest_ops=len(rest))
    print(f"\none {fmt} step by torch operation: {out['wall_ms']:.1f} ms a step unprofiled, {out['profiled_ms']:.1f} ms "
          f"of operations' own time profiled ({steps} steps after a {P}-token prompt)")
    print("| operation | ms a step | calls a step |")
    print("|---|---|---|")
    for r in out["ops"]:
        print(f"| {r['op']} | {r['ms']:.2f} | {r['calls']:.0f} |")
    print(f"| the other {out['rest_ops']} operations | {out['rest_ms']:.2f} | {out['rest_calls']:.0f} |")
    return out


@torch.no_grad()
def drift(fast, prompt, new_tokens=48, width=5):
    """How far a (width)-token verification forward's p is from the one-token step's at the same positions, in a
    format: the prompt, then `new_tokens` greedy tokens fed one at a time (plain decoding) and again `width` at a
    time (the forwards a round of K = width - 1 drafts makes). -> dict: the share of rows equal bit for bit, the
    total variation distance between the two p at T = 1 (median, max), and the positions where the two argmaxes
    differ with the step's margin between its top two logits there."""
    fast.reset_cache()
    logits = fast(prompt, use_cache=True)[0][0, -1]
    steps, tokens = [], []
    for _ in range(new_tokens):  # plain greedy decoding: each row is a one-token step
        tokens.append(int(logits.argmax()))
        logits = fast(torch.tensor([[tokens[-1]]]), use_cache=True)[0][0, -1]
        steps.append(logits)
    fast.reset_cache()
    fast(prompt, use_cache=True)
    wide = torch.cat([fast(torch.tensor([tokens[i:i + width]]), use_cache=True)[0][0]
                      for i in range(0, new_tokens, width)])  # (new_tokens, V): the same rows, `width` at a time
    steps = torch.stack(steps)
    tv = 0.5 * (steps.softmax(-1) - wide.softmax(-1)).abs().sum(-1)  # (new_tokens,)
    parted = (steps.argmax(-1) != wide.argmax(-1)).nonzero().flatten().tolist()
    top2 = steps.topk(2, dim=-1).values
    return dict(equal=(steps == wide).all(-1).float().mean().item(), tv_median=tv.median().item(),
                tv_max=tv.max().item(), parted=[(i, (top2[i, 0] - top2[i, 1]).item()) for i in parted])


def drift_table(target, prompts, formats=None, width=5):
    """drift() of every format over the prompts, printed: is speculative sampling's verification computing the
    plain step's p in this format, and where not, how far from it."""
    print(f"\nthe verification's p against the one-token step's, {width} tokens a forward, greedy continuations of "
          f"{len(prompts)} prompts (docs/exactness.md, 'Low precision'):")
    print("| format | rows equal bit for bit | TV(p_step, p_verify) median | max | "
          "argmax differs (step's top-2 margin) |")
    print("|---|---|---|---|---|")
    rows = []
    for fmt in formats or runnable_formats():
        fast = FastLlama(target, fmt)
        runs = [drift(fast, p, width=width) for p in prompts]
        tv = sorted(r["tv_median"] for r in runs)
        parted = [m for r in runs for _, m in r["parted"]]
        rows.append(dict(format=fmt, equal=statistics.mean(r["equal"] for r in runs), tv_median=statistics.median(tv),
                         tv_max=max(r["tv_max"] for r in runs), parted=parted))
        r = rows[-1]
        print(f"| {fmt} | {100 * r['equal']:.0f}% | {r['tv_median']:.1e} | {r['tv_max']:.1e} | "
              + (", ".join(f"{m:.3f}" for m in parted) if parted else "none") + " |")
    return rows


VOCABS = (2048, 4096, 8192, 16384)  # a head's vocabularies to weigh (drafts/heads.py draft_vocab)
# how a head runs (drafts/heads.py rows_in's arguments): all in float32; its LM-head rows in int8; those and its own
# blocks in int8, as engine/fast.py with_decoder runs it beside an int8 or int4 target
HEAD_FORMATS = {"float32": ("float32", False), "int8": ("int8", False), "int8_blocks": ("int8", True)}


@torch.no_grad()
def vocab_table(target, prompt, kind="eagle3", vocabs=VOCABS, answers=None, repeats=30):
    """A head's draft vocabulary, coverage against cost: for each size V', the share of the held-out answers' tokens
    the V' tokens the training answers use most cover (train_draft.py's rule; answers: the shipped answers' rows, or
    None), and a draft step of an untrained head of that kind over V' tokens in each of HEAD_FORMATS (float32; its
    LM-head rows in int8; those and its blocks in int8) as a round runs it (the forward, then q over its vocabulary
    and one draw, right after a target step, whose weights have pushed the head's out of the caches), against the
    target's int4 step: c. Median of `repeats`. -> rows, printed."""
    import speculative
    from drafts import heads
    from train_draft import choose_vocab, coverage, split_answers
    V = target.config.vocab_size
    if answers:
        train, held = ([ids[start:] for start, ids in part] for part in split_answers(answers))
    fast, P = FastLlama(target, "int4"), prompt.size(1)
    fast.reset_cache()
    fast(prompt, use_cache=True)
    vocab_of = {n: choose_vocab(train, n, V) if answers else torch.arange(n) for n in vocabs}
    made = {}
    for n in vocabs:
        for fmt in HEAD_FORMATS:  # a head each: its rows (and blocks) are made once, as in a run
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                head = heads.KINDS[kind][0](target, draft_vocab=n).rows_in(*HEAD_FORMATS[fmt])
            head.set_vocab(vocab_of[n])
            head.reset_cache()
            head(prompt, use_cache=True)
            made[n, fmt] = head
    probs, g = lambda logits: speculative.sampling_probs(logits, 1.0), torch.Generator().manual_seed(0)

    def draft_step(head):  # after the target's step, as in a round: the target's weights have left the caches
        head.crop(P)
        logits = head(prompt[:, -1:], use_cache=True)[0][0, -1]
        speculative.draw(speculative.draft_probs(logits, probs, 0, [], 0, head.support), g, head.support)

    def target_step():
        fast.crop(P)
        fast(prompt[:, -1:], use_cache=True)

    times = {name: [] for name in ["target", *made]}
    for rep in range(repeats + 1):
        for key, head in made.items():  # each draft step right after a target step, as in a round
            for name, call in (("target", target_step), (key, lambda: draft_step(head))):
                tic = time.perf_counter()
                call()
                if rep:  # the first round warms every shape up
                    times[name].append(time.perf_counter() - tic)
    step = statistics.median(times["target"])
    rows = [dict(vocab=n, coverage=coverage(vocab_of[n], held, V) if answers else float("nan"),
                 **{f"{fmt}_ms": 1e3 * statistics.median(times[n, fmt]) for fmt in HEAD_FORMATS},
                 **{f"c_{fmt}": statistics.median(times[n, fmt]) / step for fmt in HEAD_FORMATS})
            for n in vocabs]
    print(f"\na draft step of an {kind} head by its vocabulary (drafts/heads.py): the forward, q over its vocabulary and "
          f"one draw, each right after a target step, median of {repeats}, against the int4 target's step of {1e3 * step:.1f} ms (c); "
          "coverage: the share of the held-out answers' tokens in the vocabulary the training answers choose"
          + ("" if answers else " (no answers here: checkpoints/smollm2/answers.pt)"))
    print("| vocabulary | coverage of held-out answers | step, float32 | c | step, int8 rows | c | step, int8 rows and "
          "blocks (as beside int8, int4) | c |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        covered = "-" if r["coverage"] != r["coverage"] else f"{100 * r['coverage']:.1f}%"
        print(f"| {r['vocab']:,} | {covered} | "
              + " | ".join(f"{r[fmt + '_ms']:.2f} ms | {r['c_' + fmt]:.3f}" for fmt in HEAD_FORMATS) + " |")
    return rows, 1e3 * step
