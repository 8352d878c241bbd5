"""
The classic draft, built from the target: a small model of the target's own kind (its first n_layer blocks to start
with), distilled on the target's next-token distributions, proposing over a reduced vocabulary. Lossless, as every
draft of the cache interface.

Sources: Leviathan et al. 2023 and Chen et al. 2023 (a small model of the same family as the draft); its first
layers as the starting point, as LayerSkip's early exit (drafts/self_drafts.py) without the target's later layers;
the reduced vocabulary of EAGLE-3 and FR-Spec (Zhao et al. 2025, arXiv:2502.14856), drafts/heads.py.

It reads no feature of the target: only token ids, as checkpoints/draft.pt does. What it shares with the target is
read, not copied: the token embedding, the final norm and the LM head's rows of its vocabulary, so its checkpoint
holds its blocks alone (2 of SmolLM2's: 7M parameters, 14 MB in float16, against 28M for an embedding of its own).
In Theorem 3.8's terms: c about n_layer / n_layer(target) plus the reduced head; alpha what a distilled model of that
depth learns. It is the baseline the feature heads (drafts/eagle3.py) are measured against.

    speculative_generate(target, heads.load("checkpoints/smollm2/small.pt", target), idx, n)  # sample.py --draft small

Training: train_draft.py --target smollm2 --head small (the same data and cache of features as the heads).
"""


import torch

from drafts import heads
from drafts.eagle import EagleDraft


class SmallDraft(EagleDraft):
    """n_layer blocks of the target's kind over its token embedding, its final norm and LM head (frozen, shared)."""

    def __init__(self, target, n_layer=None, draft_vocab=0):  # n_layer: 2, or the target's own where it has fewer
        n_layer = min(2, target.config.n_layer) if n_layer is None else n_layer
        super().__init__(target, n_layer, draft_vocab)
        if n_layer > target.config.n_layer:
            raise ValueError(f"n_layer={n_layer}: a small draft starts from the target's first blocks, and it has "
                             f"{target.config.n_layer}")
        self.fuse = None  # no features to join
        self.h.load_state_dict(target.transformer.h[:n_layer].state_dict())  # start as the target's first blocks

    def absorb(self):  # it reads no features of the target
        pass

    def predict(self, f_prev, idx, cache=None, pos=None, mask=None):  # f_prev is ignored: (B, T) -> (B, T, C)
        T = idx.size(1)
        pos, mask = (slice(0, T), None) if cache is None else cache.place(T, pos, mask)
        return self.run_blocks(self.target.transformer.wte(idx), pos, cache, mask)

    def teacher_forced(self, idx, features=None, steps=1):  # (B, T) -> [the blocks' output (B, T, C)]
        return [self.predict(None, idx)]

    def compact(self, n, slots):
        heads.ReadsTarget.compact(self, n, slots)
        self.cache.compact(n, slots)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (1, T) -> (logits (1, T, V), None)
        T, end = self.feed(idx, pos, use_cache)
        if self.cache is None:
            self.cache = self.new_cache(idx.device)
        if pos is not None:  # a level of a draft tree
            return self.draft_head(self.predict(None, idx, self.cache, pos, mask)), None
        start = min(self.cache.length, end - T)  # the KV cache keeps the positions computed (crop forgot the rest;
        self.cache.crop(start)  # sync() may have added tokens not computed yet)
        out = self.predict(None, torch.tensor([self.ids[start:end]], device=idx.device), self.cache)
        return self.draft_head(out[:, -T:]), None

    def loss(self, idx, features, p, steps=1):
        """p: the target's next-token distribution over the draft's vocabulary -> (loss, [alpha estimate at T=1]):
        the total variation between p and q and a little cross-entropy against p (distillation, one step)."""
        tv, ce = heads.match_terms(self.reduced_logits(self.predict(None, idx)), p)
        return tv + 0.1 * ce, [1.0 - tv.item()]


heads.register("small", SmallDraft, ("n_layer", "draft_vocab"),
               doc="a small model of the target's kind (its first blocks, distilled), token ids only: lossless",
               pretrained_only=True)  # (the Shakespeare pair's small draft is checkpoints/draft.pt)
