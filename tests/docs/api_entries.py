"""The entries of the built API reference (each ``<dt id=...>`` of a ``<dl class="py ...">``) and the text each
one shows of its own: its description, without the entries nested in it (a class's members) and without the
"Bases:" line every class has."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path


class _Entries(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str] = {}
        self._open: list[list] = []  # per <dl class="py ...">: [entry id, texts, depth of its <dd> or None]
        self._depth = 0  # of <dl>

    def handle_starttag(self, tag: str, attrs: list) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "dl":
            self._depth += 1
            if "py" in classes:
                self._open.append([None, [], None, self._depth])
        elif tag == "dt" and self._open and self._open[-1][3] == self._depth and self._open[-1][0] is None:
            self._open[-1][0] = dict(attrs).get("id")
        elif tag == "dd" and self._open and self._open[-1][3] == self._depth:
            self._open[-1][2] = self._depth

    def handle_endtag(self, tag: str) -> None:
        if tag == "dl":
            if self._open and self._open[-1][3] == self._depth:
                entry_id, texts, _, _ = self._open.pop()
                if entry_id:
                    self.found[entry_id] = " ".join(" ".join(texts).split())
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1][2] == self._depth and self._open[-1][3] == self._depth:
            self._open[-1][1].append(data)


def entries(html_dir: Path) -> dict[str, str]:
    """``{entry id: its own text}`` over every page of ``html_dir/api``."""
    found: dict[str, str] = {}
    for page in sorted((html_dir / "api").glob("*.html")):
        parser = _Entries()
        parser.feed(page.read_text(encoding="utf-8"))
        found.update(parser.found)
    return found


def without_bases(text: str) -> str:
    """The text without the "Bases: A, B" line a class entry starts with."""
    return re.sub(r"^Bases:\s+[\w.]+(\s*,\s*[\w.]+)*\s*", "", text)
