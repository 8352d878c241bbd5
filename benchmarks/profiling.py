"""
bench.py --profile: where the time goes. Forwards back to back (one token, K + 1 tokens, a draft step: the best case
for c and v) and cProfile of one speculative run; for a GGUF target first its weight formats against the memory's
roof (benchmarks/formats.py).
"""

import statistics
import time

import torch

from benchmarks.common import SETTINGS
from speculative import speculative_generate


def shipped_answers(llama):  # -> the rows of checkpoints/NAME/answers.pt (train_draft.pack_answers), or None
    import os
    from drafts import heads
    path = os.path.join(heads.ROOT, "checkpoints", getattr(llama, "name", "") or "-", "answers.pt")
    if not os.path.exists(path):
        return None
    from train_draft import read_answers
    return read_answers(path)["rows"]


@torch.no_grad()
def profile(args, target, draft, prompts):
    """Where the time goes. 1) Forwards back to back on a cache holding the prompt, with 1 and 2 threads: one
    token vs K+1 tokens (the best case for v) and the draft's step (for c). 2) cProfile of speculative_generate
    at the first K and setting, the 12 functions with the most time of their own."""
    import cProfile
    import pstats
    import sys
    K = next((k for k in args.k if k != "auto"), 4)  # the first fixed K (4 if only auto was asked for)
    prompt, threads = prompts[0], torch.get_num_threads()
    llama = getattr(target, "model", target)  # engine/llama.py's FastLlama wraps the Llama it runs
    if hasattr(llama, "rope"):  # a Llama (a GGUF target): every weight format, beside the roof
        from benchmarks.formats import drift_table, format_table, kernel_table, step_ops, vocab_table
        formats, bandwidth = format_table(llama, prompt)
        kernels = kernel_table(llama)
        ops = step_ops(llama, prompt)
        drift = drift_table(llama, prompts[:4])
        vocabs, step_ms = vocab_table(llama, prompt, answers=shipped_answers(llama))
        if args.json:  # beside the sweep's rows: notebook 08 and the README read the formats from here
            import json
            import os
            from benchmarks.common import machine
            with open(os.path.splitext(args.json)[0] + "_formats.json", "w") as fh:
                json.dump(dict(target=llama.about, machine=machine(), threads=torch.get_num_threads(),
                               prompt_tokens=prompt.size(1), bandwidth_gb_s=bandwidth / 1e9, formats=formats,
                               kernels=kernels, step_ops=ops,
                               drift=drift, vocabs=vocabs, vocab_step_ms=step_ms), fh, indent=1)

    def forward_ms(model, n, repeats=50):  # median ms of a forward of n tokens after the prompt
        model.reset_cache()
        model(prompt, use_cache=True)
        tokens, times = prompt[:, :1].repeat(1, n), []  # which tokens does not matter for the time
        for _ in range(repeats):
            tic = time.perf_counter()
            model(tokens, use_cache=True)
            if tokens.is_cuda:
                torch.cuda.synchronize()  # honest timings: wait for the GPU
            times.append(time.perf_counter() - tic)
            model.crop(prompt.size(1))
        return 1e3 * statistics.median(times)

    W = min(target.config.block_size, draft.config.block_size)
    prompt = prompt[:, :max(1, W - K - 1)]  # leave room in the cache for K+1 more tokens
    print(f"\nforwards back to back, after a {prompt.size(1)}-token prompt (median of 50):")
    for n_threads in (1, 2) if prompt.size(1) + K + 1 <= W else ():
        torch.set_num_threads(n_threads)
        step, wide, drafted = forward_ms(target, 1), forward_ms(target, K + 1), forward_ms(draft, 1)
        print(f"  {n_threads} thread(s): target 1 token {step:.2f} ms, {K + 1} tokens {wide:.2f} ms (v = {wide / step:.2f}); "
              f"draft 1 token {drafted:.3f} ms (c = {drafted / step:.3f})")
    torch.set_num_threads(threads)
    sampling, gen = SETTINGS[args.settings[0]], torch.Generator(device=args.device)
    prof = cProfile.Profile()
    prof.enable()
    for i, p in enumerate(prompts):
        speculative_generate(target, draft, p, args.max_new_tokens, k=K, generator=gen.manual_seed(i), **sampling)
    prof.disable()
    print(f"cProfile of speculative_generate, K={K}, {args.settings[0]}, {len(prompts)} prompts:")
    pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(12)  # file names only
