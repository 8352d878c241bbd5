"""The house's shape: the project's modules import each other without a circle (function-level imports count),
the method folders (drafts/, verifiers/), the engine (engine/) and the pretrained target (pretrained/) never import
the scripts, and the core (speculative.py) finds the verifiers and drafts through its registries, never by importing
them."""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("drafts", "verifiers", "engine", "pretrained")
SCRIPTS = {"sample", "bench", "train_draft", "benchmarks"}  # benchmarks/: bench.py's modes, a script's own folder


def module_names():  # -> {"speculative", ..., "drafts" (its __init__), "drafts.ngram", ...}
    names = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    for pkg in (*PACKAGES, "benchmarks"):
        names |= {pkg if f == "__init__.py" else f"{pkg}.{f[:-3]}"
                  for f in os.listdir(os.path.join(ROOT, pkg)) if f.endswith(".py")}
    return names


MODULES = sorted(module_names())


def path_of(module):
    parts = module.split(".")
    if parts[0] in (*PACKAGES, "benchmarks") and len(parts) == 1:
        return os.path.join(ROOT, module, "__init__.py")
    return os.path.join(ROOT, *parts) + ".py"


def imports_of(module):  # -> the project modules that module imports anywhere in its file
    """`from drafts import ngram` and `import drafts.ngram` name drafts.ngram. A package's __init__ only imports its
    own modules, so importing drafts.ngram is not counted as importing drafts."""
    tree = ast.parse(open(path_of(module), encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & set(MODULES)
            names |= subs or {node.module}
    return sorted(names & set(MODULES) - {module})


def a_circle(graph):  # -> a list of modules that import each other in a circle, or None
    done, path = set(), []

    def visit(m):
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        path.append(m)
        for n in graph[m]:
            circle = visit(n)
            if circle:
                return circle
        path.pop()
        done.add(m)
        return None

    return next((c for c in map(visit, graph) if c), None)


def test_no_module_imports_a_module_that_imports_it():
    graph = {m: imports_of(m) for m in MODULES}
    assert "speculative" in graph["verifiers.block"]  # the check sees the imports it is about
    assert "drafts.ngram" in graph["drafts.cross_vocab"] and "drafts.heads" in graph["drafts.eagle"]
    assert "model" in graph["pretrained.llama"] and "pretrained.tokenizer" in graph["pretrained"]
    assert "benchmarks.sweep" in graph["bench"] and "benchmarks.theory" in graph["benchmarks.suite"]
    circle = a_circle(graph)
    assert circle is None, f"import circle: {' -> '.join(circle)}"


def test_the_circle_check_can_fail():
    assert a_circle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert a_circle({"a": ["b"], "b": [], "c": ["a", "b"]}) is None


def test_no_arrow_runs_up_from_a_folder_into_the_scripts_or_from_the_core_into_a_folder():
    up = {m: sorted(n for n in imports_of(m) if n.split(".")[0] in SCRIPTS)
          for m in MODULES if m.split(".")[0] in PACKAGES}
    assert not any(up.values()), f"a method or engine module imports a script: {up}"
    core = {m: [n for n in imports_of(m) if n.split(".")[0] in PACKAGES] for m in ("speculative", "model", "choose_k")}
    assert not any(core.values()), f"the core imports a folder (it should find them through its registries): {core}"


def test_the_top_level_keeps_what_a_reader_starts_with():
    top = sorted(f for f in os.listdir(ROOT) if f.endswith(".py"))
    assert len(top) <= 10, f"{len(top)} Python files at the top level ({', '.join(top)}): a method goes into drafts/ " \
                           "or verifiers/, an engine part into engine/"
    for pkg in PACKAGES:
        assert os.path.isfile(os.path.join(ROOT, pkg, "__init__.py")), f"{pkg}/ needs an __init__.py"


def test_the_core_finds_the_methods_through_its_registries():
    code = ("import speculative\n"
            "try:\n    speculative.round_for('block', 4)\nexcept ValueError as e:\n    print(e)\n"
            "print(sorted(speculative.DRAFTS))\n"
            "import drafts, verifiers\n"
            "from verifiers import block\n"
            "print(speculative.round_for('block', 4) is block.block_round, sorted(speculative.DRAFTS))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "unknown verify='block'" in out and "`import verifiers` first" in out
    assert "[]\n" in out, "speculative.DRAFTS should be empty until `import drafts`"
    assert out.strip().endswith("True ['eagle', 'eagle3', 'int4', 'int8', 'layerskip', 'medusa', 'ngram', 'parallel', 'small', 'suffix']"), out
