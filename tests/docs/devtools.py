"""Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``): a check that reads many
pages loads them in one browser, a few tabs at a time, instead of starting Chromium once a page (half a second
each, and a page of the site is loaded in a tenth of that).

The protocol is JSON messages ended by a NUL byte, written to the browser's fd 3 and read from its fd 4; a reply
carries the ``id`` of its call, an event its ``method`` and the ``sessionId`` of its tab.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


class BrowserError(RuntimeError):
    pass


class Browser:
    """A headless Chromium started with ``command`` (its flags, without the pipe's), stopped on ``close``."""

    def __init__(self, command: list[str], log: Path, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout  # for everything the browser is asked, together
        self.log = log
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def onto_fds_3_and_4() -> None:
            # through copies above 10 first: a pipe end may itself be fd 3 or 4, which the other dup2 would close,
            # and dup2 onto the same number would leave it close-on-exec
            ends = [fcntl.fcntl(end, fcntl.F_DUPFD, 10) for end in (to_browser, from_browser)]
            for end, number in zip(ends, (3, 4)):
                os.dup2(end, number)  # inheritable
                os.close(end)

        with log.open("wb") as stderr:
            # close_fds=False: the pipe's ends are put at 3 and 4 in the child, after Popen's closing would run;
            # every other fd this process holds is opened non-inheritable by Python, so the browser gets no other.
            self.process = subprocess.Popen([*command, "--remote-debugging-pipe", "about:blank"],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                            close_fds=False, preexec_fn=onto_fds_3_and_4, start_new_session=True)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._last_id = 0

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the renderers too, which a stuck page would keep alive
        self.process.wait()
        os.close(self._write)
        os.close(self._read)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fail(self, why: str) -> BrowserError:
        return BrowserError(f"{why}; chromium's stderr ends:\n{self.log.read_text(errors='replace')[-2000:]}")

    def send(self, method: str, session: str | None = None, **params) -> int:
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        return self._last_id

    def receive(self) -> dict:
        while b"\0" not in self._buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise self._fail("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise self._fail(f"chromium exited ({self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send and wait for the reply; events that come before it are dropped (no tab is loading meanwhile)."""
        sent = self.send(method, session, **params)
        while (message := self.receive()).get("id") != sent:
            pass
        if "error" in message:
            raise self._fail(f"{method}: {message['error']}")
        return message["result"]

    def evaluate_on_pages(self, urls: list[str], script: str, tabs: int = 4,
                          sizes: Sequence[tuple[int, int]] = ()) -> dict[str, list]:
        """Load every URL (``tabs`` at a time) and, once its load event fired, evaluate ``script`` in it at each
        viewport size of ``sizes`` (width, height; none: the window's size): the script's JSON values of each URL,
        one per size. A page is loaded once and laid out again at each other size (``Emulation.
        setDeviceMetricsOverride``, whose reply comes once the tab has the size); it is seen first at the size the
        tab has, the last one of the page before, so the sizes go back and forth: one layout fewer a page."""
        sizes = list(sizes) or [None]
        sessions = [self._new_tab(sizes[0]) for _ in range(min(tabs, len(urls)))]
        waiting, loading, navigating, resizing, evaluating = list(urls), {}, {}, {}, {}
        size_of, steps_of, values = dict.fromkeys(sessions, sizes[0]), {}, {}

        def load_next(session: str) -> None:
            if waiting:
                loading[session] = waiting.pop(0)
                navigating[self.send("Page.navigate", session, url=loading[session])] = session

        def next_step(session: str) -> None:  # the page at its next size, or the next page
            if not steps_of[session]:
                load_next(session)
            elif size_of[session] != (size := sizes[steps_of[session][0]]):
                size_of[session] = size
                resizing[self.resize(session, *size, wait=False)] = session
            else:
                evaluating[self.send("Runtime.evaluate", session, expression=script, returnByValue=True)] = session

        for session in sessions:
            load_next(session)
        while len(values) < len(urls) or any(None in seen for seen in values.values()):
            message = self.receive()
            if message.get("method") == "Page.loadEventFired":
                session = message["sessionId"]
                steps_of[session] = list(range(len(sizes)))[::1 if size_of[session] == sizes[0] else -1]
                values[loading[session]] = [None] * len(sizes)
                next_step(session)
            elif message.get("id") in navigating:  # a page that cannot load fires no load event
                session = navigating.pop(message["id"])
                if "error" in message or message["result"].get("errorText"):
                    raise self._fail(f"chromium could not load {loading[session]}: {message}")
            elif message.get("id") in resizing:
                session = resizing.pop(message["id"])
                if "error" in message:
                    raise self._fail(f"chromium could not resize {loading[session]}: {message['error']}")
                next_step(session)
            elif message.get("id") in evaluating:
                session = evaluating.pop(message["id"])
                result = message.get("result", {})
                if "error" in message or "exceptionDetails" in result:
                    raise self._fail(f"the script failed on {loading[session]}: {message.get('error') or result}")
                values[loading[session]][steps_of[session].pop(0)] = result["result"].get("value")
                next_step(session)
        return values

    def resize(self, session: str, width: int, height: int, wait: bool = True) -> int | dict:
        """Give a tab a viewport of ``width`` x ``height`` CSS pixels, at one device pixel each, as a desktop
        window has; the call's id if not ``wait``."""
        send = self.call if wait else self.send
        return send("Emulation.setDeviceMetricsOverride", session, width=width, height=height, deviceScaleFactor=1,
                    mobile=False)

    def _new_tab(self, size: tuple[int, int] | None) -> str:
        """A blank tab whose page events come to this Browser, of viewport ``size`` (None: the window's): its
        session."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session)
        if size is not None:
            self.resize(session, *size)
        return session

    def open_tab(self, url: str, size: tuple[int, int]) -> str:
        """A new tab of viewport ``size`` showing ``url`` once its load event fired and its fonts are laid out: the
        tab's session, for `evaluate`, `screenshot` and `close_tab`."""
        session = self._new_tab(size)
        navigating, loaded = self.send("Page.navigate", session, url=url), False
        while navigating or not loaded:
            message = self.receive()
            if message.get("id") == navigating:  # a page that cannot load fires no load event
                if "error" in message or message["result"].get("errorText"):
                    raise self._fail(f"chromium could not load {url}: {message}")
                navigating = 0
            loaded |= message.get("method") == "Page.loadEventFired" and message.get("sessionId") == session
        self.evaluate(session, "document.fonts.ready.then(() => new Promise(requestAnimationFrame))")
        return session

    def evaluate(self, session: str, expression: str) -> object:
        """The JSON value of ``expression`` in the tab, a promise awaited."""
        result = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise self._fail(f"{expression[:80]!r} failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, session: str) -> bytes:
        """The tab's viewport as a PNG, one pixel a CSS pixel."""
        return base64.b64decode(self.call("Page.captureScreenshot", session, format="png")["data"])

    def close_tab(self, session: str) -> None:
        target = self.call("Target.getTargetInfo", session)["targetInfo"]["targetId"]
        self.call("Target.closeTarget", targetId=target)
