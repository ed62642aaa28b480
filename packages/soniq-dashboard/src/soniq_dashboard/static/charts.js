// The charts page: polls its JSON (`/charts/data`) and draws each series with uPlot, served from this
// package (static/vendor/uplot, fetched at build time). Times are epoch seconds, shown in UTC like every
// time on the dashboard. Labels reach the page as text only: uPlot writes them with textContent.
(function () {
  "use strict";
  var root = document.getElementById("charts");
  var status = document.getElementById("charts-status");
  if (!root || typeof window.uPlot !== "function") { return; }
  var uPlot = window.uPlot;
  var src = root.getAttribute("data-src");
  var every = Math.max(parseInt(root.getAttribute("data-every-ms"), 10) || 2000, 2000);
  var HEIGHT = 220;
  var QUEUE_COLOURS = ["#3b73d9", "#d9620f", "#2b9348", "#a347c2", "#c99a00", "#0f95a8", "#d6336c", "#6b8f1a",
    "#7a7f8a", "#6f4ad8"];
  var charts = {};
  var busy = false;

  function cssVar(name, fallback) {
    var value = window.getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function translucent(colour, alpha) {
    var hex = /^#([0-9a-f]{6})$/i.exec(colour);
    if (!hex) { return colour; }
    var n = parseInt(hex[1], 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function utc(ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); }

  var clock = uPlot.fmtDate("{HH}:{mm}");
  var clockSeconds = uPlot.fmtDate("{HH}:{mm}:{ss}");
  var day = uPlot.fmtDate("{MMM} {D}");
  var full = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}");
  // Counts are whole numbers: no 0.5 ticks.
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7];

  // 24-hour UTC ticks like every time on the dashboard; a midnight tick says the day instead.
  function timeTicks(u, splits, axis, space, incr) {
    return splits.map(function (ts) {
      var at = utc(ts);
      if (incr < 60) { return clockSeconds(at); }
      return at.getHours() === 0 && at.getMinutes() === 0 && incr >= 3600 ? day(at) : clock(at);
    });
  }

  function axes() {
    var text = cssVar("--muted", "#5b6170");
    var line = cssVar("--line", "#d9dbe1");
    var grid = { stroke: line, width: 1 };
    return [
      { stroke: text, grid: grid, ticks: grid, values: timeTicks, space: 70 },
      { stroke: text, grid: grid, ticks: grid, size: 48, incrs: WHOLE }
    ];
  }

  function fromZero(u, min, max) { return [0, Math.max(1, Math.ceil(max * 1.1))]; }

  function widthOf(el) { return Math.max(200, Math.floor(el.getBoundingClientRect().width)); }

  function bars(label, colour) {
    // No outline: an empty minute draws nothing rather than a box on the axis.
    return { label: label, stroke: colour, fill: translucent(colour, 0.7), width: 0,
      paths: uPlot.paths.bars({ size: [0.85, 40] }), points: { show: false } };
  }

  function line(label, colour) {
    return { label: label, stroke: colour, width: 2, spanGaps: false, points: { show: false } };
  }

  // Draw `data` on the plot named `name`; a new set of series (a queue appears) makes the plot anew.
  function draw(name, series, data) {
    var el = root.querySelector('[data-chart="' + name + '"]');
    if (!el) { return; }
    var key = series.map(function (s) { return s.label; }).join("\n");
    var current = charts[name];
    if (current && current.key === key) {
      current.plot.setData(data);
      return;
    }
    if (current) { current.plot.destroy(); }
    var options = {
      width: widthOf(el),
      height: HEIGHT,
      tzDate: utc,
      scales: { x: { time: true }, y: { range: fromZero } },
      axes: axes(),
      series: [{ label: "time (UTC)", value: function (u, ts) { return ts == null ? "--" : full(utc(ts)); } }]
        .concat(series),
      legend: { live: true },
      cursor: { drag: { x: false, y: false } }
    };
    charts[name] = { key: key, el: el, plot: new uPlot(options, data, el) };
  }

  function activity(prefix, window) {
    draw(prefix + "-done", [bars("done", cssVar("--ok", "#17683a"))], [window.t, window.done]);
    var failures = [bars("dead-lettered", cssVar("--bad", "#a4161a"))];
    var data = [window.t, window.dead_lettered];
    if (window.failed) {
      failures.push(bars("failed runs (retried)", cssVar("--warn", "#7a4b00")));
      data.push(window.failed);
    }
    draw(prefix + "-failures", failures, data);
  }

  function depth(history) {
    var names = Object.keys(history.queues).sort();
    var series = [];
    var data = [history.t];
    names.forEach(function (queue, i) {
      series.push(line(queue, QUEUE_COLOURS[i % QUEUE_COLOURS.length]));
      data.push(history.queues[queue]);
    });
    if (!names.length) {
      // Nothing queued since the dashboard started: a flat zero line keeps the time axis readable.
      series.push(line("no queued rows", cssVar("--muted", "#5b6170")));
      data.push(history.t.map(function () { return 0; }));
    }
    var more = document.getElementById("depth-more");
    if (more) {
      more.textContent = history.more_queues ? " (" + history.more_queues + " shallower not drawn)" : "";
    }
    draw("depth", series, data);
  }

  function say(text) { if (status) { status.textContent = text; } }

  function render(body) {
    activity("hour", body.activity.hour);
    activity("day", body.activity.day);
    depth(body.depth);
    root.setAttribute("data-drawn", body.as_of);
    say("Charts updated " + new Date().toISOString().slice(11, 19) + " UTC, from counts as of " +
      body.as_of.slice(11, 19) + " UTC.");
  }

  function tick() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(src, { headers: { "Accept": "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(render)
      .catch(function (error) { say("Chart updates paused: " + error.message); })
      .then(function () { busy = false; });
  }

  window.addEventListener("resize", function () {
    Object.keys(charts).forEach(function (name) {
      var chart = charts[name];
      chart.plot.setSize({ width: widthOf(chart.el), height: HEIGHT });
    });
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
  tick();
  window.setInterval(tick, every);
})();
