"""The built site in a real headless Chromium, served locally: the pages render and the search finds a class.

Screenshots and the rendered search page are kept in ``docs/_build/test-artifacts/`` (not committed).
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import shutil
import signal
import struct
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.docs.conftest import ARTIFACTS

PAGES = {  # screenshot name: (path, what its rendered DOM must hold)
    "front": ("index.html", "<h1>framework"),
    "trainer-api": ("api/framework.Trainer.html", 'id="framework.Trainer"'),
    "module-api": ("api/framework.Module.html#framework.Module.training_step", 'id="framework.Module.training_step"'),
    "callback-api": ("api/framework.Callback.html", 'id="framework.Callback.on_train_batch_end"'),
    "api-index": ("api/index.html", "What it holds"),
    "tutorial": ("tutorials/01-quickstart.html", 'class="highlight-python'),
}
WINDOW = (1280, 900)


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


def _chromium(binary: str, profile: Path, *args: str, timeout: float = 60) -> str:
    # --no-sandbox: Chromium refuses to start as root without it (CI runs as root); the whole process group is
    # killed on a timeout, since a stuck renderer would otherwise outlive the test.
    command = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"chromium did not finish in {timeout} s: {' '.join(command)}")
    assert process.returncode == 0, f"chromium exited with {process.returncode}:\n{err.decode()[-2000:]}"
    return out.decode()


def _screenshot(binary: str, profile: Path, url: str, name: str) -> Path:
    shot = ARTIFACTS / "screenshots" / f"{name}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    _chromium(binary, profile, "--virtual-time-budget=5000", f"--window-size={WINDOW[0]},{WINDOW[1]}",
              f"--screenshot={shot}", url)
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{shot} is not a PNG"
    assert struct.unpack(">II", head[16:24]) == WINDOW
    assert shot.stat().st_size > 10_000, f"{shot} looks blank"  # an empty page is about 2 KB
    return shot


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_page_renders_in_chromium(chromium, served, tmp_path, name):
    path, marker = PAGES[name]
    url = f"{served}/{path}"
    with urllib.request.urlopen(url, timeout=10) as response:  # --screenshot exits 0 on a 404 page too
        assert response.status == 200
    dom = _chromium(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
    assert marker in dom, f"{marker!r} is not in the page Chromium rendered from {url}"
    _screenshot(chromium, tmp_path, url, name)


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


def test_the_search_page_finds_modelcheckpoint(chromium, served, tmp_path):
    url = f"{served}/search.html?q=ModelCheckpoint"
    # the search script adds its results one by one on timers: without a virtual-time budget Chromium dumps the
    # page before it is done
    dom = _chromium(chromium, tmp_path, "--virtual-time-budget=10000", "--dump-dom", url)
    (ARTIFACTS / "search-ModelCheckpoint.html").write_text(dom)
    results = _SearchResults()
    results.feed(dom)
    assert results.summary.startswith("Search finished"), f"the search did not finish: {results.summary!r}"
    assert any(link.endswith("#framework.callbacks.ModelCheckpoint") for link in results.links), results.links
    _screenshot(chromium, tmp_path, url, "search-ModelCheckpoint")
