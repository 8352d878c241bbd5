"""
Medusa heads: n_heads heads on the last known feature of the target, head i guessing the token i + 1 places on.
Lossless, as every draft of the cache interface.

Source: Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads"
(arXiv:2401.10774), Section 2.1. Head i (a residual SiLU block, then the target's ln_f and LM head) predicts
x_{j+1+i} from f_j: a round's first draft comes from head 1, its second from head 2, ... A head's q ignores the
drafts before it in the round, and the round is still exact. In Theorem 3.8's terms: c is nearly 0 (one small
block per draft, no attention), alpha falls faster along the round than a draft model's, and K <= n_heads.

    speculative_generate(target, heads.load("checkpoints/medusa.pt", target), idx, n)  # sample.py --draft medusa

In a draft tree (verify="tree") every node at one depth gets the same q, that depth's head: with children="top" this
is Medusa's tree of each head's top tokens, verified exactly (point masses) rather than with typical acceptance.

What it leaves out: Medusa's typical acceptance over its tree (verifiers/lossy.py has typical acceptance as a lossy
verifier of chains), and batches. The shared part is drafts/heads.py; training is
train_draft.py --head medusa.
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

from drafts import heads
from drafts.heads import ReadsTarget


class ResBlock(nn.Module):
    """x + SiLU(W x + b), Medusa's head body. W starts at zero, so a fresh head starts as the target's LM head."""

    def __init__(self, C):
        super().__init__()
        self.linear = nn.Linear(C, C)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return x + F.silu(self.linear(x))


class MedusaDraft(ReadsTarget):
    """Medusa heads: head i reads the last known feature f_j and predicts x_{j+1+i}. A round drafts at most
    n_heads tokens (max_k: speculative_generate refuses a larger int k and clips k="auto")."""

    def __init__(self, target, n_heads=4):
        super().__init__(target)
        if not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(f"n_heads must be an int >= 1, got {n_heads!r}")
        self.n_heads = self.max_k = n_heads
        self.heads = nn.ModuleList(ResBlock(target.config.n_embd) for _ in range(n_heads))
        self.to(target.lm_head.weight.device, target.lm_head.weight.dtype)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (1, T) -> (logits (1, T, V), None)
        T, end = self.feed(idx, pos, use_cache)
        positions = range(end - T, end) if pos is None else pos.tolist()  # a tree's level: each node's position
        if self.n_known() == 0:  # nothing known of this window yet: call start or a slide (a lone token: its own)
            self.read_target(max(end - 1, 1))
        j = self.n_known() - 1  # the last position whose feature is known
        out = []
        for P in positions:  # the token after position P: head P - j on f_j
            m = P - j
            if m > self.n_heads:
                raise ValueError(f"MedusaDraft has {self.n_heads} heads, so a round drafts at most {self.n_heads} "
                                 f"tokens: pass k <= {self.n_heads}" if not self.read_since_target else
                                 "MedusaDraft reads the features of the model.GPT it was built for, but no forward of "
                                 "that model came since: speculative_generate was given another target")
            out.append(self.known[P] if m <= 0 else self.heads[m - 1](self.known[j]))  # m <= 0: the target's own
        return self.target_head(torch.stack(out)[None]), None

    def teacher_forced(self, features):  # (B, T, C) -> [head i's logits (B, T - i, V) for i = 1..n_heads]
        return [self.target_head(head(features[:, :-i])) for i, head in enumerate(self.heads, 1)]

    def loss(self, idx, features, p):
        """p: the target's next-token distributions (target_probs) -> (loss, [alpha estimate at T=1 per head]): head i
        against the target's distribution i places later."""
        total, alphas = 0.0, []
        for i, logits in enumerate(self.teacher_forced(features), 1):
            tv, ce = heads.match_terms(logits, p[:, i:])
            total = total + tv + 0.1 * ce
            alphas.append(1.0 - tv.item())
        return total, alphas


heads.register("medusa", MedusaDraft, "n_heads",
               doc="Medusa heads on the target's features (checkpoints/medusa.pt): lossless")
