"""The project's modules import each other without a circle (function-level imports count), and the core
(speculative.py) finds the verifiers of variants.py through its registry, never by importing them."""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = sorted(f[:-3] for f in os.listdir(ROOT) if f.endswith(".py"))


def imports_of(module):  # -> the project modules that module imports anywhere in its file
    tree = ast.parse(open(os.path.join(ROOT, module + ".py"), encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
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
    assert "speculative" in graph["variants"]  # the check sees the imports it is about
    circle = a_circle(graph)
    assert circle is None, f"import circle: {' -> '.join(circle)}"


def test_the_circle_check_can_fail():
    assert a_circle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert a_circle({"a": ["b"], "b": [], "c": ["a", "b"]}) is None


def test_the_core_finds_the_variants_through_its_registry():
    code = ("import speculative\n"
            "try:\n    speculative.round_for('block', 4)\nexcept ValueError as e:\n    print(e)\n"
            "import variants\n"
            "print(speculative.round_for('block', 4) is variants.block_round)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "unknown verify='block'" in out and "`import variants` first" in out
    assert out.strip().endswith("True")
