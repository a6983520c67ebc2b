#!/usr/bin/python3
"""Poison inputs: one bad submission among many, and bytes from outside
that are not what they should be.

- A submission whose headers would not fit their column is refused up
  front (413, task.max_headers_bytes); the others of its commit succeed.
- A row the database still refuses for its values (here: a CHECK
  constraint and a narrowed column, added to this test's own database,
  which validation does not know about) gets its 400 alone: the shared
  commit is retried one row per transaction and every other submission
  of it is committed (batch and concurrent single submissions).
- The same through Kafka ingest: the offender lands in <ingest>.errors
  with the reason, the partition keeps flowing; reasons that quote the
  input (jansson's, cut at 160 bytes) are valid UTF-8 in the headers.
- A worker whose hostname is not UTF-8 registers (default id and with
  worker.id); a node under /workers whose name no worker could have gets
  no slots.
"""

import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

C = None
INGEST = None
TOPIC = "poison"
# Validation knows nothing of these: the database refuses such rows.
POISON_BODY = "poison-body"
KEY_MAX = 16
# A trigger refuses this body with a message of 3-byte characters, longer
# than the buffers it passes through: cut at a byte count it would not be
# UTF-8 any more (in the answer, in the errors topic's headers).
SIGNAL_BODY = "signal-body"
SIGNAL_TEXT = "x" + "\u65e5" * 127


def setup():
    global C, INGEST
    tag = h.rand_tag()
    INGEST = "ingest-" + tag
    # Commits wait 100 ms for company, so concurrent submissions share
    # them; the workers are not needed for what is checked here.
    C = h.Cluster(workers=1, name="poison",
                  conf={"db.group_commit_us": 100000,
                        "db.group_commit_rows": 1000,
                        # Bodies up to what a MEDIUMBLOB holds, more than
                        # the server's max_allowed_packet (16 MiB) carries.
                        "task.max_body_bytes": 16777215,
                        "http.max_body_bytes": 40000000,
                        "kafka.ingest_topic": INGEST,
                        "kafka.ingest_group": "grp-" + tag}).open()
    h.create_topics(C.brokers, [INGEST, INGEST + ".errors",
                                C.topic(TOPIC)])
    C.start()
    # After the manager's migrations: rules the database enforces and
    # validation does not (a trigger or a narrower column would be the
    # same for Prophet: a row-specific refusal).
    C.mysql("ALTER TABLE tasks ADD CONSTRAINT test_poison "
            "CHECK (body <> '%s')" % POISON_BODY)
    C.mysql("ALTER TABLE tasks MODIFY msg_key VARBINARY(%d) NULL" % KEY_MAX)
    mysql_delim("SET NAMES utf8mb4// CREATE TRIGGER test_signal BEFORE "
                "INSERT ON tasks FOR EACH ROW IF NEW.body = '%s' THEN "
                "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '%s'; END IF//"
                % (SIGNAL_BODY, SIGNAL_TEXT))


def mysql_delim(sql):
    """SQL with // as the delimiter (a trigger body holds ';')."""
    p = subprocess.run(["mariadb", "--no-defaults", "--delimiter=//",
                        "-u" + C.db_user, "-p" + C.db_password,
                        "-h" + C.db_host, "-P%d" % C.db_port, C.db_name,
                        "-e", sql], capture_output=True)
    h.check_eq(p.returncode, 0, "mariadb: %s" % p.stderr[-300:])


def compact(j):
    return json.dumps(j, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False).encode()


def task(tid, **kw):
    t = {"id": tid, "topic": TOPIC, "body": "body of " + tid,
         "delay_ms": 3600000}
    t.update(kw)
    return t


def stored(ids):
    if not ids:
        return set()
    rows = C.mysql("SELECT id FROM tasks WHERE id IN (%s)"
                   % ",".join("'%s'" % i for i in ids))
    return {r[0] for r in rows}


def metric(name):
    return h.metrics(C.manager_addr).get(name, 0.0)


def post_batch(tasks):
    api = C.api()
    try:
        r = api.post("/v1/tasks/batch", {"tasks": tasks})
    finally:
        api.close()
    h.check_eq(r.status, 200, "batch status (%r)" % r)
    return r.json["results"]


def post_together(tasks):
    """POSTs every task at once, one connection each (a barrier, then all
    send), so that they share group commits. Responses in task order."""
    out = [None] * len(tasks)
    apis = [C.api() for _ in tasks]
    gate = threading.Barrier(len(tasks))
    errors = []

    def run(i):
        try:
            apis[i].get("/healthz")     # connected before the barrier
            gate.wait(10)
            out[i] = apis[i].post("/v1/tasks", tasks[i])
        except Exception as e:          # reported below
            errors.append(e)
        finally:
            apis[i].close()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(tasks))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise h.TestFailure("submission failed: %r" % errors[0])
    return out


# ---------------------------------------------------- validation (413) ---

def test_oversized_headers_refused_others_commit():
    big = {"h%02d" % i: "v" * 4096 for i in range(32)}   # ~131 KB of JSON
    tasks = [task("ov-%d" % i) for i in range(20)]
    tasks[4]["headers"] = big
    tasks[9]["callback"] = {"url": "http://cb.invalid/x", "headers": big}
    # Exactly the default limit (16384 bytes as compact JSON), and one
    # byte more.
    fits = {"h%d" % i: "v" * 4096 for i in range(4)}
    fits["h3"] = "v" * (4096 - (len(compact(fits)) - 16384))
    h.check_eq(len(compact(fits)), 16384, "test headers size")
    tasks[13]["headers"] = fits
    tasks[14]["headers"] = dict(fits, h3=fits["h3"] + "v")
    res = post_batch(tasks)
    p = h.Problems()
    for i, r in enumerate(res):
        if i == 4:
            p.check((r["code"], r["error"]["code"], r["error"]["field"]) ==
                    (413, "too_large", "headers"), "oversized headers: %r"
                    % (r,))
            p.check("task.max_headers_bytes" in r["error"]["message"],
                    "message names the limit: %r" % r["error"]["message"])
        elif i == 14:
            p.check((r["code"], r["error"]["field"]) == (413, "headers"),
                    "a byte over the limit: %r" % (r,))
        elif i == 9:
            p.check((r["code"], r["error"]["field"]) ==
                    (413, "callback.headers"), "oversized callback "
                    "headers: %r" % (r,))
        else:
            p.check(r["code"] == 201, "task %d: %r" % (i, r))
    want = {t["id"] for i, t in enumerate(tasks) if i not in (4, 9, 14)}
    got = stored([t["id"] for t in tasks])
    p.check(got == want, "stored: missing %s, unexpected %s"
            % (sorted(want - got), sorted(got - want)))
    rows = C.mysql("SELECT headers FROM tasks WHERE id = 'ov-13'")
    p.check(rows and json.loads(rows[0][0]) == fits,
            "headers at the limit stored whole")
    p.raise_if_any("oversized headers")


# ---------------------------------------- row isolation (database 400) ---

def check_isolated(res, tasks, bad, what):
    """res: per task (code, error) pairs; bad: index -> (field, words the
    message must hold)."""
    p = h.Problems()
    for i, (code, err) in enumerate(res):
        if i in bad:
            field, words = bad[i]
            p.check(code == 400 and err and err["code"] == "invalid_value",
                    "%s: offender %d answered %s %r" % (what, i, code, err))
            if err:
                p.check(err.get("field") == field, "%s: offender %d field "
                        "%r, want %r" % (what, i, err.get("field"), field))
                p.check(words in err["message"], "%s: offender %d message "
                        "%r lacks %r" % (what, i, err["message"], words))
        else:
            p.check(code == 201, "%s: task %d answered %s %r"
                    % (what, i, code, err))
    ids = [t["id"] for t in tasks]
    want = {t["id"] for i, t in enumerate(tasks) if i not in bad}
    got = stored(ids)
    p.check(got == want, "%s: stored: missing %s, unexpected %s"
            % (what, sorted(want - got), sorted(got - want)))
    p.raise_if_any(what)


def test_row_refused_by_db_others_commit_batch():
    tasks = [task("iso-b-%d" % i) for i in range(30)]
    tasks[7]["body"] = POISON_BODY
    tasks[19]["key"] = "k" * (KEY_MAX + 4)     # fits validation's 1024
    tasks[23]["body"] = SIGNAL_BODY
    iso0, ref0 = (metric("prophet_db_commit_isolated_total"),
                  metric("prophet_tasks_db_refused_total"))
    res = post_batch(tasks)
    check_isolated([(r["code"], r.get("error")) for r in res], tasks,
                   {7: (None, "CONSTRAINT `test_poison`"),
                    19: ("key", "too long"),
                    23: (None, "x\u65e5\u65e5")}, "batch")
    h.check(metric("prophet_db_commit_isolated_total") >= iso0 + 1,
            "the shared commit was isolated (metric)")
    h.check_eq(metric("prophet_tasks_db_refused_total") - ref0, 3.0,
               "refused rows counted")
    # The committed ones are intact: body and key as submitted.
    rows = C.mysql("SELECT body, msg_key FROM tasks WHERE id = 'iso-b-8'")
    h.check_eq(rows, [["body of iso-b-8", None]], "a neighbour's row")
    # Alone, the offender is refused the same way (a one-row commit).
    r = post_batch([tasks[7]])[0]
    h.check_eq((r["code"], r["error"]["code"]), (400, "invalid_value"),
               "the offender alone")


def test_row_refused_by_db_others_commit_concurrent():
    """24 single submissions at once, while a commit is running (held by a
    row lock): they wait for it and then share the next commit."""
    tasks = [task("iso-c-%d" % i) for i in range(24)]
    tasks[11]["body"] = POISON_BODY
    # A replay of a committed task in the same commit stays a replay.
    tasks[5] = task("iso-c-replay")
    h.check_eq(post_batch([tasks[5]])[0]["code"], 201, "the row to replay")
    wait = hold_a_commit("iso-c-lock", 1.5)
    iso0 = metric("prophet_db_commit_isolated_total")
    res = post_together(tasks)
    h.check_eq(wait().status, 200, "the replay that waited for the lock")
    h.check(metric("prophet_db_commit_isolated_total") >= iso0 + 1,
            "the 24 shared a commit, isolated (metric)")
    h.check_eq(res[5].status, 200, "replay beside the offender (%r)"
               % res[5])
    res[5].status = 201      # checked above; stored before
    check_isolated([(r.status, (r.json or {}).get("error")) for r in res],
                   tasks, {11: (None, "CONSTRAINT")}, "concurrent")
    r = C.api().get("/v1/tasks/iso-c-11")
    h.check_eq(r.status, 404, "the offender is not stored")


def hold_a_commit(tid, seconds):
    """Starts a commit that waits for a row lock for about `seconds`: what
    is submitted meanwhile queues and goes in the next commit. Returns a
    function that waits for the end and the held submission's answer."""
    h.check_eq(post_batch([task(tid)])[0]["code"], 201, "the row to lock")
    locker = subprocess.Popen(
        ["mariadb", "--no-defaults", "-u" + C.db_user, "-p" + C.db_password,
         "-h" + C.db_host, "-P%d" % C.db_port, C.db_name, "-e",
         "BEGIN; SELECT id FROM tasks WHERE id = '%s' FOR UPDATE; "
         "SELECT SLEEP(%s); COMMIT" % (tid, seconds)],
        stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    held = []
    blocked = threading.Thread(
        target=lambda: held.append(C.api().post("/v1/tasks", task(tid))))
    blocked.start()
    time.sleep(0.3)     # its commit waits for the lock

    def done():
        blocked.join()
        locker.wait(30)
        return held[0]
    return done


def test_commit_larger_than_max_allowed_packet():
    """300 tasks of 64 KiB (each within every limit) in one commit: 19 MB,
    more than one statement may carry; the commit takes several."""
    wait = hold_a_commit("pk-lock", 2)
    res = {}

    def run(j):
        res[j] = post_batch([task("pk-%d-%d" % (j, i), body="x" * 65536)
                             for i in range(60)])
    ts = [threading.Thread(target=run, args=(j,)) for j in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    h.check_eq(wait().status, 200, "the held replay")
    codes = sorted({r["code"] for j in res for r in res[j]})
    h.check_eq(codes, [201], "answers (%s)" % [
        r for j in res for r in res[j] if r["code"] != 201][:2])
    rows = C.mysql("SELECT COUNT(*), SUM(LENGTH(body)) FROM tasks "
                   "WHERE id LIKE 'pk-%-%'")
    h.check_eq(rows, [["300", str(300 * 65536)]], "stored whole")


def test_row_larger_than_max_allowed_packet():
    limit = int(C.mysql("SELECT @@max_allowed_packet", db="")[0][0])
    api = C.api()
    try:
        r = api.post("/v1/tasks", task("pk-huge", body="x" * (limit - 1000)))
        ok = api.post("/v1/tasks", task("pk-big", body="y" * 1000000))
    finally:
        api.close()
    h.check_eq(r.status, 413, "a row the server cannot take (%r)" % r)
    e = r.json["error"]
    h.check_eq((e["code"], e["field"]), ("too_large", "body"), "error")
    h.check("max_allowed_packet" in e["message"], "reason: %r" % e)
    h.check_eq(ok.status, 201, "a 1 MB body (%r)" % ok)
    h.check_eq(stored(["pk-huge", "pk-big"]), {"pk-big"}, "stored")


def test_single_submission_refused_with_reason():
    api = C.api()
    try:
        r = api.post("/v1/tasks", task("iso-one", key="k" * (KEY_MAX + 1)))
    finally:
        api.close()
    h.check_eq(r.status, 400, "status (%r)" % r)
    e = r.json["error"]
    h.check_eq((e["code"], e["field"]), ("invalid_value", "key"), "error")
    h.check("msg_key" in e["message"] and " at row " not in e["message"],
            "message names the column, not the statement's row: %r"
            % e["message"])


# ------------------------------------------------------- Kafka ingest ---

def produce(lines, partition=0):
    p = subprocess.run(["kcat", "-P", "-b", C.brokers, "-t", INGEST,
                        "-p", str(partition)],
                       input=b"\n".join(lines) + b"\n",
                       capture_output=True, timeout=60)
    h.check_eq(p.returncode, 0, "kcat produce: %s" % p.stderr)


def read_errors(n, timeout=30):
    """The errors topic's messages, decoded from bytes (headers must be
    valid UTF-8: a strict decode fails the test otherwise)."""
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        p = subprocess.run(["kcat", "-C", "-b", C.brokers, "-t",
                            INGEST + ".errors", "-o", "beginning", "-e",
                            "-q", "-J"], capture_output=True, timeout=60)
        got = []
        for line in p.stdout.splitlines():
            if line.strip():
                got.append(json.loads(line.decode("utf-8", "strict")))
        if len(got) >= n:
            break
        time.sleep(0.5)
    return got


def test_kafka_ingest_offender_to_errors_partition_flows():
    ids = ["kp-%d" % i for i in range(12)]
    msgs = [json.dumps(task(t)).encode() for t in ids]
    msgs[1] = json.dumps(task(ids[1], body=SIGNAL_BODY)).encode()
    msgs[3] = json.dumps(task(ids[3], body=POISON_BODY)).encode()
    msgs[6] = json.dumps(task(ids[6], key="k" * (KEY_MAX + 2))).encode()
    msgs[8] = json.dumps(task(ids[8], headers={
        "h%02d" % i: "v" * 4096 for i in range(8)})).encode()
    # Malformed JSON (an invalid escape after multi-byte characters).
    msgs[10] = ('{"id":"%s","topic":"%s","body":"%s\\x"}'
                % (ids[10], TOPIC, "\u00e9" * 8)).encode()
    produce(msgs[:6])
    produce(msgs[6:])
    errs = read_errors(5)
    h.check_eq(len(errs), 5, "error messages (%s)" % errs)
    by_offset = {}
    for e in errs:
        hd = dict(zip(e["headers"][::2], e["headers"][1::2]))
        by_offset[hd["prophet-source-offset"]] = (hd, e["payload"])
    reasons = sorted((hd["prophet-error-code"],
                      hd.get("prophet-error-field", ""))
                     for hd, _ in by_offset.values())
    h.check_eq(reasons, [("invalid_json", ""), ("invalid_value", ""),
                         ("invalid_value", ""), ("invalid_value", "key"),
                         ("too_large", "headers")], "reasons")
    # The topic is this test's: message i sits at offset i of partition 0.
    h.check_eq(sorted(by_offset), ["0:1", "0:10", "0:3", "0:6", "0:8"],
               "offsets of the refused")
    hd, payload = by_offset["0:3"]
    h.check("CONSTRAINT `test_poison`" in hd["prophet-error-message"],
            "the database's reason: %r" % hd)
    h.check_eq(payload.encode(), msgs[3], "the original message kept")
    hd, _ = by_offset["0:1"]
    h.check("x\u65e5\u65e5" in hd["prophet-error-message"],
            "the trigger's message, valid UTF-8: %r" % hd)
    # Everything else of the partition was ingested, before and after.
    bad = (1, 3, 6, 8, 10)
    good = [t for i, t in enumerate(ids) if i not in bad]
    h.wait_until(lambda: stored(good) == set(good), 30, 0.3,
                 "the other submissions of the partition stored")
    h.check_eq(stored([ids[i] for i in bad]), set(),
               "the refused ones are not stored")
    # And it keeps flowing.
    produce([json.dumps(task("kp-after")).encode()])
    h.wait_until(lambda: stored(["kp-after"]) == {"kp-after"}, 30, 0.3,
                 "a later submission stored")


# ------------------------------------------------ worker: outside bytes ---

SET_HOSTNAME = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
name = b"h\xff\xfe.w\xc3"
if libc.sethostname(name, len(name)) != 0:
    raise OSError(ctypes.get_errno(), "sethostname")
os.execv(sys.argv[1], sys.argv[1:])
"""


def unshare_worker(name, extra):
    """A worker in a UTS namespace of its own whose hostname is not
    UTF-8 (needs root, as the test machines run)."""
    port = h.free_port()
    p = h.Proc(name, ["unshare", "--uts", "python3", "-c", SET_HOSTNAME,
                      h.WORKER_BIN, "-c", C.conf_path,
                      "--set", "worker.http_listen=127.0.0.1:%d" % port]
               + extra, os.path.join(C.dir, name + ".log"))
    p.addr = "127.0.0.1:%d" % port
    C.workers.append(p)
    return p


def test_worker_hostname_not_utf8():
    zk = C.zk()
    try:
        before = set(zk.children(C.zk_root + "/workers"))
        named = unshare_worker("w-named", ["--set", "worker.id=w-named"])
        anon = unshare_worker("w-anon", [])
        C.start_worker(named)
        C.start_worker(anon)
        now = set(zk.children(C.zk_root + "/workers"))
        new = sorted(now - before)
        h.check_eq(len(new), 2, "both registered: %s" % new)
        h.check("w-named" in new, "worker.id kept: %s" % new)
        other = [n for n in new if n != "w-named"][0]
        h.check(other.startswith("h___w_-"), "default id made of what "
                "worker.id allows: %r" % other)
        for n in new:
            data = zk.get(C.zk_root + "/workers/" + n).decode("utf-8")
            j = json.loads(data)
            h.check_eq(j["id"], n, "node id")
            h.check("\ufffd" in j["host"], "host with U+FFFD: %r" % j)
    finally:
        zk.close()
        extra = C.workers[1:]
        C.workers[1:] = []
        for w in extra:
            h.check_eq(w.stop(), 0, "%s exit code" % w.name)


def zk_create(zk, path, data=b""):
    """A persistent node, open ACL."""
    err = zk.create(path, data)
    if err != 0:
        raise h.TestFailure("zookeeper create %s: error %d" % (path, err))


def test_foreign_worker_node_gets_no_slots():
    zk = C.zk()
    try:
        wid = C.workers[0].wid
        # 140 bytes of two-byte characters: cut at 127 in a slot node it
        # would be invalid UTF-8; a space no worker id may hold either.
        for name in ("\u00e9" * 70, "not a worker"):
            zk_create(zk, C.zk_root + "/workers/" + name)
        h.wait_until(lambda: len(C.workers[0].grep("not a worker id")) >= 2,
                     20, 0.2, "the master to see the new members")
        time.sleep(2)   # a rebalance, had they counted
        owners = {}
        for i in range(C.slots):
            j = json.loads(zk.get("%s/work_slot/ws_%d" % (C.zk_root, i)))
            owners[i] = (j.get("owner"), j.get("requested"))
        h.check(all(o == (wid, None) for o in owners.values()),
                "every slot stays with the one real worker: %s" % owners)
        # The manager lists them as they are (the long one cut at a
        # character, not in the middle of one).
        for path in ("/v1/cluster", "/v1/cluster/lateness"):
            r = C.api().get(path)
            h.check(r.status == 200 and r.json is not None, "%s: %r"
                    % (path, r))
            ids = [w.get("id") for w in r.json["workers"]]
            h.check("not a worker" in ids and
                    any(i and i.startswith("\u00e9" * 60) for i in ids),
                    "%s lists the foreign nodes: %s" % (path, ids))
    finally:
        zk.close()
    # And it still fires.
    rd = C.reader([TOPIC])
    api = C.api()
    try:
        ids = ["fw-%d" % i for i in range(16)]
        for t in ids:
            h.check_eq(api.post("/v1/tasks", task(t, delay_ms=200)).status,
                       201, "submit")
    finally:
        api.close()
    missing = rd.wait_for(ids, 30)
    h.check(not missing, "not published: %s" % missing)


def cleanup(failed):
    if C is not None:
        C.close(failed=failed)


def main():
    h.run_suite(globals(), setup, cleanup,
                lambda: C.dump_logs() if C is not None else None)


if __name__ == "__main__":
    main()
