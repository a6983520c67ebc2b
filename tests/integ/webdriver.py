"""A headless Chromium driven through chromedriver's W3C WebDriver HTTP
protocol, with the Python standard library only (Debian packages chromium
and chromium-driver, installed by scripts/deps).

    with Browser(log_dir) as b:
        b.get("http://127.0.0.1:7070/")
        b.find("#token-input").type("secret")
        b.find("#token-form button").click()
        rows = b.script("return document.querySelectorAll('tr').length")
        b.screenshot("page.png", full_page=True)

The W3C commands cover navigation, elements, scripts and screenshots of
the viewport; a whole-page screenshot goes through chromedriver's DevTools
passthrough (goog/cdp/execute).
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(Exception):
    pass


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        return s.getsockname()[1]
    finally:
        s.close()


class Element:
    def __init__(self, browser, eid, selector):
        self.b, self.id, self.selector = browser, eid, selector

    def click(self):
        self.b._cmd("POST", "/element/%s/click" % self.id, {})
        return self

    def type(self, text):
        self.b._cmd("POST", "/element/%s/clear" % self.id, {})
        self.b._cmd("POST", "/element/%s/value" % self.id, {"text": text})
        return self

    @property
    def text(self):
        return self.b._cmd("GET", "/element/%s/text" % self.id)

    def enabled(self):
        return self.b._cmd("GET", "/element/%s/enabled" % self.id)


class Browser:
    def __init__(self, log_dir, width=1360, height=900):
        self.log_dir = log_dir
        self.width, self.height = width, height
        self.proc = None
        self.session = None
        self.base = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def start(self, timeout=30):
        driver = shutil.which("chromedriver")
        chromium = shutil.which("chromium")
        if driver is None or chromium is None:
            raise WebDriverError("chromium and chromedriver are needed "
                                 "(Debian: chromium chromium-driver, "
                                 "scripts/deps installs them)")
        port = _free_port()
        self.base = "http://127.0.0.1:%d" % port
        log = open(os.path.join(self.log_dir, "chromedriver.log"), "ab")
        self.proc = subprocess.Popen(
            [driver, "--port=%d" % port],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._http("GET", "/status")["value"].get("ready"):
                    break
            except (OSError, WebDriverError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise WebDriverError("chromedriver did not start (see %s)"
                                     % os.path.join(self.log_dir,
                                                    "chromedriver.log"))
            time.sleep(0.1)
        args = ["--headless=new", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check",
                "--window-size=%d,%d" % (self.width, self.height),
                "--user-data-dir=" + os.path.join(self.log_dir,
                                                  "chromium-profile")]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses root otherwise
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}}}}
        r = self._http("POST", "/session", caps, timeout=60)
        self.session = r["value"]["sessionId"]
        return self

    def close(self):
        if self.session is not None:
            try:
                self._cmd("DELETE", "", timeout=10)
            except Exception:
                pass
            self.session = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    # -- protocol ------------------------------------------------------
    def _http(self, method, path, body=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method,
            headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            try:
                v = json.loads(e.read().decode())["value"]
                msg = "%s: %s" % (v.get("error"), v.get("message", "")[:500])
            except Exception:
                msg = "HTTP %d" % e.code
            raise WebDriverError("%s %s: %s" % (method, path, msg)) from None

    def _cmd(self, method, path, body=None, timeout=30):
        return self._http(method, "/session/%s%s" % (self.session, path),
                          body, timeout)["value"]

    # -- commands ------------------------------------------------------
    def get(self, url):
        self._cmd("POST", "/url", {"url": url}, timeout=60)

    def script(self, js, *args):
        """Runs js as a function body in the page; returns its value."""
        return self._cmd("POST", "/execute/sync",
                         {"script": js, "args": list(args)})

    def find(self, selector):
        v = self._cmd("POST", "/element",
                      {"using": "css selector", "value": selector})
        return Element(self, v[ELEMENT], selector)

    def click(self, selector, timeout=10):
        """Finds selector and clicks it, again if the element was replaced
        in between (a panel the page re-renders as it polls)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.find(selector).click()
            except WebDriverError as e:
                if "stale element" not in str(e) or \
                        time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def wait_for(self, js, timeout, what, *args):
        """Polls js (a function body) until it returns a true value."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = self.script(js, *args)
                if last:
                    return last
            except WebDriverError as e:
                last = e
            if time.monotonic() > deadline:
                raise WebDriverError("timed out after %ss waiting for %s "
                                     "(last: %r)" % (timeout, what, last))
            time.sleep(0.2)

    def cdp(self, cmd, params=None):
        """A Chrome DevTools Protocol command (chromedriver extension)."""
        return self._cmd("POST", "/goog/cdp/execute",
                         {"cmd": cmd, "params": params or {}})

    def screenshot(self, path, full_page=False):
        """Saves a PNG of the viewport, or of the whole page (DevTools:
        the standard command captures the viewport only)."""
        if full_page:
            size = self.cdp("Page.getLayoutMetrics")["cssContentSize"]
            shot = self.cdp("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"],
                         "height": size["height"], "scale": 1}})
            png = base64.b64decode(shot["data"])
        else:
            png = base64.b64decode(self._cmd("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return png
