"""engine/hf.py: our GPT and transformers' GPT2LMHeadModel map onto each other with the same logits (no downloads)."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="CI installs requirements-hf.txt; users may skip it")

from engine.hf import from_hf, load_gpt2, max_logit_difference, to_hf  # noqa: E402
from tests.conftest import random_gpt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the scripts run from the repo root


def random_hf_gpt2(seed):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=37, n_positions=32, n_embd=24, n_layer=3, n_head=4,
                                     bos_token_id=None, eos_token_id=None)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # biases and norms are zero/one at init: randomize them so the mapping is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_export_to_hf_gives_the_same_logits(seed):
    ours = random_gpt(seed, vocab_size=37, block_size=32, n_layer=3, n_head=4, n_embd=24, sharpness=1.0)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, 37, (2, 32), generator=torch.Generator().manual_seed(seed))
    assert max_logit_difference(ours, to_hf(ours), idx) <= 1e-4


@pytest.mark.parametrize("seed", [0, 1])
def test_import_from_hf_gives_the_same_logits_and_round_trips(seed):
    hf_model = random_hf_gpt2(seed)
    ours = from_hf(hf_model)
    idx = torch.randint(0, 37, (2, 32), generator=torch.Generator().manual_seed(seed))
    assert max_logit_difference(ours, hf_model, idx) <= 1e-4
    back = to_hf(ours)
    assert all(torch.equal(back.state_dict()[k], v) for k, v in hf_model.state_dict().items())


def test_unknown_pretrained_name_is_refused():
    with pytest.raises(SystemExit, match="choose one of"):
        load_gpt2("gpt3")


def test_bench_hf_comparison_runs_and_greedy_outputs_agree(tmp_path, capsys):
    """bench.py --hf on a tiny exported pair: HF's assisted generation and ours give the same greedy text."""
    import bench
    import train_draft
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 30)
    tiny = ["--n_layer", "1", "--n_head", "1", "--n_embd", "16", "--block_size", "32", "--batch_size", "4",
            "--eval_iters", "1", "--eval_interval", "5", "--max_iters", "5"]
    train_draft.main(["--corpus", str(corpus), "--data_dir", str(tmp_path / "data"), "--out_dir", str(tmp_path)] + tiny)
    bench.main(["--corpus", str(corpus), "--target", str(tmp_path / "target.pt"), "--draft", str(tmp_path / "draft.pt"), "--k", "2",
                         "--settings", "t0,t1.0", "--prompts", "1", "--prompt_len", "8", "--max_new_tokens", "8",
                         "--repeats", "1", "--hf"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| t0 | 2 |")]
    assert len(rows) == 2 and rows[1].rstrip().endswith("| yes |"), rows


# ---- pretrained GPT-2 (--init_from) without the network: a fake Hugging Face cache holding tiny models --------

def gpt2_style_tokenizer(merges=(("Ġ", "t"), ("h", "e"))):
    """vocab.json and merges.txt in GPT-2's format: the 256 bytes (as GPT-2's printable stand-ins), the merges,
    then <|endoftext|>. -> (vocab dict, merges text)"""
    order = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    stand_in = {b: chr(b) for b in order}
    for n, b in enumerate(b for b in range(256) if b not in stand_in):  # space -> "Ġ", newline -> "Ċ", ...
        order.append(b)
        stand_in[b] = chr(256 + n)
    vocab = {stand_in[b]: i for i, b in enumerate(order)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)


def fake_hub(tmp_path):
    """A Hugging Face cache in tmp_path with random tiny `gpt2` (1 layer) and `gpt2-medium` (2 layers) and the
    tokenizer files; -> the environment that makes a subprocess use it, offline."""
    vocab, merges = gpt2_style_tokenizer()
    for seed, name in enumerate(("gpt2", "gpt2-medium")):
        torch.manual_seed(seed)
        config = transformers.GPT2Config(vocab_size=len(vocab), n_positions=256, n_embd=16, n_layer=seed + 1,
                                         n_head=2, bos_token_id=None, eos_token_id=None)
        snapshot = tmp_path / "hub" / f"models--{name}" / "snapshots" / ("0" * 40)
        transformers.GPT2LMHeadModel(config).save_pretrained(snapshot)
        (snapshot / "vocab.json").write_text(json.dumps(vocab))
        (snapshot / "merges.txt").write_text(merges)
        (tmp_path / "hub" / f"models--{name}" / "refs").mkdir()
        (tmp_path / "hub" / f"models--{name}" / "refs" / "main").write_text("0" * 40)
    return dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")


def run(args, env, timeout=300):
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_pretrained_gpt2_loads_from_the_cache_offline_in_sample_and_bench(tmp_path):
    env = fake_hub(tmp_path)
    # the tokenizer comes from GPT-2's files in the cache: bytes keep GPT-2's ids (t 83, space 220, newline
    # 198) and the merge "h e" gives 257 twice: "t|he| |he|n|\n"
    check = ("from data import Tokenizer; t = Tokenizer({'kind': 'bpe', 'encoding': 'gpt2', 'ids': list(range(259))}); "
             "ids = t.encode('the hen\\n'); print(ids, repr(t.decode(ids)))")
    out = run(["-c", check], env)
    assert out.returncode == 0 and out.stdout.strip() == "[83, 257, 220, 257, 77, 198] 'the hen\\n'", out.stdout + out.stderr
    out = run(["sample.py", "--init_from", "gpt2-medium", "--num_samples", "1", "--max_new_tokens", "12",
               "--start", "To be"], env)
    assert out.returncode == 0, out.stderr
    assert "speculative sampling, K=auto (K per round: median " in out.stdout
    corpus = tmp_path / "c.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 30)
    out = run(["bench.py", "--init_from", "gpt2-medium", "--corpus", str(corpus), "--k", "2", "--settings", "t1.0",
               "--prompts", "1", "--prompt_len", "8", "--max_new_tokens", "8", "--repeats", "1"], env)
    assert out.returncode == 0, out.stderr
    assert "target gpt2-medium" in out.stdout and "draft gpt2" in out.stdout and "| t1.0 | 2 |" in out.stdout


@pytest.mark.parametrize("offline_env", [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}],
                         ids=["HF_HUB_OFFLINE", "hub-unreachable"])
def test_pretrained_gpt2_not_cached_and_offline_fails_with_a_clear_message(tmp_path, offline_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_CACHE=str(tmp_path / "empty"), **offline_env)
    tic = time.time()
    out = run(["bench.py", "--init_from", "gpt2"], env, timeout=120)  # a hang fails here, by the timeout
    assert out.returncode != 0 and "not in the Hugging Face cache and the hub is not reachable" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    print(f"failed cleanly in {time.time() - tic:.1f} s")
