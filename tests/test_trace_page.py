"""The --trace page in a real browser: headless Chromium (tests/browser.py) opens the page of a real run of the shipped
pair, steps through rounds with the arrow keys, and what it shows must be the run's own: the round's position, K,
the drafts, how many were kept, q(x) and p(x) of a drafted token, the coin; and the console stays free of errors.
CI installs Chromium (.ci/run); only a machine without it and outside CI skips this file."""

import os

import pytest
import torch

import show
from data import Tokenizer
from model import SHIPPED, load_checkpoint
from speculative import speculative_generate
from tests.browser import Chromium, chromium_path

if chromium_path() is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI runs the browser test: install Chromium (apt-get install -y chromium), as .ci/run does")
    pytest.skip("no Chromium here (apt-get install -y chromium); CI runs this file", allow_module_level=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """-> (page path, the recorded rounds, Stats, decode) of one seeded run of the shipped pair."""
    target, meta = load_checkpoint(SHIPPED["target"])
    draft, _ = load_checkpoint(SHIPPED["draft"])
    tok = Tokenizer(meta["tokenizer"])
    prompt = tok.encode("ROMEO:\n")
    with show.Recorder(detail=True) as rec:
        out, stats = speculative_generate(target, draft, torch.tensor([prompt]), 60, k=4, temperature=1.0,
                                          generator=torch.Generator().manual_seed(3))
    data = show.page_data(tok.decode, [(prompt, out[0, len(prompt):].tolist(), rec.rounds)], "tokenwise",
                          dict(temperature=1.0), show.measured_point([stats], 0.004))
    path = tmp_path_factory.mktemp("trace") / "rounds.html"
    show.write_page(path, data)
    return path, rec.rounds, stats, tok.decode, len(prompt)


def text_of(browser, element_id):
    return browser.evaluate(f"document.getElementById({element_id!r}).textContent")


def test_the_page_steps_through_the_runs_rounds_with_the_keys(run):
    path, rounds, stats, decode, n_prompt = run
    with Chromium() as browser:
        browser.open(path.as_uri())
        assert text_of(browser, "where").startswith(f"round 1 of {len(rounds)}")
        for step in range(1, 4):  # three rounds on with the right arrow
            browser.press("ArrowRight")
            t, K, kept = stats.rounds[step]
            assert text_of(browser, "where").startswith(f"round {step + 1} of {len(rounds)} (sample 1, new token "
                                                        f"{t - n_prompt},")
            assert text_of(browser, "K") == str(K) and text_of(browser, "kept") == str(kept)
            r = rounds[step]
            assert text_of(browser, "drafts") == " | ".join(decode([x]).replace("\n", "\u21b5").replace(" ", "\u2423") for x in r.drafts)
            qx = browser.evaluate("[...document.querySelectorAll('#tested .qx')].map(e => e.textContent)")
            px = browser.evaluate("[...document.querySelectorAll('#tested .px')].map(e => e.textContent)")
            assert qx == [f"{q:.4f}" for q, _ in r.q] and px == [f"{p:.4f}" for p, _ in r.p[:K]]
            coins = browser.evaluate("[...document.querySelectorAll('#tested .pos')].map(e => e.children[5].textContent)")
            for j, (prob, u) in enumerate(r.coins):  # token-wise: the coin of draft j, kept where u < min(1, p/q)
                assert coins[j].startswith(f"{u:.4f}") and coins[j].endswith("kept" if u < prob else "rejected")
        browser.press("ArrowLeft")
        assert text_of(browser, "where").startswith(f"round 3 of {len(rounds)}")
        assert "predicted" in text_of(browser, "speed")
        assert browser.errors == [], browser.errors


def test_an_address_ending_in_round_n_opens_that_round(run):
    path, rounds, stats, decode, n_prompt = run
    with Chromium() as browser:
        browser.open(path.as_uri() + "#round=5")
        t, K, kept = stats.rounds[4]
        assert text_of(browser, "where").startswith(f"round 5 of {len(rounds)} (sample 1, new token {t - n_prompt},")
        assert text_of(browser, "kept") == str(kept)
        browser.press("ArrowRight")
        assert text_of(browser, "where").startswith(f"round 6 of {len(rounds)}")
        assert browser.errors == [], browser.errors


def test_the_page_has_the_terminals_key_in_the_colours_of_its_tokens(run):
    path = run[0]
    with Chromium() as browser:
        browser.open(path.as_uri())
        key = browser.evaluate("[...document.querySelectorAll('#key span')].map(e => [e.className, e.textContent])")
        assert key[:len(show.KEY)] == [list(pair) for pair in show.KEY]  # the words of sample.py --show rounds
        style = "(e => [getComputedStyle(e).color, getComputedStyle(e).textDecorationLine])"
        token = ("(kind => {const e = document.createElement('span'); e.className = kind; "
                 "return $('text').appendChild(e);})")  # a token of that kind, where the page puts them
        for kind in ("kept", "rejected", "correction", "bonus"):  # a key entry looks like the tokens it names
            looks = browser.evaluate(f"{style}(document.querySelector('#key .{kind}'))")
            assert looks == browser.evaluate(f"{style}({token}('{kind}'))") and looks[0] != "rgb(31, 35, 40)", kind
        assert browser.errors == [], browser.errors


def test_at_1024x768_the_first_round_and_the_plot_with_its_k_ticks_are_above_the_fold(run):
    path = run[0]
    with Chromium(width=1024, height=768) as browser:
        browser.open(path.as_uri())
        height = browser.evaluate("innerHeight")
        bottom = lambda css: browser.evaluate(f"document.querySelector({css!r}).getBoundingClientRect().bottom")
        for css in ("#key", "#text", "#tested", "#draw", "#plot"):
            assert 0 < bottom(css) <= height, f"{css} ends at {bottom(css):.0f} px, below the window's {height} px"
        assert browser.evaluate("document.documentElement.scrollWidth <= innerWidth"), "the page scrolls sideways"
        ticks = browser.evaluate("document.querySelectorAll('#plot .ktick').length")
        labels = browser.evaluate("[...document.querySelectorAll('#plot .klabel')].map(e => +e.textContent)")
        assert ticks == 16 and labels == [1, 2, 4, 6, 8, 10, 12, 14, 16]
        assert "drafts per round" in browser.evaluate("document.getElementById('plot').textContent")
        assert browser.errors == [], browser.errors


def test_the_sliders_start_at_the_runs_own_alpha_c_v_and_k(run):
    path, _, stats, _, _ = run
    measured = show.measured_point([stats], 0.004)  # as the fixture's page: v and c can exceed the sliders' usual range
    with Chromium() as browser:
        browser.open(path.as_uri())
        for slider, value, step in (("a", measured["alpha"], 0.01), ("c", measured["c"], 0.005),
                                    ("v", measured["v"], 0.01), ("k", measured["K"], 1)):
            assert abs(browser.evaluate(f"+$({slider!r}).value") - value) <= step, slider


def test_the_console_check_can_fail(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<script>console.error('planted'); undefinedFunction();</script>")
    with Chromium() as browser:
        browser.open(page.as_uri())
        browser.evaluate("1")  # let the events arrive
        assert any("planted" in e for e in browser.errors) and any("undefinedFunction" in e for e in browser.errors)
