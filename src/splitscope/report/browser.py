"""Load a report in headless Chromium and say what a reader's browser would see.

Talks the Chrome DevTools protocol over a pipe (``--remote-debugging-pipe``: NUL-separated
JSON on file descriptors 3 and 4), so it needs nothing but the browser binary: no web-socket
client, no driver. Used by the report's browser test and to take the documentation
screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
                 "chrome", "headless_shell")

# What the page reports about itself once loaded: figures decoded, sections present.
_PROBE = """
(() => {
  const imgs = Array.from(document.images);
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt || i.src.slice(0, 40));
  const sections = Array.from(document.querySelectorAll('[data-section]')).map(e => e.dataset.section);
  const figures = Array.from(document.querySelectorAll('img.figure')).map(i => ({alt: i.alt, w: i.naturalWidth, h: i.naturalHeight}));
  return JSON.stringify({title: document.title, images: imgs.length, broken: broken,
                         sections: sections, figures: figures,
                         tables: document.querySelectorAll('table').length,
                         scripts: document.scripts.length,
                         injected: document.querySelectorAll('img[src="x"], [onerror]').length,
                         text: document.body.innerText,
                         height: document.documentElement.scrollHeight,
                         scroll_width: document.documentElement.scrollWidth,
                         view_width: document.documentElement.clientWidth,
                         wide: Array.from(document.querySelectorAll('body *')).filter(
                           e => e.getBoundingClientRect().right >
                                document.documentElement.clientWidth + 1).slice(0, 5).map(
                           e => e.tagName + '.' + e.className + ' ' +
                                (e.textContent || '').slice(0, 40))});
})()
"""


def find_browser() -> str | None:
    """Path of a Chromium-family browser on ``PATH`` (or ``$SPLITSCOPE_BROWSER``), else None."""
    env = os.environ.get("SPLITSCOPE_BROWSER")
    if env and Path(env).exists():
        return env
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _Pipe:
    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int) -> None:
        self.proc, self.w, self.r = proc, to_browser, from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            ev = self._read(deadline)
            if ev.get("method") == method:
                return ev
            self.events.append(ev)

    def _read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from the browser")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("browser closed the pipe")
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)


def inspect_page(html: str | Path, *, screenshot: str | Path | None = None,
                 width: int = 1200, height: int = 900, browser: str | None = None,
                 timeout: float = 60.0, max_height: int = 16000) -> dict[str, Any]:
    """Open ``html`` in headless Chromium and return what loaded.

    Returns
    -------
    dict
        ``console_errors`` (console messages of level error, uncaught exceptions and log
        entries of level error, e.g. a blocked or failed resource), ``images``, ``broken``
        (images that did not decode), ``sections`` (``data-section`` names present),
        ``figures``, ``tables``, ``scripts``, ``text`` (the page's visible text), ``title``,
        ``scroll_width`` and ``view_width`` (wider content than the window means a
        horizontal scrollbar) and ``wide`` (the first elements reaching past the window).
        With ``screenshot``, a PNG of the page (its top ``max_height`` pixels) is written
        there.
    """
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium browser found (install the 'chromium' package)")
    url = Path(html).resolve().as_uri()
    to_r, to_w = os.pipe()  # we write, the browser reads (its fd 3)
    from_r, from_w = os.pipe()  # the browser writes (its fd 4), we read
    profile = tempfile.mkdtemp(prefix="splitscope-chromium-")
    args = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
            "--remote-debugging-pipe", f"--user-data-dir={profile}",
            f"--window-size={width},{height}", "about:blank"]

    def child_fds() -> None:  # runs in the child: the browser expects its pipe on fds 3 and 4
        r, w = os.dup(to_r), os.dup(from_w)  # out of the way of 3 and 4 first
        os.dup2(r, 3)
        os.dup2(w, 4)
        os.set_inheritable(3, True)
        os.set_inheritable(4, True)

    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=False,
                            preexec_fn=child_fds)  # noqa: PLW1509 - no threads started here
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(proc, to_w, from_r)
    try:
        targets = pipe.send("Target.getTargets", timeout=timeout)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = pipe.send("Target.attachToTarget",
                            {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            pipe.send(domain, session=session)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        pipe.send("Page.navigate", {"url": url}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout=timeout)
        result = pipe.send("Runtime.evaluate", {"expression": _PROBE, "returnByValue": True},
                           session=session)
        info = json.loads(result["result"]["value"])
        if screenshot is not None:
            full_height = min(int(info.get("height") or height), int(max_height))
            shot = pipe.send("Page.captureScreenshot",
                             {"format": "png", "captureBeyondViewport": True,
                              "clip": {"x": 0, "y": 0, "width": width, "height": full_height,
                                       "scale": 1}},
                             session=session, timeout=timeout)
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        time.sleep(0.2)  # let late console/log events arrive
        try:  # a round trip, so events sent before it are read
            pipe.send("Runtime.evaluate", {"expression": "1"}, session=session, timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        errors = []
        for ev in pipe.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                       for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                errors.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(str(params["entry"].get("text")))
        info["console_errors"] = errors
        try:  # the browser may close the pipe before it answers
            pipe.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        return info
    finally:
        os.close(to_w)
        os.close(from_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m splitscope.report.browser REPORT.html [SHOT.png [MAX_HEIGHT]]``: load a
    report, print what loaded (console errors, sections, figures) and optionally save a
    screenshot; exit 1 when the page logged an error or an image did not decode."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(main.__doc__)
        return 2
    shot = args[1] if len(args) > 1 else None
    limit = int(args[2]) if len(args) > 2 else 16000
    info = inspect_page(args[0], screenshot=shot, max_height=limit)
    info.pop("text", None)
    print(json.dumps(info, indent=1))
    return 1 if info["console_errors"] or info["broken"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
