"""Open a report in a real browser (headless Chromium) and check what a reader sees.

Chromium is driven through the DevTools protocol over a pipe
(``--remote-debugging-pipe``: JSON messages separated by NUL bytes, commands on the
child's file descriptor 3, replies and events on 4), so no websocket library and no
downloaded browser are needed: Debian's ``chromium`` package is enough.

``crossover-study browser reports/<study>/report.html --screenshot out.png``
prints one line per image and per console error and exits non-zero when an image did
not load or the console shows an error.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Flags for a quiet, isolated headless browser: no sandbox (CI containers run as
#: root), no GPU, no network traffic of the browser's own (updates, sync, QUIC).
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
#: The browser window's size in pixels when none is asked for.
WINDOW = (1280, 1024)

#: Executables tried, in order, when none is given.
CANDIDATES: tuple[str, ...] = ("chromium", "chromium-browser", "google-chrome")

#: What the page reports about its images: source (the first 80 characters; images
#: embedded as data: URIs are long), natural width and height in pixels (0 when the
#: image failed to load), and whether loading finished.
_IMAGES_JS = """
Array.from(document.images).map(img => ({
  src: img.currentSrc.slice(0, 80),
  naturalWidth: img.naturalWidth,
  naturalHeight: img.naturalHeight,
  complete: img.complete,
}))
"""


class BrowserError(RuntimeError):
    """Chromium could not be started, or did not answer within the time allowed."""


@dataclass
class PageCheck:
    """What the browser saw on one page.

    ``images`` holds one dict per ``<img>`` (``src`` prefix, ``naturalWidth``,
    ``naturalHeight`` in pixels, ``complete``); ``console_errors`` holds one text per
    console error, uncaught exception or failed resource load; ``screenshot`` is the
    PNG written (or None); ``values`` holds what each of the ``expressions`` given to
    :func:`check_page` evaluated to in the page (JSON values; None for ``undefined``).
    """

    url: str
    images: list[dict] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    screenshot: Path | None = None
    values: dict = field(default_factory=dict)

    @property
    def broken_images(self) -> list[dict]:
        """Images that did not load (natural width 0 or loading unfinished)."""
        return [i for i in self.images if not i["complete"] or i["naturalWidth"] <= 0]

    @property
    def ok(self) -> bool:
        """True when every image loaded and the console shows no error."""
        return not self.broken_images and not self.console_errors


def find_chromium(executable: str | None = None) -> str | None:
    """Path of a Chromium executable: ``executable`` if given and found, else the first
    of :data:`CANDIDATES` on ``PATH``; None when there is none."""
    names = (executable,) if executable else CANDIDATES
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


class _Pipe:
    """A DevTools protocol connection over Chromium's debugging pipe."""

    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int):
        self.proc = proc
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe (exit status {self.proc.poll()})")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(
        self, method: str, params: dict | None = None, session: str | None = None, timeout=30.0
    ) -> dict:
        """Send one command and return its result; events read meanwhile are kept."""
        self.next_id += 1
        command = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self.write_fd, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        """Return the first event named ``method`` (already received or arriving)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            self.events.append(message)
            if message.get("method") == method:
                return message


def _console_errors(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and failed loads among DevTools events."""
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])
            )
            errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            errors.append(f"uncaught exception: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            where = f" ({entry['url']})" if entry.get("url") else ""
            errors.append(f"{entry.get('source', 'log')}: {entry.get('text')}{where}")
    return errors


def check_page(
    path: str | Path,
    screenshot: str | Path | None = None,
    executable: str | None = None,
    timeout: float = 60.0,
    settle_s: float = 0.5,
    expressions: dict[str, str] | None = None,
    window: tuple[int, int] = WINDOW,
    first_screen: str | Path | None = None,
) -> PageCheck:
    """Load ``path`` (an HTML file) in headless Chromium and report what it saw.

    Waits for the page's load event, then ``settle_s`` seconds for late console
    messages, reads every image's natural size and collects console errors, uncaught
    exceptions and failed resource loads. Writes a full-page PNG to ``screenshot``
    when given. ``expressions`` (``{name: JavaScript expression}``) are evaluated in
    the page after that, their JSON values in ``values[name]`` (e.g. whether a flag an
    injected script would set is set, or the page's visible text). ``window`` is the
    page's viewport, width and height in pixels; ``first_screen``, when given, gets a PNG
    of what that window shows before any scrolling (the page's first screen). Raises
    FileNotFoundError for a missing page, :class:`BrowserError` when Chromium is
    missing, fails to start or does not answer within ``timeout`` seconds.
    """
    page = Path(path).resolve()
    if not page.is_file():
        raise FileNotFoundError(page)
    binary = find_chromium(executable)
    if binary is None:
        raise BrowserError(f"no Chromium found (tried {executable or ', '.join(CANDIDATES)})")
    result = PageCheck(url=page.as_uri())
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        # The debugging pipe: the browser reads commands on fd 3 and writes on fd 4.
        # The child's ends are first moved above 4, so that placing one on 3 or 4
        # cannot overwrite the other.
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        child_in = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
        child_out = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
        for fd in (to_child_r, from_child_w):
            os.close(fd)

        def _child_fds():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        proc = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--window-size={window[0]},{window[1]}",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_child_fds,
            pass_fds=(3, 4, child_in, child_out),
        )
        os.close(child_in)
        os.close(child_out)
        pipe = _Pipe(proc, to_child_w, from_child_r)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"}, timeout=timeout)
            session = pipe.send(
                "Target.attachToTarget",
                {"targetId": target["targetId"], "flatten": True},
                timeout=timeout,
            )["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                pipe.send(f"{domain}.enable", session=session, timeout=timeout)
            # The page's viewport is the window's size exactly (headless Chromium keeps
            # part of the window for a toolbar it does not draw).
            pipe.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": window[0], "height": window[1], "deviceScaleFactor": 1, "mobile": False},
                session=session,
                timeout=timeout,
            )
            pipe.events.clear()
            pipe.send("Page.navigate", {"url": result.url}, session=session, timeout=timeout)
            pipe.wait_for("Page.loadEventFired", timeout=timeout)
            time.sleep(settle_s)
            evaluated = pipe.send(
                "Runtime.evaluate",
                {"expression": _IMAGES_JS, "returnByValue": True, "awaitPromise": True},
                session=session,
                timeout=timeout,
            )
            result.images = evaluated.get("result", {}).get("value", [])
            for name, expression in (expressions or {}).items():
                value = pipe.send(
                    "Runtime.evaluate",
                    {"expression": expression, "returnByValue": True, "awaitPromise": True},
                    session=session,
                    timeout=timeout,
                )
                result.values[name] = value.get("result", {}).get("value")
            if first_screen is not None:
                shot = pipe.send(
                    "Page.captureScreenshot", {"format": "png"}, session=session, timeout=timeout
                )
                Path(first_screen).parent.mkdir(parents=True, exist_ok=True)
                Path(first_screen).write_bytes(base64.b64decode(shot["data"]))
            if screenshot is not None:
                shot = pipe.send(
                    "Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": True},
                    session=session,
                    timeout=timeout,
                )
                result.screenshot = Path(screenshot)
                result.screenshot.parent.mkdir(parents=True, exist_ok=True)
                result.screenshot.write_bytes(base64.b64decode(shot["data"]))
            result.console_errors = _console_errors(pipe.events)
            try:
                pipe.send("Browser.close", timeout=10)
            except BrowserError:
                pass  # the browser may close the pipe before it answers
        finally:
            os.close(to_child_w)
            os.close(from_child_r)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return result


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: check one page; exit status 1 when an image or the console fails."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="HTML file, e.g. reports/smoke/report.html")
    parser.add_argument("--screenshot", help="write a full-page PNG here")
    parser.add_argument("--chromium", help="browser executable (default: chromium)")
    args = parser.parse_args(argv)
    check = check_page(args.page, screenshot=args.screenshot, executable=args.chromium)
    for image in check.images:
        state = "BROKEN" if image in check.broken_images else "ok"
        print(f"image {state}: {image['naturalWidth']}x{image['naturalHeight']} {image['src']}")
    for error in check.console_errors:
        print(f"console error: {error}")
    if check.screenshot:
        print(f"screenshot: {check.screenshot}")
    print(
        f"{check.url}: {len(check.images)} image(s), {len(check.broken_images)} broken, "
        f"{len(check.console_errors)} console error(s)"
    )
    return 0 if check.ok else 1
