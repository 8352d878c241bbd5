"""The exercise checker (exercises/check.py) passes a correct student file and names each planted bug in words.

A student file is written to tmp_path from one correct solution with one piece swapped for a bug at a time, so
each test can fail: if the checker missed the bug, the exit code would be 0 and the words would be missing.
"""

import os
import subprocess
import sys

import pytest

from exercises import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOLUTION = '''import torch

import speculative
from verifiers import block


def accept_probability(p_x, q_x):
    return {accept}


def residual(p, q):
    r = torch.clamp(p - q, min=0.0)
    return {residual}


def speculative_round(target, draft, tokens, k, probs, generator):
    t = len(tokens)
    qs = speculative.draft_tokens(draft, tokens, k, probs, generator)
    logits, p = speculative.score(target, tokens, k, probs)
    for i in range(k):
        x = tokens[t + i]
        if not speculative.coin({round_accept}, generator):
            {reject}
    {bonus}
    return k


def block_round(target, draft, tokens, k, probs, generator):
    {block}
'''
REJECT = ("tokens[t + i:] = [speculative.sample({replacement}, generator)]\n"
          "            target.rollback(t + i)\n            draft.rollback(t + i)\n            return i")
CORRECT = dict(accept="min(1.0, p_x / q_x)",
               residual="r / r.sum() if r.sum() > 0 else p",
               round_accept="accept_probability(p[i, x].item(), qs[i][x].item())",
               reject=REJECT.format(replacement="residual(p[i], qs[i])"),
               bonus="tokens.append(speculative.sample(p[k], generator))",
               block="return block.block_round(target, draft, tokens, k, probs, generator)")


def run_checker(tmp_path, capsys, stretch=False, **bug):
    path = tmp_path / "mine.py"
    path.write_text(SOLUTION.format(**{**CORRECT, **bug}))
    code = check.main([str(path)] + (["--stretch"] if stretch else []))
    return code, capsys.readouterr().out


def test_a_correct_solution_passes_every_step_and_the_stretch(tmp_path, capsys):
    code, out = run_checker(tmp_path, capsys, stretch=True)
    assert code == 0, out
    assert "all checks passed" in out and "FAILED" not in out


def test_the_unfilled_template_says_which_functions_are_not_written_yet(capsys):
    code = check.main([check.TEMPLATE])
    out = capsys.readouterr().out
    assert code == 1
    assert "accept_probability is not written yet (NotImplementedError)" in out
    assert "residual is not written yet (NotImplementedError)" in out
    assert "all checks passed" not in out


@pytest.mark.parametrize("bug,words", [
    (dict(residual="p"), "step 2: residual: FAILED\n  residual(p=[0.5, 0.3, 0.1, 0.1], q=[0.1, 0.2, 0.4, 0.3]) "
                         "returned [0.5, 0.3, 0.1, 0.1], expected [0.8, 0.2, 0, 0]: the replacement is not drawn "
                         "from the residual"),
    (dict(residual="r"), "max(0, p - q) is not normalised"),
    (dict(residual="r / r.sum()"), "When p == q, max(0, p - q) is all zeros"),
    (dict(reject=REJECT.format(replacement="p[i]")), "the replacement is not drawn from the residual "
                                                     "norm(max(0, p - q)): it is drawn from p[i] itself"),
    (dict(reject="tokens[t + i] = speculative.sample(residual(p[i], qs[i]), generator)"),
     "the round does not stop at the first rejection"),
    (dict(bonus="pass"), "no bonus token after all K drafts are kept"),
    (dict(accept="p_x / q_x"), "the acceptance test is not min(1, p(x)/q(x)): the min(1, ...) is missing"),
    (dict(accept="min(1.0, q_x / p_x) if p_x > 0 else 1.0"), "the acceptance test is not min(1, p(x)/q(x)): "
                                                             "the ratio is upside down"),
    (dict(round_accept="qs[i][x].item() / p[i, x].item()"), "the acceptance test is not min(1, p(x)/q(x)) "
                                                            "(the ratio is upside down"),
    (dict(reject=REJECT.format(replacement="residual(p[i], qs[i])").split("\n")[0] + "\n            return i"),
     "call target.rollback(t + i) and draft.rollback(t + i)"),
])
def test_each_planted_bug_fails_with_words_that_name_it(bug, words, tmp_path, capsys):
    code, out = run_checker(tmp_path, capsys, **bug)
    assert code == 1
    assert words in out, out
    assert "Traceback" not in out and "all checks passed" not in out


@pytest.mark.parametrize("bug,likely", [
    (dict(reject="tokens[t + i] = speculative.sample(residual(p[i], qs[i]), generator)\n            return i"),
     "drop the rejected draft and all later ones"),  # later drafts not dropped (nor the caches rolled back)
    (dict(bonus="pass"), "no bonus token after all K drafts are kept"),
    (dict(reject=REJECT.format(replacement="residual(p[i], qs[i])").split("\n")[0] + "\n            return i"),
     "call target.rollback(t + i) and draft.rollback(t + i)"),
])
def test_a_round_that_leaves_the_caches_stale_leads_with_the_likely_bug(bug, likely, tmp_path, capsys):
    # the caches' own check fails first for each ("stale tokens in the cache: rollback() after a rejection"), which
    # guesses at a cause: wrong for a missing bonus token, where nothing was rejected
    code, out = run_checker(tmp_path, capsys, **bug)
    assert code == 1
    after = out.split("run as verify='student': FAILED\n", 1)[1]
    assert after.startswith("  Likely bug: ") and likely in after.splitlines()[0], out
    assert "stale tokens" not in out and "out of step" not in out, out


def test_a_wrong_round_shows_its_worst_outcome_beside_the_target(tmp_path, capsys):
    code, out = run_checker(tmp_path, capsys, reject=REJECT.format(replacement="p[i]"))
    assert "your round is not exact" in out
    assert "P(2, 2, 1): your sampler gives 0.2134, the target 0.1138" in out, out


def test_randomness_outside_sample_and_coin_is_refused_in_words(tmp_path, capsys):
    code, out = run_checker(tmp_path, capsys, bonus="tokens.append(torch.multinomial(p[k], 1).item())")
    assert code == 1
    assert "without speculative.sample or speculative.coin" in out, out


def test_the_stretch_says_when_block_verification_keeps_only_what_tokenwise_keeps(tmp_path, capsys):
    tokenwise = "return speculative.speculative_round(target, draft, tokens, k, probs, generator)"
    code, out = run_checker(tmp_path, capsys, stretch=True, block=tokenwise)
    assert code == 1
    assert "step 3: speculative_round, every branch enumerated, run as verify='student': ok" in out
    assert "It keeps exactly what token-wise verification keeps" in out, out


def test_the_stretch_catches_an_inexact_block_round(tmp_path, capsys):
    # verifiers/block.py's block_round with the replacement after a cut drawn from p instead of the block residual
    saved = "saved = block.block_residual\n    "
    patched = "block.block_residual = lambda a, p, q: p\n    "
    call = "try:\n        return block.block_round(target, draft, tokens, k, probs, generator)\n    "
    restore = "finally:\n        block.block_residual = saved"
    code, out = run_checker(tmp_path, capsys, stretch=True, block=saved + patched + call + restore)
    assert code == 1
    assert "your block_round is not exact" in out and "the token after it is not" in out, out


def test_the_command_line_prints_words_and_exit_code_without_a_traceback():
    proc = subprocess.run([sys.executable, "exercises/check.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "accept_probability is not written yet (NotImplementedError)" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
