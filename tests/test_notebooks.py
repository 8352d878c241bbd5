"""Every notebook runs top to bottom (CI runs these with `python -m pytest -q -m notebooks`).

They are kept out of the default test run because notebooks 02 and 03 sample from the shipped pair and take
a minute or two each on a 2-core CPU; the default suite stays fast.
"""

import json
import pathlib

import pytest

# subtle: `jupyter nbconvert --to notebook --execute` without --inplace or --output-dir leaves NAME.nbconvert.ipynb
# beside each notebook; those are copies, not notebooks of the project (.gitignore leaves them out too)
NOTEBOOKS = sorted(p for p in (pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb")
                   if not p.name.endswith(".nbconvert.ipynb"))


def run_top_to_bottom(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors


# subtle: two classes only so that pytest-xdist (pytest.ini: --dist loadscope) runs the two halves on two workers;
# odd and even numbers split the notebooks' time about evenly (02, the longest, is even)
ODD, EVEN = NOTEBOOKS[0::2], NOTEBOOKS[1::2]


@pytest.mark.notebooks
class TestOddNotebooks:
    @pytest.mark.parametrize("path", ODD, ids=[p.name for p in ODD])
    def test_notebook_runs_top_to_bottom(self, path):
        run_top_to_bottom(path)


@pytest.mark.notebooks
class TestEvenNotebooks:
    @pytest.mark.parametrize("path", EVEN, ids=[p.name for p in EVEN])
    def test_notebook_runs_top_to_bottom(self, path):
        run_top_to_bottom(path)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_takes_its_threads_from_the_projects_policy(path):
    """A fixed torch.set_num_threads(2) on a 2-core machine with one core busy elsewhere made a notebook run 20x
    slower: each notebook calls engine/cpu.py's use_threads (one thread per idle core), as the scripts do."""
    cells = json.loads(path.read_text())["cells"]
    code = "".join(line for c in cells if c["cell_type"] == "code" for line in c["source"])
    assert "set_num_threads" not in code and 'use_threads(None, "cpu")' in code, path.name
