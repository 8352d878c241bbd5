"""
What every draft that reads the target shares: the draft cache interface over the window's tokens, the target's
features known for them, and the head's checkpoint (the head alone, and a fingerprint of the target it reads).

Sources: Li et al. 2024, "EAGLE" (arXiv:2401.15077), Sections 3-4; Cai et al. 2024, "Medusa" (arXiv:2401.10774),
Section 2.1. The two drafts themselves are drafts/eagle.py and drafts/medusa.py.

A classic draft (checkpoints/draft.pt) is a small language model of its own: it sees token ids only. A head also
sees the target's features f_j, the final block's output at position j, which the LM head turns into p(x_{j+1})
(model.GPT leaves them in .features at every forward, at no extra cost). A head speaks the draft cache interface
that drafts/ngram.py's NGramDraft speaks (reset_cache, crop, cache_len, forward(idx, use_cache=True)), so
speculative.py's round, its proofs (tests/test_heads.py) and bench.py cover it: a q that depends only on the past
keeps Algorithm 2 exact, however it was computed.

Where the features come from. Each round's target forward scores the accepted tokens and the drafts; before its
next forward the draft takes from target.features the positions whose tokens were kept (it compares the ids):
absorb(). At the start of a call, and after each slide of the window (both caches are refilled), no feature of
the window is known yet. An engine's target (engine/llama.py in a quantized format) reads the prompt apart before
the round's drafts (speculative.CachedModel.prefill), and the draft absorbs that prefill's features like any
forward's. Any other target: the draft runs it once, without a cache, over the window's tokens (read_target), an
extra forward timed as the draft's, so it shows in c. Training: train_draft.py --head.

Trees of drafts (verifiers/tree.py). The tree's nodes are fed after the window's tokens (nodes, at cache slots
len(ids), ...), each level in one forward with a tree attention mask; compact() then keeps the accepted branch as the
window's next positions, and the target's features of it follow (model.Features.compacted), so absorb() reads them
as after a chain. Still exact: the tree depends only on the draft's outputs.

A reduced vocabulary (EAGLE-3, arXiv:2503.01840; FR-Spec, Zhao et al. 2025, arXiv:2502.14856). On a target whose
LM head is a large share of it (SmolLM2-135M: 49,152 x 576, 28M of 135M parameters) a draft that scores every token
pays a fifth of a target step for the head alone. With draft_vocab = V' the draft scores only the V' tokens in
.vocab (the ones the target itself writes most often: train_draft.py chooses them), through the target's own LM
head's rows of them (read, not copied: the checkpoint holds the ids alone; in int8 beside a quantized target,
rows_in); q is 0 on every other token, and the samplers compute and draw it over .vocab alone (support). The round
stays exact: a token with q = 0 is never drafted, and the residual norm(max(0, p - q)) at a rejection gives it all
of p's mass there (tests/test_llama_exact.py enumerates it with q = 0 where p is largest).

What it leaves out: batches (engine/batched.py's per-row cache). A head that reads more than the final block
(drafts/eagle3.py) says so through feature_size, feature() and final(); the heads read a model.GPT or a pretrained
Llama (pretrained/llama.py) alike, their blocks of the target's kind.
"""

import copy
import hashlib
import os
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.nn import functional as F

import speculative
from model import GPT, read_plain
from speculative import Drafter
from engine.llama import int8_rows, matmul

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: checkpoints/ lies there
SHIPPED_HEADS = {}  # kind -> checkpoints/KIND.pt, filled by register(): train_draft.py will not overwrite it


class ReadsTarget(nn.Module):
    """What both drafts share: the draft cache interface over the window's token ids, and the target's features
    known for them. The target is held outside the module tree: the head's state_dict holds the head alone."""

    def __init__(self, target, draft_vocab=0):
        super().__init__()
        if not leaves_features(target):
            raise ValueError(f"a draft that reads the target needs a model.GPT or pretrained Llama target, got "
                             f"{type(target).__name__} (for fast.py's FastGPT pass the GPT it wraps, .model)")
        object.__setattr__(self, "target", target)  # not a submodule
        self.config = copy.copy(target.config)  # the target's vocabulary and window: they slide together
        V = self.config.vocab_size
        if not isinstance(draft_vocab, int) or not 0 <= draft_vocab <= V:
            raise ValueError(f"draft_vocab must be an int from 0 (the whole vocabulary) to {V}, got {draft_vocab!r}")
        self.draft_vocab = draft_vocab  # 0: q over the whole vocabulary; else over the draft_vocab ids in .vocab
        # the token ids q may give mass to, sorted (choose_vocab); a placeholder until trained or loaded
        self.register_buffer("vocab", torch.arange(draft_vocab, device=target.lm_head.weight.device)
                             if draft_vocab else None)
        self.rows = None  # (the target's LM-head rows of .vocab, and the vocab's version they were read at)
        self.rows_format = "float32"  # or "int8": those rows quantized per row, as an engine runs them (rows_in)
        self.blocks_format = "float32"  # or "int8": a head's own decoder blocks too, beside a Llama (rows_in)
        self.ids = []  # the tokens at the window's positions 0, 1, ... fed so far
        self.nodes = []  # a draft tree's tokens fed after them (verifiers/tree.py): cache slots len(ids), ...
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
        return len(self.ids) + len(self.nodes)

    def reset_cache(self, batch_size=1):
        if batch_size != 1:
            raise ValueError(f"{type(self).__name__} drafts one sequence at a time (B=1)")
        self.crop(0)

    def reset_row_cache(self, batch_size, room=0):
        raise ValueError(f"{type(self).__name__} drafts one sequence at a time: batched.py's per-row cache is not "
                         "built for drafts that read the target; use speculative_generate for each prompt")

    def crop(self, n):
        """Forget the tokens from cache slot n on (a tree's nodes, then the window's tokens), and their features."""
        assert 0 <= n <= self.cache_len, f"crop({n}) needs 0 <= n <= cache_len ({self.cache_len})"
        del self.nodes[max(n - len(self.ids), 0):]
        del self.ids[n:]
        self.known = self.known[:n] if n else self.no_features()
        if n == 0:  # subtle: a new call or a slid window: the target's last features belong to another window
            self.seen, self.read_since_target = self.target.features, False

    def compact(self, n, slots):
        """After a tree round (verifiers/tree.keep_path): keep the first n tokens, then the tree's nodes at `slots` (the
        accepted branch) as the window's next positions. Their features come with the target's compacted record."""
        assert n == len(self.ids) and slots == sorted(set(slots)) and all(n <= a < self.cache_len for a in slots), (
            f"compact({n}, {slots}) needs n = {len(self.ids)} tokens and increasing tree slots below {self.cache_len}")
        self.ids += [self.nodes[a - n] for a in slots]
        self.nodes = []

    def n_known(self):
        return len(self.known)

    def no_features(self):  # -> (0, F), on the target's device and in its dtype
        return self.target.lm_head.weight.new_zeros(0, self.feature_size)

    # what a head reads of a target forward (model.Features): the final block's output here (F = C); drafts/eagle3.py
    # reads three blocks' outputs side by side (F = 3C)
    feature_size = property(lambda self: self.config.n_embd)

    def feature(self, f):  # model.Features -> (B, T, F)
        return f.x

    def final(self, features):  # (..., F) -> (..., C): the part the target's ln_f and LM head read
        return features

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
            new = self.feature(f)[0, n - f.at:kept].to(self.dtype)  # (m, F)
            self.known = torch.cat([self.known, new])

    def read_target(self, upto):
        """The extra forward: the target's features of positions 0..upto-1, computed without its cache."""
        if self.read_since_target:
            raise ValueError(f"{type(self).__name__} reads the features of the model it was built for, but no "
                             "forward of that model came since it last read them: speculative_generate was given "
                             "another target. Pass the model the draft was built for (or FastGPT of it)")
        self.target(torch.tensor([self.ids[:upto]], device=self.target.lm_head.weight.device))
        self.seen, self.read_since_target = self.target.features, True
        self.known = self.feature(self.seen)[0].to(self.dtype)  # (upto, F)
        self.extra_reads += 1

    def target_head(self, f):  # features (..., C) -> logits (..., V), the target's own frozen ln_f and LM head
        return self.target.lm_head(self.target.transformer.ln_f(f))

    # ---- the draft's vocabulary: all of the target's, or the draft_vocab tokens of .vocab (EAGLE-3, FR-Spec) --------

    def set_vocab(self, ids):  # the draft_vocab token ids q may propose (choose_vocab)
        ids = torch.as_tensor(ids, dtype=torch.long).unique()  # sorted
        if self.vocab is None or len(ids) != self.draft_vocab or not 0 <= ids.min() <= ids.max() < self.config.vocab_size:
            raise ValueError(f"set_vocab needs {self.draft_vocab} distinct ids in 0..{self.config.vocab_size - 1} "
                             f"(this draft's draft_vocab), got {len(ids)}")
        self.vocab.copy_(ids)

    def reduced_logits(self, f):  # features (..., C) -> the draft's logits over its vocabulary (..., V' = draft_vocab or V)
        """The target's frozen ln_f, then its LM head's rows of the draft's tokens only: read, not copied into the
        draft's checkpoint (a matmul draft_vocab x C instead of V x C: the point of a reduced vocabulary)."""
        if self.vocab is None:
            return self.target_head(f)
        w = self.target.lm_head.weight
        key = (self.vocab._version, self.vocab.data_ptr(), w.dtype, w.device, self.rows_format)
        if self.rows is None or self.rows[1] != key:  # subtle: load_state_dict and set_vocab bump the version
            rows = w[self.vocab].detach()  # (V', C), in memory only
            self.rows = (rows if self.rows_format == "float32" else int8_rows(rows.float()), key)
        x = self.target.transformer.ln_f(f)
        return F.linear(x, self.rows[0]) if self.rows_format == "float32" else matmul("int8", x, self.rows[0]).to(f.dtype)

    @property
    def support(self):  # the ids q can give mass to (speculative.draft_probs computes q over them), or None: all
        return self.vocab

    def rows_in(self, fmt, blocks=False):
        """Run the LM head's rows of the draft's vocabulary as an engine runs a draft beside a quantized target
        (engine/fast.py with_decoder): "int8" (one scale per row, engine/llama.py's int8 format; a draft step over
        8,192 tokens 3.94 ms against 4.81 ms in float32 on an AMD EPYC with AVX2, BENCHMARKS.md) or "float32". q
        changes a little; the round stays exact for whatever q the draft computes. A head over the whole vocabulary
        keeps the target's own LM head. blocks=True: the head's own decoder blocks too, where it reads a Llama
        (engine/llama.py run_layers, their matrices in int8 per row; drafts/eagle.py run_blocks; in a later run that
        step took 2.76 ms against 3.44 ms with the rows alone in int8, BENCHMARKS.md). A head object runs in the
        format the last with_decoder call that was given it chose."""
        if fmt not in ("float32", "int8"):
            raise ValueError(f"rows_in takes 'float32' or 'int8', got {fmt!r}")
        self.rows_format = fmt
        self.blocks_format = fmt if blocks else "float32"
        return self

    def draft_head(self, f):  # features (..., C) -> logits (..., V): q's, -inf outside the draft's vocabulary
        logits = self.reduced_logits(f)
        if self.vocab is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.vocab, logits)  # q = 0 there: the target's residual covers those tokens

    def target_probs(self, f, lse=None):  # the target's features (..., F) -> its p over the draft's vocabulary (..., V')
        """Training: p on the tokens q can give mass to (all of p with the whole vocabulary). Where the vocabulary
        is reduced the row sums to less than 1: the rest is the mass no draft of this head can ever take. lse (...,):
        the log of the target's softmax normaliser, cached (train_draft.py): then only the vocabulary's rows run."""
        if lse is not None and self.vocab is not None:
            return torch.exp(self.reduced_logits(self.final(f)).float() - lse[..., None])
        p = F.softmax(self.target_head(self.final(f)).float(), -1)
        return p if self.vocab is None else p[..., self.vocab]

    def feed(self, idx, pos, use_cache):  # idx (1, T) -> (T, tokens held): the start of every forward
        """Append idx's tokens to the window and take the target's newest features; or, with pos (a level of a
        draft tree, verifiers/tree.py), append them to the tree's nodes."""
        if not use_cache:
            raise ValueError(f"{type(self).__name__} decodes with use_cache=True; its uncached path is "
                             "teacher_forced()")
        if pos is not None:
            self.nodes += idx[0].tolist()
            return idx.size(1), self.cache_len
        assert not self.nodes, "a chain after a tree: crop() or compact() the tree first"
        self.ids += idx[0].tolist()
        self.absorb()
        return idx.size(1), len(self.ids)


# ---- checkpoints: the head alone, and which target it reads --------------------------------------------------

# kind -> (the class, the argument that sizes it), filled by register(). heads.load and train_draft.py --head KIND
# build a head by its kind; heads.save finds the kind of a head here.
KINDS = {}


def register(kind, cls, size_args, doc, pretrained_only=False):
    """A head of class cls joins KINDS and speculative.DRAFTS: sample.py --draft KIND loads checkpoints/KIND.pt for
    the shipped target (checkpoints/smollm2/KIND.pt for SmolLM2: shipped()), and the entry's fresh(target) is an
    untrained cls(target). size_args: the constructor's arguments a checkpoint records (n_layer, draft_vocab)."""
    KINDS[kind] = (cls, (size_args,) if isinstance(size_args, str) else tuple(size_args))
    SHIPPED_HEADS[kind] = os.path.join(ROOT, "checkpoints", f"{kind}.pt")
    speculative.DRAFTS[kind] = Drafter(lambda target: load(shipped(kind, target), target), untrained=cls, doc=doc,
                                       weights=SHIPPED_HEADS[kind], weights_for=lambda target: shipped(kind, target),
                                       pretrained_only=pretrained_only)


def match_terms(logits, p):  # the head's logits (..., V'), the target's p (..., V') -> (TV(p, q), cross-entropy), means
    """The two terms every head trains on: 1 - TV(p, q) is the acceptance at T = 1, and a little cross-entropy
    against p keeps q's tail from collapsing. With a reduced vocabulary p covers the draft's V' tokens and sums to
    less than 1: the mass 1 - sum(p) that q (zero there) cannot match counts in TV whole."""
    tv = 0.5 * ((F.softmax(logits.float(), -1) - p).abs().sum(-1) + 1.0 - p.sum(-1)).mean()
    ce = -(p * F.log_softmax(logits.float(), -1)).sum(-1).mean()
    return tv, ce


def leaves_features(target):  # -> is target a model that leaves its features (model.GPT, pretrained/llama.py's)?
    return isinstance(target, GPT) or (hasattr(target, "keep_layers") and hasattr(target, "finish"))


def shipped(kind, target):  # -> where the trained draft of this kind for this target lies
    """checkpoints/KIND.pt for the shipped model.GPT target; checkpoints/NAME/KIND.pt for a pretrained one
    (NAME: pretrained.load's name for it, e.g. smollm2)."""
    if isinstance(target, GPT):
        return SHIPPED_HEADS[kind]
    return os.path.join(ROOT, "checkpoints", getattr(target, "name", type(target).__name__.lower()), f"{kind}.pt")


def fingerprint(target):
    """A digest of the target's shape and weights: a head trained on one target's features is refused by another."""
    config = asdict(target.config)
    if not isinstance(target, GPT):  # a Llama's window is the loader's choice (RoPE has no table of positions to fit)
        config.pop("block_size")
    h = hashlib.sha256(repr(sorted(config.items())).encode())
    for name, t in sorted(target.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()[:16]


def save(path, head, meta=None):
    """Write {kind, args, state_dict (float16), target fingerprint, meta} atomically, as model.save_checkpoint."""
    kinds = [kind for kind, (cls, _) in KINDS.items() if type(head) is cls] or [  # (eagle3's class is eagle's child)
        kind for kind, (cls, _) in KINDS.items() if isinstance(head, cls)]
    if not kinds:
        raise ValueError(f"heads.save writes the heads of KINDS ({', '.join(KINDS)}), not a {type(head).__name__}")
    kind, args = kinds[0], KINDS[kinds[0]][1]
    half = lambda t: t.half() if t.is_floating_point() else t  # (the vocabulary's ids stay integers)
    ckpt = {"kind": kind, "args": {arg: getattr(head, arg) for arg in args}, "target": fingerprint(head.target),
            "state_dict": {k: half(v.detach().cpu()) for k, v in head.state_dict().items()}, "meta": dict(meta or {})}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


def is_head(path):  # -> does path hold a head's checkpoint (heads.save), rather than a model's?
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # mmap: the weights stay on disk
    except Exception:  # missing, unreadable, not a checkpoint: the model loader says what is wrong
        return False
    return isinstance(ckpt, dict) and ckpt.get("kind") in KINDS


def load(path, target):
    """-> a trained head of KINDS (EagleDraft, MedusaDraft, ...) reading `target`, in eval mode. Refuses a head that was
    trained on another target's features: its q would be computed from features it never saw."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no head checkpoint at {path!r}: train one with train_draft.py --head eagle, eagle3 "
                                "(or medusa) --target TARGET.pt")
    ckpt = read_plain(path, "heads.save", "retrain it with train_draft.py --head eagle (or medusa) --target TARGET.pt")
    if not isinstance(ckpt, dict) or ckpt.get("kind") not in KINDS:
        raise ValueError(f"{path!r} is not a head checkpoint written by heads.save (a model checkpoint? pass it "
                         "as --draft PATH, not as a head)")
    cls, _ = KINDS[ckpt["kind"]]
    head = cls(target, **ckpt["args"])  # refuses a target that leaves no features
    ours = fingerprint(target)
    if ckpt["target"] != ours:
        raise ValueError(f"{path!r} was trained for another target (fingerprint {ckpt['target']}; this target's is "
                         f"{ours}): a head reads its own target's features. Train one for this target "
                         f"with train_draft.py --head {ckpt['kind']} --target TARGET.pt")
    head.load_state_dict({k: v.to(head.dtype) if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()})
    head.meta = ckpt["meta"]
    return head.eval()
