// Live updates by short polling: the server renders the page's live region (escaped by its templates)
// and this swaps it in. It never builds markup from data itself.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live) { return; }
  var every = parseInt(live.getAttribute("data-live-ms"), 10) || 2000;
  var busy = false;
  // The browser re-serialises markup, so compare with the last text received, not with innerHTML.
  var last = null;

  function userIsWorkingInside() {
    if (live.contains(document.activeElement) && document.activeElement !== live) { return true; }
    var fields = live.querySelectorAll("input:not([type=hidden]), select, textarea");
    for (var i = 0; i < fields.length; i++) { if (fields[i].value) { return true; } }
    return false;
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

  function tick() {
    if (busy || document.hidden || userIsWorkingInside()) { return; }
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
      })
      .catch(function (error) { stamp("Live updates paused: " + error.message); })
      .then(function () { busy = false; });
  }

  window.setInterval(tick, every);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
})();
