"""Every notebook runs top to bottom (CI runs these with `python -m pytest -q -m notebooks`).

They are kept out of the default test run because notebooks 02 and 03 sample from the shipped pair and take
a minute or two each on a 2-core CPU; the default suite stays fast.
"""

import pathlib

import pytest

# subtle: `jupyter nbconvert --to notebook --execute` without --inplace or --output-dir leaves NAME.nbconvert.ipynb
# beside each notebook; those are copies, not notebooks of the project (.gitignore leaves them out too)
NOTEBOOKS = sorted(p for p in (pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb")
                   if not p.name.endswith(".nbconvert.ipynb"))


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
