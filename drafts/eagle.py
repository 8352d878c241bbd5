"""
An EAGLE-style draft: n_layer decoder blocks that predict the target's next feature, read by the target's own LM
head. Lossless, as every draft of the cache interface.

Source: Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty" (arXiv:2401.15077),
Sections 3-4. At position j the draft reads f_{j-1} (the target's feature) and the embedding of x_j (a linear
2C -> C joins them) and predicts f_j; the target's frozen ln_f and LM head turn the prediction into q(x_{j+1}).
Where f_{j-1} is not known (the drafts of the round being drafted) it reads its own prediction instead. Its KV
cache rolls back like any draft's. In Theorem 3.8's terms: a higher alpha than a small draft model's (it sees
what the target computed), at a c of one block at the target's width, plus one target read per window slide.

    speculative_generate(target, heads.load("checkpoints/eagle.pt", target), idx, n)   # sample.py --draft eagle

Trees of drafts (verify="tree", EAGLE-2's dynamic trees): each level in one forward, with tree attention over this
draft's own cache; a node reads the predicted feature of its parent (the deepest earlier slot its mask shows).

What it leaves out: batches. EAGLE-3's features from several blocks are drafts/eagle3.py, a subclass. The shared
part (features, checkpoints, the tree's bookkeeping) is drafts/heads.py; training is train_draft.py --head eagle.
"""

import copy

import torch
import torch.nn as nn
from torch.nn import functional as F

from drafts import heads
from drafts.heads import ReadsTarget
from engine.llama import block_weights, rope_tables, run_layers
from model import ChainCache


def blocks_like(target, n_layer):  # -> n_layer fresh decoder blocks of the target's own kind (GPT-2's, or Llama's)
    config = copy.copy(target.config)
    config.n_layer = n_layer
    if hasattr(config, "dropout"):
        config.dropout = 0.0
    block = type(target.transformer.h[0])
    return nn.ModuleList(block(config, i) for i in range(n_layer))


class EagleDraft(ReadsTarget):
    """EAGLE-style draft: n_layer decoder blocks that predict the target's next feature from (f_{j-1}, x_j)."""

    def __init__(self, target, n_layer=1, draft_vocab=0):
        super().__init__(target, draft_vocab)
        if not isinstance(n_layer, int) or n_layer < 1:
            raise ValueError(f"n_layer must be an int >= 1, got {n_layer!r}")
        c = target.config
        self.n_layer = n_layer
        self.fuse = nn.Linear(2 * c.n_embd, c.n_embd, bias=c.bias)  # [f_{j-1}, e(x_j)] (2C) -> C, EAGLE's fc
        self.h = blocks_like(target, n_layer)
        for name, p in self.named_parameters():  # GPT-2's initialisation; the norms' weights stay 1
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.normal_(p, 0.0, 0.02)
        self.to(target.lm_head.weight.device, target.lm_head.weight.dtype)
        self.exact = 0  # the leading positions computed from the target's features only (not from predictions)
        self.pred = []  # the predicted feature (C,) at each cache slot: the window's positions, then a tree's nodes
        self.cache = None  # the blocks' KV cache (model.ChainCache), made at the first forward
        self.synced = None  # the first position sync() took without running the blocks (a stacked draft's path)
        self.formatted = (None, None)  # (the blocks' weights as run_layers takes them, what they were made from)

    def predict(self, f_prev, idx, cache=None, pos=None, mask=None):  # (B, T, C), (B, T) -> predicted features (B, T, C)
        """f_prev[:, i] = f_{start+i-1} (zeros at position 0), idx[:, i] = x_{start+i} -> f_{start+i} predicted;
        start is 0, or with a cache the positions it holds. pos and mask: a tree's level (model.ChainCache.place)."""
        T = idx.size(1)
        pos, mask = (slice(0, T), None) if cache is None else cache.place(T, pos, mask)  # causal, or the tree's
        return self.run_blocks(self.fuse(torch.cat([f_prev, self.target.transformer.wte(idx)], -1)), pos, cache, mask)

    def run_blocks(self, x, pos, cache, mask):  # (B, T, C) at positions pos -> the blocks' output (B, T, C)
        """Positions as the target takes them: GPT-2's learned table added to the input, or Llama's rotary angles
        handed to every block (they turn its queries and keys). Beside a quantized Llama (rows_in(..., blocks=True))
        the blocks run as engine/llama.py runs the target's, their matrices in int8: the same arithmetic, rounded."""
        rope = getattr(self.target, "rope", None)
        if rope is not None and cache is not None and self.blocks_format != "float32":
            weights, cos, sin = self.formatted_blocks(rope)
            return run_layers(self.config, x, weights, self.blocks_format, cache, pos, mask, cos, sin)[0]
        extra = () if rope is None else (rope[pos],)
        if rope is None:
            x = x + self.target.transformer.wpe.weight[pos]
        for block in self.h:
            x = block(x, *extra, cache, mask)
        return x

    def formatted_blocks(self, rope):  # -> (the blocks' weights as run_layers takes them in blocks_format, cos, sin)
        key = (self.blocks_format, rope.data_ptr(), *((p._version, p.data_ptr()) for p in self.h.parameters()))
        if self.formatted[1] != key:  # made once; subtle: load_state_dict and training bump the versions
            weights = [block_weights(block, self.blocks_format) for block in self.h]
            self.formatted = ((weights, *rope_tables(rope)), key)
        return self.formatted[0]

    def new_cache(self, device):  # the blocks' KV cache: the window's positions, the target's key/value heads
        c = self.config
        return ChainCache(self.n_layer, 1, getattr(c, "n_kv_head", c.n_head), c.block_size, c.n_embd // c.n_head,
                          device, self.dtype)

    def teacher_forced(self, idx, features, steps=1):  # (B, T), (B, T, C) -> [predicted features (B, T, C)] * steps
        """The naive path (training, tests): step 1 reads the target's features, step s > 1 the predictions of step
        s - 1 at every position, with plain causal attention. A round's later drafts read predictions too, but attend
        to cache entries computed from the target's features; masking that view in (EAGLE-3's training-time test,
        arXiv:2503.01840) was tried over three steps and kept fewer drafts here (BENCHMARKS.md)."""
        features = self.from_target(features)  # (B, T, C)
        zero = torch.zeros_like(features[:, :1])
        f_prev, out = torch.cat([zero, features[:, :-1]], 1), []
        for _ in range(steps):
            out.append(self.predict(f_prev, idx))
            f_prev = torch.cat([zero, out[-1][:, :-1].detach()], 1)
        return out

    def from_target(self, f):  # (..., F) the target's features as read -> (..., C) what predict() reads in their place
        return f

    def crop(self, n):
        super().crop(n)
        self.exact = min(self.exact, n)
        del self.pred[n:]
        if self.synced is not None and self.synced >= n:
            self.synced = None

    def sync(self, ids):
        """ids: the window's tokens so far, ours and more (drafts/suffix.py's StackedDraft: its path drafted them).
        Take the new ones and the target's features of those it scored, running nothing: the blocks compute them
        when this draft is next asked, reading predictions where no target scored the tokens yet."""
        if self.nodes or ids[:len(self.ids)] != self.ids:
            raise ValueError("sync() takes the window's tokens so far, which begin with the ones this draft holds")
        if len(ids) > len(self.ids):
            self.synced = len(self.ids) if self.synced is None else self.synced
            self.ids += ids[len(self.ids):]
        self.absorb()

    def compact(self, n, slots):  # the accepted branch of a tree becomes the window's next positions
        super().compact(n, slots)
        self.pred = self.pred[:n] + [self.pred[a] for a in slots]
        self.cache.compact(n, slots)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (1, T) -> (logits (1, T, V), None)
        L = self.cache_len
        T, end = self.feed(idx, pos, use_cache)
        if pos is not None:  # a level of a draft tree: node i reads the predicted feature of its parent, the deepest
            parents = L - 1 - mask[:, :L].flip(1).int().argmax(1)  # earlier slot it sees (tree_attention's mask)
            f_prev = torch.stack([self.pred[j] for j in parents.tolist()])[None]  # (1, T, C)
            out = self.predict(f_prev, idx, self.cache, pos, mask)
            self.pred += list(out[0])
            return self.draft_head(out), None
        n = self.n_known()
        drafting = n < end - 1 and T == 1 and len(self.pred) == end - 1  # the previous position was computed
        stacked = self.synced is not None and n >= max(self.synced, 1)  # the unknown ones: a stacked path's (sync)
        if n < end - 1 and not drafting and not stacked:  # (EAGLE needs no feature before position 0)
            self.read_target(end - 1)  # nothing known of this window yet: call start or a slide
            n = end - 1
        if self.cache is None:
            self.cache = self.new_cache(idx.device)
        ids = lambda a, b: torch.tensor([self.ids[a:b]], device=idx.device)
        if drafting:  # a later draft of this round: it reads the previous draft's predicted feature
            start = end - 1
            self.cache.crop(min(self.cache.length, start))
            out = self.predict(self.pred[-1][None, None], ids(start, end), self.cache)  # (1, 1, C)
        else:  # subtle: positions computed from predictions (the last round's drafts) are recomputed from features
            start, upto = min(self.exact, len(self.pred), end - T), min(end, n + 1)  # upto: f_{upto-2} is known
            f_prev = self.from_target(self.known[max(start - 1, 0):upto - 1][None])  # (1, T', C): f_{start-1} ..
            if start == 0:  # position 0 has no earlier feature
                f_prev = torch.cat([f_prev.new_zeros(1, 1, f_prev.size(-1)), f_prev], 1)
            self.cache.crop(min(self.cache.length, start))  # the KV cache keeps only positions computed before `start`
            outs = [self.predict(f_prev, ids(start, upto), self.cache)]
            for j in range(upto, end):  # tokens a stacked path drafted, not scored yet: each reads its predecessor's
                outs.append(self.predict(outs[-1][:, -1:], ids(j, j + 1), self.cache))  # prediction, as drafts do
            out = torch.cat(outs, 1)
        self.exact = min(end, n + 1)
        self.pred[start:] = list(out[0])  # positions start..end-1
        return self.draft_head(out[:, -T:]), None

    def loss(self, idx, features, p, steps=2):
        """p: the target's next-token distribution over the draft's vocabulary (target_probs) -> (loss, [alpha
        estimate at T=1 per step]). Per step: smooth L1 on the features, the total variation between p and q (1 - TV
        is the acceptance at T=1), and a little cross-entropy against p; step s weighs 0.5^(s-1)."""
        total, alphas = 0.0, []
        for s, pred in enumerate(self.teacher_forced(idx, features, steps)):
            tv, ce = heads.match_terms(self.reduced_logits(pred), p)
            total = total + 0.5 ** s * (F.smooth_l1_loss(pred.float(), features.float()) + tv + 0.1 * ce)
            alphas.append(1.0 - tv.item())
        return total, alphas


heads.register("eagle", EagleDraft, ("n_layer", "draft_vocab"),
               doc="EAGLE-style draft that reads the target's features (checkpoints/eagle.pt): lossless")
