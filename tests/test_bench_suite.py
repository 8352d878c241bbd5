"""bench.py's measures as the field names them: alpha counts tested drafts, acceptance by draft position, the
histogram of kept drafts against Theorem 3.8, the "does not pay" advice; and bench.py --suite on tiny models."""

import copy
import json
import mmap

import pytest
import torch

import bench
from benchmarks import suite, theory
import speculative
from speculative import speculative_generate, speculative_round
from tests.conftest import random_gpt


def capped_round(target, draft, tokens, k, probs, generator):
    """A fork's verifier: token-wise, but never more than 2 drafts a round; it stops there without a rejection."""
    kept = speculative_round(target, draft, tokens, min(k, 2), probs, generator)
    return kept, kept + (kept < min(k, 2))  # (kept, tested)


@pytest.fixture
def capped(monkeypatch):
    monkeypatch.setitem(speculative.ROUNDS, "capped", speculative.Verifier(capped_round))


def test_alpha_counts_tested_drafts_not_rounds_that_kept_fewer_than_k(capped):
    target = random_gpt(0, vocab_size=7, block_size=32)
    _, stats = speculative_generate(target, copy.deepcopy(target), torch.tensor([[1]]), 20, k=4, verify="capped",
                                    generator=torch.Generator().manual_seed(0))  # the draft is the target: keeps all
    assert all(kept == 2 for _, K, kept in stats.rounds if K >= 2) and stats.tested[0] == 2
    assert theory.alpha_from_rounds(theory.with_tests(stats)) == 1.0
    assert theory.alpha_from_rounds(stats.rounds) < 1.0  # without what the round tested: 2 of 4 read as a rejection


def test_a_plain_round_records_kept_plus_one_tested_after_a_rejection():
    target, draft = random_gpt(1, vocab_size=7, block_size=32), random_gpt(2, vocab_size=7, block_size=32)
    _, stats = speculative_generate(target, draft, torch.tensor([[1]]), 30, k=3,
                                    generator=torch.Generator().manual_seed(0))
    assert stats.tested == [kept + (kept < K) for _, K, kept in stats.rounds]
    assert any(kept < K for _, K, kept in stats.rounds)  # the check saw rejections


def test_acceptance_by_position_and_the_kept_histogram():
    rounds = [(0, 3, 3), (4, 3, 1), (6, 3, 0), (7, 3, 2), (10, 1, 0)]  # (t, K, kept); tested = kept (+1 if < K)
    # position 1: tested 5 times, kept 3; position 2: tested 3 (rounds 1, 2, 4), kept 2; position 3: tested 2, kept 1
    assert theory.acceptance_by_position(rounds) == [3 / 5, 2 / 3, 1 / 2]
    assert theory.acceptance_by_position([(0, 2, 1, 1)], 3)[1:] != theory.acceptance_by_position([(0, 2, 1)], 3)[1:]
    counts, law = theory.kept_histogram(rounds, 3)  # the K = 1 round is left out
    assert counts == [1, 1, 1, 1]
    a = theory.alpha_from_rounds(rounds[:4])  # 6 kept of 9 tested
    assert a == 6 / 9 and law == pytest.approx([1 - a, a * (1 - a), a * a * (1 - a), a ** 3])
    assert sum(law) == pytest.approx(1.0)


def test_the_advice_says_overhead_when_theory_already_pays():
    # alpha and c that already pay at K = 1 (v 1.09): the loss is the run's own overhead, not the draft
    text = theory.why_it_does_not_pay(0.133, 0.022, 1.09, measured=0.9, K=1)
    assert "per-round overhead" in text and "would pay" not in text
    assert "reached 88% of the theorem's 1.02x" in text and "12% of its time" in text
    text = theory.why_it_does_not_pay(0.133, 0.022, 1.09, measured=0.9, K=4)  # theory < 1 at this K: say which K
    assert "K = 1 would suit this draft better than K = 4" in text
    assert "would pay" in theory.why_it_does_not_pay(0.4, 0.33, 1.1, measured=0.9, K=1)  # theory < 1: as before


@pytest.mark.parametrize("speedup,std,win", [(0.94, 0.02, False), (0.95, float("nan"), False), (1.04, 0.06, False),
                                              (1.10, 0.06, True), (1.01, float("nan"), True)])
def test_a_win_is_a_speedup_above_one_by_more_than_its_spread(speedup, std, win):
    """The verdict line's "wins": the fastest column of a category counts only where it beats plain beyond noise."""
    assert suite.beats_plain(dict(speedup=speedup, speedup_std=std)) == win


SMOKE = ["--suite", "--prompts", "1", "--repeats", "2", "--max_new_tokens", "12", "--draft", "checkpoints/draft.pt,ngram"]


def test_the_suite_runs_every_category_draft_and_setting(tmp_path, capsys):
    rows = bench.main(SMOKE + ["--json", str(tmp_path / "suite.json")])
    out = capsys.readouterr().out
    assert {(r["category"], r["setting"], r["draft"]) for r in rows} == {
        (cat, st, d) for cat in suite.SUITE for st in ("t0", "t1.0") for d in ("draft", "ngram")}
    for r in rows:
        assert len(r["repeat_speedups"]) == 2 and r["speedup_std"] >= 0 and 1.0 <= r["tau"] <= r["K"] + 1
        assert (r["greedy_equal"] == "yes") == (r["setting"] == "t0")  # T = 1 is not compared: None
        assert len(r["kept_histogram"]) == r["K"] + 1 and sum(r["theory_histogram"]) == pytest.approx(1.0)
    assert "greedy equal" in out and out.count("| yes |") == 10 and "does the target itself repeat" in out
    assert "t1.0, ngram: " in out and ("wins no category" in out or "wins " in out)
    saved = json.loads((tmp_path / "suite.json").read_text())
    assert len(saved["rows"]) == 20 and set(saved["categories"]) == set(suite.SUITE)


def test_the_suite_names_the_first_token_where_greedy_differs(monkeypatch, capsys):
    real = suite.speculative_generate

    def off_by_one(*args, **kwargs):  # a planted bug: the 4th new token changes
        out, stats = real(*args, **kwargs)
        out[0, args[2].size(1) + 3] = (out[0, args[2].size(1) + 3] + 1) % 78
        return out, stats
    monkeypatch.setattr(suite, "speculative_generate", off_by_one)
    rows = bench.main(SMOKE + ["--settings", "t0", "--draft", "ngram"])
    assert all(r["greedy_equal"] == "no: first at prompt 1, new token 3" for r in rows)


def test_the_suite_prompts_are_what_their_categories_say():
    import data
    from model import load_checkpoint, SHIPPED
    target, meta = load_checkpoint(SHIPPED["target"])
    tok = data.Tokenizer(meta["tokenizer"])
    tasks = suite.suite_prompts(tok, 3, 64, 256)
    for prompt, expected in tasks["repeat"]:  # the passage, a blank line, its first 40 characters again
        text = tok.decode(prompt[0].tolist())
        passage = text[:-suite.QUOTED - 2]
        assert text.endswith("\n\n" + passage[:suite.QUOTED]) and tok.decode(expected) == passage[suite.QUOTED:]
    assert all(tok.decode(p[0].tolist()).endswith(":\n") for p, _ in tasks["dialogue"])
    assert all(p.size(1) == 256 - 16 for p, _ in tasks["long"])
    assert all(tok.decode(p[0].tolist()) in suite.PROSE for p, _ in tasks["prose"])
    assert all(len(ps) == 3 for ps in tasks.values())


def test_the_suite_runs_each_draft_at_each_k_and_draws_the_histogram_at_an_int_k_only(capsys):
    rows = bench.main(["--suite", "--prompts", "1", "--repeats", "1", "--max_new_tokens", "12", "--settings", "t0",
                       "--draft", "ngram", "--k", "2,auto"])
    out = capsys.readouterr().out
    assert {(r["draft"], r["K"]) for r in rows} == {("ngram@2", 2), ("ngram@auto", "auto")}
    assert "t0, ngram@2: rounds that kept 0..2 drafts" in out and "ngram@auto: rounds that kept" not in out
    assert all(r["greedy_equal"] == "yes" for r in rows)


# ---- the pieces of the real model's suite (benchmarks/suite.py, chat_tasks.py, common.py, theory.py) ----------

def test_suite_columns_take_a_drafts_own_flags_and_its_k():
    from benchmarks.suite import columns
    args = bench.get_args(["--suite", "--k", "4", "--draft", "ngram@2,suffix:suffix_min_match=3:suffix_corpus=python@auto,"
                                                               "checkpoints/draft.pt,layerskip:layerskip_layers=1"])
    assert columns(args) == [("ngram@2", "ngram", {}, 2, {}),
                             ("suffix:suffix_min_match=3:suffix_corpus=python@auto", "suffix",
                              dict(suffix_min_match=3, suffix_corpus="python"), "auto", {}),
                             ("draft", "checkpoints/draft.pt", {}, 4, {}),
                             ("layerskip:layerskip_layers=1", "layerskip", dict(layerskip_layers=1), 4, {})]
    two = columns(bench.get_args(["--suite", "--k", "2,auto", "--draft", "ngram"]))
    assert [label for label, *_ in two] == ["ngram@2", "ngram@auto"]  # several K: the label says which
    tree = columns(bench.get_args(["--suite", "--draft", "eagle:verify=tree:branches=4,4,4:children=top:rerank=1:"
                                                         "budget=auto@3,eagle:verify=multidraft:n_drafts=3@2"]))
    assert [col[-1] for col in tree] == [dict(verify="tree", branches=(4, 4, 4), children="top", rerank=True,
                                              budget="auto"), dict(verify="multidraft", n_drafts=3)]
    for bad in ("ngram:n=3", "suffix:suffix_min_match=three", "ngram@0", "eagle:verify=bush@3", "eagle:verify=tree:"
                "depth=2@3", "eagle:verify=tree@auto", "eagle:verify=tree:budget=auto@3", "eagle:branches=2@3"):
        # (trees take an int K; budget auto needs the rerank; a verifier's flag needs its verify=)
        with pytest.raises(SystemExit):
            columns(bench.get_args(["--suite", "--draft", bad]))


def test_copied_counts_the_new_tokens_that_end_a_run_found_in_the_prompt():
    from benchmarks.suite import copied
    assert copied([5, 6, 7, 8], [1, 2, 5, 6, 7, 8, 9]) == 1 / 4  # only 8 ends the run 5 6 7 8 (new tokens alone)
    assert copied([4, 5], [1, 2, 3, 4, 5, 0, 1, 2, 3]) == 1.0  # runs reach back into the prompt's end: 1 2 3 | 4
    assert copied([3, 3, 3], [1, 2, 5, 6]) == 0.0 and copied([], [1, 2]) != copied([], [1, 2])  # nan: no answer


def test_theorem_3_8_round_by_round_is_the_theorem_for_one_k_and_counts_a_plain_step_as_one():
    assert theory.predicted_rounds(0.8, [4, 4, 4], 0.1, 1.2) == pytest.approx(theory.predicted(0.8, 4, 0.1, 1.2))
    assert theory.predicted_rounds(0.8, [4, 0], 0.1, 1.2) == pytest.approx((3.3616 + 1) / (1.6 + 1))
    assert theory.predicted_rounds(float("nan"), [0, 0], float("nan"), 1.5) == 1.0  # no draft tested: plain steps


def test_v_is_read_from_the_forwards_that_scored_drafts():
    from benchmarks.common import wide_forwards
    stats = speculative.Stats(rounds=[(10, 4, 2), (13, 0, 0), (14, 4, 4)], target_times=[0.5, 0.01, 0.03])
    assert wide_forwards(stats) == [0.03]  # the prompt's forward and the plain step (K = 0) are left out
    stats.target_times.append(0.02)  # a forward more than rounds (a window's slide): every one after the first
    assert wide_forwards(stats) == [0.01, 0.03, 0.02]


def test_memory_sees_a_tensor_allocated_between_start_and_peak():
    from benchmarks.common import Memory
    memory = Memory("cpu")
    if memory.base != memory.base:
        pytest.skip("no /proc/self/status on this system: memory is not measured")
    memory.start()
    # subtle: 64 MB of fresh pages (an anonymous map), touched: malloc could hand back memory that earlier tests freed
    # but the process still holds, which no resident count sees grow
    pages = mmap.mmap(-1, 64 * 2 ** 20)
    x = torch.frombuffer(pages, dtype=torch.uint8)
    x.fill_(1)
    assert memory.peak() > 48 and memory.grown() > 48
    del x
    pages.close()
    assert memory.peak() > 48  # the peak stays after the tensor is freed


def test_the_chat_tasks_are_seven_kinds_of_five_requests_ending_with_the_users_turn():
    import ast
    from benchmarks.chat_tasks import TASKS
    assert list(TASKS) == ["summary", "rag", "code", "chat", "math", "translation", "qa"]
    for cat, (what, convs) in TASKS.items():
        assert len(convs) == 5 and what, cat
        assert all(conv[-1]["role"] == "user" and all(set(m) == {"role", "content"} for m in conv) for conv in convs)
    assert all([m["role"] for m in conv] == ["user", "assistant", "user"] for conv in TASKS["chat"][1])
    for conv in TASKS["code"][1]:  # the code to fix or extend parses
        ast.parse(conv[-1]["content"].split("```python")[1].split("```")[0])
