"""bench.py --peer llamacpp without llama.cpp: its server (benchmarks/llamacpp_peer.py) and client (benchmarks/peers.py)
speak through a stand-in llama_cpp package that answers as the binding does, the table is made from a recorded run's
JSON, and a machine without the peer's venv gets one line that says how to build it."""

import json
import os
import sys
import textwrap

import pytest

from benchmarks import llamacpp_peer
from benchmarks.peers import LlamaCppPeer, print_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a stand-in for the binding: Llama(**kw).generate(tokens, **sampling) yields 5, 6, 7, 2, 9, 9, ... after any prompt,
# and records what it was asked, as llama-cpp-python 0.3's Llama does the first
STAND_IN = '''
__version__ = "0.0-stand-in"
calls = []
def llama_print_system_info():
    return b"AVX2 = 1 | stand-in"
class Llama:
    def __init__(self, **kw):
        self.kw, self.n_tokens, self.seed = kw, 17, None
    def set_seed(self, seed):
        self.seed = seed
    def generate(self, tokens, **sampling):
        calls.append(dict(prompt=list(tokens), n_tokens=self.n_tokens, seed=self.seed, draft=self.kw.get("draft_model"),
                          **sampling))
        yield from [5, 6, 7, 2] + [9] * 100
'''
SPECULATIVE = '''
class LlamaPromptLookupDecoding:
    def __init__(self, num_pred_tokens):
        self.num_pred_tokens = num_pred_tokens
'''


@pytest.fixture
def stand_in(tmp_path, monkeypatch):  # -> the stand-in package's folder, importable here and by a child process
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    (package / "llama_speculative.py").write_text(textwrap.dedent(SPECULATIVE))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("llama_cpp", "llama_cpp.llama_speculative"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_the_server_answers_a_line_a_request_and_stops_at_the_end_of_turn(stand_in):
    import llama_cpp
    lines, out = [], []
    lines.append(json.dumps(dict(op="load", model="m.gguf", threads=2, lookups=[4])))
    ask = dict(op="generate", col="plain", tokens=[1, 2, 3], n=10, eos=[2], seed=7, temperature=0.0, top_p=1.0, top_k=0)
    lines.append(json.dumps(ask))
    lines.append(json.dumps(ask | dict(col="lookup@4", n=2, temperature=1.0)))
    lines.append(json.dumps(ask | dict(col="lookup@9")))  # not loaded: an error line, and the server goes on
    lines.append(json.dumps(dict(op="nonsense")))
    llamacpp_peer.serve(lines, out.append)
    load, plain, lookup, missing, unknown = map(json.loads, out)
    assert load == dict(version="0.0-stand-in", system_info="AVX2 = 1 | stand-in")
    assert plain["tokens"] == [5, 6, 7, 2] and plain["seconds"] >= 0  # the end of turn kept, then stopped
    assert lookup["tokens"] == [5, 6]  # at most n
    assert "lookup@9" in missing["error"] and "nonsense" in unknown["error"]
    greedy, sampled = llama_cpp.calls
    assert greedy["n_tokens"] == 0 and greedy["seed"] == 7 and greedy["prompt"] == [1, 2, 3]  # no prefix reused
    assert greedy["temp"] == 0.0 and greedy["top_k"] == 1 and greedy["draft"] is None
    assert sampled["temp"] == 1.0 and sampled["top_k"] == 0 and sampled["min_p"] == 0.0 and sampled["top_p"] == 1.0
    assert sampled["draft"].num_pred_tokens == 4 and sampled["repeat_penalty"] == 1.0


def test_the_client_runs_the_server_in_another_python_and_reports_its_errors(stand_in, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(stand_in))
    peer = LlamaCppPeer("m.gguf", 2, ks=(4, 10), python=sys.executable)
    assert peer.lookups == ["llama.cpp lookup@4", "llama.cpp lookup@10"]
    assert "llama-cpp-python 0.0-stand-in (AVX2 = 1 | stand-in)" in peer.caption
    tokens, seconds = peer.generate("llama.cpp lookup@10", [1, 2], 8, [7], dict(temperature=0.0), 3)
    assert tokens == [5, 6, 7] and seconds >= 0
    assert peer.record()["llama_cpp_python"] == "0.0-stand-in"
    with pytest.raises(SystemExit, match="--peer llamacpp: KeyError"):
        peer.generate("llama.cpp lookup@3", [1], 8, [7], dict(temperature=0.0), 3)
    peer.proc.kill()  # as a crash would (SIGILL in a kernel the build chose)
    peer.proc.wait()
    with pytest.raises(SystemExit, match="its process ended"):
        peer.generate("llama.cpp plain", [1], 8, [7], dict(temperature=0.0), 3)


def test_without_the_peers_venv_one_line_says_how_to_build_it(tmp_path):
    with pytest.raises(SystemExit, match="bash scripts/setup_llamacpp.sh builds it"):
        LlamaCppPeer("m.gguf", 2, python=str(tmp_path / "bin" / "python"))


def test_the_table_of_a_recorded_run(capsys):
    """The run BENCHMARKS.md pastes, its JSON read back into the table: a row per category and setting, the means,
    the ratios from the tokens/s, and the agreements at T = 0."""
    with open(os.path.join(ROOT, "notebooks", "chat_suite_peers_avx2_llamacpp.json")) as fh:
        run = json.load(fh)
    rows, lookups = run["rows"], run["lookups"]
    cols = ["ours plain", "llama.cpp plain", "ours ngram@auto", "ours suffix@auto", *lookups]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    print_table(rows, cols, "llama.cpp", lookups, settings)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| category | setting | ours plain tok/s | llama.cpp plain tok/s |")
    assert out[0].endswith("| greedy equal | llama.cpp plain = ours plain |")
    body = [line.split(" | ") for line in out[2:]]
    assert len(body) == len(rows) + len(settings) and all(len(b) == len(cols) + 7 for b in body)
    for r, b in zip(rows, body):
        t = r["tps"]
        assert b[2 + len(cols)] == f"{t['ours plain'] / t['llama.cpp plain']:.2f}x"
        if r["setting"] == "t0":
            assert b[-1] == f"{r['same_as_ours']} of {r['prompts']} |" and 0 <= r["same_as_ours"] <= r["prompts"]
            assert r["greedy_equal"]["ours suffix@auto"] and r["greedy_equal"]["ours ngram@auto"]  # ours: always


def test_a_peer_replays_the_real_models_suite_only(capsys):
    import bench
    with pytest.raises(SystemExit):
        bench.get_args(["--peer", "llamacpp", "--suite"])  # the shipped pair's suite: no requests to replay
    assert "--peer llamacpp replays the real model's suite: add --target smollm2 --suite" in capsys.readouterr().err
