"""
A draft with another tokenizer than the target's, still lossless: token-level intersection.

Source: Timor et al. 2025, "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for
Heterogeneous Vocabularies" (arXiv:2502.05202), the intersection method. Speculative sampling needs the draft's
q over the TARGET's vocabulary, and any q that depends only on the past keeps Algorithm 2 exact (Leviathan et
al., Appendix A.1). So CrossVocabDraft

  - reads the text so far: the target's tokens decoded, then encoded again by the draft's own tokenizer;
  - runs the draft on that, for its next-token distribution over ITS vocabulary;
  - keeps only the tokens both vocabularies have (the same string is one token in each), renormalizes over
    them, and puts that on the target's ids: q. The target can keep only those, so what the target puts on the
    other tokens is lost acceptance: alpha <= the target's mass on the shared tokens.

    draft = CrossVocabDraft(char_draft, char_tokenizer, bpe_tokenizer)   # a draft over the target's ids
    speculative_generate(target, draft, idx, 200)                       # exact, as with any draft

It speaks the cache interface of variants.NGramDraft (a TokenListCache), so every verifier takes it. The draft
model keeps its KV cache across steps while the re-encoded text only grows, and rolls it back to the longest
common prefix otherwise (a later character can re-tokenize the end of the text). Its context window slides as
speculative.context_start says, over its own tokens.

Which tokens count as shared: a token whose text is the same string in both vocabularies and decodes to whole
characters. A byte-level BPE piece that is part of a multi-byte character (it decodes to U+FFFD) is left out,
rather than matched by bytes. What it leaves out: proposing a multi-token string that the target would split
differently (the "string-level" methods of the same paper), and batches (batched.py needs a per-row cache).
"""

import re

import torch

from speculative import context_start, sampling_probs, window_end
from drafts.ngram import TokenListCache
from model import GPTConfig


def token_strings(tok):  # -> {id: the text of that one token}, whole characters only
    out = {}
    for i in range(tok.vocab_size):
        text = tok.decode([i])
        if text and "\ufffd" not in text:  # a piece of a multi-byte character has no text of its own
            out[i] = text
    return out


def shared_tokens(draft_tok, target_tok):
    """-> (draft ids, target ids): the tokens whose text is one token in both vocabularies, in the same order.
    char ['a', 'b', 'c'] and a target with ['a', 'ab', 'c', 'd'] -> ([0, 2], [0, 2])."""
    by_text = {text: i for i, text in token_strings(target_tok).items()}
    pairs = sorted((d, by_text[text]) for d, text in token_strings(draft_tok).items() if text in by_text)
    if not pairs:
        raise ValueError("the draft's and the target's tokenizers share no token (no string is a single token in "
                         "both), so the draft could never propose a token the target can keep: pick a draft whose "
                         "vocabulary overlaps the target's, e.g. one with the same tokenizer")
    return [d for d, _ in pairs], [t for _, t in pairs]


class CrossVocabDraft(TokenListCache):
    """A draft model with its own tokenizer, as a draft over the target's vocabulary (see the module docstring).

    draft: a model with model.GPT's cache interface over draft_tok's ids. Tokenizers: anything with
    encode(str) -> ids, decode(ids) -> str and vocab_size (data.Tokenizer qualifies)."""

    def __init__(self, draft, draft_tok, target_tok):
        super().__init__()
        if draft.config.vocab_size < draft_tok.vocab_size:
            raise ValueError(f"the draft model has {draft.config.vocab_size} token ids but its tokenizer "
                             f"{draft_tok.vocab_size}: pass the tokenizer the draft was trained with")
        self.draft, self.draft_tok, self.target_tok = draft, draft_tok, target_tok
        self.draft_ids, self.target_ids = shared_tokens(draft_tok, target_tok)
        self.shared = len(self.draft_ids)
        self.config = GPTConfig(block_size=2 ** 62, vocab_size=target_tok.vocab_size, n_layer=0)  # never slides
        self.fed = []  # the draft tokens its KV cache holds, from draft_start on
        self.draft_start, self.read_prompt = 0, False
        self.draft_mass = [0.0, 0]  # the draft's own probability on the shared tokens: sum over steps, steps

    @property
    def draft_shared_mass(self):  # the draft's own probability on the shared tokens, averaged over its steps
        return self.draft_mass[0] / max(1, self.draft_mass[1])

    def num_params(self):
        return sum(p.numel() for p in self.draft.parameters())  # also when the draft is fast.py's FastGPT

    def reset_cache(self, batch_size=1):
        super().reset_cache(batch_size)
        self.draft.reset_cache()
        self.fed, self.draft_start, self.read_prompt = [], 0, False

    def reencode(self, history):  # target ids -> the draft's ids for the same text
        """The draft tokenizer's encoding of the text, or, where it has no token for some piece (data.py's BPE keeps
        only the tokens its corpus had), an encoding piece by piece: words and spaces, then single characters,
        leaving out a character it cannot encode at all. Any encoding that depends only on the text keeps q a
        function of the past, so the output stays exact; only the proposals get worse. Such a character in the
        prompt (the first text read after reset_cache) is an error that names it."""
        text = self.target_tok.decode(history)
        try:
            return self.draft_tok.encode(text)
        except ValueError:
            pass
        ids, missing = [], []
        for piece in re.findall(r"\s+|\S+", text):
            try:
                ids += self.draft_tok.encode(piece)
                continue
            except ValueError:
                pass
            for ch in piece:
                try:
                    ids += self.draft_tok.encode(ch)
                except ValueError:
                    missing.append(ch)
        if missing and not self.read_prompt:
            raise ValueError(f"the draft's tokenizer cannot encode the characters {''.join(sorted(set(missing)))!r} "
                             "of the prompt: leave them out of the prompt, or give a draft whose tokenizer has them")
        return ids

    def next_logits(self, history):  # target ids, the new token last -> (V_target,) log q over the shared tokens
        ids = self.reencode(history)
        self.read_prompt = True
        ids = ids or [0]  # subtle: nothing of the text has a draft token; token 0 stands in, so q is still defined
        W, t = self.draft.config.block_size, len(ids)  # the draft predicts position t from ids[s(t):t]
        start = context_start(t, W)
        if start != self.draft_start:  # its window slid: nothing cached is at the right position any more
            self.draft.crop(0)
            self.fed, self.draft_start = [], start
        window = ids[start:]
        same = 0  # the longest common prefix of what the cache holds and what the window now is
        while same < min(len(self.fed), len(window) - 1) and self.fed[same] == window[same]:
            same += 1
        self.draft.crop(same)
        self.fed = window
        logits = self.draft(torch.tensor([window[same:]], device=self.device), use_cache=True)[0][0, -1]  # (V_draft,)
        self.draft_mass[0] += torch.softmax(logits.double(), -1)[self.draft_ids].sum().item()  # for the report
        self.draft_mass[1] += 1
        out = torch.full((self.config.vocab_size,), -1e30, dtype=torch.float64)  # subtle: finite, as in NGramDraft
        out[self.target_ids] = logits.double()[self.draft_ids]  # the softmax renormalizes over the shared tokens
        return out

    @property
    def device(self):
        param = next(self.draft.parameters(), None)
        return param.device if param is not None else torch.device("cpu")


@torch.no_grad()
def shared_mass(target, tokens, first_new, target_ids, temperature=1.0, top_k=None, top_p=None):
    """-> the target's probability on the shared tokens, averaged over the positions first_new..len(tokens)-1
    (with the run's temperature, top-k and top-p): the acceptance that a cross-vocabulary draft could reach at
    most there. One forward per context window: positions that share s(t) are scored together."""
    W, masses, t = target.config.block_size, [], first_new
    while t < len(tokens):
        s, end = context_start(t, W), min(window_end(t, W), len(tokens) - 1)  # positions t..end share s(t)
        logits = target(torch.tensor([tokens[s:end]], device=next(target.parameters()).device))[0][0]  # (end - s, V)
        p = sampling_probs(logits[t - 1 - s:], temperature, top_k, top_p)  # rows predict positions t..end
        masses += p[:, target_ids].sum(-1).tolist()
        t = end + 1
    return sum(masses) / len(masses) if masses else float("nan")
