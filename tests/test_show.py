"""show.py and sample.py --show rounds / --trace: recording a run changes none of its tokens; the coloured text,
with its escapes removed and its struck-through spans deleted, is the plain text character for character (every
chain and tree verifier, the shipped draft, ngram and eagle, batches); without colour the same marks are plain
characters; bad --trace paths are usage errors before sampling; the page is one file that fetches nothing."""

import re

import pytest
import torch

import drafts  # noqa: F401  (--draft ngram, eagle)
import sample
import show
import speculative
import verifiers  # noqa: F401  (verify="block", "tree", ...)
from speculative import speculative_generate
from tests.conftest import random_gpt

STRUCK = re.compile(r"\x1b\[(?:[0-9;]*;)?9(?:;[0-9;]*)?m.*?\x1b\[0m", re.S)  # an SGR with 9 among its parameters
ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def unstyled(text):  # -> the text with struck-through spans deleted and every other escape removed
    return ESCAPE.sub("", STRUCK.sub("", text))


def test_unstyled_deletes_struck_spans_and_escapes():
    assert unstyled("\x1b[32mab\x1b[0m\x1b[9;31mX\x1b[0m\x1b[34mc\x1b[0m d") == "abc d"
    assert unstyled("\x1b[9mgone\x1b[0mkept") == "kept"


VERIFIES = [("tokenwise", {}), ("block", {}), ("tree", dict(branches=(2, 2))), ("typical", {})]


@pytest.mark.parametrize("verify,params", VERIFIES)
def test_recording_a_run_changes_none_of_its_tokens(verify, params):
    target, draft = random_gpt(0, vocab_size=7, block_size=16), random_gpt(1, vocab_size=7, block_size=16)
    idx = torch.tensor([[1, 2, 3]])
    run = lambda: speculative_generate(target, draft, idx, 30, k=3, verify=verify,
                                       generator=torch.Generator().manual_seed(5), **params)
    plain, stats = run()
    with show.Recorder(detail=True) as rec:
        recorded, rstats = run()
    assert recorded.tolist() == plain.tolist() and rstats.rounds == stats.rounds
    assert [(r.t, r.K, r.kept) for r in rec.rounds] == stats.rounds
    assert speculative.coin is rec.real["coin"], "the recorder must put speculative's functions back"
    chain = [r for r in rec.rounds if r.drafts]  # (a K = 0 round drafts nothing)
    if verify == "tree":
        assert not chain  # a tree drafts through draft_tree: its rejected nodes are not shown
    else:
        assert chain and all(len(r.drafts) == r.K == len(r.q) for r in chain)
        tokens = recorded[0].tolist()
        assert all(tokens[r.t:r.t + r.kept] == r.drafts[:r.kept] for r in chain)  # the kept drafts are the output
        assert any(r.kept < r.K for r in chain) and any(r.draws for r in chain)


def test_the_page_data_of_a_tokenwise_round_is_the_runs_own():
    target, draft = random_gpt(0, vocab_size=7, block_size=16), random_gpt(1, vocab_size=7, block_size=16)
    idx = torch.tensor([[1, 2, 3]])
    with show.Recorder(detail=True) as rec:
        out, stats = speculative_generate(target, draft, idx, 20, k=3, generator=torch.Generator().manual_seed(2))
    for r in rec.rounds:
        if r.K == 0:
            continue
        tested = r.kept + (r.kept < r.K)  # token-wise: one coin per tested draft
        assert len(r.coins) == tested
        for j, (prob, u) in enumerate(r.coins):
            assert prob == pytest.approx(min(1.0, r.p[j][0] / r.q[j][0]))  # min(1, p/q) of that draft
            assert (u < prob) == (j < r.kept)  # kept exactly where the coin fell under it


def run_sample(argv, capsys, monkeypatch, env=None):
    for name in ("FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    sample.main(argv)
    return capsys.readouterr().out


def texts(out):  # -> each sample's text as printed between its header and the statistics
    parts = re.split(r"---------- sample \d+/\d+\n", out)[1:]
    return [p.split("\n----------\n")[0] for p in parts]


BASE = ["--num_samples", "2", "--max_new_tokens", "40", "--k", "3", "--seed", "7", "--threads", "1"]


@pytest.mark.parametrize("extra", [[], ["--verify", "block"], ["--verify", "tree", "--branches", "2,2"],
                                   ["--draft", "ngram"], ["--draft", "eagle"], ["--batch", "3"]],
                         ids=["tokenwise", "block", "tree", "ngram", "eagle", "batch"])
def test_coloured_rounds_without_struck_spans_are_the_plain_sample(extra, capsys, monkeypatch):
    plain = texts(run_sample(BASE + extra, capsys, monkeypatch))
    coloured = run_sample(BASE + extra + ["--show", "rounds"], capsys, monkeypatch, env={"FORCE_COLOR": "1"})
    assert "\x1b[32m" in coloured and coloured.count("\n") > 3
    assert [unstyled(t) for t in texts(coloured)] == plain
    if "tree" not in extra:  # a chain shows its rejected drafts, struck through
        assert STRUCK.search(coloured)


def test_without_colour_the_marks_are_plain_characters(capsys, monkeypatch):
    out = run_sample(BASE + ["--show", "rounds"], capsys, monkeypatch, env={"NO_COLOR": "1"})
    assert "\x1b[" not in out and "~~" in out and "[" in out and "kept draft" in out.splitlines()[1]
    forced = run_sample(BASE + ["--show", "rounds", "--color", "always"], capsys, monkeypatch, env={"NO_COLOR": "1"})
    assert "\x1b[9;31m" in forced


def test_show_rounds_with_plain_sampling_says_there_are_none(capsys, monkeypatch):
    out = run_sample(BASE + ["--draft", "none", "--show", "rounds"], capsys, monkeypatch, env={"FORCE_COLOR": "1"})
    assert "has no rounds" in out and "\x1b[" not in out


@pytest.mark.parametrize("where,words", [("missing/dir/r.html", "does not exist"), (".", "is a directory")])
def test_a_trace_path_that_cannot_be_written_is_a_usage_error_before_sampling(where, words, tmp_path, capsys):
    path = str(tmp_path / where) if where != "." else str(tmp_path)
    with pytest.raises(SystemExit) as e:
        sample.get_args(["--trace", path])
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_trace_writes_one_page_that_fetches_nothing(tmp_path, capsys, monkeypatch):
    path = tmp_path / "rounds.html"
    out = run_sample(BASE + ["--trace", str(path)], capsys, monkeypatch)
    assert f"wrote {path}" in out
    page = path.read_text(encoding="utf-8")
    assert "<script src" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    assert not re.search(r"(?:src|href)=[\"']?(?:https?:)?//", page), "the page must work offline"
    data = page[page.index("const DATA = ") + len("const DATA = "):page.index(";\nconst $ =")]
    import json
    data = json.loads(data)
    assert data["rounds"] and data["rounds"][0]["drafts"] is not None and data["measured"]["alpha"] > 0


def test_a_long_run_keeps_the_first_rounds_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(show, "ROUND_LIMIT", 3)
    target, draft = random_gpt(0, vocab_size=7, block_size=16), random_gpt(1, vocab_size=7, block_size=16)
    idx = torch.tensor([[1, 2, 3]])
    with show.Recorder(detail=True) as rec:
        out, stats = speculative_generate(target, draft, idx, 30, k=2, generator=torch.Generator().manual_seed(2))
    data = show.page_data(lambda ids: "".join(map(str, ids)), [(idx[0].tolist(), out[0, 3:].tolist(), rec.rounds)],
                          "tokenwise", {}, show.measured_point([stats], 1.0))
    assert len(data["rounds"]) == 3 and data["total"] == len(stats.rounds) > 3
    show.write_page(tmp_path / "r.html", data)
    assert "the page keeps the first" in (tmp_path / "r.html").read_text()
