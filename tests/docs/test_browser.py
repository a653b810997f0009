"""The built site in a real headless Chromium, served locally: the pages render, the search finds a class, and
no code line is cut at the default window size nor on wide screens.

Screenshots and the rendered search page are kept in ``docs/_build/test-artifacts/`` (not committed).
"""

from __future__ import annotations

import functools
import html
import html.parser
import http.server
import os
import re
import shutil
import struct
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.docs.devtools import Browser
from tests.docs.site_build import ARTIFACTS

PAGES = {  # screenshot name: (path, what its rendered DOM must hold[, window size, if not WINDOW])
    "front": ("index.html", "<h1>framework"),
    "trainer-api": ("api/framework.Trainer.html", 'id="framework.Trainer"'),
    "module-api": ("api/framework.Module.html#framework.Module.training_step", 'id="framework.Module.training_step"'),
    "callback-api": ("api/framework.Callback.html", 'id="framework.Callback.on_train_batch_end"'),
    "api-index": ("api/index.html", "What it holds"),
    "runtime-api": ("api/framework.Runtime.html", 'id="framework.Runtime.setup"'),
    "accelerator-api": ("api/framework.accelerate.Accelerator.html", 'id="framework.accelerate.Accelerator.prepare"'),
    "checkpoint-api": ("api/framework.callbacks.ModelCheckpoint.html",
                       'id="framework.callbacks.ModelCheckpoint.best_model_path"'),
    "trainer-guide": ("guide/trainer.html", 'class="continues-above"'),
    "module-guide": ("guide/module.html#fit", "on_validation_model_zero_grad"),
    "tutorial": ("tutorials/01-quickstart.html", 'class="highlight-python'),
    # code blocks at 120 columns beside prose at Furo's measure (docs/_static/custom.css): its first block's
    # second line is 111 columns long
    "wide-code": ("guide/accelerate.html", "# was: from accelerate.utils import"),
    # the same on a wide screen, the page's contents beside the article and the code's room between them
    "wide-code-1920": ("guide/accelerate.html", "# was: from accelerate.utils import", (1920, 1080)),
}
WINDOW = (1280, 900)
# where no code line may be cut: the default window (the page's contents behind their button) and wide screens,
# the contents beside the article: at 1600 px the page at 100%, at 1920 px at Furo's 110% (docs/_static/custom.css)
CODE_WINDOWS = (WINDOW, (1600, 1000), (1920, 1080))


@pytest.fixture(scope="module")
def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip(os.environ.get("DOCS_BROWSER_SKIP_REASON")
                    or "no Chromium on PATH: install Debian's chromium package (`apt-get install -y chromium`, "
                       "as .ci/run does), or set CHROMIUM=/path/to/chromium")
    return path


@pytest.fixture(scope="module")
def served(site):
    assert site.returncode == 0, "the site did not build (see test_site.py)"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site.html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _command(binary: str, profile: Path) -> list[str]:
    # --no-sandbox: Chromium refuses to start as root without it (CI runs as root)
    return [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            f"--user-data-dir={profile}"]


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    """One Chromium for the module's checks, each page in a tab of its own (a start of Chromium per page cost more
    than the page)."""
    folder = tmp_path_factory.mktemp("chromium")
    command = [*_command(chromium, folder / "profile"), f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    with Browser(command, folder / "chromium.log", timeout=300) as browser:
        yield browser


def _screenshot(browser: Browser, tab: str, name: str, window: tuple[int, int]) -> Path:
    shot = ARTIFACTS / "screenshots" / f"{name}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.write_bytes(browser.screenshot(tab))
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{shot} is not a PNG"
    assert struct.unpack(">II", head[16:24]) == window
    assert shot.stat().st_size > 10_000, f"{shot} looks blank"  # an empty page is about 2 KB
    return shot


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_page_renders_in_chromium(browser, served, name):
    path, marker, *size = PAGES[name]
    window = size[0] if size else WINDOW
    url = f"{served}/{path}"
    with urllib.request.urlopen(url, timeout=10) as response:  # a 404 page would render and look fine
        assert response.status == 200
    tab = browser.open_tab(url, window)
    try:
        dom = browser.evaluate(tab, "document.documentElement.outerHTML")
        assert marker in dom, f"{marker!r} is not in the page Chromium rendered from {url}"
        _screenshot(browser, tab, name, window)
    finally:
        browser.close_tab(tab)


class _SearchResults(html.parser.HTMLParser):
    """The summary line and the result links of Sphinx's search page, as its JavaScript filled them in."""

    def __init__(self) -> None:
        super().__init__()
        self.summary, self.links = "", []
        self._in_results = self._in_summary = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "ul" and "search" in classes:
            self._in_results = True
        elif tag == "a" and self._in_results and found.get("href"):
            self.links.append(found["href"])
        elif tag == "p" and "search-summary" in classes:
            self._in_summary = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul":
            self._in_results = False
        elif tag == "p":
            self._in_summary = False

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self.summary += data


def test_the_search_page_finds_modelcheckpoint(browser, served):
    url = f"{served}/search.html?q=ModelCheckpoint"
    tab = browser.open_tab(url, WINDOW)
    try:
        # the search script adds its results one by one on timers, after the load event
        browser.evaluate(tab, _SEARCH_FINISHED)
        dom = browser.evaluate(tab, "document.documentElement.outerHTML")
        (ARTIFACTS / "search-ModelCheckpoint.html").write_text(dom)
        results = _SearchResults()
        results.feed(dom)
        assert results.summary.startswith("Search finished"), f"the search did not finish: {results.summary!r}"
        assert any(link.endswith("#framework.callbacks.ModelCheckpoint") for link in results.links), results.links
        _screenshot(browser, tab, "search-ModelCheckpoint", WINDOW)
    finally:
        browser.close_tab(tab)


# Resolves once Sphinx's search has written its summary line, or after 20 s (the test then says what it read).
_SEARCH_FINISHED = """new Promise(done => {
  const started = Date.now(), look = () => {
    const summary = document.querySelector("p.search-summary");
    if ((summary && summary.textContent.startsWith("Search finished")) || Date.now() - started > 20000) done();
    else setTimeout(look, 50);
  };
  look();
})"""


# The code blocks of a page that the reader cannot read whole at this window size, each with its first line cut.
# A <pre> is a scroll container (Furo's overflow: auto), so its text is cut where it scrolls sideways (scrollWidth
# past clientWidth), or where a box around it that clips, the page's contents beside the article, or the window,
# ends before its text does. Each line is measured as a Range over the text nodes it spans, so the line named is
# the first one cut, not the longest. A block whose box reaches under the contents is listed too, and the width of
# the article, whose prose keeps Furo's measure, is given in rem.
_CUT_LINES = r"""(() => {
  const viewport = document.documentElement.clientWidth, blocks = document.querySelectorAll("pre"), cut = [];
  // the page's contents: beside the article on a wide screen, else just past the window's edge, behind a button;
  // none on a page without headings (Furo's no-toc)
  const drawer = document.querySelector(".toc-drawer:not(.no-toc)"), under = [];
  const contents = drawer ? drawer.getBoundingClientRect().left : viewport;
  blocks.forEach((pre, index) => {
    const box = pre.getBoundingClientRect();
    if (!box.width) return;  // not shown (a closed <details>)
    if (box.right > contents + 0.5) under.push({block: index + 1, over: Math.round(box.right - contents)});
    let outer = Math.min(viewport, contents);
    for (let around = pre.parentElement; around; around = around.parentElement) {
      if (getComputedStyle(around).overflowX !== "visible") {
        outer = Math.min(outer, around.getBoundingClientRect().left + around.clientLeft + around.clientWidth);
      }
    }
    // the usual case, at once: the block does not scroll and ends before anything could cut it
    if (pre.scrollWidth <= pre.clientWidth && box.right <= outer + 0.5) return;
    const own = box.left + pre.clientLeft + pre.clientWidth - parseFloat(getComputedStyle(pre).paddingRight);
    const lines = [];  // [right edge, text]
    let range = document.createRange();
    range.setStart(pre, 0);
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node; (node = walker.nextNode());) {
      for (let at = node.data.indexOf("\n"); at !== -1; at = node.data.indexOf("\n", at + 1)) {
        range.setEnd(node, at);
        lines.push([range.getBoundingClientRect().right, range.toString()]);
        range = document.createRange();
        range.setStart(node, at + 1);
      }
    }
    range.setEnd(pre, pre.childNodes.length);
    lines.push([range.getBoundingClientRect().right, range.toString()]);
    if (pre.scrollWidth <= pre.clientWidth && lines.every(([right]) => right <= outer + 0.5)) return;
    const edge = Math.min(own, outer), first = lines.findIndex(([right]) => right > edge + 0.5);
    if (first === -1) {
      cut.push({block: index + 1, number: 0, text: "(no one line)", over: pre.scrollWidth - pre.clientWidth});
    } else {
      cut.push({block: index + 1, number: first + 1, text: lines[first][1], over: Math.round(lines[first][0] - edge)});
    }
  });
  const sideways = document.documentElement.scrollWidth - viewport;
  const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
  const prose = document.querySelector("article[role=main]").getBoundingClientRect().width / rem;
  return {width: innerWidth, blocks: blocks.length, cut, under, sideways, prose,
          contents: drawer ? (contents < viewport ? "beside" : "behind") : "none"};
})()"""
_BOXES = re.compile(r"<(/?)(dl|dd|li|blockquote|table|aside|div|pre)\b([^>]*)>")
_TAG = re.compile(r"<[^>]+>")
_GENERATED = ("api/", "_modules/")  # the same few templates over and over: autodoc's entries, viewcode's listings


def _places_of_code(text: str) -> dict[tuple[str, ...], int]:
    """The longest line of a page's <pre> blocks in each place one sits: the boxes around it that indent or clip it
    (an entry's or a field list's dl and dd, li, blockquote, table, aside, an admonition), and its own attributes."""
    places, around = {}, []  # around: the open boxes, "" for a div that neither indents nor clips
    for match in _BOXES.finditer(text):
        closing, tag, attributes = match.groups()
        if tag == "pre":
            if not closing:
                code = html.unescape(_TAG.sub("", text[match.end():text.find("</pre>", match.end())]))
                place = (*[box for _, box in around if box], attributes)
                places[place] = max(places.get(place, 0), *map(len, code.splitlines()), 0)
        elif closing:
            while around and around.pop()[0] != tag:
                pass
        else:
            box = tag + attributes if tag == "dl" else "admonition" if "admonition" in attributes else tag
            around.append((tag, "" if box == "div" else box))
    return places


def _pages_with_code(root: Path) -> list[str]:
    """Every written page with a <pre>, and of the generated ones, for each place a block sits in there, the page
    with the longest line in that place, the first a narrower box would cut: a handful of pages instead of all
    160-odd, which takes the test from 16 s to 4 on 2 cores (with the fix of issue 47, loading all of them found
    no cut either)."""
    pages, longest = [], {}  # longest: place -> (columns, page)
    for path in sorted(root.rglob("*.html")):
        page, text = path.relative_to(root).as_posix(), path.read_text()
        if "<pre" not in text or page.startswith("_static/"):
            continue
        if not page.startswith(_GENERATED):
            pages.append(page)
            continue
        for place, columns in _places_of_code(text).items():
            key = (page.startswith("api/"), place)
            longest[key] = max(longest.get(key, (0, "")), (columns, page))
    return pages + sorted({page for _, page in longest.values()})


def test_no_code_line_is_cut(browser, site, served):
    """At the default window size and on wide screens every line of every code block shows whole: none ends behind
    its block's scrollbar, under a box that clips it, under the page's contents or past the window's edge, no block
    reaches under the contents, which a wide screen shows beside the article, no page scrolls sideways, and prose
    keeps Furo's 46em measure (issue 47; how the site makes the room: docs/_static/custom.css). Each page is loaded
    once and laid out at each size."""
    pages = _pages_with_code(site.html)
    seen = browser.evaluate_on_pages([f"{served}/{page}" for page in pages], _CUT_LINES, sizes=CODE_WINDOWS)
    problems = []
    for at, (width, height) in enumerate(CODE_WINDOWS):
        window = f"{width}x{height}"
        results = {page: seen[f"{served}/{page}"][at] for page in pages}
        assert {result["width"] for result in results.values()} == {width}, f"the pages were not seen at {window}"
        assert sum(result["blocks"] for result in results.values()) > 100, "the pages checked hold hardly any code"
        for page, result in results.items():
            if result["cut"]:
                first = result["cut"][0]
                problems.append(f"{window} {page}: code block {first['block']} of {result['blocks']}, its line "
                                f"{first['number']} ends {first['over']} px past what shows ({len(result['cut'])} "
                                f"block(s) cut on the page): {first['text'][:160]!r}")
            if result["under"]:
                first = result["under"][0]
                problems.append(f"{window} {page}: code block {first['block']} reaches {first['over']} px under the "
                                f"page's contents ({len(result['under'])} block(s))")
            if result["sideways"] > 0:
                problems.append(f"{window} {page}: the page is {result['sideways']} px wider than the window")
            if (width, height) != WINDOW and result["contents"] == "behind":  # no room made by hiding them
                problems.append(f"{window} {page}: the page's contents are not beside the article")
            if result["prose"] > 46.01:
                problems.append(f"{window} {page}: the article is {result['prose']:.2f}rem wide, past Furo's 46em")
    assert not problems, f"{len(problems)} cut code lines or overlaps on the {len(pages)} pages with code:\n" + (
        "\n".join(problems))
