"""
A compact GPT (the GPT-2 architecture) with KV caches that can be rolled back.

What it is:
- GPT-2 as in Radford et al. 2019 and karpathy/nanoGPT: learned absolute positions, pre-LayerNorm blocks,
  GELU MLP, input and output embeddings tied. Parameter names follow GPT-2 (transformer.h.0.attn.c_attn ...)
  so GPT-2 weights can be mapped onto it.
- model(idx) returns logits for EVERY position, shape (B, T, V) (nanoGPT returns only the last one at
  inference). Speculative sampling needs them all: the target scores K+1 positions in one forward.
- The KV caches are small classes of their own, outside the model, with one interface (see "the KV caches"
  below): model(idx, use_cache=True) asks the cache where idx's T new tokens sit and what each sees (place), and
  each layer hands it the new keys and values and gets back every key and value they may see (write).
  ChainCache (model.reset_cache()): one sequence, preallocated once; model.crop(n) forgets everything after the
  first n tokens in O(1) (it only moves a counter), which is how rejected draft tokens are rolled back. It also
  takes trees of drafts (verifiers/tree.py): model(idx, use_cache=True, pos=..., mask=...) feeds tokens at given
  positions, each seeing the cached and new tokens its mask allows; model.compact(n, slots) then keeps the
  accepted path. The target scores a whole tree this way, and the draft grows one a level at a time.
  RowCache (model.reset_row_cache(B)): several sequences at once (engine/batched.py), a length per row: row b's
  new tokens go to that row's own offset row_lengths[b] (which is also their position), each behind its own
  causal mask, and model.crop_rows(lengths) rolls rows back in O(1). Its shapes never depend on how many tokens
  a row holds, so one width always runs the same kernels.
- The features: every forward leaves the final block's output of the positions it scored (what ln_f and the LM
  head read) in model.features, a Features(at, ids, x) record, at no extra cost. A draft that reads the target
  (drafts/eagle.py, drafts/medusa.py) takes the features of the accepted prefix from there.
- save_checkpoint / load_checkpoint: a plain-data dict (state_dict + model args + free-form meta such as the
  tokenizer), so torch.load(..., weights_only=True) works and nothing is guessed at load time.

What it leaves out: flash/fused kernels beyond torch's scaled_dot_product_attention, trees of tokens in the
RowCache, rotary/relative positions, and the training loop (see train_draft.py).
"""

import math
import os
import pickle
import zipfile
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
    at: int  # position of the first scored token: the cache length before the forward (0 without a cache, None
    #          with a RowCache: each row's tokens sit at positions of their own)
    ids: torch.Tensor  # (B, T) the tokens fed
    x: torch.Tensor  # (B, T, C) the final block's output, before ln_f
    layers: tuple = ()  # (B, T, C) each: the outputs of the blocks model.keep_layers names (drafts/eagle3.py)

    def compacted(self, n, slots):  # -> the record of the tokens that compact(n, slots) keeps, in their new order
        """After a tree forward the cache keeps the prefix and the accepted branch (compact): the record follows it,
        so it again describes a chain from position at on (what drafts/heads.py reads)."""
        rows = [i for i in range(self.ids.size(1)) if self.at + i < n or self.at + i in slots]
        pick = lambda a: a[:, rows]
        return Features(self.at, pick(self.ids), pick(self.x), tuple(pick(a) for a in self.layers))


class CausalSelfAttention(nn.Module):

    def __init__(self, config, layer=0):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.layer = layer  # which of a cache's layers holds this block's keys and values

    def forward(self, x, cache=None, mask=None):  # (B, T, C) -> (B, T, C); mask: what cache.place returned
        B, T, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        # q, k, v at once: (B, T, 3C) -> (B, T, 3, nh, hs) -> (3, B, nh, T, hs) -> three (B, nh, T, hs). One view
        # and one permute instead of a split, three views and three transposes: a one-token decoding step is
        # dominated by the fixed cost of each PyTorch operation, not by arithmetic.
        q, k, v = self.c_attn(x).view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4).unbind(0)
        dropout = self.attn_dropout if self.training else 0.0
        if cache is None:  # a whole context from position 0: plain causal attention
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:  # the new keys and values join the cached ones; the mask says which of them each query sees
            k, v = cache.write(self.layer, k, v)  # (B, nh, S, hs): S cached and new slots
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
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

    def __init__(self, config, layer=0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, cache=None, mask=None):
        x = x + self.attn(self.ln_1(x), cache, mask)  # pre-LayerNorm residual blocks (GPT-2)
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
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.cache = None  # while decoding: a ChainCache (reset_cache) or a RowCache (reset_row_cache)
        self.features = None  # Features of the last forward
        self.keep_layers = ()  # block indices whose outputs the features also keep (a draft that reads them sets it)
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

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, rows=None, span=None):
        """idx (B, T) token ids -> (logits (B, T, V), loss or None).

        use_cache=False: idx is a whole context starting at position 0 (training, reference scoring).
        use_cache=True: idx continues what the cache holds (reset_cache or reset_row_cache; the first cached forward
        allocates a ChainCache if neither ran). The cache places the new tokens and keeps their keys and values:
        pos (T,) and mask (T, cache_len + T) feed a tree of tokens (ChainCache.place), rows and span a subset of
        the rows of a RowCache (RowCache.place).
        """
        cache, pos, mask = self.placed(idx, use_cache, pos, mask, rows, span)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe.weight[pos])  # (B, T, C)
        kept = []
        for i, block in enumerate(self.transformer.h):
            x = block(x, cache, mask)
            if i in self.keep_layers:
                kept.append(x)
        return self.finish(idx, x, cache, kept, targets)

    def placed(self, idx, use_cache, pos, mask, rows, span):  # -> (cache or None, positions, mask) of idx's tokens
        """Where the T new tokens of idx (B, T) sit and what each sees: positions 0..T-1 and causal attention without
        a cache; with one, what its place() says (allocating a ChainCache on the first cached forward)."""
        B, T = idx.size()
        if not use_cache:  # positions 0..T-1, causal attention
            assert pos is None and mask is None, "a tree of tokens (pos, mask) needs use_cache=True"
            assert T <= self.config.block_size, (
                f"cannot attend to {T} positions, block_size is only {self.config.block_size}")
            return None, slice(0, T), None
        if self.cache is None:
            self.reset_cache(B)
        pos, mask = self.cache.place(T, pos, mask, rows, span)  # where the new tokens sit, and what each sees
        return self.cache, pos, mask

    def finish(self, idx, x, cache, kept, targets):  # final block's output x (B, T, C) -> (logits (B, T, V), loss)
        """Record the features (drafts/heads.py reads them), then the final norm and the LM head."""
        self.features = Features(0 if cache is None else cache.start, idx, x, tuple(kept))
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), ignore_index=-1)
        return logits, loss

    # ---- the cache: which kind, and its rollback ------------------------------------------------------------

    def reset_cache(self, batch_size=1):
        """Allocate an empty ChainCache: block_size positions per layer, in the model's dtype and device."""
        c, w = self.config, self.transformer.wte.weight  # (wte: a quantized lm_head has no weight tensor)
        self.cache = ChainCache(c.n_layer, batch_size, c.n_head, c.block_size, c.n_embd // c.n_head, w.device, w.dtype)

    def reset_row_cache(self, batch_size, room=0):
        """Allocate an empty RowCache for batch_size rows (engine/batched.py), block_size + room slots per row."""
        c, w = self.config, self.transformer.wte.weight
        self.cache = RowCache(c.n_layer, batch_size, c.n_head, c.block_size, c.n_embd // c.n_head, w.device, w.dtype,
                              room)

    @property
    def cache_len(self):
        """How many tokens the ChainCache holds (0 when no cache was allocated)."""
        return 0 if self.cache is None else self.cache.length

    @property
    def row_lengths(self):  # (B,) tokens each row holds, with a RowCache; None otherwise
        return getattr(self.cache, "lengths", None)

    def crop(self, n):
        """Roll the cache back to its first n tokens. O(1): the stale entries are overwritten later."""
        assert 0 <= n <= self.cache_len, f"crop({n}) needs 0 <= n <= cache_len ({self.cache_len})"
        if self.cache is not None:
            self.cache.crop(n)

    def compact(self, n, slots):
        """Keep the first n cached tokens followed by the ones at `slots` (increasing, >= n): ChainCache.compact.
        The last forward's features follow (Features.compacted)."""
        self.cache.compact(n, slots)
        if self.features is not None and self.features.at is not None:
            self.features = self.features.compacted(n, slots)

    def crop_rows(self, lengths):
        """Set every row's length ((B,) ints): row b forgets its tokens from lengths[b] on. O(1) per row."""
        self.cache.crop_rows(lengths)

    def keep_rows(self, index):
        """Keep only the rows `index` ((B',) ints), in that order: the batch shrinks (rows that have finished)."""
        self.cache.keep_rows(index)

    def row_forward(self, idx, rows=None, span=None):  # (B', T) -> logits (B', T, V), with a RowCache
        return self(idx, use_cache=True, rows=rows, span=span)[0]


# ---- the KV caches: one interface, one class per kind ---------------------------------------------------------
#
# While decoding, GPT.forward(idx, use_cache=True) asks its cache three things, whatever its kind:
#   pos, mask = cache.place(T, pos, mask, rows, span)  where T new tokens sit (the rows of wpe to read) and what
#                                                      each sees (the attention mask; None: everything)
#   k, v = cache.write(layer, k, v)                    (in each layer) store the new keys and values, and return
#                                                      every key and value the new tokens may see
#   cache.start                                        position of the first new token (Features.at), or None
# and the rollback is the cache's own: crop / compact for a ChainCache, crop_rows / keep_rows for a RowCache.
# A new kind of cache is a new class with place and write, not a new branch inside forward().


def compact_moves(n, slots, length):  # -> False if `slots` already follow the first n tokens: nothing to move
    """The argument check of every cache's compact(n, slots), with `length` tokens cached."""
    assert slots == sorted(set(slots)) and all(n <= a < length for a in slots), (
        f"compact({n}, {slots}) needs increasing slots in [{n}, cache_len {length})")
    return slots != list(range(n, n + len(slots)))


class ChainCache:
    """Keys and values of every layer for one sequence (or B of the same length), preallocated for `window`
    positions: slot i holds the token at position i. Only the first `length` slots are valid; crop(n) just sets
    length = n, so a rollback copies nothing.

    It also takes a tree of tokens (verifiers/tree.py): place(T, pos, mask) puts token i at position pos[i] (in the
    next free slot), seeing the cached and new tokens where mask[i] is True; compact(n, slots) then keeps the
    accepted branch, moved next to the prefix, where each slot is again its position.
    """

    def __init__(self, n_layer, B, n_head, window, head_size, device, dtype):
        self.k = [torch.zeros(B, n_head, window, head_size, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros_like(k) for k in self.k]  # (B, nh, W, hs) per layer
        self.window, self.device = window, device  # positions the model knows (block_size); device: even with 0 layers
        self.start = self.length = 0  # the tokens fed last sit at slots start..length-1

    def place(self, T, pos=None, mask=None, rows=None, span=None):  # -> positions (slice or (T,)), mask (T, length)
        assert rows is None and span is None, "rows and span are for the per-row cache (reset_row_cache)"
        start, end = self.length, self.length + T
        if pos is None:  # a chain: positions start..end-1; query i (position start+i) sees keys 0..start+i
            assert end <= self.window, f"cannot attend to {end} positions, block_size is only {self.window}"
            pos = slice(start, end)
            if T > 1:  # (one query sees every key: no mask)
                mask = torch.ones(T, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
        else:  # a tree brings its own mask: each token sees the prefix and its own branch only
            assert mask is not None and mask.shape == (T, end), (
                f"a tree needs use_cache=True, pos (T,) and mask (T, cache_len + T) = ({T}, {end})")
            assert int(pos.max()) < self.window, f"position {int(pos.max())} is beyond block_size {self.window}"
            if self.k and end > self.k[0].size(2):  # subtle: only a tree holds more tokens than positions: more room
                self.k = [torch.cat([k, torch.zeros_like(k[:, :, :end])], 2) for k in self.k]
                self.v = [torch.cat([v, torch.zeros_like(v[:, :, :end])], 2) for v in self.v]
        self.start, self.length = start, end
        return pos, mask

    def write(self, layer, k, v):  # (B, nh, T, hs) x2 -> the layer's valid keys and values, (B, nh, length, hs) x2
        self.k[layer][:, :, self.start:self.length] = k
        self.v[layer][:, :, self.start:self.length] = v
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def crop(self, n):  # forget the tokens from slot n on; later writes overwrite them
        self.length = n

    def compact(self, n, slots):
        """Keep the first n cached tokens, then the tokens at `slots` (increasing, each >= n); forget the rest.
        After a tree of drafts (verifiers/tree.py) this moves the accepted branch next to the prefix."""
        if compact_moves(n, slots, self.length):
            for k, v in zip(self.k, self.v):
                k[:, :, n:n + len(slots)] = k[:, :, slots]  # advanced indexing copies first: overlap is safe
                v[:, :, n:n + len(slots)] = v[:, :, slots]
        self.length = n + len(slots)


class RowCache:
    """Keys and values of every layer for B rows that hold different numbers of tokens (engine/batched.py).

    Preallocated for window + room slots per row; row b holds lengths[b] tokens. A token's slot is its position, so
    row b's new tokens go to slots lengths[b].. and rolling a row back moves its length only. Slots beyond a row's
    length hold stale keys, which the attention mask hides until they are overwritten. No shape depends on how many
    tokens a row holds (attention runs over the whole cache behind a mask, positions are tensors, no host read), so
    one width always runs the same kernels. The room holds tokens fed past a row's window that the caller discards
    (a round's unused drafts). Trees of tokens are left out: each row is a chain.
    """

    def __init__(self, n_layer, B, n_head, window, head_size, device, dtype, room=0):
        self.k = [torch.zeros(B, n_head, window + room, head_size, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros_like(k) for k in self.k]  # (B, nh, S, hs) per layer
        self.window = window  # positions the model knows (block_size)
        self.lengths = torch.zeros(B, dtype=torch.long, device=device)  # (B,) tokens each row holds
        self.start = None  # (Features.at) each row's new tokens sit at positions of their own

    def place(self, T, pos=None, mask=None, rows=None, span=None):  # -> positions (B', T), mask (B', 1, T, S)
        """Row b gets T new tokens (or row rows[b]: rows (B',) is a subset of the rows) at slots L..L+T-1,
        L = lengths[b], which are also their positions; token i sees the slots <= L+i.
        span (optional): attend over the first span slots only, a bound the caller knows (max length + T): fewer
        keys, cheaper on a CPU, but then the shapes change with it."""
        assert pos is None and mask is None, "trees of tokens need the one-row cache (reset_cache)"
        lengths = self.lengths if rows is None else self.lengths[rows]  # (B',)
        device = lengths.device
        slots = lengths[:, None] + torch.arange(T, device=device)  # (B', T)
        S = span or self.k[0].size(2)
        hidden = torch.arange(S, device=device) > slots[..., None]  # (B', T, S): the keys after a token's own slot
        mask = torch.zeros(hidden.shape, device=device, dtype=self.k[0].dtype).masked_fill(
            hidden, float("-inf"))[:, None]  # (B', 1, T, S): added to the attention scores
        every = rows is None  # all rows, in order: no gathering of rows
        self.new = (torch.arange(len(lengths), device=device) if every else rows)[:, None], slots, every, S
        if every:
            self.lengths = lengths + T
        else:
            self.lengths = self.lengths.index_add(0, rows, torch.full_like(rows, T))
        return slots.clamp(max=self.window - 1), mask  # subtle: only discarded tokens sit past the window

    def write(self, layer, k, v):  # (B', nh, T, hs) x2 -> the first S slots of those rows, (B', nh, S, hs) x2
        rows, slots, every, S = self.new  # row rows[b]'s token i goes into slot slots[b, i]
        self.k[layer][rows, :, slots] = k.transpose(1, 2)  # (B', T, nh, hs)
        self.v[layer][rows, :, slots] = v.transpose(1, 2)
        k, v = (self.k[layer], self.v[layer]) if every else (self.k[layer][rows[:, 0]], self.v[layer][rows[:, 0]])
        return k[:, :, :S], v[:, :, :S]  # stale slots: masked

    def crop_rows(self, lengths):  # (B,) ints: row b forgets its tokens from lengths[b] on. O(1) per row
        self.lengths = torch.as_tensor(lengths, dtype=torch.long, device=self.lengths.device)

    def keep_rows(self, index):  # (B',) rows to keep, in this order (engine/batched.py drops finished rows)
        index = torch.as_tensor(index, dtype=torch.long, device=self.lengths.device)
        self.k, self.v = [k[index] for k in self.k], [v[index] for v in self.v]
        self.lengths = self.lengths[index]


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


def read_plain(path, writer, retrain):  # -> torch.load(path) of plain data, or one clear ValueError
    """torch.load(path, weights_only=True) for the checkpoints written by `writer`. A file torch cannot read (cut
    short while copying, or not a checkpoint at all: a text file, another format) gets one line naming it, saying
    what it is instead (unreadable) and what to do, instead of torch's traceback, whose advice (weights_only=False)
    would run what it holds."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:  # (its own message is clear)
        raise
    except Exception as e:  # subtle: a text file parses as pickle opcodes, so any error can come out (IndexError...)
        what, cut = unreadable(path, e)
        todo = (f"Copy it again (the shipped ones: git checkout -- checkpoints/), or {retrain}" if cut else
                f"Pass a checkpoint written by {writer} (the shipped ones are in checkpoints/), or {retrain}")
        raise ValueError(f"{path!r} {what}. {todo}") from None


def unreadable(path, error):  # -> (what path is, in words; was it cut short?), for a file torch.load refused
    """'x.pt' holding "text" -> ("is not a checkpoint (a torch.save file): it is a text file, beginning 'text'", False).
    torch.save writes a zip archive holding data.pkl (older torch: a bare pickle); the first bytes tell the rest."""
    if os.path.isdir(path):
        return "is a folder, not a checkpoint (a torch.save file)", False
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if size == 0:
        return "is empty (0 bytes), not a checkpoint (a torch.save file)", True
    if head.startswith(b"PK\x03\x04"):  # a zip archive, as torch.save writes
        try:
            names = zipfile.ZipFile(path).namelist()
        except zipfile.BadZipFile:  # the directory at its end is missing
            return f"is cut short: it begins as a checkpoint (a torch.save zip archive) but ends at byte {size}", True
        if not any(name.endswith("/data.pkl") or name == "data.pkl" for name in names):
            return (f"is a zip archive, not a checkpoint (a torch.save file holds data.pkl; this one holds "
                    f"{', '.join(names[:3]) or 'nothing'})"), False
        if isinstance(error, pickle.UnpicklingError):
            return ("is a torch.save file of Python objects beyond tensors, numbers and dicts (a whole model saved "
                    "with torch.save(model)?): loading those would run their code"), False
        return f"is a damaged checkpoint (torch.load: {type(error).__name__}: {str(error).splitlines()[0]})", True
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the 4096th byte is still text
        text = head[:e.start].decode("utf-8") if e.start >= len(head) - 3 else None
    if text is not None and "\0" not in text:
        first = text.strip().splitlines()[0] if text.strip() else text
        return f"is not a checkpoint (a torch.save file): it is a text file, beginning {first[:40]!r}", False
    return ("is not a checkpoint (a torch.save file): its bytes are neither a zip archive nor a pickle that "
            "torch.load reads"), False


def load_checkpoint(path, device="cpu"):
    """-> (model in eval mode, float32 on `device`, meta dict). Raises a clear error for a missing file, one that
    is truncated or not a checkpoint, and weights that hold NaN or inf (they would only surface later, as NaN
    logits while sampling)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}: train one with train_draft.py "
                                "(see README, 'The shipped pair, and your own') or pass the right path")
    ckpt = read_plain(path, "model.save_checkpoint", "retrain it with train_draft.py")
    if not isinstance(ckpt, dict) or "model_args" not in ckpt or "state_dict" not in ckpt:
        raise ValueError(f"{path!r} is a torch.save file, but not a checkpoint written by model.save_checkpoint (it "
                         "holds no model_args and state_dict): pass one train_draft.py wrote, e.g. checkpoints/draft.pt")
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
    model.meta = ckpt.get("meta", {})  # also on the model: a draft built from it may need its tokenizer (drafts/suffix.py)
    return model, model.meta
