// The supervisor's dashboard: one frame a second from /events (server-sent events), drawn
// on canvases by hand, so that the page needs nothing but the supervisor (no CDN, no
// library). Text goes in through textContent only: worker notes and file names are data.
"use strict";

(function () {
  const WINDOW_S = 120; // what the charts show: the server's backlog, two minutes
  const WORKER_COLORS = ["#4fc3f7", "#ffb74d", "#81c784", "#f06292", "#ba68c8", "#fff176", "#4db6ac", "#e57373"];
  const VERDICTS = {cpu: "CPU", nic: "NIC", generator: "load generator", fd: "descriptors", sqlite: "SQLite lock", unclear: "unclear"};
  const PLOT_EVERY_MS = 8000; // a demonstration's plots take turns, each big enough to read

  const frames = []; // oldest first, at most WINDOW_S + a few
  // State a test (or a curious viewer, in the console) can read: frames received, charts
  // drawn, and the points the last drawing put on them.
  const state = {frames: 0, draws: 0, points: 0, lastT: 0, totalRPS: 0, connected: false, plots: 0};
  let lastSeen = 0; // this browser's clock when the last frame came (the server's may differ)
  window.dashboard = state;

  const $ = (id) => document.getElementById(id);
  const text = (id, s) => { $(id).textContent = s; };

  function workerColor(id) { return WORKER_COLORS[id % WORKER_COLORS.length]; }

  function fmtCount(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return Math.round(v / 1e3) + "k";
    if (v >= 10) return Math.round(v).toLocaleString("en-US");
    return v === 0 ? "0" : v.toFixed(1);
  }
  function fmtBytes(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(1) + " GB";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + " MB";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + " kB";
    return Math.round(v) + " B";
  }
  function fmtMem(v) {
    if (v >= 1 << 30) return (v / (1 << 30)).toFixed(1) + "G";
    if (v >= 1 << 20) return Math.round(v / (1 << 20)) + "M";
    return Math.round(v / 1024) + "k";
  }
  // niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // sizeCanvas matches the canvas's pixels to its box, for sharp lines on any screen.
  function sizeCanvas(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(c.clientWidth * dpr)), h = Math.max(1, Math.round(c.clientHeight * dpr));
    if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
    return dpr;
  }

  // lineChart draws series ({color, width, values: [[t, v], ...], fill}) against time,
  // the last WINDOW_S seconds up to now, on a scale from 0 to max (or the data's top).
  // It returns the number of points it drew.
  function lineChart(c, series, opts) {
    const dpr = sizeCanvas(c);
    const g = c.getContext("2d");
    const W = c.width, H = c.height;
    g.clearRect(0, 0, W, H);
    const font = Math.round(parseFloat(getComputedStyle(document.documentElement).fontSize) * 0.8 * dpr);
    g.font = font + "px " + getComputedStyle(document.body).fontFamily;
    let top = opts.max || 0;
    if (!opts.max) for (const s of series) for (const p of s.values) top = Math.max(top, p[1]);
    top = opts.max || niceMax(top * 1.1);
    const left = Math.max(...[0, 0.5, 1].map((f) => g.measureText(opts.fmt(top * f) + "  ").width));
    const bottom = font * 1.4, pad = font * 0.6;
    const x0 = left, x1 = W - pad, y0 = H - bottom, y1 = pad;
    const now = opts.now;
    const X = (t) => x0 + (x1 - x0) * (1 - (now - t) / (WINDOW_S * 1000));
    const Y = (v) => y0 - (y0 - y1) * Math.min(Math.max(v / top, 0), 1);
    // Grid: 0, half and top, labelled; the time axis at its ends.
    g.strokeStyle = "#273140"; g.lineWidth = dpr; g.fillStyle = "#9fb0c3";
    g.textBaseline = "middle"; g.textAlign = "right";
    for (const f of [0, 0.5, 1]) {
      const y = Math.round(Y(top * f)) + 0.5;
      g.beginPath(); g.moveTo(x0, y); g.lineTo(x1, y); g.stroke();
      g.fillText(opts.fmt(top * f), x0 - font * 0.4, y);
    }
    g.textBaseline = "alphabetic";
    g.textAlign = "left"; g.fillText("−" + WINDOW_S / 60 + " min", x0, H - font * 0.2);
    g.textAlign = "right"; g.fillText("now", x1, H - font * 0.2);
    let points = 0;
    g.save();
    g.beginPath(); g.rect(x0, 0, x1 - x0, H); g.clip();
    for (const s of series) {
      g.strokeStyle = s.color; g.lineWidth = (s.width || 3) * dpr; g.lineJoin = "round";
      g.beginPath();
      let prev = null, first = null, last = null;
      for (const [t, v] of s.values) {
        if (v == null) { prev = null; continue; }
        const x = X(t), y = Y(v);
        if (prev == null || t - prev > 2500) g.moveTo(x, y); else g.lineTo(x, y); // a gap is not a line
        if (first == null) first = [x, y];
        last = [x, y]; prev = t; points++;
      }
      g.stroke();
      if (s.fill && first && last) {
        g.lineTo(last[0], y0); g.lineTo(first[0], y0); g.closePath();
        g.globalAlpha = 0.18; g.fillStyle = s.color; g.fill(); g.globalAlpha = 1;
      }
    }
    g.restore();
    return points;
  }

  // barChart draws the cores' busy share now, one bar each.
  function barChart(c, cores) {
    const dpr = sizeCanvas(c);
    const g = c.getContext("2d");
    const W = c.width, H = c.height;
    g.clearRect(0, 0, W, H);
    if (!cores.length) return 0;
    const font = Math.round(parseFloat(getComputedStyle(document.documentElement).fontSize) * 0.7 * dpr);
    g.font = font + "px " + getComputedStyle(document.body).fontFamily;
    const bottom = font * 1.4, gap = Math.max(1, Math.min(4 * dpr, W / cores.length / 5));
    const bw = (W - gap * (cores.length - 1)) / cores.length;
    cores.forEach((core, i) => {
      const h = (H - bottom) * Math.min(Math.max(core.busy / 100, 0), 1);
      g.fillStyle = "#273140"; g.fillRect(i * (bw + gap), 0, bw, H - bottom);
      g.fillStyle = core.busy > 90 ? "#ff5370" : core.busy > 60 ? "#ffca28" : "#3ddc84";
      g.fillRect(i * (bw + gap), H - bottom - h, bw, h);
    });
    g.fillStyle = "#9fb0c3"; g.textAlign = "center"; g.textBaseline = "alphabetic";
    if (cores.length <= 16) cores.forEach((core, i) => g.fillText(String(core.cpu), i * (bw + gap) + bw / 2, H - font * 0.25));
    else { g.textAlign = "left"; g.fillText(cores.length + " cores", 0, H - font * 0.25); }
    return cores.length;
  }

  // A worker's name: its slot, after its app's name when the configuration names apps
  // (slots of several apps share numbers); its colour follows its place in the list.
  function workerKey(w) { return (w.app ? w.app + "/" : "") + w.id; }

  function draw() {
    if (!frames.length) return;
    const now = frames[frames.length - 1].t;
    const keys = frames[frames.length - 1].workers.map(workerKey);
    const ids = keys;
    const rps = keys.map((k, i) => ({color: workerColor(i), width: 3,
      values: frames.map((f) => { const w = f.workers.find((x) => workerKey(x) === k); return [f.t, w ? w.rps : null]; })}));
    if (ids.length > 1) rps.unshift({color: "#ffffff", width: 2, values: frames.map((f) => [f.t, f.workers.reduce((a, w) => a + w.rps, 0)])});
    let points = lineChart($("chart-rps"), rps, {now, fmt: fmtCount});

    const withHost = frames.filter((f) => f.host);
    const cores = (withHost.length ? withHost[withHost.length - 1].host.cpus : []).map((c) => c.cpu);
    const cpu = cores.map((id) => ({color: "#6e7b8b", width: 1,
      values: withHost.map((f) => { const c = f.host.cpus.find((x) => x.cpu === id); return [f.t, c ? c.busy : null]; })}));
    cpu.push({color: "#ffffff", width: 3, fill: true, values: withHost.map((f) => [f.t, avgBusy(f.host)])});
    points += lineChart($("chart-cpu"), cpu, {now, max: 100, fmt: (v) => Math.round(v) + "%"});
    points += barChart($("chart-cores"), withHost.length ? withHost[withHost.length - 1].host.cpus : []);

    points += lineChart($("chart-net"), [
      // In is drawn wider, under out: on loopback the two are the same line.
      {color: "#4fc3f7", width: 7, values: withHost.map((f) => [f.t, f.host.rx])},
      {color: "#ffb74d", width: 3, values: withHost.map((f) => [f.t, f.host.tx])},
    ], {now, fmt: (v) => fmtBytes(v)});
    state.points = points;
    state.draws++;
  }

  function avgBusy(h) {
    if (!h.cpus.length) return 0;
    return h.cpus.reduce((a, c) => a + c.busy, 0) / h.cpus.length;
  }

  function cell(tr, s, cls) {
    const td = document.createElement("td");
    td.textContent = s;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function showFrame(f) {
    text("addr", "serving " + (f.addr || "–"));
    text("steering", f.steering ? "steering " + f.steering : "");
    text("clock", new Date(f.t).toLocaleTimeString("en-GB"));
    const total = f.workers.reduce((a, w) => a + w.rps, 0);
    state.totalRPS = total;
    text("kpi-rps", fmtCount(total));
    text("kpi-workers", f.workers.filter((w) => w.status === "online").length + " / " + f.workers.length);
    text("kpi-cpu", f.host ? Math.round(avgBusy(f.host)) + "%" : "…");
    text("kpi-net", f.host ? "↓" + fmtBytes(f.host.rx) + "/s ↑" + fmtBytes(f.host.tx) + "/s" : "…");

    const body = $("workers").tBodies[0];
    const rows = [];
    const legend = $("legend-rps");
    const items = [];
    if (f.workers.length > 1) items.push(["#ffffff", "all"]);
    for (const [i, w] of f.workers.entries()) {
      const tr = document.createElement("tr");
      const slot = cell(tr, workerKey(w));
      slot.style.color = workerColor(i); // CSSOM, which the page's CSP allows
      cell(tr, w.status, w.status === "online" ? "status-online" : w.status === "errored" ? "status-errored" : "status-other");
      const live = w.pid !== 0;
      cell(tr, w.no_counters ? "–" : fmtCount(w.rps), "num"); // a program without our ipc counts nothing
      cell(tr, live ? w.cpu.toFixed(0) + "%" : "–", "num");
      cell(tr, live ? fmtMem(w.rss) : "–", "num");
      cell(tr, live && !w.no_counters ? String(w.conns) : "–", "num");
      cell(tr, w.health || "–", w.health === "unhealthy" ? "health-unhealthy" : "");
      cell(tr, String(w.restarts), "num");
      if (w.health_error) tr.title = w.health_error;
      rows.push(tr);
      items.push([workerColor(i), "slot " + workerKey(w)]);
    }
    body.replaceChildren(...rows);
    legend.replaceChildren(...items.map(([c, s]) => {
      const span = document.createElement("span");
      const i = document.createElement("i");
      i.style.setProperty("--c", c);
      span.append(i, s);
      return span;
    }));
    const err = $("err");
    err.hidden = !f.err;
    err.textContent = f.err || "";
    showCeiling(f.ceiling);
  }

  let plotURLs = [], plotIndex = 0, plotTimer = null;

  // A fleet's run names its balancer and its hosts H (N workers each).
  function runName(r) {
    if (r.hosts) return r.workload + " · " + r.balancer + " · H=" + r.hosts + " × N=" + r.n;
    return r.workload + " · " + r.mode + " · N=" + r.n;
  }

  function showCeiling(c) {
    const panel = $("ceiling");
    panel.hidden = !c;
    if (!c) return;
    const st = $("ceiling-state");
    st.textContent = c.state;
    text("ceiling-kind", c.kind || "sweep");
    state.ceilingKind = c.kind || "sweep";
    st.className = "badge " + ({running: "ok", interrupted: "bad", unreadable: "bad"}[c.state] || "");
    const empty = $("ceiling-empty");
    empty.hidden = !(c.state === "none" && !c.plots.length) && !c.error;
    empty.textContent = c.error ? c.error : (c.fill || "no sweep in " + c.dir + " yet: make ceiling");

    const cur = c.current;
    $("ceiling-current").hidden = !cur;
    if (cur) {
      text("cur-name", runName(cur) + (cur.purpose && cur.purpose !== "sweep" && cur.purpose !== "fleet" ? " (" + cur.purpose + ")" : ""));
      const frac = cur.expected_s ? Math.min(cur.elapsed_s / cur.expected_s, 1) : 0;
      $("cur-bar").style.width = (frac * 100).toFixed(1) + "%";
      text("cur-time", "measuring: " + (cur.elapsed_s || 0).toFixed(0) + " s" + (cur.expected_s ? " of " + cur.expected_s.toFixed(0) + " s" : "") +
        " · " + c.runs_done + (c.runs_done === 1 ? " run" : " runs") + " done");
    }
    const last = c.last;
    $("ceiling-last").hidden = !last;
    if (last) {
      text("last-name", runName(last));
      text("last-rps", last.skipped ? "skipped" : fmtCount(last.rps || 0));
      text("last-cpu", last.cpu_us_per_req ? last.cpu_us_per_req.toFixed(1) : "–");
      // A fleet's run behind HAProxy: the balancer's µs beside the servers', in the label
      // (a second big figure would widen the panel past the page's grid).
      text("last-cpu-label", last.balancer_cpu_us_per_req ?
        "servers' CPU µs / req · balancer " + last.balancer_cpu_us_per_req.toFixed(1) : "CPU µs / request");
      text("last-verdict", VERDICTS[last.verdict] || last.verdict || "–");
      $("last-rps").title = last.skipped || "";
    }
    const urls = c.plots.map((p) => p.url);
    if (urls.join("\n") !== plotURLs.join("\n")) {
      plotURLs = urls;
      plotIndex = 0;
      state.plots = urls.length;
      showPlot(c.plots);
      clearInterval(plotTimer);
      plotTimer = null;
      if (urls.length > 1) {
        const plots = c.plots;
        plotTimer = setInterval(() => { plotIndex = (plotIndex + 1) % plots.length; showPlot(plots); }, PLOT_EVERY_MS);
      }
    }
  }

  function showPlot(plots) {
    const fig = $("plot");
    fig.hidden = !plots.length;
    if (!plots.length) return;
    const p = plots[plotIndex % plots.length];
    $("plot-img").src = p.url;
    $("plot-img").alt = p.name;
    text("plot-name", "last " + (state.ceilingKind || "sweep") + ": " + p.name + "  (" + (plotIndex % plots.length + 1) + " of " + plots.length + ")");
  }

  function setConn(ok, why) {
    state.connected = ok;
    const b = $("conn");
    b.textContent = why;
    b.className = "badge " + (ok ? "ok" : "bad");
  }

  function connect() {
    const es = new EventSource("events");
    es.onopen = () => setConn(true, "live");
    // EventSource retries by itself (the server asks for 2 s); the badge says so meanwhile.
    es.onerror = () => setConn(false, es.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting");
    es.onmessage = (ev) => {
      const f = JSON.parse(ev.data);
      // After a reconnect the server sends its backlog again: keep only what is new.
      if (f.t <= state.lastT) return;
      state.lastT = f.t;
      lastSeen = Date.now();
      if (!state.connected) setConn(true, "live"); // back from stale
      state.frames++;
      frames.push(f);
      while (frames.length && frames[0].t < f.t - WINDOW_S * 1000) frames.shift();
      showFrame(f);
      draw();
    };
  }

  // A frame older than three seconds means the stream stalled without an error.
  setInterval(() => {
    if (state.connected && lastSeen && Date.now() - lastSeen > 3000) setConn(false, "stale");
  }, 1000);
  window.addEventListener("resize", draw);
  connect();
})();
