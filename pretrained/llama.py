"""
The Llama architecture (Touvron et al. 2023, arXiv:2302.13971) with model.py's KV caches: a real pretrained target.

What it is:
- model.GPT's interface, exactly: model(idx, targets=None, use_cache=False, pos=None, mask=None, rows=None,
  span=None) -> (logits (B, T, V) for every position, loss); the same caches (model.ChainCache, model.RowCache), the
  same rollback (crop, compact, crop_rows, keep_rows: GPT's own methods), model.features and keep_layers. Every
  sampler, verifier and draft runs on it as on the GPT; the drafts that read the target (drafts/heads.py) build
  their blocks of its kind (this file's Block, with its RoPE angles).
- What differs from GPT-2, each at the line that does it: RMSNorm instead of LayerNorm (Zhang & Sennrich 2019), no
  biases, rotary positions instead of learned ones (RoPE, Su et al. 2021, arXiv:2104.09864), grouped-query attention
  (GQA, Ainslie et al. 2023, arXiv:2305.13245: the caches keep n_kv_head heads, each shared by n_head // n_kv_head
  query heads) and a SwiGLU MLP (Shazeer 2020, arXiv:2002.05202).
- Names follow model.GPT where the concept is the same: transformer.wte, transformer.h[i].attn.c_attn (q, k and v
  stacked), .attn.c_proj, .mlp.c_fc (gate and up stacked), .mlp.c_proj, .ln_1, .ln_2, transformer.ln_f, lm_head. So
  code that walks a GPT's blocks by name (drafts/self_drafts.py's early exit) walks this one too.
- RoPE's layout: a head's channels are rotated in ADJACENT pairs (x[2j], x[2j+1]), as in Meta's reference code and
  gpt-fast, and as GGUF files store Q and K (llama.cpp's converter permutes them for this). transformers pairs x[j]
  with x[j + hs/2] (rotate_half) and un-permutes Q and K to match; tests/test_llama.py shows both give the same
  attention scores. Our choice reads GGUF's weights as they are.

Loading the weights (a GGUF file, through the gguf package) lives in pretrained/gguf_file.py, and the name to
load by in pretrained/__init__.py: this file is the architecture only (as gpt-fast's model.py).

What it leaves out: training tricks (dropout, a scaled init: the weights come from a file), RoPE scaling (Llama 3.1's
rope_freqs, YaRN), sliding-window attention, attention biases (Qwen), fused kernels beyond torch's
scaled_dot_product_attention, and running fast: engine/llama.py's FastLlama runs this model's weights as plain tensors
in float32, bfloat16, int8 or the GGUF file's own Q4_1 blocks (--decoder fast, fast-bf16, fast-int8, fast-int4).
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from model import GPT, ChainCache, RowCache


@dataclass
class LlamaConfig:  # the defaults are SmolLM2-135M's
    block_size: int = 2048  # the window W the samplers slide at, and the positions each cache preallocates per
    #                         layer: at most context_length (8192 would preallocate 4x, for windows rarely filled)
    vocab_size: int = 49152  # number of token ids
    n_layer: int = 30  # transformer blocks
    n_head: int = 9  # query heads per block
    n_kv_head: int = 3  # key/value heads per block: each serves n_head // n_kv_head query heads (GQA)
    n_embd: int = 576  # channels (C); a head has n_embd // n_head
    n_hidden: int = 1536  # the MLP's inner width
    rope_base: float = 100000.0  # RoPE: pair j turns by the angle pos * rope_base^(-2j / head size)
    norm_eps: float = 1e-5  # RMSNorm's epsilon
    context_length: int = 8192  # the longest context the weights were trained for (the file says)
    tied: bool = True  # the LM head is the token embedding (weight tying)
    bias: bool = False  # Llama's linear layers have no biases (code written for GPTConfig asks)


def rope_table(block_size, head_size, base):  # -> (block_size, head_size // 2, 2): cos and sin of pos * theta_j
    """theta_j = base^(-2j / head_size), the angle pair j turns by per position (RoPE, Su et al. 2021, eq. 34)."""
    theta = 1.0 / base ** (torch.arange(0, head_size, 2).float() / head_size)  # (hs/2,)
    angles = torch.outer(torch.arange(block_size).float(), theta)  # (W, hs/2): pos * theta_j
    return torch.stack((angles.cos(), angles.sin()), dim=-1)  # (W, hs/2, 2)


def rotate(x, rope):  # (B, H, T, hs), (T, hs/2, 2) or (B, 1, T, hs/2, 2) -> (B, H, T, hs)
    """RoPE on adjacent pairs: (x[2j], x[2j+1]) turns by the angle pos * theta_j, the 2-D rotation
    [[cos, -sin], [sin, cos]]. A query and a key then score by the difference of their positions only."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)  # (B, H, T, hs/2) each: each pair's first and second channel
    cos, sin = rope.unbind(-1)  # (T, hs/2) each
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)  # (B, H, T, hs)


class Attention(nn.Module):

    def __init__(self, config, layer=0):
        super().__init__()
        assert config.n_embd % config.n_head == 0 and config.n_head % config.n_kv_head == 0, (
            "n_embd must be divisible by n_head, and n_head by n_kv_head")
        self.n_head, self.n_kv_head = config.n_head, config.n_kv_head
        hs = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, (config.n_head + 2 * config.n_kv_head) * hs, bias=False)  # q, k, v
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.layer = layer  # which of a cache's layers holds this block's keys and values

    def forward(self, x, rope, cache=None, mask=None):  # (B, T, C), rope: rotate()'s -> (B, T, C)
        B, T, C = x.size()
        nh, nkv, hs = self.n_head, self.n_kv_head, C // self.n_head
        qkv = self.c_attn(x).view(B, T, nh + 2 * nkv, hs).transpose(1, 2)  # (B, nh + 2 nkv, T, hs)
        qk = rotate(qkv[:, :nh + nkv], rope)  # queries and keys turn by their positions; values do not
        q, k, v = qk[:, :nh], qk[:, nh:], qkv[:, nh + nkv:]  # (B, nh, T, hs), (B, nkv, T, hs), (B, nkv, T, hs)
        # enable_gqa: query head h reads key/value head h // (nh // nkv)
        if cache is None:  # a whole context from position 0: plain causal attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # the new keys and values join the cached ones; the mask says which of them each query sees
            k, v = cache.write(self.layer, k, v)  # (B, nkv, S, hs): S cached and new slots
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): re-assemble the heads
        return self.c_proj(y)


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 2 * config.n_hidden, bias=False)  # gate and up, stacked
        self.c_proj = nn.Linear(config.n_hidden, config.n_embd, bias=False)  # down

    def forward(self, x):
        gate, up = self.c_fc(x).chunk(2, dim=-1)  # (B, T, n_hidden) each
        return self.c_proj(F.silu(gate) * up)  # SwiGLU: down(silu(gate x) * up x)


class Block(nn.Module):

    def __init__(self, config, layer=0):
        super().__init__()
        self.ln_1 = nn.RMSNorm(config.n_embd, eps=config.norm_eps)  # x / rms(x) * weight: no mean, no bias
        self.attn = Attention(config, layer)
        self.ln_2 = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, rope, cache=None, mask=None):
        x = x + self.attn(self.ln_1(x), rope, cache, mask)  # pre-norm residual blocks, as GPT-2
        x = x + self.mlp(self.ln_2(x))
        return x


class Llama(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size > 0 and config.block_size > 0, "vocab_size and block_size must be positive"
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings; no position table: RoPE
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            ln_f=nn.RMSNorm(config.n_embd, eps=config.norm_eps),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tied:
            self.transformer.wte.weight = self.lm_head.weight  # weight tying (Press & Wolf 2017)
        # subtle: a buffer, not a parameter, and left out of the state_dict: it follows from the config
        self.register_buffer("rope", rope_table(config.block_size, config.n_embd // config.n_head, config.rope_base),
                             persistent=False)  # (W, hs/2, 2): cos and sin of every pair's angle at every position
        self.cache = None  # while decoding: a ChainCache (reset_cache) or a RowCache (reset_row_cache)
        self.features = None  # Features of the last forward
        self.keep_layers = ()  # block indices whose outputs the features also keep (a draft that reads them sets it)
        self.apply(self._init_weights)  # random weights (tests); a file's replace them (pretrained/__init__.py)

    @classmethod
    def from_state_dict(cls, config, state):  # -> a Llama whose parameters ARE these tensors (no copy)
        """gpt-fast's way to load: build on the meta device (shapes only: no memory, no random init of weights the
        file replaces), then take the tensors as the parameters; the tie and the RoPE table, which a state_dict does
        not hold, follow. state: every name of Llama's state_dict (a tied lm_head.weight: the embedding's tensor)."""
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(state, assign=True)
        if config.tied:  # subtle: assign=True made two parameters of the one tensor: tie them again
            model.lm_head.weight = model.transformer.wte.weight
        model.rope = rope_table(config.block_size, config.n_embd // config.n_head, config.rope_base)  # (was meta)
        return model

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self):
        """Parameters, counting the tied embedding once."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, rows=None, span=None):
        """idx (B, T) token ids -> (logits (B, T, V), loss or None), as model.GPT.forward (its docstring says more).

        The cache's place() says where the new tokens sit: a slice (a chain), a (T,) tensor (a tree) or a (B', T)
        tensor (a RowCache); their rows of the RoPE table are the angles their queries and keys turn by.
        """
        cache, pos, mask = self.placed(idx, use_cache, pos, mask, rows, span)  # model.GPT's
        rope = self.rope[pos]  # (T, hs/2, 2), or (B', T, hs/2, 2) with a RowCache
        if rope.dim() == 4:
            rope = rope[:, None]  # (B', 1, T, hs/2, 2): the same angles for every head
        x = self.transformer.wte(idx)  # (B, T, C)
        kept = []
        for i, block in enumerate(self.transformer.h):
            x = block(x, rope, cache, mask)
            if i in self.keep_layers:
                kept.append(x)
        return self.finish(idx, x, cache, kept, targets)  # model.GPT's: features, final norm, LM head

    # ---- the cache: model.GPT's, with n_kv_head heads ----------------------------------------------------------

    def reset_cache(self, batch_size=1):
        """Allocate an empty ChainCache: block_size positions per layer, n_kv_head heads (GQA: fewer than n_head)."""
        c, w = self.config, self.transformer.wte.weight
        self.cache = ChainCache(c.n_layer, batch_size, c.n_kv_head, c.block_size, c.n_embd // c.n_head, w.device,
                                w.dtype)

    def reset_row_cache(self, batch_size, room=0):
        """Allocate an empty RowCache for batch_size rows (engine/batched.py), block_size + room slots per row."""
        c, w = self.config, self.transformer.wte.weight
        self.cache = RowCache(c.n_layer, batch_size, c.n_kv_head, c.block_size, c.n_embd // c.n_head, w.device,
                              w.dtype, room)

    # the rollback is the GPT's own code: it only talks to the cache (and to the features, for compact)
    cache_len, row_lengths, crop, compact = GPT.cache_len, GPT.row_lengths, GPT.crop, GPT.compact
    placed, finish = GPT.placed, GPT.finish  # where new tokens sit; the features, final norm and LM head
    crop_rows, keep_rows, row_forward = GPT.crop_rows, GPT.keep_rows, GPT.row_forward
