"""One source per number: what the README, docs/ and the notebooks' text quote about a run equals that run's JSON.

Each entry of QUOTES is (file, the run's JSON it quotes, how the quoted text is written from the JSON). A run that is
redone rewrites its JSON (bench.py --json); this test then names every sentence to regenerate from it. Whitespace is
compared loosely (a quote may wrap across lines); the numbers are compared as the text prints them. The planted test
at the end changes every number of every run and expects each quote to fail: a quote that passes anyway checks
nothing."""

import json
import os
import statistics

import pytest

from benchmarks.suite import readme_lines
from benchmarks.sweep import readme_cells
from benchmarks.theory import predicted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_run(name):  # -> notebooks/NAME, the run's JSON
    with open(os.path.join(ROOT, "notebooks", name)) as fh:
        return json.load(fh)


def text_of(path):  # -> the file's words, whitespace folded; a notebook's markdown cells only (its outputs are runs)
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".ipynb"):
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
    return " ".join(text.split())


def span(values, fmt="{:.2f}", sep="-"):  # [1.19, 1.28, 1.2] -> "1.19-1.28"; one value alone when all round alike
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}{sep}{high}"


# ---- how each quote is written from its run ----------------------------------------------------------------------

def sweep_rows(run, decoder, setting="t1.0"):  # -> (auto's row, the best fixed K's row) of a bench.py --json sweep
    rows = [r for r in run["rows"] if r["setting"] == setting and r["decoder"] == decoder]
    return next(r for r in rows if r["K"] == "auto"), max((r for r in rows if r["K"] != "auto"),
                                                          key=lambda r: r["speedup"])


def glance_row(run, decoder):  # the README's table: a row's cells after the CPU and the target (bench.py's README row)
    return readme_cells(*sweep_rows(run, decoder))


def cpus_compared(amd, intel):  # the sentence under the table: the target's and the draft's speed, Intel over AMD
    (a, a_best), (i, i_best) = sweep_rows(amd, "fast"), sweep_rows(intel, "fast")
    target = i["plain_tps"] / a["plain_tps"]
    draft = target * a_best["c"] / i_best["c"]  # a draft step is c target steps
    return (f"the Intel Xeon runs the target {target:.1f}× as fast as the AMD EPYC, the draft only {draft:.1f}× as "
            f"fast (c {i_best['c']:.3f} against {a_best['c']:.3f})")


def gpu_prediction(amd):  # Theorem 3.8 with v = 1 and c = 2/6 (a 2-layer draft, a 6-layer target) at the best K
    alpha = sweep_rows(amd, "fast")[1]["alpha"]
    K, best = max(((K, predicted(alpha, K, 2 / 6)) for K in range(1, 9)), key=lambda x: x[1])
    return f"about {best:.2f}× at K = {K} (α {alpha:.3f} from the AMD EPYC"


def chat_table(run, draft="suffix@auto", setting="t0"):  # the README's real-model table: plain, copied, the draft
    labels = [o["draft"] for o in run["overall"] if o["setting"] == setting]
    lines = readme_lines(run["rows"], run["overall"], labels, list(run["categories"]), run["copied"], setting)
    return "\n".join(lines[2:4] + [line for line in lines if line.startswith(f"| `{draft}` |")])


def overall(run, draft, setting, key="speedup"):
    return next(o[key] for o in run["overall"] if o["draft"] == draft and o["setting"] == setting)


def row(run, category, setting, draft):
    return next(r for r in run["rows"] if (r["category"], r["setting"], r["draft"]) == (category, setting, draft))


def fmt_of(run, name):
    return next(f for f in run["formats"] if f["format"] == name)


def copied(run, categories, setting="t0"):  # -> the share of answer tokens copied, over those categories: "42-45%"
    return span([statistics.mean(run["copied"][f"{cat},{setting}"]) for cat in categories], "{:.0%}", "-").replace(
        "%-", "-")


BENCH_AMD, BENCH_INTEL, CHAT, FORMATS = "bench_cpu.json", "bench_cpu_intel.json", "chat_suite_cpu.json", \
    "profile_cpu_formats.json"
LOOKUPS = ["ngram@auto", "suffix@auto", "suffix:suffix_corpus=python@auto"]

SELF, ROUTES = "chat_suite_self_int4_avx2.json", "profile_routes_avx2_formats.json"  # the int4 draft, the routes
int4_route = lambda run: next(r for r in run["kernels"] if r["route"].startswith("int4"))
Q41, Q41_SUITE, INT4_SUITE = "profile_q4_1_avx2_formats.json", "chat_suite_q4_1_avx2.json", "chat_suite_int4_avx2.json"
Q41F, Q41F_SUITE = "profile_q4_1_fused_avx2_formats.json", "chat_suite_q4_1_fused_avx2.json"  # a block a call


def q4_1_step(run, name=Q41):  # -> the q4_1 format against int4, whole forwards interleaved: step and v(5), v(9)
    q, i = fmt_of(run(name), "q4_1"), fmt_of(run(name), "int4")
    return ("a one-token step of {:.1f} ms against int4's {:.1f}, a forward of 5 tokens {:.2f} steps against {:.2f}, "
            "of 9 tokens {:.2f} against {:.2f}").format(q["step_ms"], i["step_ms"], q["v"]["5"], i["v"]["5"],
                                                       q["v"]["9"], i["v"]["9"])


def plain_tps(run, setting="t0"):  # -> the span of plain tokens/s over a suite's rows: "54-88"
    return span([r["plain_tps"] for r in run["rows"] if r["setting"] == setting], "{:.0f}")


def fused_suite(run):  # -> the suite on q4_1 with a block a call, beside the suite before it
    return ("`suffix` gains {:.2f}x overall over that plain at T = 0 and {:.2f}x at T = 1, the plain answers coming at "
            "{} tokens/s (their prompt reads included) where they came at {} before").format(
        overall(run(Q41F_SUITE), "suffix@auto", "t0"), overall(run(Q41F_SUITE), "suffix@auto", "t1.0"),
        plain_tps(run(Q41F_SUITE)), plain_tps(run(Q41_SUITE)))

PEER = "chat_suite_peers_avx2_llamacpp.json"  # llama.cpp's binding beside ours (bench.py --peer llamacpp)
VLLM = "chat_suite_peers_vllm_avx2_vllm.json"  # vLLM's CPU build beside ours (bench.py --peer vllm)
SERVER = "chat_suite_peers_server_avx2_llama_server.json"  # llama.cpp's C++ server (bench.py --peer llama-server)


def peer_means(run, setting):  # -> {column: tokens/s}, the mean over the categories, as the table's overall row
    rows = [r for r in run["rows"] if r["setting"] == setting]
    return {c: statistics.mean(r["tps"][c] for r in rows) for c in rows[0]["tps"]}


def peer_ratios(run):  # -> (ours plain / its plain, ours suffix / its best lookup) at T = 0 and at T = 1
    out = []
    for st in ("t0", "t1.0"):
        m = peer_means(run, st)
        out.append((m["ours plain"] / m[f"{run['peer']} plain"],
                    m["ours suffix@auto"] / max(m[c] for c in run["lookups"])))
    return out


def peer_agreements(run):  # -> (categories where its lookups kept its own plain greedy text, of; prompts where its
    t0 = [r for r in run["rows"] if r["setting"] == "t0"]  # plain greedy equalled ours, of) at T = 0
    kept = sum(all(r["greedy_equal"][c] for c in run["lookups"]) for r in t0)
    return kept, len(t0), sum(r["same_as_ours"] for r in t0), sum(r["prompts"] for r in t0)


def vllm_text(run):
    r = run(VLLM)
    (p0, s0), (p1, _) = peer_ratios(r)
    m0 = peer_means(r, "t0")
    best = max(r["lookups"], key=lambda c: m0[c])
    return ("On that CPU our plain ran at {:.2f}x vLLM's plain at T = 0 and {:.2f}x at T = 1 (the means over the "
            "categories), and our `suffix` at {:.2f}x its best lookup at T = 0. Its lookups paid on its own plain at "
            "T = 0 (`{}` {:.2f}x), kept its own greedy text in {} of {} categories, and its plain greedy equalled ours "
            "on {} of {} prompts").format(p0, p1, s0, best.split()[-1], m0[best] / m0["vLLM plain"],
                                          *peer_agreements(r))


def peer_text(run):
    (p0, s0), (p1, s1) = peer_ratios(run(PEER))
    kept, n, same, prompts = peer_agreements(run(PEER))
    return ("our plain ran at {:.2f}x its plain at T = 0 and {:.2f}x at T = 1 (the means over the categories), and our "
            "`suffix` at {:.2f}x its faster lookup at T = 0 and {:.2f}x at T = 1. The binding's lookup "
            "(`LlamaPromptLookupDecoding`, num_pred_tokens 4 and 10, drafting in Python) was slower than its own plain "
            "in every category, and its greedy text differed from its own plain greedy in {} of {} categories at T = 0"
            ": its verification computes a batch's rows otherwise than its one-token steps. Its plain greedy equalled "
            "ours on {} of {} prompts").format(p0, p1, s0, s1, n - kept, n, same, prompts)


def server_text(run):
    r = run(SERVER)
    (p0, s0), (p1, _) = peer_ratios(r)
    m0 = peer_means(r, "t0")
    kept, n, same, prompts = peer_agreements(r)
    return ("our plain ran at {:.2f}x its plain at T = 0 and {:.2f}x at T = 1, and our `suffix` at {:.2f}x its faster "
            "C++ lookup at T = 0; its lookups ran at {:.2f}x its own plain at best, and changed its own greedy text in "
            "{} of {} categories; its plain greedy equalled ours on {} of {} prompts").format(
        p0, p1, s0, max(m0[c] for c in r["lookups"]) / m0["llama-server plain"], n - kept, n, same, prompts)


def engines_row(run, name, label):  # -> the README's row for one engine, T = 0, means over the categories
    r = run(name)
    m = peer_means(r, "t0")
    best = max(r["lookups"], key=lambda c: m[c])
    kept, n, same, prompts = peer_agreements(r)
    return "| {} | {:.1f} | {:.1f} (`{}`) | {:.2f}x | {:.2f}x | {} of {} | {} of {} |".format(
        label, m[f"{r['peer']} plain"], m[best], best.split(" ", 1)[1], m["ours plain"] / m[f"{r['peer']} plain"],
        m["ours suffix@auto"] / max(m[f"{r['peer']} plain"], m[best]), kept, n, same, prompts)


QUOTES = [  # (file, the run's JSON, the quoted text from it: a function of load_run)
    ("docs/engines.md", PEER, peer_text),
    ("docs/engines.md", VLLM, vllm_text),
    ("docs/engines.md", SERVER, server_text),
    ("README.md", SERVER, lambda run: engines_row(run, SERVER, "llama.cpp, llama-server")),
    ("README.md", VLLM, lambda run: engines_row(run, VLLM, "vLLM 0.32.0 (CPU build, float32)")),
    ("README.md", BENCH_AMD, lambda run: "| AMD EPYC | float32 " + glance_row(run(BENCH_AMD), "fast")),
    ("README.md", BENCH_INTEL, lambda run: "| float32 " + glance_row(run(BENCH_INTEL), "fast")),
    ("README.md", BENCH_INTEL, lambda run: "| bfloat16 (`--decoder fast-bf16`) " + glance_row(run(BENCH_INTEL),
                                                                                           "fast-bf16")),
    ("README.md", BENCH_AMD, lambda run: cpus_compared(run(BENCH_AMD), run(BENCH_INTEL))),
    ("README.md", BENCH_AMD, lambda run: gpu_prediction(run(BENCH_AMD))),
    ("README.md", "bench_batch.json", lambda run: "K = 4 on the Intel Xeon: {:.2f}× at B = 1, {:.2f}× at B = 64".format(
        *(next(r["speedup"] for r in run("bench_batch.json")["batch_rows"] if r["B"] == B and r["K"] == 4)
          for B in (1, 64)))),
    ("README.md", "suite_cpu.json", lambda run: "({:.2f}× on Shakespeare, T = 1".format(
        row(run("suite_cpu.json"), "plays", "t1.0", "ngram")["speedup"])),
    ("README.md", CHAT, lambda run: chat_table(run(CHAT))),
    ("README.md", CHAT, lambda run: "about the CPU run's τ, {:.2f} at T = 0 and {:.2f} at T = 1".format(
        overall(run(CHAT), "suffix@auto", "t0", "tau"), overall(run(CHAT), "suffix@auto", "t1.0", "tau"))),
    ("README.md", FORMATS, lambda run: "int4 steps at {:.1f} tokens/s where the readable float32 model steps at {:.1f}"
     .format(fmt_of(run(FORMATS), "int4")["tok_s"], fmt_of(run(FORMATS), "eager float32")["tok_s"])),
    ("docs/suite.md", "suite_cpu.json", lambda run: "At T = 1 its speedup is {} to {}".format(*span(
        [r["speedup"] for r in run("suite_cpu.json")["rows"] if r["setting"] == "t1.0" and r["draft"] == "draft"],
        "{:.2f}×", "|").split("|"))),
    ("docs/suite.md", CHAT, lambda run: "copies {} of its answer tokens from the prompt in summaries and questions about "
     "a document, {} in code, {} in a chat's second turn".format(copied(run(CHAT), ["summary", "rag"]),
                                                                 copied(run(CHAT), ["code"]), copied(run(CHAT), ["chat"]))),
    ("docs/suite.md", CHAT, lambda run: "The lookups gain {}x overall at T = 0 (`suffix` {}x in summary, rag and code, "
     "{}x in translation".format(span([overall(run(CHAT), d, "t0") for d in LOOKUPS]),
                                 span([row(run(CHAT), c, "t0", "suffix@auto")["speedup"] for c in ("summary", "rag", "code")]),
                                 span([row(run(CHAT), "translation", "t0", d)["speedup"] for d in LOOKUPS[1:]]))),
    ("docs/suite.md", CHAT, lambda run: "and {}x at T = 1".format(span([overall(run(CHAT), d, "t1.0") for d in LOOKUPS]))),
    ("docs/suite.md", CHAT, lambda run: "predicts the rows within {}".format(span(
        [r["speedup"] / r["with_v"] for r in run(CHAT)["rows"] if r["setting"] == "t0"], "{:.0%}").replace("%-", "-"))),
    ("docs/suite.md", FORMATS, lambda run: "int4 makes the step {:.1f}x cheaper than the readable float32 model".format(
        fmt_of(run(FORMATS), "eager float32")["step_ms"] / fmt_of(run(FORMATS), "int4")["step_ms"])),
    ("docs/suite.md", FORMATS, lambda run: "a forward over 5 tokens costs {:.1f} steps, over 9 tokens {:.1f}".format(
        fmt_of(run(FORMATS), "int4")["v"]["5"], fmt_of(run(FORMATS), "int4")["v"]["9"])),
    ("docs/exactness.md", "profile_cpu_avx2_formats.json", lambda run: "a 256-token prompt took {:.0f} ms in one int4 "
     "forward, {:.0f} ms read so".format(fmt_of(run("profile_cpu_avx2_formats.json"), "int4")["read_own_ms"],
                                        fmt_of(run("profile_cpu_avx2_formats.json"), "int4")["read_ms"])),
    ("notebooks/08_real_llm.ipynb", FORMATS, lambda run: "make a one-token step about {:.1f}x cheaper".format(
        fmt_of(run(FORMATS), "eager float32")["step_ms"] / fmt_of(run(FORMATS), "int4")["step_ms"])),
    ("notebooks/08_real_llm.ipynb", CHAT, lambda run: "{}x overall at T = 0".format(
        span([overall(run(CHAT), d, "t0") for d in LOOKUPS]))),
    ("notebooks/08_real_llm.ipynb", "chat_suite_heads_cpu.json", lambda run: "keeps {:.2f} (EAGLE-3 head) and {:.2f} "
     "(small draft) of its drafts at T = 1 and gains {:.2f}x and {:.2f}x overall, {:.2f}x in math".format(
         overall(run("chat_suite_heads_cpu.json"), "eagle3@auto", "t1.0", "alpha"),
         overall(run("chat_suite_heads_cpu.json"), "small@auto", "t1.0", "alpha"),
         overall(run("chat_suite_heads_cpu.json"), "eagle3@auto", "t1.0"),
         overall(run("chat_suite_heads_cpu.json"), "small@auto", "t1.0"),
         row(run("chat_suite_heads_cpu.json"), "math", "t1.0", "eagle3@auto")["speedup"])),
    ("README.md", SELF, lambda run: "Chen et al.'s regime: {:.2f}× at T = 1 on SmolLM2".format(
        overall(run(SELF), "int4@auto", "t1.0"))),
    ("docs/suite.md", SELF, lambda run: "{:.2f}x overall at T = 0 and {:.2f}x at T = 1, with α {} and τ {}".format(
        overall(run(SELF), "int4@auto", "t0"), overall(run(SELF), "int4@auto", "t1.0"),
        span([overall(run(SELF), "int4@auto", st, "alpha") for st in ("t0", "t1.0")]),
        span([overall(run(SELF), "int4@auto", st, "tau") for st in ("t0", "t1.0")], "{:.0f}"))),
    ("docs/exactness.md", ROUTES, lambda run: "int4 kernel's v(5) is {:.2f} and v(9) {:.2f} there".format(
        *(int4_route(run(ROUTES))["v"][n] for n in ("5", "9")))),
    ("README.md", Q41F, lambda run: "our kernel (`fast-q4_1`, a Llama block a call) steps in {:.1f} ms where int4 takes "
     "{:.1f}, {:.0f} tokens/s, and verifies 5 tokens for {:.2f} steps where int4 takes {:.2f}".format(
         fmt_of(run(Q41F), "q4_1")["step_ms"], fmt_of(run(Q41F), "int4")["step_ms"], fmt_of(run(Q41F), "q4_1")["tok_s"],
         fmt_of(run(Q41F), "q4_1")["v"]["5"], fmt_of(run(Q41F), "int4")["v"]["5"])),
    ("README.md", Q41F_SUITE, lambda run: "`suffix` adds {:.2f}x overall at T = 0 and {:.2f}x at T = 1".format(
        overall(run(Q41F_SUITE), "suffix@auto", "t0"), overall(run(Q41F_SUITE), "suffix@auto", "t1.0"))),
    ("docs/suite.md", Q41, q4_1_step),
    ("docs/suite.md", Q41F, lambda run: q4_1_step(run, Q41F)),
    ("docs/suite.md", Q41F_SUITE, fused_suite),
    ("docs/suite.md", Q41F_SUITE, lambda run: "`suffix`'s c is {} at T = 0 and {} at T = 1, where it was {} and {} "
     "beside the slower step".format(*(span([r["c"] for r in run(name)["rows"] if r["setting"] == st and r["c"] == r["c"]
                                             and r["c"] is not None])
                                       for name in (Q41F_SUITE, Q41_SUITE) for st in ("t0", "t1.0")))),
    ("notebooks/08_real_llm.ipynb", Q41, q4_1_step),
    ("notebooks/08_real_llm.ipynb", Q41F, lambda run: q4_1_step(run, Q41F)),
    ("notebooks/08_real_llm.ipynb", Q41F_SUITE, fused_suite),
    ("docs/suite.md", Q41_SUITE, lambda run: "`suffix` gains {:.2f}x overall over q4_1 plain at T = 0 and {:.2f}x at "
     "T = 1 ({:.2f}x and {:.2f}x over int4 plain)".format(
         overall(run(Q41_SUITE), "suffix@auto", "t0"), overall(run(Q41_SUITE), "suffix@auto", "t1.0"),
         overall(run(INT4_SUITE), "suffix@auto", "t0"), overall(run(INT4_SUITE), "suffix@auto", "t1.0"))),
    ("notebooks/08_real_llm.ipynb", SELF, lambda run: "{:.2f}x overall over float32 plain at T = 1, where the lookups "
     "find nothing to copy (`suffix` {:.2f}x), and {:.2f}x at T = 0".format(
         overall(run(SELF), "int4@auto", "t1.0"), overall(run(SELF), "suffix@auto", "t1.0"),
         overall(run(SELF), "int4@auto", "t0"))),
]


@pytest.mark.parametrize("i", range(len(QUOTES)), ids=[f"{doc}:{src}:{i}" for i, (doc, src, _) in enumerate(QUOTES)])
def test_a_quoted_number_equals_its_run(i):
    doc, source, quote = QUOTES[i]
    expected = " ".join(quote(load_run).split())
    assert expected in text_of(doc), (f"{doc} should quote, from notebooks/{source}: {expected!r}. Regenerate the "
                                      "sentence from the run (or the run, with the command BENCHMARKS.md gives)")


def test_every_quote_fails_when_its_run_changes():
    """Every number of every run scaled, by 1.13, 1.18 or 1.23 in turn (so that ratios change too; counts and K stay):
    each quote then differs from its file's text."""
    count = [0]

    def changed(value):
        if isinstance(value, dict):
            return {k: v if k in ("K", "B") else changed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [changed(v) for v in value]
        if isinstance(value, float):
            count[0] += 1
            return value * (1.13 + 0.05 * (count[0] % 3))
        return value

    for doc, source, quote in QUOTES:
        expected = " ".join(quote(lambda name: changed(load_run(name))).split())
        assert expected not in text_of(doc), f"{doc}: the quote from {source} holds whatever the run says: {expected!r}"
