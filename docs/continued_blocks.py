"""A Sphinx extension: a Python block of a Markdown page that uses names an earlier block of the page defines
says so, in a line shown above it ("Continues the blocks above: uses ``Net``, ``data``."), so that a reader who
pastes one block knows which to paste first. A block without that line is complete on its own.

The names are found as the docs tests find them (``tests/docs/blocks.py`` imports :func:`names_of`), so the line
and the test that runs the blocks agree on what a block needs.
"""

from __future__ import annotations

import ast
import builtins

from docutils import nodes

CSS_CLASS = "continues-above"


def names_of(code: str) -> tuple[set[str], set[str]]:
    """The names a block binds anywhere (imports, assignments, definitions, arguments ...) and those it reads."""
    bound, loaded = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return bound, loaded


def names_from_above(codes: list[str]) -> list[list[str]]:
    """For each block of a page, in order, the names it reads that it does not bind but an earlier block does."""
    defined: set[str] = set()
    needs = []
    for code in codes:
        try:
            bound, loaded = names_of(code)
        except SyntaxError:  # a fragment shown for reading, not for running
            bound, loaded = set(), set()
        needs.append(sorted((loaded - bound - set(dir(builtins))) & defined))
        defined |= bound
    return needs


def _python_blocks(doctree: nodes.document) -> list[nodes.literal_block]:
    """The page's own Python blocks (not a file a ``literalinclude`` shows, which is complete or says where
    it is cut)."""
    return [block for block in doctree.findall(nodes.literal_block)
            if block.get("language") == "python" and "source" not in block.attributes]


def _say_what_continues(app, doctree: nodes.document) -> None:
    if not str(doctree.get("source", "")).endswith(".md"):
        return
    blocks = _python_blocks(doctree)
    for block, names in zip(blocks, names_from_above([block.astext() for block in blocks]), strict=True):
        if not names:
            continue
        line = nodes.paragraph("", "Continues the blocks above: uses ", classes=[CSS_CLASS])
        for index, name in enumerate(names):
            line += nodes.literal(name, name)
            line += nodes.Text(", " if index < len(names) - 1 else ".")
        block.parent.insert(block.parent.index(block), line)


def setup(app) -> dict:
    app.connect("doctree-read", _say_what_continues)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
