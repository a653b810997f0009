"""The Python code blocks of a Markdown page (the README, ``docs/**/*.md``), and running them as a reader would.

Every fenced ``python`` block of a page runs, in order, in one namespace per page (a block may use what an
earlier block of the page defined), in a fresh empty working directory. A comment line just before a block
(blank lines between are allowed) changes how it runs:

- ``<!-- docs-test: skip: REASON -->``: not run; REASON says why (it needs a GPU, a cluster, hours ...).
- ``<!-- docs-test: script -->``: written to a file and run with ``python FILE`` (a script whose Trainer starts its
  own ranks, or one that must not share the page's process).

A hidden setup, run in the page's namespace at that point and not shown on the page (it may check what the blocks
above did; it may not define a name a block below uses, since a reader copying the page does not see it:
``names_not_shown``)::

    <!-- docs-test: setup
    import torch
    x = torch.randn(64, 8)
    -->

Check one page while writing it: ``python -m tests.docs.blocks docs/guide/checkpoints.md``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
from continued_blocks import names_of  # noqa: E402  (docs/: the Sphinx extension shows what a block needs)

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<kind>skip|script|setup)\b:?\s*(?P<rest>.*?)\s*(-->)?\s*$")


@dataclass
class Block:
    """One Python block of a page: where it starts (1-based line of its first code line) and how it runs."""

    path: Path
    line: int
    code: str
    how: str = "run"
    detail: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The Python blocks and hidden setups of a Markdown page, in page order."""
    lines = Path(path).read_text().splitlines()
    found, marker, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        marked = MARKER.match(line.strip())
        if marked:
            kind, rest = marked["kind"], marked["rest"]
            if kind == "setup":
                end = next((j for j in range(i, len(lines)) if lines[j].strip().endswith("-->")), None)
                if end is None:
                    raise ValueError(f"{path}:{i + 1}: a docs-test setup comment is never closed with -->")
                body = "\n".join(lines[i + 1:end] + ([lines[end].rstrip()[:-3]] if end > i else []))
                found.append(Block(Path(path), i + 2, textwrap.dedent(body), "setup"))
                i = end + 1
                continue
            if kind == "skip" and not rest:
                raise ValueError(f"{path}:{i + 1}: 'docs-test: skip' needs a reason: <!-- docs-test: skip: why -->")
            marker = (kind, rest)
            i += 1
            continue
        fenced = FENCE.match(line)
        if fenced:
            fence, indent = fenced["fence"], len(fenced["indent"])
            language = fenced["info"].strip().split()[0].lower() if fenced["info"].strip() else ""
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                        and set(lines[j].strip()) == {fence[0]} and len(lines[j].strip()) >= len(fence)), None)
            if end is None:
                raise ValueError(f"{path}:{i + 1}: a code fence that is never closed")
            if language in ("python", "py", "python3"):
                code = "\n".join(text[indent:] if text[:indent].strip() == "" else text for text in lines[i + 1:end])
                how, detail = marker if marker else ("run", "")
                found.append(Block(Path(path), i + 2, code, how, detail))
            elif marker:
                raise ValueError(f"{path}:{i + 1}: a docs-test marker stands before a {language or 'plain'} block; "
                                 "only python blocks run")
            marker, i = None, end + 1
            continue
        if line.strip() and marker:
            raise ValueError(f"{path}:{i}: a docs-test marker must stand just before the python block it marks")
        i += 1
    return found


def names_not_shown(path: Path) -> list[tuple[Block, list[str]]]:
    """Each block of a page that uses a name neither it nor an earlier shown block defines (a hidden setup's
    names do not count: a reader copying the page does not see them); a script block must define all its own."""
    shown: set[str] = set()
    missing = []
    for block in blocks_of(path):
        if block.how == "setup":
            continue
        bound, loaded = names_of(block.code)
        known = bound | set(dir(builtins)) | (set() if block.how == "script" else shown)
        if loaded - known:
            missing.append((block, sorted(loaded - known)))
        if block.how != "script":
            shown |= bound
    return missing


@contextlib.contextmanager
def _as_a_reader_would(path: Path):
    """Run in ``path``, and leave the calling process as it was: a page that seeds (``PL_GLOBAL_SEED``), sets
    environment variables, warning filters or torch's default dtype must not change the tests that run after it."""
    import warnings

    import torch

    before, environment, dtype = os.getcwd(), dict(os.environ), torch.get_default_dtype()
    os.chdir(path)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(before)
        os.environ.clear()
        os.environ.update(environment)
        torch.set_default_dtype(dtype)


def run_page(path: Path, workdir: Path | None = None, timeout: float = 300.0) -> list[Block]:
    """Run every block of a page (see the module docstring); raise naming the block that failed.

    Returns the blocks skipped, so that a caller can report them.
    """
    path = Path(path).resolve()
    skipped = []
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docs-page-")))
        stack.enter_context(_as_a_reader_would(workdir))
        namespace: dict = {"__name__": "__docs__"}
        for number, block in enumerate(blocks_of(path)):
            if block.how == "skip":
                skipped.append(block)
                continue
            if block.how == "script":
                _run_file(block, workdir / f"block_{number}.py", timeout)
                continue
            try:
                exec(compile(block.code, block.where, "exec"), namespace)  # the filename names the page and line
            except BaseException as error:
                raise AssertionError(f"the python block at {block.where} failed: {error!r}") from error
    return skipped


def _run_file(block: Block, file: Path, timeout: float) -> None:
    file.write_text(block.code + "\n")
    done = subprocess.run([sys.executable, str(file)], cwd=file.parent, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"the {block.how} block at {block.where} exited with {done.returncode}:\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}")


if __name__ == "__main__":
    status = 0
    for page in sys.argv[1:]:
        blocks = blocks_of(Path(page))
        print(f"{page}: {sum(b.how != 'skip' for b in blocks)} block(s) to run, "
              f"{sum(b.how == 'skip' for b in blocks)} skipped")
        try:
            for block in run_page(Path(page)):
                print(f"  skipped {block.where}: {block.detail}")
        except AssertionError as failure:
            print(f"  FAILED: {failure}")
            status = 1
    sys.exit(status)
