"""
bench.py's modes, one file each; bench.py parses the flags and calls one of them.

    sweep.py      plain against speculative at each K (the default mode)
    suite.py      --suite: which draft for which kind of text (chat_tasks.py: a real chat model's requests)
    batch.py      --batch: engine/batched.py at several batch sizes
    trees.py      --tree_shapes: draft trees of several shapes
    profiling.py  --profile: where the time goes
    hf.py         --hf: transformers beside ours on the same model
    peers.py      --suite --hf / --peer llamacpp|llama-server|vllm: another engine beside ours on the real model's
                  requests (llama-server: its C++ server over HTTP, built by scripts/setup_llamacpp.sh --server)
    llamacpp_peer.py  llama.cpp's side of --peer llamacpp, run in its own venv (scripts/setup_llamacpp.sh)
    vllm_peer.py  vLLM's side of --peer vllm, one process a column, run in its own venv (scripts/setup_vllm.sh)
    theory.py     Theorem 3.8, the kept-draft histogram and the advice, which every mode prints beside its numbers
    common.py     settings, prompts, the machine's name, the drafts from --draft

The folder is not named `bench`: a package of that name would shadow bench.py.
"""
