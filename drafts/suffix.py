"""
Suffix decoding: a draft without weights that proposes the continuation of the longest match of the text's
suffix, in the text so far and, optionally, in a corpus (a datastore). Lossless.

Source: Oliaro et al. 2024, "SuffixDecoding" (arXiv:2411.04975), shipped by vLLM (method="suffix"), SGLang and
TensorRT-LLM; the datastore is REST's (He et al. 2023, arXiv:2311.08252). It differs from drafts/ngram.py in three
ways: (1) it looks for the LONGEST suffix that occurred before, and counts every earlier occurrence of it; (2) it
walks the continuations of those occurrences, taking the most frequent next token each step, as far as the
path's estimated probability stays above `min_prob` (the paper's frequency-based speculation length); (3) it
proposes NOTHING without a match of at least `min_match` tokens: the round is then one plain target step
(k_for returns 0), so on fresh text it costs almost nothing instead of a wasted target forward per round.

In Theorem 3.8's terms: c is nearly 0 (a search, no forward), and K varies round by round with the match; alpha
is high where the text repeats and the target repeats with it.

Why it stays exact: q is a point mass on each proposed token (as the n-gram draft's), so the token is drawn from
the very q the acceptance test uses; and how many tokens a round drafts is decided from the tokens so far only
(k_for), as k="auto" decides K: the enumeration of every branch covers both (tests/test_suffix.py).

    speculative_generate(target, SuffixDraft(V), idx, n, k=8)              # sample.py --draft suffix
    SuffixDraft(V, corpus=train_ids)                                        # --suffix_corpus data: the training text

The path's probability, as the paper estimates it: each step multiplies by the share of the occurrences still
on the path that continue with the chosen token. The defaults depend on what a token is: on the Shakespeare model's
characters, min_match 6 (set on prompts from the training text, not the benchmark's: shorter matches proposed too
often at T = 1, 0.92x at min_match 4); on a chat model's BPE tokens, min_match 2 (scripts/tune_lookups.py: greedy
rounds simulated on the target's answers to training requests, data.chat_requests, none of the suite's; 1 drafts in
half the rounds and loses, 3 and more draft too rarely). min_prob 0.3 for both.

What it leaves out: the paper's tree of several candidate paths (verified as a tree), and sharing one suffix tree
across requests (a batch's rows).
"""

import numpy as np
import torch

import speculative
from drafts.ngram import TokenListCache, point_mass
from model import GPT, GPTConfig
from speculative import Drafter

PATH_MAX = 64  # the longest path proposed: a round drafts at most this many tokens


class Datastore:
    """A corpus indexed for exact suffix lookups: for each length m in `lengths`, every m-gram packed into one
    int64 (bits per token x m <= 63), sorted. lookup(suffix) -> the corpus positions right after each occurrence
    of the longest suffix found (at most `limit`, the first ones in the corpus), and its length."""

    def __init__(self, ids, vocab_size, max_match=9, limit=512):
        self.ids = np.asarray(ids, dtype=np.int64)
        self.bits = max(1, int(vocab_size - 1).bit_length())
        top = min(max_match, 63 // self.bits)
        self.lengths, self.limit, self.index = list(range(top, 0, -1)), limit, {}
        for m in self.lengths:
            n = len(self.ids) - m  # an m-gram must have a next token
            if n <= 0:
                continue
            keys = np.zeros(n, dtype=np.int64)
            for i in range(m):
                keys = (keys << self.bits) | self.ids[i:i + n]
            order = np.argsort(keys, kind="stable")  # stable: equal keys keep corpus order
            self.index[m] = (keys[order], order + m)  # the sorted keys, the position after each m-gram

    def key(self, suffix):
        value = 0
        for x in suffix:
            value = (value << self.bits) | int(x)
        return value

    def lookup(self, history, min_match):  # -> (match length, positions after it), or (0, [])
        for m in self.lengths:
            if m < min_match or m > len(history) or m not in self.index:
                continue
            keys, after = self.index[m]
            key = self.key(history[-m:])
            lo, hi = np.searchsorted(keys, key, side="left"), np.searchsorted(keys, key, side="right")
            if hi > lo:
                return m, np.sort(after[lo:hi])[:self.limit].tolist()
        return 0, []


class SuffixDraft(TokenListCache):
    """Propose the most frequent continuation of the longest earlier match of the text's suffix (see the module's
    docstring). k_for(tokens, K) -> how many tokens the round drafts (0 without a good match); next_logits(history)
    -> log of a point mass on the path's first token for that history. [1, 2, 3, 9, 1, 2, 3] -> proposes 9."""

    def __init__(self, vocab_size, max_match=16, min_match=6, min_prob=0.3, corpus=None, corpus_max_match=9):
        super().__init__()
        if not (isinstance(min_match, int) and isinstance(max_match, int) and 1 <= min_match <= max_match):
            raise ValueError(f"the match lengths need 1 <= min_match <= max_match (ints), got {min_match}, {max_match}")
        if not 0.0 <= min_prob < 1.0:
            raise ValueError(f"min_prob (the least estimated probability of a proposed path) must be in [0, 1), got {min_prob}")
        self.max_match, self.min_match, self.min_prob = max_match, min_match, min_prob
        self.store = None if corpus is None else Datastore(corpus, vocab_size, corpus_max_match)
        self.config = GPTConfig(block_size=2 ** 62, vocab_size=vocab_size, n_layer=0)  # no window: sees everything
        self.last = (None, [])  # (history as a tuple, its path): k_for and the first draft ask for the same one
        self.grams, self.indexed = {}, []  # min_match-gram -> where it ends in `indexed`, the text indexed so far

    def num_params(self):
        return 0

    def matches(self, history):  # -> (match length, the continuations of every earlier occurrence) in the text
        """The longest earlier match of the text's suffix (at most max_match tokens), found through an index of the
        text's min_match-grams kept up to date as tokens come and go, so a search costs the few earlier copies of
        its last min_match tokens, not a pass over the text. A match shorter than min_match is (0, []): it
        proposes nothing. matches_naive is the same search written as a scan; the tests hold them equal."""
        n, m0 = len(history), self.min_match
        self.index_up_to(history)
        if n <= m0:
            return 0, []
        earlier = [j for j in self.grams.get(tuple(history[n - m0:]), ()) if j <= n - 2]  # (n - 1: the suffix itself)
        return self.longest(history, reversed(earlier), m0)

    def index_up_to(self, history):
        """Bring the index of min_match-grams (gram -> the positions where it ends, increasing) to `history`: drop
        the positions past the part it shares with the text indexed so far (a crop, a new call), add the new ones."""
        old, common = self.indexed, min(len(self.indexed), len(history))
        if old[:common] == history[:common]:  # the usual cases, compared at C speed: more tokens, or a crop
            same = common
        else:
            same = 0
            while same < common and old[same] == history[same]:
                same += 1
        m0 = self.min_match
        for j in range(len(old) - 1, max(same, m0 - 1) - 1, -1):  # forget, newest first: each is its list's last
            self.grams[tuple(old[j - m0 + 1:j + 1])].pop()
        for j in range(max(same, m0 - 1), len(history)):
            self.grams.setdefault(tuple(history[j - m0 + 1:j + 1]), []).append(j)
        del old[same:]
        old.extend(history[same:])

    def matches_naive(self, history):  # the reference for matches(): every earlier position, one scan
        n = len(history)
        return self.longest(history, [j for j in range(n - 2, -1, -1) if history[j] == history[-1]], 1)

    def longest(self, history, ends, m):
        """Of the earlier positions `ends` (newest first) whose last m tokens equal the text's, the ones whose match
        extends furthest (at most max_match) -> (that length, the text after each), or (0, []) below min_match."""
        n, best, out = len(history), 0, []
        for j in ends:
            length = m
            while length < self.max_match and j - length >= 0 and history[j - length] == history[n - 1 - length]:
                length += 1
            if length > best:
                best, out = length, [j]
            elif length == best:
                out.append(j)
        if best < self.min_match:
            return 0, []
        return best, [history[j + 1:j + 1 + PATH_MAX] for j in out]

    def path(self, history):
        """-> the proposed tokens for this history: the walk along the most frequent continuation of the longest
        match (the text's own, or the datastore's if that is longer), while its probability stays >= min_prob."""
        key = tuple(history)
        if self.last[0] == key:
            return self.last[1]
        m, conts = self.matches(history) if len(history) > 1 else (0, [])
        if self.store is not None:
            m2, after = self.store.lookup(history, self.min_match)
            if m2 > m:
                m, conts = m2, [self.store.ids[a:a + PATH_MAX].tolist() for a in after]
        out, prob = [], 1.0
        if m >= self.min_match:
            while True:
                d = len(out)
                alive = [c for c in conts if len(c) > d]
                if not alive:
                    break
                counts = {}
                for c in alive:
                    counts[c[d]] = counts.get(c[d], 0) + 1
                x = max(counts, key=lambda y: (counts[y], -y))  # ties: the smaller id, so the path is deterministic
                prob *= counts[x] / len(alive)  # the share of the occurrences that go on this way
                if prob < self.min_prob:
                    break
                out.append(x)
                conts = [c for c in alive if c[d] == x]
        self.last = (key, out)
        return out

    def k_for(self, tokens, K):  # -> how many drafts this round: the path's length, at most K (speculative_generate)
        return min(K, len(self.path(tokens)))

    def next_logits(self, history):  # -> (V,) float64: log q, a point mass on the path's first token
        path = self.path(history)
        x = path[0] if path else history[-1]  # asked without a path (a tree, a batch): repeat the last token
        return point_mass(self.config.vocab_size, x)


class StackedDraft(torch.nn.Module):
    """The suffix draft where it has a path, a model draft elsewhere (--suffix_over checkpoints/draft.pt): the
    engines' "suffix with a fallback". Decided once per round: k_for (speculative_generate calls it before every
    round) looks up the suffix path of the text so far; the round's first drafts follow it (point masses, so each
    drafted token is the path's), and the model drafts the rest of the round, or all of it where there is no path.
    Every q is fixed by the tokens before it, and the draft token is drawn from it: lossless. The model draft is fed
    lazily, in one forward over the tokens it has not seen, so path positions cost no model step, and a round
    without a path costs one search, not one per position. Without k_for (a caller of its own) each position asks
    the suffix draft. Chains only (a tree's positions would need the model for every node).

    Over a head (--suffix_over eagle3: a trained draft by name, drafts/heads.py) the head must see every token and
    the target's features of them: on path positions it takes them by sync(), running nothing, and computes them
    when next asked to draft, from its own prediction where no target has scored them yet."""

    chains_only = True  # verifiers/tree.py's trees are refused up front (speculative_generate)

    def __init__(self, suffix, model):
        super().__init__()
        self.suffix, self.model = suffix, model
        self.config = model.config  # the model's window: speculative.CachedModel slides it as the model's
        self.seen = []
        self.round = None  # [the round's suffix path, drafts answered so far], set by k_for

    def num_params(self):
        return self.model.num_params()

    def reset_cache(self, batch_size=1):
        self.seen, self.round = [], None
        self.model.reset_cache()

    @property
    def cache_len(self):
        return len(self.seen)

    def crop(self, n):
        del self.seen[n:]
        self.model.crop(min(n, self.model.cache_len))

    def k_for(self, tokens, K):  # a round starts: its suffix path, from the whole text so far
        self.round = [self.suffix.path(tokens), 0]
        return K

    def forward(self, idx, targets=None, use_cache=False, pos=None, mask=None, **rows):  # -> (logits (1, T, V), None)
        if pos is not None or not use_cache:
            raise ValueError("--suffix_over drafts chains through its cache (token-wise or block verification), not trees")
        self.seen.extend(idx[0].tolist())  # (extend: no nn.Module attribute write on the hot path)
        if self.round is not None:  # the round's i-th draft: the path's i-th token while the path lasts
            path, i = self.round
            self.round[1] += 1
            row = point_mass(self.config.vocab_size, path[i]) if i < len(path) else None
        else:
            row = self.suffix.next_logits(self.seen) if self.suffix.path(self.seen) else None
        if row is not None and hasattr(self.model, "sync"):  # a head: it takes the tokens and the target's features
            self.model.sync(self.seen)  # of them as they come, and runs only when asked to draft
        if row is None:  # the model reads the tokens it has not seen: usually just idx, else those before it too
            lag = len(self.seen) - self.model.cache_len
            new = idx if lag == idx.size(1) else torch.tensor([self.seen[-lag:]], device=idx.device)
            row = self.model(new, use_cache=True)[0][0, -1]
        return row.to(idx.device).expand(1, idx.size(1), -1), None  # the last row is the one a chain reads


def corpus_ids(target, corpus):
    """--suffix_corpus: "data" (the training text of the pair, data.py), "python" (Python's own documentation and
    some of its standard library, data.python_text) or a UTF-8 file -> ids in the target's tokenizer. A character
    outside it is a one-line error."""
    import data
    tok = data.Tokenizer(target.meta["tokenizer"]) if getattr(target, "meta", None) else None
    if tok is None:
        raise ValueError("--suffix_corpus needs a target checkpoint that carries its tokenizer")
    try:
        text = (data.texts()[0] if corpus == "data" else "".join(data.texts("python")[:2]) if corpus == "python" else
                open(corpus, encoding="utf-8").read())
    except FileNotFoundError:
        raise ValueError(f"--suffix_corpus {corpus}: no such file (give a UTF-8 text file, 'data' for the training "
                         "text or 'python' for Python's documentation and standard library)")
    try:
        return tok.encode(text)
    except (KeyError, ValueError) as e:
        raise ValueError(f"--suffix_corpus {corpus}: its text does not fit the target's tokenizer ({e})")


MIN_MATCH = {"char": 6, "bpe": 2}  # suffix_min_match=0: by the target's kind of tokenizer (the module's docstring)


def min_match_for(target):  # -> the shortest match that proposes, for the target's tokenizer: characters or BPE
    kind = (getattr(target, "meta", None) or {}).get("tokenizer", {}).get("kind")
    if kind is None:  # no tokenizer recorded: a model.GPT of this project (characters, its default) or a Llama (BPE)
        kind = "char" if isinstance(target, GPT) else "bpe"
    return MIN_MATCH["char" if kind == "char" else "bpe"]  # gguf: a pretrained model's BPE


def check_suffix(suffix_min_match, suffix_min_prob, suffix_corpus="", suffix_over=""):
    if not isinstance(suffix_min_match, int) or suffix_min_match < 0:
        raise ValueError(f"suffix_min_match must be an int >= 1 (or 0: chosen by the tokenizer), got {suffix_min_match!r}")
    if not 0.0 <= suffix_min_prob < 1.0:
        raise ValueError(f"suffix_min_prob must be in [0, 1), got {suffix_min_prob!r}")


def make(target, suffix_min_match=0, suffix_min_prob=0.3, suffix_corpus="", suffix_over=""):
    corpus = corpus_ids(target, suffix_corpus) if suffix_corpus else None
    suffix_min_match = suffix_min_match or min_match_for(target)
    draft = SuffixDraft(target.config.vocab_size, min_match=suffix_min_match, min_prob=suffix_min_prob,
                        max_match=max(16, suffix_min_match), corpus=corpus)
    if not suffix_over:
        return draft
    if suffix_over in speculative.DRAFTS:  # a draft by name: a head trained for this target (eagle3, small)
        return StackedDraft(draft, speculative.DRAFTS[suffix_over].make(target))
    from engine.fast import with_decoder  # the model draft runs in the fast decoder, as the scripts run drafts
    from model import load_checkpoint
    try:
        model, _ = load_checkpoint(suffix_over, next(target.parameters()).device)
    except FileNotFoundError:
        raise ValueError(f"--suffix_over {suffix_over}: no such checkpoint (give a draft's .pt, e.g. checkpoints/draft.pt)")
    if model.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"--suffix_over {suffix_over}: its vocabulary ({model.config.vocab_size}) is not the target's "
                         f"({target.config.vocab_size})")
    return StackedDraft(draft, with_decoder("fast", None, model)[1])


speculative.DRAFTS["suffix"] = Drafter(
    make, dict(suffix_min_match=0, suffix_min_prob=0.3, suffix_corpus="", suffix_over=""),
    check=check_suffix, doc="suffix decoding, no model: the longest earlier match's most frequent continuation; lossless",
    help=dict(suffix_min_match="with --draft suffix: the shortest match that proposes anything; 0 (default): 6 tokens "
                               "for a character tokenizer, 2 for BPE (scripts/tune_lookups.py)",
              suffix_min_prob="with --draft suffix: the least estimated probability of the proposed path",
              suffix_corpus="with --draft suffix: also match in this text ('data': the training text; 'python': Python's own "
                            "documentation and standard library), as REST",
              suffix_over="with --draft suffix: a model draft's checkpoint, or a trained draft's name (eagle3, small), "
                          "that drafts wherever the suffix has no path"))
