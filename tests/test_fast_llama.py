"""engine/llama.py: FastLlama in float32 gives the readable Llama's logits (cached = uncached, trees too) and the samplers
the same tokens; each other format stays within a stated distance of the model its weights stand for, and greedy
speculative equals its own greedy plain; the int4 format's blocks are the GGUF file's own, bit for bit."""

import copy

import gguf
import pytest
import torch

import pretrained
from engine.blocks import can_build, layer_rows
from engine.fast import default_decoder, with_decoder
from engine.llama import (FORMATS, Q4_1_BLOCK, FastLlama, padded, q4_1_blocks, q4_1_dequantized, q4_1_from_bytes,
                          q4_1_quantized, q8_0_head)
from speculative import autoregressive_generate, context_start, speculative_generate
from tests.conftest import check_cache_against_full_forwards, check_tree_against_full_forwards, random_gpt
from tests.test_llama import V, random_llama
from tests.test_llama_exact import INSTALLED


def q4_llama(seed=0, block_size=24, n_layer=2):  # a Llama whose rows are whole Q4_1 blocks (no padding)
    return random_llama(seed, block_size=block_size, n_layer=n_layer, n_embd=64, n_hidden=64)


@torch.no_grad()
def dequantized_twin(model):  # -> the float32 Llama whose block matrices ARE model's Q4_1 blocks: the int4 reference
    twin, blocks = copy.deepcopy(model), q4_1_blocks(model)
    blocks.pop("quantized here")
    state = twin.state_dict()
    for name, raw in blocks.items():  # (a row of K weights was padded to whole blocks of 32: the padding cut)
        N, K = state[name].shape
        state[name].copy_(q4_1_dequantized(*q4_1_from_bytes(raw, N, padded(K, Q4_1_BLOCK)))[:, :K])
    return twin


@pytest.mark.parametrize("seed", range(3))
def test_float32_cached_logits_equal_the_readable_llamas_uncached_ones(seed):
    model = random_llama(seed, block_size=24)
    check_cache_against_full_forwards(FastLlama(model), model, seed, vocab_size=V)  # within 1e-5


@pytest.mark.parametrize("seed", range(2))
def test_float32_tree_attention_logits_equal_each_paths_full_forward(seed):
    model = random_llama(seed, block_size=24)
    check_tree_against_full_forwards(FastLlama(model), model, seed, vocab_size=V)


@pytest.mark.parametrize("k", [1, 3, "auto"])
def test_float32_gives_the_readable_models_greedy_and_sampled_tokens(k):
    target, draft = random_llama(0, block_size=16), random_llama(1, block_size=12, n_layer=1)
    idx = torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(target, idx, 40, temperature=0)  # the readable path; the window slides
    assert torch.equal(autoregressive_generate(FastLlama(target), idx, 40, temperature=0)[0], plain)
    assert torch.equal(speculative_generate(FastLlama(target), draft, idx, 40, k=k, temperature=0)[0], plain)
    if k != "auto":  # (auto's K follows the clock: the same seed need not give the same tokens)
        run = lambda t: speculative_generate(t, draft, idx, 30, k=k, generator=torch.Generator().manual_seed(5))[0]
        assert torch.equal(run(FastLlama(target)), run(target))


# the formats this machine runs: all of them where engine/blocks.cpp can be built (tests/test_blocks.py checks that
# it is, and the refusal where it cannot)
RUNS = [f for f in FORMATS if f != "q4_1" or can_build()]

# tolerance on the largest logit difference, as a share of the largest logit: bfloat16 keeps 8 bits of mantissa
# (2^-8 = 0.4% per rounding), and these models' logits pass through 2 blocks of several roundings each
TOLERANCE = {"bfloat16": 0.03, "int8": 0.05, "int4": 0.03, "q4_1": 1e-5}  # q4_1: float32 all through, sums reordered


@torch.no_grad()
def stored_twin(model):  # -> the float32 Llama of model's Q4_1 blocks and Q8_0 head: the q4_1 format's reference
    twin = dequantized_twin(model)
    V, C = model.lm_head.weight.shape
    head = gguf.quants.dequantize(q8_0_head(model), gguf.GGMLQuantizationType.Q8_0)[:, :C]
    twin.lm_head.weight = torch.nn.Parameter(torch.from_numpy(head.copy()))  # untied: the embedding stays as it was
    return twin


@torch.no_grad()
@pytest.mark.parametrize("fmt", [f for f in RUNS if f != "float32"])
def test_each_format_is_close_to_the_model_its_weights_stand_for(fmt):
    model = q4_llama(0)
    # int4: the float model OF its Q4_1 blocks; q4_1: of its blocks and its Q8_0 head, the same model but for rounding
    reference = dequantized_twin(model) if fmt == "int4" else stored_twin(model) if fmt == "q4_1" else model
    fast = FastLlama(model, fmt)
    x = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    want = reference(x)[0]
    fast.reset_cache()
    got, _ = fast(x, use_cache=True)
    assert got.dtype == torch.float32 and fast.cache.k[0].dtype == torch.float32  # attention stays float32
    err = (got - want).abs().max().item()
    assert (0 < err or fmt == "q4_1") and err < TOLERANCE[fmt] * want.abs().max().item(), (fmt, err)  # close
    assert (fast(x)[0] - got).abs().max().item() < TOLERANCE[fmt] * want.abs().max().item()  # uncached: the same model
    if fmt == "int4":  # the twin is the model the blocks stand for: nearer to it than to the unquantized weights
        assert err < (model(x)[0] - want).abs().max().item()


@pytest.mark.parametrize("fmt", [f for f in RUNS if f != "float32"])
def test_greedy_speculative_equals_each_formats_own_greedy_plain(fmt):
    target, draft = q4_llama(0, block_size=16), q4_llama(1, block_size=12, n_layer=1)
    fast, idx = FastLlama(target, fmt), torch.tensor([[3, 1, 4, 1, 5]])
    plain, _ = autoregressive_generate(fast, idx, 30, temperature=0)
    for k in (1, 3):
        assert torch.equal(speculative_generate(fast, draft, idx, 30, k=k, temperature=0)[0], plain), k


@torch.no_grad()
@pytest.mark.parametrize("fmt", [f for f in RUNS if f != "float32"])
def test_a_prompt_is_read_apart_in_one_float32_forward_and_both_samplers_go_on_from_it(fmt, monkeypatch):
    """The weight-only formats prefill: the tokens before x_{t-1} in one batched forward through the float32 weights
    (whose keys and values are the float32 format's own), then the scored rows in the format; once per call and
    per slid window, in plain and speculative sampling alike."""
    target = q4_llama(0, block_size=16)
    fast, twin, idx = FastLlama(target, fmt), FastLlama(target), torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
    fills = []
    real_fill = FastLlama.fill
    monkeypatch.setattr(FastLlama, "fill", lambda self, ids: fills.append(ids[0].tolist()) or real_fill(self, ids))
    fast.reset_cache()
    fast.fill(idx[:, :-1])
    twin.reset_cache()
    twin(idx[:, :-1], use_cache=True)
    for layer in range(target.config.n_layer):  # the prompt's keys and values: float32's, bit for bit
        assert torch.equal(fast.cache.k[layer][:, :, :6], twin.cache.k[layer][:, :, :6])
        assert torch.equal(fast.cache.v[layer][:, :, :6], twin.cache.v[layer][:, :, :6])
    windows = len({context_start(t, 16) for t in range(7, 7 + 20)})  # the call's start, then each slide (W = 16)
    fills.clear()
    _, plain = autoregressive_generate(fast, idx, 20, temperature=0)
    assert fills[0] == idx[0, :-1].tolist() and len(fills) == windows == 3
    assert plain.target_calls == 20  # the fill counts with the forward after it: a call per token, as before
    fills.clear()
    speculative_generate(fast, q4_llama(1, block_size=12, n_layer=1), idx, 20, k=3, temperature=0)
    assert fills[0] == idx[0, :-1].tolist() and len(fills) == windows


def test_the_q4_1_bytes_decode_as_ggml_defines_them():
    w = torch.randn(8, 64)
    raw = q4_1_quantized(w)
    assert raw.shape == (8, 2 * 20)  # two blocks of 20 bytes a row
    q, d, m = q4_1_from_bytes(raw, 8, 64)
    ggml = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1))  # the gguf package's decoder
    assert q.max() <= 15 and torch.equal(q4_1_dequantized(q, d, m), ggml)
    assert (q4_1_dequantized(q, d, m) - w).abs().max() < (w.max() - w.min()) / 15  # at most a step per weight


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="FastLlama runs pretrained/llama.py's Llama"):
        FastLlama(random_gpt(0))
    with pytest.raises(ValueError, match="unknown format"):
        FastLlama(random_llama(0), "int3")
    with pytest.raises(ValueError, match="runs a Llama read from a GGUF file"):
        with_decoder("fast-int4", random_gpt(0))
    with pytest.raises(ValueError, match="decodes; for a loss"):
        FastLlama(random_llama(0))(torch.tensor([[1, 2]]), targets=torch.tensor([[2, 3]]))
    assert default_decoder(random_gpt(0)) == "fast" and default_decoder(random_llama(0)) == "fast"  # no Q4_1 file


# ---- SmolLM2, the real file ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    if not INSTALLED:
        pytest.skip(f"SmolLM2's GGUF file is not installed: {pretrained.PIP}")
    return pretrained.load("smollm2", block_size=128)


@torch.no_grad()
def test_the_int4_blocks_are_the_files_own(smollm2):
    """The file's Q4_1 bytes, decoded here, are exactly the float32 weights the gguf package dequantized: the int4
    format runs the file's model, not a re-quantized copy."""
    model, _ = smollm2
    blocks, state = q4_1_blocks(model), model.state_dict()
    assert blocks.pop("quantized here") is False and len(blocks) == 4 * model.config.n_layer
    for name in ("transformer.h.0.attn.c_attn.weight", "transformer.h.29.mlp.c_proj.weight"):
        w = state[name]
        assert torch.equal(q4_1_dequantized(*q4_1_from_bytes(blocks[name], *w.shape)), w), name


@torch.no_grad()
def test_on_the_real_file_float32_and_q4_1_are_the_readable_model_and_int4_is_near_it(smollm2):
    model, tokenizer = smollm2
    prompt = tokenizer.chat([{"role": "user", "content": "Name three colours."}])
    x = torch.tensor([prompt])
    want = model(x)[0][0, -3:]
    fast = {fmt: FastLlama(model, fmt) for fmt in ("float32", "int4", "q4_1") if fmt in RUNS}
    # int4: bfloat16 activations, scales and LM head; q4_1: the file's blocks and head as the readable model holds
    # them (dequantized to float32), float32 activations: only the order of the sums differs
    for fmt, tol in [("float32", 1e-5), ("int4", 0.05)] + [("q4_1", 1e-5)] * ("q4_1" in fast):
        got = fast[fmt](x, use_cache=True)[0][0, -3:]
        assert (got - want).abs().max().item() <= tol * max(1.0, want.abs().max().item()), fmt
    plain, _ = autoregressive_generate(model, x, 8, temperature=0)
    assert torch.equal(autoregressive_generate(fast["float32"], x, 8, temperature=0)[0], plain)
    assert "as its Q4_1 blocks" in fast["int4"].about and fast["int4"].weight_bytes() < model.num_params()


@torch.no_grad()
def rows_of_wide_and_steps(fast, prompt, new):  # -> (logits of `new` in one forward, the same fed one at a time)
    fast.reset_cache()
    fast(prompt, use_cache=True)
    P = fast.cache_len
    wide = fast(new, use_cache=True)[0][0]
    fast.crop(P)
    return wide, torch.cat([fast(new[:, i:i + 1], use_cache=True)[0][0] for i in range(new.size(1))])


def test_int4_computes_every_row_of_a_verification_as_the_one_token_step_bit_for_bit(smollm2):
    """What makes greedy speculative equal greedy plain in int4: a (K+1)-token forward's rows ARE the one-token steps'
    numbers. Attending the rows together (row_invariant off: torch's kernel sees T queries at once) breaks it: the
    planted bug this test catches."""
    model, tokenizer = smollm2
    fast = FastLlama(model, "int4")
    prompt = torch.tensor([tokenizer.chat([{"role": "user", "content": "Name three colours."}])])
    new = torch.tensor([[504, 3575, 282, 4649, 314]])
    wide, steps = rows_of_wide_and_steps(fast, prompt, new)
    assert torch.equal(wide, steps)
    fast.row_invariant = False
    wide, steps = rows_of_wide_and_steps(fast, prompt, new)
    assert not torch.equal(wide, steps)


@torch.no_grad()
@pytest.mark.skipif("q4_1" not in RUNS, reason="engine/blocks.cpp does not build here (test_blocks.py says why)")
@pytest.mark.parametrize("width", [(64, 64), (40, 44)])  # whole blocks of 32; widths the kernel pads to blocks
def test_q4_1_runs_a_block_in_one_call_near_its_torch_operations_and_each_row_is_its_step(width, monkeypatch):
    """The q4_1 format runs each Llama block of a step or a chain in one call of engine/blocks.cpp (layer_rows):
    within 1e-5 of the same block as torch operations around the kernel's products (fused off, the readable path),
    and a (K+1)-token forward's rows are the one-token steps' bit for bit."""
    import engine.llama
    C, H = width
    fast = FastLlama(random_llama(0, block_size=24, n_layer=2, n_embd=C, n_hidden=H), "q4_1")
    calls = []
    monkeypatch.setattr(engine.llama, "layer_rows", lambda *a: calls.append(a[0].size(0)) or layer_rows(*a))
    prompt, new = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]]), torch.tensor([[5, 3, 5, 8, 9]])
    wide, steps = rows_of_wide_and_steps(fast, prompt, new)
    assert calls == [8] * 2 + [5] * 2 + [1] * 10  # a call a layer: the prompt, the chain's 5 rows, each token's step
    assert torch.equal(wide, steps)
    fast.fused = False
    readable, readable_steps = rows_of_wide_and_steps(fast, prompt, new)
    assert len(calls) == 14 and torch.equal(readable, readable_steps)  # (its rows are each step's too)
    assert (wide - readable).abs().max().item() <= 1e-5 * max(1.0, readable.abs().max().item())


def test_the_formats_table_times_every_format_and_its_prompt_read_both_ways(capsys, monkeypatch):
    """bench.py --profile's table on a tiny Llama: a row per format, the readable model first; the samplers' read of
    a prompt goes through fill in the weight-only formats (once per repeat each), its own forward in float32."""
    from benchmarks.formats import READ, format_table
    fills = []
    real_fill = FastLlama.fill
    monkeypatch.setattr(FastLlama, "fill", lambda self, ids: fills.append(self.format) or real_fill(self, ids))
    rows, bandwidth = format_table(q4_llama(0, block_size=READ + 32), torch.tensor([[3, 1, 4, 1, 5]]), repeats=1)
    assert [r["format"] for r in rows] == ["eager float32", *RUNS] and bandwidth > 0
    assert all(r["read_ms"] > 0 and r["read_own_ms"] > 0 and r["step_ms"] > 0 for r in rows)
    assert sorted(fills) == sorted(3 * [f for f in RUNS if f != "float32"])
    assert f"a {READ}-token prompt read in one forward of its kernels | as the samplers read it |" in capsys.readouterr().out


def test_the_kernel_table_times_every_route_and_checks_its_rows_against_one_row_products(capsys, monkeypatch):
    """bench.py --profile's routes for a verification: every block matrix, n rows against one. The weight-only
    kernels and integer sums keep each row equal to its one-row product; a planted kernel whose rows depend on their
    neighbours (a row's own sum plus a share of the batch's mean) is reported as not."""
    from benchmarks import formats
    rows = formats.kernel_table(q4_llama(0), repeats=1)
    out = capsys.readouterr().out
    timed = {r["route"]: r for r in rows if "unavailable" not in r}
    assert len(rows) == 7 and all(r["step_ms"] > 0 and set(r["v"]) == {2, 3, 5, 9, 17} for r in timed.values())
    assert all(timed[r]["rows_equal"] for r in timed if r.startswith(("int4", "int8", "q4_1")))
    assert "| route | one row | v(2) | v(3) | v(5) | v(9) | v(17) | rows equal to one-row products |" in out
    monkeypatch.setattr(formats, "w8a8", lambda x, w: x @ w[0].float() + 1e-3 * x.mean())
    assert not next(r for r in formats.kernel_table(q4_llama(0), repeats=1) if "_int_mm" in r["route"])["rows_equal"]


def test_the_step_by_operation_finds_the_int4_kernel_four_times_a_layer(capsys):
    """bench.py --profile's breakdown of a step: the int4 products are one operation among the dearest, called once per
    block matrix (4 a layer); the rows and the rest add up to the profiled total."""
    from benchmarks.formats import step_ops
    target = q4_llama(0)
    out = step_ops(target, torch.tensor([[3, 1, 4, 1, 5]]), steps=3, top=40)
    kernel = next(r for r in out["ops"] if r["op"] == "aten::_weight_int4pack_mm_for_cpu")
    assert kernel["calls"] == 4 * target.config.n_layer and kernel["ms"] > 0 and out["wall_ms"] > 0
    assert sum(r["ms"] for r in out["ops"]) + out["rest_ms"] == pytest.approx(out["profiled_ms"])
    assert "| operation | ms a step | calls a step |" in capsys.readouterr().out


def test_a_heads_lm_head_rows_run_in_int8_beside_a_quantized_target():
    """with_decoder runs a head's reduced LM-head rows and its blocks in int8 beside int8 or int4 (as engines quantize
    a draft with its target), in float32 beside float32; the logits move by a rounding's reach, and rows_in refuses
    other formats. (The blocks' arithmetic: tests/test_llama_exact.py.)"""
    from drafts import heads
    target = q4_llama(0)
    head = heads.KINDS["eagle3"][0](target, draft_vocab=16)
    f = torch.randn(1, 3, target.config.n_embd)
    want = head.reduced_logits(f)
    assert with_decoder("fast", target, head)[1].rows_format == "float32" and head.blocks_format == "float32"
    for decoder in ("fast-int8", "fast-int4"):
        head.rows_in("float32")
        assert with_decoder(decoder, target, head)[1].rows_format == "int8" and head.blocks_format == "int8"
        got = head.reduced_logits(f)
        assert got.shape == want.shape and not torch.equal(got, want)
        assert (got - want).abs().max() < 0.02 * want.abs().max(), (got - want).abs().max()
    with pytest.raises(ValueError, match="rows_in takes 'float32' or 'int8'"):
        head.rows_in("int4")


def test_the_vocabulary_table_weighs_coverage_against_a_heads_step(capsys):
    """bench.py --profile's vocabulary table on a tiny Llama: a row per size, the coverage of the held-out answers
    (every 16th) by the vocabulary the others choose, and a draft step in float32 and int8 rows against the step."""
    from benchmarks.formats import vocab_table
    target = q4_llama(0)
    answers = [(1, [0] + [i % 7, (i * 3) % 11, 40 + i % 5]) for i in range(32)]  # held out: rows 15 and 31
    rows, step_ms = vocab_table(target, torch.tensor([[3, 1, 4, 1, 5]]), vocabs=(4, 8), answers=answers, repeats=2)
    assert [r["vocab"] for r in rows] == [4, 8] and step_ms > 0
    held = [a[1][1:] for i, a in enumerate(answers) if i % 16 == 15]
    assert all(0 < r["coverage"] <= 1 and min(r["float32_ms"], r["int8_ms"], r["int8_blocks_ms"]) > 0 for r in rows)
    assert rows[0]["coverage"] <= rows[1]["coverage"] and len(held) == 2
    assert "| vocabulary | coverage of held-out answers |" in capsys.readouterr().out
    rows, _ = vocab_table(target, torch.tensor([[3, 1, 4, 1, 5]]), vocabs=(4,), repeats=1)
    assert rows[0]["coverage"] != rows[0]["coverage"]  # nan: no answers to cover


def test_auto_scores_a_format_by_theorem_3_8_with_v():
    from engine.fast import AUTO_ALPHA, AUTO_K, tokens_per_second
    a = AUTO_ALPHA
    assert tokens_per_second(0.02, 1.7, drafting=False) == 1 / 0.02  # plain: one token a step
    assert tokens_per_second(0.02, 2.0, drafting=True) == pytest.approx(
        sum(a ** i for i in range(AUTO_K + 1)) / (2.0 * 0.02))  # expected tokens of a round over its time
    # a cheaper step can lose to a flatter verification, with a draft only
    assert tokens_per_second(0.020, 2.4, True) < tokens_per_second(0.022, 1.7, True)
    assert tokens_per_second(0.020, 2.4, False) > tokens_per_second(0.022, 1.7, False)


def test_auto_times_both_formats_once_then_follows_its_cache(monkeypatch, tmp_path, capsys):
    """--decoder auto on a Llama of Q4_1 blocks: both formats timed (a line says which won and by how much), the
    timings cached under this machine's key and read back; the choice follows the timings (a planted cache that makes
    q4_1 dear picks int4); an unreadable cache is timed again; where the kernel cannot run, int4 and why."""
    import json
    from engine import blocks, fast
    monkeypatch.setenv("SPECULATIVE_CACHE", str(tmp_path))
    model = q4_llama(0, block_size=48)
    chosen = fast.auto_format(model, drafting=True, say=print)
    line = capsys.readouterr().out
    if not can_build():  # no kernel here: int4, and why (the rest needs both formats)
        assert chosen == "fast-int4" and "fast-q4_1 cannot run here: " in line
        return
    assert chosen in ("fast-q4_1", "fast-int4") and line.startswith(f"--decoder auto: {chosen}, ")
    assert "timed now, median of 7 interleaved" in line
    cache_file = tmp_path / "formats.json"
    (key, times), = json.loads(cache_file.read_text()).items()
    assert "torch " in key and f"engine {fast.engine_version()}" in key and set(times) == {"fast-q4_1", "fast-int4"} and all(t[0] > 0 and t[1] > 0
                                                                              for t in times.values())
    assert fast.auto_format(model, say=print) == chosen and "timed earlier, read from" in capsys.readouterr().out
    times["fast-q4_1"] = [10 * times["fast-int4"][0], times["fast-int4"][1]]  # planted: q4_1 ten times slower
    cache_file.write_text(json.dumps({key: times}))
    assert fast.auto_format(model, say=print) == "fast-int4"
    cache_file.write_text("not json")
    assert fast.auto_format(model, say=print) in ("fast-q4_1", "fast-int4") and "timed now" in capsys.readouterr().out
    monkeypatch.setattr(blocks, "unavailable", lambda: "no compiler here")
    assert fast.auto_format(model, say=print) == "fast-int4"
    assert "fast-q4_1 cannot run here: no compiler here" in capsys.readouterr().out
