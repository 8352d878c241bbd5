"""
Drafts made from the target itself, with no second model to train: its first layers (early exit), an int8 copy, or
its own weights as 4-bit blocks. Lossless, as any draft: speculative.py's round tests each token against the full
target.

- `layerskip`: the target's first L layers, then its own final layer norm and LM head (LayerSkip, Elhoushi et al.
  2024, arXiv:2404.16710; transformers' early-exit assistant). No training; LayerSkip also fine-tunes the target
  so that early exits predict well, which this leaves out. c is about L / n_layer; alpha is what the first L
  layers already know of the answer.
- `int8`: a copy of the target whose linear layers are dynamically quantized to int8 (torch's quantize_dynamic;
  gpt-fast's int8 draft). The same model with coarser weights: alpha near 1, c as large as int8 matmuls are
  fast here (on a CPU, often not much faster than float32: Theorem 3.8 then says it cannot pay).

- `int4`: the target's own weights as Q4_1 blocks, the format engine/llama.py's int4 decoder runs: for a Llama (a
  GGUF target) that decoder itself, the file's own blocks through torch's 4-bit kernel, drafting for the target run
  in float32 or bfloat16 (--decoder fast, fast-bf16). This is the regime of Chen et al. (2023, section 4): the same
  model in coarser arithmetic, so alpha is near 1 and c is the int4 step over the target's. For a model.GPT, which
  has no int4 decoder, a copy whose block matrices are rounded to Q4_1 and run dequantized: the same numbers, alpha
  alone, no speed. Beside an int4 target (--decoder fast-int4) it is the target itself: every draft kept, and nothing
  saved; beside fast-q4_1 (the same blocks in float32 arithmetic, engine/blocks.cpp) it drafts at c near 1.

In Theorem 3.8's terms all three trade a second model for a high alpha at a high c; on a GPU, where v is near 1 and a
draft step of a half-depth model costs about half a target step, the trade is the one bench.py's Theorem 3.8 line
shows for c = 0.5.

    speculative_generate(target, early_exit(target, 3), idx, n)      # sample.py --draft layerskip (half the layers)
    speculative_generate(target, int8_copy(target), idx, n)          # sample.py --draft int8
    speculative_generate(FastLlama(llama), int4_copy(llama), idx, n)  # sample.py --target smollm2 --decoder fast --draft int4
"""

import copy
import warnings

import torch
import torch.nn as nn

import speculative
from speculative import Drafter


def early_exit(target, layers):
    """-> a model of the target's class (model.GPT, pretrained/llama.py's Llama) of its first `layers` blocks, its ln_f
    and LM head, found by their state_dict names (copies: the draft keeps its own cache)."""
    n = target.config.n_layer
    if not isinstance(layers, int) or not 0 <= layers < n:
        raise ValueError(f"--layerskip_layers {layers}: the early exit takes 0 to {n - 1} of the target's {n} layers "
                         "(0: the embeddings straight into the LM head)")
    config = copy.copy(target.config)
    config.n_layer = layers
    with torch.random.fork_rng(devices=[]):  # the init draws random weights that the target's then replace
        draft = type(target)(config).to(next(target.parameters()).dtype)
    state = {k: v for k, v in target.state_dict().items()
             if not k.startswith("transformer.h.") or int(k.split(".")[2]) < layers}
    draft.load_state_dict(state)
    return draft.to(next(target.parameters()).device).eval()


def int8_copy(target):
    """-> the target with its linear layers dynamically quantized to int8 (CPU; torch's quantized engines)."""
    if next(target.parameters()).device.type != "cpu":
        raise ValueError("--draft int8 quantizes for the CPU (torch's dynamic quantization): on a GPU use --draft layerskip")
    if not torch.backends.quantized.supported_engines or torch.backends.quantized.engine == "none":
        raise ValueError("--draft int8: this torch build has no quantized engine; use --draft layerskip")
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao; it still works
        warnings.simplefilter("ignore")
        try:
            draft = torch.ao.quantization.quantize_dynamic(copy.deepcopy(target).float(), {nn.Linear}, dtype=torch.qint8)
        except (RuntimeError, AttributeError) as e:
            raise ValueError(f"--draft int8: torch could not quantize the target here ({e}); use --draft layerskip") from None
    dtype = next(target.parameters()).dtype  # int8 matmuls run in float32; q is made in the target's precision
    draft.register_forward_hook(lambda module, args, out: (out[0].to(dtype), out[1]))
    draft.quantized = True  # engine/fast.py leaves it as it is: its int8 layers are the point
    draft.num_params = lambda: int8_num_params(draft)  # the class's own sees only the float tensors that are left
    return draft.eval()


def int4_copy(target):
    """-> the target's weights as Q4_1 blocks: engine/llama.py's FastLlama in int4 for a Llama (it shares the target's
    packed blocks, made once per model); for a model.GPT a copy with each block matrix rounded to its Q4_1 blocks."""
    from engine.llama import FastLlama, q4_1_rounded
    from model import GPT
    if next(target.parameters()).device.type != "cpu":
        raise ValueError("--draft int4 runs torch's CPU 4-bit kernel: on a GPU use --draft layerskip")
    dtype = next(target.parameters()).dtype
    if not isinstance(target, GPT):
        if dtype == torch.float32:
            return FastLlama(target, "int4")
        # FastLlama's stream is float32: a target in another dtype (the tests' float64) lends a float32 copy, and its
        # logits go back to that dtype, so q is made in the target's precision (as int8_copy's)
        draft = FastLlama(copy.deepcopy(target).float(), "int4")
        draft.register_forward_hook(lambda module, args, out: (out[0].to(dtype), out[1]))
        return draft
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for block in draft.transformer.h:
            for module in block.modules():
                if isinstance(module, nn.Linear):
                    module.weight.copy_(q4_1_rounded(module.weight))
    return draft.eval()


def int8_num_params(draft):
    """-> an int8 copy's parameters, counted as the target's class counts the target's (10.68M for the shipped target,
    not the 0.04M that parameters() still sees). quantize_dynamic packs each Linear's weight and bias, which it then
    returns from weight() and bias() methods, out of parameters(); the LM head, tied to the embedding in the target,
    is an int8 copy of it here and is counted once, as the embedding."""
    packed = [m for m in draft.modules() if callable(getattr(m, "weight", None)) and m is not draft.lm_head]
    own = type(draft).num_params(draft)  # model.GPT's or the Llama's count of what parameters() still holds
    return own + sum(t.numel() for m in packed for t in (m.weight(), m.bias()) if t is not None)


def check_layers(layerskip_layers):
    if not isinstance(layerskip_layers, int):
        raise ValueError(f"layerskip_layers must be an int (-1: half the target's layers), got {layerskip_layers!r}")


speculative.DRAFTS["layerskip"] = Drafter(
    lambda target, layerskip_layers: early_exit(
        target, target.config.n_layer // 2 if layerskip_layers < 0 else layerskip_layers),
    dict(layerskip_layers=-1), check=check_layers,
    doc="the target's first layers and its LM head (early exit, LayerSkip), no training: lossless",
    help=dict(layerskip_layers="with --draft layerskip: how many of the target's layers the draft runs (-1: half)"))
speculative.DRAFTS["int8"] = Drafter(
    lambda target: int8_copy(target), doc="an int8 copy of the target (dynamic quantization, as gpt-fast): lossless")
speculative.DRAFTS["int4"] = Drafter(
    lambda target: int4_copy(target),
    doc="the target's own weights as Q4_1 blocks (its int4 decoder, for a float32 target: Chen et al.'s regime): "
        "lossless")
