"""
A compact GPT (the GPT-2 architecture) with a KV cache that can be rolled back.

What it is:
- GPT-2 as in Radford et al. 2019 and karpathy/nanoGPT: learned absolute positions, pre-LayerNorm blocks,
  GELU MLP, input and output embeddings tied. Parameter names follow GPT-2 (transformer.h.0.attn.c_attn ...)
  so GPT-2 weights can be mapped onto it.
- model(idx) returns logits for EVERY position, shape (B, T, V) (nanoGPT returns only the last one at
  inference). Speculative sampling needs them all: the target scores K+1 positions in one forward.
- A KV cache for decoding, preallocated once: model(idx, use_cache=True) appends idx's T tokens to the cache
  and returns their logits; model.crop(n) forgets everything after the first n tokens in O(1) (it only moves
  a counter), which is how rejected draft tokens are rolled back.
- Tree attention for draft trees (verifiers/tree.py): model(idx, use_cache=True, pos=..., mask=...) feeds tokens at
  given positions, each seeing the cached and new tokens its mask allows; model.compact(n, slots) then keeps the
  accepted path. The target scores a whole tree this way, and the draft grows one a level at a time. This
  one-row cache is the only one that takes trees: the per-row cache below stays a chain per row.
- A cache with a length per row, for several sequences at once (engine/batched.py): reset_row_cache(B) allocates it;
  then model(idx, use_cache=True) writes row b's T new tokens at that row's own offset row_lengths[b] (which is
  also their position), each behind its own causal mask, and model.crop_rows(lengths) rolls rows back in O(1).
  Its shapes never depend on how many tokens a row holds (attention runs over the whole preallocated cache
  behind a mask, positions are tensors), so one width always runs the same kernels.
- The features: every forward leaves the final block's output of the positions it scored (what ln_f and the LM
  head read) in model.features, a Features(at, ids, x) record, at no extra cost. A draft that reads the target
  (drafts/eagle.py, drafts/medusa.py) takes the features of the accepted prefix from there.
- save_checkpoint / load_checkpoint: a plain-data dict (state_dict + model args + free-form meta such as the
  tokenizer), so torch.load(..., weights_only=True) works and nothing is guessed at load time.

What it leaves out: flash/fused kernels beyond torch's scaled_dot_product_attention, trees of tokens in the
per-row cache, rotary/relative positions, and the training loop (see train_draft.py).
"""

import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 256  # longest context the model can attend to (W)
    vocab_size: int = 65  # number of token ids
    n_layer: int = 6  # transformer blocks
    n_head: int = 6  # attention heads per block
    n_embd: int = 384  # channels (C)
    dropout: float = 0.0  # dropout in training; eval() turns it off
    bias: bool = True  # biases in Linear and LayerNorm layers, as in GPT-2


@dataclass
class Features:
    """What the last forward scored: x[0, i] is the final block's output at position at + i (the window's
    position, as the cache counts), computed after reading ids[0, i]; the LM head turns it into the distribution
    of the token at at + i + 1."""
    at: int  # position of the first scored token: the cache length before the forward (0 without a cache)
    ids: torch.Tensor  # (B, T) the tokens fed
    x: torch.Tensor  # (B, T, C) the final block's output, before ln_f


class KVCache:
    """Keys and values of one attention layer, preallocated for block_size positions.

    Only the first `length` positions are valid; crop(n) just sets length = n, so a rollback copies nothing.
    """

    def __init__(self, B, n_head, block_size, head_size, device, dtype):
        self.k = torch.zeros(B, n_head, block_size, head_size, device=device, dtype=dtype)  # (B, nh, W, hs)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    def append(self, k, v):  # (B, nh, T, hs) x2 -> the valid (B, nh, length, hs) keys and values
        T = k.size(2)
        start, end = self.length, self.length + T
        if end > self.k.size(2):  # subtle: only a tree of drafts holds more tokens than positions: more room
            more = torch.zeros_like(self.k[:, :, :end])  # (B, nh, end, hs)
            self.k, self.v = torch.cat([self.k, more], 2), torch.cat([self.v, more], 2)
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def compact(self, n, slots, move=True):
        """Keep the first n cached tokens, then the tokens at `slots` (increasing, each >= n); forget the rest.
        After a tree of drafts (verifiers/tree.py) this moves the accepted branch next to the prefix."""
        if move:  # (see compact_moves)
            self.k[:, :, n:n + len(slots)] = self.k[:, :, slots]  # advanced indexing copies first: overlap is safe
            self.v[:, :, n:n + len(slots)] = self.v[:, :, slots]
        self.length = n + len(slots)


def compact_moves(n, slots, length):  # -> False if `slots` already follow the first n tokens: nothing to move
    """The argument check of every cache's compact(n, slots), with `length` tokens cached."""
    assert slots == sorted(set(slots)) and all(n <= a < length for a in slots), (
        f"compact({n}, {slots}) needs increasing slots in [{n}, cache_len {length})")
    return slots != list(range(n, n + len(slots)))


class RowKVCache:
    """Keys and values of one attention layer for B rows that hold different numbers of tokens (engine/batched.py).

    Preallocated for `size` slots per row; the model keeps each row's length (GPT.row_lengths). A token's slot is
    its position, so row b's new tokens go to slots row_lengths[b].. and rolling a row back moves its length only.
    Slots beyond a row's length hold stale keys, which the attention mask hides until they are overwritten.
    """

    def __init__(self, B, n_head, size, head_size, device, dtype):
        self.k = torch.zeros(B, n_head, size, head_size, device=device, dtype=dtype)  # (B, nh, S, hs)
        self.v = torch.zeros_like(self.k)

    def write(self, k, v, at, span):  # (B', nh, T, hs) x2 -> the first `span` slots of those rows, (B', nh, span, hs) x2
        """at = (rows (B', 1), slots (B', T), all rows?): row rows[b]'s token i goes into slot slots[b, i]."""
        rows, slots, every = at
        self.k[rows, :, slots] = k.transpose(1, 2)  # (B', T, nh, hs)
        self.v[rows, :, slots] = v.transpose(1, 2)
        k, v = (self.k, self.v) if every else (self.k[rows[:, 0]], self.v[rows[:, 0]])  # (B', nh, S, hs)
        return k[:, :, :span], v[:, :, :span]

    def keep(self, index):  # (B',) rows to keep, in this order (engine/batched.py drops finished rows)
        self.k, self.v = self.k[index], self.v[index]


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.cache = None  # a KVCache while decoding with use_cache=True

    def forward(self, x, use_cache=False, mask=None, at=None):  # at: where the tokens go in the per-row cache
        B, T, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        # q, k, v at once: (B, T, 3C) -> (B, T, 3, nh, hs) -> (3, B, nh, T, hs) -> three (B, nh, T, hs). One view
        # and one permute instead of a split, three views and three transposes: a one-token decoding step is
        # dominated by the fixed cost of each PyTorch operation, not by arithmetic.
        q, k, v = self.c_attn(x).view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4).unbind(0)
        dropout = self.attn_dropout if self.training else 0.0
        if not use_cache:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        elif at is not None:  # the per-row cache: row b's tokens at its own slots, mask (B, 1, T, S) made by GPT
            k, v = self.cache.write(k, v, at, mask.size(-1))  # (B, nh, S, hs): stale slots masked
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            P = self.cache.length  # tokens already cached: the new queries sit at positions P..P+T-1
            k, v = self.cache.append(k, v)  # (B, nh, P+T, hs)
            # query i (absolute position P+i) may attend to keys 0..P+i; one query may attend to all of them.
            # A tree of drafts brings its own mask: each draft sees the prefix and its own branch only
            if mask is None and T > 1:
                mask = torch.ones(T, P + T, dtype=torch.bool, device=x.device).tril(diagonal=P)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)  # mask (T, P+T)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): re-assemble the heads
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's GELU
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, use_cache=False, mask=None, at=None):
        x = x + self.attn(self.ln_1(x), use_cache, mask, at)  # pre-LayerNorm residual blocks (GPT-2)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size > 0 and config.block_size > 0, "vocab_size and block_size must be positive"
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
            wpe=nn.Embedding(config.block_size, config.n_embd),  # learned absolute positions
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.caches = []  # one KVCache per layer while decoding (reset_cache), or one RowKVCache (reset_row_cache)
        self.row_lengths = None  # (B,) tokens each row holds, with RowKVCaches
        self.features = None  # Features of the last forward
        self.transformer.wte.weight = self.lm_head.weight  # weight tying (Press & Wolf 2017), as GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self):
        """Parameters, counting the tied embedding once and leaving out the position table (as nanoGPT)."""
        return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

    # ---- the KV cache -------------------------------------------------------------------------------------

    def reset_cache(self, batch_size=1):
        """Allocate (or empty) the cache: block_size positions per layer, in the model's dtype and device."""
        w = self.lm_head.weight
        hs = self.config.n_embd // self.config.n_head
        self.use_caches([KVCache(batch_size, self.config.n_head, self.config.block_size, hs, w.device, w.dtype)
                         for _ in self.transformer.h])

    def reset_row_cache(self, batch_size, room=0):
        """Allocate an empty per-row cache for batch_size rows (engine/batched.py): block_size + room slots per row. The
        room holds tokens fed past a row's window that the caller discards (a round's unused drafts)."""
        w = self.lm_head.weight
        hs = self.config.n_embd // self.config.n_head
        size = self.config.block_size + room
        self.use_caches([RowKVCache(batch_size, self.config.n_head, size, hs, w.device, w.dtype)
                         for _ in self.transformer.h], torch.zeros(batch_size, dtype=torch.long, device=w.device))

    def use_caches(self, caches, row_lengths=None):  # one cache per layer; row_lengths (B,) with RowKVCaches
        self.caches, self.row_lengths = caches, row_lengths  # a plain list: cheaper to reach than through modules
        for block, cache in zip(self.transformer.h, caches):
            block.attn.cache = cache

    def crop_rows(self, lengths):
        """Set every row's length ((B,) ints): row b forgets its tokens from lengths[b] on. O(1) per row."""
        self.row_lengths = torch.as_tensor(lengths, dtype=torch.long, device=self.row_lengths.device)

    def keep_rows(self, index):
        """Keep only the rows `index` ((B',) ints), in that order: the batch shrinks (rows that have finished)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.row_lengths.device)
        for cache in self.caches:
            cache.keep(index)
        self.row_lengths = self.row_lengths[index]

    @property
    def cache_len(self):
        """How many tokens the cache holds (0 when no cache was allocated)."""
        return self.caches[0].length if self.caches else 0

    def crop(self, n):
        """Roll the cache back to its first n tokens. O(1): the stale entries are overwritten later."""
        assert 0 <= n <= self.cache_len, f"crop({n}) needs 0 <= n <= cache_len ({self.cache_len})"
        for cache in self.caches:
            cache.length = n

    def compact(self, n, slots):
        """Keep the first n cached tokens followed by the ones at `slots` (increasing, >= n); see KVCache.compact."""
        move = compact_moves(n, slots, self.cache_len)
        for cache in self.caches:
            cache.compact(n, slots, move)

    # ---- forward ------------------------------------------------------------------------------------------

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, rows=None, span=None):
        """idx (B, T) token ids -> (logits (B, T, V), loss or None).

        use_cache=False: idx is a whole context starting at position 0 (training, reference scoring).
        use_cache=True: idx continues what the cache holds; its tokens sit at positions cache_len.. and are
        appended to the cache. Call reset_cache() first.
        pos (T,) and mask (T, cache_len + T), with use_cache: a tree of tokens instead of a chain (tree attention,
        verifiers/tree.py): token i sits at position pos[i] and attends to the cached and new tokens where mask[i] is
        True. Defaults: positions cache_len.., causal.
        With a per-row cache (reset_row_cache), row b of idx continues row b of the cache (or row rows[b]: a subset
        of the rows, (B,) ints), span: see row_forward.
        """
        B, T = idx.size()
        if use_cache and self.row_lengths is not None:
            assert pos is None and mask is None, "trees of tokens need the one-row cache (reset_cache)"
            return self.row_forward(idx, rows, span), None
        if use_cache and not self.caches:
            self.reset_cache(B)
        start = self.cache_len if use_cache else 0
        if pos is None:
            assert start + T <= self.config.block_size, (
                f"cannot attend to {start + T} positions, block_size is only {self.config.block_size}")
            pos_emb = self.transformer.wpe.weight[start:start + T]  # (T, C): positions start..start+T-1
        else:
            assert use_cache and mask is not None and mask.shape == (T, start + T), (
                f"a tree needs use_cache=True, pos (T,) and mask (T, cache_len + T) = ({T}, {start + T})")
            assert int(pos.max()) < self.config.block_size, (
                f"position {int(pos.max())} is beyond block_size {self.config.block_size}")
            pos_emb = self.transformer.wpe.weight[pos]  # (T, C)
        x = self.transformer.drop(self.transformer.wte(idx) + pos_emb)  # (B, T, C)
        for block in self.transformer.h:
            x = block(x, use_cache, mask)
        self.features = Features(start, idx, x)  # what a draft that reads the target takes (drafts/heads.py)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), ignore_index=-1)
        return logits, loss


    def row_forward(self, idx, rows=None, span=None):  # (B', T) -> logits (B', T, V)
        """Append T tokens to each row of the per-row cache (or to rows `rows`) and return their logits.

        Row b's tokens go to slots L..L+T-1, L = row_lengths[b], which are also their positions; token i sees the
        slots <= L+i. Every shape depends only on B', T and the cache size, never on a row's length: no slicing
        by a Python int, no host read. Positions past block_size (tokens the caller will discard) are clamped.
        span (optional): attend over the first span slots only, a bound the caller knows (max length + T): fewer
        keys, cheaper on a CPU, but then the shapes change with it.
        """
        B, T = idx.size()
        lengths = self.row_lengths if rows is None else self.row_lengths[rows]  # (B',)
        slots = lengths[:, None] + torch.arange(T, device=idx.device)  # (B', T)
        size = span or self.caches[0].k.size(2)
        hidden = torch.arange(size, device=idx.device) > slots[..., None]  # (B', T, S): keys after a token's own slot
        mask = torch.zeros(hidden.shape, device=idx.device, dtype=self.lm_head.weight.dtype).masked_fill(
            hidden, float("-inf"))[:, None]  # (B', 1, T, S): added to the attention scores
        pos = slots.clamp(max=self.config.block_size - 1)  # subtle: only discarded tokens sit past the window
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B', T, C)
        at = (torch.arange(B, device=idx.device) if rows is None else rows)[:, None], slots, rows is None
        for block in self.transformer.h:
            x = block(x, True, mask, at)
        self.features = Features(None, idx, x)  # rows sit at positions of their own (slots)
        if rows is None:
            self.row_lengths = lengths + T
        else:
            self.row_lengths = self.row_lengths.index_add(0, rows, torch.full_like(rows, T))
        return self.lm_head(self.transformer.ln_f(x))  # (B', T, V)


# ---- checkpoints: plain data only ---------------------------------------------------------------------------

# the shipped pair, which git clone brings (sample.py's and bench.py's default; train_draft.py will not overwrite it)
SHIPPED = {role: os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints", f"{role}.pt")
           for role in ("target", "draft")}


def save_checkpoint(path, model, meta=None, dtype=None):
    """Write {model_args, state_dict, meta} atomically (temp file + rename): a run killed at any moment
    leaves the previous checkpoint intact. dtype=torch.float16 halves the file; load_checkpoint restores
    float32. The tied lm_head.weight is stored once (as transformer.wte.weight)."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    ckpt = {"model_args": asdict(model.config), "state_dict": state, "meta": dict(meta or {})}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)  # atomic on POSIX and Windows


def load_checkpoint(path, device="cpu"):
    """-> (model in eval mode, float32 on `device`, meta dict). Raises a clear error for a missing file, and for
    weights that hold NaN or inf (they would only surface later, as NaN logits while sampling)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}: train one with train_draft.py "
                                "(see README, 'Train your own') or pass the right path")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or "model_args" not in ckpt or "state_dict" not in ckpt:
        raise ValueError(f"{path!r} is not a checkpoint written by model.save_checkpoint")
    for name, w in ckpt["state_dict"].items():
        if w.is_floating_point() and not torch.isfinite(w).all():
            n_nan, n_inf = torch.isnan(w).sum().item(), torch.isinf(w).sum().item()
            hint = " (or weights beyond float16's range 65504, saved with dtype=float16)" if n_inf else ""
            raise ValueError(f"{path!r}: tensor {name!r} holds {n_nan} NaN and {n_inf} inf of its {w.numel()} "
                             f"values: the training run diverged{hint}. Restore an earlier checkpoint, or retrain "
                             "(a lower --lr often helps)")
    model = GPT(GPTConfig(**ckpt["model_args"]))
    state = {k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (
        f"{path!r} does not match its own model_args: missing {missing}, unexpected {unexpected}")
    model.to(device).eval()
    return model, ckpt.get("meta", {})
