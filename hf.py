"""
Hugging Face transformers interop: our GPT <-> transformers.GPT2LMHeadModel, and pretrained GPT-2.

- to_hf(model) and from_hf(hf_model) map the state dicts both ways. The names already match (model.py keeps
  GPT-2's); the only change is that GPT-2's attention and MLP layers are Conv1D, storing weights as
  (in, out), where nn.Linear stores (out, in): those four matrices are transposed.
- load_gpt2(name) loads pretrained GPT-2 weights (gpt2, gpt2-medium, gpt2-large, gpt2-xl) through
  transformers, from the local cache first; with no cache and no network it stops with a clear message
  instead of hanging.

What it leaves out: other architectures (GPT-2 only), and tokenizers: with pretrained GPT-2 we use tiktoken's
`gpt2` encoding, which tiktoken must be able to load (cached or online).
"""

import os

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
    except Exception:
        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")  # then the hub, with short timeouts
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
        try:
            hf = tr.GPT2LMHeadModel.from_pretrained(name)
        except Exception as e:
            raise SystemExit(f"cannot load {name!r}: it is not in the Hugging Face cache and the hub is not "
                             f"reachable ({type(e).__name__}). Download it once on a connected machine "
                             f"(python -c \"import transformers; transformers.GPT2LMHeadModel.from_pretrained('{name}')\") "
                             "or use the shipped pair") from e
    tokenizer = {"kind": "bpe", "encoding": "gpt2", "ids": list(range(hf.config.vocab_size))}  # ids unchanged
    return from_hf(hf).to(device), {"tokenizer": tokenizer, "init_from": name}


@torch.no_grad()
def max_logit_difference(model, hf_model, idx):  # (B, T) ids -> max |ours - HF| over all logits
    return (model(idx)[0] - hf_model(idx).logits).abs().max().item()
