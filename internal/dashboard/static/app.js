// pgflow dashboard: keeps the #live section current. The server streams events (EventSource reconnects by
// itself); on every event, and whenever the stream (re)opens, the section is re-fetched as server-rendered HTML.
(function () {
  "use strict";
  var root = document.documentElement;
  var live = document.getElementById("live");
  var indicator = document.getElementById("live-state");
  function setState(s, text) {
    root.setAttribute("data-live", s);
    if (indicator) { indicator.className = "live-state live-" + s; indicator.textContent = text; }
  }
  if (!live) { return; }
  var events = live.getAttribute("data-events");
  var fragment = live.getAttribute("data-fragment");
  if (!events || !fragment || !window.EventSource || !window.fetch) { setState("off", ""); return; }

  var busy = false, again = false, refreshes = 0;

  // swap replaces the section's content, keeping which <details> were open.
  function swap(html) {
    var open = {};
    live.querySelectorAll("details[data-key]").forEach(function (d) { open[d.getAttribute("data-key")] = d.open; });
    live.innerHTML = html;
    live.querySelectorAll("details[data-key]").forEach(function (d) {
      var k = d.getAttribute("data-key");
      if (Object.prototype.hasOwnProperty.call(open, k)) { d.open = open[k]; }
    });
    refreshes++;
    root.setAttribute("data-refreshes", String(refreshes));
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(fragment, { credentials: "same-origin", headers: { "Accept": "text/html" }, cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(swap)
      .catch(function () { setState("error", "update failed"); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var source = new EventSource(events, { withCredentials: true });
  source.addEventListener("open", function () { setState("connected", "live"); refresh(); });
  source.addEventListener("resync", refresh);
  source.addEventListener("change", refresh);
  source.addEventListener("error", function () { setState("reconnecting", "reconnecting…"); });
  setState("connecting", "connecting…");
})();
