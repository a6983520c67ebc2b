#!/usr/bin/python3
"""The web console (GET / on the manager) in a headless Chromium against a
3-worker cluster with bearer tokens: the page asks for a token, shows the
16 slots with the owners GET /v1/cluster reports, charts the lateness the
workers measured, and cancels a task (with a confirmation) so that it is
never published. Leaves a screenshot, test_console.png, beside the test's
log. The booked-load heatmap shows tasks booked hours ahead in their
topic's row."""

import os
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from webdriver import Browser  # noqa: E402

TOKEN = "console-0123456789abcdef"
READ_ONLY = "console-ro-0123456789abcd"
C = None
B = None
READER = None
FIRED = []  # ids of the tasks fired for the lateness chart

SHOT_DIR = os.path.join(h.BUILDDIR, "tests", "integ")


def call(method, path, body=None, token=TOKEN):
    api = C.api()
    try:
        hdrs = {"Authorization": "Bearer " + token} if token else {}
        return api.request(method, path, body, headers=hdrs)
    finally:
        api.close()


def owners_from_api():
    r = call("GET", "/v1/cluster")
    h.check_eq(r.status, 200, "GET /v1/cluster")
    return [s["owner"] for s in r.json["slots"]]


def setup():
    global C, B, READER
    tokens = os.path.join(tempfile.gettempdir(),
                          "prophet-console-tokens-%s" % h.rand_tag())
    # Owner only: the manager refuses a tokens file others may read.
    with open(os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
              "w") as f:
        f.write("%s admin\n%s read\n" % (TOKEN, READ_ONLY))
    C = h.Cluster(workers=3, name="console",
                  conf={"http.tokens_file": tokens}).open()
    C.tokens_path = tokens
    C.start()
    h.create_topics(C.brokers, [C.topic("console")])
    READER = C.reader(["console"])
    # Settled: every slot owned, by the three workers.
    h.wait_until(lambda: all(owners_from_api()) and
                 len(set(owners_from_api())) == 3, 30, 0.2,
                 "16 slots owned by the 3 workers")
    B = Browser(C.dir).start()


def cleanup(failed):
    if B is not None:
        B.close()
    if C is not None:
        C.close(failed)
        os.unlink(C.tokens_path)


def dump():
    if C is not None:
        C.dump_logs(20)


def test_static_files_need_no_token():
    r = call("GET", "/", token=None)
    h.check_eq(r.status, 200, "GET / without a token")
    h.check(r.headers.get("Content-Type", "").startswith("text/html"),
            "content type %r" % r.headers.get("Content-Type"))
    csp = r.headers.get("Content-Security-Policy", "")
    h.check("script-src 'self'" in csp and "connect-src 'self'" in csp,
            "CSP keeps the page to its own origin: %r" % csp)
    h.check(b"/console/console.js" in r.data, "page loads the script")
    h.check(b"http://" not in r.data and b"https://" not in r.data,
            "no other origin referenced (works offline)")
    for name, ctype in (("console.js", "text/javascript"),
                        ("console.css", "text/css")):
        r = call("GET", "/console/" + name, token=None)
        h.check_eq(r.status, 200, name)
        h.check(r.headers.get("Content-Type", "").startswith(ctype),
                "%s content type %r" % (name, r.headers.get("Content-Type")))
        h.check(len(r.data) > 1000, "%s has content" % name)
    # The API behind it still needs a token; unknown files are 404.
    h.check_eq(call("GET", "/v1/cluster", token=None).status, 401,
               "/v1/cluster without a token")
    h.check_eq(call("GET", "/v1/cluster/lateness", token=None).status, 401,
               "/v1/cluster/lateness without a token")
    # /console/{file} is a public route: an unknown file is 404 with or
    # without a token (there is nothing behind it to protect).
    r = call("GET", "/console/nope.js", token=None)
    h.check_eq(r.status, 404, "an unknown file, no token")
    h.check_eq(r.json["error"]["code"], "not_found", "404 error shape")
    h.check_eq(call("GET", "/console/nope.js").status, 404, "unknown file")
    h.check_eq(call("POST", "/", {}, token=TOKEN).status, 405, "POST /")


def test_page_asks_for_token_then_shows_slots():
    B.get("http://%s/" % C.manager_addr)
    B.wait_for("return !document.getElementById('token-form').hidden", 15,
               "the token form")
    B.find("#token-input").type(TOKEN)
    B.find("#token-form button").click()
    js = ("return Array.from(document.querySelectorAll('#slots tbody tr'))"
          ".map(tr => [tr.cells[0].innerText, tr.cells[1].innerText])")
    B.wait_for("return document.querySelectorAll('#slots tbody tr')"
               ".length === 16", 20, "16 slot rows")
    # The page refreshes every 2 s: compare until it shows what the API
    # says (ownership is settled, so this converges at once).
    want = shown = None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        want = owners_from_api()
        shown = B.script(js)
        if [s[1].strip() for s in shown] == want:
            break
        time.sleep(0.5)
    h.check_eq([int(s[0]) for s in shown], list(range(16)), "slot numbers")
    h.check_eq([s[1].strip() for s in shown], want,
               "owners shown = owners in GET /v1/cluster")
    h.check_eq(set(want), set(w.wid for w in C.workers), "owners")
    ring = B.script("return Array.from(document.querySelectorAll("
                    "'#ring g.seg')).map(g => g.dataset.owner)")
    h.check_eq(ring, want, "ring segments' owners")
    workers = B.script("return Array.from(document.querySelectorAll("
                       "'#workers tbody tr')).map(tr => tr.dataset.worker)")
    h.check_eq(sorted(workers), sorted(w.wid for w in C.workers),
               "workers table")
    master = call("GET", "/v1/cluster").json["master"]["id"]
    h.check_eq(B.find("#sum-master").text, master, "master shown")
    h.check_eq(B.find("#sum-owned").text, "16 / 16", "slots owned shown")


def test_lateness_chart():
    # Tasks due over the next few seconds: the chart needs two samples of
    # the workers' histograms with fires between them.
    now = h.now_ms()
    tasks = [{"id": "late-%03d" % i, "topic": "console", "body": "x",
              "due_at": now + 1500 + i * 40} for i in range(150)]
    r = call("POST", "/v1/tasks/batch", {"tasks": tasks})
    h.check_eq(r.status, 200, "batch")
    FIRED.extend(t["id"] for t in tasks)
    h.check_eq(READER.wait_for(FIRED, timeout=30), [], "not published")
    B.wait_for("return document.querySelector('#chart path.p99') !== null"
               " && /ms|s$/.test(document.getElementById('late-p99')"
               ".innerText)", 20, "a p99 line in the chart")
    # The manager's sum is the workers' own histograms added up: every
    # task of this cluster was fired once (no faults, no duplicates).
    r = call("GET", "/v1/cluster/lateness")
    lat = r.json
    # Bounds as written, not jansson's 17 digits (0.0025000000000000001).
    h.check(",0.0025," in r.text and "0000000000000" not in r.text,
            "bounds: %r" % lat["lateness"]["le"])
    h.check_eq(lat["lateness"]["count"], len(FIRED), "lateness count")
    h.check_eq(sorted(w["id"] for w in lat["workers"] if w["ok"]),
               sorted(w.wid for w in C.workers), "workers scraped")
    h.check_eq(lat["lateness"]["le"][-1], None, "+Inf bucket is null")
    h.check_eq(lat["lateness"]["counts"][-1], len(FIRED), "+Inf = count")
    per = sum(w["count"] for w in lat["workers"])
    h.check_eq(per, len(FIRED), "per-worker counts add up")


def test_lateness_with_a_worker_not_answering():
    # A frozen worker's /metrics does not answer: the others are still
    # summed, it is listed with its error, and the answer is not held up
    # beyond the scrape timeout.
    w = C.workers[0]
    w.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = call("GET", "/v1/cluster/lateness")
        took = time.monotonic() - t0
    finally:
        w.signal(signal.SIGCONT)
    h.check_eq(r.status, 200, "lateness with a frozen worker")
    h.check(took < 10, "answered in %.1fs" % took)
    ws = {x["id"]: x for x in r.json["workers"]}
    h.check_eq(sorted(ws), sorted(x.wid for x in C.workers), "workers")
    h.check(not ws[w.wid]["ok"] and ws[w.wid].get("error"),
            "frozen worker reported: %r" % ws[w.wid])
    others = [x for x in C.workers if x is not w]
    h.check(all(ws[x.wid]["ok"] for x in others), "others scraped: %r" % ws)
    h.check_eq(r.json["lateness"]["workers"], 2, "workers summed")
    h.check_eq(r.json["lateness"]["count"],
               sum(ws[x.wid]["count"] for x in others), "sum of the others")


def lookup(task_id):
    B.find("#task-id").type(task_id)
    B.find("#task-form button").click()
    B.wait_for("return document.getElementById('task-title').innerText"
               " === arguments[0] && !document.getElementById('task')"
               ".hidden", 10, "task %s shown" % task_id, task_id)


def test_cancel_from_page():
    due = h.now_ms() + 20000
    for tid in ("cancel-me", "control"):
        r = call("POST", "/v1/tasks", {"id": tid, "topic": "console",
                                       "body": tid, "due_at": due})
        h.check_eq(r.status, 201, "submit %s" % tid)
    lookup("cancel-me")
    h.check_eq(B.find("#task-status").text, "scheduled", "status shown")
    # "Keep it" in the dialog changes nothing.
    B.find("#task-cancel").click()
    B.wait_for("return document.getElementById('confirm').open", 5,
               "the confirmation dialog")
    h.check_eq(B.find("#confirm-id").text, "cancel-me", "dialog names it")
    B.find("#confirm-keep").click()
    B.wait_for("return !document.getElementById('confirm').open", 5,
               "the dialog closed")
    time.sleep(0.5)
    h.check_eq(call("GET", "/v1/tasks/cancel-me").json["status"],
               "scheduled", "kept after 'Keep it'")
    # Confirmed: cancelled.
    B.find("#task-cancel").click()
    B.wait_for("return document.getElementById('confirm').open", 5,
               "the confirmation dialog")
    B.find("#confirm-yes").click()
    B.wait_for("return document.getElementById('task-status').innerText"
               " === 'cancelled'", 10, "status cancelled on the page")
    msg = B.find("#task-msg").text
    h.check("never be published" in msg, "page says so: %r" % msg)
    h.check(not B.find("#task-cancel").enabled(),
            "cancel disabled once cancelled")
    r = call("GET", "/v1/tasks/cancel-me?log=1")
    h.check_eq(r.json["status"], "cancelled", "API status")
    # The control task, due at the same time, is published; the cancelled
    # one never is.
    h.check_eq(READER.wait_for(["control"], timeout=40, settle=1.0), [],
               "control task not published")
    h.check("cancel-me" not in READER.by_id, "cancelled task published")
    h.check_eq(call("GET", "/v1/tasks/cancel-me").json["status"],
               "cancelled", "still cancelled after its due time")


def test_read_only_token_cannot_cancel():
    r = call("POST", "/v1/tasks", {"id": "ro-keep", "topic": "console",
                                   "body": "x", "delay_ms": 3600000})
    h.check_eq(r.status, 201, "submit")
    B.script("sessionStorage.setItem('prophet.token', arguments[0])",
             READ_ONLY)
    lookup("ro-keep")
    B.find("#task-cancel").click()
    B.wait_for("return document.getElementById('confirm').open", 5,
               "the confirmation dialog")
    B.find("#confirm-yes").click()
    B.wait_for("return /^Not cancelled/.test(document.getElementById("
               "'task-msg').innerText)", 10, "the refusal shown")
    h.check_eq(call("GET", "/v1/tasks/ro-keep").json["status"],
               "scheduled", "still scheduled")
    B.script("sessionStorage.setItem('prophet.token', arguments[0])", TOKEN)


def test_pause_and_resume_from_page():
    B.find("#topic-name").type("console-p")
    B.find("#topic-form button").click()
    B.wait_for("return /console-p paused/.test(document.getElementById("
               "'topic-msg').innerText)", 10, "the pause confirmed")
    t = {x["topic"]: x for x in call("GET", "/v1/topics").json["topics"]}
    h.check(t.get("console-p", {}).get("paused"), "paused: %r" % t)
    B.wait_for("return document.querySelector('#topics button[data-t="
               "\"console-p\"][data-a=\"fire\"]') !== null", 10,
               "a Resume button")
    # The topics panel re-renders as it polls: a click that finds the
    # button replaced looks again.
    B.click('#topics button[data-t="console-p"][data-a="fire"]')
    B.wait_for("return /console-p resumed/.test(document.getElementById("
               "'topic-msg').innerText)", 10, "the resume confirmed")
    t = {x["topic"]: x for x in call("GET", "/v1/topics").json["topics"]}
    h.check(not t["console-p"]["paused"], "resumed: %r" % t["console-p"])
    h.check_eq(t["console-p"]["last_resume"]["policy"], "fire", "policy")


def test_screenshot():
    lookup("cancel-me")
    B.wait_for("return document.querySelector('#chart path.p50') !== null",
               10, "the chart")
    os.makedirs(SHOT_DIR, exist_ok=True)
    path = os.path.join(SHOT_DIR, "test_console.png")
    png = B.screenshot(path, full_page=True)
    h.check(png[:8] == b"\x89PNG\r\n\x1a\n", "a PNG")
    h.check(len(png) > 20000, "a PNG with content (%d bytes)" % len(png))
    h.log("screenshot: %s (%d bytes)" % (path, len(png)))


def test_booked_load_heatmap():
    """Tasks booked 1 h and 5 h ahead show in their topic's row of the
    heatmap, in the cells of their 15-minute steps."""
    now = h.now_ms()
    tasks = [{"id": "load-%d" % i, "topic": "console.load", "body": "x",
              "due_at": now + (3600000 if i < 3 else 5 * 3600000) + 60000}
             for i in range(5)]
    r = call("POST", "/v1/tasks/batch", {"tasks": tasks})
    h.check_eq(r.status, 200, "batch")
    # the heatmap polls every 30 s: a reload reads it now (after the
    # screenshot, which needs the lateness samples of this page)
    B.get("http://%s/" % C.manager_addr)
    js = ("return Array.from(document.querySelectorAll('#heatmap rect.load'"
          ")).filter(r => r.dataset.topic === 'console.load')"
          ".map(r => [Number(r.dataset.step), Number(r.dataset.count)])")
    B.wait_for("return document.querySelectorAll('#heatmap rect.load')"
               ".length > 0", 20, "heatmap cells")
    cells = sorted(B.script(js))
    h.check_eq([n for _, n in cells], [3, 2], "cells of console.load")
    h.check(cells[0][0] in (4, 5) and cells[1][0] in (20, 21),
            "steps of the cells: %r" % cells)
    B.screenshot(os.path.join(SHOT_DIR, "test_console_load.png"))
    for t in tasks:
        call("DELETE", "/v1/tasks/" + t["id"])


if __name__ == "__main__":
    h.run_suite(globals(), setup, cleanup, dump)
