"""What bench.py's tables say beside the numbers: every row of a lossy verifier is labelled LOSSY (K sweep, suite,
trees), "-" where no draft was tested instead of nan, why K stayed 0 when a draft proposed nothing, and what the
batch table's tok/s counts. The shipped pair, one prompt of a few tokens: seconds on a CPU."""

import dataclasses

import pytest

import bench
import data
from benchmarks import common, suite, sweep
import sample
import speculative
import verifiers  # noqa: F401  (fills speculative.ROUNDS: tree, lenient)
from drafts.suffix import SuffixDraft
from speculative import Verifier, speculative_round

SMALL = ["--prompts", "1", "--max_new_tokens", "8", "--settings", "t1.0", "--threads", "1"]


def table_rows(out):  # -> the cells of each row of the printed markdown tables (not the headers or the rules)
    lines = out.splitlines()
    headers = {i - 1 for i, line in enumerate(lines) if line.startswith("|---")}
    return [[c.strip() for c in line.strip("|").split(" | ")] for i, line in enumerate(lines)
            if line.startswith("| ") and i not in headers]


@pytest.fixture
def fork_lossy(monkeypatch):  # a fork's lossy verifier, as docs/fork.md registers one (token-wise, marked lossy)
    monkeypatch.setitem(speculative.ROUNDS, "mine", Verifier(lambda *args: speculative_round(*args), lossless=False))


def test_every_row_of_a_lossy_verifier_is_labelled_lossy_in_the_k_table(fork_lossy, capsys):
    bench.main(SMALL + ["--draft", "checkpoints/draft.pt", "--verify", "tokenwise,lenient,mine", "--k", "2,auto",
                        "--repeats", "1"])
    out = capsys.readouterr().out
    assert [r[2] for r in table_rows(out)] == ["draft tokenwise"] * 2 + ["draft lenient (LOSSY) lenience=0.5"] * 2 + [
        "draft mine (LOSSY)"] * 2
    assert "t1.0, draft mine (LOSSY), fast: auto " in out  # the lines under the table name the variant as the row


def test_a_draft_that_proposes_nothing_says_why_and_its_rates_read_dash_not_nan(capsys):
    bench.main(SMALL + ["--draft", "suffix", "--k", "2,auto", "--repeats", "1"])
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert rows and all("nan" not in c for r in rows for c in r), out
    assert [r[7] for r in rows] == ["-", "-"]  # alpha: the suffix draft found no match, so no draft was tested
    assert "acceptance by draft position - -" in out and "Theorem 3.8 with alpha nan" not in out
    assert "(K per round: median 0, 0..0: the draft proposed nothing in any round, so each was one plain target " \
           "step: it proposes only after an earlier copy of the text's last 6+ tokens (--suffix_min_match)" in out


def test_k_per_round_says_why_only_when_no_round_drafted():
    assert sample.k_per_round(4, 1, 6, SuffixDraft(5)) == "K per round: median 4, 1..6"
    assert sample.k_per_round(0, 0, 8, SuffixDraft(5), [0, 0, 0, 8, 6]) == (
        "K per round: median 0, 0..8; 2 of 5 rounds drafted, median K 8 there, the others were plain steps (K = 0)")
    assert "proposed nothing in any round" in sample.k_per_round(0, 0, 0, SuffixDraft(5))
    assert "no round had room for a draft" in sample.k_per_round(0, 0, 0, object())  # a draft that always proposes


SUITE = ["--suite", "--prompts", "1", "--repeats", "2", "--max_new_tokens", "12", "--settings", "t1.0",
         "--threads", "1"]


def test_every_suite_row_of_a_lossy_verifier_is_labelled_lossy(capsys):
    rows = bench.main(SUITE + ["--draft", "ngram", "--verify", "lenient"])
    out = capsys.readouterr().out
    assert {r["draft"] for r in rows} == {"ngram (LOSSY)"}
    category_rows = [r for r in table_rows(out) if len(r) > 7]  # the overall table, one row per setting, has 7
    assert [r[2] for r in category_rows] == ["ngram (LOSSY)"] * len(suite.SUITE)
    assert [r[1] for r in table_rows(out) if len(r) == 7] == ["ngram (LOSSY)"]  # its overall row too
    assert "K = 4, lenient (LOSSY);" in out


def test_the_suite_prints_dash_where_no_draft_was_tested_at_a_position(capsys):
    rows = bench.main(SUITE + ["--draft", "suffix"])
    out = capsys.readouterr().out
    assert any(a != a for r in rows for a in r["by_position"])  # the case is there: prose has no earlier match
    cells = table_rows(out)
    assert all("nan" not in c for r in cells for c in r), out
    assert any(r[8] == "- - -" for r in cells)  # a1 a2 a3


def test_every_tree_row_of_a_lossy_tree_verifier_is_labelled_lossy(monkeypatch, capsys):
    monkeypatch.setitem(speculative.ROUNDS, "tree", dataclasses.replace(speculative.ROUNDS["tree"], lossless=False))
    bench.main(SMALL + ["--draft", "checkpoints/draft.pt", "--tree_shapes", "1", "2", "--k", "2", "--children", "top",
                        "--repeats", "1"])
    assert [r[1] for r in table_rows(capsys.readouterr().out)] == ["checkpoints/draft.pt (LOSSY)"] * 2


def test_the_batch_table_says_its_tok_s_counts_every_row(capsys):
    bench.main(SMALL + ["--draft", "checkpoints/draft.pt", "--batch", "2", "--k", "2", "--prompt_len", "8",
                        "--repeats", "1"])
    assert "tok/s: all B rows' new tokens per second, together" in capsys.readouterr().out


def test_the_readme_row_has_the_results_tables_columns():
    """bench.py prints the README's 'Results at a glance' row itself, so the table is regenerated, not copied."""
    auto = dict(setting="t1.0", decoder="fast", plain_tps=616.2, spec_tps=982.4, speedup=1.594)
    best = dict(K=5, speedup=1.68, alpha=0.854, c=0.142, v=1.63, with_v=1.787)
    row = sweep.readme_row(auto, best)
    cells = row.split(": | ", 1)[1].strip(" |").split(" | ")
    assert row.startswith("README row (t1.0, commit ")
    assert cells[1:] == ["float32", "616", "982", "1.59×", "1.68× (K = 5)", "0.854", "0.142", "1.63", "94%"]
    assert cells[0] == common.cpu_name()
    assert "bfloat16" in sweep.readme_row(dict(auto, decoder="fast-bf16"), best)


def test_prompt_is_refused_for_a_target_that_times_held_out_text():
    args = bench.get_args(["--prompt", "Say hi."])
    tok = data.Tokenizer({"kind": "char", "chars": "ab"})
    with pytest.raises(SystemExit, match="--prompt is for a chat model"):
        common.bench_prompts(args, tok, 1)
