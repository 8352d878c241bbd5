"""
An EAGLE-3-style draft: the EAGLE head of drafts/eagle.py, reading the fused outputs of a low, a middle and a high
block of the target instead of its last feature alone, and trained on tokens only, unrolled on its own outputs.
Lossless, as every draft of the cache interface.

Source: Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test"
(arXiv:2503.01840), Section 3. Two changes from EAGLE-1:
- What it reads. The target's blocks low = 0, middle = (n - 1) // 2 and high = n - 1 (blocks 0, 2 and 5 of the
  shipped 6-block target), side by side (3C), joined into C by one linear layer (`reduce`). The last block alone
  is already shaped for the LM head's next token; the lower ones still hold what the text said (which token,
  where), which the draft needs to guess the tokens after the next. Where no target feature exists (the later drafts
  of a round) the head reads its own last output, as EAGLE-1 does.
- How it learns. No feature regression: only the target's next-token distribution (total variation, 1 - TV being
  the acceptance at T = 1, and a little cross-entropy), over `unroll` steps where step s reads the predictions of
  step s - 1 (the "training-time test"), each step weighed alike, so that the later draft positions are trained as
  much as the first. train_draft.py --head eagle3 --unroll 3.

It predicts tokens with the target's own frozen ln_f and LM head (EAGLE-3 allows a head of its own; the shared
one keeps the draft small). In Theorem 3.8's terms: EAGLE-1's c (one block at the target's width), the target's
forward now also handing over two more blocks' outputs (no extra compute).

What it leaves out: the paper's attention mask for the unrolled steps (the draft sees the teacher-forced prefix
at every step; tried for EAGLE-1 and kept fewer drafts here, BENCHMARKS.md), and batches. Its reduced vocabulary
(draft_vocab, the target's LM head's rows of the tokens it writes most) is drafts/heads.py's, shared by every head.
Trees of drafts (EAGLE-2's dynamic tree: verify="tree", rerank=True) come from drafts/eagle.py, unchanged.
"""

import torch
import torch.nn as nn

from drafts import heads
from drafts.eagle import EagleDraft


def three_layers(n_layer):  # -> (low, middle, high) block indices: 6 blocks -> (0, 2, 5)
    return (0, (n_layer - 1) // 2, n_layer - 1)


class Eagle3Draft(EagleDraft):
    """EAGLE-3-style draft: EagleDraft over the target's blocks three_layers(n), fused; trained on tokens only."""

    def __init__(self, target, n_layer=1, draft_vocab=0):
        super().__init__(target, n_layer, draft_vocab)
        self.layers = three_layers(target.config.n_layer)
        target.keep_layers = tuple(sorted(set(self.layers)))  # the target's forwards now keep these blocks' outputs
        C = target.config.n_embd
        self.reduce = nn.Linear(3 * C, C, bias=target.config.bias)  # [low, middle, high] (3C) -> C, EAGLE-3's fc
        nn.init.normal_(self.reduce.weight, 0.0, 0.02)
        with_high = self.reduce.weight.data[:, 2 * C:]  # start as EAGLE-1: the high block passed through
        with_high += nn.init.eye_(with_high.new_empty(C, C))
        if self.reduce.bias is not None:
            nn.init.zeros_(self.reduce.bias)
        self.reduce.to(target.lm_head.weight.device, target.lm_head.weight.dtype)

    feature_size = property(lambda self: 3 * self.config.n_embd)

    def feature(self, f):  # model.Features -> (B, T, 3C): the low, middle and high blocks' outputs side by side
        by_index = dict(zip(self.target.keep_layers, f.layers))
        if set(self.layers) - set(by_index):
            raise ValueError("the target's forward kept no outputs of blocks "
                             f"{sorted(set(self.layers) - set(by_index))}: something reset target.keep_layers, "
                             "which an eagle3 draft sets when it is built")
        return torch.cat([by_index[i] for i in self.layers], -1)

    def final(self, features):  # the high block is the last one: what ln_f and the LM head read
        return features[..., 2 * self.config.n_embd:]

    def from_target(self, f):
        return self.reduce(f)

    def loss(self, idx, features, p, steps=3):
        """p: the target's next-token distribution over the draft's vocabulary (target_probs) -> (loss, [alpha
        estimate at T=1 per step]). Per step: the total variation between p and q and a little cross-entropy against
        p; the steps weigh alike (the training-time test: later steps read earlier ones)."""
        total, alphas = 0.0, []
        for pred in self.teacher_forced(idx, features, steps):
            tv, ce = heads.match_terms(self.reduced_logits(pred), p)
            total = total + tv + 0.1 * ce
            alphas.append(1.0 - tv.item())
        return total, alphas


heads.register("eagle3", Eagle3Draft, ("n_layer", "draft_vocab"),
               doc="EAGLE-3-style draft: three of the target's blocks fused, trained unrolled (checkpoints/eagle3.pt): lossless")
