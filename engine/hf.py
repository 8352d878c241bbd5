"""
Hugging Face transformers interop: our GPT <-> transformers.GPT2LMHeadModel, and pretrained GPT-2.

- to_hf(model) and from_hf(hf_model) map the state dicts both ways. The names already match (model.py keeps
  GPT-2's); the only change is that GPT-2's attention and MLP layers are Conv1D, storing weights as
  (in, out), where nn.Linear stores (out, in): those four matrices are transposed.
- load_gpt2(name) loads pretrained GPT-2 weights (gpt2, gpt2-medium, gpt2-large, gpt2-xl) through
  transformers, from the local cache first; with no cache and no network it stops with a clear message
  within seconds (a quick probe of the hub) instead of minutes of retries.
- gpt2_encoding_from_hf_cache() gives tiktoken's `gpt2` encoding offline, from GPT-2's own tokenizer files
  in that cache (load_gpt2 fetches them with the weights).
- load_gguf(path) is transformers' own Llama from a GGUF file (pretrained/'s SmolLM2): the independent
  implementation that bench.py --hf times ours against and tests/test_llama.py checks ours with. No conversion:
  each side reads the file itself.

What it leaves out: converting other architectures (GPT-2 only; a GGUF Llama is read, not converted), and
transformers' tokenizers: we use tiktoken's `gpt2`, and the GGUF file's own vocabulary (pretrained/tokenizer.py).
"""

import os
import socket
import urllib.parse

import torch

from model import GPT, GPTConfig

TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise SystemExit("this needs the optional `transformers` package: pip install -r requirements-hf.txt") from e
    return transformers


def to_hf(model):
    """Our GPT -> an equivalent transformers.GPT2LMHeadModel (float32, eval mode)."""
    tr = _transformers()
    c = model.config
    if not c.bias:
        raise ValueError("transformers' GPT-2 always has biases: export a model trained with bias=True")
    hf_config = tr.GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer,
                              n_head=c.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                              activation_function="gelu_new", layer_norm_epsilon=1e-5,
                              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    hf = tr.GPT2LMHeadModel(hf_config)
    state = {k: (v.t() if k.endswith(TRANSPOSED) else v).float() for k, v in model.state_dict().items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    hf.tie_weights()
    return hf.eval()


def from_hf(hf_model):
    """A transformers.GPT2LMHeadModel -> our GPT (float32, eval mode)."""
    hc = hf_model.config
    if hc.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"our GPT uses GPT-2's tanh GELU; this model uses {hc.activation_function!r}")
    model = GPT(GPTConfig(block_size=hc.n_positions, vocab_size=hc.vocab_size, n_layer=hc.n_layer, n_head=hc.n_head,
                          n_embd=hc.n_embd, dropout=0.0, bias=True))
    ours = model.state_dict()
    state = {k: (v.t() if k.endswith(TRANSPOSED) else v).float() for k, v in hf_model.state_dict().items() if k in ours}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return model.eval()


def load_gpt2(name, device="cpu"):
    """Pretrained GPT-2 as our GPT, plus the tokenizer meta for tiktoken's `gpt2` encoding."""
    if name not in GPT2_NAMES:
        raise SystemExit(f"--init_from {name!r}: choose one of {', '.join(GPT2_NAMES)}")
    tr = _transformers()
    try:  # the local cache first: no network, no waiting
        hf = tr.GPT2LMHeadModel.from_pretrained(name, local_files_only=True)
    except Exception as e:
        how = (f"Run `python sample.py --init_from {name}` once on a connected machine: it puts the weights and "
               "the tokenizer's files in the Hugging Face cache (~/.cache/huggingface, or $HF_HOME), which can be "
               "copied here. Or use the shipped pair")
        if not hub_reachable():
            raise SystemExit(f"cannot load {name!r}: it is not in the Hugging Face cache and the hub is not "
                             f"reachable. {how}") from e
        try:
            hf = tr.GPT2LMHeadModel.from_pretrained(name)
        except Exception as e:
            raise SystemExit(f"cannot load {name!r} from the hub ({type(e).__name__}: {e}). {how}") from e
    if gpt2_tokenizer_files() is None and hub_reachable():  # the tokenizer's files too, for offline use later
        from huggingface_hub import hf_hub_download
        try:
            for file in ("vocab.json", "merges.txt"):
                hf_hub_download(name, file)
        except Exception:  # not fatal: tiktoken may still fetch its own copy of the same files
            pass
    tokenizer = {"kind": "bpe", "encoding": "gpt2", "ids": list(range(hf.config.vocab_size))}  # ids unchanged
    return from_hf(hf).to(device), {"tokenizer": tokenizer, "init_from": name}


def load_gguf(path):
    """transformers' Llama from a GGUF file, float32, eval mode: its own loader dequantizes the file's blocks, as
    pretrained/gguf_file.py does ours."""
    tr = _transformers()
    return tr.AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                   gguf_file=os.path.basename(path), dtype=torch.float32).eval()


def hub_reachable(timeout=3.0):
    """Can we open a connection to the Hugging Face hub? Honors HF_HUB_OFFLINE and HF_ENDPOINT; behind a proxy
    we cannot tell, so we say yes and let the download try."""
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urllib.parse.urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return True
    except OSError:
        return False


def gpt2_tokenizer_files():
    """(vocab.json, merges.txt) of GPT-2 in the Hugging Face cache, as paths; None when they are not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for repo in GPT2_NAMES:  # all four share one tokenizer
        vocab, merges = (try_to_load_from_cache(repo, file) for file in ("vocab.json", "merges.txt"))
        if isinstance(vocab, str) and isinstance(merges, str):  # paths (not None or a "not cached" marker)
            return vocab, merges
    return None


def gpt2_encoding_from_hf_cache():
    """tiktoken's `gpt2` encoding, built from GPT-2's tokenizer files in the Hugging Face cache (its vocab.json
    and merges.txt are tiktoken's encoder.json and vocab.bpe under other names); None when they are not cached."""
    files = gpt2_tokenizer_files()
    if files is None:
        return None
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str  # the gpt2 encoding's pre-tokenizer pattern
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(files[1], files[0])
    return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


@torch.no_grad()
def max_logit_difference(model, hf_model, idx):  # (B, T) ids -> max |ours - HF| over all logits
    return (model(idx)[0] - hf_model(idx).logits).abs().max().item()
