"""
vLLM's side of bench.py --peer vllm (benchmarks/peers.py VLLMPeer): run by the Python of the venv that
scripts/setup_vllm.sh makes, never by the project's (it imports vllm). One process serves one column (plain, or one
speculative config), so no two engines share a process; one JSON object a line on stdin, one reply a line on stdout:

    {"op": "load", "gguf": PATH, "folder": PATH, "threads": 2, "speculative_config": null | {...}}
        -> {"version": "0.32.0", "cpu": "...", "folder": PATH}: the GGUF file written once as a transformers folder
           (its blocks dequantized to float32 by transformers' GGUF loader, the same numbers as our readable model's
           weights), then loaded by vLLM as float32, torch.compile'd (its default), no prefix caching
    {"op": "generate", "tokens": [ids], "n": 128, "eos": [ids], "seed": 1000, "temperature": 0.0, "top_p": 1.0,
     "top_k": 0}
        -> {"tokens": [new ids, the end of turn included], "seconds": from the prompt's ids to the last token,
            "ttft": seconds to the first token (vLLM's own first_token_latency), "drafts": N, "accepted": A}

N and A are the request's share of vLLM's counters vllm:spec_decode_num_drafts and _num_accepted_tokens (rounds that
drafted, drafts kept), so 1 + A / N is vLLM's mean acceptance length (tau over the rounds that drafted). A failure
answers {"error": "one line"}. vLLM logs to stdout: replies go to the stdout this process started with, and
everything else printed goes to stderr.
"""

import json
import os
import sys
import time


def to_folder(gguf, folder):
    """The GGUF file as a folder vLLM loads (config.json, model.safetensors, the tokenizer): transformers' GGUF loader
    dequantizes every block to float32; the tied output head is left out as the folder format expects."""
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return
    import torch
    import transformers
    from safetensors.torch import save_file
    where, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    config = model.config
    if hasattr(config, "quantization_config"):  # subtle: marks the dequantized model "not serializable"
        del config.quantization_config
    os.makedirs(folder, exist_ok=True)
    config.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(where, gguf_file=name).save_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not (config.tie_word_embeddings and k == "lm_head.weight")}
    save_file(state, folder + ".tmp.safetensors", metadata={"format": "pt"})
    os.replace(folder + ".tmp.safetensors", os.path.join(folder, "model.safetensors"))  # whole, or not at all


def counters(llm):  # -> (rounds that drafted, drafts kept) so far, vLLM's own counters
    names = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens")
    seen = {m.name: m.value for m in llm.get_metrics() if m.name in names}  # counters; absent without a draft
    return tuple(seen.get(name, 0) for name in names)


def serve(lines, write):
    llm = None
    for line in lines:
        msg = json.loads(line)
        try:
            if msg["op"] == "load":
                reply = load(msg)
                llm = reply.pop("llm")
            elif msg["op"] == "generate":
                reply = generate(llm, msg)
            else:
                reply = dict(error=f"unknown op {msg['op']!r}")
        except Exception as e:  # one line back; the client stops with it
            reply = dict(error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
        write(json.dumps(reply) + "\n")


def load(msg):
    threads = msg["threads"]
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: one process a column
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: 4096-token requests, one at a time
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # else vLLM serves with one thread
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, sorted(os.sched_getaffinity(0))[:threads])))
    to_folder(msg["gguf"], msg["folder"])
    import vllm
    from vllm import LLM
    llm = LLM(msg["folder"], dtype="float32", max_model_len=msg.get("n_ctx", 4096), enable_prefix_caching=False,
              speculative_config=msg.get("speculative_config"), disable_log_stats=False, seed=0)
    return dict(llm=llm, version=vllm.__version__, folder=msg["folder"], cpu=cpu_name())


def cpu_name():
    with open("/proc/cpuinfo") as fh:
        return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "unknown")


def generate(llm, msg):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    t = msg["temperature"]
    params = SamplingParams(max_tokens=msg["n"], stop_token_ids=msg["eos"], seed=msg["seed"], temperature=t,
                            top_p=msg["top_p"] if t > 0 else 1.0, top_k=msg["top_k"] if t > 0 else 0)
    drafts, accepted = counters(llm)
    tic = time.perf_counter()
    out = llm.generate(TokensPrompt(prompt_token_ids=msg["tokens"]), params, use_tqdm=False)[0]
    seconds = time.perf_counter() - tic
    drafts2, accepted2 = counters(llm)
    tokens = list(out.outputs[0].token_ids)
    ttft = getattr(out.metrics, "first_token_latency", None)
    return dict(tokens=tokens, seconds=seconds, ttft=ttft, drafts=drafts2 - drafts, accepted=accepted2 - accepted)


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "w")  # the protocol's stdout ...
    os.dup2(2, 1)  # ... and vLLM's logs, and anything else printed, to stderr
    sys.stdout = sys.stderr

    def write(text):
        replies.write(text)
        replies.flush()
    serve(sys.stdin, write)
