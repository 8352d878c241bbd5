"""
Seeing a round: what each round of speculative_generate drafted, kept, rejected and drew, in colour on a terminal
(sample.py --show rounds) and as one self-contained page that steps through the rounds (sample.py --trace FILE.html).

The picture is Leviathan et al. 2023 (arXiv:2211.17192), Figure 1: a round's drafts in green where the target kept
them, the first rejected draft in red and struck through, then the target's correction, drawn from
norm(max(0, p - q)), in blue; after a round that kept every draft, the bonus token from p_K in magenta. A round
with K = 0 (a call's last token, or just before the window slides) emits one plain target token, not coloured.

How the data is taken. Recorder wraps, for the length of a `with` block, the functions of speculative.py that
every verifier calls as module attributes: round_for (where a round starts and ends), draft_tokens (the drafts),
score (p), coin and sample (the coins' values, the correction or bonus). It is the door the tests' enumeration of
every branch uses. Each wrapper calls the real function and draws the same random numbers (coin's uniform is
drawn by speculative.uniform, as coin draws it), so the tokens are exactly those of a run without it
(tests/test_show.py). A tree round (verifiers/tree.py) drafts through its own draft_tree: its rounds show the
accepted path and the token after it, without the rejected nodes. Batches (engine/batched.py) record their
drafts in BatchStats.drafts, so --show rounds colours every row.

The page opens at round N when its address ends in #round=N (FILE.html#round=12), for a link on a slide. It is laid
out for a 1024x768 window (a projector's): the round, under the terminal's key to the colours (KEY), beside Theorem
3.8's plot, so both show without scrolling (tests/test_trace_page.py measures it).

What it leaves out: the tree's rejected nodes, and p and q in batches (only the drafts are kept there).
"""

import html
import json
import os
import statistics

import speculative

ROUND_LIMIT = 2000  # rounds a page keeps (the first ones); the page says when a run had more
TOP = 5  # alternatives shown beside each drafted token, and for each correction or bonus


class Round:
    """One round as recorded: tokens[t:] before it were final; K drafts; `kept` of them kept."""

    def __init__(self, t, K, verify):
        self.t, self.K, self.verify, self.kept, self.tested = t, K, verify, None, None
        self.drafts = None  # the K drafted ids (chain verifiers), or None (a tree)
        self.q, self.p = [], []  # per drafted position: (q(x), top ids and probabilities) of the draft, of the target
        self.coins = []  # (probability it tested, the uniform u it drew): kept when u < probability
        self.draws = []  # (top ids and probabilities, the id drawn): the correction or the bonus, after the drafts


def top(dist, n=TOP):  # (V,) probabilities -> [(id, probability)] of the n most likely
    values, ids = dist.float().topk(min(n, dist.size(-1)))
    return [(i, round(v, 4)) for i, v in zip(ids.tolist(), values.tolist())]


class Recorder:
    """with Recorder() as rec: speculative_generate(...) fills rec.rounds, one Round per round. detail=True also keeps
    p and q of every drafted token with their top alternatives, the coins and the distribution of each draw (the
    page needs them; the terminal's colours need the drafts only)."""

    NAMES = ("round_for", "draft_tokens", "score", "coin", "sample")

    def __init__(self, detail=False):
        self.detail, self.rounds, self.current, self.drafting = detail, [], None, False

    def __enter__(self):
        self.real = {name: getattr(speculative, name) for name in self.NAMES}
        for name in self.NAMES:
            setattr(speculative, name, getattr(self, name))
        return self

    def __exit__(self, *exc):
        for name, fn in self.real.items():
            setattr(speculative, name, fn)

    def round_for(self, verify, k, **params):
        one_round = self.real["round_for"](verify, k, **params)

        def recorded(target, draft, tokens, K, probs, generator):
            self.current = Round(len(tokens), K, verify)
            try:
                result = one_round(target, draft, tokens, K, probs, generator)  # kept, or (kept, tested)
                r = self.current
                r.kept, r.tested = speculative.kept_and_tested(result, K)
            finally:
                self.rounds.append(self.current)
                self.current = None
            return result
        return recorded

    def draft_tokens(self, draft, tokens, k, probs, generator):
        t, self.drafting = len(tokens), True
        try:
            qs = self.real["draft_tokens"](draft, tokens, k, probs, generator)
        finally:
            self.drafting = False
        if self.current is not None:
            self.current.drafts = tokens[t:t + k]
            if self.detail:
                self.current.q = [(q[x].item(), top(q)) for q, x in zip(qs, tokens[t:t + k])]
        return qs

    def score(self, target, tokens, k, probs):
        logits, p = self.real["score"](target, tokens, k, probs)
        if self.current is not None and self.detail:  # p of each draft, and of the position after them
            xs = tokens[len(tokens) - k:] + [None]
            self.current.p = [(p[i, x].item() if x is not None else None, top(p[i])) for i, x in enumerate(xs)]
        return logits, p

    def coin(self, prob, generator=None):  # speculative.coin, with the uniform it compares kept
        u = speculative.uniform(generator)
        if self.current is not None and self.detail:
            self.current.coins.append((prob, u))
        return u < prob

    def sample(self, probs, generator=None):
        x = self.real["sample"](probs, generator)
        if self.current is not None and not self.drafting and self.detail:
            self.current.draws.append((top(probs), x))
        return x


# ---- the terminal: colours (ANSI SGR), or the same in plain characters -------------------------------------------

COLOURS = {"kept": "32", "rejected": "9;31", "correction": "34", "bonus": "35"}  # green; struck, red; blue; magenta
MARKS = {"rejected": ("~~", "~~"), "correction": ("[", "]"), "bonus": ("{", "}"), "target": ("<", ">")}


def use_colour(choice, stream):  # --color auto|always|never, FORCE_COLOR, NO_COLOR -> colours or plain characters?
    if choice != "auto":
        return choice == "always"
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return not os.environ.get("NO_COLOR") and stream.isatty()


def styled(kind, text, colour):
    if kind == "rejected":  # shown where it was proposed: a newline drafted and rejected stays on its line
        text = text.replace("\n", "\u21b5")
    if colour:
        # subtle: struck text opens with its own SGR 9, so "delete every SGR 9 span" recovers the plain sample
        return f"\x1b[{COLOURS[kind]}m{text}\x1b[0m" if kind in COLOURS else text
    left, right = MARKS.get(kind, ("", ""))
    return f"{left}{text}{right}"


KEY = [("kept", "kept draft"), ("rejected", "rejected draft"), ("correction", "correction (from the residual)"),
       ("bonus", "bonus token (every draft kept)"), ("target", "target token (K = 0)")]  # the terminal's and the page's


def legend(colour):
    return "rounds: " + ", ".join(styled(kind, word, colour) for kind, word in KEY) + (
        "" if colour else "; unmarked: a kept draft, or the prompt")


def kinds(K, kept, emitted, rejected=None):  # -> the kind of each emitted token of a round
    """rejected: did the round reject draft kept + 1 (default: kept < K)? A round that stopped without a rejection
    (a Verifier's (kept, tested) with tested == kept) draws its last token from p, as after all K: a bonus."""
    rejected = kept < K if rejected is None else rejected
    return ["target" if K == 0 else "kept" if j < kept else "correction" if rejected else "bonus"
            for j in range(emitted)]


def round_text(decode, before, emitted, K, kept, drafts, colour, rejected=None):
    """The text of one round's emitted ids, each token styled by where it came from; the rejected draft (drafts[kept],
    when known) is shown struck where it was proposed, before its correction. before: the ids the text so far holds
    (prompt included), for decoding each piece as the whole text decodes it."""
    ids, text, spans = list(before), decode(list(before)), []  # spans: [kind, text], neighbours of one kind merged
    for x, kind in zip(emitted, kinds(K, kept, len(emitted), rejected)):
        if kind == "correction" and drafts is not None and kept < len(drafts):
            spans.append(["rejected", decode(ids + [drafts[kept]])[len(text):]])
        ids.append(x)
        after = decode(ids)  # subtle: each piece as the whole text decodes it (BPE pieces can merge)
        if spans and spans[-1][0] == kind:
            spans[-1][1] += after[len(text):]
        else:
            spans.append([kind, after[len(text):]])
        text = after
    return "".join(styled(kind, text, colour) for kind, text in spans)


def piece(decode, ids, x):  # the text token x adds after ids, as decoding the whole text gives it
    return decode(ids + [x])[len(decode(ids)):]


def sample_text(decode, prompt, new, rounds, drafts, colour):
    """A whole sample's text after its prompt, styled round by round. rounds: (t, K, kept) of its rounds, in order;
    drafts: the drafted ids of each (None where unknown)."""
    tokens, out = list(prompt) + list(new), []
    for (t, K, kept), drafted in zip(rounds, drafts):  # a stop sequence can end the last round early
        out.append(round_text(decode, tokens[:t], tokens[t:min(t + kept + 1, len(tokens))], K, kept, drafted, colour))
    return "".join(out)


# ---- the page: one HTML file, no network -------------------------------------------------------------------------

def page_data(decode, samples, verify, setting, measured):
    """-> the page's data, JSON-ready. samples: [(prompt ids, new ids, [Round])]; measured: alpha, c, v, K, speedup."""
    text = lambda x: decode([x])
    rounds, total = [], 0
    for s, (prompt, new, recorded) in enumerate(samples):
        tokens, made, calls = list(prompt) + list(new), 0, 0
        for r in recorded:
            total += 1
            end = min(r.t + r.kept + 1, len(tokens))
            made, calls = made + end - r.t, calls + 1
            if len(rounds) >= ROUND_LIMIT:
                continue
            rejected = r.drafts[r.kept] if r.drafts is not None and r.kept < min(r.tested, len(r.drafts)) else None
            rounds.append(dict(
                sample=s + 1, t=r.t - len(prompt), K=r.K, kept=r.kept, verify=r.verify,
                context=decode(tokens[max(0, r.t - 60):r.t])[-60:],
                emitted=[[text(x), kind] for x, kind in zip(tokens[r.t:end], kinds(r.K, r.kept, end - r.t, r.tested > r.kept))],
                drafts=None if r.drafts is None else [text(x) for x in r.drafts],
                rejected=None if rejected is None else text(rejected),
                q=[[qx, [[text(i), v] for i, v in alts]] for qx, alts in r.q],
                p=[[px, [[text(i), v] for i, v in alts]] for px, alts in r.p],
                coins=[[round(prob, 4), round(u, 4)] for prob, u in r.coins],
                draws=[[text(x), [[text(i), v] for i, v in alts]] for alts, x in r.draws],
                per_call=round(made / calls, 3)))
    return dict(rounds=rounds, total=total, limit=ROUND_LIMIT, verify=verify, setting=setting, measured=measured)


def measured_point(stats_list, step_seconds):
    """alpha, median K, c and v of a run (Stats of each sample; step_seconds: one one-token target forward), and
    its speedup over plain sampling at that step: tokens/s against 1 / step_seconds."""
    rounds = [r for s in stats_list for r in s.rounds]
    kept = sum(a for _, _, a in rounds)
    rejections = sum(1 for _, K, a in rounds if a < K)
    draft_times = [x for s in stats_list for x in s.draft_times[1:]]  # [0]: the prompt
    target_times = [x for s in stats_list for x in s.target_times[1:]]
    tokens, seconds = sum(s.new_tokens for s in stats_list), sum(s.total_time for s in stats_list)
    return dict(alpha=round(kept / max(kept + rejections, 1), 4), K=statistics.median(K for _, K, _ in rounds),
                c=round(statistics.median(draft_times) / step_seconds, 4) if draft_times else None,
                v=round(statistics.median(target_times) / step_seconds, 4) if target_times else None,
                speedup=round(tokens / seconds * step_seconds, 3) if seconds else None)


def write_page(path, data):
    """One self-contained HTML file: the data, the style and the script inline, nothing fetched."""
    key = ", ".join(f'<span class="{kind}">{html.escape(word)}</span>' for kind, word in KEY)
    page = PAGE.replace("<!--KEY-->", key).replace("/*DATA*/null",
                                                   json.dumps(data, ensure_ascii=True).replace("</", "<\\/"))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)


def rounds_html(decode, prompt, new, recorded):
    """A sample's rounds as HTML spans in the terminal's colours (for a notebook cell, or a picture)."""
    css = {"kept": "color:#1a7f37", "rejected": "color:#cf222e;text-decoration:line-through",
           "correction": "color:#0550ae;font-weight:bold", "bonus": "color:#8250df;font-weight:bold", "target": ""}
    tokens, out = list(prompt) + list(new), [html.escape(decode(list(prompt)))]
    for r in recorded:
        end = min(r.t + r.kept + 1, len(tokens))
        ids = tokens[:r.t]
        for x, kind in zip(tokens[r.t:end], kinds(r.K, r.kept, end - r.t, r.tested > r.kept)):
            if kind == "correction" and r.drafts is not None and r.kept < len(r.drafts):
                text = piece(decode, ids, r.drafts[r.kept]).replace("\n", "\u21b5")
                out.append(f'<span style="{css["rejected"]}">{html.escape(text)}</span>')
            out.append(f'<span style="{css[kind]}">{html.escape(piece(decode, ids, x))}</span>')
            ids.append(x)
    body = "".join(out)
    return (f'<pre style="white-space:pre-wrap;font-size:14px;line-height:1.4">{body}</pre>'
            f'<div style="font-size:13px"><span style="{css["kept"]}">kept draft</span> · '
            f'<span style="{css["rejected"]}">rejected draft</span> · <span style="{css["correction"]}">correction'
            f'</span> · <span style="{css["bonus"]}">bonus token</span> · plain: target token (K = 0) or prompt</div>')


PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>speculative sampling: the rounds of one run</title>
<style>
body{font-family:system-ui,sans-serif;margin:.6em;max-width:80em;color:#1f2328}
h1{font-size:1.15em;margin:.1em 0 .3em} h2{font-size:.95em;margin:.3em 0 .1em}
#main{display:grid;grid-template-columns:minmax(0,1fr) 20.5em;gap:.6em;align-items:start}
#round{overflow-x:auto} #theory{position:sticky;top:.5em}  /* the plot stays in view beside a long round */
@media (max-width:50em){#main{grid-template-columns:minmax(0,1fr)}}
.panel{border:1px solid #d0d7de;border-radius:6px;padding:.5em .7em}
pre{white-space:pre-wrap;margin:.2em 0;font-size:15px}
#key{font-size:13px;margin:.1em 0 .2em} #key span{padding:0 2px}
.kept{color:#1a7f37;background:#dafbe1} .rejected{color:#cf222e;text-decoration:line-through;background:#ffebe9}
.correction{color:#0550ae;background:#ddf4ff;font-weight:bold} .bonus{color:#8250df;background:#fbefff;font-weight:bold}
.target{color:#1f2328} .ctx{color:#656d76}
table{border-collapse:collapse;font-size:13px} td,th{border-bottom:1px solid #eaeef2;padding:2px 4px;text-align:left}
.bar{display:inline-block;height:9px;background:#54aeff;vertical-align:middle;margin-right:4px}
.pbar{background:#4ac26b} .alts{font-family:monospace;white-space:nowrap} .nw{white-space:nowrap}
button{font-size:1em;margin-right:.4em} input[type=range]{width:11em;vertical-align:middle}
#theory div{margin:.1em 0} #theory p{margin:.3em 0} #theory h2{font-size:.85em}
#note{color:#9a6700}
</style></head><body>
<h1>Speculative sampling, round by round</h1>
<div id="note"></div>
<div id="main">
<div class="panel" id="round">
 <div><button id="prev" title="left arrow">&larr; previous</button><button id="next" title="right arrow">next &rarr;</button>
 <b id="where"></b> <span id="percall"></span></div>
 <h2>the round</h2>
 <div id="key">key: <!--KEY-->; <span class="ctx">grey: the text before the round</span></div>
 <pre id="text"></pre>
 <div id="summary"></div>
 <h2>each tested draft: q (the draft's), p (the target's), min(1, p/q), and the coin</h2>
 <table id="tested"></table>
 <h2 id="drawhead">the token after the drafts</h2>
 <div id="draw"></div>
</div>
<div class="panel" id="theory">
 <h2>Theorem 3.8 (Leviathan et al.): <span class="nw">speedup = (1 - &alpha;<sup>K+1</sup>) / ((1 - &alpha;)(K c + v))</span></h2>
 <div>&alpha; <input type="range" id="a" min="0" max="0.99" step="0.01"> <span id="av"></span></div>
 <div>c <input type="range" id="c" min="0" max="1" step="0.005"> <span id="cv"></span></div>
 <div>v <input type="range" id="v" min="1" max="3" step="0.01"> <span id="vv"></span></div>
 <div>K <input type="range" id="k" min="1" max="16" step="1"> <span id="kv"></span></div>
 <p id="speed"></p>
 <svg id="plot" width="310" height="210" role="img" aria-label="speedup against K"></svg>
</div>
</div>
<script>
"use strict";
const DATA = /*DATA*/null;
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const vis = s => esc(s).replace(/\n/g, "\u21b5").replace(/ /g, "\u2423");  // newline and space made visible
const R = DATA.rounds;
let i = 0;
function bars(alts, cls, n = alts.length) {  // the n most likely tokens, each with a bar as long as its probability
  return alts.slice(0, n).map(([tok, v]) => `<span class="alts"><span class="bar ${cls}" style="width:${Math.round(40 * v)}px"></span>${vis(tok)} ${v.toFixed(3)}</span>`).join(" ");
}
const every = alts => esc(alts.map(([tok, v]) => `${tok} ${v.toFixed(3)}`).join(", ")).replace(/"/g, "&quot;");  // a tooltip
function show(n) {
  i = Math.max(0, Math.min(R.length - 1, n));
  const r = R[i];
  $("where").textContent = `round ${i + 1} of ${R.length} (sample ${r.sample}, new token ${r.t}, verify ${r.verify})`;
  $("percall").textContent = `tokens per target call so far in this sample: ${r.per_call.toFixed(2)}`;
  let body = `<span class="ctx">${esc(r.context)}</span>`;
  r.emitted.forEach(([tok, kind], j) => {
    if (kind === "correction" && r.rejected !== null) body += `<span class="rejected">${vis(r.rejected)}</span>`;
    body += `<span class="${kind === "target" ? "" : kind}">${esc(tok)}</span>`;
  });
  $("text").innerHTML = body;
  const drafts = r.drafts === null ? "a tree: its accepted path is shown" : r.drafts.map(vis).join(" | ");
  $("summary").innerHTML = `K = <b id="K">${r.K}</b> drafts: <span id="drafts">${drafts}</span>; kept <b id="kept">${r.kept}</b>`;
  let rows = "<tr><th>draft</th><th>token</th><th>q(x)</th><th>p(x)</th><th>min(1, p/q)</th><th>coin u</th><th>q's top 3</th><th>p's top 3</th></tr>";
  r.q.forEach(([qx, qalts], j) => {
    const [px, palts] = r.p[j] || [null, []];
    const ratio = px === null ? null : Math.min(1, px / qx);
    const coin = r.verify === "tokenwise" && j < r.coins.length ? r.coins[j] : null;
    rows += `<tr class="pos"><td>${j + 1}</td><td>${vis(r.drafts[j])}</td><td class="qx">${qx.toFixed(4)}</td>` +
      `<td class="px">${px === null ? "" : px.toFixed(4)}</td><td>${ratio === null ? "" : ratio.toFixed(4)}</td>` +
      `<td>${coin ? "<span class=\"nw\">" + coin[1].toFixed(4) + (coin[1] < coin[0] ? " &lt; " : " &ge; ") + coin[0].toFixed(4) + "</span>" + (coin[1] < coin[0] ? " kept" : " rejected") : ""}</td>` +
      `<td title="${every(qalts)}">${bars(qalts, "", 3)}</td><td title="${every(palts)}">${bars(palts, "pbar", 3)}</td></tr>`;
  });
  if (r.verify !== "tokenwise" && r.coins.length)
    rows += `<tr><td colspan="8">coins of this verifier, in order (u against the probability it tested): ${r.coins.map(([p, u]) => u.toFixed(4) + (u < p ? " < " : " >= ") + p.toFixed(4)).join(", ")}</td></tr>`;
  $("tested").innerHTML = r.q.length ? rows : "<tr><td>no chain of drafts recorded (K = 0, or a tree)</td></tr>";
  const last = r.emitted.length ? r.emitted[r.emitted.length - 1] : null;
  const draw = r.draws.length ? r.draws[r.draws.length - 1] : null;
  $("drawhead").textContent = last && last[1] === "correction" ? "the correction, drawn from norm(max(0, p - q))" :
    last && last[1] === "bonus" ? "the bonus token, drawn from p after the last draft" : "the token after the drafts";
  $("draw").innerHTML = draw ? `drew <b id="drew">${vis(draw[0])}</b> from: ${bars(draw[1], "pbar")}` : "";
}
function speedup(a, c, v, K) { return (1 - Math.pow(a, K + 1)) / ((1 - a) * (K * c + v)); }
function theory() {
  const a = +$("a").value, c = +$("c").value, v = +$("v").value, K = +$("k").value;
  $("av").textContent = a.toFixed(2); $("cv").textContent = c.toFixed(3); $("vv").textContent = v.toFixed(2); $("kv").textContent = K;
  const m = DATA.measured;
  $("speed").innerHTML = `predicted ${speedup(a, c, v, K).toFixed(2)}&times;; this run: &alpha; ${m.alpha}, median K ${m.K}, c ${m.c}, v ${m.v}, measured ${m.speedup}&times; (dot)`;
  const W = 310, H = 210, ymax = 4, x = k => 30 + (k - 1) * (W - 40) / 15, y = s => 8 + (ymax - s) * (H - 42) / ymax;
  let path = "";
  for (let k = 1; k <= 16; k++) path += (k === 1 ? "M" : "L") + x(k).toFixed(1) + "," + y(Math.min(ymax, speedup(a, c, v, k))).toFixed(1);
  let svg = [1, 2, 3, 4].map(s => `<line x1="30" y1="${y(s)}" x2="${W - 10}" y2="${y(s)}" stroke="#d0d7de"/><text x="2" y="${y(s) + 4}" font-size="11">${s}&times;</text>`).join("") +
    `<line x1="30" y1="${y(0)}" x2="${W - 10}" y2="${y(0)}" stroke="#656d76"/>`;
  for (let k = 1; k <= 16; k++)  // the K axis: a tick at every K, a number at K = 1 and every even K
    svg += `<line class="ktick" x1="${x(k)}" y1="${y(0)}" x2="${x(k)}" y2="${y(0) + 4}" stroke="#656d76"/>` +
      (k === 1 || k % 2 === 0 ? `<text class="klabel" x="${x(k)}" y="${y(0) + 15}" font-size="11" text-anchor="middle">${k}</text>` : "");
  svg += `<text x="${(30 + W - 10) / 2}" y="${H - 3}" font-size="11" text-anchor="middle">K, drafts per round</text>` +
    `<path d="${path}" fill="none" stroke="#0969da" stroke-width="2"/>`;
  if (m.speedup !== null) svg += `<circle cx="${x(m.K)}" cy="${y(Math.min(ymax, m.speedup))}" r="5" fill="#cf222e"/>`;
  $("plot").innerHTML = svg;
}
const m = DATA.measured;
$("c").max = Math.max(1, Math.ceil(m.c || 0)); $("v").max = Math.max(3, Math.ceil(m.v || 0));  // room for this run's c and v
$("a").value = m.alpha; $("c").value = m.c === null ? 0.1 : m.c; $("v").value = m.v === null ? 1 : m.v; $("k").value = m.K;
["a", "c", "v", "k"].forEach(id => $(id).addEventListener("input", theory));
$("prev").addEventListener("click", () => show(i - 1));
$("next").addEventListener("click", () => show(i + 1));
document.addEventListener("keydown", e => { if (e.key === "ArrowRight") show(i + 1); if (e.key === "ArrowLeft") show(i - 1); });
$("note").textContent = DATA.total > R.length ? `This run had ${DATA.total} rounds; the page keeps the first ${R.length} (at most ${DATA.limit}).` : "";
const asked = /round=(\d+)/.exec(location.hash);  // FILE.html#round=12 opens at round 12
if (R.length) show(asked ? +asked[1] - 1 : 0); else $("round").textContent = "no rounds: plain sampling has none";
theory();
</script></body></html>
"""
