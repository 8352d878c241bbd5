"""
A draft with no model: prompt lookup / n-gram drafting. Lossless.

Source: Saxena 2023, "Prompt Lookup Decoding"; vLLM's n-gram proposer does the same. Leviathan et al. 2023 note
that any q keeps speculative sampling exact, and a point mass is a q. In Theorem 3.8's terms: c is nearly 0 (a
search through the text so far, no forward), and alpha is the target's probability of the token that followed
the last match: high on text that repeats (code, quotes, a summary of its prompt), low on fresh prose.

    speculative_generate(target, NGramDraft(V, n=3), idx, n)       # sample.py --draft ngram

TokenListCache is the draft cache interface for models without weights: a "KV cache" that is the list of token
ids seen. NGramDraft, drafts/cross_vocab.py and the tests' table models speak it; a fork's draft subclasses it and
writes next_logits(history) (docs/fork.md).

What it leaves out: suffix trees over earlier outputs and other requests (several candidates, with their
counts as q: drafts/suffix.py), and any learned model of which match to trust.
"""

import functools
import math

import torch
import torch.nn as nn

import speculative
from model import GPTConfig, compact_moves
from speculative import Drafter


class TokenListCache(nn.Module):
    """A "KV cache" that is just the list of token ids seen, with model.GPT's interface (for models without
    weights: this draft, and the tests' table models). A subclass gives next_logits(history) -> (V,), where
    history is every token the new one sees, itself last; trees of tokens (pos, mask) work as in model.GPT."""

    def __init__(self):
        super().__init__()
        self.cache = []
        self.row_lengths = None  # with a per-row cache (reset_row_cache): tokens each row holds

    def reset_cache(self, batch_size=1):
        self.cache, self.row_lengths = [], None

    @property
    def cache_len(self):
        return len(self.cache)

    def crop(self, n):
        assert 0 <= n <= len(self.cache), f"crop({n}) needs 0 <= n <= cache_len ({len(self.cache)})"
        del self.cache[n:]

    def compact(self, n, slots):  # keep the first n tokens, then those at `slots`: model.GPT.compact
        compact_moves(n, slots, len(self.cache))  # the argument check
        self.cache[n:] = [self.cache[a] for a in slots]

    # ---- model.GPT's per-row cache (batched.py): one list of ids per row ----
    def reset_row_cache(self, batch_size, room=0):
        self.rows, self.row_lengths = [[] for _ in range(batch_size)], torch.zeros(batch_size, dtype=torch.long)

    def crop_rows(self, lengths):
        self.row_lengths = torch.as_tensor(lengths, dtype=torch.long).cpu().clone()

    def keep_rows(self, index):
        index = torch.as_tensor(index, dtype=torch.long).cpu()
        self.rows, self.row_lengths = [self.rows[i] for i in index.tolist()], self.row_lengths[index]

    def row_forward(self, idx, rows=None):  # (B', T) -> logits (B', T, V), as model.GPT.row_forward
        which = range(len(self.rows)) if rows is None else rows.tolist()
        out = []
        for r, ids in zip(which, idx.tolist()):
            seen, W = self.rows[r][:self.row_lengths[r]], self.config.block_size  # stale tokens forgotten
            logits = []
            for x in ids:  # subtle: past the window sit only tokens the caller discards: any logits do
                seen.append(x)
                logits.append(self.next_logits(seen) if len(seen) <= W else torch.zeros(self.config.vocab_size))
            self.rows[r] = seen
            self.row_lengths[r] += len(ids)
            out.append(torch.stack(logits).to(torch.float64))
        return torch.stack(out).to(idx.device)

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, rows=None, span=None):  # -> (logits, None)
        if use_cache and self.row_lengths is not None:
            return self.row_forward(idx, rows), None
        seen, out = self.cache if use_cache else [], []  # the cache grows in place, token by token
        for i, x in enumerate(idx[0].tolist()):  # token i sees everything so far, or where its mask row says (a tree)
            seen.append(x)
            assert mask is None or not mask[i, len(seen):].any(), "a token cannot see tokens fed after it"
            history = seen if mask is None else [y for y, m in zip(seen, mask[i].tolist()) if m]
            assert pos is None or pos[i] == len(history) - 1, "a tree token's position must be its depth"
            out.append(self.next_logits(history))
        return torch.stack(out)[None].to(idx.device), None


class NGramDraft(TokenListCache):
    """A draft without weights: find the last n tokens earlier in the prompt or the text so far (shorter suffixes
    down to 1 token when none), and propose what followed the most recent match, as far as it goes (max_path
    tokens at most): prompt lookup. Without a match it proposes nothing: k_for returns 0 and the round is one plain
    target step, as in transformers' prompt lookup, vLLM's and llama.cpp's n-gram drafts.

    q is a point mass on each proposed token, so the acceptance test min(1, p(x)/q(x)) becomes p(x), and a rejection
    resamples from norm(max(0, p - q)) = p with x removed: still exactly the target's distribution, because the
    draft token is drawn from the very q the test uses; how many tokens a round drafts is decided from the tokens
    so far (k_for), as k="auto" decides K. smoothing=e mixes in the uniform distribution,
    q = (1 - e) onehot + e / V (before temperature, top-k and top-p, which apply to q's logits as to any draft's).

    It speaks model.GPT's cache interface (forward(idx, use_cache=True), reset_cache, crop, cache_len), so it is
    passed as the `draft` of speculative_generate. Its window is unbounded: it looks through everything so far.
    [5, 1, 2, 5, 1] with n=2 -> proposes 2, 5, 1 (the suffix 5, 1 occurred at 0..1, followed by 2, 5, 1).
    """

    def __init__(self, vocab_size, n=3, smoothing=0.0, max_path=10):
        super().__init__()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the n-gram length n must be an int >= 1 (tokens to match), got {n!r}")
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1) (0: a point mass), got {smoothing}")
        if not isinstance(max_path, int) or max_path < 1:
            raise ValueError(f"max_path (the most tokens a match proposes) must be an int >= 1, got {max_path!r}")
        self.n, self.smoothing, self.max_path = n, smoothing, max_path
        self.config = GPTConfig(block_size=2 ** 62, vocab_size=vocab_size, n_layer=0)  # no window: never slides
        self.last = ((), [])  # (the history a path was found for, the path): a round's drafts follow it

    def num_params(self):
        return 0

    def path(self, history):  # list of ids -> the ids that followed the longest recent match of its suffix ([]: none)
        if tuple(history) == self.last[0]:
            return self.last[1]
        out = []
        for m in range(min(self.n, len(history) - 1), 0, -1):
            suffix, last = history[-m:], history[-1]
            j = next((j for j in range(len(history) - 2, m - 2, -1)  # j: where an earlier copy of the suffix ends
                      if history[j] == last and history[j - m + 1:j + 1] == suffix), None)
            if j is not None:
                out = history[j + 1:j + 1 + self.max_path]
                break
        self.last = (tuple(history), out)
        return out

    def propose(self, history):  # -> the next token: the path's first, or without a match the last token again
        path = self.path(history)
        return path[0] if path else history[-1]

    def k_for(self, tokens, K):  # -> how many drafts this round: the match's path, at most K (speculative_generate)
        return min(K, len(self.path(tokens)))

    def next_logits(self, history):  # -> (V,) float64: log q
        """Within a round the drafts follow the path found at its start (k_for); elsewhere (a tree, a batch, the
        first call) the history's own path."""
        key, path = self.last
        d = len(history) - len(key)
        if 0 < d < len(path) and history[len(key):] == path[:d] and tuple(history[:len(key)]) == key:
            x = path[d]
        else:
            x = self.propose(history)
        return point_mass(self.config.vocab_size, x, self.smoothing)


def point_mass(V, x, smoothing=0.0):  # -> (V,) float64: log of (1 - smoothing) onehot(x) + smoothing / V
    logq = log_uniform(V, smoothing).clone()  # a copy of a cached row: the real model's 49,152 logs cost 0.3 ms
    logq[x] = math.log(1.0 - smoothing + smoothing / V)
    return logq


@functools.lru_cache(maxsize=8)
def log_uniform(V, smoothing):  # -> (V,) float64: log(smoothing / V) everywhere, made once per (V, smoothing)
    # subtle: a point mass as a large finite negative rather than -inf, so checks for finite logits pass;
    # exp(-1e30 / temperature) is exactly 0 for any temperature above 1e-278
    return torch.full((V,), math.log(smoothing / V) if smoothing > 0 else -1e30, dtype=torch.float64)



def check_ngram(ngram_n):
    if not isinstance(ngram_n, int) or ngram_n < 1:
        raise ValueError(f"ngram_n (how many last tokens the n-gram draft matches) must be an int >= 1, got {ngram_n!r}")




speculative.DRAFTS["ngram"] = Drafter(
    lambda target, ngram_n: NGramDraft(target.config.vocab_size, n=ngram_n), dict(ngram_n=3),
    check=lambda ngram_n: check_ngram(ngram_n), doc="prompt lookup, no model: lossless",
    help=dict(ngram_n="with --draft ngram: how many last tokens to match"))
