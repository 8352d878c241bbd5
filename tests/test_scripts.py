"""train_draft.py and sample.py end to end, on a tiny corpus file and tiny models (seconds on a CPU)."""

import importlib
import os
import re
import subprocess
import sys

import pytest
import torch

import sample
import train_draft
from model import SHIPPED, load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = ["--n_layer", "1", "--n_head", "1", "--n_embd", "16", "--block_size", "16", "--batch_size", "4",
        "--eval_iters", "2", "--eval_interval", "5"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A trained (for 10 steps) target/draft pair on a small text file, and that file."""
    tmp = tmp_path_factory.mktemp("pair")
    corpus = tmp / "corpus.txt"
    corpus.write_text("ROMEO:\nBut soft, what light through yonder window breaks?\n\n" * 40)
    train_draft.main(["--corpus", str(corpus), "--out_dir", str(tmp), "--max_iters", "10",
                      "--data_dir", str(tmp / "data"), *TINY])
    return tmp, corpus


def test_training_writes_loadable_checkpoints_with_tokenizer_and_resume_state(pair):
    tmp, _ = pair
    for role in ("target", "draft"):
        model, meta = load_checkpoint(str(tmp / f"{role}.pt"))
        assert meta["role"] == role and meta["iter"] == 10 and meta["tokenizer"]["kind"] == "char"
        assert (tmp / f"{role}.pt.resume").exists()


def test_resume_after_a_kill_gives_the_same_model_as_an_uninterrupted_run(pair, tmp_path, monkeypatch):
    tmp, corpus = pair
    args = ["--corpus", str(corpus), "--role", "target", "--max_iters", "10", "--data_dir", str(tmp / "data"), *TINY]
    train_draft.main(args + ["--out_dir", str(tmp_path / "straight")])
    lr_at = train_draft.lr_at

    def killed_at_step_7(it, h):  # dies after the checkpoint at step 5, in the middle of the next interval
        if it == 7:
            raise KeyboardInterrupt
        return lr_at(it, h)

    monkeypatch.setattr(train_draft, "lr_at", killed_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        train_draft.main(args + ["--out_dir", str(tmp_path / "killed")])
    assert load_checkpoint(str(tmp_path / "killed" / "target.pt"))[1]["iter"] == 5  # the last good one loads
    monkeypatch.setattr(train_draft, "lr_at", lr_at)
    train_draft.main(args + ["--out_dir", str(tmp_path / "killed"), "--resume"])
    a = load_checkpoint(str(tmp_path / "straight" / "target.pt"))[0].state_dict()
    b = load_checkpoint(str(tmp_path / "killed" / "target.pt"))[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(SystemExit, match="same flags"):  # a different schedule is refused, not mixed in
        train_draft.main(args + ["--out_dir", str(tmp_path / "killed"), "--resume", "--lr", "0.5"])


def test_a_pair_with_different_tokenizers_is_refused(pair, tmp_path):
    tmp, _ = pair
    other = tmp_path / "other.txt"
    other.write_text("completely different characters: XYZ 123\n" * 40)
    out = tmp_path / "o"
    out.mkdir()
    (out / "target.pt").write_bytes((tmp / "target.pt").read_bytes())
    with pytest.raises(SystemExit, match="another tokenizer"):
        train_draft.main(["--corpus", str(other), "--out_dir", str(out), "--role", "draft", "--max_iters", "5",
                          "--data_dir", str(tmp_path / "data"), *TINY])


def test_training_never_overwrites_the_shipped_pair_unless_asked(pair, monkeypatch, capsys):
    """The default is a folder of its own (runs/<preset>/); --out_dir checkpoints is refused, with what to do."""
    assert train_draft.get_args([]).out_dir == os.path.join("runs", "cpu-quick")
    assert train_draft.get_args(["--preset", "reference"]).out_dir == os.path.join("runs", "reference")
    monkeypatch.chdir(os.path.dirname(os.path.abspath(train_draft.__file__)))
    for argv in (["--out_dir", "checkpoints"], ["--out_dir", "checkpoints/", "--role", "draft"]):
        with pytest.raises(SystemExit):
            train_draft.get_args(argv)
        assert "would overwrite the shipped checkpoints" in capsys.readouterr().err
    assert train_draft.get_args(["--out_dir", "checkpoints", "--overwrite_shipped"]).out_dir == "checkpoints"


def test_ctrl_c_in_sample_keeps_the_text_and_prints_the_statistics_so_far(pair, capsys, monkeypatch):
    tmp, _ = pair
    rounds = []

    def interrupted(*args, stream, **kwargs):  # Ctrl-C in the middle of the third round's stream
        def stream_then_ctrl_c(ids):
            stream(ids)
            rounds.append(ids)
            if len(rounds) == 3:
                raise KeyboardInterrupt
        return sample_generate(*args, stream=stream_then_ctrl_c, **kwargs)

    sample_generate = sample.speculative_generate
    monkeypatch.setattr(sample, "speculative_generate", interrupted)
    try:
        with pytest.raises(SystemExit) as exit:
            sample.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--k", "2",
                         "--num_samples", "2", "--max_new_tokens", "40"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped sample.main: the user gets a traceback instead of the statistics")
    out = capsys.readouterr().out
    n = sum(len(ids) for ids in rounds)
    assert exit.value.code == 130 and "sample 2/2" not in out
    assert f"Ctrl-C after {n} new tokens of sample 1" in out
    assert f"speculative sampling, K=2: {n} tokens in " in out and f"{n / 3:.2f} tokens per target call" in out


def test_sample_streams_text_and_prints_statistics(pair, capsys):
    tmp, _ = pair
    sample.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--start", "ROMEO:",
                 "--num_samples", "2", "--max_new_tokens", "20"])
    out = capsys.readouterr().out
    assert out.count("ROMEO:") >= 2 and "drafts kept" in out and "tokens per target call" in out
    sample.main(["--target", str(tmp / "target.pt"), "--draft", "none", "--max_new_tokens", "5", "--num_samples", "1"])
    assert "plain sampling: 5 tokens" in capsys.readouterr().out
    sample.main(["--target", str(tmp / "target.pt"), "--draft", "ngram", "--ngram_n", "2", "--max_new_tokens", "20",
                 "--num_samples", "1", "--start", "ROMEO:"])
    out = capsys.readouterr().out
    assert "speculative sampling, K=auto (K per round: median " in out and "): 20 tokens in" in out


@pytest.mark.parametrize("extra", [[], ["--draft", "none"], ["--batch", "2", "--k", "2"]])
def test_sample_stops_after_the_stop_text(pair, capsys, extra):
    tmp, _ = pair
    argv = ["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--start", "ROMEO:",
            "--num_samples", "2", "--max_new_tokens", "200", "--stop", "o", "--stop", "\\n\\n", *extra]
    sample.main(argv)
    out = capsys.readouterr().out
    texts = re.findall(r"---------- sample \d/2\n(.*?)(?=\n----------)", out, re.S)  # each: prompt + new text
    assert len(texts) == 2 and all(text.startswith("ROMEO:") for text in texts)
    for text in texts:  # each sample ends right after its first "o" or blank line, or runs to 200 tokens
        new = text[len("ROMEO:"):]
        cut = min([i + len(s) for s in ("o", "\n\n") if (i := new.find(s)) >= 0], default=200)
        assert len(new) == cut, (cut, new[:80])
    with pytest.raises(SystemExit, match="--stop is empty"):
        sample.main(argv[:-len(extra) or None] + ["--stop", ""])


def test_sample_runs_every_verifier_and_labels_the_lossy_ones(pair, capsys):
    tmp, _ = pair
    base = ["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--num_samples", "1",
            "--max_new_tokens", "12", "--k", "3"]
    sample.main(base + ["--verify", "multidraft", "--n_drafts", "3"])
    assert "speculative sampling, K=3, verify multidraft: 12 tokens in" in capsys.readouterr().out
    sample.main(base + ["--verify", "lenient", "--lenience", "0.8"])
    assert "verify lenient (LOSSY: not the target's distribution): 12 tokens" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sample.main(base + ["--verify", "lenient", "--lenience", "2"])
    assert "lenience must be in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sample.main(base[:-2] + ["--verify", "multidraft"])  # --k auto, the default
    assert "--verify multidraft needs an int --k" in capsys.readouterr().err


@pytest.mark.parametrize("k", ["fast", "0", "-1", "2.5"])
def test_bad_k_is_a_usage_error(pair, k, capsys):
    tmp, _ = pair
    with pytest.raises(SystemExit):
        sample.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--k", k])
    assert "expected an int >= 1 or 'auto'" in capsys.readouterr().err
    import bench
    with pytest.raises(SystemExit):
        bench.get_args(["--k", f"4,{k}"])
    assert "--k takes comma-separated ints >= 1 or auto" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.get_args(["--decoder", "fast,turbo"])
    assert "--decoder: choose from" in capsys.readouterr().err


def test_sample_defaults_to_auto_k_and_reports_the_ks_it_chose(pair, capsys):
    tmp, _ = pair
    sample.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--num_samples", "2",
                 "--max_new_tokens", "30"])
    assert "speculative sampling, K=auto (K per round: median " in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--start", "ROMEO~"], "not in the model's vocabulary"),
    (["--draft", "missing.pt"], "no checkpoint"),
    (["--start", "FILE:missing.txt"], "no such file"),
])
def test_sample_errors_are_clear(pair, argv, message):
    tmp, _ = pair
    base = ["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt")]
    with pytest.raises(SystemExit, match=message):
        sample.main(base + argv)


BAD_CHECKPOINTS = {  # kind -> (bytes of the file, the words that say what it is)
    "truncated": (lambda role: open(SHIPPED[role], "rb").read()[:1000], "is cut short"),  # a copy cut short
    "text": (lambda role: b"text\n", "is not a checkpoint (a torch.save file): it is a text file"),  # pickle's `t`
    "empty": (lambda role: b"", "is empty (0 bytes)"),
    "random bytes": (lambda role: bytes(range(256)) * 4, "neither a zip archive nor a pickle"),
}


@pytest.mark.parametrize("role", ["target", "draft"])
@pytest.mark.parametrize("kind", BAD_CHECKPOINTS)
def test_an_unreadable_checkpoint_is_one_line_naming_the_file_and_its_role(tmp_path, role, kind):
    content, words = BAD_CHECKPOINTS[kind]
    path = tmp_path / "x.pt"
    path.write_bytes(content(role))
    with pytest.raises(SystemExit) as exit:
        sample.main([f"--{role}", str(path), "--max_new_tokens", "5"])
    message = str(exit.value.code)
    assert message.startswith(f"{role}: {str(path)!r} ") and words in message, message
    assert "\n" not in message and "weights_only" not in message


@pytest.mark.parametrize("kind", ["text", "random bytes"])
def test_bench_says_the_same_one_line_for_a_draft_that_is_not_a_checkpoint(tmp_path, kind):
    import bench
    content, words = BAD_CHECKPOINTS[kind]
    path = tmp_path / "x.pt"
    path.write_bytes(content("draft"))
    with pytest.raises(SystemExit) as exit:
        bench.main(["--draft", str(path), "--k", "2", "--prompts", "1", "--max_new_tokens", "4", "--repeats", "1"])
    message = str(exit.value.code)
    assert message.startswith(f"draft: {str(path)!r} ") and words in message and "\n" not in message, message


def test_a_text_file_as_draft_exits_with_one_line_from_the_command_line(tmp_path):
    path = tmp_path / "x.pt"
    path.write_text("text\n")
    proc = subprocess.run([sys.executable, "sample.py", "--draft", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"draft: {str(path)!r} is not a checkpoint (a torch.save file)"), proc.stderr


def test_bench_prints_a_row_per_setting_and_k(pair, capsys, tmp_path):
    import bench
    tmp, corpus = pair
    bench.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--corpus", str(corpus),
                "--k", "1,3,auto", "--settings", "t0,t1.0", "--decoder", "eager,fast", "--prompts", "1",
                "--prompt_len", "8", "--max_new_tokens", "8", "--repeats", "1", "--json", str(tmp_path / "b.json"),
                "--profile"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| t")]
    assert [[r.split(" | ")[i] for i in (0, 1, 3)] for r in rows] == [
        [f"| {s}", k, dec] for s in ("t0", "t1.0") for dec in ("eager", "fast") for k in ("1", "3", "auto")]
    assert "t1.0, draft tokenwise, fast: auto " in out and "best fixed K = " in out
    assert "2 thread(s): target 1 token" in out and "cProfile of speculative_generate, K=1, t0" in out
    assert (tmp_path / "b.json").exists()


@pytest.mark.parametrize("script", ["sample", "bench"])
def test_an_ngram_length_below_one_is_refused_clearly(script, capsys):
    with pytest.raises(SystemExit):
        importlib.import_module(script).get_args(["--draft", "ngram", "--ngram_n", "0"])
    assert "--draft ngram: ngram_n (how many last tokens the n-gram draft matches) must be an int >= 1" in (
        capsys.readouterr().err)


def test_bench_puts_every_draft_and_verifier_in_one_table(pair, capsys):
    import bench
    tmp, corpus = pair
    bench.main(["--target", str(tmp / "target.pt"), "--draft", f"{tmp / 'draft.pt'},ngram",
                "--verify", "tokenwise,block", "--corpus", str(corpus), "--k", "2", "--settings", "t1.0", "--prompts", "1", "--prompt_len", "8",
                "--max_new_tokens", "8", "--repeats", "1"])
    rows = [line.split(" | ")[2] for line in capsys.readouterr().out.splitlines() if line.startswith("| t")]
    assert rows == ["draft tokenwise", "draft block", "ngram3 tokenwise", "ngram3 block"]
    bench.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--verify", "tokenwise,multidraft",
                "--corpus", str(corpus), "--k", "2,auto", "--settings", "t1.0", "--prompts", "1", "--prompt_len", "8",
                "--max_new_tokens", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    rows = [line.split(" | ")[1:3] for line in out.splitlines() if line.startswith("| t")]
    assert rows == [["2", "draft tokenwise"], ["auto", "draft tokenwise"], ["2", "draft multidraft n_drafts=2 replacement=False"]]
    assert "the root kept a draft in" in out
    with pytest.raises(SystemExit):
        bench.main(["--verify", "blok"])


def test_theorem_3_8_prediction_and_alpha_estimate():
    from benchmarks.theory import alpha_from_rounds, predicted
    assert abs(predicted(0.8, 4, 0.1) - (1 - 0.8 ** 5) / (0.2 * 1.4)) < 1e-12  # = 2.4011
    assert predicted(0.0, 4, 0.0) == 1.0 and predicted(1.0, 3, 0.0) == 4.0
    # rounds (t, drafted, kept): 2 kept then a rejection; 3 of 3 kept; 0 kept, rejected -> 5 / (5 + 2)
    assert alpha_from_rounds([(0, 3, 2), (3, 3, 3), (7, 2, 0)]) == 5 / 7


def test_auto_is_compared_with_a_best_k_chosen_on_other_repeats():
    from benchmarks import sweep
    rows = {K: dict(K=K, repeat_tps=tps) for K, tps in [  # repeats 0, 2, 4 measure; 1, 3 choose
        (2, [100, 130, 100, 130, 100]), (4, [120, 110, 120, 110, 120]), ("auto", [118, 0, 119, 0, 121])]}
    K, ratio = sweep.auto_against_held_out_best(rows["auto"], [rows[2], rows[4]])
    assert K == 2 and ratio == pytest.approx(119 / 100)  # K = 2 won its own repeats, not the others


def test_auto_against_the_best_k_repeat_by_repeat_gives_the_middle_half():
    from benchmarks import sweep
    auto, best = dict(repeat_tps=[100, 110, 90, 100, 105]), dict(repeat_tps=[100] * 5)
    q1, q3 = sweep.per_repeat_spread(auto, best)  # ratios 0.9, 1.0, 1.0, 1.05, 1.1: quartiles at ranks 1.5, 4.5
    assert (q1, q3) == (pytest.approx(0.95), pytest.approx(1.075))


def test_bench_says_why_a_pair_does_not_pay():
    from benchmarks import theory
    text = theory.why_it_does_not_pay(0.4, 0.33, 1.1)
    assert "allows at most 0.98x (K = 1)" in text and "under 0.300 target steps" in text and "above 0.430" in text
    # the thresholds are where Theorem 3.8 crosses 1: just past them it pays, just before it does not
    assert max(theory.predicted(0.4, K, 0.299, 1.1) for K in range(1, 17)) > 1.0 > theory.predicted(0.4, 1, 0.301, 1.1)
    assert max(theory.predicted(0.431, K, 0.33, 1.1) for K in range(1, 17)) > 1.0
    assert max(theory.predicted(0.429, K, 0.33, 1.1) for K in range(1, 17)) < 1.0
    assert "no draft pays at this alpha" in theory.why_it_does_not_pay(0.3, 0.9, 1.5)


def test_bench_costs_leave_out_the_prompt_read():
    from benchmarks.common import steady
    assert steady([9.0, 1.0, 2.0]) == 1.5  # the first forward reads the prompt: not a decoding step


def mean_tv(target, draft, ids):  # mean over positions of TV(p, q) = 1 - acceptance at T=1
    with torch.no_grad():
        p, q = target(ids)[0].softmax(-1), draft(ids)[0].softmax(-1)
    return 0.5 * (p - q).abs().sum(-1).mean().item()


def test_tv_distillation_from_an_init_draft_lowers_the_total_variation(pair, tmp_path):
    tmp, corpus = pair
    target, _ = load_checkpoint(str(tmp / "target.pt"))
    before, _ = load_checkpoint(str(tmp / "draft.pt"))
    train_draft.main(["--corpus", str(corpus), "--role", "draft", "--out_dir", str(tmp_path), "--max_iters", "30",
                      "--data_dir", str(tmp / "data"), *TINY, "--lr", "3e-3", "--distill", "1.0",
                      "--distill_loss", "tv", "--init", str(tmp / "draft.pt"), "--target", str(tmp / "target.pt")])
    after, meta = load_checkpoint(str(tmp_path / "draft.pt"))
    assert meta["distill_loss"] == "tv" and meta["init"] == str(tmp / "draft.pt")
    ids = torch.tensor([list(range(16))]) % target.config.vocab_size
    assert mean_tv(target, after, ids) < mean_tv(target, before, ids)


def test_init_from_a_checkpoint_of_another_shape_is_refused(pair, tmp_path):
    tmp, corpus = pair
    with pytest.raises(SystemExit, match="differs from this run"):
        train_draft.main(["--corpus", str(corpus), "--role", "draft", "--out_dir", str(tmp_path), "--max_iters", "2",
                          "--data_dir", str(tmp / "data"), *TINY, "--n_embd", "8", "--init", str(tmp / "draft.pt")])
    with pytest.raises(SystemExit, match="--init"):
        train_draft.main(["--corpus", str(corpus), "--role", "draft", "--out_dir", str(tmp_path), "--max_iters", "2",
                          "--data_dir", str(tmp / "data"), *TINY, "--init", str(tmp_path / "missing.pt")])


def test_sample_stops_with_a_clear_message_on_nan_weights(pair, monkeypatch):
    tmp, _ = pair
    model, meta = load_checkpoint(str(tmp / "target.pt"))
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")  # a token's logit turns NaN; load_checkpoint would refuse the file
    monkeypatch.setattr(sample, "load", lambda path, device, role: (model, meta))
    with pytest.raises(SystemExit, match="stopped after 0 new tokens: .*NaN"):
        sample.main(["--target", str(tmp / "target.pt"), "--draft", "none", "--max_new_tokens", "5", "--num_samples", "1"])


def test_sample_batch_generates_the_samples_together(pair, capsys):
    tmp, _ = pair
    base = ["--target", str(tmp / "target.pt"), "--start", "ROMEO:", "--max_new_tokens", "12", "--batch", "3"]
    sample.main(base + ["--draft", str(tmp / "draft.pt"), "--k", "2"])
    out = capsys.readouterr().out
    assert out.count("ROMEO:") == 3 and "sample 3/3" in out
    assert "speculative sampling, K=2, batch of 3: 36 tokens in" in out and "drafts kept" in out
    assert "tokens per target call (all rows' tokens per batched target forward)" in out  # not one row's
    sample.main(base + ["--draft", "none"])
    assert "plain sampling, batch of 3: 36 tokens in" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sample.main(base + ["--verify", "block"])  # engine/batched.py runs token-wise verification only


@pytest.mark.parametrize("draft", ["draft.pt", "none"])
def test_ctrl_c_with_batch_keeps_every_rows_text_and_the_statistics_so_far(pair, capsys, monkeypatch, draft):
    from engine import batched
    tmp, _ = pair
    streamed = {}  # row -> new ids streamed before the interrupt
    name = "speculative_generate_batch" if draft != "none" else "autoregressive_generate_batch"
    real = getattr(batched, name)

    def interrupted(*args, stream, **kwargs):  # Ctrl-C after the fourth streamed piece
        def stream_then_ctrl_c(b, ids):
            stream(b, ids)
            streamed.setdefault(b, []).extend(ids)
            if sum(len(v) > 0 for v in streamed.values()) == 3 and sum(map(len, streamed.values())) >= 4:
                raise KeyboardInterrupt
        return real(*args, stream=stream_then_ctrl_c, **kwargs)

    monkeypatch.setattr(batched, name, interrupted)
    try:
        with pytest.raises(SystemExit) as exit:
            sample.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / draft) if draft != "none" else draft,
                         "--start", "ROMEO:", "--max_new_tokens", "30", "--batch", "3", "--k", "2"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped sample.main with --batch: a traceback instead of the rows and statistics")
    out = capsys.readouterr().out
    n = sum(map(len, streamed.values()))
    assert exit.value.code == 130 and out.count("ROMEO:") == 3 and "sample 3/3" in out
    assert f"Ctrl-C after {n} new tokens in all" in out and f"batch of 3: {n} tokens in " in out


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_temperature_that_is_not_a_finite_number_above_zero_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exit:
        sample.get_args(["--temperature", value])
    assert exit.value.code == 2 and "--temperature must be a number >= 0 (0 is greedy) and finite" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("argv,message", [
    (["--batch", "0"], "--batch takes an int >= 1 (samples generated together), got 0"),
    (["--batch", "2", "--verify", "block"], "--batch runs token-wise verification only"),
])
def test_bad_batch_arguments_say_which_rule_they_break(argv, message, capsys):
    with pytest.raises(SystemExit):
        sample.get_args(argv)
    err = capsys.readouterr().err
    assert message in err and ("token-wise" in err) == ("block" in argv)


def test_bench_batch_prints_a_row_per_b_and_k(pair, capsys, tmp_path):
    import bench
    tmp, corpus = pair
    bench.main(["--target", str(tmp / "target.pt"), "--draft", str(tmp / "draft.pt"), "--corpus", str(corpus),
                "--batch", "1,3", "--k", "2,auto", "--settings", "t1.0", "--prompt_len", "8", "--max_new_tokens", "8",
                "--repeats", "1", "--json", str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    rows = [line.split(" | ")[:3] for line in out.splitlines() if line.startswith("| t")]
    assert [(b, k.split()[0]) for _, b, k in rows] == [("1", "2"), ("1", "auto"), ("3", "2"), ("3", "auto")]
    assert "t1.0, B=1, K=2: batched / speculative_generate = " in out
    assert "batch_rows" in (tmp_path / "b.json").read_text()
    with pytest.raises(SystemExit):
        bench.main(["--batch", "0,2"])


def test_early_stopping_keeps_the_best_checkpoint(pair, tmp_path, capsys):
    """--patience 2: training stops after two evaluations without a better validation loss, and the file holds
    the best model seen (a learning rate far too high makes the loss climb after its first drop)."""
    _, corpus = pair
    out = tmp_path / "es"
    train_draft.main(["--corpus", str(corpus), "--out_dir", str(out), "--role", "draft", "--max_iters", "60",
                      "--data_dir", str(tmp_path / "data"), *TINY, "--eval_interval", "2", "--patience", "2",
                      "--lr", "0.3", "--min_lr", "0.3", "--warmup_iters", "1"])
    assert "early stop: no better validation loss in 2 evaluations" in capsys.readouterr().out
    _, meta = load_checkpoint(str(out / "draft.pt"))
    assert meta["iter"] < 60 and meta["hparams"]["patience"] == 2, meta["iter"]
    state = torch.load(str(out / "draft.pt.resume"), weights_only=True)
    assert state["iter"] == meta["iter"]  # nothing after the best was saved


def test_a_fixed_k_that_never_drafted_says_why(pair, capsys):
    """--draft suffix --k 4 on a text with no earlier copy of its last tokens: every round is K = 0. The line says
    so and why, instead of 'K=4' beside 1.00 tokens per target call."""
    tmp, _ = pair
    sample.main(["--target", str(tmp / "target.pt"), "--draft", "suffix", "--k", "4", "--max_new_tokens", "6",
                 "--num_samples", "1", "--start", "ROMEO:", "--suffix_min_match", "50"])
    out = capsys.readouterr().out
    assert "K per round: median 0, 0..0: the draft proposed nothing in any round" in out
    assert "--suffix_min_match" in out
