"""
Read a GGUF file (llama.cpp's format) into plain data: a config dict and float32 tensors, dequantized once.

A GGUF file (ggml-org/ggml, docs/gguf.md) holds the magic b"GGUF", key-value metadata (llama.block_count = 30, the
tokenizer's vocabulary and merges, ...), then the tensors, each in a type of its own: F32, or quantized in blocks of
32 weights (Q8_0: 32 int8 and a scale; Q4_1: 32 four-bit ints, a scale and a minimum, w = scale * q + min). The
gguf package, llama.cpp's own Python reader, parses the file and dequantizes every block type in numpy.

    reader, config, state = read_llama(path)   # config: LlamaConfig's fields; state: Llama's state_dict names
    config == dict(vocab_size=49152, n_layer=30, n_head=9, n_kv_head=3, n_embd=576, n_hidden=1536, ...)

The tensors are renamed for pretrained/llama.py (to_state_dict): blk.N.attn_q, attn_k and attn_v are stacked into
transformer.h.N.attn.c_attn.weight, ffn_gate and ffn_up into .mlp.c_fc.weight. Q and K are kept as the file stores
them, permuted for RoPE on adjacent pairs, which is the rotation llama.py does.

What it leaves out: writing GGUF files, architectures other than llama, RoPE scaling (Llama 3.1's rope_freqs),
and computing with the quantized weights: the model is float32, so a quantized file dequantized once is a float
model, close to but not the original bf16 weights.
"""

import os

import gguf
import numpy as np
import torch

MAGIC = b"GGUF"  # the first four bytes of every GGUF file


def open_gguf(path):  # -> gguf.GGUFReader, or one clear error
    """Check that path is a whole GGUF file before reading it: the gguf package's own errors for a file that is not
    one, or is cut short, are numpy reshape errors that name neither the file nor the fix."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no GGUF file at {path!r}: pass the path of a .gguf file, or the name 'smollm2'")
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != MAGIC:
        raise ValueError(f"{path!r} is not a GGUF file (it begins {head!r}, not {MAGIC!r}): pass a .gguf file, "
                         "such as llama.cpp's convert_hf_to_gguf.py writes")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # subtle: a cut can fall anywhere, and each place fails with another numpy error
        raise ValueError(f"{path!r} is cut short or damaged: it begins as a GGUF file, but its "
                         f"{os.path.getsize(path)} bytes do not hold what its header lists (gguf: {e}). "
                         "Download or copy it again") from None


def value(reader, key, default=None):  # metadata key -> its value (a number, a string, a list), or default
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def decimal(x):  # a float32 from the file -> the shortest decimal it stands for: 9.999999747378752e-06 -> 1e-05
    return None if x is None else float(str(np.float32(x)))


def llama_config(reader, path):  # -> LlamaConfig's fields (block_size aside: the caller's choice)
    """From the llama.* metadata keys, checking that pretrained/llama.py computes what the file describes."""
    arch = value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path!r} holds a {arch!r} model, but pretrained/llama.py is the llama architecture only "
                         "(Llama 2 and 3, SmolLM2, TinyLlama, ...): pass a GGUF file whose general.architecture is "
                         "'llama'")
    scaling = value(reader, "llama.rope.scaling.type", "none")
    if scaling != "none":
        raise ValueError(f"{path!r} scales RoPE ({scaling!r}), which pretrained/llama.py leaves out: pass a llama "
                         "GGUF file without llama.rope.scaling.type")
    shapes = {t.name: t.shape.tolist() for t in reader.tensors}  # GGUF order: [576, 49152] for the embedding
    n_head = value(reader, "llama.attention.head_count")
    config = dict(
        vocab_size=value(reader, "llama.vocab_size", shapes.get("token_embd.weight", [None, None])[1]),
        n_layer=value(reader, "llama.block_count"),
        n_head=n_head,
        n_kv_head=value(reader, "llama.attention.head_count_kv", n_head),  # absent: one key/value head per query
        n_embd=value(reader, "llama.embedding_length"),
        n_hidden=value(reader, "llama.feed_forward_length"),
        rope_base=decimal(value(reader, "llama.rope.freq_base", 10000.0)),  # absent: Llama 1 and 2's 10000
        norm_eps=decimal(value(reader, "llama.attention.layer_norm_rms_epsilon")),
        context_length=value(reader, "llama.context_length"),
        tied="output.weight" not in shapes,  # no LM head of its own: the embedding's
    )
    missing = [name for name, v in config.items() if v is None]
    if missing:
        raise ValueError(f"{path!r} lacks the llama metadata for {', '.join(missing)}: it is not a complete llama "
                         "GGUF file; convert the model again with llama.cpp's convert_hf_to_gguf.py")
    head_size = config["n_embd"] // config["n_head"]
    if value(reader, "llama.rope.dimension_count", head_size) != head_size:
        raise ValueError(f"{path!r} rotates {value(reader, 'llama.rope.dimension_count')} channels of each head, "
                         f"not all {head_size}: partial RoPE is left out of pretrained/llama.py")
    return config


def dequantized(reader, path):  # -> {GGUF tensor name: float32 tensor, in torch's (rows, columns) order}
    """Every tensor, dequantized once. token_embd.weight: Q8_0 -> (49152, 576) float32."""
    tensors = {}
    for t in reader.tensors:
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)  # numpy float32
        except NotImplementedError:
            raise ValueError(f"{path!r}: tensor {t.name!r} is of type {t.tensor_type.name}, which the gguf package "
                             "does not dequantize: convert the file to F32, F16, Q8_0, Q4_0, Q4_1 or a K-quant "
                             "(llama.cpp's llama-quantize)") from None
        shape = tuple(reversed(t.shape.tolist()))  # GGUF lists the fastest-varying dimension first
        w = w.astype(np.float32, copy=False).reshape(shape)
        tensors[t.name] = torch.from_numpy(w if w.flags.writeable else w.copy())  # (F32 ones are the file's bytes)
    return tensors


def to_state_dict(tensors, n_layer):  # {GGUF name: tensor} -> {pretrained/llama.py name: tensor}
    """token_embd.weight -> transformer.wte.weight; blk.3.attn_q, attn_k, attn_v -> transformer.h.3.attn.c_attn.weight
    (stacked: q's rows, then k's, then v's); blk.3.ffn_gate, ffn_up -> transformer.h.3.mlp.c_fc.weight; ..."""
    names = dict(token_embd="transformer.wte", output_norm="transformer.ln_f", output="lm_head")
    per_block = dict(attn_norm="ln_1", attn_output="attn.c_proj", ffn_norm="ln_2", ffn_down="mlp.c_proj")
    stacked = {"attn.c_attn": ("attn_q", "attn_k", "attn_v"), "mlp.c_fc": ("ffn_gate", "ffn_up")}
    expected = {f"{name}.weight" for name in names if name != "output"} | {
        f"blk.{i}.{part}.weight" for i in range(n_layer)
        for part in [*per_block, *(p for parts in stacked.values() for p in parts)]}
    missing, left = sorted(expected - set(tensors)), sorted(set(tensors) - expected - {"output.weight"})
    if missing:
        raise ValueError(f"the GGUF file lacks {len(missing)} tensors of a {n_layer}-layer llama model, such as "
                         f"{missing[0]!r}: it is not a complete llama GGUF file; convert the model again")
    if left:
        raise ValueError(f"the GGUF file holds tensors pretrained/llama.py has no place for, such as {left[0]!r} "
                         "(rope_freqs: RoPE scaling and attention biases are left out): pass a plain llama GGUF file")
    state = {f"{names[k.removesuffix('.weight')]}.weight": w for k, w in tensors.items() if not k.startswith("blk.")}
    for i in range(n_layer):
        w = lambda part: tensors[f"blk.{i}.{part}.weight"]
        state.update({f"transformer.h.{i}.{ours}.weight": w(part) for part, ours in per_block.items()})
        state.update({f"transformer.h.{i}.{ours}.weight": torch.cat([w(p) for p in parts])
                      for ours, parts in stacked.items()})
    return state


def read_llama(path):  # -> (gguf.GGUFReader, config dict, state_dict)
    """The whole file: the reader (the tokenizer reads its metadata too), LlamaConfig's fields and Llama's
    state_dict, float32 (the tied LM head: transformer.wte.weight only)."""
    reader = open_gguf(path)
    config = llama_config(reader, path)
    return reader, config, to_state_dict(dequantized(reader, path), config["n_layer"])
