"""A real browser for the tests: headless Chromium driven through the DevTools protocol over a pipe
(--remote-debugging-pipe: JSON messages ending in a NUL byte on file descriptors 3 and 4), with the standard
library only. It opens a page, presses keys as a user does (Input.dispatchKeyEvent), reads the page back
(Runtime.evaluate), takes screenshots, and keeps every console error and uncaught exception.

    with Chromium() as browser:
        browser.open("file:///.../rounds.html")
        browser.press("ArrowRight")
        browser.evaluate("document.getElementById('kept').textContent")
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time

KEYS = {"ArrowRight": 39, "ArrowLeft": 37}


def chromium_path():  # -> the browser's executable, or None (Debian's package is `chromium`)
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


class Chromium:

    def __init__(self, width=1100, height=900, timeout=30.0):
        self.timeout, self.next_id, self.errors, self.events, self.buffer = timeout, 0, [], [], b""
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self.log = open(os.path.join(self.profile, "stderr.txt"), "wb")  # the browser's own messages, if it fails
        to_browser, self.to_browser = os.pipe()  # we write, it reads fd 3
        self.from_browser, from_us = os.pipe()  # it writes fd 4, we read

        def on_fds_3_and_4():  # in the child: the pipes where Chromium expects them
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_us)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [chromium_path(), "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
            preexec_fn=on_fds_3_and_4, pass_fds=(3, 4, to_browser, from_us))
        os.close(to_browser)
        os.close(from_us)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method, session, params):
        self.next_id += 1
        message = dict(id=self.next_id, method=method, params=params)
        if session:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def receive(self):  # -> the next message; console errors and exceptions are kept as they pass
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                with open(self.log.name, errors="replace") as fh:
                    said = fh.read()[-2000:]
                raise TimeoutError(f"Chromium did not answer (is it installed? `apt-get install -y chromium`): {said}")
            self.buffer += os.read(self.from_browser, 1 << 16)
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message = json.loads(raw)
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("exception", {}).get("description", str(params)))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        elif method:
            self.events.append(method)
        return message

    def call(self, method, session=False, **params):  # -> the result of one command
        sent = self.send(method, session, params)
        while True:
            message = self.receive()
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def open(self, url):  # -> seconds from the navigation to the page's load event
        self.events.clear()
        tic = time.perf_counter()
        self.call("Page.navigate", session=True, url=url)
        while "Page.loadEventFired" not in self.events:
            self.receive()
        return time.perf_counter() - tic

    def press(self, key):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, code=key,
                      windowsVirtualKeyCode=KEYS[key])

    def evaluate(self, expression):  # -> the value of a JavaScript expression in the page
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path, selector=None):  # a PNG of the page, or of one element
        params = dict(format="png")
        if selector:
            box = self.evaluate(f"(r => [r.x, r.y, r.width, r.height])(document.querySelector({json.dumps(selector)})"
                                ".getBoundingClientRect())")
            params["clip"] = dict(x=box[0], y=box[1], width=box[2], height=box[3], scale=1)
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"]))
