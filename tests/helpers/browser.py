"""Headless Debian Chromium driven over the DevTools protocol (``--remote-debugging-pipe``:
JSON messages ended by NUL on file descriptors 3 and 4), for tests that look at a rendered page.
No network beyond what the page itself loads; a fresh profile per browser."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_missing():
    """Why the browser tests cannot run here, or None."""
    if not os.path.exists(CHROMIUM):
        return ("needs Debian's chromium at %s (apt-get install -y chromium)" % CHROMIUM)
    return None


class Browser:
    """One headless Chromium with one page; ``evaluate`` runs JavaScript in the page."""

    def __init__(self, width=1400, height=900):
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def to_fds_3_and_4():  # in the child, before exec: the pipe ends where Chromium wants
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM] + FLAGS + ["--user-data-dir=" + self.profile, "--remote-debugging-pipe",
                                  "--window-size=%d,%d" % (width, height), "about:blank"],
            preexec_fn=to_fds_3_and_4, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._id = 0
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]

    def send(self, method, session=None, **params):
        """Send one command and return its result (events in between are dropped)."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_child, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium exited (rc %s)" % self.proc.poll())
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply["result"]

    def page(self, method, **params):
        return self.send(method, session=self.session, **params)

    def navigate(self, url):
        self.page("Page.navigate", url=url)

    def evaluate(self, expression):
        result = self.page("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError("page script failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, expression, timeout=120.0, what="the page"):
        """Evaluate ``expression`` until it gives a true value (the page's own progress is
        the event waited for; ``timeout`` only bounds a page that never gets there)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("%s never showed up in %.0f s" % (what, timeout))
            self.evaluate("new Promise(r => setTimeout(r, 100))")

    def screenshot(self, path, clip=None):
        params = {"format": "png"}
        if clip is not None:
            params["clip"] = dict(clip, scale=1)
        data = base64.b64decode(self.page("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data

    def close(self):
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self.profile, ignore_errors=True)
