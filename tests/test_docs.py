"""The documentation's Python examples run as written.

Every fenced ``python`` block of ``README.md`` and of the documentation
site's getting-started page is executed, in order, one namespace per block,
so an example that drifts from the library fails the suite. A block that
reads Cora (it names ``cora``) is skipped, with the shared-data reason, when
the shared data is absent; the blocks here use ``synthetic:tiny`` and tiny
hand-made graphs, so none needs it today. Each block checks its own result
where the page states one (the GIN layer against the dense adjacency, for
one).
"""

from __future__ import annotations

import re

import pytest
from conftest import REPO, missing_data_reason, shared_data_dir

PAGES = ("README.md", "docs/getting-started.md")
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(page: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced python block of ``page``, in order."""
    text = (REPO / page).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


CASES = [(page, line, code) for page in PAGES for line, code in python_blocks(page)]


def test_pages_have_examples():
    """Each page contributes blocks: a renamed fence must not silently skip them."""
    assert {page for page, _, _ in CASES} == set(PAGES)
    readme = [code for page, _, code in CASES if page == "README.md"]
    # The README's "Write your own layer" GIN example is among them.
    assert any("def gin_apply" in code for code in readme)


@pytest.mark.parametrize(
    ("page", "line", "code"), CASES, ids=[f"{page}:{line}" for page, line, _ in CASES]
)
def test_block_runs(page, line, code, capsys):
    if "cora" in code.lower() and shared_data_dir() is None:
        pytest.skip(missing_data_reason())
    namespace = {"__name__": f"docs_example_{line}"}
    exec(compile(code, f"{page}:{line}", "exec"), namespace)
    capsys.readouterr()  # examples may print; the output is not checked here
