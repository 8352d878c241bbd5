"""scripts/speed_vs.py: the speed guard runs two versions of the project in one process, each with its own code."""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import speed_vs  # noqa: E402


def test_sign_test_matches_the_binomial_tails():
    assert speed_vs.sign_test(6, 12) == 1.0
    assert math.isclose(speed_vs.sign_test(10, 12), 2 * (1 + 12 + 66) / 4096)  # 0.0386: beyond noise at 5%
    assert speed_vs.sign_test(9, 12) > 0.05 and speed_vs.sign_test(2, 12) == speed_vs.sign_test(10, 12)


@pytest.mark.skipif(not speed_vs.in_git_checkout(), reason="speed_vs compares commits: needs a git clone, not an export")
def test_each_tree_runs_its_own_modules_and_the_report_reads(capsys):
    before = set(sys.modules)
    result = speed_vs.main(["HEAD", "--rounds", "2", "--prompts", "1", "--max_new_tokens", "8", "--threads", "1"])
    out = capsys.readouterr().out
    old, here = speed_vs.TREES[-2:]
    assert old.speculative is not here.speculative  # two copies of the code, not one imported twice
    assert old.speculative.__file__.startswith(old.root) and here.speculative.__file__.startswith(here.root)
    assert old.root != here.root
    assert len(result["ratios"]) == 2 and all(r > 0 for r in result["ratios"])
    assert "speedup ratio, working tree / " in out and "sign test p = " in out
    assert "same tokens with the same seeds: yes" in out  # HEAD and the tree share the sampling code
    assert not any(old.ours(m) for m in sys.modules.values())  # the other tree's modules left no trace
    assert set(sys.modules) >= before
    assert sys.modules["torch"] is torch  # only the project's own modules were swapped, never a library's


def test_a_library_inside_the_checkout_is_not_the_projects(tmp_path):
    """CI's venv lives inside the checkout (.venv-ci/.../torch): only the tree's own top-level names count."""
    tree = speed_vs.Tree.__new__(speed_vs.Tree)
    tree.root = speed_vs.ROOT
    fake_torch = type(sys)("torch")
    fake_torch.__file__ = os.path.join(speed_vs.ROOT, ".venv-ci", "lib", "site-packages", "torch", "__init__.py")
    assert not tree.ours(fake_torch)
    import speculative
    assert tree.ours(speculative)  # the check can fail: the project's own modules still count


def test_a_name_that_is_not_a_commit_gets_one_line():
    with pytest.raises(SystemExit, match="not a commit of this repository" if speed_vs.in_git_checkout() else
                       "not a git checkout"):
        speed_vs.main(["no-such-commit-xyz"])
