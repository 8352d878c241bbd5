"""model.py: the KV cache gives the same logits as a full forward, crops in O(1), checkpoints round-trip, and a file
torch cannot read (truncated, or no checkpoint) is one clear error."""

import random
import zipfile

import pytest
import torch

from drafts import heads
from drafts.eagle import EagleDraft
from model import GPT, GPTConfig, load_checkpoint, save_checkpoint
from tests.conftest import check_cache_against_full_forwards, check_tree_against_full_forwards, random_gpt


@pytest.mark.parametrize("seed", range(5))
def test_cached_logits_equal_uncached_after_random_appends_and_crops(seed):
    model = random_gpt(seed, vocab_size=11, block_size=24, n_layer=3, n_head=2, n_embd=16, sharpness=1.0)
    check_cache_against_full_forwards(model, model, seed)


@pytest.mark.parametrize("seed", range(3))
def test_tree_attention_logits_equal_each_paths_full_forward(seed):
    model = random_gpt(seed, vocab_size=11, block_size=24, n_layer=3, n_head=2, n_embd=16, sharpness=1.0)
    check_tree_against_full_forwards(model, model, seed)


def test_tree_arguments_are_checked():
    model = random_gpt(0, block_size=4)
    model(torch.tensor([[1, 2]]), use_cache=True)
    with pytest.raises(AssertionError, match="mask"):
        model(torch.tensor([[1, 2]]), use_cache=True, pos=torch.tensor([2, 2]))
    with pytest.raises(AssertionError, match="block_size"):
        model(torch.tensor([[1]]), use_cache=True, pos=torch.tensor([4]), mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(AssertionError, match="increasing slots"):
        model.compact(1, [1, 0])


def test_crop_moves_a_counter_and_copies_nothing():
    model = random_gpt(0)
    model(torch.tensor([[1, 2, 3, 4]]), use_cache=True)
    cache = model.cache
    ptr = cache.k[0].data_ptr()
    model.crop(1)
    assert model.cache_len == 1 and model.cache is cache and cache.k[0].data_ptr() == ptr


def test_cache_overflow_and_bad_crop_say_what_to_do():
    model = random_gpt(0, block_size=4)
    model(torch.tensor([[1, 2, 3]]), use_cache=True)
    with pytest.raises(AssertionError, match="block_size"):
        model(torch.tensor([[1, 2]]), use_cache=True)
    with pytest.raises(AssertionError, match="cache_len"):
        model.crop(9)


def test_logits_for_every_position():
    model = random_gpt(0, vocab_size=7)
    logits, loss = model(torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, 4]]))
    assert logits.shape == (1, 3, 7) and loss.item() > 0


def test_checkpoint_round_trip_is_plain_data(tmp_path):
    model = random_gpt(3, sharpness=1.0)
    path = tmp_path / "m.pt"
    save_checkpoint(path, model, {"tokenizer": {"kind": "char", "chars": "abcde"}}, dtype=torch.float16)
    raw = torch.load(path, weights_only=True)  # plain data: no pickled classes
    assert set(raw) == {"model_args", "state_dict", "meta"} and "lm_head.weight" not in raw["state_dict"]
    loaded, meta = load_checkpoint(str(path))
    assert meta["tokenizer"]["chars"] == "abcde" and not loaded.training
    assert loaded.lm_head.weight.dtype == torch.float32
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr(), "tying lost on load"
    x = torch.tensor([[0, 1, 2, 3]])
    assert (loaded(x)[0] - model(x)[0]).abs().max().item() < 1e-2  # float16 on disk


def test_missing_checkpoint_says_how_to_get_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_draft.py"):
        load_checkpoint(str(tmp_path / "nope.pt"))


@pytest.mark.parametrize("bad,dtype", [(float("nan"), None), (float("inf"), None), (1e5, torch.float16)])
def test_checkpoint_with_nan_or_inf_weights_is_refused_naming_the_tensor(tmp_path, bad, dtype):
    model = random_gpt(3, sharpness=1.0)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_proj.weight[2, 3] = bad  # 1e5 becomes inf in float16
    path = tmp_path / "diverged.pt"
    save_checkpoint(path, model, dtype=dtype)
    with pytest.raises(ValueError, match=r"'transformer.h.1.mlp.c_proj.weight' holds .* earlier checkpoint"):
        load_checkpoint(str(path))


@pytest.mark.parametrize("cut", [0, 10, 1000, -100])  # bytes kept (negative: all but the last 100)
@pytest.mark.parametrize("kind", ["model", "head"])  # model.save_checkpoint's and drafts/heads.py's save
def test_a_truncated_checkpoint_is_one_clear_error(tmp_path, kind, cut):
    target, path = random_gpt(3), tmp_path / f"{kind}.pt"
    if kind == "model":
        save_checkpoint(path, target)
        load, writer = load_checkpoint, "model.save_checkpoint"
    else:
        heads.save(path, EagleDraft(target))
        load, writer = (lambda p: heads.load(p, target)), "heads.save"
    path.write_bytes(path.read_bytes()[:cut])  # a copy cut short
    with pytest.raises(ValueError, match="is empty" if cut == 0 else "is cut short: it begins as a checkpoint") as err:
        load(str(path))
    assert str(path) in str(err.value) and "git checkout" in str(err.value) and "weights_only" not in str(err.value)


def write_zip_of_text(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "not a checkpoint")


BAD_FILES = {  # name -> (how to write it, the words that say what it is)
    # a text file beginning with t: pickle's opcode t, so torch.load fails with IndexError, not UnpicklingError
    "text beginning with t": (lambda p: p.write_text("text\n"), "it is a text file, beginning 'text'"),
    "markdown": (lambda p: p.write_text("# not a checkpoint\n"), "it is a text file, beginning '# not a checkpoint'"),
    "text with a word torch reads as an opcode": (lambda p: p.write_text("hello world\n"), "it is a text file"),
    "empty": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "random bytes": (lambda p: p.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(3000))),
                     "its bytes are neither a zip archive nor a pickle"),
    "a zip without data.pkl": (write_zip_of_text, "is a zip archive, not a checkpoint (a torch.save file holds "
                                                  "data.pkl; this one holds notes.txt)"),
    "a whole module saved": (lambda p: torch.save({"model": torch.nn.Linear(2, 2)}, p),
                             "a torch.save file of Python objects beyond tensors"),
    "a folder": (lambda p: p.mkdir(), "is a folder"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_a_file_that_is_not_a_checkpoint_is_one_line_saying_what_it_is(tmp_path, name):
    write, words = BAD_FILES[name]
    path = tmp_path / "x.pt"
    write(path)
    with pytest.raises(ValueError) as err:
        load_checkpoint(str(path))
    message = str(err.value)
    assert message.startswith(repr(str(path))) and words in message, message
    assert "\n" not in message and "weights_only" not in message
    assert message.endswith("or retrain it with train_draft.py")  # what to do


def test_a_torch_file_of_other_plain_data_says_what_a_checkpoint_holds(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="not a checkpoint written by model.save_checkpoint .*model_args"):
        load_checkpoint(str(path))
