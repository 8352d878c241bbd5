"""
The engine room: the same sampling, run for speed, for many prompts, or on other models. Nothing here changes
what is sampled; each file is checked against the plain path it speeds up or connects to.

    batched.py  B prompts at once, each row with its own cache length, coins and window (tests/test_batched.py)
    fast.py     FastGPT: model.GPT's cached decoding with less Python per step, same logits (tests/test_fast.py)
    llama.py    FastLlama: a GGUF Llama run as a CPU engine runs it, in five weight formats, the file's own Q4_1
                blocks among them (tests/test_fast_llama.py)
    blocks.py   the q4_1 format's kernels (blocks.cpp, built on first use): the file's blocks times every row,
                each row the one-token step's bit for bit (tests/test_blocks.py)
    cpu.py      how many threads to use when other work shares the cores
    hf.py       GPT-2 from Hugging Face transformers, and this project's models to transformers (optional)

A reader learning the algorithm can skip this folder: speculative.py and model.py are the whole method.
"""
