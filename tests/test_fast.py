"""engine/fast.py: FastGPT gives the readable model's logits (cached = uncached), and the samplers give the same tokens."""

import pytest
import torch

from engine.fast import FastGPT, with_decoder
from engine.llama import FastLlama
from model import GPT, GPTConfig
from speculative import autoregressive_generate, sampling_probs, speculative_generate
from tests.conftest import check_cache_against_full_forwards, check_tree_against_full_forwards, random_gpt
from tests.test_llama import random_llama


@pytest.mark.parametrize("seed", range(4))
def test_fast_cached_logits_equal_the_readable_models_uncached_ones(seed):
    model = random_gpt(seed, vocab_size=11, block_size=24, n_layer=3, n_head=2, n_embd=16, sharpness=1.0)
    check_cache_against_full_forwards(FastGPT(model), model, seed)  # model.py's full forward: the naive path


@pytest.mark.parametrize("seed", range(3))
def test_fast_tree_attention_logits_equal_each_paths_full_forward(seed):
    model = random_gpt(seed, vocab_size=11, block_size=24, n_layer=3, n_head=2, n_embd=16, sharpness=1.0)
    check_tree_against_full_forwards(FastGPT(model), model, seed)


@pytest.mark.parametrize("k", [1, 3, "auto"])
def test_fast_path_gives_the_same_greedy_tokens(k):
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    idx = torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(target, idx, 50, temperature=0)  # the readable path; slides the window
    assert torch.equal(autoregressive_generate(FastGPT(target), idx, 50, temperature=0)[0], plain)
    assert torch.equal(speculative_generate(FastGPT(target), FastGPT(draft), idx, 50, k=k, temperature=0)[0], plain)


def test_fast_path_gives_the_same_sampled_tokens_for_a_seed():
    target, draft = random_gpt(0, vocab_size=11, block_size=16), random_gpt(1, vocab_size=11, n_layer=1, n_embd=8)
    idx = torch.tensor([[1, 2]])
    run = lambda t, d: speculative_generate(t, d, idx, 40, k=3, generator=torch.Generator().manual_seed(3))[0]
    assert torch.equal(run(target, draft), run(FastGPT(target), FastGPT(draft)))


@torch.no_grad()
def test_bfloat16_is_close_and_speculative_matches_its_own_plain_greedy():
    target = random_gpt(0, vocab_size=11, block_size=16, sharpness=3.0)
    draft = random_gpt(1, vocab_size=11, block_size=12, n_layer=1, n_head=1, n_embd=8, sharpness=3.0)
    bf16 = FastGPT(target, dtype=torch.bfloat16)
    x = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    logits, _ = bf16(x, use_cache=True)
    assert logits.dtype == torch.float32 and (logits - target(x)[0]).abs().max().item() < 0.1 * target(x)[0].abs().max()
    idx = x[:, :5]
    plain, _ = autoregressive_generate(bf16, idx, 40, temperature=0)
    assert torch.equal(speculative_generate(FastGPT(target, dtype=torch.bfloat16), FastGPT(draft), idx, 40, k=4,
                                            temperature=0)[0], plain)


@torch.no_grad()
def test_fast_bf16_on_a_llama_runs_engine_llamas_bfloat16_format():
    """fast-bf16 on a Llama (a GGUF target): engine/llama.py's FastLlama in bfloat16, its cache in bfloat16 too, its
    probabilities in float32; the float32 model and its draft are left as they are (tests/test_fast_llama.py
    checks the format itself)."""
    target, draft = random_llama(0, block_size=16), random_llama(1, block_size=12, n_layer=1)
    bf16, same_draft = with_decoder("fast-bf16", target, draft)
    assert same_draft is draft and target.lm_head.weight.dtype == torch.float32
    assert isinstance(bf16, FastLlama) and bf16.format == "bfloat16" and bf16.about == "Llama, then cast to bfloat16"
    assert isinstance(with_decoder("fast", target)[0], FastLlama) and with_decoder("eager", target)[0] is target
    idx = torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(bf16, idx, 40, temperature=0)  # 40 new tokens: the window slides
    for k in (1, 3, "auto"):
        assert torch.equal(speculative_generate(bf16, draft, idx, 40, k=k, temperature=0)[0], plain), k


def test_fast_path_errors_say_what_to_do():
    nobias = GPT(GPTConfig(block_size=8, vocab_size=5, n_layer=1, n_head=1, n_embd=8, bias=False))
    with pytest.raises(ValueError, match="biases"):
        FastGPT(nobias)
    fast = FastGPT(random_gpt(0, block_size=4))
    fast(torch.tensor([[1, 2, 3]]), use_cache=True)
    with pytest.raises(AssertionError, match="block_size"):
        fast(torch.tensor([[1, 2]]), use_cache=True)
    with pytest.raises(AssertionError, match="cache_len"):
        fast.crop(9)
