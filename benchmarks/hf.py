"""
bench.py --hf: transformers beside ours on the same model (engine/hf.py): its assisted generation against ours on
the exported pair, or its plain generate() on the same GGUF file against our plain sampling; with --suite, on a
chat model's requests by category, also its prompt lookup against our lookup drafts (suite_against_hf: transformers
as one of benchmarks/peers.py's peers).
"""

import statistics
import time

import torch

import pretrained
from benchmarks.common import SETTINGS, machine
from sample import is_gguf
from speculative import autoregressive_generate, speculative_generate


def compare_with_hf(args, target, draft, prompts):
    """transformers beside ours on the same model, the same prompts (token ids) and sampling, interleaved prompt by
    prompt; greedy runs check that both give the same tokens. Both make exactly --max_new_tokens per prompt (no end
    of turn, no stop), timed from the prompt's ids to the last token; tokens/s is the median over --repeats.
    - model.GPT pair (exported by engine/hf.py): transformers' assisted generation against speculative_generate, at
      each fixed K (HF's constant schedule: exactly K drafts per round).
    - GGUF target: transformers loads the same file itself (engine/hf.load_gguf: float32, as ours) and its plain
      generate() runs against autoregressive_generate (K = 0): an independent implementation of the same model,
      so the table says how our eager Llama's speed compares, and its greedy tokens check ours."""
    from engine.hf import load_gguf, to_hf
    if is_gguf(args.target):
        hf_target, hf_draft, ks = load_gguf(pretrained.find(args.target)), None, [0]  # 0: plain sampling
        what = f"generate() vs our plain sampling, both loading the same file ({target.about}, eager decoder)"
    else:
        hf_target, hf_draft = to_hf(target), to_hf(draft).to(args.device)
        gc = hf_draft.generation_config
        gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = "constant", 0.0  # exactly K drafts
        ks = [k for k in args.k if k != "auto"]  # HF's constant schedule needs a fixed K
        what = "assisted generation vs ours, same pair, same K (constant)"
    hf_target, n = hf_target.to(args.device), args.max_new_tokens

    def ours(prompt, K, gen, sampling):  # -> (prompt and new tokens (1, T + n), seconds)
        if K == 0:
            out, s = autoregressive_generate(target, prompt, n, generator=gen, **sampling)
        else:
            out, s = speculative_generate(target, draft, prompt, n, k=K, generator=gen, **sampling)
        return out, s.total_time

    def theirs(prompt, K, hf_kw):  # -> (prompt and new tokens (1, T + n), seconds)
        tic = time.perf_counter()
        out = hf_target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                 pad_token_id=0, eos_token_id=None,  # None: no end of turn, so n tokens
                                 **(dict(assistant_model=hf_draft) if K else {}), **hf_kw)
        return out, time.perf_counter() - tic

    rows = []
    for name in args.settings:
        sampling = SETTINGS[name]
        hf_kw = dict(do_sample=False) if sampling["temperature"] == 0 else dict(
            do_sample=True, temperature=sampling["temperature"], top_p=sampling.get("top_p", 1.0), top_k=0)
        for K in ks:
            if K:
                hf_draft.generation_config.num_assistant_tokens = K
            ours(prompts[0][:, :8], K, torch.Generator(device=args.device), sampling)  # warm-up: kernels, allocator
            theirs(prompts[0][:, :8], K, hf_kw)
            ours_tps, hf_tps, same = [], [], True
            for rep in range(args.repeats):
                t_ours = t_hf = 0.0
                for i, prompt in enumerate(prompts):
                    out, seconds = ours(prompt, K, torch.Generator(device=args.device).manual_seed(1000 * rep + i),
                                        sampling)
                    t_ours += seconds
                    torch.manual_seed(1000 * rep + i)
                    hf_out, seconds = theirs(prompt, K, hf_kw)
                    t_hf += seconds
                    same = same and (sampling["temperature"] != 0 or torch.equal(out, hf_out))
                ours_tps.append(n * len(prompts) / t_ours)
                hf_tps.append(n * len(prompts) / t_hf)
            rows.append(dict(setting=name, K=K, ours_tps=statistics.median(ours_tps), hf_tps=statistics.median(hf_tps),
                             greedy_outputs_equal=same if sampling["temperature"] == 0 else None))
    import transformers
    print(f"\nHF transformers {transformers.__version__} {what}; {len(prompts)} prompts x {n} new tokens, median of "
          f"{args.repeats}; device {args.device}; {machine()}:")
    print("| setting | K | ours tok/s | HF tok/s | ours / HF | greedy outputs equal |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        eq = "" if r["greedy_outputs_equal"] is None else ("yes" if r["greedy_outputs_equal"] else "NO")
        print(f"| {r['setting']} | {r['K'] or 'plain'} | {r['ours_tps']:.0f} | {r['hf_tps']:.0f} | "
              f"{r['ours_tps'] / r['hf_tps']:.2f}x | {eq} |")
    return rows


def suite_against_hf(args, target, tmeta, ks=(4, 10)):
    """bench.py --target smollm2 --suite --hf: transformers as a peer on the suite's requests (benchmarks/peers.py
    suite_against_peer: interleaved prompt by prompt, the same file, prompt ids and sampling): its plain generate()
    against our plain sampling in --decoder's format, and its prompt lookup (generate(prompt_lookup_num_tokens=k) for
    each k in ks, its default max_matching_ngram_size) against our ngram and suffix drafts with k="auto".
    transformers runs the file dequantized to float32 (its GGUF loader's; it has no kernel for the file's Q4_1
    blocks on a CPU)."""
    from benchmarks.peers import suite_against_peer
    return suite_against_peer(args, target, tmeta, HFPeer(pretrained.find(args.target), args.device, ks))


class HFPeer:
    """transformers on the same GGUF file, in this process (benchmarks/peers.py's peer interface)."""
    name, flag, suffix = "HF", "hf", "_hf"

    def __init__(self, path, device, ks=(4, 10)):
        import transformers
        from engine.hf import load_gguf
        self.model, self.device, self.ks = load_gguf(path).to(device), device, list(ks)
        self.version = transformers.__version__
        self.lookups = [f"HF lookup@{k}" for k in ks]
        self.caption = (f"HF transformers {self.version} on the same file (float32, its GGUF loader's); HF lookup@k = "
                        "generate(prompt_lookup_num_tokens=k)")

    def generate(self, col, prompt, n, eos, sampling, seed):  # -> (new token ids, seconds, info: none kept)
        hf_kw = dict(do_sample=False) if sampling["temperature"] == 0 else dict(
            do_sample=True, temperature=sampling["temperature"], top_p=sampling.get("top_p", 1.0), top_k=0)
        if col.startswith("HF lookup"):
            hf_kw["prompt_lookup_num_tokens"] = int(col.split("@")[1])
        ids = torch.tensor([prompt], device=self.device)
        torch.manual_seed(seed)
        tic = time.perf_counter()
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, eos_token_id=eos,
                                  pad_token_id=eos[0], **hf_kw)
        return out[0, ids.size(1):].tolist(), time.perf_counter() - tic, {}

    def record(self):
        return dict(transformers=self.version, ks=self.ks)
