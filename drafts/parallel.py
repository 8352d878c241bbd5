"""
Parallel drafting: a small draft model that proposes all K tokens of a round in ONE forward, reading K - 1 mask
tokens placed after the text. Lossless.

Source: An et al. 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model Adaptation"
(arXiv:2504.18583), Sections 3.1-3.2: an autoregressive draft is adapted by training it to read mask tokens,
mask i standing where the i-th later token will be; vLLM ships it as parallel drafting and TensorRT-LLM as
pard.py. DFlash (arXiv:2602.06036) drafts a block the same way with a diffusion-style draft.

The round asks the draft for q_1 .. q_K one position at a time (speculative.draft_tokens). At the round's first
request this draft runs its model once over the tokens it has not seen and K - 1 masks: the last real token's
row is q_1, mask i's row is q_(i+1). The later requests are answered from that block, no forward. So q_i depends
only on the text before the round, x_<t, never on the round's earlier drafts x_t .. x_(t+i-2) (the masks stand in
for them); it is fixed before x_i is drawn, and x_i is drawn from it, so the round stays exact as for any draft.
k_for marks each round's start (speculative_generate calls it before every round), so every round drafts from a
block of its own.

In Theorem 3.8's terms: c per round is ONE draft forward of a few tokens whatever K, where a token-by-token draft
pays K forwards; alpha falls with the draft position faster than a token-by-token draft's, since draft i guesses
x_(t+i) without knowing the tokens before it. The best K moves up (the draft's cost no longer grows with it).

Training (train_draft.py --parallel K --init checkpoints/draft.pt, see training_batch): one sequence of real
tokens and, after chosen anchors a, blocks of K - 1 masks at positions a+1 .. a+K-1 that see x_0 .. x_a and
their own block's earlier masks; mask j learns x_(a+1+j) (cross-entropy on the corpus), while the real tokens'
rows learn to stay what the initial draft predicts (total variation to it), so q_1 is the autoregressive
draft's. The checkpoint is model.py's, with one token more than the target's vocabulary (the mask id, last).

What it leaves out: PARD's conditional drop-token schedule (we sample anchors instead), distilling the masks'
rows from the target, trees of drafts, and batches (engine/batched.py's per-row cache).
"""

import os
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.nn import functional as F

import speculative
from model import GPT, GPTConfig, load_checkpoint
from speculative import Drafter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_PARALLEL = os.path.join(ROOT, "checkpoints", "parallel.pt")


class ParallelDraft(nn.Module):
    """A draft cache interface over a GPT that reads mask tokens (the module's docstring). model: a model.GPT (or
    engine/fast.py's FastGPT of one) whose vocabulary is the target's plus the mask id, its last; max_k: the most
    drafts one forward proposes (the masks it was trained with, plus one). Its window is the model's block_size
    less the K - 1 positions the masks take."""

    chains_only = True  # verifiers/tree.py's trees are refused up front (speculative_generate)

    def __init__(self, model, max_k):
        super().__init__()
        if not isinstance(max_k, int) or max_k < 1:
            raise ValueError(f"max_k (drafts per forward) must be an int >= 1, got {max_k!r}")
        self.model, self.max_k = model, max_k
        self.mask_id = model.config.vocab_size - 1
        self.config = GPTConfig(**asdict(model.config))
        self.config.vocab_size -= 1  # the target's tokens: the mask is never proposed
        self.config.block_size -= max_k - 1  # room after the window for the masks
        if self.config.block_size < 2:
            raise ValueError(f"a parallel draft with max_k={max_k} needs a block_size of at least {max_k + 1}")
        self.seen = []  # the window's tokens fed so far (the model's cache may lag behind: drafts it never read)
        self.block = None  # (n, logits (k, V)): row i is q for position n + i, computed from seen[:n]
        self.k = max_k  # masks + 1 in the next block: the round's K, set by k_for
        self.device = next(model.parameters()).device

    def num_params(self):
        return sum(p.numel() for p in self.model.parameters())

    def reset_cache(self, batch_size=1):
        self.seen, self.block = [], None
        self.model.reset_cache()
        self.device = next(self.model.parameters()).device  # once per call: parameters() costs a module walk

    @property
    def cache_len(self):
        return len(self.seen)

    def crop(self, n):
        assert 0 <= n <= len(self.seen), f"crop({n}) needs 0 <= n <= cache_len ({len(self.seen)})"
        del self.seen[n:]
        self.model.crop(min(n, self.model.cache_len))
        if self.block and self.block[0] > n:  # the block was computed from tokens now forgotten
            self.block = None

    def k_for(self, tokens, K):  # a round starts: its first request runs a block of K rows (speculative_generate)
        self.block, self.k = None, K
        return K

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, **rows):  # -> (logits (1, T, V), None)
        if pos is not None or not use_cache:
            raise ValueError("a parallel draft drafts chains through its cache (token-wise or block verification), "
                             "not trees: use --verify tokenwise or block")
        self.seen.extend(idx[0].tolist())  # (extend: no nn.Module attribute write on the hot path)
        n = len(self.seen)  # q is asked for position n, the token after the last one fed
        if self.block is None or not 0 <= n - self.block[0] < len(self.block[1]):
            self.block = (n, self.propose(n)[:, None, None].unbind(0))  # k rows (1, 1, V): answering is a lookup
        row = self.block[1][n - self.block[0]]  # (1, 1, V): q for position n, from seen[:block start] only
        return (row if idx.size(1) == 1 else row.expand(1, idx.size(1), -1)), None  # a chain reads the last row

    def propose(self, n):  # -> (k, V): q for positions n .. n+k-1, from seen[:n], in one forward
        lag = self.seen[self.model.cache_len:n]  # the tokens the model has not read (the last round's kept drafts)
        k = max(1, min(self.k, self.max_k))
        ids = torch.tensor([lag + [self.mask_id] * (k - 1)], device=self.device)  # masks at positions n .. n+k-2
        logits, _ = self.model(ids, use_cache=True)  # (1, lag + k - 1, V + 1)
        self.model.crop(n)  # forget the masks: the cache holds real tokens only
        return logits[0, len(lag) - 1:, :self.mask_id].to(torch.float64)  # (k, V): the mask id is never proposed


# ---- training (train_draft.py --parallel K) ---------------------------------------------------------------------

class WholeSequence:
    """A "cache" that keeps nothing: model.GPT.forward(use_cache=True, pos, mask) through it runs one whole training
    sequence with positions and an attention mask of our own (model.py's cache interface: place and write)."""
    start = 0

    def place(self, T, pos=None, mask=None, rows=None, span=None):
        return pos, mask

    def write(self, layer, k, v):
        return k, v


def training_batch(x, anchors, k, mask_id):
    """x (B, T+1) corpus windows, anchors (A,) positions a with a + k <= T -> (idx (B, L), pos (L,), mask (L, L),
    targets (B, L)), L = T + A (k - 1). Real token i sits at position i and sees real tokens 0..i; anchor a's block
    of k - 1 masks sits at positions a+1 .. a+k-1, mask j seeing real tokens 0..a and masks 1..j of its block, and
    learns x[a+1+j]. T=4, k=2, anchors [1]: idx x0 x1 x2 x3 M, pos 0 1 2 3 2, the mask sees x0 x1 and learns x3."""
    B, T = x.size(0), x.size(1) - 1
    A, dev = len(anchors), x.device
    j = torch.arange(1, k, device=dev)  # (k-1,) the offset of each mask in its block
    a = torch.as_tensor(anchors, device=dev)[:, None]  # (A, 1)
    assert int(a.max()) + k <= T, "an anchor's block must end inside the window (a + k <= T)"
    mask_pos = (a + j).flatten()  # (A (k-1),)
    pos = torch.cat([torch.arange(T, device=dev), mask_pos])  # (L,)
    L = len(pos)
    mask = torch.zeros(L, L, dtype=torch.bool, device=dev)
    mask[:T, :T] = torch.ones(T, T, dtype=torch.bool, device=dev).tril()  # real tokens: causal
    sees_real = torch.arange(T, device=dev)[None, :] <= a  # (A, T): x_0 .. x_a
    mask[T:, :T] = sees_real.repeat_interleave(k - 1, 0)
    own = torch.ones(k - 1, k - 1, dtype=torch.bool, device=dev).tril()  # its block's masks up to itself
    mask[T:, T:] = torch.block_diag(*[own] * A)
    idx = torch.cat([x[:, :T], torch.full((B, L - T), mask_id, dtype=x.dtype, device=dev)], 1)
    targets = torch.cat([x[:, 1:], x[:, (a + 1 + j).flatten()]], 1)  # (B, L)
    return idx, pos, mask, targets


def training_logits(model, idx, pos, mask):  # -> (B, L, V+1): model.GPT over a training sequence and its own mask
    model.cache = WholeSequence()
    try:
        return model(idx, use_cache=True, pos=pos, mask=mask)[0]
    finally:
        model.cache = None


def loss(model, teacher, x, anchors, k):
    """-> (loss, [cross-entropy per draft position 1..k]). Position 1 (the real tokens' rows): total variation to
    the teacher (the autoregressive draft it starts from; cross-entropy on the corpus without one), weighed k - 1
    times, as much as all the masks together, so that the first draft stays as good as the draft it came from;
    positions 2..k (the masks): cross-entropy on the corpus."""
    mask_id = model.config.vocab_size - 1
    idx, pos, mask, targets = training_batch(x, anchors, k, mask_id)
    logits = training_logits(model, idx, pos, mask).float()  # (B, L, V+1)
    T, B = x.size(1) - 1, x.size(0)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(B, -1)  # (B, L)
    by_position = [ce[:, :T].mean()] + [ce[:, T + i::k - 1].mean() for i in range(k - 1)]
    first = by_position[0]
    if teacher is not None:
        with torch.no_grad():
            p = F.softmax(teacher(x[:, :T])[0].float(), -1)  # (B, T, V)
        q = F.softmax(logits[:, :T, :mask_id], -1)
        first = 0.5 * (q - p).abs().sum(-1).mean() + 0.1 * by_position[0]
    total = (k - 1) * first + sum(by_position[1:])
    return total, [c.item() for c in by_position]


def widen(draft):
    """-> a GPT like the autoregressive `draft` with one token more (the mask, last; its embedding the mean of the
    others'): PARD's starting point. Its window stays the draft's; ParallelDraft keeps K - 1 positions of it free."""
    config = GPTConfig(**asdict(draft.config))
    config.vocab_size += 1
    model = GPT(config)
    state = draft.state_dict()
    wte = state["transformer.wte.weight"]
    state["transformer.wte.weight"] = torch.cat([wte, wte.mean(0, keepdim=True)])
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied
    model.load_state_dict(state)
    return model


# ---- the registry entry: sample.py --draft parallel ---------------------------------------------------------------

def load(path, target):
    """-> the ParallelDraft of a checkpoint that train_draft.py --parallel wrote, for `target`, or a ValueError."""
    said = os.path.relpath(path, ROOT) if os.path.abspath(path).startswith(ROOT + os.sep) else path  # in messages
    if not os.path.exists(path):
        raise ValueError(f"--parallel_ckpt {said}: no such checkpoint (train one with train_draft.py --parallel 8 "
                         "--init checkpoints/draft.pt)")
    model, meta = load_checkpoint(path, next(target.parameters()).device)
    if "parallel" not in meta:
        raise ValueError(f"--parallel_ckpt {said} is not a parallel draft (an autoregressive one? pass it as --draft "
                         f"{path}); train one with train_draft.py --parallel 8")
    V = target.config.vocab_size
    if model.config.vocab_size != V + 1 or (getattr(target, "meta", None) and target.meta.get("tokenizer") != meta.get("tokenizer")):
        raise ValueError(f"--parallel_ckpt {said} was trained with another tokenizer than the target's "
                         f"(vocabulary {model.config.vocab_size - 1}, the target's {V}): train one for this target "
                         "with train_draft.py --parallel 8")
    model = model.to(next(target.parameters()).dtype)
    return ParallelDraft(model, meta["parallel"])


def make(target, parallel_ckpt=""):  # "": the shipped checkpoints/parallel.pt
    from engine.fast import with_decoder  # the model runs in the fast decoder, as the scripts run drafts
    draft = load(parallel_ckpt or SHIPPED_PARALLEL, target)
    draft.model = with_decoder("fast", None, draft.model)[1] if draft.model.config.bias else draft.model
    return draft.eval()


def untrained(target, max_k=8):  # -> a one-layer parallel draft with seeded random weights, for any GPT target
    c = target.config
    model = GPT(GPTConfig(block_size=c.block_size + max_k - 1, vocab_size=c.vocab_size + 1, n_layer=1, n_head=2,
                          n_embd=16))
    return ParallelDraft(model.to(next(target.parameters()).dtype), max_k).eval()


speculative.DRAFTS["parallel"] = Drafter(
    make, dict(parallel_ckpt=""), untrained=untrained, weights=SHIPPED_PARALLEL,
    doc="a draft that proposes the round's K tokens in one forward through mask tokens (PARD): lossless",
    help=dict(parallel_ckpt="with --draft parallel: its checkpoint (train_draft.py --parallel K writes one); "
                            "'': the shipped checkpoints/parallel.pt"))
