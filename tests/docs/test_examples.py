"""Every Python block of the README and of the docs pages runs (tests/docs/blocks.py says how) and uses only names
the page shows, and every ``>>>`` example in the package's docstrings runs as a doctest."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import framework
from tests.docs.blocks import blocks_of, names_not_shown, run_page
from tests.docs.site_build import DOCS, ROOT

MARKDOWN = [page for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))] if "_build" not in page.parts]
PAGES = [page for page in MARKDOWN if blocks_of(page)]  # the tutorials include their scripts, tested on their own


def test_the_pages_hold_python_examples():
    counted = {page: len(blocks_of(page)) for page in MARKDOWN}
    assert sum(counted.values()) > 50, counted


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_python_blocks_of_a_page_run(page, tmp_path):
    skipped = run_page(page, tmp_path)
    for block in skipped:
        assert block.detail.strip(), f"{block.where} is skipped without a reason"


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_a_block_uses_only_names_the_page_shows(page):
    # a reader pastes the blocks as shown: a name a hidden setup defined would be a NameError for them
    missing = [f"{block.where}: {', '.join(names)}" for block, names in names_not_shown(page)]
    assert not missing, "blocks using names no block shown above them defines:\n" + "\n".join(missing)


def test_the_names_check_sees_a_hidden_definition(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- docs-test: setup\nimport torch\n-->\n\n```python\nx = torch.ones(2)\nprint(x)\n```\n")
    [(block, names)] = names_not_shown(page)
    assert names == ["torch"] and block.line == 6


def _modules_with_examples() -> list[str]:
    names = ["framework"] + [m.name for m in pkgutil.walk_packages(framework.__path__, "framework.")]
    found = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".py") and ">>>" in Path(spec.origin).read_text():
            found.append(name)
    return found


@pytest.mark.parametrize("module", _modules_with_examples())
def test_the_docstring_examples_of_a_module_run(module):
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [test for test in finder.find(importlib.import_module(module)) if test.examples]
    assert tests, f"{module} has '>>>' in its source but no docstring example was found"
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} docstring examples of {module} failed"
