// Live updates by short polling: the server renders the page's live region (escaped by its templates)
// and this swaps it in. It never builds markup from data itself. A region holding an element marked
// data-live-final (a finished job's page) has nothing left to change, and polling stops.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live) { return; }
  var every = parseInt(live.getAttribute("data-live-ms"), 10) || 2000;
  var busy = false;
  var timer = null;
  // The browser re-serialises markup, so compare with the last text received, not with innerHTML.
  var last = null;

  function userIsWorkingInside() {
    if (live.contains(document.activeElement) && document.activeElement !== live) { return true; }
    var fields = live.querySelectorAll("input:not([type=hidden]), select, textarea");
    for (var i = 0; i < fields.length; i++) { if (fields[i].value) { return true; } }
    // Text selected in the region (a log line being copied) would be lost by a swap.
    var selection = window.getSelection ? window.getSelection() : null;
    if (selection && !selection.isCollapsed && selection.rangeCount > 0 &&
        live.contains(selection.getRangeAt(0).commonAncestorContainer)) { return true; }
    return false;
  }

  function finished() {
    return live.querySelector("[data-live-final]") !== null;
  }

  function url() {
    var u = new URL(window.location.href);
    u.searchParams.set("partial", "live");
    return u.toString();
  }

  // The same clock the server prints every time in: UTC, never the browser's locale or zone.
  function utcTime(date) {
    return date.toISOString().slice(11, 19) + " UTC";
  }

  function stamp(text) {
    if (status) { status.textContent = text; }
  }

  function stop() {
    if (timer !== null) { window.clearInterval(timer); timer = null; }
    if (status) { status.textContent += "; the job has finished: live updates stopped"; }
  }

  function tick() {
    if (timer === null || busy || document.hidden || userIsWorkingInside()) { return; }
    busy = true;
    fetch(url(), { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        if (html !== last) { live.innerHTML = html; }
        last = html;
        stamp("Updated " + utcTime(new Date()));
        if (finished()) { stop(); }
      })
      .catch(function (error) { stamp("Live updates paused: " + error.message); })
      .then(function () { busy = false; });
  }

  if (finished()) { stop(); return; }
  timer = window.setInterval(tick, every);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
})();
