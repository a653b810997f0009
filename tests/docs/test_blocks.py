"""How the docs' python blocks are found and run (tests/docs/blocks.py): the markers, and failures that name the page
and line."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.docs.blocks import blocks_of, run_page

PAGE = textwrap.dedent("""\
    # A page

    <!-- docs-test: setup
    hidden = 2
    -->

    ```python
    shown = hidden + 1
    ```

    ```bash
    pip install something
    ```

    <!-- docs-test: skip: needs 4 GPUs -->

    ```python
    raise RuntimeError("never run")
    ```

    <!-- docs-test: script -->
    ```python
    import os
    print(os.getpid())
    ```

    ```python
    import os

    assert shown == 3
    with open("made-here.txt", "w") as file:
        file.write("x")
    os.environ["SET_BY_A_PAGE"] = "1"
    ```
""")


def test_blocks_are_found_in_order_with_their_markers_and_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = [(block.how, block.line, block.detail) for block in blocks_of(page)]
    assert found == [("setup", 4, ""), ("run", 8, ""), ("skip", 18, "needs 4 GPUs"), ("script", 23, ""),
                     ("run", 28, "")]


def test_a_page_runs_in_one_namespace_in_its_own_directory_and_leaves_the_process_as_it_was(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    workdir = tmp_path / "work"
    workdir.mkdir()
    before = os.getcwd()
    skipped = run_page(page, workdir)
    assert [block.detail for block in skipped] == ["needs 4 GPUs"]
    assert (workdir / "made-here.txt").exists() and os.getcwd() == before
    assert "SET_BY_A_PAGE" not in os.environ


def test_a_failing_block_is_named_by_page_and_line(tmp_path):
    page = tmp_path / "broken.md"
    page.write_text("Intro\n\n```python\nx = 1\n```\n\n```py\nx = undefined_name\n```\n")
    with pytest.raises(AssertionError, match=r"broken.md:8 failed: NameError"):
        run_page(page, tmp_path)


def test_a_failing_script_block_reports_its_exit_status_and_output(tmp_path):
    page = tmp_path / "script.md"
    page.write_text("<!-- docs-test: script -->\n```python\nimport sys\nprint('from the script')\nsys.exit(3)\n```\n")
    with pytest.raises(AssertionError, match=r"(?s)script.md:3 exited with 3:.*from the script"):
        run_page(page, tmp_path)


@pytest.mark.parametrize("text, complaint", [
    ("<!-- docs-test: skip -->\n```python\npass\n```\n", "needs a reason"),
    ("<!-- docs-test: skip: why -->\n```bash\nls\n```\n", "only python blocks run"),
    ("<!-- docs-test: script -->\nSome prose.\n```python\npass\n```\n", "must stand just before"),
    ("```python\npass\n", "never closed"),
    ("<!-- docs-test: setup\npass\n", "never closed"),
])
def test_a_misplaced_or_incomplete_marker_is_an_error(tmp_path, text, complaint):
    page = tmp_path / "bad.md"
    page.write_text(text)
    with pytest.raises(ValueError, match=complaint):
        blocks_of(page)
