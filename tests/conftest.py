"""Shared helpers: tiny random GPTs and table-driven toy models that speak model.GPT's cache interface."""

import random

import pytest
import torch
import torch.nn as nn

from model import GPT, GPTConfig
from variants import TokenListCache

torch.set_num_threads(1)  # tiny models: threads cost more than they save, and CI has 2 cores


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
    The cache is a list of token ids with GPT's interface (variants.TokenListCache): reset_cache(), crop(n), cache_len.
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
        return self.table[context[0], context[-1], len(context) % 2]

    def forward(self, idx, targets=None, use_cache=False):
        ids = idx[0].tolist()
        context = self.cache if use_cache else []
        assert len(context) + len(ids) <= self.config.block_size, "toy cache overflow: window handling is wrong"
        out = []
        for x in ids:
            context.append(x)
            out.append(self.next_logits(context))
        return torch.stack(out)[None], None  # (1, T, V)


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


@pytest.fixture
def gpt_pair():
    """(target, draft): two small random GPTs sharing a vocabulary of 5, block_size 8."""
    return random_gpt(0), random_gpt(1, n_layer=1, n_embd=8, n_head=1)
