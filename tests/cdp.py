"""A minimal headless-chromium driver over the DevTools protocol (for the UI tests; no extra packages:
``websockets`` comes with Prefect). ``Browser(tmp).open(url)`` -> a :class:`Page` to evaluate
JavaScript in, wait for a condition and take screenshots."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
    "--remote-allow-origins=*",
    "--remote-debugging-port=0",
    "--disable-breakpad",
    "--disable-crash-reporter",
]


def _own_group_dies_with_parent() -> None:
    """In the child before exec: its own process group (closed with killpg), and SIGTERM when the test
    process dies, so a killed pytest leaves no browser behind (Linux; elsewhere just the group)."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=64 * 2**20, open_timeout=30)
        self.ids = itertools.count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout:
            try:
                last = self.eval(expression)
            except RuntimeError:
                last = None
            if last:
                return last
            time.sleep(0.5)
        raise TimeoutError(f"not true within {timeout:.0f}s: {expression}")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.ws.close()


class Browser:
    def __init__(self, workdir: Path, binary: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "chromium.log"
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={workdir / 'profile'}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "wb"),
            stdin=subprocess.DEVNULL,
            preexec_fn=_own_group_dies_with_parent,
        )
        t0 = time.monotonic()
        self.port = None
        while time.monotonic() - t0 < 60:
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", self.log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        if self.port is None:
            self.close()
            raise RuntimeError(f"chromium did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def open(self, url: str) -> Page:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=30) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        page = Page(pages[0]["webSocketDebuggerUrl"])
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.goto(url)
        return page

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
