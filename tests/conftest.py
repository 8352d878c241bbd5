"""Shared helpers: tiny random GPTs and table-driven toy models that speak model.GPT's cache interface."""

import os
import random
import tempfile

import pytest
import torch
import torch.nn as nn

from model import GPT, GPTConfig
from drafts.ngram import TokenListCache
from verifiers.tree import tree_attention

torch.set_num_threads(1)  # tiny models: threads cost more than they save, and CI has 2 cores
# --decoder auto's timings (engine/fast.py format_cache) go to a folder of the test run's, not the user's cache
os.environ.setdefault("SPECULATIVE_CACHE", tempfile.mkdtemp(prefix="speculative-test-cache-"))


def random_gpt(seed, vocab_size=5, block_size=8, n_layer=2, n_head=2, n_embd=16, sharpness=8.0):
    """An untrained GPT whose next-token distributions are far from uniform (output layer scaled up)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head,
                          n_embd=n_embd, dropout=0.0))
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)  # tied with wte: also makes the context matter more
        model.transformer.wpe.weight.mul_(sharpness)  # and positions, so cache position bugs show
    return model.eval()


class TableModel(TokenListCache):
    """A toy language model: next-token logits = table[first visible token, last token, context length % 2].

    It depends on where the window starts (the first visible token) and on how long the context is, so any
    mistake in windowing or caching changes its output. float64 throughout, for checks to 1e-9.
    The cache is a list of token ids with GPT's interface (drafts/ngram.py's TokenListCache): reset_cache(), crop(n), cache_len,
    trees of tokens (pos, mask).
    """

    def __init__(self, seed, vocab_size=3, block_size=4, scale=1.5):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        V = vocab_size
        self.table = torch.randn(V, V, 2, V, generator=g, dtype=torch.float64) * scale  # (V, V, 2, V)
        self.config = GPTConfig(block_size=block_size, vocab_size=V)
        self.dummy = nn.Parameter(torch.zeros(()))  # so that next(model.parameters()) has a device
        self.cache = []

    def next_logits(self, context):  # visible window as a list of ids -> (V,)
        assert len(context) <= self.config.block_size, "toy cache overflow: window handling is wrong"
        return self.table[context[0], context[-1], len(context) % 2]


@torch.no_grad()
def check_cache_against_full_forwards(cached_model, reference, seed, vocab_size=11, block_size=24, steps=30):
    """Random appends and crops (as after rejections) on cached_model; after each append its logits must equal
    reference's full, uncached forward over the same tokens (the naive path) within 1e-5."""
    rng = random.Random(seed)
    cached_model.reset_cache()
    seq = []  # the tokens the cache should hold
    for _ in range(steps):
        if seq and rng.random() < 0.4:  # roll back a random number of tokens
            n = rng.randrange(len(seq) + 1)
            cached_model.crop(n)
            del seq[n:]
        T = rng.randint(1, min(6, block_size - len(seq))) if len(seq) < block_size else 0
        if T == 0:
            continue
        new = [rng.randrange(vocab_size) for _ in range(T)]
        cached, _ = cached_model(torch.tensor([new]), use_cache=True)  # (1, T, V)
        seq += new
        full, _ = reference(torch.tensor([seq]))  # (1, len, V)
        assert cached_model.cache_len == len(seq)
        assert (cached - full[:, -T:]).abs().max().item() <= 1e-5


@torch.no_grad()
def check_row_cache_against_full_forwards(cached_model, reference, seed, B=3, vocab_size=11, block_size=24, steps=30):
    """check_cache_against_full_forwards for the per-row cache (engine/batched.py): each row is cropped at random on its
    own (rows of different lengths), then every row gets T new tokens in one forward, or a random subset of the
    rows gets them (rows=...). Each row's logits must equal reference's full forward over that row alone."""
    rng = random.Random(seed)
    cached_model.reset_row_cache(B, room=0)
    seqs = [[] for _ in range(B)]  # the tokens each row should hold
    for _ in range(steps):
        for row in seqs:
            if row and rng.random() < 0.4:
                del row[rng.randrange(len(row) + 1):]
        cached_model.crop_rows([len(row) for row in seqs])
        which = sorted(rng.sample(range(B), rng.randint(1, B))) if rng.random() < 0.3 else list(range(B))
        room = block_size - max(len(seqs[b]) for b in which)
        if room == 0:
            continue
        T = rng.randint(1, min(6, room))
        new = [[rng.randrange(vocab_size) for _ in range(T)] for _ in which]
        rows = None if len(which) == B else torch.tensor(which)
        cached, _ = cached_model(torch.tensor(new), use_cache=True, rows=rows)  # (len(which), T, V)
        for i, b in enumerate(which):
            seqs[b] += new[i]
            full, _ = reference(torch.tensor([seqs[b]]))
            assert (cached[i] - full[0, -T:]).abs().max().item() <= 1e-5, f"row {b} of {which}"
        assert cached_model.row_lengths.tolist() == [len(row) for row in seqs]


@torch.no_grad()
def check_tree_against_full_forwards(cached_model, reference, seed, vocab_size=11, block_size=24, trials=8):
    """A random tree of new tokens (tree attention) on top of a random cached prefix: every token's logits must
    equal reference's full forward over the prefix and the token's path from the root (the naive path) within
    1e-5. Then compact() keeps one random path, and the next tokens must continue it as if fed as a chain.
    Some trees hold more tokens than the window has positions left: the cache must make room."""
    rng = random.Random(seed)
    for _ in range(trials):
        cached_model.reset_cache()
        P = rng.randrange(1, block_size - 2)  # cached prefix
        prefix = [rng.randrange(vocab_size) for _ in range(P)]
        cached_model(torch.tensor([prefix]), use_cache=True)
        T = rng.randint(1, 2 * (block_size - P))  # up to twice the positions left
        parents, depth = [], []
        for i in range(T):  # a random tree no deeper than the window allows
            options = [-1] + [j for j in range(i) if P + depth[j] + 1 < block_size]
            parents.append(rng.choice(options))
            depth.append(0 if parents[-1] < 0 else depth[parents[-1]] + 1)
        ids = [rng.randrange(vocab_size) for _ in range(T)]
        pos, mask = tree_attention(P, parents, "cpu")
        assert pos.tolist() == [P + d for d in depth]
        logits, _ = cached_model(torch.tensor([ids]), use_cache=True, pos=pos, mask=mask)  # (1, T, V)
        path = lambda i: (path(parents[i]) if parents[i] >= 0 else []) + [i]  # root .. i, new-token indices
        for i in range(T):
            full, _ = reference(torch.tensor([prefix + [ids[j] for j in path(i)]]))
            assert (logits[0, i] - full[0, -1]).abs().max().item() <= 1e-5, f"tree token {i} of {parents}"
        kept = path(rng.randrange(T))
        cached_model.compact(P, [P + j for j in kept])
        seq = prefix + [ids[j] for j in kept]
        assert cached_model.cache_len == len(seq)
        new = [rng.randrange(vocab_size) for _ in range(rng.randint(1, block_size - len(seq)))] \
            if len(seq) < block_size else []
        if new:
            cached, _ = cached_model(torch.tensor([new]), use_cache=True)
            full, _ = reference(torch.tensor([seq + new]))
            assert (cached - full[:, -len(new):]).abs().max().item() <= 1e-5, "after compact()"


@pytest.fixture
def gpt_pair():
    """(target, draft): two small random GPTs sharing a vocabulary of 5, block_size 8."""
    return random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)


def tiny_training(tmp_path, roles="target"):
    """Train a 1-layer model of `roles` (target, draft or both) for 2 steps on a tiny corpus in tmp_path.
    -> the flags that point later train_draft.py runs at the same corpus, cache and folder."""
    import train_draft
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("to be or not to be, that is the question.\n" * 60)
    common = ["--corpus", str(corpus), "--data_dir", str(tmp_path / "data"), "--out_dir", str(tmp_path),
              "--block_size", "16", "--batch_size", "4", "--eval_iters", "2", "--threads", "1"]
    train_draft.main(["--role", roles, "--n_layer", "1", "--n_head", "2", "--n_embd", "16", "--max_iters", "2",
                      "--eval_interval", "2", *common])
    return common
