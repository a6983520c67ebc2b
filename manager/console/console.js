// Prophet web console: polls the manager's JSON API and draws the cluster.
// Plain DOM, no dependencies; every value from the server is inserted as
// text, never as HTML.
"use strict";

(function () {
  const POLL_MS = 2000;
  const WINDOW_MS = 5 * 60 * 1000;
  const LAG_WARN_MS = 5000;
  const TOKEN_KEY = "prophet.token";
  const PALETTE = ["#2f6fde", "#e8743b", "#2a9d60", "#8e5bd6", "#d6417a",
    "#1fa2b3", "#b8962e", "#5c6b82", "#c0504d", "#4b8f3a"];
  const GONE = "#9aa3b5";
  const SVGNS = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);

  // el("td", {class: "num"}, "text", child...); "svg:path" for SVG.
  function el(tag, attrs, ...kids) {
    const svg = tag.startsWith("svg:");
    const e = svg ? document.createElementNS(SVGNS, tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      // Styles through the CSSOM: the page's CSP forbids style attributes.
      if (k === "style") Object.assign(e.style, v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
    }
    for (const kid of kids.flat()) {
      if (kid !== null && kid !== undefined) {
        e.append(kid instanceof Node ? kid : String(kid));
      }
    }
    return e;
  }

  // ---------------------------------------------------------------- API
  const state = { needToken: false, lastOk: 0, prev: new Map(), points: [] };

  async function api(method, path, json) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store" };
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(json);
    }
    const r = await fetch(path, init);
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.status === 401) askToken(token ? "the token was refused" : "");
    if (!r.ok) {
      const e = body && body.error;
      const err = new Error(e && e.message ? e.message
        : r.status + " " + r.statusText);
      err.status = r.status;
      throw err;
    }
    return body;
  }

  function askToken(why) {
    state.needToken = true;
    $("token-form").hidden = false;
    $("token-open").hidden = false;
    $("token-error").textContent = why;
  }

  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token-input").value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
    $("token-input").value = "";
    $("token-form").hidden = true;
    state.needToken = false;
    poll();
  });
  $("token-open").addEventListener("click", () => {
    $("token-form").hidden = !$("token-form").hidden;
    if (!$("token-form").hidden) $("token-input").focus();
  });

  // ------------------------------------------------------------ formats
  const pad = (n, w) => String(n).padStart(w || 2, "0");

  function fmtTime(ms) {
    if (!ms) return "-";
    const d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" +
      pad(d.getDate()) + " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) +
      ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
  }

  function fmtSpan(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor(s % 86400 / 3600) + "h";
  }

  function fmtRel(ms) {
    const d = ms - Date.now();
    return Math.abs(d) < 1000 ? "now" : d > 0 ? "in " + fmtSpan(d) : fmtSpan(d) + " ago";
  }

  // 3 significant digits without trailing zeros: 0.1 ms, 12.5 ms, 100 ms, 2 s.
  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return "-";
    const trim = (x) => (x.includes(".") ? x.replace(/0+$/, "").replace(/\.$/, "") : x);
    if (s < 0.001) return trim((s * 1000).toFixed(2)) + " ms";
    if (s < 1) return trim((s * 1000).toPrecision(3)) + " ms";
    if (s < 100) return trim(s.toPrecision(3)) + " s";
    return Math.round(s) + " s";
  }

  const fmtMs = (ms) => (ms === null || ms === undefined ? "-" : ms < 1000 ? ms + " ms" : fmtSeconds(ms / 1000));
  const fmtCount = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));

  // ----------------------------------------------------------- cluster
  function ownerColors(c) {
    const ids = c.workers.map((w) => w.id).sort();
    const colors = new Map(ids.map((id, i) => [id, PALETTE[i % PALETTE.length]]));
    for (const s of c.slots) {
      if (s.owner && !colors.has(s.owner)) colors.set(s.owner, GONE);
    }
    return colors;
  }

  function renderSummary(c) {
    const owned = c.slots.filter((s) => s.owner).length;
    const pend = c.slots.map((s) => s.pending);
    const lags = c.slots.map((s) => s.lag_ms);
    const known = (xs) => xs.every((x) => x !== null && x !== undefined);
    $("sum-master").textContent = c.master && c.master.id ? c.master.id : "none";
    $("sum-master").className = c.master && c.master.id ? "" : "error";
    $("sum-workers").textContent = c.workers.length;
    $("sum-owned").textContent = owned + " / " + c.slot_count;
    $("sum-owned").className = owned === c.slot_count ? "" : "error";
    $("sum-pending").textContent = known(pend) ? fmtCount(pend.reduce((a, b) => a + b, 0)) : "?";
    $("sum-lag").textContent = known(lags) ? fmtMs(Math.max(0, ...lags)) : "?";
    renderCallbacks(c.callbacks);
  }

  // Tasks with a callback on a topic no running notifier consumes: their
  // callback is not made until one does (GET /v1/cluster "callbacks").
  function renderCallbacks(cb) {
    const known = cb && cb.known;
    $("sum-notifiers").textContent = known ? cb.notifiers.length : "?";
    $("sum-notifiers").className = known && cb.notifiers.length === 0 ? "error" : "";
    const last = known ? cb.last_uncovered : null;
    $("uncovered").hidden = !last;
    if (last) {
      $("uncovered").textContent = fmtCount(cb.uncovered_total) +
        " task(s) with a callback on a topic no running notifier consumes, " +
        "the last on topic " + last.topic + " (" + last.id + ", " + fmtTime(last.at) +
        "): their callbacks wait for a notifier that does (notifier.topics).";
    }
  }

  function arcPoint(cx, cy, r, deg) {
    const a = (deg - 90) * Math.PI / 180;
    return [cx + r * Math.cos(a), cy + r * Math.sin(a)];
  }

  // A ring segment from a0 to a1 degrees, drawn as two arcs so that a
  // single slot (a full circle) works too.
  function segmentPath(cx, cy, r0, r1, a0, a1) {
    const m = (a0 + a1) / 2;
    const p = (r, a) => arcPoint(cx, cy, r, a).map((v) => v.toFixed(2)).join(" ");
    return "M" + p(r1, a0) + " A" + r1 + " " + r1 + " 0 0 1 " + p(r1, m) +
      " A" + r1 + " " + r1 + " 0 0 1 " + p(r1, a1) + " L" + p(r0, a1) +
      " A" + r0 + " " + r0 + " 0 0 0 " + p(r0, m) +
      " A" + r0 + " " + r0 + " 0 0 0 " + p(r0, a0) + " Z";
  }

  function renderRing(c, colors) {
    const svg = $("ring");
    const n = c.slot_count, cx = 170, cy = 170, r0 = 104, r1 = 158;
    const labels = n <= 32;
    svg.replaceChildren();
    c.slots.forEach((s, i) => {
      const a0 = i * 360 / n, a1 = (i + 1) * 360 / n;
      const cls = "seg" + (s.owner ? "" : " unowned") + (s.requested ? " moving" : "");
      const title = "slot " + s.slot + ": " + (s.owner ? "owner " + s.owner : "no owner") +
        ", epoch " + s.epoch + (s.requested ? ", moving to " + s.requested : "");
      const g = el("svg:g", { class: cls, "data-slot": s.slot, "data-owner": s.owner || "" },
        el("svg:title", {}, title),
        el("svg:path", { d: segmentPath(cx, cy, r0, r1, a0, a1),
          fill: s.owner ? colors.get(s.owner) : null }));
      if (labels) {
        const [x, y] = arcPoint(cx, cy, (r0 + r1) / 2, (a0 + a1) / 2);
        g.append(el("svg:text", { class: "num", x: x.toFixed(1), y: (y - 6).toFixed(1) }, s.slot),
          el("svg:text", { class: "ep", x: x.toFixed(1), y: (y + 8).toFixed(1) }, "e" + s.epoch));
      }
      svg.append(g);
    });
    svg.append(el("svg:text", { class: "center-big", x: cx, y: cy - 10 }, n),
      el("svg:text", { class: "center-small", x: cx, y: cy + 16 }, "slots"),
      el("svg:text", { class: "center-small", x: cx, y: cy + 33 },
        c.workers.length + (c.workers.length === 1 ? " worker" : " workers")));
  }

  function renderLegend(c, colors) {
    const count = new Map();
    for (const s of c.slots) if (s.owner) count.set(s.owner, (count.get(s.owner) || 0) + 1);
    const master = c.master && c.master.id;
    const items = [...colors.keys()].sort().map((id) => el("li", {},
      el("span", { class: "swatch", style: { background: colors.get(id) } }),
      el("span", { class: "mono" }, id), " ",
      el("span", { class: "muted" }, "× " + (count.get(id) || 0)),
      id === master ? el("span", { class: "badge master" }, "master") : null));
    const free = c.slots.filter((s) => !s.owner).length;
    if (free) {
      items.push(el("li", { class: "error" },
        el("span", { class: "swatch", style: { background: "#eceef2", border: "1px dashed #c62f3b" } }),
        "no owner × " + free));
    }
    $("legend").replaceChildren(...items);
  }

  function renderSlots(c, colors) {
    const rows = c.slots.map((s) => el("tr", { "data-slot": s.slot, "data-owner": s.owner || "" },
      el("td", { class: "mono" }, s.slot),
      s.owner ? el("td", { class: "mono owner" },
        el("span", { class: "swatch", style: { background: colors.get(s.owner) } }), s.owner)
        : el("td", { class: "owner none" }, "none"),
      el("td", { class: "num" }, s.epoch),
      el("td", { class: "mono" }, s.requested || ""),
      el("td", { class: "num" }, fmtCount(s.pending)),
      el("td", { class: "num" }, fmtCount(s.inflight)),
      el("td", { class: "num" + (s.lag_ms > LAG_WARN_MS ? " lagging" : "") }, fmtMs(s.lag_ms))));
    $("slots").tBodies[0].replaceChildren(...rows);
  }

  function renderWorkers(c, colors) {
    const count = new Map();
    for (const s of c.slots) if (s.owner) count.set(s.owner, (count.get(s.owner) || 0) + 1);
    const master = c.master && c.master.id;
    const rows = c.workers.slice().sort((a, b) => (a.id < b.id ? -1 : 1)).map((w) => {
      const fired = state.fired && state.fired.get(w.id);
      return el("tr", { "data-worker": w.id },
        el("td", { class: "mono" },
          el("span", { class: "swatch", style: { background: colors.get(w.id) } }), w.id, " ",
          w.id === master ? el("span", { class: "badge master" }, "master") : null),
        el("td", {}, w.host || "-"),
        el("td", { class: "num" }, w.pid || "-"),
        el("td", { title: fmtTime(w.started_at) }, w.started_at ? fmtSpan(Date.now() - w.started_at) : "-"),
        el("td", { class: "num" }, count.get(w.id) || 0),
        el("td", { class: "num" }, fired === undefined ? "-" : fmtCount(fired)));
    });
    $("workers").tBodies[0].replaceChildren(...rows);
  }

  function renderCluster(c) {
    const colors = ownerColors(c);
    renderSummary(c);
    renderRing(c, colors);
    renderLegend(c, colors);
    renderSlots(c, colors);
    renderWorkers(c, colors);
    state.cluster = c;
  }

  // ---------------------------------------------------------- lateness
  // histogram_quantile over one interval's bucket increments.
  function quantile(q, le, cum) {
    const total = cum[cum.length - 1];
    if (!total) return null;
    const rank = q * total;
    let i = 0;
    while (i < cum.length - 1 && cum[i] < rank) i++;
    if (le[i] === null) return le[i - 1] === undefined ? null : le[i - 1];
    const lo = i > 0 ? le[i - 1] : 0, clo = i > 0 ? cum[i - 1] : 0;
    return lo + (le[i] - lo) * (cum[i] > clo ? (rank - clo) / (cum[i] - clo) : 1);
  }

  // Adds one answer of /v1/cluster/lateness: the increments since the last
  // answer, worker by worker (a restarted worker's counters start again).
  function addLateness(ans) {
    const le = ans.lateness.le;
    const delta = le.map(() => 0);
    const seen = new Map();
    let any = false;
    state.fired = new Map();
    for (const w of ans.workers) {
      if (!w.ok || !w.counts || w.counts.length !== le.length) continue;
      state.fired.set(w.id, w.count);
      const p = state.prev.get(w.id);
      if (p && p.length === le.length && w.counts.every((v, i) => v >= p[i])) {
        w.counts.forEach((v, i) => { delta[i] += v - p[i]; });
        any = true;
      }
      seen.set(w.id, w.counts);
    }
    const ok = ans.workers.filter((w) => w.ok).length;
    state.lateWorkers = ans.workers.length;
    $("late-src").textContent = ans.workers.length
      ? "from " + ok + " of " + ans.workers.length + " workers' /metrics" : "";
    const dt = state.lastAt ? (ans.at - state.lastAt) / 1000 : 0;
    state.prev = seen;
    state.lastAt = ans.at;
    if (!any || dt <= 0) return;
    const n = delta[delta.length - 1];
    state.points.push({ t: ans.at, n, rate: n / dt,
      p50: quantile(0.5, le, delta), p99: quantile(0.99, le, delta) });
    while (state.points.length && state.points[0].t < ans.at - WINDOW_MS) state.points.shift();
  }

  function renderChart() {
    const svg = $("chart");
    const W = Math.max(300, Math.round(svg.getBoundingClientRect().width)), H = 260;
    const L = 60, R = 10, T = 8, B = 22, RATE_H = 34;
    const plotB = H - B - RATE_H - 20;
    const pts = state.points;
    // From the first sample (at least a minute) up to the last 5 minutes.
    const end = pts.length ? pts[pts.length - 1].t : Date.now();
    const span = Math.min(WINDOW_MS, Math.max(60000, pts.length ? end - pts[0].t : 0));
    const start = end - span;
    const xOf = (t) => L + (t - start) / span * (W - L - R);
    const vals = pts.flatMap((p) => [p.p50, p.p99]).filter((v) => v !== null);
    const lo = -4, hi = Math.max(-1, Math.ceil(Math.log10(Math.max(...vals, 1e-4)) + 1e-9));
    const yOf = (v) => plotB - (Math.log10(Math.max(v, 1e-4)) - lo) / (hi - lo) * (plotB - T);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.replaceChildren();
    for (let d = lo; d <= hi; d++) {
      const y = yOf(Math.pow(10, d));
      svg.append(el("svg:line", { class: "grid", x1: L, x2: W - R, y1: y, y2: y }),
        el("svg:text", { class: "axis", x: L - 6, y: y + 4, "text-anchor": "end" }, fmtSeconds(Math.pow(10, d))));
    }
    const step = [10000, 15000, 30000, 60000].find((st) => span / st <= 6) || 60000;
    for (let ago = 0; ago <= span; ago += step) {
      const label = ago === 0 ? "now" : ago % 60000 ? "-" + ago / 1000 + " s" : "-" + ago / 60000 + " min";
      svg.append(el("svg:text", { class: "axis", x: xOf(end - ago), y: H - 6,
        "text-anchor": ago === 0 ? "end" : ago + step > span ? "start" : "middle" }, label));
    }
    const maxRate = Math.max(1, ...pts.map((p) => p.rate));
    const bw = Math.max(1, (W - L - R) * POLL_MS / span - 1);
    for (const p of pts) {
      const h = p.rate / maxRate * RATE_H;
      if (h > 0) svg.append(el("svg:rect", { class: "rate", x: xOf(p.t) - bw, y: H - B - h, width: bw, height: h }));
    }
    svg.append(el("svg:line", { class: "grid", x1: L, x2: W - R, y1: H - B, y2: H - B }),
      el("svg:text", { class: "axis", x: L - 6, y: H - B - RATE_H + 8, "text-anchor": "end" },
        fmtCount(Math.round(maxRate)) + "/s"));
    for (const key of ["p50", "p99"]) {
      let d = "", pen = "M";
      for (const p of pts) {
        if (p[key] === null) { pen = "M"; continue; }
        d += pen + xOf(p.t).toFixed(1) + " " + yOf(p[key]).toFixed(1) + " ";
        pen = "L";
      }
      if (d) svg.append(el("svg:path", { class: key, d }));
      const last = pts.filter((p) => p[key] !== null).pop();
      if (last) svg.append(el("svg:circle", { class: key + " end", cx: xOf(last.t), cy: yOf(last[key]), r: 3 }));
    }
    if (!vals.length) {
      svg.append(el("svg:text", { class: "empty", x: (L + W - R) / 2, y: plotB / 2 },
        pts.length ? "no task fired in this window"
          : state.lateWorkers === 0 ? "no worker running" : "waiting for two samples…"));
    }
    const last = pts[pts.length - 1];
    $("late-p50").textContent = last ? fmtSeconds(last.p50) : "-";
    $("late-p99").textContent = last ? fmtSeconds(last.p99) : "-";
    $("late-rate").textContent = !last ? "-" : (last.rate < 10 ? last.rate.toFixed(1)
      : fmtCount(Math.round(last.rate))) + "/s";
  }

  // ----------------------------------------------------- booked load
  // GET /v1/schedule?by=topic: a row per topic, a cell per 15 minutes of
  // the next 24 h, darker for more tasks (log scale); refreshed every 30 s.
  const LOAD_STEP_MS = 15 * 60 * 1000, LOAD_POLL_MS = 30000;
  let loadAt = 0;

  function renderLoad(s) {
    const svg = $("heatmap");
    const rows = s.topics.length ? s.topics : [];
    const L = 120, T = 4, RH = 16, B = 18, R = 6;
    const W = Math.max(300, Math.round(svg.getBoundingClientRect().width));
    const H = T + Math.max(1, rows.length) * RH + B;
    const cw = (W - L - R) / s.steps;
    const max = Math.max(1, ...rows.flatMap((t) => t.counts));
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("height", H);
    svg.replaceChildren();
    rows.forEach((t, r) => {
      const y = T + r * RH;
      svg.append(el("svg:text", { class: "axis", x: L - 6, y: y + RH - 4, "text-anchor": "end" },
        t.topic.length > 18 ? t.topic.slice(0, 17) + "…" : t.topic));
      t.counts.forEach((n, i) => {
        if (!n) return;
        const a = 0.15 + 0.85 * Math.log(1 + n) / Math.log(1 + max);
        svg.append(el("svg:rect", { class: "load", x: (L + i * cw).toFixed(1), y: y + 1,
          width: Math.max(1, cw - 0.5).toFixed(1), height: RH - 2, "fill-opacity": a.toFixed(2),
          "data-count": n, "data-topic": t.topic, "data-step": i },
        el("svg:title", {}, t.topic + " " + fmtTime(s.from + i * s.step).slice(11, 16) + ": " + fmtCount(n))));
      });
    });
    for (let h = 0; h <= 24; h += 6) {
      svg.append(el("svg:text", { class: "axis", x: L + h * 3600000 / s.step * cw, y: H - 4,
        "text-anchor": h === 0 ? "start" : h === 24 ? "end" : "middle" }, h === 0 ? "now" : "+" + h + " h"));
    }
    $("load-msg").textContent = !rows.length ? "nothing booked in the next 24 h"
      : fmtCount(s.total) + " tasks booked" + (s.truncated ? " (the first " + rows.length + " topics shown)" : "");
  }

  async function pollLoad() {
    if (Date.now() - loadAt < LOAD_POLL_MS) return;
    loadAt = Date.now();
    try {
      renderLoad(await api("GET", "/v1/schedule?by=topic&step=" + LOAD_STEP_MS));
    } catch (e) {
      if (e.status === 401) throw e;
      $("load-msg").textContent = "Cannot read the booked load: " + e.message;
    }
  }

  // -------------------------------------------------------------- poll
  let timer = null, polling = false;

  function setStatus(ok, text) {
    $("status").className = "dot " + (ok ? "ok" : "bad");
    $("updated").textContent = text;
  }

  // One poll at a time: a token entered during one reuses its schedule.
  async function poll() {
    clearTimeout(timer);
    if (state.needToken || polling) return;
    polling = true;
    try {
      const [c, l] = await Promise.all([api("GET", "/v1/cluster"),
        api("GET", "/v1/cluster/lateness").catch((e) => {
          if (e.status === 401) throw e;
          return null;
        })]);
      if (l) addLateness(l);
      pollJobs();
      renderCluster(c);
      pollTopics();
      renderChart();
      await pollLoad();
      $("error").hidden = true;
      setStatus(true, "updated " + fmtTime(c.at).slice(11, 19));
    } catch (e) {
      if (!state.needToken) {
        $("error").textContent = "Cannot read the cluster: " + e.message;
        $("error").hidden = false;
      }
      setStatus(false, "not updated");
    }
    polling = false;
    if (!state.needToken) timer = setTimeout(poll, POLL_MS);
  }

  // ------------------------------------------------------------ bulk jobs
  // Shown to an admin token (or without tokens); another role's 403 hides
  // the card and stops asking.
  let jobsOff = false;

  function renderJobs(ans) {
    const tb = $("jobs").tBodies[0];
    tb.replaceChildren();
    for (const j of ans.jobs.slice(0, 10)) {
      const pct = j.total > 0 ? Math.min(100, Math.round(100 * j.scanned / j.total))
        : (j.done ? 100 : 0);
      tb.append(el("tr", {},
        el("td", { class: "num" }, String(j.job)),
        el("td", {}, j.action),
        el("td", {}, j.who),
        el("td", {}, j.done ? j.state : el("progress", { max: "100", value: String(pct) }),
          j.done ? (j.cancelled_by ? " by " + j.cancelled_by : "") : " " + pct + "%"),
        el("td", { class: "num" }, String(j.changed)),
        el("td", { class: "num" }, String(j.firing)),
        el("td", { class: "num" }, String(j.skipped)),
        el("td", {}, j.done ? "" : el("button", { type: "button", class: "danger",
          "data-job": String(j.job) }, "Stop"))));
    }
    $("jobs-card").hidden = ans.jobs.length === 0;
  }

  $("jobs").addEventListener("click", async (ev) => {
    const b = ev.target.closest("button[data-job]");
    if (!b) return;
    const id = b.getAttribute("data-job");
    if (!window.confirm("Stop bulk job " + id + "? What it changed so far stays changed.")) return;
    try {
      const j = await api("POST", "/v1/admin/jobs/" + encodeURIComponent(id) + "/cancel");
      $("jobs-msg").textContent = "Job " + id + " stopped: " + j.changed + " tasks changed.";
      $("jobs-msg").className = "done";
    } catch (e) {
      $("jobs-msg").textContent = "Job " + id + ": " + e.message;
      $("jobs-msg").className = "error";
    }
    pollJobs();
  });

  async function pollJobs() {
    if (jobsOff || state.needToken) return;
    try {
      renderJobs(await api("GET", "/v1/admin/jobs"));
    } catch (e) {
      if (e.status === 403 || e.status === 404) {
        jobsOff = true;
        $("jobs-card").hidden = true;
      }
    }
  }

  // ------------------------------------------------------------ topics
  function topicMsg(text, cls) {
    $("topic-msg").textContent = text;
    $("topic-msg").className = cls || "muted";
  }

  async function topicAction(topic, what) {
    const path = "/v1/topics/" + encodeURIComponent(topic) + "/" +
      (what === "pause" ? "pause" : "resume");
    let body = {};
    if (what === "fire") {
      body = { policy: "fire" };
      const rate = parseInt($("topic-rate").value, 10);
      if (rate > 0) body.rate = rate;
    } else if (what === "skip") {
      if (!window.confirm("Expire every task of " + topic +
        " that fell due while it was paused?")) return;
      body = { policy: "skip" };
    }
    try {
      const a = await api("POST", path, body);
      topicMsg(what === "pause" ? topic + " paused."
        : what === "skip" ? topic + " resumed: " + a.skipped + " tasks expired."
          : topic + " resumed: " + a.backlog + " overdue tasks fire" +
            (a.rate ? " at " + a.rate + "/s." : " now."), "done");
    } catch (e) {
      topicMsg(topic + ": " + e.message, "error");
    }
    pollTopics();
  }

  function renderTopics(ans) {
    const rows = (ans.topics || []).map((t) => {
      const acts = t.paused
        ? [el("button", { type: "button", "data-t": t.topic, "data-a": "fire" }, "Resume"),
          el("button", { type: "button", class: "danger", "data-t": t.topic, "data-a": "skip" }, "Skip")]
        : [el("button", { type: "button", class: "ghost", "data-t": t.topic, "data-a": "pause" }, "Pause")];
      return el("tr", {},
        el("td", { class: "mono" }, t.topic),
        el("td", {}, t.paused ? "paused " + fmtRel(t.paused_since) : "active"),
        el("td", { class: "num" }, t.pending), el("td", { class: "num" }, t.overdue),
        el("td", {}, t.next_due_at ? fmtRel(t.next_due_at) : "-"),
        el("td", { class: "num" }, t.fired_last_minute), el("td", {}, acts));
    });
    $("topics").tBodies[0].replaceChildren(...rows);
  }

  async function pollTopics() {
    try {
      renderTopics(await api("GET", "/v1/topics"));
    } catch (e) {
      if (e.status !== 401) topicMsg("Cannot read the topics: " + e.message, "error");
    }
  }

  $("topics").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-t]");
    if (b) topicAction(b.getAttribute("data-t"), b.getAttribute("data-a"));
  });

  $("topic-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("topic-name").value.trim();
    if (t) topicAction(t, "pause");
  });

  // -------------------------------------------------------------- task
  let current = null;

  function taskMsg(text, cls) {
    $("task-msg").textContent = text;
    $("task-msg").className = cls || "muted";
  }

  function renderTask(t) {
    current = t;
    $("task").hidden = false;
    $("task-title").textContent = t.id;
    $("task-status").textContent = t.status;
    $("task-status").className = "badge " + t.status;
    $("task-cancel").disabled = t.status !== "scheduled";
    const f = [
      ["topic", t.topic], ["due", fmtTime(t.due_at) + " (" + fmtRel(t.due_at) + ")"],
      ["slot", t.slot], ["owner", t.owner || "-"],
      ["epoch", t.epoch], ["attempt", t.attempt],
      ["created", fmtTime(t.created_at)], ["updated", fmtTime(t.updated_at)],
      ["fired", fmtTime(t.fired_at)], ["delivered", fmtTime(t.delivered_at)],
      ["key", t.key || "(id)"], ["callback", t.callback_status],
    ];
    if (t.ttl_ms) f.push(["ttl", fmtMs(t.ttl_ms)]);
    if (t.max_attempts) f.push(["max attempts", t.max_attempts]);
    $("task-fields").replaceChildren(...f.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const body = t.body || "";
    $("task-body").textContent = body.length > 2000 ? body.slice(0, 2000) + "…" : body;
    const rows = (t.log || []).map((e) => el("tr", {},
      el("td", {}, fmtTime(e.at)), el("td", {}, (e.from || "-") + " → " + e.to),
      el("td", { class: "mono" }, e.actor), el("td", { class: "num" }, e.epoch),
      el("td", { class: "num" }, e.attempt), el("td", {}, e.note || "")));
    $("task-log").tBodies[0].replaceChildren(...rows);
    $("task-log").hidden = rows.length === 0;
  }

  async function lookup(id, keepMsg) {
    if (!keepMsg) taskMsg("looking up " + id + "…");
    try {
      renderTask(await api("GET", "/v1/tasks/" + encodeURIComponent(id) + "?log=1"));
      if (!keepMsg) taskMsg("");
      history.replaceState(null, "", "#task=" + encodeURIComponent(id));
    } catch (e) {
      current = null;
      $("task").hidden = true;
      taskMsg(e.status === 404 ? "No task '" + id + "'." : e.message, "error");
    }
  }

  $("task-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("task-id").value.trim();
    if (id) lookup(id);
  });

  $("task-cancel").addEventListener("click", () => {
    if (!current) return;
    $("confirm-id").textContent = current.id;
    $("confirm").returnValue = "";
    $("confirm").showModal();
  });

  $("confirm").addEventListener("close", async () => {
    if ($("confirm").returnValue !== "cancel" || !current) return;
    const id = current.id;
    $("task-cancel").disabled = true;
    try {
      await api("DELETE", "/v1/tasks/" + encodeURIComponent(id));
      taskMsg("Cancelled: " + id + " will never be published.", "done");
    } catch (e) {
      taskMsg("Not cancelled: " + e.message, "error");
    }
    await lookup(id, true);
  });

  // -------------------------------------------------------------- start
  window.addEventListener("resize", renderChart);
  const m = /^#task=(.+)$/.exec(location.hash);
  if (m) {
    $("task-id").value = decodeURIComponent(m[1]);
    lookup($("task-id").value);
  }
  poll();
}());
