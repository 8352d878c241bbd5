"""
llama.cpp's side of bench.py --peer llamacpp (benchmarks/peers.py LlamaCppPeer): run by the Python of the venv that
scripts/setup_llamacpp.sh makes, never by the project's (it imports llama_cpp, not torch). One JSON object a line on
stdin, one reply a line on stdout:

    {"op": "load", "model": PATH, "threads": 2, "lookups": [4, 10]}
        -> {"version": "0.3.36", "system_info": "..."}: the file loaded as plain, and once per lookup width k with
           llama-cpp-python's LlamaPromptLookupDecoding(num_pred_tokens=k)
    {"op": "generate", "col": "plain" | "lookup@k", "tokens": [ids], "n": 128, "eos": [ids], "seed": 1000,
     "temperature": 0.0, "top_p": 1.0, "top_k": 0}
        -> {"tokens": [new ids, the end of turn included], "seconds": from the prompt's ids to the last token,
            "ttft": seconds to the first token}

A failure answers {"error": "one line"}. temperature 0 is llama.cpp's greedy sampler; otherwise its temperature with
top_k 0 and min_p 0 (off), as ours. Each request is read whole: the binding's prompt cache (the longest prefix
already in its KV cache) is set aside by starting each call from an empty context.
"""

import json
import sys
import time


def serve(lines, write):
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    models = {}
    for line in lines:
        msg = json.loads(line)
        try:
            if msg["op"] == "load":
                kw = dict(model_path=msg["model"], n_ctx=msg.get("n_ctx", 4096), n_threads=msg["threads"],
                          n_threads_batch=msg["threads"], verbose=False)
                models["plain"] = llama_cpp.Llama(**kw)
                for k in msg["lookups"]:
                    models[f"lookup@{k}"] = llama_cpp.Llama(**kw, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))
                reply = dict(version=llama_cpp.__version__,
                             system_info=llama_cpp.llama_print_system_info().decode().strip())
            elif msg["op"] == "generate":
                reply = generate(models[msg["col"]], msg)
            else:
                reply = dict(error=f"unknown op {msg['op']!r}")
        except Exception as e:  # one line back; the client stops with it
            reply = dict(error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
        write(json.dumps(reply) + "\n")


def generate(llm, msg):
    llm.n_tokens = 0  # an empty context: no prefix of an earlier request reused
    llm.set_seed(msg["seed"])
    t = msg["temperature"]
    sampling = dict(temp=t, top_k=msg["top_k"] if t > 0 else 1, top_p=msg["top_p"], min_p=0.0, typical_p=1.0,
                    repeat_penalty=1.0)
    out, eos, ttft = [], set(msg["eos"]), None
    tic = time.perf_counter()
    for token in llm.generate(msg["tokens"], **sampling):
        ttft = time.perf_counter() - tic if ttft is None else ttft
        out.append(token)
        if token in eos or len(out) == msg["n"]:
            break
    return dict(tokens=out, seconds=time.perf_counter() - tic, ttft=ttft)


if __name__ == "__main__":
    def write(text):
        sys.stdout.write(text)
        sys.stdout.flush()
    serve(sys.stdin, write)
