"""bench.py --peer llamacpp|vllm without llama.cpp or vLLM: each server (benchmarks/llamacpp_peer.py,
benchmarks/vllm_peer.py) and its client (benchmarks/peers.py) speak through a stand-in package that answers as the
real one does, the tables are made from recorded runs' JSON, and a machine without a peer's venv gets one line that
says how to make it."""

import json
import os
import sys
import textwrap

import pytest

from benchmarks import llamacpp_peer, peers, vllm_peer
from benchmarks.peers import LlamaCppPeer, LlamaServerPeer, VLLMPeer, print_rounds_table, print_table

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
    assert plain["tokens"] == [5, 6, 7, 2] and plain["seconds"] >= plain["ttft"] >= 0  # the end of turn kept, then stopped
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
    tokens, seconds, info = peer.generate("llama.cpp lookup@10", [1, 2], 8, [7], dict(temperature=0.0), 3)
    assert tokens == [5, 6, 7] and seconds >= info["ttft"] >= 0
    assert peer.record()["llama_cpp_python"] == "0.0-stand-in"
    with pytest.raises(SystemExit, match="--peer llamacpp: KeyError"):
        peer.generate("llama.cpp lookup@3", [1], 8, [7], dict(temperature=0.0), 3)
    peer.server.proc.kill()  # as a crash would (SIGILL in a kernel the build chose)
    peer.server.proc.wait()
    with pytest.raises(SystemExit, match="its process ended"):
        peer.generate("llama.cpp plain", [1], 8, [7], dict(temperature=0.0), 3)


def test_without_the_peers_venv_one_line_says_how_to_build_it(tmp_path):
    with pytest.raises(SystemExit, match="bash scripts/setup_llamacpp.sh makes it"):
        LlamaCppPeer("m.gguf", 2, python=str(tmp_path / "bin" / "python"))


@pytest.mark.parametrize("recorded", ["chat_suite_peers_avx2_llamacpp.json", "chat_suite_peers_vllm_avx2_vllm.json"])
def test_the_table_of_a_recorded_run(recorded, capsys):
    """The runs BENCHMARKS.md pastes, their JSON read back into the tables: a row per category and setting, the
    means, the ratios from the tokens/s, the agreements at T = 0, and (where the run kept them) the first tokens and
    tau."""
    with open(os.path.join(ROOT, "notebooks", recorded)) as fh:
        run = json.load(fh)
    rows, lookups, name = run["rows"], run["lookups"], run["peer"]
    cols = ["ours plain", f"{name} plain", "ours ngram@auto", "ours suffix@auto", *lookups]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    print_table(rows, cols, name, lookups, settings)
    print_rounds_table(rows, cols)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"| category | setting | ours plain tok/s | {name} plain tok/s |")
    assert out[0].endswith(f"| greedy equal | {name} plain = ours plain |")
    n = len(rows) + len(settings)
    body = [line.split(" | ") for line in out[2:2 + n]]
    assert all(len(b) == len(cols) + 7 for b in body)
    for r, b in zip(rows, body):
        t = r["tps"]
        assert b[2 + len(cols)] == f"{t['ours plain'] / t[f'{name} plain']:.2f}x"
        if r["setting"] == "t0":
            assert b[-1] == f"{r['same_as_ours']} of {r['prompts']} |" and 0 <= r["same_as_ours"] <= r["prompts"]
            assert r["greedy_equal"]["ours suffix@auto"] and r["greedy_equal"]["ours ngram@auto"]  # ours: always
    rounds = out[2 + n:]
    if "tau" not in rows[0]:  # recorded before the second table
        assert rounds == []
        return
    assert rounds[1].startswith("| category | setting | ours plain first token ms | ") and len(rounds) == 3 + len(rows)
    for r, line in zip(rows, rounds[3:]):
        assert line.startswith(f"| {r['category']} | {r['setting']} | {r['ttft_ms']['ours plain']:.0f} | ")
        assert all(tau >= 1 for tau in r["tau"].values())  # a round that drafted emits at least one token
        assert set(r["tau"]) <= set(cols) - {"ours plain", f"{name} plain"}  # plain columns count no rounds


def test_a_peer_replays_the_real_models_suite_only(capsys):
    import bench
    with pytest.raises(SystemExit):
        bench.get_args(["--peer", "llamacpp", "--suite"])  # the shipped pair's suite: no requests to replay
    assert "--peer llamacpp replays the real model's suite: add --target smollm2 --suite" in capsys.readouterr().err


# a stand-in for vLLM: LLM(folder, **kw).generate(prompt, params) answers 5, 6, 7, 2, 9, 9, ... cut at max_tokens and
# after a stop token id (kept, as vLLM keeps it), and its counters count one round that drafted and kept 3 per request
# when a speculative config was given
VLLM = '''
__version__ = "0.0-stand-in"
made = []
class Metric:
    def __init__(self, name, value):
        self.name, self.value = name, value
class Vector:
    name, values = "vllm:spec_decode_num_accepted_tokens_per_pos", [1, 0]  # as vLLM's: no .value
class Output:
    def __init__(self, ids):
        self.token_ids = ids
class Metrics:
    first_token_latency = 0.001
class Request:
    def __init__(self, ids):
        self.outputs, self.metrics = [Output(ids)], Metrics()
class LLM:
    def __init__(self, folder, **kw):
        self.folder, self.kw, self.asked, self.rounds = folder, kw, [], 0
        made.append(self)
    def get_metrics(self):
        if not self.kw["speculative_config"]:
            return [Vector()]
        return [Vector(), Metric("vllm:spec_decode_num_drafts", self.rounds),
                Metric("vllm:spec_decode_num_accepted_tokens", 3 * self.rounds)]
    def generate(self, prompt, params, use_tqdm=True):
        self.asked.append((prompt, params))
        self.rounds += 1
        out = []
        for t in [5, 6, 7, 2] + [9] * 100:
            out.append(t)
            if t in params.stop_token_ids or len(out) == params.max_tokens:
                break
        return [Request(out)]
class SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)
'''
INPUTS = '''
def TokensPrompt(prompt_token_ids):
    return dict(prompt_token_ids=prompt_token_ids)
'''


@pytest.fixture
def vllm_stand_in(tmp_path, monkeypatch):  # -> (the stand-in package's folder, a model folder already written)
    package = tmp_path / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(VLLM))
    (package / "inputs.py").write_text(textwrap.dedent(INPUTS))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")  # written: to_folder leaves it, and transformers is never asked
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("vllm", "vllm.inputs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path, str(folder)


def test_the_vllm_server_answers_with_its_counters_share_of_each_request(vllm_stand_in, monkeypatch):
    _, folder = vllm_stand_in
    for name in ("OMP_NUM_THREADS", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"):
        monkeypatch.delenv(name, raising=False)  # load sets them for vLLM; put back after the test
    import vllm
    spec = dict(method="ngram", num_speculative_tokens=10, prompt_lookup_min=1, prompt_lookup_max=3)
    ask = dict(op="generate", tokens=[1, 2, 3], n=10, eos=[2], seed=7, temperature=0.0, top_p=0.9, top_k=5)
    out = []
    vllm_peer.serve([json.dumps(dict(op="load", gguf="m.gguf", folder=folder, threads=2, speculative_config=spec)),
                     json.dumps(ask), json.dumps(ask | dict(n=2, temperature=1.0)), json.dumps(dict(op="nonsense"))],
                    out.append)
    load, greedy, sampled, unknown = map(json.loads, out)
    assert load["version"] == "0.0-stand-in" and load["folder"] == folder
    assert greedy["tokens"] == [5, 6, 7, 2] and greedy["ttft"] == 0.001 and greedy["seconds"] >= 0
    assert (greedy["drafts"], greedy["accepted"]) == (1, 3) == (sampled["drafts"], sampled["accepted"])  # each its own
    assert sampled["tokens"] == [5, 6] and "nonsense" in unknown["error"]
    llm, = vllm.made
    assert llm.folder == folder and llm.kw["speculative_config"] == spec and llm.kw["dtype"] == "float32"
    assert llm.kw["enable_prefix_caching"] is False and os.environ["OMP_NUM_THREADS"] == "2"
    (p0, g), (p1, s) = llm.asked
    assert p0 == dict(prompt_token_ids=[1, 2, 3]) and g.seed == 7 and g.stop_token_ids == [2] and g.max_tokens == 10
    assert g.temperature == 0.0 and g.top_p == 1.0 and g.top_k == 0  # greedy: no truncation asked
    assert s.temperature == 1.0 and s.top_p == 0.9 and s.top_k == 5


def test_the_vllm_client_runs_a_server_a_column_and_says_when_one_fails(vllm_stand_in, monkeypatch):
    path, folder = vllm_stand_in
    monkeypatch.setenv("PYTHONPATH", str(path))
    configs = {"ngram@10": dict(method="ngram", num_speculative_tokens=10)}
    peer = VLLMPeer("m.gguf", 2, configs=configs, python=sys.executable, folder=folder)
    assert peer.lookups == ["vLLM ngram@10"] and set(peer.servers) == {"plain", "ngram@10"}
    assert "vLLM 0.0-stand-in" in peer.caption and '"num_speculative_tokens": 10' in peer.caption
    tokens, seconds, info = peer.generate("vLLM ngram@10", [1, 2], 8, [7], dict(temperature=0.0), 3)
    assert tokens == [5, 6, 7] and info == dict(ttft=0.001, drafts=1, accepted=3)
    tokens, seconds, info = peer.generate("vLLM plain", [1, 2], 3, [7], dict(temperature=1.0, top_p=0.9), 3)
    assert tokens == [5, 6, 7] and info == dict(ttft=0.001, drafts=None, accepted=None)  # plain: no rounds counted
    assert peer.record()["configs"] == configs
    peer.servers["ngram@10"].proc.kill()
    peer.servers["ngram@10"].proc.wait()
    with pytest.raises(SystemExit, match="--peer vllm: its process ended"):
        peer.generate("vLLM ngram@10", [1], 8, [7], dict(temperature=0.0), 3)
    peer.close()
    assert all(server.proc.poll() is not None for server in peer.servers.values())  # every server ended


def test_without_the_vllm_venv_one_line_says_how_to_make_it(tmp_path):
    with pytest.raises(SystemExit, match="bash scripts/setup_vllm.sh makes it"):
        VLLMPeer("m.gguf", 2, python=str(tmp_path / "bin" / "python"))


def test_the_rounds_table_shows_only_what_a_column_reported(capsys):
    rows = [dict(category="code", setting="t0", ttft_ms={"ours plain": 41.4, "vLLM plain": 120.0},
                 tau={"ours suffix@auto": 2.5, "vLLM suffix@16": 3.125})]
    print_rounds_table(rows, ["ours plain", "vLLM plain", "ours suffix@auto", "vLLM suffix@16"])
    assert capsys.readouterr().out.splitlines()[1:] == [
        "| category | setting | ours plain first token ms | vLLM plain first token ms | ours suffix@auto tau | "
        "vLLM suffix@16 tau |", "|---|---|---|---|---|---|", "| code | t0 | 41 | 120 | 2.50 | 3.12 |"]
    print_rounds_table([dict(category="code", setting="t0")], ["ours plain"])  # a run recorded before: no table
    assert capsys.readouterr().out == ""


# a stand-in for llama-server: its flags as llama.cpp's, /health, and /completion answering 5, 6, 7, 2, 9, ... cut at
# n_predict and after token 2 (its end of generation, kept, as llama-server keeps it); the request it got echoed back
LLAMA_SERVER = """#!{python}
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if "--version" in sys.argv:
    sys.exit(print("version: 0 (stand-in)", file=sys.stderr))
if "--spec-type" in sys.argv and sys.argv[sys.argv.index("--spec-type") + 1] == "broken":
    sys.exit(print("error: unknown speculative type", file=sys.stderr) or 1)
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer(dict(status="ok"))
    def do_POST(self):
        ask = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = []
        for t in [5, 6, 7, 2] + [9] * 100:
            out.append(t)
            if t == 2 or len(out) == ask["n_predict"]:
                break
        self.answer(dict(tokens=out, timings=dict(prompt_ms=3.0), asked=ask, argv=sys.argv))
    def answer(self, reply):
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler).serve_forever()
"""


@pytest.fixture
def llama_server(tmp_path):  # -> a stand-in llama-server binary
    binary = tmp_path / "llama-server"
    binary.write_text(LLAMA_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    return str(binary)


def test_llama_server_columns_each_start_a_server_with_their_flags(llama_server):
    configs = {"ngram-simple@3/10": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3"]}
    peer = LlamaServerPeer("m.gguf", 2, configs=configs, binary=llama_server)
    try:
        assert peer.lookups == ["llama-server ngram-simple@3/10"] and "version: 0 (stand-in)" in peer.caption
        tokens, seconds, info = peer.generate("llama-server ngram-simple@3/10", [1, 2], 8, [2],
                                              dict(temperature=1.0, top_p=0.9), 4)
        assert tokens == [5, 6, 7, 2] and info == dict(ttft=0.003) and seconds > 0
        tokens, _, _ = peer.generate("llama-server plain", [1], 3, [7], dict(temperature=0.0), 4)
        assert tokens == [5, 6, 7]
        asked = peer.servers["ngram-simple@3/10"].post("/completion", dict(n_predict=1))  # what the stand-in saw last
        assert asked["argv"][asked["argv"].index("-m") + 1] == "m.gguf" and "-np" in asked["argv"]
        assert asked["argv"][asked["argv"].index("--spec-type") + 1] == "ngram-simple"
        plain = peer.servers["plain"].post("/completion", dict(n_predict=1))["argv"]
        assert "--spec-type" not in plain and plain[plain.index("-t") + 1] == "2"
    finally:
        peer.close()
    assert all(server.proc.poll() is not None for server in peer.servers.values())


def test_llama_server_sends_the_request_as_ours_reads_it(llama_server, monkeypatch):
    peer = LlamaServerPeer("m.gguf", 2, configs={}, binary=llama_server)
    sent = []
    post = peer.servers["plain"].post
    monkeypatch.setattr(peer.servers["plain"], "post", lambda path, body: sent.append(body) or post(path, body))
    try:
        peer.generate("llama-server plain", [1, 2, 3], 8, [2], dict(temperature=1.0, top_p=0.9), 4)
        peer.generate("llama-server plain", [1], 8, [2], dict(temperature=0.0), 5)
    finally:
        peer.close()
    sampled, greedy = sent
    assert sampled["prompt"] == [1, 2, 3] and sampled["n_predict"] == 8 and sampled["seed"] == 4
    assert sampled["cache_prompt"] is False and sampled["return_tokens"] is True  # read whole; ids back
    assert (sampled["temperature"], sampled["top_p"], sampled["top_k"], sampled["min_p"]) == (1.0, 0.9, 0, 0.0)
    assert sampled["repeat_penalty"] == 1.0 and greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0


def test_llama_server_that_cannot_start_says_so_in_one_line(llama_server, tmp_path, monkeypatch):
    started = []
    init = peers.HTTPServer.__init__
    monkeypatch.setattr(peers.HTTPServer, "__init__", lambda self, *a, **kw: started.append(self) or init(self, *a, **kw))
    with pytest.raises(SystemExit, match="(?s)it ended while starting .*unknown speculative type"):
        LlamaServerPeer("m.gguf", 2, configs={"x": ["--spec-type", "broken"]}, binary=llama_server)
    assert len(started) == 2 and all(server.proc.poll() is not None for server in started)  # plain's ended too
    with pytest.raises(SystemExit, match="bash scripts/setup_llamacpp.sh --server builds it"):
        LlamaServerPeer("m.gguf", 2, binary=str(tmp_path / "nothing"))
