"""hf.py: our GPT and transformers' GPT2LMHeadModel map onto each other with the same logits (no downloads)."""

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="CI installs requirements-hf.txt; users may skip it")

from hf import from_hf, load_gpt2, max_logit_difference, to_hf  # noqa: E402
from tests.conftest import random_gpt  # noqa: E402


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
    common = ["--corpus", str(corpus), "--data_dir", str(tmp_path / "data")]
    train_draft.main(common + ["--out_dir", str(tmp_path)] + tiny)
    bench.main(common + ["--target", str(tmp_path / "target.pt"), "--draft", str(tmp_path / "draft.pt"), "--k", "2",
                         "--settings", "t0,t1.0", "--prompts", "1", "--prompt_len", "8", "--max_new_tokens", "8",
                         "--repeats", "1", "--hf"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| t0 | 2 |")]
    assert len(rows) == 2 and rows[1].rstrip().endswith("| yes |"), rows
