"""
Drafts other than a small model of the target's kind: one file per proposer, each registering itself in
speculative.DRAFTS, the one registry that sample.py's and bench.py's --draft NAME read.

Every draft answers the question speculative.py's round asks, "K tokens and the q each was drawn from", by
speaking model.GPT's cache interface (reset_cache, crop, cache_len, forward(idx, use_cache=True)); so the one
round, its proofs and bench.py cover them all. `import drafts` registers:

    ngram.py        prompt lookup, no model (Saxena 2023); TokenListCache, the interface for weightless models
    suffix.py       suffix decoding, no model (Oliaro et al. 2024): the longest match, its most frequent path
    self_drafts.py  the target's own first layers (early exit, LayerSkip), an int8 copy, its int4 blocks
    parallel.py     a draft that proposes a round's K tokens in one forward, through mask tokens (PARD, An et al. 2025)
    eagle.py        an EAGLE-style head on the target's features (Li et al. 2024)
    eagle3.py       the EAGLE head on three of the target's blocks, trained unrolled (EAGLE-3, Li et al. 2025)
    medusa.py       Medusa heads on the target's last feature (Cai et al. 2024)
    small.py        a small model of the target's kind: its first blocks, distilled (the classic draft)
    heads.py        what the heads share: the target's features, their checkpoints, a reduced vocabulary
    cross_vocab.py  a draft with another tokenizer, over the tokens both share (Timor et al. 2025): wraps any
                    draft checkpoint, so it has no entry of its own

Each entry's fresh(target) gives an untrained draft of its kind for any model.GPT or Llama target (seeded weights), the
door tests and forks use; make(target, **params) gives the one sample.py runs (the shipped heads are trained).
"""

from drafts import cross_vocab, eagle, eagle3, heads, medusa, ngram, parallel, self_drafts, small, suffix  # noqa: F401  (each registers itself in speculative.DRAFTS)
