#!/usr/bin/env python3
"""Writes seed requests for fuzz_http into a directory: valid requests of
every route, invalid UTF-8 in paths, queries and names, and multi-byte
names cut at every boundary of the fixed-size buffers that quote them in
errors (a 64-byte field, 256- and 512-byte messages): 2-, 3- and 4-byte
characters, each at every offset around each boundary."""

import json
import os
import sys


def req(method, target, body=None, headers=()):
    h = [b"%s %s HTTP/1.1" % (method, target), b"Host: fuzz"]
    h += list(headers)
    if body is not None:
        h += [b"Content-Type: application/json",
              b"Content-Length: %d" % len(body)]
    out = b"\r\n".join(h) + b"\r\n\r\n"
    return out + (body or b"")


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = []
    task = {"topic": "t", "body": "b", "delay_ms": 1000}
    auth = b"Authorization: Bearer fuzz-token"
    seeds.append(req(b"POST", b"/v1/tasks", json.dumps(task).encode(),
                     [auth]))
    seeds.append(req(b"GET", b"/v1/tasks/abc", None, [auth]))
    seeds.append(req(b"DELETE", b"/v1/tasks/a%00b", None, [auth]))
    seeds.append(req(b"POST", b"/v1/tasks/x/restore", b"{}", [auth]))
    seeds.append(req(b"GET", b"/healthz"))
    seeds.append(req(b"POST", b"/push", json.dumps(
        {"topic": "t", "body": "b", "delay": 5}).encode(), [auth]))
    seeds.append(req(b"GET", b"/delete?jobId=%ff%fe", None, [auth]))
    seeds.append(req(b"GET", b"/v1/\xff\xfe"))
    seeds.append(req(b"GET", b"/v1/tasks/%c3%28", None, [auth]))
    seeds.append(req(b"POST", b"/v1/tasks", b"{}",
                     [auth, b"Origin: http://evil.example"]))
    seeds.append(req(b"GET", b"/healthz") + req(b"GET", b"/v1/tasks/z",
                                                None, [auth]))
    for ch in ("\u00e9", "\u65e5", "\U0001f680"):
        width = len(ch.encode())
        for limit in (64, 256, 512):
            for extra in range(-width, width + 1):
                n = max(1, (limit + extra) // width)
                name = ch * n
                for field in ("unknown", "header", "timezone", "callback"):
                    t = dict(task)
                    if field == "unknown":
                        t[name] = 1
                    elif field == "header":
                        t["headers"] = {name: "v"}
                    elif field == "timezone":
                        t = {"topic": "t", "body": "b",
                             "cron": "* * * * *", "timezone": name}
                    else:
                        t["callback"] = {"url": "http://" + name + "/p",
                                         name[:20]: 1}
                    body = json.dumps(t, ensure_ascii=False).encode()
                    seeds.append(req(b"POST", b"/v1/tasks", body, [auth]))
                # The same cut inside a raw, invalid byte sequence.
                raw = name.encode()[:-1]
                seeds.append(req(b"POST", b"/v1/tasks",
                                 b'{"' + raw + b'":1}', [auth]))
                seeds.append(req(b"GET", b"/v1/tasks/" + raw, None, [auth]))
    for i, s in enumerate(seeds):
        with open(os.path.join(out, "seed-%03d" % i), "wb") as f:
            f.write(s)


if __name__ == "__main__":
    main(sys.argv[1])
