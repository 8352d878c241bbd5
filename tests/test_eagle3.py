"""drafts/eagle3.py: what is particular to the EAGLE-3-style head (tests/test_drafts.py enumerates its fresh() through
the round and chi-squares it). The target's forwards keep the three blocks' outputs, the fast decoder's equal to
model.py's; the head starts as EAGLE-1 would (its fc passes the high block through), so the wiring of the fused
features is checked against EAGLE-1 itself; training unrolled on a tiny corpus; bad input."""

import pytest
import torch

import drafts  # noqa: F401
import train_draft
from drafts.eagle import EagleDraft
from drafts.eagle3 import Eagle3Draft, three_layers
from engine.fast import FastGPT
from speculative import autoregressive_generate, speculative_generate
from tests.conftest import random_gpt


def test_the_three_blocks_are_low_middle_and_high():
    assert three_layers(6) == (0, 2, 5) and three_layers(1) == (0, 0, 0) and three_layers(12) == (0, 5, 11)


@pytest.mark.parametrize("fast", [False, True])
def test_a_forward_keeps_the_outputs_of_the_blocks_the_draft_reads(fast):
    target = random_gpt(0, vocab_size=11, block_size=16, n_layer=4)
    Eagle3Draft(target)  # sets target.keep_layers
    assert target.keep_layers == (0, 1, 3)
    idx = torch.tensor([[1, 2, 3, 4, 5]])
    model = FastGPT(target) if fast else target
    model.reset_cache()
    model(idx, use_cache=True)
    # the naive path: the blocks one by one, no cache
    tr = target.transformer
    x, want = tr.wte(idx) + tr.wpe(torch.arange(5)), []
    for i, block in enumerate(tr.h):
        x = block(x)
        if i in (0, 1, 3):
            want.append(x)
    got = target.features.layers
    assert len(got) == 3 and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))


def test_at_the_start_it_drafts_what_eagle_1_with_the_same_weights_drafts():
    """reduce starts as [0, 0, I]: the high block, which is the final feature, passed through. A head that fused the
    blocks in another order, or read another block as the high one, would draft otherwise."""
    target = random_gpt(1, vocab_size=11, block_size=32, n_layer=3)
    torch.manual_seed(0)
    e3 = Eagle3Draft(target)
    with torch.no_grad():
        e3.reduce.weight[:, :2 * 16] = 0.0  # only the pass-through of the high block is left
    e1 = EagleDraft(target)
    e1.load_state_dict({k: v for k, v in e3.state_dict().items() if not k.startswith("reduce.")})
    idx = torch.tensor([[1, 2, 3, 4, 5, 6]])
    # greedy: the drafts are the argmax of q, so equal rounds mean the same drafts; a sampled comparison would hang
    # on float rounding (the zeroed blocks still add 0 * x), which moves a draw where the uniform lands on a boundary
    outs = [speculative_generate(target, d, idx, 20, k=3, temperature=0) for d in (e1, e3)]
    assert outs[0][0].tolist() == outs[1][0].tolist() and outs[0][1].rounds == outs[1][1].rounds
    assert any(kept for _, _, kept in outs[0][1].rounds)  # some drafts kept: the rounds say what was drafted
    plain, _ = autoregressive_generate(target, idx, 20, temperature=0)
    assert speculative_generate(target, e3, idx, 20, k=3, temperature=0)[0].tolist() == plain.tolist()


def test_training_eagle3_unrolled_on_a_tiny_corpus_from_an_eagle_head(tmp_path, capsys):
    from drafts import heads
    from tests.conftest import tiny_training
    common = tiny_training(tmp_path)
    target_path = str(tmp_path / "target.pt")
    train_draft.main(["--head", "eagle", "--target", target_path, "--max_iters", "2", "--eval_interval", "2",
                      "--head_pool", "8", *common])
    train_draft.main(["--head", "eagle3", "--init", str(tmp_path / "eagle.pt"), "--unroll", "2", "--target",
                      target_path, "--max_iters", "4", "--eval_interval", "2", "--head_pool", "8", *common])
    out = capsys.readouterr().out
    assert "new: reduce.weight, reduce.bias" in out
    target, _ = train_draft.load_checkpoint(target_path)
    head = heads.load(str(tmp_path / "eagle3.pt"), target)
    assert isinstance(head, Eagle3Draft) and len(head.meta["val_alpha"]) == 2  # one per unrolled step
    assert speculative_generate(target, head, torch.tensor([[1, 2]]), 10, k=3)[0].size(1) == 12


def test_bad_input_is_one_line(capsys):
    for argv, words in [(["--head", "eagle", "--unroll", "2"], "--unroll takes an int >= 1, with --head eagle3"),
                        (["--head", "eagle3", "--unroll", "0"], "--unroll takes an int >= 1")]:
        with pytest.raises(SystemExit):
            train_draft.get_args(argv)
        assert words in capsys.readouterr().err
    target = random_gpt(0, vocab_size=11, block_size=16, n_layer=2)
    head = Eagle3Draft(target)
    target.keep_layers = ()  # something reset it
    with pytest.raises(ValueError, match="kept no outputs of blocks"):
        speculative_generate(target, head, torch.tensor([[1, 2]]), 5, k=2)


def test_the_suite_leaves_out_a_registered_draft_whose_weights_are_not_here(tmp_path, monkeypatch, capsys):
    import dataclasses

    import bench
    import speculative
    entry = speculative.DRAFTS["eagle3"]
    monkeypatch.setitem(speculative.DRAFTS, "eagle3", dataclasses.replace(entry, weights=str(tmp_path / "none.pt")))
    args = bench.get_args(["--suite"])
    assert "eagle3" not in args.draft.split(",") and "eagle" in args.draft.split(",")
    assert "--suite leaves out eagle3: no trained weights here" in capsys.readouterr().out
    monkeypatch.setitem(speculative.DRAFTS, "eagle3", dataclasses.replace(entry, weights=__file__))  # present
    assert "eagle3" in bench.get_args(["--suite"]).draft.split(",")


def test_a_head_checkpoint_given_as_a_path_reads_the_target(capsys):
    import sample
    from drafts import heads
    assert heads.is_head("checkpoints/eagle3.pt") and not heads.is_head("checkpoints/draft.pt")
    assert not heads.is_head("no/such.pt")
    sample.main(["--draft", "checkpoints/eagle3.pt", "--num_samples", "1", "--max_new_tokens", "12", "--k", "3",
                 "--threads", "1"])
    assert "draft checkpoints/eagle3.pt (2.51M)" in capsys.readouterr().out
