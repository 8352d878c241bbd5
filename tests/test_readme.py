"""The README stays honest: every file, notebook and flag it names exists (flags checked against each script's
--help), every relative link of README.md, BENCHMARKS.md and docs/ resolves, anchors included, and the README
stays short enough to read."""

import contextlib
import io
import os
import re

import pytest

import bench
import sample
import train_draft

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"sample.py": sample.get_args, "bench.py": bench.get_args, "train_draft.py": train_draft.get_args}
MADE_BY_COMMANDS = ("runs/", "my_text.txt", "my_verifier.py")  # what the README's commands create (or the reader brings)
FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|ipynb|json|md|png|txt|pt)|LICENSE|(?:[\w-]+/)+)(?![\w/])")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
COMMAND = re.compile(r"python ([\w/]+\.py)([^`\n#|]*)")  # a script and its arguments, up to a code span's end
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)(?: ([\w.,/-]+))?")


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


def help_text(script):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        SCRIPTS[script](["--help"])
    return out.getvalue()


HELP = {script: help_text(script) for script in SCRIPTS}


def missing_files(text):  # -> the repository paths that text names in code spans and links but that do not exist
    code = re.findall(r"`([^`\n]+)`", text) + re.findall(r"^```\n(.*?)^```", text, re.M | re.S)  # spans, blocks
    named = [m for span in code for m in FILE.findall(span)]
    named += [link.split("#")[0] for link in LINK.findall(text) if not re.match(r"\w+:", link)]
    return sorted({p for p in named if p and not p.startswith(MADE_BY_COMMANDS)
                   and not os.path.exists(os.path.join(ROOT, p))})


def bad_flags(text):  # -> "script --flag" for each flag (or choice) the script's --help does not list
    bad, text = [], re.sub(r"(jupyter|pip|pytest)[^`\n]*", "", text)  # other programs' flags
    for script, args in COMMAND.findall(text):
        for flag, value in FLAG.findall(args):
            bad += [f"{script} {flag}"] if script not in HELP or not offers(HELP[script], flag, value) else []
    for flag, value in FLAG.findall(COMMAND.sub("", text)):  # flags named alone: some script must take them
        bad += [] if any(offers(h, flag, value) for h in HELP.values()) else [flag]
    return bad


def offers(help, flag, value):  # does this --help list the flag, and the value if the flag has choices?
    if not re.search(rf"{re.escape(flag)}\b", help):
        return False
    choices = re.search(rf"{re.escape(flag)} \{{([^}}]*)\}}", help)
    return not (choices and value) or value in choices.group(1).split(",")


def slug(heading):  # GitHub's anchor for a heading
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(path):  # -> the relative links of a markdown file whose file or anchor does not exist
    text, bad = read(path), []
    for link in LINK.findall(text):
        if re.match(r"\w+:", link):
            continue  # https:, mailto:
        target, _, anchor = link.partition("#")
        file = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(os.path.join(ROOT, file)):
            bad.append(link)
        elif anchor and anchor not in {slug(h) for h in re.findall(r"^#+ (.+)$", read(file), re.M)}:
            bad.append(link)
    return bad


def test_every_file_and_notebook_the_readme_names_exists():
    assert missing_files(read("README.md")) == []


def test_every_flag_the_readme_names_is_in_its_scripts_help():
    assert bad_flags(read("README.md")) == []


@pytest.mark.parametrize("path", ["README.md", "BENCHMARKS.md"] + [f"docs/{f}" for f in sorted(os.listdir(
    os.path.join(ROOT, "docs"))) if f.endswith(".md")])
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_the_readme_is_at_most_220_lines():  # nanoGPT: 234; one table and two sentences a topic, the rest in docs/
    assert read("README.md").count("\n") <= 220, "README.md: move the detail to docs/, keep it a tutorial"


def test_the_checks_can_fail():
    text = ("Run `python sample.py --k 4 --tempreature 0.5`, then `python train_draft.py --preset huge`, read\n"
            "`speculative.py` and `notebooks/09_missing.ipynb`, [see](docs/nothing.md), keep `--no_such_flag`.\n"
            "```\npython bench.py --json notebooks/bench_gone.json\n```\n")
    assert missing_files(text) == ["docs/nothing.md", "notebooks/09_missing.ipynb", "notebooks/bench_gone.json"]
    assert bad_flags(text) == ["sample.py --tempreature", "train_draft.py --preset", "--no_such_flag"]
    assert slug("2026-12-04 · Intel Xeon: K = 1..8 and `auto`") == "2026-12-04--intel-xeon-k--18-and-auto"


def test_every_readme_section_the_code_points_to_exists():
    """An error that says "see README, 'SECTION'" sends the reader to a heading the README has."""
    headings = set(re.findall(r"^#+ (.+)$", read("README.md"), re.M))
    pointers = []
    for folder, subfolders, files in os.walk(ROOT):
        # not into .venv or .git, nor tests/ (this test names the pattern itself)
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "tests"]
        for name in files:
            if name.endswith(".py"):
                text = read(os.path.relpath(os.path.join(folder, name), ROOT))
                pointers += [(name, section) for section in re.findall(r"README, '([^']+)'", text)]
    assert pointers, "no code points to a README section: the pattern no longer matches"
    assert [p for p in pointers if p[1] not in headings] == []
