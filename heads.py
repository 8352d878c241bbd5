"""
Drafts that read the target: an EAGLE-style feature draft and Medusa heads, each a draft for speculative_generate.

Sources: Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty" (arXiv:2401.15077),
Sections 3-4; Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads"
(arXiv:2401.10774), Section 2.1.

A classic draft (checkpoints/draft.pt) is a small language model of its own: it sees token ids only. These two
also see the target's features f_j, the final block's output at position j, which the LM head turns into
p(x_{j+1}) (model.GPT leaves them in .features at every forward, at no extra cost):
- EagleDraft: one decoder block (n_layer of them) at the target's width. At position j it reads f_{j-1} and the
  embedding of x_j (a linear 2C -> C joins them) and predicts f_j; the target's own frozen ln_f and LM head turn
  the prediction into q(x_{j+1}). Where f_{j-1} is not known (the drafts of the round being drafted) it reads its
  own prediction instead. Its KV cache rolls back like any draft's.
- MedusaDraft: n_heads heads on the last known feature f_j. Head i (a residual SiLU block, then the target's
  ln_f and LM head) predicts x_{j+1+i}: a round's first draft comes from head 1, its second from head 2, ... A
  head's q ignores the drafts before it in the round, and the round is still exact.

Both speak the draft cache interface that variants.NGramDraft speaks (reset_cache, crop, cache_len,
forward(idx, use_cache=True)), so speculative.py's round, its proofs (tests/test_heads.py) and bench.py cover
them: a q that depends only on the past keeps Algorithm 2 exact, however it was computed.

Where the features come from. Each round's target forward scores the accepted tokens and the drafts; before its
next forward the draft takes from target.features the positions whose tokens were kept (it compares the ids).
At the start of a call, and after each slide of the window (both caches are refilled), no feature of the window
is known yet: the draft then runs the target once, without a cache, over the window's tokens. That extra
forward is timed as the draft's, so it shows in c. Training: train_draft.py --head eagle|medusa.

What it leaves out: batches (batched.py's per-row cache), trees of drafts (EAGLE-2's dynamic tree: verify="tree"
needs model.GPT's tree attention), EAGLE-3's features from several layers, and Medusa's own tree and typical
acceptance (variants.py has typical acceptance as a lossy verifier).
"""

import hashlib
import os
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.nn import functional as F

import variants
from model import GPT, Block, GPTConfig, KVCache

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED_HEADS = {kind: os.path.join(HERE, "checkpoints", f"{kind}.pt") for kind in ("eagle", "medusa")}


class ReadsTarget(nn.Module):
    """What both drafts share: the draft cache interface over the window's token ids, and the target's features
    known for them. The target is held outside the module tree: the head's state_dict holds the head alone."""

    def __init__(self, target):
        super().__init__()
        if not isinstance(target, GPT):
            raise ValueError(f"a draft that reads the target needs a model.GPT target, got {type(target).__name__} "
                             "(for fast.py's FastGPT pass the GPT it wraps, .model)")
        object.__setattr__(self, "target", target)  # not a submodule
        self.config = GPTConfig(**asdict(target.config))  # the target's vocabulary and window: they slide together
        self.ids = []  # the tokens at the window's positions 0, 1, ... fed so far
        self.known = self.no_features()  # (n, C): the target's features of positions 0..n-1, for self.ids
        self.seen = None  # the target's Features record already read
        self.read_since_target = False  # an extra target forward ran and no target forward came since
        self.extra_reads = 0  # extra target forwards (call starts and window slides)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    @property
    def dtype(self):  # the target's: a draft without weights of its own reads it too
        return self.target.lm_head.weight.dtype

    # ---- the draft cache interface ----------------------------------------------------------------------------

    @property
    def cache_len(self):
        return len(self.ids)

    def reset_cache(self, batch_size=1):
        if batch_size != 1:
            raise ValueError(f"{type(self).__name__} drafts one sequence at a time (B=1)")
        self.crop(0)

    def reset_row_cache(self, batch_size, room=0):
        raise ValueError(f"{type(self).__name__} drafts one sequence at a time: batched.py's per-row cache is not "
                         "built for drafts that read the target; use speculative_generate for each prompt")

    def crop(self, n):
        """Forget the tokens from position n on, and their features."""
        assert 0 <= n <= len(self.ids), f"crop({n}) needs 0 <= n <= cache_len ({len(self.ids)})"
        del self.ids[n:]
        self.known = self.known[:n] if n else self.no_features()
        if n == 0:  # subtle: a new call or a slid window: the target's last features belong to another window
            self.seen, self.read_since_target = self.target.features, False

    def n_known(self):
        return len(self.known)

    def no_features(self):  # -> (0, C), on the target's device and in its dtype
        return self.target.lm_head.weight.new_zeros(0, self.config.n_embd)

    def absorb(self):
        """Take the features of the target's last forward at the positions whose tokens are still ours."""
        f = self.target.features
        if f is None or f is self.seen or f.at is None or f.ids.size(0) != 1:
            return
        self.seen, self.read_since_target = f, False
        n, fed = self.n_known(), f.ids[0].tolist()
        if f.at > n:  # a gap before them: not features of our window
            return
        kept = 0  # the scored tokens that are still ours: the accepted ones (the first rejected draft differs)
        while kept < len(fed) and f.at + kept < len(self.ids) and fed[kept] == self.ids[f.at + kept]:
            kept += 1
        if f.at + kept > n:
            new = f.x[0, n - f.at:kept].to(self.dtype)  # (m, C)
            self.known = torch.cat([self.known, new])

    def read_target(self, upto):
        """The extra forward: the target's features of positions 0..upto-1, computed without its cache."""
        if self.read_since_target:
            raise ValueError(f"{type(self).__name__} reads the features of the model.GPT it was built for, but no "
                             "forward of that model came since it last read them: speculative_generate was given "
                             "another target. Pass the model the draft was built for (or FastGPT of it)")
        self.target(torch.tensor([self.ids[:upto]], device=self.target.lm_head.weight.device))
        self.seen, self.read_since_target = self.target.features, True
        self.known = self.seen.x[0].to(self.dtype)  # (upto, C)
        self.extra_reads += 1

    def target_head(self, f):  # features (..., C) -> logits (..., V), the target's own frozen ln_f and LM head
        return self.target.lm_head(self.target.transformer.ln_f(f))

    def feed(self, idx, pos, use_cache):  # idx (1, T) -> (T, tokens held): the start of every forward
        """Append idx's tokens to the window, and take the target's newest features."""
        if pos is not None:
            raise ValueError(f"{type(self).__name__} drafts chains, not trees: use verify='tokenwise' or 'block'")
        if not use_cache:
            raise ValueError(f"{type(self).__name__} decodes with use_cache=True; its uncached path is "
                             "teacher_forced()")
        self.ids += idx[0].tolist()
        self.absorb()
        return idx.size(1), len(self.ids)


# ---- EAGLE ---------------------------------------------------------------------------------------------------

class EagleDraft(ReadsTarget):
    """EAGLE-style draft: n_layer decoder blocks that predict the target's next feature from (f_{j-1}, x_j)."""

    def __init__(self, target, n_layer=1):
        super().__init__(target)
        if not isinstance(n_layer, int) or n_layer < 1:
            raise ValueError(f"n_layer must be an int >= 1, got {n_layer!r}")
        c = target.config
        self.n_layer = n_layer
        self.fuse = nn.Linear(2 * c.n_embd, c.n_embd, bias=c.bias)  # [f_{j-1}, e(x_j)] (2C) -> C, EAGLE's fc
        self.h = nn.ModuleList(Block(GPTConfig(**{**asdict(c), "n_layer": n_layer, "dropout": 0.0}))
                               for _ in range(n_layer))
        for name, p in self.named_parameters():  # GPT-2's initialisation; LayerNorm weights stay 1
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.normal_(p, 0.0, 0.02)
        self.to(target.lm_head.weight.device, target.lm_head.weight.dtype)
        self.exact = 0  # the leading positions computed from the target's features only (not from predictions)
        self.last = None  # (position, predicted feature (C,)) of the last position computed

    def predict(self, f_prev, idx, start=0, use_cache=False):  # (B, T, C), (B, T) -> predicted features (B, T, C)
        """f_prev[:, i] = f_{start+i-1} (zeros at position 0), idx[:, i] = x_{start+i} -> f_{start+i} predicted."""
        tr = self.target.transformer
        T = idx.size(1)
        x = self.fuse(torch.cat([f_prev, tr.wte(idx)], -1)) + tr.wpe.weight[start:start + T]  # (B, T, C)
        for block in self.h:
            x = block(x, use_cache)
        return x

    def teacher_forced(self, idx, features, steps=1):  # (B, T), (B, T, C) -> [predicted features (B, T, C)] * steps
        """The naive path (training, tests): step 1 reads the target's features, step s > 1 the predictions of step
        s - 1 at every position, with plain causal attention. A round's later drafts read predictions too, but attend
        to cache entries computed from the target's features; masking that view in (EAGLE-3's training-time test,
        arXiv:2503.01840) was tried over three steps and kept fewer drafts here (BENCHMARKS.md)."""
        zero = torch.zeros_like(features[:, :1])
        f_prev, out = torch.cat([zero, features[:, :-1]], 1), []
        for _ in range(steps):
            out.append(self.predict(f_prev, idx))
            f_prev = torch.cat([zero, out[-1][:, :-1].detach()], 1)
        return out

    def crop(self, n):
        super().crop(n)
        self.exact = min(self.exact, n)
        if self.last is not None and self.last[0] >= n:
            self.last = None

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None):  # (1, T) -> (logits (1, T, V), None)
        T, end = self.feed(idx, pos, use_cache)
        n = self.n_known()
        drafting = n < end - 1 and T == 1 and self.last is not None and self.last[0] == end - 2
        if n < end - 1 and not drafting:  # (EAGLE needs no feature before position 0)
            self.read_target(end - 1)  # nothing known of this window yet: call start or a slide
            n = end - 1
        if drafting:  # a later draft of this round: it reads the previous draft's predicted feature
            start, f_prev = end - 1, self.last[1][None, None]  # (1, 1, C)
        else:  # subtle: positions computed from predictions (the last round's drafts) are recomputed from features
            start = min(self.exact, end - T)
            f_prev = self.known[max(start - 1, 0):end - 1][None]  # (1, T', C): f_{start-1} .. f_{end-2}
            if start == 0:  # position 0 has no earlier feature
                f_prev = torch.cat([f_prev.new_zeros(1, 1, f_prev.size(-1)), f_prev], 1)
        for block in self.h:  # the KV cache keeps only positions computed before `start`
            if block.attn.cache is None:
                block.attn.cache = KVCache(1, block.attn.n_head, self.config.block_size,
                                           self.config.n_embd // block.attn.n_head, idx.device, self.dtype)
            block.attn.cache.length = min(block.attn.cache.length, start)
        out = self.predict(f_prev, torch.tensor([self.ids[start:end]], device=idx.device), start, use_cache=True)
        self.exact = min(end, n + 1)
        self.last = (end - 1, out[0, -1])
        return self.target_head(out[:, -T:]), None

    def loss(self, idx, features, target_logits, steps=2):
        """-> (loss, [alpha estimate at T=1 per step]). Per step: smooth L1 on the features, the total variation
        between p and q (1 - TV is the acceptance at T=1), and a little cross-entropy against p; step s weighs
        0.5^(s-1)."""
        p = F.softmax(target_logits.float(), -1)
        total, alphas = 0.0, []
        for s, pred in enumerate(self.teacher_forced(idx, features, steps)):
            logits = self.target_head(pred).float()
            tv = 0.5 * (F.softmax(logits, -1) - p).abs().sum(-1).mean()
            ce = -(p * F.log_softmax(logits, -1)).sum(-1).mean()
            total = total + 0.5 ** s * (F.smooth_l1_loss(pred.float(), features.float()) + tv + 0.1 * ce)
            alphas.append(1.0 - tv.item())
        return total, alphas


# ---- Medusa --------------------------------------------------------------------------------------------------

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
        if self.n_known() == 0:  # nothing known of this window yet: call start or a slide (a lone token: its own)
            self.read_target(max(end - 1, 1))
        j = self.n_known() - 1  # the last position whose feature is known
        out = []
        for P in range(end - T, end):  # the token after position P: head P - j on f_j
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

    def loss(self, idx, features, target_logits):
        """-> (loss, [alpha estimate at T=1 per head]): head i against the target's distribution i places later."""
        total, alphas = 0.0, []
        for i, logits in enumerate(self.teacher_forced(features), 1):
            p = F.softmax(target_logits[:, i:].float(), -1)
            tv = 0.5 * (F.softmax(logits.float(), -1) - p).abs().sum(-1).mean()
            ce = -(p * F.log_softmax(logits.float(), -1)).sum(-1).mean()
            total = total + tv + 0.1 * ce
            alphas.append(1.0 - tv.item())
        return total, alphas


# ---- checkpoints: the head alone, and which target it reads --------------------------------------------------

KINDS = {"eagle": (EagleDraft, "n_layer"), "medusa": (MedusaDraft, "n_heads")}


def fingerprint(target):
    """A digest of the target's shape and weights: a head trained on one target's features is refused by another."""
    h = hashlib.sha256(repr(sorted(asdict(target.config).items())).encode())
    for name, t in sorted(target.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()[:16]


def save(path, head, meta=None):
    """Write {kind, args, state_dict (float16), target fingerprint, meta} atomically, as model.save_checkpoint."""
    kinds = [kind for kind, (cls, _) in KINDS.items() if isinstance(head, cls)]
    if not kinds:
        raise ValueError(f"heads.save writes the heads of KINDS ({', '.join(KINDS)}), not a {type(head).__name__}")
    kind, arg = kinds[0], KINDS[kinds[0]][1]
    ckpt = {"kind": kind, "args": {arg: getattr(head, arg)}, "target": fingerprint(head.target),
            "state_dict": {k: v.detach().cpu().half() for k, v in head.state_dict().items()}, "meta": dict(meta or {})}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


def load(path, target):
    """-> a trained EagleDraft or MedusaDraft reading `target` (a model.GPT), in eval mode. Refuses a head that was
    trained on another target's features: its q would be computed from features it never saw."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no head checkpoint at {path!r}: train one with train_draft.py --head eagle "
                                "(or medusa) --target TARGET.pt")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("kind") not in KINDS:
        raise ValueError(f"{path!r} is not a head checkpoint written by heads.save (a model checkpoint? pass it "
                         "as --draft PATH, not as a head)")
    cls, _ = KINDS[ckpt["kind"]]
    head = cls(target, **ckpt["args"])  # refuses a target that is not a model.GPT
    ours = fingerprint(target)
    if ckpt["target"] != ours:
        raise ValueError(f"{path!r} was trained for another target (fingerprint {ckpt['target']}; this target's is "
                         f"{ours}): a head reads its own target's features. Train one for this target "
                         f"with train_draft.py --head {ckpt['kind']} --target TARGET.pt")
    head.load_state_dict({k: v.to(head.dtype) for k, v in ckpt["state_dict"].items()})
    head.meta = ckpt["meta"]
    return head.eval()


# sample.py and bench.py make drafts by name: --draft eagle, --draft medusa (the shipped heads)
variants.DRAFTS.update(
    eagle=variants.Drafter(lambda target: load(SHIPPED_HEADS["eagle"], target),
                           doc="EAGLE-style draft that reads the target's features (checkpoints/eagle.pt): lossless"),
    medusa=variants.Drafter(lambda target: load(SHIPPED_HEADS["medusa"], target),
                            doc="Medusa heads on the target's features (checkpoints/medusa.pt): lossless"),
)
